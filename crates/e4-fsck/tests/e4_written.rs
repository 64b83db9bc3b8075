//! Agreement with e2fsck on images written by e4's own write path (issue 9 §4): mke2fs makes
//! an empty filesystem in each feature profile, e4-fs fills it (files written, extended and
//! punched, directories grown into hash trees, hard links, symlinks, xattr blocks, renames,
//! unlinks), and `e2fsck -fn` and e4 fsck must then agree: clean as written, and on clean
//! versus errors and the set of problem classes after each targeted damage. These are the
//! structures e4 fsck exists to give a second opinion on: its parsers are e4-format's, but
//! the layouts (allocator placement, extent splits, htree splits) are e4-fs's, not mke2fs's.

mod common;

use std::fs;
use std::path::Path;

use e4_fs::{Creator, Error, FallocateMode, Filesystem, OpenOptions, RenameMode, XattrSet};
use e4_fsck::{check, Options, ProblemClass, ProblemCode};
use e4_testkit::{make_empty_image, Image, Profile, PROFILES};

use common::{
    assert_agreement, block_size, bmap, debugfs, inode_of, inode_offset, read_bytes, write_bytes,
};

const ROOT: u32 = 2;
const OWNER: Creator = Creator {
    permissions: 0o644,
    uid: 1000,
    gid: 1000,
};

/// An empty image of `profile` filled through e4-fs, unmounted cleanly.
fn e4_written_image(profile: &Profile) -> Image {
    let mut args = profile.mke2fs_args.to_vec();
    args.extend(["-N", "2048"]);
    let image = make_empty_image(&args, 16);
    let fs = Filesystem::open(&image.path, OpenOptions::writable())
        .unwrap_or_else(|e| panic!("{}: open for writing: {e}", profile.name));
    fill(&fs, profile.name);
    fs.unmount().unwrap();
    image
}

/// The tree the damages below expect, written the way an application would.
fn fill(fs: &Filesystem, profile: &str) {
    let bs = u64::from(fs.block_size());
    let file = |parent: u32, name: &str, data: &[u8]| -> u32 {
        let ino = fs.create(parent, name.as_bytes(), OWNER).unwrap();
        if !data.is_empty() {
            fs.write_at(ino, 0, data).unwrap();
        }
        ino
    };
    let small = file(ROOT, "small", b"hello");
    file(ROOT, "medium", &[7u8; 20 * 1024]);
    let other = file(ROOT, "other", &[9u8; 12 * 1024]);
    // A value too large for the inode goes to an xattr block.
    for ino in [small, other] {
        fs.set_xattr(ino, b"user.big", &[b'x'; 700], XattrSet::Either)
            .unwrap();
    }
    let sparse = file(ROOT, "sparse", &[1u8; 4096]);
    fs.write_at(sparse, 256 * 1024, &[2u8; 4096]).unwrap();
    let dir1 = fs.mkdir(ROOT, b"dir1", OWNER).unwrap();
    let sub = fs.mkdir(dir1, b"sub", OWNER).unwrap();
    let dir2 = fs.mkdir(ROOT, b"dir2", OWNER).unwrap();
    let a = file(dir1, "a", b"a");
    file(dir1, "b", b"b");
    file(dir1, "c", b"c");
    fs.link(a, dir2, b"a_link").unwrap();
    // Sixty-four blocks written, then every other one punched: 32 extents, more than the
    // inode holds, so the tree has a leaf block (block maps keep the written file).
    let fragmented = file(ROOT, "fragmented", &vec![3u8; 64 * bs as usize]);
    for b in (0..64).step_by(2) {
        match fs.fallocate(fragmented, FallocateMode::PunchHole, b * bs, bs) {
            Ok(()) | Err(Error::NotSupported(_)) => {}
            Err(e) => panic!("{profile}: punch block {b}: {e}"),
        }
    }
    let big = fs.mkdir(ROOT, b"big", OWNER).unwrap();
    for i in 0..400 {
        file(big, &format!("entry_with_a_longish_name_{i:04}"), b"");
    }
    fs.symlink(ROOT, b"short_link", b"small", OWNER).unwrap();
    fs.symlink(ROOT, b"long_link", "dir1/".repeat(60).as_bytes(), OWNER)
        .unwrap();
    // Frees and moves, so the bitmaps and counts are the write path's, not mke2fs's.
    let doomed = file(ROOT, "doomed", &[4u8; 40 * 1024]);
    fs.truncate(doomed, 4096).unwrap();
    fs.unlink(ROOT, b"doomed").unwrap();
    let moving = fs.mkdir(ROOT, b"moving", OWNER).unwrap();
    file(moving, "inside", b"inside");
    fs.rename(ROOT, b"moving", sub, b"moved", RenameMode::Replace)
        .unwrap();
    for i in 0..20 {
        file(dir2, &format!("gone{i}"), &[5u8; 3000]);
    }
    for i in (0..20).step_by(2) {
        fs.unlink(dir2, format!("gone{i}").as_bytes()).unwrap();
    }
}

fn features(image: &Path) -> String {
    let text = debugfs(image, "stats");
    text.lines()
        .find(|l| l.starts_with("Filesystem features:"))
        .unwrap_or_default()
        .to_string()
}

fn has_feature(image: &Path, feature: &str) -> bool {
    features(image).split_whitespace().any(|f| f == feature)
}

/// Whether `path`'s inode maps its blocks with an extent tree.
fn uses_extents(image: &Path, path: &str) -> bool {
    debugfs(image, &format!("stat {path}")).contains("EXTENTS:")
}

/// The physical block of `path`'s logical block `logical`, if it has one (an inline
/// directory has none).
fn block_of(image: &Path, path: &str, logical: u64) -> Option<u64> {
    debugfs(image, &format!("bmap {path} {logical}"))
        .trim()
        .parse()
        .ok()
        .filter(|&b| b != 0)
}

/// One damage: applies itself and returns true, or returns false where the profile lacks
/// the structure it damages.
type Damage = fn(&Path) -> bool;

/// Each damage, the class both checkers must then report, and the code e4 must report
/// where a class alone would not tell the specific check from another that finds the same
/// class (the htree leaf ranges also catch swapped index hashes, for one).
const DAMAGES: &[(&str, Damage, ProblemClass, Option<ProblemCode>)] = &[
    (
        "wrong link count",
        |img| {
            debugfs(img, "sif /dir1/b links_count 4");
            true
        },
        ProblemClass::LinkCount,
        Some(ProblemCode::PR_4_BAD_REF_COUNT),
    ),
    (
        "unreachable directory",
        |img| {
            debugfs(img, "unlink /dir2");
            true
        },
        ProblemClass::Connectivity,
        None,
    ),
    (
        "entry to a cleared inode",
        |img| {
            debugfs(img, "clri /dir1/c");
            true
        },
        ProblemClass::DirectoryEntry,
        None,
    ),
    (
        "wrong i_size",
        |img| {
            debugfs(img, "sif /medium size 5");
            true
        },
        ProblemClass::InodeSize,
        Some(ProblemCode::PR_1_BAD_I_SIZE),
    ),
    (
        "wrong i_blocks",
        |img| {
            debugfs(img, "sif /medium blocks 1000");
            true
        },
        ProblemClass::InodeBlocks,
        Some(ProblemCode::PR_1_BAD_I_BLOCKS),
    ),
    (
        "freed block bit",
        |img| {
            let block = bmap(img, "/medium", 2);
            debugfs(img, &format!("freeb {block}"));
            true
        },
        ProblemClass::BlockBitmap,
        None,
    ),
    (
        "freed inode bit",
        |img| {
            let ino = inode_of(img, "/dir1/a");
            debugfs(img, &format!("freei <{ino}>"));
            true
        },
        ProblemClass::InodeBitmap,
        None,
    ),
    (
        "wrong group free counts",
        |img| {
            debugfs(img, "set_bg 0 free_blocks_count 3");
            debugfs(img, "set_bg 0 free_inodes_count 3");
            true
        },
        ProblemClass::FreeCounts,
        None,
    ),
    (
        "bad extent start",
        |img| {
            if !uses_extents(img, "/medium") {
                return false;
            }
            // i_block words 3..5 are the first extent: logical, len/start_hi, start_lo.
            debugfs(img, "sif /medium block[5] 4000000");
            true
        },
        ProblemClass::ExtentTree,
        Some(ProblemCode::PR_1_EXTENT_BAD_START_BLK),
    ),
    (
        "overlapping extents",
        |img| {
            if !uses_extents(img, "/sparse") {
                return false;
            }
            // The second extent (words 6..8) given the first's logical start.
            debugfs(img, "sif /sparse block[6] 0");
            true
        },
        ProblemClass::ExtentTree,
        None,
    ),
    (
        "extent leaf checksum",
        |img| {
            if !has_feature(img, "metadata_csum") || !uses_extents(img, "/fragmented") {
                return false;
            }
            let text = debugfs(img, "ex /fragmented");
            // The line after the header is the root's index entry; its child is the
            // second-to-last field.
            let Some(line) = text.lines().nth(1) else {
                return false;
            };
            let fields: Vec<&str> = line.split_whitespace().collect();
            let Ok(leaf) = fields[fields.len() - 2].parse::<u64>() else {
                return false;
            };
            let bs = block_size(img);
            let max = u16::from_le_bytes(read_bytes(img, leaf * bs + 4, 2).try_into().unwrap());
            let at = leaf * bs + 12 + 12 * u64::from(max);
            let sum = read_bytes(img, at, 1);
            write_bytes(img, at, &[sum[0] ^ 0x5A]);
            true
        },
        ProblemClass::ExtentTree,
        Some(ProblemCode::PR_1_EXTENT_ONLY_CSUM_INVALID),
    ),
    (
        "block in two files",
        |img| {
            if uses_extents(img, "/other") {
                let theirs = bmap(img, "/medium", 0);
                debugfs(img, &format!("sif /other block[5] {theirs}"));
            } else {
                let theirs = bmap(img, "/medium", 3);
                debugfs(img, &format!("sif /other block[1] {theirs}"));
            }
            true
        },
        ProblemClass::MultiplyClaimed,
        None,
    ),
    (
        "bad rec_len",
        |img| {
            let Some(block) = block_of(img, "/dir1", 0) else {
                return false;
            };
            // The '.' entry's rec_len, too small to hold an entry.
            write_bytes(img, block * block_size(img) + 4, &5u16.to_le_bytes());
            true
        },
        ProblemClass::DirectoryBlock,
        None,
    ),
    (
        "duplicate names",
        |img| {
            let Some(block) = block_of(img, "/dir1", 0) else {
                return false;
            };
            let bs = block_size(img);
            let bytes = read_bytes(img, block * bs, bs as usize);
            // Entry 'b' (name_len 1, file type 1, or 0 without the filetype feature).
            let Some(at) = bytes
                .windows(3)
                .position(|w| w[0] == 1 && w[1] <= 1 && w[2] == b'b')
            else {
                return false;
            };
            write_bytes(img, block * bs + at as u64 + 2, b"a");
            true
        },
        ProblemClass::DirectoryEntry,
        Some(ProblemCode::PR_2_DUPLICATE_DIRENT),
    ),
    (
        "cleared ..",
        |img| {
            let Some(block) = block_of(img, "/dir1/sub", 0) else {
                return false;
            };
            // '..' is the second entry, at byte 12; its inode field first.
            write_bytes(img, block * block_size(img) + 12, &0u32.to_le_bytes());
            true
        },
        ProblemClass::DirectoryBlock,
        None,
    ),
    (
        "directory leaf checksum",
        |img| {
            let Some(block) = block_of(img, "/dir1", 0) else {
                return false;
            };
            if !has_feature(img, "metadata_csum") {
                return false;
            }
            let bs = block_size(img);
            let at = block * bs + bs - 4;
            let sum = read_bytes(img, at, 1);
            write_bytes(img, at, &[sum[0] ^ 0xFF]);
            true
        },
        ProblemClass::DirectoryBlock,
        None,
    ),
    (
        "htree hash out of order",
        |img| {
            if !debugfs(img, "htree /big").contains("Number of entries") {
                return false;
            }
            let block = bmap(img, "/big", 0);
            let bs = block_size(img);
            // dx_root entries start at 0x20 (limit, count, block 0); entry 1's hash at 0x28.
            let base = block * bs + 0x20;
            let count = u16::from_le_bytes(read_bytes(img, base + 2, 2).try_into().unwrap());
            if count < 3 {
                return false;
            }
            let first = read_bytes(img, base + 8, 4);
            let second = read_bytes(img, base + 16, 4);
            write_bytes(img, base + 8, &second);
            write_bytes(img, base + 16, &first);
            true
        },
        ProblemClass::Htree,
        Some(ProblemCode::PR_2_HTREE_HASH_ORDER),
    ),
    (
        "xattr block refcount",
        |img| {
            let text = debugfs(img, "stat /small");
            let Some(acl) = text.split("File ACL: ").nth(1) else {
                return false;
            };
            let block: u64 = acl.split_whitespace().next().unwrap().parse().unwrap();
            if block == 0 {
                return false;
            }
            write_bytes(img, block * block_size(img) + 4, &7u32.to_le_bytes());
            true
        },
        ProblemClass::Xattr,
        Some(ProblemCode::PR_1_EXTATTR_REFCOUNT),
    ),
    (
        "inode checksum",
        |img| {
            if !has_feature(img, "metadata_csum") {
                return false;
            }
            let at = inode_offset(img, inode_of(img, "/small")) + 0x7C;
            let sum = read_bytes(img, at, 2);
            write_bytes(img, at, &[sum[0] ^ 0xFF, sum[1]]);
            true
        },
        ProblemClass::Inode,
        Some(ProblemCode::PR_1_INODE_ONLY_CSUM_INVALID),
    ),
    (
        "unused inode's checksum",
        |img| {
            if !has_feature(img, "metadata_csum") {
                return false;
            }
            // /dir2/gone0 was unlinked after it was written: its record stays, unused.
            let ino = inode_of(img, "/dir2/gone1") - 1;
            if !debugfs(img, &format!("stat <{ino}>")).contains("Links: 0") {
                return false;
            }
            let at = inode_offset(img, ino) + 0x7C;
            let sum = read_bytes(img, at, 2);
            write_bytes(img, at, &[sum[0] ^ 0xFF, sum[1]]);
            true
        },
        ProblemClass::Inode,
        Some(ProblemCode::PR_1_INODE_ONLY_CSUM_INVALID),
    ),
    (
        "block bitmap checksum",
        |img| {
            if !has_feature(img, "metadata_csum") {
                return false;
            }
            debugfs(img, "set_bg 0 block_bitmap_csum 0x1234");
            true
        },
        ProblemClass::BitmapChecksum,
        Some(ProblemCode::PR_5_BLOCK_BITMAP_CSUM_INVALID),
    ),
    (
        "directory loop",
        |img| {
            // /dir1/sub gets an entry for /dir1, then /dir1 leaves the root.
            debugfs(img, "link /dir1 /dir1/sub/up");
            debugfs(img, "unlink /dir1");
            true
        },
        ProblemClass::Connectivity,
        Some(ProblemCode::PR_3_LOOPED_DIR),
    ),
    (
        "moved directory's entry cleared",
        |img| {
            // /dir1/sub/moved (renamed there by e4) loses its entry: unreachable.
            debugfs(img, "unlink /dir1/sub/moved");
            true
        },
        ProblemClass::Connectivity,
        None,
    ),
];

/// e4-written images of every profile are clean to both checkers, and e4 reports nothing.
#[test]
fn e4_written_images_of_every_profile_are_clean() {
    for profile in PROFILES {
        let image = e4_written_image(profile);
        let classes = assert_agreement(&image.path, profile.name);
        assert!(classes.is_empty(), "{}: {classes:?}", profile.name);
        let report = check(
            &image.path,
            &Options {
                force: true,
                ..Options::default()
            },
        )
        .unwrap();
        assert!(
            report.problems.is_empty(),
            "{}: {:?}",
            profile.name,
            report.problems
        );
    }
}

/// Every damage on the e4-written image of every profile where it applies.
#[test]
fn damaged_e4_written_images_agree_in_every_profile() {
    let mut applied = vec![Vec::new(); DAMAGES.len()];
    for profile in PROFILES {
        let image = e4_written_image(profile);
        let pristine = fs::read(&image.path).unwrap();
        for (k, &(name, damage, class, code)) in DAMAGES.iter().enumerate() {
            fs::write(&image.path, &pristine).unwrap();
            if !damage(&image.path) {
                continue;
            }
            applied[k].push(profile.name);
            let what = format!("e4-written {} / {name}", profile.name);
            let classes = assert_agreement(&image.path, &what);
            assert!(
                classes.contains(&class),
                "{what}: {class:?} not in {classes:?}"
            );
            if let Some(code) = code {
                let options = Options {
                    force: true,
                    ..Options::default()
                };
                let report = check(&image.path, &options).unwrap();
                assert!(
                    report.problems.iter().any(|p| p.code == code),
                    "{what}: {code} not reported: {:?}",
                    report.problems
                );
            }
        }
    }
    // The default 4 KiB profile has every structure: each damage must have run there.
    for (k, &(name, ..)) in DAMAGES.iter().enumerate() {
        assert!(
            applied[k].contains(&PROFILES[0].name),
            "{name} applied only to {:?}",
            applied[k]
        );
    }
}

/// Random bit flips in the metadata of an e4-written image (deep extent tree, hash tree,
/// xattr blocks placed by e4's allocator): e4 fsck neither panics nor hangs, and agrees with
/// e2fsck on clean, errors, or cannot check.
#[test]
fn random_flips_in_e4_written_metadata() {
    use rand::{Rng, SeedableRng};
    let image = e4_written_image(&PROFILES[0]);
    let pristine = fs::read(&image.path).unwrap();
    let bs = block_size(&image.path) as usize;
    // The first group's tables and every block debugfs lists for the tree's inodes
    // (extent nodes, directory blocks, xattr blocks, data).
    let mut hot: Vec<usize> = (0..64).collect();
    for path in ["/big", "/dir1", "/dir1/sub", "/fragmented", "/small", "/"] {
        let text = debugfs(&image.path, &format!("blocks {path}"));
        hot.extend(
            text.split_whitespace()
                .filter_map(|b| b.parse::<usize>().ok()),
        );
    }
    let mut rng = rand::rngs::StdRng::seed_from_u64(0xe4_0f11);
    let scratch = tempfile::tempdir().unwrap();
    let path = scratch.path().join("flipped.img");
    let mut damaged_rounds = 0;
    for round in 0..150 {
        let mut bytes = pristine.clone();
        for _ in 0..rng.gen_range(1..8) {
            let block = hot[rng.gen_range(0..hot.len())];
            let at = block * bs + rng.gen_range(0..bs);
            if (1024..bytes.len()).contains(&at) {
                bytes[at] ^= 1 << rng.gen_range(0..8);
            }
        }
        fs::write(&path, &bytes).unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let p = path.clone();
        std::thread::spawn(move || {
            let result = std::panic::catch_unwind(|| {
                let options = Options {
                    threads: Some(2),
                    force: true,
                    ..Options::default()
                };
                // An image that cannot be checked at all is exit 8, as e2fsck's.
                check(&p, &options).map_or(8, |report| report.exit_code())
            });
            let _ = tx.send(result.ok());
        });
        let ours = rx
            .recv_timeout(std::time::Duration::from_secs(60))
            .unwrap_or_else(|_| panic!("round {round}: hung"))
            .unwrap_or_else(|| panic!("round {round}: panicked"));
        let oracle = std::process::Command::new("e2fsck")
            .arg("-fn")
            .arg(&path)
            .output()
            .unwrap();
        // 0 clean, 4 errors (12: errors, then e2fsck stopped early), 8 cannot check.
        let verdict = |code: i32| match code {
            0 => "clean",
            8 => "cannot check",
            c if c & 4 != 0 => "errors",
            _ => "other",
        };
        let theirs = oracle.status.code().unwrap_or(-1);
        assert_eq!(
            verdict(i32::from(ours)),
            verdict(theirs),
            "round {round}: e4 exit {ours}, e2fsck exit {theirs}:\n{}",
            String::from_utf8_lossy(&oracle.stdout)
        );
        damaged_rounds += usize::from(ours != 0);
    }
    assert!(damaged_rounds >= 10, "only {damaged_rounds} rounds damaged");
}

/// Many small groups whose used parts of the inode table differ in length (e4 spreads the
/// directories over groups, each holding a different number of files): one thread scans
/// them in turn, a long piece before a shorter one, so a piece reading past its own end
/// (stale inodes from the buffer of an earlier piece) would show as problems here.
#[test]
fn groups_of_different_fill_are_clean_at_one_thread() {
    let image = make_empty_image(&["-t", "ext4", "-b", "1024", "-g", "1024", "-N", "512"], 16);
    let fs = Filesystem::open(&image.path, OpenOptions::writable()).unwrap();
    for d in 0..10u32 {
        let dir = fs.mkdir(ROOT, format!("d{d}").as_bytes(), OWNER).unwrap();
        for f in 0..d * 3 {
            let ino = fs.create(dir, format!("f{f}").as_bytes(), OWNER).unwrap();
            fs.write_at(ino, 0, b"x").unwrap();
        }
    }
    fs.unmount().unwrap();
    let classes = assert_agreement(&image.path, "groups of different fill");
    assert!(classes.is_empty(), "{classes:?}");
    let options = Options {
        threads: Some(1),
        force: true,
        ..Options::default()
    };
    let report = check(&image.path, &options).unwrap();
    assert!(report.problems.is_empty(), "{:?}", report.problems);
}

//! Agreement with e2fsck. Images are made at test time by mke2fs, damaged in targeted ways
//! with debugfs or by writing bytes, then checked by `e2fsck -fn` (the oracle) and by
//! e4-fsck. Both must agree on clean versus errors and on which classes of problem are
//! present: e2fsck's messages are mapped to [`ProblemClass`]es by the table in
//! `common/mod.rs`, e4's codes by `ProblemCode::class`.

mod common;

use std::fs;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use e4_format::journal::JournalSuperblock;
use e4_format::MetadataBlock;
use e4_fsck::{check, Options, ProblemClass, ProblemCode};
use e4_testkit::{make_image, Image, Profile, PROFILES};

use common::{
    assert_agreement, block_size, bmap, debugfs, forced_check, inode_of, inode_offset, read_bytes,
    write_bytes,
};

/// A small tree: files of several sizes, a sparse file, subdirectories, a directory large
/// enough to be indexed, and a hard link.
fn source_tree() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    fs::write(root.join("small"), b"hello").unwrap();
    fs::write(root.join("medium"), vec![7u8; 20 * 1024]).unwrap();
    fs::write(root.join("other"), vec![9u8; 12 * 1024]).unwrap();
    let sparse = fs::File::create(root.join("sparse")).unwrap();
    sparse.write_all_at(&[1u8; 4096], 0).unwrap();
    sparse.write_all_at(&[2u8; 4096], 256 * 1024).unwrap();
    fs::create_dir_all(root.join("dir1/sub")).unwrap();
    fs::create_dir_all(root.join("dir2")).unwrap();
    for name in ["a", "b", "c"] {
        fs::write(root.join("dir1").join(name), name.as_bytes()).unwrap();
    }
    fs::hard_link(root.join("dir1/a"), root.join("dir2/a_link")).unwrap();
    // Eight separate extents: more than i_block holds, so the tree has a leaf block.
    let fragmented = fs::File::create(root.join("fragmented")).unwrap();
    for i in 0..8u64 {
        fragmented
            .write_all_at(&[3u8; 4096], i * 64 * 1024)
            .unwrap();
    }
    // A value too large for the inode goes to an xattr block.
    xattr::set(root.join("small"), "user.big", &[b'x'; 700]).unwrap();
    xattr::set(root.join("other"), "user.big", &[b'x'; 700]).unwrap();
    fs::create_dir(root.join("big")).unwrap();
    for i in 0..400 {
        fs::write(
            root.join(format!("big/entry_with_a_longish_name_{i:04}")),
            b"",
        )
        .unwrap();
    }
    dir
}

const EXT4: Profile = Profile {
    name: "ext4-4k",
    mke2fs_args: &["-t", "ext4", "-b", "4096"],
    mke2fs_miscopies: &[],
};

fn fresh_image(profile: &Profile) -> (tempfile::TempDir, Image) {
    let source = source_tree();
    let image = make_image(source.path(), profile, 16, 2048);
    (source, image)
}

#[test]
fn clean_images_of_every_profile_report_nothing() {
    let source = source_tree();
    for profile in PROFILES {
        let image = make_image(source.path(), profile, 16, 2048);
        let classes = assert_agreement(&image.path, profile.name);
        assert!(classes.is_empty(), "{}: {classes:?}", profile.name);
        let report = forced_check(&image.path, None);
        assert!(
            report.problems.is_empty(),
            "{}: {:?}",
            profile.name,
            report.problems
        );
    }
}

/// One damage scenario: a name, what to do to a fresh image, and the classes e4 must find.
type Damage = fn(&Path);

fn run_scenario(name: &str, damage: Damage, expected: &[ProblemClass]) {
    run_scenario_on(&EXT4, name, damage, expected);
}

fn run_scenario_on(profile: &Profile, name: &str, damage: Damage, expected: &[ProblemClass]) {
    run_scenario_with_codes(profile, name, damage, expected, &[]);
}

/// As [`run_scenario_on`], and e4 must report each of `codes` (where a class alone would
/// not tell a specific check from a fallback that finds the same class).
fn run_scenario_with_codes(
    profile: &Profile,
    name: &str,
    damage: Damage,
    expected: &[ProblemClass],
    codes: &[ProblemCode],
) {
    let (_source, image) = fresh_image(profile);
    damage(&image.path);
    let classes = assert_agreement(&image.path, name);
    for class in expected {
        assert!(
            classes.contains(class),
            "{name}: {class:?} not found in {classes:?}"
        );
    }
    let report = forced_check(&image.path, Some(2));
    for code in codes {
        assert!(
            report.problems.iter().any(|p| p.code == *code),
            "{name}: {code} not reported: {:?}",
            report.problems
        );
    }
}

#[test]
fn wrong_i_size() {
    run_scenario(
        "wrong i_size",
        |img| {
            debugfs(img, "sif /medium size 100");
        },
        &[ProblemClass::InodeSize],
    );
}

#[test]
fn wrong_i_blocks() {
    run_scenario(
        "wrong i_blocks",
        |img| {
            debugfs(img, "sif /medium blocks 1000");
        },
        &[ProblemClass::InodeBlocks],
    );
}

#[test]
fn wrong_link_count() {
    run_scenario(
        "wrong link count",
        |img| {
            debugfs(img, "sif /dir1/b links_count 5");
        },
        &[ProblemClass::LinkCount],
    );
}

#[test]
fn bad_extent_start() {
    run_scenario(
        "bad extent start",
        |img| {
            // i_block words 3..5 are the first extent: logical, len/start_hi, start_lo.
            debugfs(img, "sif /medium block[5] 4000000");
        },
        &[ProblemClass::ExtentTree],
    );
}

#[test]
fn overlapping_extents() {
    run_scenario(
        "overlapping extents",
        |img| {
            // The sparse file has two extents; give the second the first's logical start.
            debugfs(img, "sif /sparse block[6] 0");
        },
        &[ProblemClass::ExtentTree],
    );
}

#[test]
fn block_in_two_files() {
    run_scenario(
        "block in two files",
        |img| {
            let theirs = bmap(img, "/medium", 0);
            debugfs(img, &format!("sif /other block[5] {theirs}"));
        },
        &[ProblemClass::MultiplyClaimed],
    );
}

#[test]
fn unreachable_directory() {
    run_scenario(
        "unreachable directory",
        |img| {
            debugfs(img, "unlink /dir2");
        },
        &[ProblemClass::Connectivity],
    );
}

#[test]
fn bad_rec_len() {
    run_scenario(
        "bad rec_len",
        |img| {
            let block = bmap(img, "/dir1", 0);
            let bs = block_size(img);
            // The '.' entry's rec_len, made too small to hold an entry.
            write_bytes(img, block * bs + 4, &5u16.to_le_bytes());
        },
        &[ProblemClass::DirectoryBlock],
    );
}

#[test]
fn duplicate_names() {
    run_scenario(
        "duplicate names",
        |img| {
            // Rename entry 'b' (name_len 1, file type 1) to 'a' in place.
            let block = bmap(img, "/dir1", 0);
            let bs = block_size(img);
            let bytes = read_bytes(img, block * bs, bs as usize);
            let at = bytes.windows(3).position(|w| w == [1, 1, b'b']).unwrap();
            write_bytes(img, block * bs + at as u64 + 2, b"a");
        },
        &[ProblemClass::DirectoryEntry],
    );
}

#[test]
fn wrong_group_free_counts() {
    run_scenario(
        "wrong free counts",
        |img| {
            debugfs(img, "set_bg 0 free_blocks_count 3");
            debugfs(img, "set_bg 0 free_inodes_count 3");
        },
        &[ProblemClass::FreeCounts],
    );
}

#[test]
fn flipped_block_bitmap_bit() {
    run_scenario(
        "flipped bitmap bit",
        |img| {
            let block = bmap(img, "/medium", 1);
            debugfs(img, &format!("freeb {block}"));
        },
        &[ProblemClass::BlockBitmap],
    );
}

#[test]
fn flipped_inode_bitmap_bit() {
    run_scenario(
        "flipped inode bitmap bit",
        |img| {
            let ino = inode_of(img, "/dir1/c");
            debugfs(img, &format!("freei <{ino}>"));
        },
        &[ProblemClass::InodeBitmap],
    );
}

#[test]
fn bad_inode_checksum() {
    run_scenario(
        "bad inode checksum",
        |img| {
            let ino = inode_of(img, "/small");
            let at = inode_offset(img, ino) + 0x7C;
            let sum = read_bytes(img, at, 2);
            write_bytes(img, at, &[sum[0] ^ 0xFF, sum[1]]);
        },
        &[ProblemClass::Inode],
    );
}

#[test]
fn bad_directory_block_checksum() {
    run_scenario(
        "bad directory checksum",
        |img| {
            let block = bmap(img, "/dir1", 0);
            let bs = block_size(img);
            let at = block * bs + bs - 4;
            let sum = read_bytes(img, at, 1);
            write_bytes(img, at, &[sum[0] ^ 0xFF]);
        },
        &[ProblemClass::DirectoryBlock],
    );
}

#[test]
fn bad_block_bitmap_checksum() {
    run_scenario(
        "bad bitmap checksum",
        |img| {
            debugfs(img, "set_bg 0 block_bitmap_csum 0x1234");
        },
        &[ProblemClass::BitmapChecksum],
    );
}

#[test]
fn cleared_dotdot() {
    run_scenario(
        "cleared ..",
        |img| {
            let block = bmap(img, "/dir1/sub", 0);
            let bs = block_size(img);
            // '..' is the second entry, at byte 12; its inode field first.
            write_bytes(img, block * bs + 12, &0u32.to_le_bytes());
        },
        &[ProblemClass::DirectoryBlock],
    );
}

#[test]
fn entry_to_unused_inode() {
    run_scenario(
        "entry to unused inode",
        |img| {
            debugfs(img, "clri /dir1/b");
        },
        &[ProblemClass::DirectoryEntry],
    );
}

#[test]
fn htree_hash_out_of_order() {
    run_scenario_with_codes(
        &EXT4,
        "htree hash out of order",
        |img| {
            let block = bmap(img, "/big", 0);
            let bs = block_size(img);
            // dx_root entries start at 0x20 (limit, count, block 0); entry 1's hash at 0x28.
            let base = block * bs + 0x20;
            let count = u16::from_le_bytes(read_bytes(img, base + 2, 2).try_into().unwrap());
            assert!(count >= 3, "the big directory needs several leaves");
            let first = read_bytes(img, base + 8, 4);
            let second = read_bytes(img, base + 16, 4);
            write_bytes(img, base + 8, &second);
            write_bytes(img, base + 16, &first);
        },
        &[ProblemClass::Htree],
        &[ProblemCode::PR_2_HTREE_HASH_ORDER],
    );
}

const EXT2: Profile = Profile {
    name: "ext2",
    mke2fs_args: &["-t", "ext2", "-b", "1024"],
    mke2fs_miscopies: &[],
};

#[test]
fn illegal_block_in_block_map() {
    run_scenario_on(
        &EXT2,
        "illegal block",
        |img| {
            debugfs(img, "sif /medium block[2] 99999999");
        },
        &[ProblemClass::IllegalBlock],
    );
}

#[test]
fn block_map_block_in_two_files() {
    run_scenario_on(
        &EXT2,
        "block map duplicate",
        |img| {
            let theirs = bmap(img, "/medium", 3);
            debugfs(img, &format!("sif /other block[1] {theirs}"));
        },
        &[ProblemClass::MultiplyClaimed],
    );
}

#[test]
fn block_map_wrong_link_count_and_size() {
    run_scenario_on(
        &EXT2,
        "ext2 size and links",
        |img| {
            debugfs(img, "sif /medium size 10");
            debugfs(img, "sif /dir1/a links_count 1");
        },
        &[ProblemClass::InodeSize, ProblemClass::LinkCount],
    );
}

#[test]
fn bad_xattr_refcount() {
    run_scenario(
        "bad xattr refcount",
        |img| {
            let text = debugfs(img, "stat /small");
            let acl = text
                .split("File ACL: ")
                .nth(1)
                .expect("stat shows File ACL");
            let block: u64 = acl.split_whitespace().next().unwrap().parse().unwrap();
            assert_ne!(
                block, 0,
                "the source tree's user xattr must make an xattr block"
            );
            let bs = block_size(img);
            write_bytes(img, block * bs + 4, &7u32.to_le_bytes());
        },
        &[ProblemClass::Xattr],
    );
}

#[test]
fn bad_extent_block_checksum() {
    run_scenario(
        "bad extent block checksum",
        |img| {
            let text = debugfs(img, "ex /fragmented");
            // The first line after the header names the index's child block:
            // "Level Entries  Logical  Physical Length Flags" then " 0/ 1   1/  1     0 - ... 1234 ..."
            let line = text.lines().nth(1).unwrap();
            let fields: Vec<&str> = line.split_whitespace().collect();
            let block: u64 = fields[fields.len() - 2].parse().unwrap();
            let bs = block_size(img);
            // The checksum tail follows eh_max entries: 12 + 12 * max bytes in.
            let max = u16::from_le_bytes(read_bytes(img, block * bs + 4, 2).try_into().unwrap());
            let at = block * bs + 12 + 12 * u64::from(max);
            let sum = read_bytes(img, at, 1);
            write_bytes(img, at, &[sum[0] ^ 0x5A]);
        },
        &[ProblemClass::ExtentTree],
    );
}

/// The block of `path`'s first extent tree node below the root (from `debugfs ex`).
fn first_extent_node(image: &Path, path: &str) -> u64 {
    let text = debugfs(image, &format!("ex {path}"));
    // " 0/ 1   1/  1     0 - 4294967295  1234  4294967296" : the index entry's child.
    let line = text.lines().nth(1).unwrap();
    let fields: Vec<&str> = line.split_whitespace().collect();
    fields[fields.len() - 2].parse().unwrap()
}

#[test]
fn out_of_order_extents() {
    let (_source, image) = fresh_image(&EXT4);
    let img = &image.path;
    let node = first_extent_node(img, "/fragmented");
    let bs = block_size(img);
    // The fifth extent (logical 64) claims logical 20, below the fourth (48).
    write_bytes(img, node * bs + 12 + 12 * 4, &20u32.to_le_bytes());
    let classes = assert_agreement(img, "out of order extents");
    assert!(classes.contains(&ProblemClass::ExtentTree));
    let report = forced_check(img, Some(2));
    assert!(
        report
            .problems
            .iter()
            .any(|p| p.code == e4_fsck::ProblemCode::PR_1_OUT_OF_ORDER_EXTENTS),
        "{:?}",
        report.problems
    );
}

#[test]
fn second_link_to_a_directory() {
    run_scenario(
        "second link to a directory",
        |img| {
            debugfs(img, "link /dir2 /dir1/dir2_again");
        },
        &[ProblemClass::DirectoryEntry],
    );
}

#[test]
fn many_problems_print_in_one_order_whatever_the_threads() {
    let source = tempfile::tempdir().unwrap();
    for d in 0..8 {
        let dir = source.path().join(format!("d{d}"));
        fs::create_dir(&dir).unwrap();
        for f in 0..10 {
            fs::write(dir.join(format!("f{f}")), vec![1u8; 3000]).unwrap();
        }
    }
    let profile = Profile {
        name: "groups-1k",
        mke2fs_args: &["-t", "ext4", "-b", "1024", "-g", "1024"],
        mke2fs_miscopies: &[],
    };
    // 16 inodes per group: the files spread over every group, so over many pieces of
    // inode table scanned by different threads.
    let image = make_image(source.path(), &profile, 8, 128);
    let commands: String = (0..8)
        .flat_map(|d| (0..10).map(move |f| format!("sif /d{d}/f{f} links_count 3\n")))
        .collect();
    let script = image.path.with_extension("cmds");
    fs::write(&script, commands).unwrap();
    let out = Command::new(e4_testkit::tool("debugfs"))
        .arg("-w")
        .arg("-f")
        .arg(&script)
        .arg(&image.path)
        .output()
        .unwrap();
    assert!(out.status.success());
    let runs: Vec<Vec<e4_fsck::Problem>> = [1, 8, 3, 8]
        .iter()
        .map(|&threads| forced_check(&image.path, Some(threads)).problems)
        .collect();
    assert!(runs[0].len() >= 80, "{}", runs[0].len());
    for run in &runs[1..] {
        assert_eq!(run, &runs[0]);
    }
    assert_agreement(&image.path, "many problems");
}

#[test]
fn orphan_chain_loop() {
    run_scenario(
        "orphan chain loop",
        |img| {
            let a = inode_of(img, "/dir1/a");
            let b = inode_of(img, "/dir1/b");
            debugfs(img, &format!("ssv last_orphan {a}"));
            debugfs(img, &format!("sif <{a}> dtime {b}"));
            debugfs(img, &format!("sif <{b}> dtime {a}"));
        },
        &[ProblemClass::Orphan, ProblemClass::Inode],
    );
}

#[test]
fn corrupt_journal_superblock() {
    run_scenario(
        "corrupt journal superblock",
        |img| {
            let block = bmap(img, "<8>", 0);
            write_bytes(img, block * block_size(img), &[0u8; 4]);
        },
        &[ProblemClass::Journal],
    );
}

/// Gives the journal of `img` checksums v3 (mke2fs leaves them to the kernel's mount) and
/// seals its superblock with e4's sealer; with `flip`, then damages the checksum alone.
fn journal_checksums_v3(img: &Path, flip: bool) {
    let at = bmap(img, "<8>", 0) * block_size(img);
    let mut raw = read_bytes(img, at, 1024);
    // INCOMPAT_CSUM_V3 at 0x28 (big-endian), s_checksum_type crc32c at 0x50.
    raw[0x2B] |= 0x10;
    raw[0x50] = 4;
    JournalSuperblock::seal(&mut raw, ());
    if flip {
        raw[0xFC] ^= 1;
    }
    write_bytes(img, at, &raw);
}

/// A journal superblock sealed by e4 is one e2fsck accepts, and so does e4.
#[test]
fn journal_superblock_sealed_by_e4() {
    let (_source, image) = fresh_image(&EXT4);
    journal_checksums_v3(&image.path, false);
    let classes = assert_agreement(&image.path, "journal superblock sealed by e4");
    assert!(classes.is_empty(), "{classes:?}");
}

/// A journal superblock whose checksum alone is wrong: it decodes, and its verify
/// reports it, as e2fsck's `e2fsck_journal_sb_csum_verify` does.
#[test]
fn journal_superblock_checksum() {
    run_scenario_with_codes(
        &EXT4,
        "journal superblock checksum",
        |img| journal_checksums_v3(img, true),
        &[ProblemClass::Journal],
        &[ProblemCode::PR_0_JOURNAL_BAD_SUPER],
    );
}

/// Damage every profile can take, so each layout (block maps, inline data, meta_bg,
/// 1 KiB blocks, 128-byte inodes, no checksums) is checked against the oracle too.
#[test]
fn common_damage_in_every_profile() {
    let damages: [(&str, Damage, ProblemClass); 5] = [
        (
            "links",
            |img| {
                debugfs(img, "sif /dir1/b links_count 4");
            },
            ProblemClass::LinkCount,
        ),
        (
            "unlinked dir",
            |img| {
                debugfs(img, "unlink /dir2");
            },
            ProblemClass::Connectivity,
        ),
        (
            "freed inode",
            |img| {
                debugfs(img, "clri /dir1/c");
            },
            ProblemClass::DirectoryEntry,
        ),
        (
            "size",
            |img| {
                debugfs(img, "sif /medium size 5");
            },
            ProblemClass::InodeSize,
        ),
        (
            "free block bit",
            |img| {
                let block = bmap(img, "/medium", 2);
                debugfs(img, &format!("freeb {block}"));
            },
            ProblemClass::BlockBitmap,
        ),
    ];
    let source = source_tree();
    for profile in PROFILES {
        let pristine = make_image(source.path(), profile, 16, 2048);
        let bytes = fs::read(&pristine.path).unwrap();
        for (name, damage, class) in damages {
            fs::write(&pristine.path, &bytes).unwrap();
            damage(&pristine.path);
            let what = format!("{} / {name}", profile.name);
            let classes = assert_agreement(&pristine.path, &what);
            assert!(
                classes.contains(&class),
                "{what}: {class:?} not in {classes:?}"
            );
        }
    }
}

#[test]
fn journal_needing_recovery_is_reported_and_checked_as_it_stands() {
    run_scenario(
        "needs recovery",
        |img| {
            debugfs(img, "feature needs_recovery");
        },
        &[ProblemClass::Journal],
    );
}

/// The superblock's totals alone are wrong: e2fsck -n reports them and exits 0
/// (`PR_5_FREE_*_COUNT` are `PR_NO_OK`).
#[test]
fn wrong_superblock_free_counts() {
    run_scenario(
        "superblock free counts",
        |img| {
            debugfs(img, "ssv free_blocks_count 100");
            debugfs(img, "ssv free_inodes_count 7");
        },
        &[ProblemClass::FreeCounts],
    );
}

/// A primary superblock that does not validate: both fall back to the backup in group 1.
#[test]
fn corrupt_primary_superblock() {
    let profile = Profile {
        name: "ext4-1k",
        mke2fs_args: &["-t", "ext4", "-b", "1024"],
        mke2fs_miscopies: &[],
    };
    run_scenario_with_codes(
        &profile,
        "corrupt primary superblock",
        |img| {
            // s_inodes_per_group far past what a bitmap block can hold.
            write_bytes(img, 1024 + 0x28, &0x2000_0800u32.to_le_bytes());
        },
        &[],
        &[ProblemCode::PR_0_SB_CORRUPT],
    );
}

/// A descriptor placing a bitmap outside the filesystem: e2fsck gives up on the primary
/// table and starts again from the backup superblock and descriptors; so does e4.
#[test]
fn misplaced_bitmap_uses_backup_descriptors() {
    let profile = Profile {
        name: "ext4-1k",
        mke2fs_args: &["-t", "ext4", "-b", "1024"],
        mke2fs_miscopies: &[],
    };
    run_scenario_with_codes(
        &profile,
        "misplaced inode bitmap",
        |img| {
            debugfs(img, "set_bg 1 inode_bitmap 99999999");
        },
        &[ProblemClass::GroupDescriptor],
        &[ProblemCode::PR_0_CHECK_DESC_FAILED],
    );
}

#[test]
fn bad_group_descriptor_checksum() {
    run_scenario(
        "bad group descriptor checksum",
        |img| {
            // debugfs would reseal the descriptor, so flip group 0's bg_checksum by hand.
            let bs = block_size(img);
            let table = if bs == 1024 { 2 } else { 1 };
            let at = table * bs + 0x1E;
            let sum = read_bytes(img, at, 1);
            write_bytes(img, at, &[sum[0] ^ 0x42]);
        },
        &[ProblemClass::GroupDescriptor],
    );
}

#[test]
fn directory_loop() {
    run_scenario(
        "directory loop",
        |img| {
            // /dir1/sub gets an entry for /dir1, then /dir1 leaves the root: each is now the
            // other's only parent.
            debugfs(img, "link /dir1 /dir1/sub/up");
            debugfs(img, "unlink /dir1");
        },
        &[ProblemClass::Connectivity],
    );
}

/// A block map whose triple and double indirect blocks name one child a thousand times
/// each: a walk that re-entered every named block would do a billion steps. Each tree
/// block is entered once per inode, so this finishes at once and reports the sharing.
#[test]
fn self_similar_block_map_does_not_hang() {
    let source = tempfile::tempdir().unwrap();
    let far = fs::File::create(source.path().join("far")).unwrap();
    // One block past 4 GiB + 48 KiB: reached through the triple indirect block.
    far.write_all_at(&[5u8; 4096], 5 << 30).unwrap();
    let image = make_image(
        source.path(),
        &Profile {
            name: "ext2-4k",
            mke2fs_args: &["-t", "ext2", "-b", "4096"],
            mke2fs_miscopies: &[],
        },
        16,
        256,
    );
    let img = &image.path;
    let text = debugfs(img, "stat /far");
    let pointer = |tag: &str| -> u64 {
        let after = text.split(&format!("({tag}):")).nth(1).expect(tag);
        after
            .split(|c: char| !c.is_ascii_digit())
            .next()
            .unwrap()
            .parse()
            .unwrap()
    };
    // debugfs lists the chain to the one data block: TIND, then its DIND, then its IND.
    let (tind, dind, ind) = (pointer("TIND"), pointer("DIND"), pointer("IND"));
    let repeated = |child: u64| -> Vec<u8> {
        (0..1024)
            .flat_map(|_| (child as u32).to_le_bytes())
            .collect()
    };
    write_bytes(img, tind * 4096, &repeated(dind));
    write_bytes(img, dind * 4096, &repeated(ind));
    let start = std::time::Instant::now();
    let report = forced_check(img, Some(2));
    assert!(start.elapsed().as_secs() < 5, "took {:?}", start.elapsed());
    assert!(
        report
            .problems
            .iter()
            .any(|p| p.code.class() == ProblemClass::MultiplyClaimed),
        "{:?}",
        report.problems
    );
}

#[test]
fn random_byte_flips_never_panic_or_hang() {
    use rand::{Rng, SeedableRng};
    let (_source, image) = fresh_image(&Profile {
        name: "fuzz-1k",
        mke2fs_args: &["-t", "ext4", "-b", "1024"],
        mke2fs_miscopies: &[],
    });
    let pristine = fs::read(&image.path).unwrap();
    let mut rng = rand::rngs::StdRng::seed_from_u64(0xe4f5c);
    let scratch = tempfile::tempdir().unwrap();
    let path: PathBuf = scratch.path().join("fuzzed.img");
    // Metadata lives in the first few hundred KiB: superblock, descriptors, bitmaps,
    // inode tables, directory blocks.
    let hot = pristine.len().min(600 * 1024);
    for round in 0..60 {
        let mut bytes = pristine.clone();
        for _ in 0..rng.gen_range(1..40) {
            let at = rng.gen_range(1024..hot);
            bytes[at] ^= 1 << rng.gen_range(0..8);
        }
        fs::write(&path, &bytes).unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let p = path.clone();
        std::thread::spawn(move || {
            let result = std::panic::catch_unwind(|| {
                check(
                    &p,
                    &Options {
                        threads: Some(2),
                        force: true,
                        ..Options::default()
                    },
                )
                .map(|r| r.exit_code())
            });
            let _ = tx.send(result.is_ok());
        });
        let finished = rx.recv_timeout(std::time::Duration::from_secs(60));
        assert_eq!(finished, Ok(true), "round {round}: panicked or hung");
    }
}

/// A superblock whose checksum alone is wrong, on a one-group image (no backup): e2fsck
/// 1.47.0 cannot check it (exit 8) and neither can e4. Found by the random flips of
/// `e4_written.rs`; e4 used to check such an image with the primary as it stood.
#[test]
fn superblock_checksum_without_backup_cannot_be_checked() {
    let image = e4_testkit::make_empty_image(&["-t", "ext4", "-b", "4096"], 16);
    let img = &image.path;
    let at = 1024 + 0x3FC;
    let sum = read_bytes(img, at, 1);
    write_bytes(img, at, &[sum[0] ^ 1]);
    let oracle = Command::new(e4_testkit::tool("e2fsck"))
        .arg("-fn")
        .arg(img)
        .output()
        .unwrap();
    assert_eq!(oracle.status.code(), Some(8));
    let options = Options {
        force: true,
        ..Options::default()
    };
    assert!(
        matches!(check(img, &options), Err(e4_fsck::FsckError::NotExt(_))),
        "e4 must refuse the image"
    );
}

const EXT3: Profile = Profile {
    name: "ext3",
    mke2fs_args: &["-t", "ext3"],
    mke2fs_miscopies: &[],
};

const INLINE_DATA: Profile = Profile {
    name: "ext4-inline-data",
    mke2fs_args: &["-t", "ext4", "-O", "inline_data"],
    mke2fs_miscopies: &[],
};

/// The target of `/slow`: longer than `i_block`, so a block (or, with inline_data, the
/// `system.data` attribute) holds it.
const SLOW_TARGET: &str =
    "a/target/path/long/enough/that/the/sixty/bytes/of/i_block/cannot/hold/it/at/all";

/// Adds what pass 1's special-inode checks look at: a fast and a slow symlink, a fifo and
/// a character device, each named from the root.
fn add_special_files(img: &Path) {
    debugfs(img, "symlink /fast short");
    debugfs(img, &format!("symlink /slow {SLOW_TARGET}"));
    debugfs(img, "mknod fifo p");
    debugfs(img, "mknod cdev c 1 3");
}

/// A damage to the special files, on `profile`: both checkers agree, and e4 reports
/// `code`. An invalid inode is also named with the wrong file type (e2fsck expects 0).
fn special_scenario(profile: &Profile, name: &str, damage: Damage, code: ProblemCode) {
    let expected: &[ProblemClass] = if code.is_error() {
        &[ProblemClass::Inode]
    } else {
        &[]
    };
    run_scenario_with_codes(profile, name, damage, expected, &[code]);
}

#[test]
fn special_files_undamaged_are_clean() {
    for profile in [&EXT4, &INLINE_DATA] {
        let (_source, image) = fresh_image(profile);
        add_special_files(&image.path);
        let classes = assert_agreement(&image.path, profile.name);
        assert!(classes.is_empty(), "{}: {classes:?}", profile.name);
    }
}

#[test]
fn fast_symlink_size_differs_from_target() {
    special_scenario(
        &EXT4,
        "fast symlink size",
        |img| {
            add_special_files(img);
            debugfs(img, "sif /fast size 4");
        },
        ProblemCode::PR_2_INVALID_SYMLINK,
    );
}

#[test]
fn empty_symlink() {
    special_scenario(
        &EXT4,
        "empty symlink",
        |img| {
            add_special_files(img);
            debugfs(img, "sif /fast size 0");
        },
        ProblemCode::PR_2_INVALID_SYMLINK,
    );
}

#[test]
fn symlink_target_with_nul() {
    special_scenario(
        &EXT4,
        "symlink target with NUL",
        |img| {
            add_special_files(img);
            // "short": the fourth byte of i_block[0] becomes a NUL, size stays 5.
            debugfs(img, "sif /fast block[0] 0x00726873");
        },
        ProblemCode::PR_2_INVALID_SYMLINK,
    );
}

#[test]
fn slow_symlink_size_past_its_block() {
    special_scenario(
        &EXT4,
        "slow symlink size past its block",
        |img| {
            add_special_files(img);
            debugfs(img, "sif /slow size 5000");
        },
        ProblemCode::PR_2_INVALID_SYMLINK,
    );
}

#[test]
fn slow_symlink_of_two_blocks() {
    special_scenario(
        &EXT4,
        "slow symlink of two blocks",
        |img| {
            add_special_files(img);
            // The root extent's length (low half of i_block[4]) becomes 2.
            debugfs(img, "sif /slow block[4] 2");
        },
        ProblemCode::PR_2_INVALID_SYMLINK,
    );
}

#[test]
fn inline_symlink_size_differs_from_target() {
    special_scenario(
        &INLINE_DATA,
        "inline symlink size",
        |img| {
            add_special_files(img);
            debugfs(img, &format!("sif /slow size {}", SLOW_TARGET.len() - 1));
        },
        ProblemCode::PR_2_INVALID_SYMLINK,
    );
}

#[test]
fn fifo_with_immutable_flag_is_not_an_error() {
    special_scenario(
        &EXT4,
        "immutable fifo",
        |img| {
            add_special_files(img);
            debugfs(img, "sif /fifo flags 0x10");
        },
        ProblemCode::PR_1_SET_IMMUTABLE,
    );
}

#[test]
fn symlink_with_append_only_flag_is_not_an_error() {
    special_scenario(
        &EXT4,
        "append-only symlink",
        |img| {
            add_special_files(img);
            debugfs(img, "sif /fast flags 0x20");
        },
        ProblemCode::PR_1_SET_IMMUTABLE,
    );
}

#[test]
fn fifo_with_size() {
    special_scenario(
        &EXT4,
        "fifo with size",
        |img| {
            add_special_files(img);
            debugfs(img, "sif /fifo size 5");
        },
        ProblemCode::PR_1_SET_NONZSIZE,
    );
}

#[test]
fn device_with_extents_flag() {
    special_scenario(
        &EXT4,
        "device with extents flag",
        |img| {
            add_special_files(img);
            debugfs(img, "sif /cdev flags 0x80000");
        },
        ProblemCode::PR_2_BAD_CHAR_DEV,
    );
}

#[test]
fn immutable_device_with_stray_block_words() {
    special_scenario(
        &EXT4,
        "immutable device with stray i_block words",
        |img| {
            add_special_files(img);
            debugfs(img, "sif /cdev flags 0x10");
            debugfs(img, "sif /cdev block[4] 7");
        },
        ProblemCode::PR_2_BAD_CHAR_DEV,
    );
}

#[test]
fn inline_directory_size_past_its_data() {
    run_scenario_with_codes(
        &INLINE_DATA,
        "inline directory size",
        |img| {
            debugfs(img, "sif /dir1 size 200");
        },
        &[ProblemClass::InodeSize],
        &[ProblemCode::PR_1_BAD_I_SIZE],
    );
}

#[test]
fn inline_directory_size_one_short() {
    run_scenario_with_codes(
        &INLINE_DATA,
        "inline directory size one short",
        |img| {
            let size: u64 = debugfs(img, "stat /dir1")
                .split("Size: ")
                .nth(1)
                .and_then(|s| s.split_whitespace().next())
                .and_then(|s| s.parse().ok())
                .expect("size of /dir1");
            debugfs(img, &format!("sif /dir1 size {}", size - 1));
        },
        &[ProblemClass::InodeSize],
        &[ProblemCode::PR_1_BAD_I_SIZE],
    );
}

#[test]
fn inline_file_size_is_not_checked() {
    // e2fsck leaves an inline regular file's size alone, however far past its inline
    // capacity; e4 does the same.
    run_scenario_on(
        &INLINE_DATA,
        "inline file size",
        |img| {
            debugfs(img, "sif /small size 5000");
        },
        &[],
    );
}

#[test]
fn device_with_inline_data_flag_without_the_feature() {
    run_scenario_with_codes(
        &EXT4,
        "device with inline-data flag",
        |img| {
            add_special_files(img);
            debugfs(img, "sif /cdev flags 0x10000000");
        },
        &[ProblemClass::Inode],
        &[
            ProblemCode::PR_1_INLINE_DATA_SET,
            ProblemCode::PR_1_SPECIAL_EXTENTS_IDATA,
        ],
    );
}

#[test]
fn block_mapped_file_with_inline_data_flag_without_the_feature() {
    // The flag hides the file's blocks from both checkers: its i_blocks and the block
    // bitmap then disagree with what was found.
    run_scenario_with_codes(
        &EXT3,
        "block-mapped file with inline-data flag",
        |img| {
            debugfs(img, "sif /medium flags 0x10000000");
        },
        &[ProblemClass::Inode, ProblemClass::InodeBlocks],
        &[ProblemCode::PR_1_INLINE_DATA_SET],
    );
}

#[test]
fn inline_data_feature_cleared() {
    run_scenario_with_codes(
        &INLINE_DATA,
        "inline_data feature cleared",
        |img| {
            debugfs(img, "feature -inline_data");
        },
        &[ProblemClass::Inode],
        &[
            ProblemCode::PR_1_INLINE_DATA_FEATURE,
            ProblemCode::PR_1_INLINE_DATA_SET,
        ],
    );
}

#[test]
fn device_with_blocks() {
    run_scenario_with_codes(
        &EXT4,
        "device with i_blocks",
        |img| {
            add_special_files(img);
            debugfs(img, "sif /cdev blocks 8");
        },
        &[ProblemClass::InodeBlocks],
        &[ProblemCode::PR_1_BAD_I_BLOCKS],
    );
}

#[test]
fn unattached_invalid_symlink() {
    // e2fsck's pass 4 reports an unattached bad inode's problem too, as e4 does from pass 1.
    run_scenario_with_codes(
        &EXT4,
        "unattached invalid symlink",
        |img| {
            add_special_files(img);
            debugfs(img, "sif /fast size 4");
            debugfs(img, "unlink /fast");
        },
        &[ProblemClass::Inode, ProblemClass::LinkCount],
        &[ProblemCode::PR_2_INVALID_SYMLINK],
    );
}

#[test]
fn inode_with_no_file_type() {
    // Mode 0o170644: type bits 0o17, no file type. The entry naming it should then have
    // file type 0 (PR_2_BAD_FILETYPE), in e2fsck as in e4.
    run_scenario_with_codes(
        &EXT4,
        "inode with no file type",
        |img| {
            debugfs(img, "sif /dir1/b mode 0170644");
        },
        &[ProblemClass::Inode, ProblemClass::DirectoryEntry],
        &[ProblemCode::PR_2_BAD_MODE, ProblemCode::PR_2_BAD_FILETYPE],
    );
}

/// An `i_extra_isize` past the inode: e2fsck -n reports it and goes on checking the inode
/// as in use, so its entries and bitmap bit stay valid. e4 used to drop the inode, and
/// then reported its entry as naming an unused inode and its bitmap bit as wrong (found
/// by random flips in a kernel-written image).
#[test]
fn extra_isize_past_the_inode() {
    run_scenario_with_codes(
        &EXT4,
        "extra_isize past the inode",
        |img| {
            let at = inode_offset(img, inode_of(img, "/dir1/a")) + 0x80;
            write_bytes(img, at, &2080u16.to_le_bytes());
        },
        &[ProblemClass::Inode],
        &[ProblemCode::PR_1_EXTRA_ISIZE],
    );
}

/// The byte after the names of `.` and `..` (in their entries' padding) must be NUL
/// (e2fsck's `check_dot`, `check_dotdot`). Declined, e2fsck records no `..` for the
/// directory, so pass 3 finds it wrong too. e4 did not look (found by random flips in a
/// kernel-written ext3 image).
#[test]
fn dot_and_dotdot_not_nul_terminated() {
    run_scenario_with_codes(
        &EXT4,
        "'.' not NUL-terminated",
        |img| {
            // '.' is the first entry: its name at byte 8, the byte after it at 9.
            let block = bmap(img, "/dir1/sub", 0);
            write_bytes(img, block * block_size(img) + 9, b"x");
        },
        &[ProblemClass::DirectoryBlock],
        &[ProblemCode::PR_2_DOT_NULL_TERM],
    );
    run_scenario_with_codes(
        &EXT4,
        "'..' not NUL-terminated",
        |img| {
            // '..' starts at byte 12: its name at 20, the byte after it at 22.
            let block = bmap(img, "/dir1/sub", 0);
            write_bytes(img, block * block_size(img) + 22, b"x");
        },
        &[ProblemClass::DirectoryBlock, ProblemClass::Connectivity],
        &[
            ProblemCode::PR_2_DOT_DOT_NULL_TERM,
            ProblemCode::PR_3_BAD_DOT_DOT,
        ],
    );
}

/// The quota inode slots (3 and 4) without the quota feature: e2fsck looks only at their
/// links, `i_blocks` and `i_block[0]` (`PR_1_QUOTA_INODE_NOT_CLEAR`), not at their mode or
/// xattr block; e4 checked their mode as any reserved inode's and their xattr block
/// (found by random flips in a kernel-written ext3 image). With the feature, a quota file
/// that is not a regular file is `PR_1_QUOTA_BAD_MODE`.
#[test]
fn quota_inode_slots() {
    let cases: &[(&[&str], &str, Option<ProblemCode>)] = &[
        (&["-t", "ext4"], "sif <4> mode 0100644", None),
        (&["-t", "ext4"], "sif <4> file_acl 64", None),
        (
            &["-t", "ext4"],
            "sif <4> links_count 1",
            Some(ProblemCode::PR_1_QUOTA_INODE_NOT_CLEAR),
        ),
        (
            &["-t", "ext4"],
            "sif <3> block[0] 77",
            Some(ProblemCode::PR_1_QUOTA_INODE_NOT_CLEAR),
        ),
        (
            &["-t", "ext4", "-O", "quota"],
            // A fifo: not a regular file, and (as a fifo) with no blocks to walk.
            "sif <3> mode 010644",
            Some(ProblemCode::PR_1_QUOTA_BAD_MODE),
        ),
    ];
    for &(args, command, code) in cases {
        let image = e4_testkit::make_empty_image(args, 16);
        debugfs(&image.path, command);
        let classes = assert_agreement(&image.path, command);
        let report = forced_check(&image.path, None);
        match code {
            None => assert!(classes.is_empty(), "{command}: {:?}", report.problems),
            Some(code) => assert!(
                report.problems.iter().any(|p| p.code == code),
                "{command}: {code} not in {:?}",
                report.problems
            ),
        }
    }
}

/// A directory's `i_size_high` without large_dir: e2fsck counts the directory's blocks in
/// 32 bits, so a high word that adds a multiple of 2^32 blocks leaves only
/// `PR_2_DIR_SIZE_HIGH_ZERO`, while one that does not is also a wrong `i_size` (found by
/// random flips in a kernel-written ext2 image: e4 reported the size too).
#[test]
fn directory_size_high_word() {
    // Without metadata_csum, so the byte written leaves the inode's checksum alone.
    let profile = Profile {
        name: "ext4-1k-no-csum",
        mke2fs_args: &["-t", "ext4", "-b", "1024", "-O", "^metadata_csum"],
        mke2fs_miscopies: &[],
    };
    // With 1 KiB blocks, 2^32 blocks are 2^42 bytes: i_size_high 0x400.
    for (high, codes) in [
        (0x400u32, &[ProblemCode::PR_2_DIR_SIZE_HIGH_ZERO][..]),
        (
            1,
            &[
                ProblemCode::PR_2_DIR_SIZE_HIGH_ZERO,
                ProblemCode::PR_1_BAD_I_SIZE,
            ][..],
        ),
    ] {
        let (_source, image) = fresh_image(&profile);
        let at = inode_offset(&image.path, inode_of(&image.path, "/dir2")) + 0x6C;
        write_bytes(&image.path, at, &high.to_le_bytes());
        assert_agreement(&image.path, &format!("i_size_high {high:#x}"));
        let report = forced_check(&image.path, None);
        let found: std::collections::BTreeSet<ProblemCode> =
            report.problems.iter().map(|p| p.code).collect();
        assert!(
            codes.iter().all(|c| found.contains(c)),
            "i_size_high {high:#x}: {found:?}"
        );
        if high == 0x400 {
            assert!(!found.contains(&ProblemCode::PR_1_BAD_I_SIZE), "{found:?}");
        }
    }
}

//! Targeted damages for images holding the agreement tree (files `small`, `medium`,
//! `other`, `sparse`, `fragmented`; directories `dir1`, `dir1/sub`, `dir2`, `big`; hard link
//! `dir2/a_link`), whoever wrote it: e4's write path (`e4_written.rs`) or the kernel
//! (`kernel_written.rs`). Each damage applies where the image has the structure it
//! damages, and both checkers must then agree.

use std::fs;
use std::path::Path;

use e4_fsck::{check, Options, ProblemClass, ProblemCode};

use super::{
    assert_agreement, block_size, bmap, debugfs, edit_xattr_block, inode_of, inode_offset,
    read_bytes, write_bytes,
};

pub fn features(image: &Path) -> String {
    let text = debugfs(image, "stats");
    text.lines()
        .find(|l| l.starts_with("Filesystem features:"))
        .unwrap_or_default()
        .to_string()
}

pub fn has_feature(image: &Path, feature: &str) -> bool {
    features(image).split_whitespace().any(|f| f == feature)
}

/// Whether `path`'s inode maps its blocks with an extent tree.
pub fn uses_extents(image: &Path, path: &str) -> bool {
    debugfs(image, &format!("stat {path}")).contains("EXTENTS:")
}

/// The physical block of `path`'s logical block `logical`, if it has one (an inline
/// directory has none).
pub fn block_of(image: &Path, path: &str, logical: u64) -> Option<u64> {
    debugfs(image, &format!("bmap {path} {logical}"))
        .trim()
        .parse()
        .ok()
        .filter(|&b| b != 0)
}

/// Flips a bit of the checksum of the first extent leaf of `path` (the one mapping its
/// logical block 0), when the image has metadata_csum and `path` a leaf block; returns
/// whether it did.
pub fn flip_first_extent_leaf_checksum(img: &Path, path: &str) -> bool {
    if !has_feature(img, "metadata_csum") || !uses_extents(img, path) {
        return false;
    }
    let text = debugfs(img, &format!("ex {path}"));
    // The line after the header is the root's first index entry; its child is the
    // second-to-last field.
    let Some(line) = text.lines().nth(1) else {
        return false;
    };
    let fields: Vec<&str> = line.split_whitespace().collect();
    let Some(Ok(leaf)) = fields
        .len()
        .checked_sub(2)
        .map(|i| fields[i].parse::<u64>())
    else {
        return false;
    };
    let bs = block_size(img);
    let max = u16::from_le_bytes(read_bytes(img, leaf * bs + 4, 2).try_into().unwrap());
    let at = leaf * bs + 12 + 12 * u64::from(max);
    let sum = read_bytes(img, at, 1);
    write_bytes(img, at, &[sum[0] ^ 0x5A]);
    true
}

/// One damage: applies itself and returns true, or returns false where the profile lacks
/// the structure it damages.
pub type Damage = fn(&Path) -> bool;

/// Each damage, the class both checkers must then report, and the code e4 must report
/// where a class alone would not tell the specific check from another that finds the same
/// class (the htree leaf ranges also catch swapped index hashes, for one).
pub const DAMAGES: &[(&str, Damage, ProblemClass, Option<ProblemCode>)] = &[
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
        |img| flip_first_extent_leaf_checksum(img, "/fragmented"),
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
            edit_xattr_block(img, block, |bytes| {
                bytes[4..8].copy_from_slice(&7u32.to_le_bytes())
            });
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

/// Applies each damage in turn to a copy of `image` as it stands, requires agreement, the
/// damage's class and (where given) its code; returns which damages applied. `image` is
/// left as it was.
pub fn assert_damages_agree(image: &Path, label: &str) -> Vec<bool> {
    let pristine = fs::read(image).unwrap();
    let applied = DAMAGES
        .iter()
        .map(|&(name, damage, class, code)| {
            fs::write(image, &pristine).unwrap();
            if !damage(image) {
                return false;
            }
            let what = format!("{label} / {name}");
            let classes = assert_agreement(image, &what);
            assert!(
                classes.contains(&class),
                "{what}: {class:?} not in {classes:?}"
            );
            if let Some(code) = code {
                let options = Options {
                    force: true,
                    ..Options::default()
                };
                let report = check(image, &options).unwrap();
                assert!(
                    report.problems.iter().any(|p| p.code == code),
                    "{what}: {code} not reported: {:?}",
                    report.problems
                );
            }
            true
        })
        .collect();
    fs::write(image, &pristine).unwrap();
    applied
}

/// `applied[k]` lists the profiles damage `k` ran on: the profile with every structure
/// (4 KiB blocks, extents, checksums) must be among them for each damage.
pub fn assert_every_damage_ran_on(profile: &str, applied: &[Vec<&str>]) {
    for (k, &(name, ..)) in DAMAGES.iter().enumerate() {
        assert!(
            applied[k].contains(&profile),
            "{name} applied only to {:?}",
            applied[k]
        );
    }
}

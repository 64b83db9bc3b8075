//! Logical blocks past what an inode's kind may map (issue 9 §4, e2fsck's
//! `PR_1_TOOBIG_*`), against `e2fsck -fn`: a directory extent ending past `2^21` KiB
//! without large_dir, a block-mapped symlink with a second block, and a block map naming
//! more blocks than e2fsck's count limit (`PR_1_TOOBIG_REG`). The block is
//! reported and then not counted, so both checkers go on to the same consequences
//! (zero-length directory, its size and `i_blocks`, `..`, link counts, the bitmap).

mod common;

use std::collections::BTreeSet;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use e4_fsck::{ProblemClass, ProblemCode};
use e4_testkit::{make_empty_image, RawImage};

use common::{assert_agreement, debugfs, forced_check};

/// Runs `commands` through debugfs on a fresh image made with `mke2fs_args`, requires
/// agreement, and returns e4's codes and classes.
fn damaged(
    mke2fs_args: &[&str],
    commands: &[&str],
) -> (BTreeSet<ProblemCode>, BTreeSet<ProblemClass>) {
    let image = make_empty_image(mke2fs_args, 32);
    for command in commands {
        debugfs(&image.path, command);
    }
    let classes = assert_agreement(&image.path, &commands.join("; "));
    let report = forced_check(&image.path, None);
    (report.problems.iter().map(|p| p.code).collect(), classes)
}

/// 4 KiB blocks: a directory may map logical blocks below 2^21 / 4 = 524,288. Its one
/// extent moved to start there ends one block past the limit.
#[test]
fn directory_extent_past_the_limit() {
    let (codes, classes) = damaged(
        &["-t", "ext4", "-b", "4096"],
        &["mkdir /d", "sif /d block[3] 524288"],
    );
    assert!(codes.contains(&ProblemCode::PR_1_TOOBIG_DIR), "{codes:?}");
    // The extent is not counted: an empty directory whose size and i_blocks are wrong.
    for code in [
        ProblemCode::PR_1_ZERO_LENGTH_DIR,
        ProblemCode::PR_1_BAD_I_SIZE,
        ProblemCode::PR_1_BAD_I_BLOCKS,
    ] {
        assert!(codes.contains(&code), "{code} not in {codes:?}");
    }
    assert!(classes.contains(&ProblemClass::IllegalBlock), "{classes:?}");
}

/// The same extent one block lower ends at the limit: allowed (its holes are another
/// matter, so only the absence of the code is required here, not agreement).
#[test]
fn directory_extent_ending_at_the_limit_is_not_too_big() {
    let image = make_empty_image(&["-t", "ext4", "-b", "4096"], 32);
    debugfs(&image.path, "mkdir /d");
    debugfs(&image.path, "sif /d block[3] 524287");
    let report = forced_check(&image.path, None);
    assert!(
        !report
            .problems
            .iter()
            .any(|p| p.code == ProblemCode::PR_1_TOOBIG_DIR),
        "{:?}",
        report.problems.first()
    );
}

/// A block-mapped slow symlink given a second block: too big (the block is not counted,
/// so `i_blocks` still agrees), and invalid.
#[test]
fn block_mapped_symlink_with_a_second_block() {
    let target = format!("/{}", "x".repeat(100));
    let (codes, classes) = damaged(
        &["-t", "ext2", "-b", "4096"],
        &[&format!("symlink /s {target}"), "sif /s block[1] 5000"],
    );
    assert!(
        codes.contains(&ProblemCode::PR_1_TOOBIG_SYMLINK),
        "{codes:?}"
    );
    assert!(
        codes.contains(&ProblemCode::PR_2_INVALID_SYMLINK),
        "{codes:?}"
    );
    assert!(
        !codes.contains(&ProblemCode::PR_1_BAD_I_BLOCKS),
        "{codes:?}"
    );
    assert!(classes.contains(&ProblemClass::IllegalBlock), "{classes:?}");
}

/// e2fsck's block count limit for 64 KiB blocks: `1 << (31 - 6)` blocks.
const MAX_BLOCKS_64K: u64 = 1 << 25;

/// A 64 KiB-block ext2 filesystem of about 2 TiB (529 groups, enough free blocks for
/// 2^25 of them in one file), made sparse on tmpfs where there is one.
fn huge_ext2_image() -> (tempfile::TempDir, PathBuf) {
    let shm = Path::new("/dev/shm");
    let dir = if shm.is_dir() {
        tempfile::tempdir_in(shm).unwrap()
    } else {
        tempfile::tempdir().unwrap()
    };
    let path = dir.path().join("huge.img");
    File::create(&path)
        .unwrap()
        .set_len(529 * 65_528 * 65_536)
        .unwrap();
    let out = Command::new(e4_testkit::tool("mke2fs"))
        .args([
            "-q", "-F", "-t", "ext2", "-b", "65536", "-N", "512", "-m", "0",
        ])
        .arg(&path)
        .output()
        .expect("mke2fs must be installed (e2fsprogs)");
    assert!(
        out.status.success(),
        "mke2fs failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    (dir, path)
}

/// Gives inode `ino` (a regular file) a block map of `pointers` distinct blocks, data
/// and indirect, taken from the free blocks in e2fsck's walking order (direct blocks,
/// then each indirect block before its children), with `i_size` covering them all.
/// The first `owned` of them are marked in the bitmaps and group counts, as e2fsck
/// finds them; the rest, the blocks past its count limit, are left free.
fn give_block_map(image: &Path, ino: u32, pointers: u64, owned: u64) {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .open(image)
        .unwrap();
    let mut head = vec![0u8; 2 * 65_536];
    file.read_exact_at(&mut head, 0).unwrap();
    let raw = RawImage::from_bytes(head.clone()).unwrap();
    let geo = raw.geometry();
    let bs = raw.block_size() as u64;
    let per = bs / 4;

    // Free blocks in order, with the group each came from.
    let mut free = Vec::with_capacity(pointers as usize);
    let mut bitmaps = Vec::new();
    for group in 0..geo.groups() {
        let desc = raw.group_descriptor(group).unwrap();
        let mut bitmap = vec![0u8; bs as usize];
        file.read_exact_at(&mut bitmap, desc.block_bitmap() * bs)
            .unwrap();
        let first = geo.group_first_block(group);
        for bit in 0..geo.group_blocks(group) {
            if free.len() as u64 == pointers {
                break;
            }
            if bitmap[(bit / 8) as usize] & (1 << (bit % 8)) == 0 {
                free.push(first + bit);
            }
        }
        bitmaps.push((desc, bitmap));
    }
    assert_eq!(free.len() as u64, pointers, "not enough free blocks");

    // Lay the map out in e2fsck's order: 12 direct, the single indirect block and its
    // children, the double indirect block, then its children each before theirs.
    let mut map = MapLayout {
        file: &file,
        free: free.iter().copied(),
        left: pointers,
        per,
        bs,
        last_logical: 0,
    };
    let mut i_block = [0u32; 15];
    for (slot, entry) in i_block.iter_mut().enumerate().take(12) {
        if let Some(block) = map.take() {
            *entry = block as u32;
            map.last_logical = slot as u64;
        }
    }
    i_block[12] = map.indirect(12);
    let dind = map.take().unwrap();
    i_block[13] = dind as u32;
    let mut dind_bytes = vec![0u8; bs as usize];
    let mut child = 0u64;
    while map.left > 0 {
        let ind = map.indirect(12 + per + child * per);
        dind_bytes[4 * child as usize..4 * child as usize + 4].copy_from_slice(&ind.to_le_bytes());
        child += 1;
    }
    file.write_all_at(&dind_bytes, dind * bs).unwrap();
    let last_logical = map.last_logical;

    // The inode: its map, a size reaching its last block, e2fsck's count in i_blocks.
    let offset = raw.inode_offset(ino).unwrap();
    let mut inode = vec![0u8; 128];
    file.read_exact_at(&mut inode, offset).unwrap();
    for (slot, entry) in i_block.iter().enumerate() {
        inode[40 + 4 * slot..44 + 4 * slot].copy_from_slice(&entry.to_le_bytes());
    }
    let size = (last_logical + 1) * bs;
    inode[4..8].copy_from_slice(&(size as u32).to_le_bytes());
    inode[108..112].copy_from_slice(&((size >> 32) as u32).to_le_bytes());
    let xattr_sectors = u32::from_le_bytes(inode[28..32].try_into().unwrap());
    let sectors = xattr_sectors as u64 + (owned * (bs / 512));
    inode[28..32].copy_from_slice(&u32::try_from(sectors).unwrap().to_le_bytes());
    file.write_all_at(&inode, offset).unwrap();

    // The owned blocks in the bitmaps, the group counts and the superblock count.
    let mut taken_per_group = vec![0u32; bitmaps.len()];
    for &block in &free[..owned as usize] {
        let group = geo.group_of_block(block).unwrap();
        let bit = block - geo.group_first_block(group);
        bitmaps[group as usize].1[(bit / 8) as usize] |= 1 << (bit % 8);
        taken_per_group[group as usize] += 1;
    }
    let mut descriptors = head[bs as usize..].to_vec();
    for (group, (desc, bitmap)) in bitmaps.into_iter().enumerate() {
        if taken_per_group[group] == 0 {
            continue;
        }
        file.write_all_at(&bitmap, desc.block_bitmap() * bs)
            .unwrap();
        let count = desc.free_blocks_count() - taken_per_group[group];
        // 32-byte descriptors (no 64bit): the count is `bg_free_blocks_count_lo`.
        let at = geo.descriptor_offset(group as u32) + 0xC;
        descriptors[at..at + 2].copy_from_slice(&u16::try_from(count).unwrap().to_le_bytes());
    }
    file.write_all_at(&descriptors, bs).unwrap();
    let free_count = raw.superblock().free_blocks_count() - owned;
    file.write_all_at(&(free_count as u32).to_le_bytes(), 1024 + 0xC)
        .unwrap();
}

/// Hands out a block map's blocks in e2fsck's walking order.
struct MapLayout<'a, I: Iterator<Item = u64>> {
    file: &'a File,
    free: I,
    /// Pointers still to hand out.
    left: u64,
    per: u64,
    bs: u64,
    last_logical: u64,
}

impl<I: Iterator<Item = u64>> MapLayout<'_, I> {
    fn take(&mut self) -> Option<u64> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        self.free.next()
    }

    /// Writes a single indirect block mapping from `first_logical` with as many data
    /// blocks as are left (up to a full block) and returns its number.
    fn indirect(&mut self, first_logical: u64) -> u32 {
        let block = self.take().unwrap();
        let mut bytes = vec![0u8; self.bs as usize];
        for i in 0..self.per {
            let Some(data) = self.take() else { break };
            bytes[4 * i as usize..4 * i as usize + 4].copy_from_slice(&(data as u32).to_le_bytes());
            self.last_logical = first_logical + i;
        }
        self.file.write_all_at(&bytes, block * self.bs).unwrap();
        block as u32
    }
}

/// The block-count form of e2fsck's limit (`p->num_blocks + 1 >= p->max_blocks`): a
/// 64 KiB-block file whose block map names 2^25 distinct blocks (2,049 indirect ones,
/// 128 MiB written) after an xattr block. e2fsck counts the xattr block first, then
/// owns 2^25 - 2 blocks of the map, and finds the last two too big; so must e4, and
/// the image is otherwise consistent with that count (bitmaps, group counts,
/// `i_blocks`), so nothing else may be reported. About 4 s on the 2-core machine
/// (e2fsck once or twice, e4 three times: well under a second each).
#[test]
fn block_map_reaching_the_count_limit() {
    let (_dir, image) = huge_ext2_image();
    debugfs(&image, "write /dev/null big");
    let value = "v".repeat(300);
    debugfs(&image, &format!("ea_set big user.big {value}"));
    let ino = common::inode_of(&image, "big");
    give_block_map(&image, ino, MAX_BLOCKS_64K, MAX_BLOCKS_64K - 2);
    let started = Instant::now();
    let classes = assert_agreement(&image, "a block map reaching the count limit");
    eprintln!("both checkers, e4 twice: {:?}", started.elapsed());
    // The same blocks, "#logical (physical)", in both.
    let (_, oracle_text) = common::e2fsck_verdict(&image);
    let blocks_named = |line: &str| -> Option<String> {
        let rest = line.split("lock #").nth(1)?;
        Some(rest.split(')').next()?.to_string() + ")")
    };
    let oracle: BTreeSet<String> = oracle_text
        .lines()
        .filter(|line| line.contains("causes file to be too big"))
        .filter_map(blocks_named)
        .collect();
    let report = forced_check(&image, None);
    assert!(
        report
            .problems
            .iter()
            .all(|p| p.code == ProblemCode::PR_1_TOOBIG_REG),
        "{:?}",
        report.problems
    );
    let ours: BTreeSet<String> = report
        .problems
        .iter()
        .filter_map(|p| blocks_named(&p.message))
        .collect();
    assert_eq!(ours.len(), 2, "{oracle_text}");
    assert_eq!(ours, oracle, "{oracle_text}");
    assert_eq!(classes, BTreeSet::from([ProblemClass::IllegalBlock]));
}

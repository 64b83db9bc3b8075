//! Backup superblocks and descriptor tables (issue 9 §2). Under `-n` e2fsck never compares
//! a backup with the primary: `check_backup_super_block` (super.c) returns at once when the
//! filesystem was opened read-only, and its comparison only decides whether to rewrite
//! the backups after a repair. The backups are read only when the primary superblock
//! does not open or its descriptors look bad, and then only the one in group 1
//! (`get_backup_sb` tries that place for each block size). So a stale, damaged or zeroed
//! backup leaves `e2fsck -fn` clean, and e4 must say the same; a bad primary with a bad
//! group-1 backup cannot be checked by either, however good the later backups are.

mod common;

use std::path::Path;
use std::process::Command;

use e4_fsck::{check, Options};
use e4_testkit::make_empty_image;

use common::{assert_agreement, debugfs, forced_check, read_bytes, write_bytes};

/// 1 KiB blocks, 8,192 per group, 64 MiB: eight groups, backups in groups 1, 3, 5 and 7.
const ARGS: &[&str] = &["-t", "ext4", "-b", "1024"];
const SIZE_MIB: u64 = 64;
const BLOCK: u64 = 1024;
/// Where group `group`'s backup superblock starts (block 1 + 8,192 per group).
fn backup_superblock_offset(group: u64) -> u64 {
    (1 + 8192 * group) * BLOCK
}

/// An image with a few files, so that the primary's counts differ from the backups'.
fn image_with_files() -> e4_testkit::Image {
    let image = make_empty_image(ARGS, SIZE_MIB);
    for name in ["one", "two", "three"] {
        debugfs(&image.path, &format!("write /etc/hostname {name}"));
    }
    debugfs(&image.path, "mkdir dir");
    image
}

/// Both checkers find `image` clean, and e4 reports nothing at all.
fn assert_clean(image: &Path, what: &str) {
    let classes = assert_agreement(image, what);
    assert!(classes.is_empty(), "{what}: {classes:?}");
    let report = forced_check(image, None);
    assert!(report.problems.is_empty(), "{what}: {:?}", report.problems);
}

/// The backup in group 1 describes another filesystem: other block and inode counts,
/// features and UUID. `e2fsck -n` does not compare it; e4 does not either.
#[test]
fn backup_superblock_differing_from_the_primary_is_not_reported() {
    let image = image_with_files();
    let at = backup_superblock_offset(1);
    // s_inodes_count (0x00), s_blocks_count_lo (0x04), s_feature_compat (0x5C),
    // s_uuid (0x68).
    write_bytes(&image.path, at, &1234u32.to_le_bytes());
    write_bytes(&image.path, at + 4, &4096u32.to_le_bytes());
    write_bytes(&image.path, at + 0x5C, &0u32.to_le_bytes());
    write_bytes(&image.path, at + 0x68, &[0xAB; 16]);
    assert_clean(&image.path, "backup superblock differs");
}

/// Every backup superblock zeroed and the descriptor copy after group 1's overwritten
/// with garbage: nothing reads them while the primary is sound.
#[test]
fn zeroed_backups_and_garbage_backup_descriptors_are_not_reported() {
    let image = image_with_files();
    for group in [1, 3, 5, 7] {
        write_bytes(
            &image.path,
            backup_superblock_offset(group),
            &[0u8; BLOCK as usize],
        );
    }
    let garbage: Vec<u8> = (0..BLOCK).map(|i| (i * 37 % 251) as u8).collect();
    write_bytes(&image.path, backup_superblock_offset(1) + BLOCK, &garbage);
    assert_clean(&image.path, "zeroed backups");
}

/// A primary superblock that does not open, with the backup in group 1 zeroed: e2fsck
/// gives up (exit 8) though groups 3, 5 and 7 hold good backups, since it only guesses
/// group 1's place; e4 cannot check it either.
#[test]
fn bad_primary_and_bad_group_one_backup_cannot_be_checked() {
    let image = image_with_files();
    // The primary's magic, then the whole group-1 backup.
    write_bytes(&image.path, 1024 + 0x38, &[0, 0]);
    write_bytes(
        &image.path,
        backup_superblock_offset(1),
        &[0u8; BLOCK as usize],
    );
    assert_eq!(
        read_bytes(&image.path, backup_superblock_offset(3) + 0x38, 2),
        [0x53, 0xEF],
        "group 3 keeps a good backup"
    );
    let oracle = Command::new(e4_testkit::tool("e2fsck"))
        .arg("-fn")
        .arg(&image.path)
        .output()
        .unwrap();
    assert_eq!(
        oracle.status.code(),
        Some(8),
        "{}",
        String::from_utf8_lossy(&oracle.stderr)
    );
    let options = Options {
        force: true,
        ..Options::default()
    };
    let ours = check(&image.path, &options);
    assert!(
        ours.is_err(),
        "e4 checked it: {:?}",
        ours.map(|r| r.problems)
    );
}

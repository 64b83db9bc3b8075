//! Group descriptors are read a block at a time (16 per 1 KiB block here) and parsed in
//! parallel. An image of 40 groups spans three descriptor blocks, the last one partly:
//! every group must get its own descriptor, so the clean image is clean, and a free count
//! changed at the first and last descriptor of the second block is reported at exactly
//! those groups, as e2fsck reports it. With group checksums, a descriptor whose checksum
//! fails has its group's bitmaps read from disk whatever its uninit flags, as libext2fs
//! reads them.

mod common;

use std::collections::BTreeSet;

use e4_fsck::{check, Location, Options, ProblemClass, ProblemCode};
use e4_testkit::{make_image, Profile};

use common::{assert_agreement, debugfs, forced_check, read_bytes, write_bytes};

/// 1 KiB blocks and 64-byte descriptors (64bit): 16 descriptors per block, 8 MiB per
/// group, so 320 MiB is 40 groups. Without group checksums, so that a descriptor edited
/// by debugfs keeps no stale uninit flag or checksum.
const FORTY_GROUPS: Profile = Profile {
    name: "ext4-1k-40-groups",
    mke2fs_args: &[
        "-t",
        "ext4",
        "-b",
        "1024",
        "-O",
        "64bit,^metadata_csum,^uninit_bg",
    ],
    mke2fs_miscopies: &[],
};

#[test]
fn groups_across_three_descriptor_blocks_each_get_their_own_descriptor() {
    let source = tempfile::tempdir().unwrap();
    let image = make_image(source.path(), &FORTY_GROUPS, 320, 4096);
    assert_agreement(&image.path, "40 groups, clean");
    let options = Options {
        force: true,
        ..Options::default()
    };
    let clean = check(&image.path, &options).unwrap();
    assert!(clean.problems.is_empty(), "{:?}", clean.problems);

    let damaged: BTreeSet<u32> = [16, 31].into();
    for group in &damaged {
        // debugfs updates the descriptor's checksum: only the count is wrong.
        debugfs(&image.path, &format!("set_bg {group} free_inodes_count 5"));
    }
    assert_agreement(&image.path, "40 groups, two free inode counts");
    let report = check(&image.path, &options).unwrap();
    let reported: BTreeSet<u32> = report
        .problems
        .iter()
        .filter(|p| p.code == ProblemCode::PR_5_FREE_INODE_COUNT_GROUP)
        .map(|p| match p.location {
            Location::Group(group) => group,
            other => panic!("PR_5_FREE_INODE_COUNT_GROUP at {other:?}"),
        })
        .collect();
    assert_eq!(reported, damaged);
}

/// The same layout with group checksums (metadata_csum), where groups 1 to 39 are
/// INODE_UNINIT and most of them BLOCK_UNINIT.
const FORTY_GROUPS_CSUM: Profile = Profile {
    name: "ext4-1k-40-groups-csum",
    mke2fs_args: &["-t", "ext4", "-b", "1024", "-O", "64bit"],
    mke2fs_miscopies: &[],
};

#[test]
fn a_bad_descriptor_checksum_has_the_uninit_groups_bitmaps_read_from_disk() {
    let source = tempfile::tempdir().unwrap();
    let image = make_image(source.path(), &FORTY_GROUPS_CSUM, 320, 4096);
    // Group 25 is BLOCK_UNINIT and holds a backup superblock: its bitmap, read from
    // disk, has that metadata added as libext2fs adds it. One bit set on disk there (a
    // free block) must then show, as it does to e2fsck.
    let damaged: BTreeSet<u32> = [16, 25, 31].into();
    let bitmap = u64::from(u32::from_le_bytes(
        read_bytes(&image.path, 2 * 1024 + 25 * 64, 4)
            .try_into()
            .unwrap(),
    ));
    write_bytes(&image.path, bitmap * 1024 + 1000, &[1]);
    let marked_free_block = 25 * 8192 + 1 + 8000;
    for &group in &damaged {
        // bg_checksum, 0x1E into the descriptor; the table starts at block 2.
        let at = 2 * 1024 + u64::from(group) * 64 + 0x1E;
        let old = read_bytes(&image.path, at, 1);
        write_bytes(&image.path, at, &[!old[0]]);
    }
    // e2fsck trusts the INODE_UNINIT flag of a group whose descriptor checksum fails for
    // the inode scan, but not for reading its bitmap: it reads the never-written bitmap
    // and reports its padding (and skips its checksum by the flag alone).
    let classes = assert_agreement(&image.path, "40 groups, three descriptor checksums");
    assert!(classes.contains(&ProblemClass::InodeBitmap), "{classes:?}");
    let report = forced_check(&image.path, None);
    let at_groups = |code: ProblemCode| -> BTreeSet<u32> {
        report
            .problems
            .iter()
            .filter(|p| p.code == code)
            .map(|p| match p.location {
                Location::Group(group) => group,
                other => panic!("{code} at {other:?}"),
            })
            .collect()
    };
    assert_eq!(at_groups(ProblemCode::PR_0_GDT_CSUM), damaged);
    assert_eq!(at_groups(ProblemCode::PR_5_INODE_BMAP_PADDING), damaged);
    let unused: Vec<Location> = report
        .problems
        .iter()
        .filter(|p| p.code == ProblemCode::PR_5_BLOCK_UNUSED)
        .map(|p| p.location)
        .collect();
    assert_eq!(unused, [Location::Block(marked_free_block)]);
    // The backup superblock and descriptors in group 25 are in its bitmap as read.
    assert!(
        report
            .problems
            .iter()
            .all(|p| p.code != ProblemCode::PR_5_BLOCK_USED),
        "{:?}",
        report.problems
    );
}

//! Group descriptors are read a block at a time (16 per 1 KiB block here) and parsed in
//! parallel. An image of 40 groups spans three descriptor blocks, the last one partly:
//! every group must get its own descriptor, so the clean image is clean, and a free count
//! changed at the first and last descriptor of the second block is reported at exactly
//! those groups, as e2fsck reports it.

mod common;

use std::collections::BTreeSet;

use e4_fsck::{check, Location, Options, ProblemCode};
use e4_testkit::{make_image, Profile};

use common::{assert_agreement, debugfs};

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

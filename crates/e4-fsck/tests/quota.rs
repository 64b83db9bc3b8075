//! Quota usage (the quota feature, user, group and project quota), against `e2fsck -fn`:
//! the usage pass 1 adds up per id must match each quota file's entries, else
//! `PR_6_UPDATE_QUOTAS` for that type: an owner changed behind the quota files' back, a
//! project id changed, a quota file that does not read as a quota tree.

mod common;

use std::path::Path;
use std::process::Command;

use e4_fsck::{Location, ProblemCode};
use e4_testkit::make_empty_image;

use common::flips::assert_random_flips_agree;
use common::{assert_agreement, block_size, bmap, debugfs, forced_check, read_bytes, write_bytes};

/// The user, group and project quota inodes mke2fs gives a 4 KiB-block image.
const USR_QUOTA_INO: u32 = 3;
const GRP_QUOTA_INO: u32 = 4;

/// A 4 KiB-block image with all three quota types and a few files copied in by mke2fs,
/// whose quota files `e2fsck -fy` then brings up to date (mke2fs 1.47.0 counts the
/// usage before copying the files in).
fn quota_image() -> e4_testkit::Image {
    let host = tempfile::tempdir().unwrap();
    std::fs::write(host.path().join("a"), b"a").unwrap();
    std::fs::write(host.path().join("b"), vec![b'b'; 10_000]).unwrap();
    std::fs::create_dir(host.path().join("d")).unwrap();
    let dir = host.path().display().to_string();
    let image = make_empty_image(
        &[
            "-t",
            "ext4",
            "-b",
            "4096",
            "-O",
            "quota",
            "-E",
            "quotatype=usrquota:grpquota:prjquota",
            "-d",
            &dir,
        ],
        16,
    );
    let fixed = Command::new(e4_testkit::tool("e2fsck"))
        .arg("-fy")
        .arg(&image.path)
        .output()
        .unwrap();
    assert!(matches!(fixed.status.code(), Some(0 | 1)), "{fixed:?}");
    image
}

/// e4's quota problems, by quota inode.
fn quota_problems(image: &Path) -> Vec<Location> {
    forced_check(image, None)
        .problems
        .iter()
        .filter(|p| p.code == ProblemCode::PR_6_UPDATE_QUOTAS)
        .map(|p| p.location)
        .collect()
}

#[test]
fn quota_files_up_to_date() {
    let image = quota_image();
    let classes = assert_agreement(&image.path, "quota files up to date");
    assert!(classes.is_empty(), "{classes:?}");
}

/// `/b` given to user 1000: user 0 is charged too much, and user 1000 has no entry.
#[test]
fn owner_changed() {
    let image = quota_image();
    debugfs(&image.path, "sif /b uid 1000");
    assert_agreement(&image.path, "owner changed");
    assert_eq!(
        quota_problems(&image.path),
        [Location::Inode(USR_QUOTA_INO)]
    );
}

/// `/b`'s group and project changed: the group and project files disagree.
#[test]
fn group_and_project_changed() {
    let image = quota_image();
    debugfs(&image.path, "sif /b gid 50");
    debugfs(&image.path, "sif /b projid 7");
    assert_agreement(&image.path, "group and project changed");
    let problems = quota_problems(&image.path);
    assert_eq!(problems.len(), 2, "{problems:?}");
    assert_eq!(problems[0], Location::Inode(GRP_QUOTA_INO));
}

/// The user quota file's header zeroed: it cannot be read.
#[test]
fn quota_file_header() {
    let image = quota_image();
    let block = bmap(&image.path, &format!("<{USR_QUOTA_INO}>"), 0);
    write_bytes(&image.path, block * block_size(&image.path), &[0; 8]);
    assert_agreement(&image.path, "user quota file header zeroed");
    assert_eq!(
        quota_problems(&image.path),
        [Location::Inode(USR_QUOTA_INO)]
    );
}

/// A fifo given to user 2000: user 0's usage is what it was, but user 2000, charged one
/// inode, has no entry in the user quota file (the group file is off by the inode too).
#[test]
fn new_owner_without_an_entry() {
    let image = quota_image();
    // debugfs's mknod takes the name as given, '/' included: `p` is made in the root.
    debugfs(&image.path, "mknod p p");
    debugfs(&image.path, "sif /p uid 2000");
    assert_agreement(&image.path, "a fifo owned by user 2000");
    assert!(quota_problems(&image.path).contains(&Location::Inode(USR_QUOTA_INO)));
}

/// The user quota tree's root naming, besides its sound references, a block past the
/// file's `dqi_blocks`: e2fsck's `check_reference` stops the scan, so the file cannot be
/// read, though no entry is lost.
#[test]
fn quota_tree_reference_past_the_file() {
    let image = quota_image();
    let block = bmap(&image.path, &format!("<{USR_QUOTA_INO}>"), 0);
    // The root is tree block 1: bytes 1024 to 2048 of the file's first 4 KiB block.
    let root = block * block_size(&image.path) + 1024;
    let refs = read_bytes(&image.path, root, 1024);
    let unused = refs
        .chunks_exact(4)
        .rposition(|r| r == [0; 4])
        .expect("the root has a free slot");
    write_bytes(
        &image.path,
        root + 4 * unused as u64,
        &5000u32.to_le_bytes(),
    );
    assert_agreement(&image.path, "quota tree reference past the file");
    assert_eq!(
        quota_problems(&image.path),
        [Location::Inode(USR_QUOTA_INO)]
    );
}

/// Tree block 2 (the root's child) naming, besides its sound reference, the block that
/// sits at depth 3: e2fsck walks it again, one level deeper, so the data block it names
/// is read as an index block, whose words (ids, counts) name blocks past `dqi_blocks`
/// and stop the scan. Found by random flips: e4 walked each block once, whatever its
/// depth, and found the file sound.
#[test]
fn quota_index_block_named_again_one_level_deeper() {
    let image = quota_image();
    let block = bmap(&image.path, &format!("<{USR_QUOTA_INO}>"), 0);
    let tree_block = |n: u64| block * block_size(&image.path) + 1024 * n;
    let first_ref = |n: u64| {
        u32::from_le_bytes(
            read_bytes(&image.path, tree_block(n), 4)
                .try_into()
                .unwrap(),
        )
    };
    // The sound path: root 1 -> 2 -> 3 -> 4 -> data block 5, each through slot 0.
    assert_eq!(
        [first_ref(1), first_ref(2), first_ref(3), first_ref(4)],
        [2, 3, 4, 5]
    );
    write_bytes(&image.path, tree_block(2) + 4 * 200, &4u32.to_le_bytes());
    assert_agreement(
        &image.path,
        "quota index block named again one level deeper",
    );
    assert_eq!(
        quota_problems(&image.path),
        [Location::Inode(USR_QUOTA_INO)]
    );
}

/// Random bit flips in the three quota files (headers, tree and data blocks) must give
/// e2fsck's verdict, and neither panic nor hang.
#[test]
fn random_flips_in_the_quota_files() {
    let image = quota_image();
    let project = format!("<{}>", prj_quota_ino(&image.path));
    let files = ["<3>", "<4>", project.as_str()];
    let damaged = assert_random_flips_agree(&image.path, &files, 0, 40, 11);
    assert!(damaged > 0, "no round damaged a quota file");
}

/// `s_prj_quota_inum`.
fn prj_quota_ino(image: &Path) -> u32 {
    e4_testkit::RawImage::read(image)
        .unwrap()
        .superblock()
        .prj_quota_inum
}

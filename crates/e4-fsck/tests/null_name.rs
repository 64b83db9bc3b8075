//! A live directory entry with a zero-length name (issue 9), against `e2fsck -fn`: the
//! entry parses, so the block is read on past it, and e2fsck's chain of entry problems in
//! `check_dir_block` names one problem: `PR_2_BAD_INO` for a reserved or out-of-range
//! inode, `PR_2_LINK_ROOT` for the root, else `PR_2_NULL_NAME` (declined, the entry is
//! still counted as a link).

mod common;

use std::collections::BTreeSet;

use e4_fsck::{ProblemClass, ProblemCode};
use e4_testkit::make_empty_image;

use common::{assert_agreement, debugfs, edit_dir_block, entry_offset, forced_check};

/// Byte offsets in an entry's header.
const NAME_LEN: usize = 6;
const INODE: std::ops::Range<usize> = 0..4;

/// Makes `/d` holding symlinks `a`, `b` and `c` on a fresh image made with `mke2fs_args`,
/// clears `b`'s `name_len` (and sets its inode to `inode`, when given), requires
/// agreement, and returns e4's codes and classes.
fn nameless_b(
    mke2fs_args: &[&str],
    inode: Option<u32>,
) -> (BTreeSet<ProblemCode>, BTreeSet<ProblemClass>) {
    let image = make_empty_image(mke2fs_args, 8);
    for command in [
        "mkdir /d",
        "symlink /d/a x",
        "symlink /d/b y",
        "symlink /d/c z",
    ] {
        debugfs(&image.path, command);
    }
    edit_dir_block(&image.path, "/d", 0, |block| {
        let at = entry_offset(block, b"b");
        block[at + NAME_LEN] = 0;
        if let Some(inode) = inode {
            block[at + INODE.start..at + INODE.end].copy_from_slice(&inode.to_le_bytes());
        }
    });
    let classes = assert_agreement(
        &image.path,
        &format!("{mke2fs_args:?}: /d/b nameless, inode {inode:?}"),
    );
    let report = forced_check(&image.path, None);
    (report.problems.iter().map(|p| p.code).collect(), classes)
}

/// On every layout: the nameless entry is the only problem (its symlink keeps its link,
/// and `c` after it is read, so no link count is wrong).
#[test]
fn nameless_entry_to_a_live_inode() {
    for args in [
        &["-t", "ext4", "-b", "4096"][..],
        &["-t", "ext4", "-b", "1024", "-O", "^metadata_csum"],
        &["-t", "ext2", "-b", "1024"],
    ] {
        let (codes, classes) = nameless_b(args, None);
        assert_eq!(
            codes,
            BTreeSet::from([ProblemCode::PR_2_NULL_NAME]),
            "{args:?}"
        );
        assert_eq!(classes, BTreeSet::from([ProblemClass::DirectoryEntry]));
    }
}

/// A reserved inode is `PR_2_BAD_INO` alone (e2fsck skips the rest of the entry).
#[test]
fn nameless_entry_to_a_reserved_inode_is_a_bad_inode() {
    let (codes, _) = nameless_b(&["-t", "ext4"], Some(5));
    assert!(codes.contains(&ProblemCode::PR_2_BAD_INO), "{codes:?}");
    assert!(!codes.contains(&ProblemCode::PR_2_NULL_NAME), "{codes:?}");
}

/// The root is `PR_2_LINK_ROOT`, which comes first in e2fsck's chain.
#[test]
fn nameless_entry_to_the_root_is_a_link_to_the_root() {
    let (codes, _) = nameless_b(&["-t", "ext4"], Some(2));
    assert!(codes.contains(&ProblemCode::PR_2_LINK_ROOT), "{codes:?}");
    assert!(!codes.contains(&ProblemCode::PR_2_NULL_NAME), "{codes:?}");
}

//! `.` and `..` as e2fsck's `check_dot` and `check_dotdot` check them, against
//! `e2fsck -fn`: a wrong name is `PR_2_1ST_NOT_DOT` or `PR_2_2ND_NOT_DOT_DOT` (no inode:
//! `PR_2_MISSING_DOT`, `PR_2_MISSING_DOT_DOT`), `.` naming another inode
//! `PR_2_BAD_INODE_DOT` (a missing one too); declined, an entry with an inode goes through
//! the checks every entry does (its file type among them) and its reference is counted.
//! Found by the sweep (`exit_status_sweep`): a `..` whose name a flip changed was not
//! counted, so e4 also reported the parent's link count.

mod common;

use std::path::Path;

use e4_format::dir_entry::file_type;
use e4_fsck::ProblemCode::{self, *};
use e4_testkit::make_empty_image;

use common::{assert_exit, debugfs, edit_dir_block};

/// Applies `edit` to block 0 of `/d` (`.` at 0, `..` at 12) of a fresh image and checks
/// that both checkers exit with `status` and e4 reports every one of `codes`.
fn damage(what: &str, edit: impl FnOnce(&mut [u8]), status: i32, codes: &[ProblemCode]) {
    let image = make_empty_image(&["-t", "ext4", "-b", "1024"], 8);
    debugfs(&image.path, "mkdir d");
    edit_dir_block(&image.path, "d", 0, edit);
    check(&image.path, what, status, codes);
}

fn check(image: &Path, what: &str, status: i32, codes: &[ProblemCode]) {
    let found = assert_exit(image, what, status);
    for code in codes {
        assert!(found.contains(code), "{what}: {code:?} not in {found:?}");
    }
}

#[test]
fn dot_entries_agree() {
    damage(
        "'.' and '..' of the wrong file types",
        |block| {
            block[7] = file_type::SYMLINK;
            block[12 + 7] = file_type::REGULAR;
        },
        4,
        &[PR_2_BAD_FILETYPE],
    );
    damage(
        "'..' renamed '.x'",
        |block| block[12 + 9] = b'x',
        4,
        &[PR_2_2ND_NOT_DOT_DOT],
    );
    damage(
        "'.' renamed 'x'",
        |block| block[8] = b'x',
        4,
        &[PR_2_1ST_NOT_DOT],
    );
    damage(
        "'.' without an inode",
        |block| block[..4].fill(0),
        4,
        &[PR_2_MISSING_DOT, PR_2_BAD_INODE_DOT],
    );
}

//! Logical blocks past what an inode's kind may map (issue 9 §4, e2fsck's
//! `PR_1_TOOBIG_*`), against `e2fsck -fn`: a directory extent ending past `2^21` KiB
//! without large_dir, and a block-mapped symlink with a second block. The block is
//! reported and then not counted, so both checkers go on to the same consequences
//! (zero-length directory, its size and `i_blocks`, `..`, link counts, the bitmap).

mod common;

use std::collections::BTreeSet;

use e4_fsck::{ProblemClass, ProblemCode};
use e4_testkit::make_empty_image;

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

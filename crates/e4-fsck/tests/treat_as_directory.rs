//! A directory whose mode was damaged into a fifo, socket or device (e2fsck's
//! `check_is_really_dir`, `PR_1_TREAT_AS_DIRECTORY`), against `e2fsck -fn`: by a block
//! map, an extent tree under metadata_csum and inline data. Declined, the inode is then
//! checked by its mode, so both checkers also find what follows (its size, its blocks,
//! the entries naming it, its children).

mod common;

use e4_fsck::ProblemCode;
use e4_testkit::make_empty_image;

use common::{assert_agreement, debugfs, forced_check};

/// Makes `/d` holding `/d/e` on a fresh image made with `mke2fs_args`, gives `/d` the
/// file type bits `mode`, requires agreement, and returns whether e4 reported
/// `PR_1_TREAT_AS_DIRECTORY`.
fn directory_given_mode(mke2fs_args: &[&str], mode: &str) -> bool {
    let image = make_empty_image(mke2fs_args, 8);
    for command in ["mkdir /d", "mkdir /d/e", &format!("sif /d mode {mode}")] {
        debugfs(&image.path, command);
    }
    assert_agreement(
        &image.path,
        &format!("{mke2fs_args:?}: /d given mode {mode}"),
    );
    forced_check(&image.path, None)
        .problems
        .iter()
        .any(|p| p.code == ProblemCode::PR_1_TREAT_AS_DIRECTORY)
}

#[test]
fn block_mapped_directory_as_a_fifo() {
    assert!(directory_given_mode(
        &["-t", "ext2", "-b", "1024"],
        "010755"
    ));
}

#[test]
fn extent_mapped_directory_as_a_socket() {
    assert!(directory_given_mode(
        &["-t", "ext4", "-b", "4096"],
        "0140755"
    ));
}

#[test]
fn inline_directory_as_a_character_device() {
    assert!(directory_given_mode(
        &["-t", "ext4", "-b", "4096", "-O", "inline_data"],
        "020755"
    ));
}

/// A character device with one link and nothing past its fourth block word is taken as
/// a device, whatever its first block holds.
#[test]
fn block_mapped_directory_as_a_device_with_one_link() {
    let image = make_empty_image(&["-t", "ext2", "-b", "1024"], 8);
    for command in ["mkdir /d", "sif /d mode 020755", "sif /d links_count 1"] {
        debugfs(&image.path, command);
    }
    assert_agreement(&image.path, "/d a character device with one link");
    assert!(!forced_check(&image.path, None)
        .problems
        .iter()
        .any(|p| p.code == ProblemCode::PR_1_TREAT_AS_DIRECTORY));
}

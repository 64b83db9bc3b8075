//! Pass 1E's notes (`e2fsck_should_rebuild_extents`) against `e2fsck -fn`: a sound
//! extent tree whose entries would fit fewer leaves ("could be narrower") or fewer levels
//! ("could be shorter") is noted in pass 1 and the rebuild declined. The problems are
//! `PR_NO_OK`: the exit status stays 0. Files made sparse by debugfs (an extent per data
//! island) and punched by it (`ext2fs_punch` empties leaves but never lowers the tree).

mod common;

use std::path::Path;

use e4_fsck::ProblemCode;
use e4_testkit::make_empty_image;

use common::{assert_exit, run_debugfs};

/// A 1 KiB-block ext4 image holding `/f`: `islands` one-block data islands, each after a
/// one-block hole (an extent each), then punched over the logical `punches`.
fn punched_file(islands: usize, punches: &[(u64, u64)]) -> e4_testkit::Image {
    let image = make_empty_image(&["-t", "ext4", "-b", "1024"], 8);
    let host = tempfile::NamedTempFile::new().unwrap();
    let mut data = vec![0u8; islands * 2048];
    for island in 0..islands {
        data[island * 2048 + 1024..(island + 1) * 2048].fill(0x5a);
    }
    std::fs::write(host.path(), &data).unwrap();
    let mut commands = vec![format!("write {} f", host.path().display())];
    commands.extend(
        punches
            .iter()
            .map(|(first, last)| format!("punch f {first} {last}")),
    );
    run_debugfs(&image.path, &commands);
    image
}

fn noted(image: &Path, what: &str, code: ProblemCode) {
    let codes = assert_exit(image, what, 0);
    assert_eq!(codes, vec![code], "{what}");
}

#[test]
fn sound_trees_that_could_be_smaller_are_noted() {
    // Six extents: a leaf under the root (four slots); three left would fit the root.
    let image = punched_file(6, &[(0, 5)]);
    noted(
        &image.path,
        "three extents in one leaf",
        ProblemCode::PR_1E_CAN_COLLAPSE_EXTENT_TREE,
    );
    // A hundred extents: two leaves of a 1 KiB block (84 slots each); 5 and 10 left,
    // 151 slots free in all, more than a leaf holds.
    let image = punched_file(100, &[(10, 179)]);
    noted(
        &image.path,
        "two leaves nearly empty",
        ProblemCode::PR_1E_CAN_NARROW_EXTENT_TREE,
    );
    // Nothing to note: four extents left in one leaf do not fit the root's four slots
    // with room to spare (fewer than, not as many as).
    let image = punched_file(6, &[(0, 3)]);
    assert!(assert_exit(&image.path, "four extents in one leaf", 0).is_empty());
}

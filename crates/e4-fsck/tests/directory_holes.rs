//! Holes in directories, against `e2fsck -fn`: pass 1 lists every unmapped logical block
//! below a directory's last mapped one for pass 2, which asks to allocate each
//! (`PR_2_DIRECTORY_HOLE`, one report per block); a block-mapped directory's block 0 is
//! listed whatever else it maps (`process_block`), an extent-mapped one's only below a
//! later block. In an extent-mapped directory each extent past the block after the one
//! before is offered to be moved down (`PR_1_COLLAPSE_DBLOCK`). A hole where an htree
//! leaf should be is never read, so it has a bad min hash unless it is its node's first
//! child. Holes are made with debugfs's `punch`, which frees the blocks, so the damage
//! is the hole alone (and the entries it held, whose inodes are then unattached).

mod common;

use std::path::Path;

use e4_fsck::ProblemCode;
use e4_testkit::{make_image, Image, Profile};

use common::{assert_agreement, debugfs, forced_check};

/// Entries in /d: six 1 KiB blocks of them in a linear directory.
const ENTRIES: usize = 150;

const EXTENTS: Profile = Profile {
    name: "ext4-1k-linear-dirs",
    mke2fs_args: &[
        "-t",
        "ext4",
        "-b",
        "1024",
        "-O",
        "^metadata_csum,^dir_index",
    ],
    mke2fs_miscopies: &[],
};
const BLOCK_MAPS: Profile = Profile {
    name: "ext2-1k-linear-dirs",
    mke2fs_args: &["-t", "ext2", "-b", "1024", "-O", "^dir_index"],
    mke2fs_miscopies: &[],
};
/// `e2fsck -fyD` indexes /d: a root and leaves, one level.
const HTREE: Profile = Profile {
    name: "ext4-1k-htree",
    mke2fs_args: &["-t", "ext4", "-b", "1024", "-O", "^metadata_csum"],
    mke2fs_miscopies: &[],
};

/// An image of `profile` with the directory /d of six blocks or more and the empty
/// directory /e.
fn image(profile: &Profile) -> Image {
    let source = tempfile::tempdir().unwrap();
    std::fs::create_dir(source.path().join("d")).unwrap();
    std::fs::create_dir(source.path().join("e")).unwrap();
    for i in 0..ENTRIES {
        std::fs::write(
            source
                .path()
                .join(format!("d/entry_with_a_longish_name_{i:03}")),
            b"",
        )
        .unwrap();
    }
    let image = make_image(source.path(), profile, 8, 512);
    let blocks = debugfs(&image.path, "blocks /d");
    // Linear: six blocks; indexed: a root and leaves left with room.
    let count = blocks.split_whitespace().count();
    assert!(count >= 6, "{}: {blocks}", profile.name);
    image
}

/// Damages a fresh image of `profile` with the debugfs `commands`, requires agreement
/// and returns e4's codes.
fn damaged(profile: &Profile, commands: &[&str]) -> Vec<ProblemCode> {
    let image = image(profile);
    for command in commands {
        debugfs(&image.path, command);
    }
    let what = format!("{}: {}", profile.name, commands.join("; "));
    assert_agreement(&image.path, &what);
    problem_list(&image.path)
}

fn problem_list(image: &Path) -> Vec<ProblemCode> {
    forced_check(image, None)
        .problems
        .iter()
        .map(|p| p.code)
        .collect()
}

fn count(codes: &[ProblemCode], code: ProblemCode) -> usize {
    codes.iter().filter(|&&c| c == code).count()
}

const HOLE: ProblemCode = ProblemCode::PR_2_DIRECTORY_HOLE;
const COLLAPSE: ProblemCode = ProblemCode::PR_1_COLLAPSE_DBLOCK;

#[test]
fn undamaged_directories_are_clean() {
    for profile in [&EXTENTS, &BLOCK_MAPS, &HTREE] {
        assert_eq!(damaged(profile, &[]), [], "{}", profile.name);
    }
}

/// Two blocks punched: two holes, one extent to move down.
#[test]
fn hole_of_two_blocks() {
    let codes = damaged(&EXTENTS, &["punch /d 2 3"]);
    assert_eq!((count(&codes, HOLE), count(&codes, COLLAPSE)), (2, 1));
    let codes = damaged(&BLOCK_MAPS, &["punch /d 2 3"]);
    assert_eq!((count(&codes, HOLE), count(&codes, COLLAPSE)), (2, 0));
}

/// Block 0 punched: a hole either way, and `.` and `..` lost.
#[test]
fn hole_at_block_zero() {
    for profile in [&EXTENTS, &BLOCK_MAPS] {
        let codes = damaged(profile, &["punch /d 0 0"]);
        assert_eq!(count(&codes, HOLE), 1, "{}", profile.name);
        assert_eq!(
            count(&codes, COLLAPSE),
            usize::from(profile.name == EXTENTS.name),
            "{}",
            profile.name
        );
    }
}

/// A directory left without blocks: block 0 is a hole only in a block map.
#[test]
fn directory_without_blocks() {
    let codes = damaged(&EXTENTS, &["punch /e 0 0"]);
    assert!(codes.contains(&ProblemCode::PR_1_ZERO_LENGTH_DIR));
    assert_eq!(count(&codes, HOLE), 0);
    let codes = damaged(&BLOCK_MAPS, &["punch /e 0 0"]);
    assert!(codes.contains(&ProblemCode::PR_1_ZERO_LENGTH_DIR));
    assert_eq!(count(&codes, HOLE), 1);
}

/// Block 5 moved to block 9 (past `i_size`, six blocks): holes 5 to 8 (in the extent
/// tree, block 4 punched too, holes 4 to 8), and the size is wrong.
#[test]
fn hole_below_a_block_past_the_size() {
    // i_block words: the extent header, then (ee_block, ee_len and start_hi, start_lo)
    // per extent; after the punch the second extent is block 5.
    let codes = damaged(&EXTENTS, &["punch /d 4 4", "sif /d block[6] 9"]);
    assert_eq!((count(&codes, HOLE), count(&codes, COLLAPSE)), (5, 1));
    assert!(codes.contains(&ProblemCode::PR_1_BAD_I_SIZE));
    let image = image(&BLOCK_MAPS);
    let fifth = debugfs(&image.path, "bmap /d 5");
    let fifth = fifth.trim();
    debugfs(&image.path, "sif /d block[5] 0");
    debugfs(&image.path, &format!("sif /d block[9] {fifth}"));
    assert_agreement(&image.path, "block map: block 5 moved to 9");
    let codes = problem_list(&image.path);
    assert_eq!((count(&codes, HOLE), count(&codes, COLLAPSE)), (4, 0));
    assert!(codes.contains(&ProblemCode::PR_1_BAD_I_SIZE));
}

/// A hole where a leaf of the index should be: a bad min hash, except for the first
/// leaf, whose range starts where its node's does (then the index is not questioned).
#[test]
fn hole_in_an_htree_directory() {
    let codes = damaged(&HTREE, &["punch /d 2 2"]);
    assert_eq!((count(&codes, HOLE), count(&codes, COLLAPSE)), (1, 1));
    assert_eq!(count(&codes, ProblemCode::PR_2_HTREE_MIN_HASH), 1);
    // The question e2fsck asks after its last look at an index with such a problem.
    assert_eq!(count(&codes, ProblemCode::PR_2_HTREE_CLEAR), 1);
    let codes = damaged(&HTREE, &["punch /d 1 1"]);
    assert_eq!((count(&codes, HOLE), count(&codes, COLLAPSE)), (1, 1));
    assert_eq!(count(&codes, ProblemCode::PR_2_HTREE_MIN_HASH), 0);
    assert_eq!(count(&codes, ProblemCode::PR_2_HTREE_CLEAR), 0);
}

/// An extent moved to block 5,000: e2fsck prints each of the 4,996 holes (and, in
/// an indexed directory, each as not referenced); e4 prints the first 1,024 and folds
/// the rest into one report.
#[test]
fn far_hole_reports_are_folded() {
    let codes = damaged(&EXTENTS, &["punch /d 4 4", "sif /d block[6] 5000"]);
    assert_eq!((count(&codes, HOLE), count(&codes, COLLAPSE)), (1025, 1));
    // The same in an indexed directory: the holes no entry names are folded alike.
    let image = image(&HTREE);
    let list = extents(&image.path, "/d");
    let word = 3 + 3 * (list.len() - 1);
    debugfs(&image.path, &format!("sif /d block[{word}] 5000"));
    assert_agreement(&image.path, "htree extent moved to block 5,000");
    let codes = problem_list(&image.path);
    assert_eq!(count(&codes, HOLE), 1025);
    let moved = (list.last().unwrap().1 - list.last().unwrap().0 + 1) as usize;
    assert_eq!(count(&codes, ProblemCode::PR_2_HTREE_NOTREF), 1025 + moved);
}

/// The logical ranges of `path`'s extents, as debugfs's `stat` lists them.
fn extents(image: &Path, path: &str) -> Vec<(u32, u32)> {
    let text = debugfs(image, &format!("stat {path}"));
    let list = text.split("EXTENTS:").nth(1).unwrap();
    list.split(", ")
        .filter_map(|e| {
            let range = e.trim().strip_prefix('(')?.split(')').next()?;
            let mut ends = range.split('-').map(|n| n.parse::<u32>().unwrap());
            let start = ends.next()?;
            Some((start, ends.next().unwrap_or(start)))
        })
        .collect()
}

/// The root of an index at a hole: e2fsck keeps the index, never reads the root, and
/// finds every other block unreferenced, each leaf at the wrong depth (0) and hashing
/// past an empty range.
#[test]
fn htree_root_at_a_hole() {
    let image = image(&HTREE);
    let leaves = debugfs(&image.path, "blocks /d").split_whitespace().count() - 1;
    debugfs(&image.path, "punch /d 0 0");
    assert_agreement(&image.path, "htree root punched");
    let codes = problem_list(&image.path);
    assert!(codes.contains(&ProblemCode::PR_1_HTREE_BADROOT));
    for code in [
        ProblemCode::PR_2_HTREE_NOTREF,
        ProblemCode::PR_2_HTREE_BAD_DEPTH,
        ProblemCode::PR_2_HTREE_MAX_HASH,
    ] {
        assert_eq!(count(&codes, code), leaves, "{code:?}");
    }
}

/// The last extent of an indexed directory moved 12 blocks out: its old blocks are holes
/// the index names (each a bad min hash), and the new ones and the holes before them
/// are named by no entry (12 blocks not referenced, the moved leaves with a bad max
/// hash).
#[test]
fn htree_blocks_moved_past_the_index() {
    let image = image(&HTREE);
    let list = extents(&image.path, "/d");
    let (start, end) = *list.last().unwrap();
    assert!(start > 1, "{list:?}");
    let moved = (end - start + 1) as usize;
    // i_block words: the header (3), then 3 per extent, ee_block first.
    let word = 3 + 3 * (list.len() - 1);
    debugfs(&image.path, &format!("sif /d block[{word}] {}", start + 12));
    assert_agreement(&image.path, "htree extent moved 12 blocks out");
    let codes = problem_list(&image.path);
    assert_eq!((count(&codes, HOLE), count(&codes, COLLAPSE)), (12, 1));
    assert_eq!(count(&codes, ProblemCode::PR_2_HTREE_MIN_HASH), moved);
    assert_eq!(count(&codes, ProblemCode::PR_2_HTREE_NOTREF), 12);
    assert_eq!(count(&codes, ProblemCode::PR_2_HTREE_MAX_HASH), moved);
}

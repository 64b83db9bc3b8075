//! Pass 4 and pass 5 go over the inodes in parallel chunks of 4,096 and compare 64 at a
//! time (the in-use and directory bitmaps of `InodeStates`). These tests put damage where
//! a wrong split or a wrong shift would lose or move it: at both sides of a chunk
//! boundary, of a 64-inode word, of a group (whose 2,552 inodes are not a multiple of 64,
//! so every later group starts inside a word), and at the last inode in use. e4 must
//! report each one at its own inode, agree with e2fsck, and print the same at 1 and 4
//! threads.

mod common;

use std::collections::BTreeSet;
use std::fs;
use std::path::Path;

use e4_fsck::{check, Location, Options, ProblemCode};
use e4_testkit::{make_image, Image, Profile};

use common::{assert_agreement, debugfs, e2fsck_verdict, forced_check, inode_of};

/// 1 KiB blocks: 8 groups of 8,192 blocks in 64 MiB, and `-N 20400` gives 2,552 inodes
/// per group.
const SMALL_GROUPS: Profile = Profile {
    name: "ext4-1k-2552-inodes-per-group",
    mke2fs_args: &["-t", "ext4", "-b", "1024"],
    mke2fs_miscopies: &[],
};
const INODES_PER_GROUP: u32 = 2552;

/// 9,000 empty files and 40 directories: inodes 12 to 9,053 in use, over groups 0 to 3.
fn image_with_9053_inodes_in_use() -> (tempfile::TempDir, Image) {
    let source = tempfile::tempdir().unwrap();
    fs::create_dir(source.path().join("many")).unwrap();
    for i in 0..9000 {
        fs::write(source.path().join(format!("many/{i}")), b"").unwrap();
    }
    for i in 0..40 {
        fs::create_dir_all(source.path().join(format!("dirs/d{i}"))).unwrap();
    }
    let image = make_image(source.path(), &SMALL_GROUPS, 64, 20400);
    let stats = debugfs(&image.path, "stats");
    assert!(
        stats
            .lines()
            .any(|l| l.starts_with("Inodes per group:")
                && l.ends_with(&format!(" {INODES_PER_GROUP}"))),
        "mke2fs chose another layout:\n{stats}"
    );
    (source, image)
}

/// The inodes e4 reports `code` at, at `threads` threads.
fn reported_at(image: &Path, code: ProblemCode, threads: usize) -> BTreeSet<u32> {
    let options = Options {
        threads: Some(threads),
        force: true,
        ..Options::default()
    };
    check(image, &options)
        .unwrap()
        .problems
        .iter()
        .filter(|p| p.code == code)
        .map(|p| match p.location {
            Location::Inode(ino) => ino,
            other => panic!("{code} at {other:?}"),
        })
        .collect()
}

#[test]
fn link_counts_at_chunk_word_and_group_edges_are_each_found() {
    let (_source, image) = image_with_9053_inodes_in_use();
    // 64/65: a word edge; 2552/2553: group 0 to 1; 4096/4097 and 8192/8193: chunk
    // edges; 9053: the last inode in use.
    let damaged: BTreeSet<u32> = [64, 65, 2552, 2553, 4096, 4097, 8192, 8193, 9053].into();
    for ino in &damaged {
        debugfs(&image.path, &format!("sif <{ino}> links_count 3"));
    }
    assert_agreement(&image.path, "link counts at chunk edges");
    for threads in [1, 2, 4] {
        assert_eq!(
            reported_at(&image.path, ProblemCode::PR_4_BAD_REF_COUNT, threads),
            damaged,
            "at {threads} threads"
        );
    }
}

#[test]
fn inode_bitmap_bits_at_word_and_group_edges_are_each_found() {
    let (_source, image) = image_with_9053_inodes_in_use();
    let dir = inode_of(&image.path, "/dirs/d7");
    // mke2fs -d numbers a directory's entries right after it: the next inode is a file.
    let before_files = inode_of(&image.path, "/many");
    // In use, cleared on disk: two directories (so their group's directory count is
    // wrong too; a count that looked one inode off would miss the one followed by a
    // file), the last inode of group 0, the first of group 1 (inside a word: 2552 is not
    // a multiple of 64), and one word on. Unused, set on disk: two in group 3.
    let cleared: BTreeSet<u32> = [dir, before_files, 2552, 2553, 2553 + 64].into();
    let set: BTreeSet<u32> = [10200, 10208].into();
    for ino in &cleared {
        debugfs(&image.path, &format!("freei <{ino}>"));
    }
    for ino in &set {
        debugfs(&image.path, &format!("seti <{ino}>"));
    }
    assert_agreement(&image.path, "inode bitmap bits at word edges");
    for threads in [1, 2, 4] {
        assert_eq!(
            reported_at(&image.path, ProblemCode::PR_5_INODE_USED, threads),
            cleared,
            "at {threads} threads"
        );
        assert_eq!(
            reported_at(&image.path, ProblemCode::PR_5_INODE_UNUSED, threads),
            set,
            "at {threads} threads"
        );
    }
    let report = forced_check(&image.path, None);
    let dir_counts: Vec<Location> = report
        .problems
        .iter()
        .filter(|p| p.code == ProblemCode::PR_5_FREE_DIR_COUNT_GROUP)
        .map(|p| p.location)
        .collect();
    let groups: BTreeSet<Location> = [dir, before_files]
        .iter()
        .map(|ino| Location::Group((ino - 1) / INODES_PER_GROUP))
        .collect();
    assert_eq!(dir_counts, Vec::from_iter(groups));
    // The counts themselves, not only where they are wrong: e2fsck prints the same
    // "(on disk, counted=N)" for each group and the total.
    let oracle = e2fsck_verdict(&image.path).1.to_lowercase();
    let counts = [
        ProblemCode::PR_5_FREE_DIR_COUNT_GROUP,
        ProblemCode::PR_5_FREE_INODE_COUNT_GROUP,
        ProblemCode::PR_5_FREE_INODE_COUNT,
    ];
    for p in report.problems.iter().filter(|p| counts.contains(&p.code)) {
        assert!(
            oracle.contains(&p.message.to_lowercase()),
            "e2fsck does not say {:?}:\n{oracle}",
            p.message
        );
    }
}

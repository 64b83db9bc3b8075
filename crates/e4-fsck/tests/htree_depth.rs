//! htree roots (issue 9 §4), against `e2fsck -fn`. Depth: the root's `indirect_levels` rewritten
//! under a two-level tree and a one-level tree. e2fsck judges a block an interior node by
//! its content, so every leaf then lies at the wrong depth (`PR_2_HTREE_BAD_DEPTH`); a
//! root claiming more levels than allowed is also invalid (`PR_2_HTREE_BAD_ROOT`), and
//! pass 1 reports a depth past what any directory, or one this small without large_dir,
//! may have (`PR_1_HTREE_DEPTH`), and the missing large_dir feature. The rest of pass 1's
//! `handle_htree`: the root info (`PR_1_HTREE_BADROOT`, `_HASHV`, `_INCOMPAT`) and the
//! `INDEX_FL` flag on a file or without dir_index (`PR_1_HTREE_NODIR`, `_SET`). The
//! images are made by mke2fs from a generated tree; `e2fsck -fyD` indexes the
//! directories.

mod common;

use std::collections::BTreeSet;
use std::fs;
use std::path::Path;

use e4_fsck::{ProblemClass, ProblemCode};
use e4_testkit::{make_image, Profile};

use common::{assert_agreement, bmap, debugfs, forced_check, write_bytes};

/// Entries in the directory indexed with two levels: with 1 KiB blocks a full leaf holds
/// about 23 of these names and the root at most 123 leaves.
const DEEP_ENTRIES: usize = 3000;
/// Entries in the directory indexed with one level.
const SHALLOW_ENTRIES: usize = 200;
/// Byte offset of `indirect_levels` in block 0 (the root info starts at 24).
const INDIRECT_LEVELS_OFFSET: u64 = 30;

const NO_CSUM: Profile = Profile {
    name: "ext4-1k-no-csum",
    mke2fs_args: &["-t", "ext4", "-b", "1024", "-O", "^metadata_csum"],
    mke2fs_miscopies: &[],
};
const LARGE_DIR: Profile = Profile {
    name: "ext4-1k-large-dir",
    mke2fs_args: &["-t", "ext4", "-b", "1024", "-O", "^metadata_csum,large_dir"],
    mke2fs_miscopies: &[],
};

/// An image of `profile` holding /deep (two index levels) and /shallow (one).
fn htree_image(profile: &Profile) -> e4_testkit::Image {
    let source = tempfile::tempdir().unwrap();
    for (dir, entries) in [("deep", DEEP_ENTRIES), ("shallow", SHALLOW_ENTRIES)] {
        fs::create_dir(source.path().join(dir)).unwrap();
        for i in 0..entries {
            fs::write(
                source
                    .path()
                    .join(format!("{dir}/entry_with_a_longish_name_{i:04}")),
                b"",
            )
            .unwrap();
        }
    }
    let image = make_image(source.path(), profile, 16, 4096);
    for (dir, levels) in [("/deep", 1), ("/shallow", 0)] {
        let text = debugfs(&image.path, &format!("htree {dir}"));
        assert!(
            text.contains(&format!("Indirect levels: {levels}")),
            "{}: {dir} should have {levels} interior levels:\n{text}",
            profile.name
        );
    }
    image
}

/// Rewrites `dir`'s root to claim `levels`, requires agreement with e2fsck, and returns
/// the set of codes e4 reports.
fn claim_levels(image: &Path, pristine: &[u8], dir: &str, levels: u8) -> BTreeSet<ProblemCode> {
    fs::write(image, pristine).unwrap();
    let root = bmap(image, dir, 0);
    write_bytes(image, root * 1024 + INDIRECT_LEVELS_OFFSET, &[levels]);
    assert_agreement(image, &format!("{dir} claiming {levels} levels"));
    let report = forced_check(image, None);
    report.problems.iter().map(|p| p.code).collect()
}

#[test]
fn root_levels_that_disagree_with_the_tree() {
    use ProblemCode::*;
    let image = htree_image(&NO_CSUM);
    let pristine = fs::read(&image.path).unwrap();
    let classes = assert_agreement(&image.path, "undamaged");
    assert!(classes.is_empty(), "{classes:?}");
    // A leaf at the wrong depth also makes e2fsck ask to clear the index after its
    // last look at it (`PR_2_HTREE_CLEAR`).
    let cases: &[(&str, u8, &[ProblemCode])] = &[
        // Too few levels: the root's children are interior nodes by content, so the
        // leaves are one level deeper than claimed (not unreferenced).
        ("/deep", 0, &[PR_2_HTREE_BAD_DEPTH, PR_2_HTREE_CLEAR]),
        // Too many: the leaves of a one-level tree are not nodes, so they are too
        // shallow (their hashes are not read as an unordered index).
        ("/shallow", 1, &[PR_2_HTREE_BAD_DEPTH, PR_2_HTREE_CLEAR]),
        // More than a directory may have without large_dir: the root is invalid too, and
        // e2fsck -n still walks its index.
        (
            "/deep",
            2,
            &[PR_2_HTREE_BAD_ROOT, PR_2_HTREE_BAD_DEPTH, PR_2_HTREE_CLEAR],
        ),
        // Past two levels: pass 1 reports the depth for a directory this small, and
        // the missing large_dir feature.
        (
            "/deep",
            3,
            &[
                PR_1_HTREE_DEPTH,
                PR_2_FEATURE_LARGE_DIRS,
                PR_2_HTREE_BAD_ROOT,
                PR_2_HTREE_BAD_DEPTH,
                PR_2_HTREE_CLEAR,
            ],
        ),
    ];
    for &(dir, levels, expected) in cases {
        let codes = claim_levels(&image.path, &pristine, dir, levels);
        assert_eq!(
            codes,
            expected.iter().copied().collect(),
            "{dir} claiming {levels} levels"
        );
    }
}

/// Past `EXT4_HTREE_LEVEL` (3) e2fsck's pass 1 reports the depth twice: as too deep for
/// any directory, and as too deep for one this small without large_dir.
#[test]
fn root_claiming_four_levels_is_too_deep_twice() {
    let image = htree_image(&NO_CSUM);
    let pristine = fs::read(&image.path).unwrap();
    claim_levels(&image.path, &pristine, "/deep", 4);
    let report = forced_check(&image.path, None);
    let depth_reports = report
        .problems
        .iter()
        .filter(|p| p.code == ProblemCode::PR_1_HTREE_DEPTH)
        .count();
    assert_eq!(depth_reports, 2, "{:?}", report.problems);
}

/// With large_dir three index levels are allowed: a root claiming three over a two-level
/// tree is not invalid, but its leaves are at the wrong depth.
#[test]
fn large_dir_allows_three_levels_but_not_the_wrong_depth() {
    let image = htree_image(&LARGE_DIR);
    let pristine = fs::read(&image.path).unwrap();
    let codes = claim_levels(&image.path, &pristine, "/deep", 2);
    assert_eq!(
        codes,
        [
            ProblemCode::PR_2_HTREE_BAD_DEPTH,
            ProblemCode::PR_2_HTREE_CLEAR
        ]
        .into_iter()
        .collect()
    );
    let classes = assert_agreement(&image.path, "large_dir, three levels claimed");
    assert_eq!(classes, [ProblemClass::Htree].into_iter().collect());
}

/// Byte offsets in block 0 of the root info fields other than the depth.
const RESERVED_ZERO_OFFSET: u64 = 24;
const HASH_VERSION_OFFSET: u64 = 28;
const INFO_LENGTH_OFFSET: u64 = 29;
const UNUSED_FLAGS_OFFSET: u64 = 31;

/// Each root info field e2fsck's pass 1 checks, damaged in /shallow: both checkers agree
/// and e4 reports exactly e2fsck's codes for it.
#[test]
fn root_info_damage() {
    use ProblemCode::*;
    let image = htree_image(&NO_CSUM);
    let pristine = fs::read(&image.path).unwrap();
    let cases: &[(&str, u64, u8, &[ProblemCode])] = &[
        (
            "unknown hash version",
            HASH_VERSION_OFFSET,
            9,
            &[PR_1_HTREE_HASHV],
        ),
        // The unsigned variants are the superblock's choice; a root may not name them.
        (
            "unsigned half-MD4 named on disk",
            HASH_VERSION_OFFSET,
            4,
            &[PR_1_HTREE_HASHV],
        ),
        (
            "incompatible flag",
            UNUSED_FLAGS_OFFSET,
            1,
            &[PR_1_HTREE_INCOMPAT],
        ),
        (
            "reserved word not zero",
            RESERVED_ZERO_OFFSET,
            1,
            &[PR_1_HTREE_BADROOT, PR_2_HTREE_BAD_ROOT],
        ),
        (
            "info length 4",
            INFO_LENGTH_OFFSET,
            4,
            &[PR_1_HTREE_BADROOT, PR_2_HTREE_BAD_ROOT],
        ),
    ];
    for &(name, offset, value, expected) in cases {
        fs::write(&image.path, &pristine).unwrap();
        let root = bmap(&image.path, "/shallow", 0);
        write_bytes(&image.path, root * 1024 + offset, &[value]);
        assert_agreement(&image.path, name);
        let report = forced_check(&image.path, None);
        let codes: BTreeSet<ProblemCode> = report.problems.iter().map(|p| p.code).collect();
        assert_eq!(codes, expected.iter().copied().collect(), "{name}");
    }
}

/// `INDEX_FL` on a regular file, and on directories of a filesystem whose dir_index
/// feature was cleared (e2fsck -n then still checks them as indexed).
#[test]
fn index_flag_on_a_file_or_without_the_feature() {
    let image = htree_image(&NO_CSUM);
    let pristine = fs::read(&image.path).unwrap();
    debugfs(
        &image.path,
        "sif /shallow/entry_with_a_longish_name_0001 flags 0x81000",
    );
    assert_agreement(&image.path, "INDEX_FL on a file");
    let report = forced_check(&image.path, None);
    assert!(
        report
            .problems
            .iter()
            .any(|p| p.code == ProblemCode::PR_1_HTREE_NODIR),
        "{:?}",
        report.problems
    );
    fs::write(&image.path, &pristine).unwrap();
    debugfs(&image.path, "feature -dir_index");
    let classes = assert_agreement(&image.path, "dir_index cleared");
    assert_eq!(classes, [ProblemClass::Htree].into_iter().collect());
    let report = forced_check(&image.path, None);
    let set = report
        .problems
        .iter()
        .filter(|p| p.code == ProblemCode::PR_1_HTREE_SET)
        .count();
    assert_eq!(set, 2, "{:?}", report.problems);
}

/// An index entry naming a block past the directory's end: `PR_2_HTREE_BADBLK`, the entry
/// skipped (the leaf it named is then unreferenced). Found by random flips in a
/// kernel-written image, where e4 reported only the unreferenced leaf.
#[test]
fn index_entry_past_the_directory() {
    let image = htree_image(&NO_CSUM);
    let root = bmap(&image.path, "/shallow", 0);
    // dx_root entries start at 0x20 (limit, count, block 0); entry 1's block at 0x2C.
    write_bytes(&image.path, root * 1024 + 0x2C, &5000u32.to_le_bytes());
    assert_agreement(&image.path, "index entry past the end");
    let report = forced_check(&image.path, None);
    let codes: BTreeSet<ProblemCode> = report.problems.iter().map(|p| p.code).collect();
    assert!(codes.contains(&ProblemCode::PR_2_HTREE_BADBLK), "{codes:?}");
}

//! Interior htree nodes in pass 2, against `e2fsck -fn`, report by report: e2fsck parses
//! every block with an interior node's content (`parse_int_node`), named by an index
//! entry or not, and carries the lowest hash of a node's first leaf and the highest of
//! its last up to the node (`update_parents`), where it compares them with the range
//! the node's own entry gives it. The directory is /deep (two index
//! levels, 1 KiB blocks, at least three nodes), damaged in its root's entries.

mod common;

use std::collections::BTreeSet;
use std::fs;
use std::path::Path;

use e4_fsck::ProblemCode;
use e4_testkit::{make_image, Profile};

use common::{
    assert_agreement, bmap, debugfs, e2fsck_verdict, forced_check, read_bytes, write_bytes,
};

const NO_CSUM: Profile = Profile {
    name: "ext4-1k-no-csum",
    mke2fs_args: &["-t", "ext4", "-b", "1024", "-O", "^metadata_csum"],
    mke2fs_miscopies: &[],
};
/// Byte offset of the root's first index entry (after `.`, `..`, the root info and the
/// count/limit header, which holds entry 0's block).
const ROOT_ENTRIES: u64 = 0x20;

/// An image holding /deep, indexed with two levels.
fn deep_image() -> e4_testkit::Image {
    let source = tempfile::tempdir().unwrap();
    fs::create_dir(source.path().join("deep")).unwrap();
    for i in 0..4000 {
        let name = format!("deep/entry_with_a_name_long_enough_to_fill_leaves_fast_{i:04}");
        fs::write(source.path().join(name), b"").unwrap();
    }
    let image = make_image(source.path(), &NO_CSUM, 16, 4096);
    let text = debugfs(&image.path, "htree /deep");
    assert!(text.contains("Indirect levels: 1"), "{text}");
    let root = bmap(&image.path, "/deep", 0) * 1024 + ROOT_ENTRIES;
    let count = u16::from_le_bytes(read_bytes(&image.path, root + 2, 2).try_into().unwrap());
    assert!(count >= 3, "the root should name at least 3 nodes: {count}");
    image
}

/// The root's entry `i`: (hash, block), entry 0's hash being 0.
fn root_entry(image: &Path, i: u64) -> (u32, u32) {
    let root = bmap(image, "/deep", 0) * 1024 + ROOT_ENTRIES;
    let raw = read_bytes(image, root + 8 * i, 8);
    let word = |at: usize| u32::from_le_bytes(raw[at..at + 4].try_into().unwrap());
    (if i == 0 { 0 } else { word(0) }, word(4))
}

fn set_root_hash(image: &Path, i: u64, hash: u32) {
    let root = bmap(image, "/deep", 0) * 1024 + ROOT_ENTRIES;
    write_bytes(image, root + 8 * i, &hash.to_le_bytes());
}

fn set_root_block(image: &Path, i: u64, block: u32) {
    let root = bmap(image, "/deep", 0) * 1024 + ROOT_ENTRIES;
    write_bytes(image, root + 8 * i + 4, &block.to_le_bytes());
}

/// The htree reports that name a block ("block #N has bad min hash", "block #N not
/// referenced", ...), from e2fsck's text and from e4's messages: both must name the
/// same blocks with the same problems.
fn block_reports<'a>(lines: impl Iterator<Item = &'a str>) -> BTreeSet<String> {
    lines
        .filter(|line| line.contains("HTREE directory inode"))
        .filter_map(|line| line.split("block #").nth(1))
        .map(|rest| format!("block #{rest}").trim_end_matches('.').to_string())
        .collect()
}

/// Requires agreement on classes and on every block-naming htree report; returns e4's
/// codes.
fn agree_report_by_report(image: &Path, what: &str) -> BTreeSet<ProblemCode> {
    assert_agreement(image, what);
    let (_, text) = e2fsck_verdict(image);
    let report = forced_check(image, None);
    let ours = block_reports(report.problems.iter().map(|p| &*p.message));
    assert_eq!(ours, block_reports(text.lines()), "{what}:\n{text}");
    report.problems.iter().map(|p| p.code).collect()
}

/// The root's second entry promises hashes from its next entry's on: the node it names
/// holds lower ones, which its first leaf hands up to it, so the node (not the leaf)
/// has a bad min hash.
#[test]
fn node_below_its_range() {
    let image = deep_image();
    let (next_hash, _) = root_entry(&image.path, 2);
    set_root_hash(&image.path, 1, next_hash);
    let codes = agree_report_by_report(&image.path, "second root entry raised");
    assert!(
        codes.contains(&ProblemCode::PR_2_HTREE_MIN_HASH),
        "{codes:?}"
    );
}

/// The root's second entry lowered to 2: the first node's range now ends at 2, but its
/// next sibling's first leaf moves that bound to its own lowest hash
/// (`update_parents`' `dx_previous->node_max_hash`), so nothing is out of range.
#[test]
fn lowered_bound_moved_back_by_the_next_node() {
    let image = deep_image();
    set_root_hash(&image.path, 1, 2);
    let codes = agree_report_by_report(&image.path, "second root entry lowered");
    assert!(codes.is_empty(), "{codes:?}");
}

/// The root's third entry names the second's node as well: that node is referenced
/// twice and the third node by nothing, yet it is still parsed, so its leaves stay
/// referenced, at the right depth.
#[test]
fn unreferenced_node_is_parsed() {
    let image = deep_image();
    let (_, second) = root_entry(&image.path, 1);
    set_root_block(&image.path, 2, second);
    let codes = agree_report_by_report(&image.path, "third root entry naming the second node");
    assert!(codes.contains(&ProblemCode::PR_2_HTREE_NOTREF), "{codes:?}");
    assert!(codes.contains(&ProblemCode::PR_2_HTREE_DUPREF), "{codes:?}");
    assert!(
        !codes.contains(&ProblemCode::PR_2_HTREE_BAD_DEPTH),
        "{codes:?}"
    );
}

/// An unreferenced node's entries are checked: one naming a block past the directory
/// is a bad block number.
#[test]
fn unreferenced_node_with_a_bad_entry() {
    let image = deep_image();
    let (_, second) = root_entry(&image.path, 1);
    let (_, third) = root_entry(&image.path, 2);
    set_root_block(&image.path, 2, second);
    let node = bmap(&image.path, "/deep", u64::from(third));
    // Entry 1's block (after the fake entry, count/limit and entry 0).
    write_bytes(&image.path, node * 1024 + 8 + 12, &999_999u32.to_le_bytes());
    let codes = agree_report_by_report(&image.path, "unreferenced node naming a far block");
    assert!(codes.contains(&ProblemCode::PR_2_HTREE_BADBLK), "{codes:?}");
}

/// A count past the block's capacity, in the root and in a node: e2fsck reports it
/// (`PR_2_HTREE_BAD_COUNT`) and reads the entries up to the capacity, whose stale zeros
/// are out of order.
#[test]
fn count_past_the_capacity() {
    let image = deep_image();
    let pristine = fs::read(&image.path).unwrap();
    let (_, second) = root_entry(&image.path, 1);
    let node = bmap(&image.path, "/deep", u64::from(second));
    let root = bmap(&image.path, "/deep", 0);
    // (where the count is, the block's capacity)
    for (what, at, capacity) in [
        ("root", root * 1024 + ROOT_ENTRIES + 2, (1024 - 0x20) / 8),
        ("node", node * 1024 + 8 + 2, (1024 - 8) / 8),
    ] {
        fs::write(&image.path, &pristine).unwrap();
        write_bytes(&image.path, at, &(capacity as u16 + 1).to_le_bytes());
        assert_agreement(&image.path, what);
        let (_, text) = e2fsck_verdict(&image.path);
        assert!(text.contains("has invalid count"), "{what}:\n{text}");
        let report = forced_check(&image.path, None);
        assert!(
            report
                .problems
                .iter()
                .any(|p| p.code == ProblemCode::PR_2_HTREE_BAD_COUNT),
            "{what}: {:?}",
            report.problems
        );
    }
}

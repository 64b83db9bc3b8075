//! The extent tree against a model (a map of logical block → (physical, unwritten)), with an
//! independent checker of every on-disk rule after each step.

use std::cell::Cell;
use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;

use super::*;
use crate::io::meta_io::memory::MemoryMetaIo;

const OWNER: Owner = Owner {
    ino: 12,
    generation: 7,
};
/// A block size that gives 5 entries per node, so small tests reach deep trees.
const TINY_BLOCK: usize = 76;

type Model = BTreeMap<u32, (u64, bool)>;

fn new_root() -> [u8; I_BLOCK_SIZE] {
    let mut root = [0u8; I_BLOCK_SIZE];
    ExtentTree::init_empty(&mut root);
    root
}

fn extent(logical: u32, len: u32, physical: u64, unwritten: bool) -> Extent {
    Extent {
        logical,
        len,
        physical,
        unwritten,
    }
}

/// What the checker found: the mapping block by block, and the tree's shape.
struct Checked {
    mapping: Model,
    depth: u16,
    extents: usize,
}

/// Walks the tree from raw bytes with `ExtentNode::parse` and checks every rule of
/// write-path.md §1 that the tree code must keep, independently of the tree code itself.
fn check(root: &[u8; I_BLOCK_SIZE], io: &MemoryMetaIo) -> Checked {
    let cap = ((io.block_size - 12) / 12) as u64;
    let root_node = ExtentNode::parse(root, Location::Inode(OWNER.ino)).expect("root parses");
    assert_eq!(root_node.header.max, 4, "root eh_max");
    let depth = root_node.header.depth;
    assert!(depth <= 4, "depth {depth} over e2fsck's limit");
    if depth > 0 {
        assert!(root_node.header.entries > 0, "empty root of depth {depth}");
    }
    // Per level: (entries, slots as e2fsck counts them).
    let mut levels = vec![(0u64, 0u64); usize::from(depth) + 1];
    let mut nodes = BTreeSet::new();
    let mut mapping = Model::new();
    let mut extents = 0;
    let mut last_end = 0u64;
    walk(
        &root_node,
        root,
        None,
        (0, u64::MAX),
        io,
        &mut levels,
        &mut nodes,
        &mut mapping,
        &mut extents,
        &mut last_end,
    );
    // Every allocated block is a node of this tree: nothing leaked.
    let allocated: BTreeSet<u64> = io.allocated.lock().unwrap().clone();
    assert_eq!(
        allocated, nodes,
        "allocated blocks are exactly the tree's nodes"
    );
    // e2fsck_should_rebuild_extents.
    for (i, &(entries, slots)) in levels.iter().enumerate() {
        assert!(
            slots - entries <= cap,
            "level {i} could be narrower: {entries} entries in {slots} slots"
        );
        for (j, &(_, above)) in levels[..i].iter().enumerate() {
            assert!(
                entries >= above,
                "level {i} could be shorter: {entries} entries, level {j} has {above} slots"
            );
        }
    }
    Checked {
        mapping,
        depth,
        extents,
    }
}

#[allow(clippy::too_many_arguments)]
fn walk(
    node: &ExtentNode,
    bytes: &[u8],
    block: Option<u64>,
    range: (u64, u64),
    io: &MemoryMetaIo,
    levels: &mut Vec<(u64, u64)>,
    nodes: &mut BTreeSet<u64>,
    mapping: &mut Model,
    extents: &mut usize,
    last_end: &mut u64,
) {
    let level = levels.len() - 1 - usize::from(node.header.depth);
    let entries = u64::from(node.header.entries);
    let mut slots = u64::from(node.header.max);
    if block.is_some() {
        assert_eq!(
            usize::from(node.header.max),
            (io.block_size - 12) / 12,
            "block node eh_max"
        );
        assert!(entries > 0, "empty non-root node {block:?}");
        if entries < slots {
            slots -= 1;
        }
    }
    levels[level].0 += entries;
    levels[level].1 += slots;
    // Unused slots are zero (up to the tail, which the engine seals).
    let used_end = 12 * (1 + entries as usize);
    let slots_end = 12 * (1 + usize::from(node.header.max));
    assert!(
        bytes[used_end..slots_end].iter().all(|&b| b == 0),
        "unused slots of node {block:?} are not zero"
    );
    assert_eq!(node.header.generation, 0);
    match &node.entries {
        ExtentEntries::Leaf(leaves) => {
            for leaf in leaves {
                let e = leaf.extent();
                assert!(e.len > 0);
                assert!(
                    u64::from(e.logical) >= *last_end,
                    "extents overlap or unordered"
                );
                assert!(
                    u64::from(e.logical) >= range.0,
                    "extent before its index key"
                );
                assert!(end_of(&e) <= range.1, "extent past the next index key");
                *last_end = end_of(&e);
                *extents += 1;
                for k in 0..e.len {
                    mapping.insert(e.logical + k, (e.physical + u64::from(k), e.unwritten));
                }
            }
        }
        ExtentEntries::Index(indexes) => {
            for (i, index) in indexes.iter().enumerate() {
                assert_eq!(index.unused, 0);
                let child_nr = index.leaf();
                assert!(nodes.insert(child_nr), "node {child_nr} referenced twice");
                let (kind, child_bytes) = io.blocks.lock().unwrap()[&child_nr].clone();
                assert_eq!(kind, BlockKind::ExtentNode);
                let child = ExtentNode::parse(&child_bytes, Location::Block(child_nr))
                    .expect("node parses");
                assert_eq!(child.header.depth + 1, node.header.depth, "child depth");
                let first = match &child.entries {
                    ExtentEntries::Leaf(l) => l.first().map(|e| e.block),
                    ExtentEntries::Index(x) => x.first().map(|e| e.block),
                };
                assert_eq!(first, Some(index.block), "index key != child's first key");
                let next = indexes.get(i + 1).map_or(range.1, |n| u64::from(n.block));
                assert!(u64::from(index.block) < next, "index keys not increasing");
                walk(
                    &child,
                    &child_bytes,
                    Some(child_nr),
                    (u64::from(index.block), next),
                    io,
                    levels,
                    nodes,
                    mapping,
                    extents,
                    last_end,
                );
            }
        }
    }
}

/// A store whose allocations can be made to fail after a number of successes.
struct FailingAllocations<'a> {
    inner: &'a MemoryMetaIo,
    allocations_left: Cell<usize>,
}

impl MetaIo for FailingAllocations<'_> {
    fn block_size(&self) -> usize {
        self.inner.block_size()
    }
    fn visit(
        &self,
        nr: u64,
        kind: BlockKind,
        owner: Owner,
        look: &mut dyn FnMut(&[u8]) -> Result<()>,
    ) -> Result<()> {
        self.inner.visit(nr, kind, owner, look)
    }
    fn write(&self, nr: u64, kind: BlockKind, owner: Owner, bytes: &[u8]) -> Result<()> {
        self.inner.write(nr, kind, owner, bytes)
    }
    fn allocate(&self, goal: u64, owner: Owner) -> Result<u64> {
        let left = self.allocations_left.get();
        if left == 0 {
            return Err(Error::NoSpace(crate::error::Shortage::Blocks));
        }
        self.allocations_left.set(left - 1);
        self.inner.allocate(goal, owner)
    }
    fn free(&self, start: u64, len: u64, owner: Owner) -> Result<()> {
        self.inner.free(start, len, owner)
    }
}

type Snapshot = (
    [u8; I_BLOCK_SIZE],
    BTreeMap<u64, (BlockKind, Vec<u8>)>,
    BTreeSet<u64>,
);

fn snapshot(root: &[u8; I_BLOCK_SIZE], io: &MemoryMetaIo) -> Snapshot {
    (
        *root,
        io.blocks.lock().unwrap().clone(),
        io.allocated.lock().unwrap().clone(),
    )
}

/// Appends `count` one-block extents that cannot merge (a physical gap between each).
fn append_unmergeable(tree: &mut ExtentTree, from: u32, count: u32) {
    for i in from..from + count {
        tree.insert(extent(2 * i, 1, 10_000 + 4 * u64::from(i), false))
            .unwrap();
    }
}

#[test]
fn empty_tree_maps_nothing() {
    let io = MemoryMetaIo::new(1024, 100, 1000);
    let mut root = new_root();
    let tree = ExtentTree::new(&mut root, &io, OWNER);
    assert_eq!(tree.find(0).unwrap(), None);
    assert_eq!(tree.next_extent(0).unwrap(), None);
    assert!(tree.extents().unwrap().is_empty());
    assert_eq!(check(&root, &io).depth, 0);
}

#[test]
fn adjacent_extents_merge_up_to_the_length_cap() {
    let io = MemoryMetaIo::new(1024, 100, 1000);
    let mut root = new_root();
    let mut tree = ExtentTree::new(&mut root, &io, OWNER);
    tree.insert(extent(10, 5, 500, false)).unwrap();
    // Right neighbour of the existing extent, physically contiguous: merges left.
    tree.insert(extent(15, 5, 505, false)).unwrap();
    // Left of it: merges right.
    tree.insert(extent(0, 10, 490, false)).unwrap();
    assert_eq!(tree.extents().unwrap(), vec![extent(0, 20, 490, false)]);
    // Contiguous but unwritten: a different state does not merge.
    tree.insert(extent(20, 4, 510, true)).unwrap();
    // Bridging two extents merges all three.
    tree.insert(extent(30, 2, 600, false)).unwrap();
    tree.insert(extent(24, 6, 514, true)).unwrap();
    assert_eq!(
        tree.extents().unwrap(),
        vec![
            extent(0, 20, 490, false),
            extent(20, 10, 510, true),
            extent(30, 2, 600, false)
        ]
    );
    // Written extents merge up to 32768 blocks, unwritten up to 32767.
    tree.insert(extent(100, 32767, 100_000, false)).unwrap();
    tree.insert(extent(32867, 1, 132_767, false)).unwrap();
    tree.insert(extent(32868, 1, 132_768, false)).unwrap();
    tree.insert(extent(40_000, 32766, 200_000, true)).unwrap();
    tree.insert(extent(72_766, 1, 232_766, true)).unwrap();
    tree.insert(extent(72_767, 1, 232_767, true)).unwrap();
    let all = tree.extents().unwrap();
    assert_eq!(
        all[3..],
        [
            extent(100, 32768, 100_000, false),
            extent(32868, 1, 132_768, false),
            extent(40_000, 32767, 200_000, true),
            extent(72_767, 1, 232_767, true),
        ]
    );
    check(&root, &io);
}

#[test]
fn overlapping_insert_fails_and_changes_nothing() {
    let io = MemoryMetaIo::new(TINY_BLOCK, 100, 1000);
    let mut root = new_root();
    let mut tree = ExtentTree::new(&mut root, &io, OWNER);
    append_unmergeable(&mut tree, 0, 30);
    let before = tree.extents().unwrap();
    for bad in [
        extent(0, 1, 5, false),
        extent(57, 3, 5, false),
        extent(1, 2, 5, false),
    ] {
        assert!(
            matches!(tree.insert(bad), Err(Error::Invalid(_))),
            "{bad:?}"
        );
    }
    assert!(matches!(
        tree.insert(extent(u32::MAX, 2, 5, false)),
        Err(Error::FileTooBig(_))
    ));
    assert!(tree.insert(extent(500, 32768, 5, true)).is_err());
    assert_eq!(tree.extents().unwrap(), before);
    check(&root, &io);
}

/// Physical blocks the tree already uses (an extent of the leaf the insert lands in, a node
/// block on its path) are refused as corruption, and nothing changes: a bitmap that lost
/// the bit of one of the file's own blocks must not cross-link the file with itself
/// (issue 22, item 2). Planted bug: no check, and the inserts succeed.
#[test]
fn an_insert_of_blocks_the_tree_already_uses_is_corruption() {
    let io = MemoryMetaIo::new(TINY_BLOCK, 100, 1000);
    let mut root = new_root();
    let mut tree = ExtentTree::new(&mut root, &io, OWNER);
    append_unmergeable(&mut tree, 0, 30);
    let before = tree.extents().unwrap();
    // The newest node block: the rightmost leaf or an index node above it, on the path of
    // an insert past the last extent.
    let node_block = *io.allocated.lock().unwrap().last().expect("a tree block");
    let last = *before.last().unwrap();
    let new_logical = last.logical + last.len + 5;
    for physical in [
        last.physical,
        last.physical + u64::from(last.len) - 1,
        node_block,
    ] {
        let got = tree.insert(extent(new_logical, 1, physical, false));
        assert_corrupt(&got, |p| matches!(p, Problem::BlockReferencedTwice { .. }));
    }
    assert_eq!(tree.extents().unwrap(), before);
    check(&root, &io);
}

/// Asserts that `got` failed as corruption whose problem `is` accepts.
fn assert_corrupt(got: &Result<()>, is: impl Fn(&Problem) -> bool) {
    assert!(
        matches!(got, Err(Error::Format(FormatError::Corrupt { problem, .. })) if is(problem)),
        "{got:?}"
    );
}

/// A root leaf holding `extents` as given, in order or not.
fn root_holding(extents: &[Extent]) -> [u8; I_BLOCK_SIZE] {
    let mut root = new_root();
    Node {
        block: None,
        depth: 0,
        max: ROOT_MAX_ENTRIES,
        extents: extents.to_vec(),
        indexes: Vec::new(),
    }
    .encode(&mut root);
    root
}

/// An append that merges into the root's last extent, done where the entry lies, refuses
/// what the general path refuses: blocks an earlier extent of the root maps (corruption,
/// nothing changed), and a root whose entries overlap (plants: either check dropped from
/// `merged_in_root_leaf`: the append merges and this test fails).
#[test]
fn an_append_merging_in_the_root_refuses_what_an_insert_refuses() {
    let io = MemoryMetaIo::new(1024, 100, 1000);
    let (a, b) = (extent(0, 2, 500, false), extent(10, 2, 498, false));
    let mut root = root_holding(&[a, b]);
    let mut tree = ExtentTree::new(&mut root, &io, OWNER);
    // Continues `b` physically (498..500 then 500..503), and 500 is `a`'s.
    let got = tree.insert(extent(12, 3, 500, false));
    assert_corrupt(&got, |p| matches!(p, Problem::BlockReferencedTwice { .. }));
    assert_eq!(tree.extents().unwrap(), vec![a, b]);
    // A root whose extents overlap is corrupt, whatever the append would merge into.
    let overlapping = [extent(0, 5, 700, false), extent(3, 2, 800, false)];
    let mut root = root_holding(&overlapping);
    let mut tree = ExtentTree::new(&mut root, &io, OWNER);
    let got = tree.insert(extent(5, 1, 802, false));
    assert_corrupt(&got, |p| matches!(p, Problem::ExtentsOverlap));
    // And the merge itself, written and unwritten, reads back as the general path writes it.
    for unwritten in [false, true] {
        let first = extent(0, 2, 900, unwritten);
        let mut root = root_holding(&[first]);
        let mut tree = ExtentTree::new(&mut root, &io, OWNER);
        tree.insert(extent(2, 3, 902, unwritten)).unwrap();
        assert_eq!(tree.extents().unwrap(), vec![extent(0, 5, 900, unwritten)]);
    }
}

#[test]
fn unwritten_extent_converts_in_three_parts_then_merges() {
    let io = MemoryMetaIo::new(1024, 100, 1000);
    let mut root = new_root();
    let mut tree = ExtentTree::new(&mut root, &io, OWNER);
    tree.insert(extent(0, 100, 1000, true)).unwrap();
    tree.mark_written(40, 10).unwrap();
    assert_eq!(
        tree.extents().unwrap(),
        vec![
            extent(0, 40, 1000, true),
            extent(40, 10, 1040, false),
            extent(50, 50, 1050, true)
        ]
    );
    // Converting the left part merges it with the written middle.
    tree.mark_written(0, 40).unwrap();
    assert_eq!(
        tree.extents().unwrap(),
        vec![extent(0, 50, 1000, false), extent(50, 50, 1050, true)]
    );
    // The rest, over a hole at the end of the range: one written extent.
    tree.mark_written(50, 1000).unwrap();
    assert_eq!(tree.extents().unwrap(), vec![extent(0, 100, 1000, false)]);
    check(&root, &io);
}

#[test]
fn next_extent_crosses_leaves() {
    let io = MemoryMetaIo::new(TINY_BLOCK, 100, 1000);
    let mut root = new_root();
    let mut tree = ExtentTree::new(&mut root, &io, OWNER);
    append_unmergeable(&mut tree, 0, 40);
    assert!(check(&root, &io).depth >= 2);
    let tree = ExtentTree::new(&mut root, &io, OWNER);
    for logical in 0..79 {
        let next = tree.next_extent(logical).unwrap().unwrap();
        assert_eq!(next.logical, logical.next_multiple_of(2));
        assert_eq!(tree.find(logical).unwrap().is_some(), logical % 2 == 0);
    }
    assert_eq!(tree.next_extent(79).unwrap(), None);
}

/// Maps logical blocks `0..blocks` to physical `1_000_000..`, in extents as long as the
/// format allows.
fn map_contiguously(tree: &mut ExtentTree, blocks: u32) {
    let mut logical = 0;
    while logical < blocks {
        let len = (blocks - logical).min(32768);
        tree.insert(extent(logical, len, 1_000_000 + u64::from(logical), false))
            .unwrap();
        logical += len;
    }
}

#[test]
fn an_operation_on_a_tree_past_the_shape_bound_reads_a_path_not_the_tree() {
    // 1 KiB blocks: 84 entries per node. Punching every other block of 80,000 leaves 40,000
    // extents in about 480 leaves, past SHAPE_KEPT_UP_TO_NODES; each punch that splits a
    // leaf used to walk the whole tree to judge its shape, so the punches cost time
    // quadratic in the extents.
    let io = MemoryMetaIo::new(1024, 1 << 40, 1 << 41);
    let mut root = new_root();
    let mut tree = ExtentTree::new(&mut root, &io, OWNER);
    let blocks: u32 = 80_000;
    map_contiguously(&mut tree, blocks);
    let mut most_reads = 0;
    for hole in (1..blocks).step_by(2) {
        let before = io.reads.load(std::sync::atomic::Ordering::Relaxed);
        tree.remove(hole, 1).unwrap();
        let reads = io.reads.load(std::sync::atomic::Ordering::Relaxed) - before;
        if io.live_blocks() > SHAPE_KEPT_UP_TO_NODES {
            most_reads = most_reads.max(reads);
        }
    }
    assert!(io.live_blocks() > SHAPE_KEPT_UP_TO_NODES + 100);
    // A path is 3 nodes; a punch reads it a few times over (find, split, remove), and the
    // shape survey stops at the interior nodes.
    assert!(
        most_reads <= 24,
        "a punch read {most_reads} blocks of a {}-block tree",
        io.live_blocks()
    );
    // Random punches in the now large tree, each removing a whole extent: the tree still
    // maps exactly what is left, whatever its shape.
    let mut model: BTreeSet<u32> = (0..blocks).step_by(2).collect();
    let mut rng = 0x2545_f491_4f6c_dd1d_u64;
    for _ in 0..3000 {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        let hole = (rng % u64::from(blocks)) as u32 & !1;
        let runs = tree.remove(hole, 1).unwrap();
        assert_eq!(runs.len(), usize::from(model.remove(&hole)));
    }
    let mapped: BTreeSet<u32> = tree
        .extents()
        .unwrap()
        .iter()
        .flat_map(|e| e.logical..e.logical + e.len)
        .collect();
    assert_eq!(mapped, model);
}

#[test]
fn punching_every_other_block_grows_to_depth_3_and_removal_empties_it() {
    // 1 KiB blocks: 84 entries per node, so depth 3 needs more than 4 × 84 × 84 extents.
    let io = MemoryMetaIo::new(1024, 1 << 40, 1 << 41);
    let mut root = new_root();
    let mut tree = ExtentTree::new(&mut root, &io, OWNER);
    let blocks: u32 = 60_000;
    map_contiguously(&mut tree, blocks);
    let mut freed = 0;
    for hole in (1..blocks).step_by(2) {
        let runs = tree.remove(hole, 1).unwrap();
        assert_eq!(runs, vec![(1_000_000 + u64::from(hole), 1)]);
        freed += 1;
    }
    let nodes = tree.node_blocks_change();
    let checked = check(&root, &io);
    assert_eq!(checked.depth, 3);
    assert_eq!(checked.extents, 30_000);
    assert_eq!(checked.mapping.len(), (blocks - freed) as usize);
    assert!(checked
        .mapping
        .iter()
        .all(|(&l, &(p, w))| l % 2 == 0 && p == 1_000_000 + u64::from(l) && !w));
    assert_eq!(nodes, io.live_blocks() as i64);
    // Truncate to half, then to nothing: nodes freed, root back to depth 0.
    let mut tree = ExtentTree::new(&mut root, &io, OWNER);
    let runs = tree.remove(blocks / 2, u64::MAX).unwrap();
    assert_eq!(runs.len(), 15_000);
    let after_half = tree.node_blocks_change();
    assert!(after_half < 0);
    check(&root, &io);
    let mut tree = ExtentTree::new(&mut root, &io, OWNER);
    let runs = tree.remove(0, u64::MAX).unwrap();
    assert_eq!(runs.len(), 15_000);
    assert_eq!(io.live_blocks(), 0);
    assert_eq!(check(&root, &io).depth, 0);
    assert_eq!(root, new_root());
}

#[test]
fn no_space_mid_insert_leaves_the_tree_unchanged() {
    let io = MemoryMetaIo::new(TINY_BLOCK, 100, 10_000);
    let failing = FailingAllocations {
        inner: &io,
        allocations_left: Cell::new(usize::MAX),
    };
    let mut root = new_root();
    let mut tree = ExtentTree::new(&mut root, &failing, OWNER);
    // 4 full leaves of 5 under a full root: the next insert must grow and split (2 blocks).
    append_unmergeable(&mut tree, 0, 20);
    assert_eq!(check(&root, &io).depth, 1);
    for (new, allowed) in [
        (extent(1, 1, 50_000, false), 0),
        (extent(1, 1, 50_000, false), 1),
        (extent(100, 1, 50_000, false), 1),
    ] {
        let before = snapshot(&root, &io);
        failing.allocations_left.set(allowed);
        let mut tree = ExtentTree::new(&mut root, &failing, OWNER);
        assert!(matches!(tree.insert(new), Err(Error::NoSpace(_))));
        assert_eq!(tree.node_blocks_change(), 0);
        assert!(
            snapshot(&root, &io) == before,
            "{new:?} with {allowed} blocks"
        );
    }
    failing.allocations_left.set(2);
    let mut tree = ExtentTree::new(&mut root, &failing, OWNER);
    tree.insert(extent(1, 1, 50_000, false)).unwrap();
    assert_eq!(tree.node_blocks_change(), 2);
    assert_eq!(check(&root, &io).depth, 2);
}

#[test]
fn no_space_when_punching_or_converting_inside_an_extent_keeps_the_mapping() {
    let io = MemoryMetaIo::new(TINY_BLOCK, 100, 10_000);
    let failing = FailingAllocations {
        inner: &io,
        allocations_left: Cell::new(usize::MAX),
    };
    let mut root = new_root();
    let mut tree = ExtentTree::new(&mut root, &failing, OWNER);
    append_unmergeable(&mut tree, 0, 19);
    tree.insert(extent(100, 50, 90_000, true)).unwrap();
    let before = check(&root, &io).mapping;
    let snap = snapshot(&root, &io);
    failing.allocations_left.set(0);
    let mut tree = ExtentTree::new(&mut root, &failing, OWNER);
    assert!(matches!(tree.remove(110, 5), Err(Error::NoSpace(_))));
    assert!(snapshot(&root, &io) == snap);
    let mut tree = ExtentTree::new(&mut root, &failing, OWNER);
    assert!(matches!(tree.mark_written(110, 5), Err(Error::NoSpace(_))));
    assert_eq!(check(&root, &io).mapping, before);
}

#[test]
fn conversion_that_runs_out_of_blocks_between_edges_keeps_mapping_and_shape() {
    let mut failures = 0;
    for (prefix, run, allowed) in
        (5..30).flat_map(|p| (0..5).flat_map(move |r| (0..4).map(move |a| (p, r, a))))
    {
        let io = MemoryMetaIo::new(TINY_BLOCK, 100, 10_000);
        let failing = FailingAllocations {
            inner: &io,
            allocations_left: Cell::new(usize::MAX),
        };
        let mut root = new_root();
        let mut tree = ExtentTree::new(&mut root, &failing, OWNER);
        append_unmergeable(&mut tree, 0, prefix);
        for run in 0..5 {
            tree.insert(extent(
                100 + 20 * run,
                20,
                90_000 + 40 * u64::from(run),
                true,
            ))
            .unwrap();
        }
        let before = check(&root, &io).mapping;
        let live_before = io.live_blocks() as i64;
        failing.allocations_left.set(allowed);
        let mut tree = ExtentTree::new(&mut root, &failing, OWNER);
        let start = 105 + 20 * run;
        let result = tree.mark_written(start, 10);
        let change = tree.node_blocks_change();
        let after = check(&root, &io).mapping;
        assert_eq!(io.live_blocks() as i64, live_before + change);
        match result {
            Err(Error::NoSpace(_)) => {
                failures += 1;
                assert_eq!(after, before, "allowed {allowed}");
            }
            Ok(()) => assert!((start..start + 10).all(|l| !after[&l].1)),
            Err(other) => panic!("{other}"),
        }
    }
    assert!(failures > 0, "no allowance made the conversion fail");
}

#[test]
fn corrupt_nodes_are_errors_not_panics() {
    let io = MemoryMetaIo::new(TINY_BLOCK, 100, 10_000);
    let mut root = new_root();
    let mut tree = ExtentTree::new(&mut root, &io, OWNER);
    append_unmergeable(&mut tree, 0, 10);
    // A child whose depth disagrees with its parent.
    let child = io.allocated.lock().unwrap().iter().next().copied().unwrap();
    let mut bytes = io.blocks.lock().unwrap()[&child].1.clone();
    bytes[6] = 3;
    io.write(child, BlockKind::ExtentNode, OWNER, &bytes)
        .unwrap();
    let mut tree = ExtentTree::new(&mut root, &io, OWNER);
    assert!(matches!(tree.find(0), Err(Error::Format(_))));
    assert!(tree.insert(extent(1, 1, 5, false)).is_err());
    // A root with a bad magic.
    let mut bad = [0u8; I_BLOCK_SIZE];
    let tree = ExtentTree::new(&mut bad, &io, OWNER);
    let err = tree.find(0).unwrap_err();
    assert!(err.to_string().contains("inode 12"), "{err}");
}

/// A leaf that disagrees with the index entry naming it (its depth, its first key) is
/// corrupt, whether the whole tree is read (`extents`) or only surveyed for its shape after
/// a removal elsewhere.
#[test]
fn a_child_that_disagrees_with_its_index_entry_is_corrupt() {
    // (byte of the first leaf to change, its new value, what the error says)
    let damages: [(usize, u8, &str); 2] = [
        (6, 1, "under a node of depth 1"),
        (12, 1, "but its index key is 0"),
    ];
    for (at, value, says) in damages {
        let io = MemoryMetaIo::new(TINY_BLOCK, 100, 10_000);
        let mut root = new_root();
        let mut tree = ExtentTree::new(&mut root, &io, OWNER);
        append_unmergeable(&mut tree, 0, 10);
        assert_eq!(check(&root, &io).depth, 1);
        // The first leaf holds extents at blocks 0, 2, 4, ...: a first key of 1 keeps it
        // in order but no longer at its index key, 0.
        let first_leaf = *io.allocated.lock().unwrap().iter().next().unwrap();
        let mut bytes = io.blocks.lock().unwrap()[&first_leaf].1.clone();
        bytes[at] = value;
        io.write(first_leaf, BlockKind::ExtentNode, OWNER, &bytes)
            .unwrap();
        let mut tree = ExtentTree::new(&mut root, &io, OWNER);
        let whole = tree.extents().unwrap_err().to_string();
        assert!(whole.contains(says), "{whole}");
        // The last extent, in the last leaf: the survey afterwards reads the first leaf.
        let surveyed = tree.remove(18, 1).unwrap_err().to_string();
        assert!(surveyed.contains(says), "{surveyed}");
    }
}

/// The model after moving every block at or after `from` by `distance` (down or up).
fn shifted(model: &Model, from: u32, distance: u32, up: bool) -> Model {
    model
        .iter()
        .map(|(&l, &v)| match l >= from {
            true if up => (l + distance, v),
            true => (l - distance, v),
            false => (l, v),
        })
        .collect()
}

/// Shifts `from` by `distance` both ways on a tree of `count` unmergeable one-block extents
/// (at even blocks) and checks mapping, keys and shape after each.
fn shift_round_trip(block_size: usize, count: u32, from: u32, distance: u32) -> u16 {
    let io = MemoryMetaIo::new(block_size, 100, 1 << 30);
    let mut root = new_root();
    let mut tree = ExtentTree::new(&mut root, &io, OWNER);
    append_unmergeable(&mut tree, 0, count);
    let before = check(&root, &io);
    let mut tree = ExtentTree::new(&mut root, &io, OWNER);
    tree.shift(from, None, distance, ShiftDirection::Up)
        .unwrap();
    let up = check(&root, &io);
    assert_eq!(up.mapping, shifted(&before.mapping, from, distance, true));
    assert_eq!(up.extents, before.extents);
    let mut tree = ExtentTree::new(&mut root, &io, OWNER);
    tree.shift(from + distance, None, distance, ShiftDirection::Down)
        .unwrap();
    let down = check(&root, &io);
    assert_eq!(down.mapping, before.mapping);
    before.depth
}

#[test]
fn shifting_moves_every_later_extent_and_key_at_depths_0_1_and_2() {
    // 3 extents: depth 0. 20 with 5 per node: depth 1. 60: depth 2.
    for (count, depth) in [(3, 0), (20, 1), (60, 2)] {
        for from in [
            0,
            1,
            2,
            9,
            10,
            11,
            2 * count - 2,
            2 * count - 1,
            2 * count + 5,
        ] {
            for distance in [1, 6, 1000] {
                let got = shift_round_trip(TINY_BLOCK, count, from, distance);
                assert_eq!(got, depth, "{count} extents");
            }
        }
    }
}

#[test]
fn shifting_down_into_mapped_blocks_or_below_zero_fails_and_changes_nothing() {
    let io = MemoryMetaIo::new(TINY_BLOCK, 100, 1 << 30);
    let mut root = new_root();
    let mut tree = ExtentTree::new(&mut root, &io, OWNER);
    append_unmergeable(&mut tree, 0, 30);
    let before = snapshot(&root, &io);
    for (from, distance) in [(10, 2), (11, 1), (3, 4), (12, 3)] {
        let mut tree = ExtentTree::new(&mut root, &io, OWNER);
        let got = tree.shift(from, None, distance, ShiftDirection::Down);
        assert!(
            matches!(got, Err(Error::Invalid(_))),
            "{from} by {distance}: {got:?}"
        );
        assert!(snapshot(&root, &io) == before);
    }
    let mut tree = ExtentTree::new(&mut root, &io, OWNER);
    // The last extent is block 58: it may move to 2^32 - 2, not to 2^32 - 1.
    let limit = u32::MAX - 58;
    assert!(matches!(
        tree.shift(0, None, limit, ShiftDirection::Up),
        Err(Error::Invalid(_))
    ));
    assert!(snapshot(&root, &io) == before);
    let mut tree = ExtentTree::new(&mut root, &io, OWNER);
    tree.shift(0, None, limit - 1, ShiftDirection::Up).unwrap();
    assert_eq!(
        tree.find(u32::MAX - 1).unwrap().unwrap().logical,
        u32::MAX - 1
    );
    check(&root, &io);
}

#[test]
fn shifting_up_from_inside_an_extent_splits_it_and_down_merges_it_again() {
    let io = MemoryMetaIo::new(TINY_BLOCK, 100, 1 << 30);
    let mut root = new_root();
    let mut tree = ExtentTree::new(&mut root, &io, OWNER);
    // A depth-1 tree whose last leaf (with room: the halves stay in one leaf, where they
    // can merge again) ends in a 100-block written extent.
    append_unmergeable(&mut tree, 0, 16);
    tree.insert(extent(100, 100, 50_000, false)).unwrap();
    let before = check(&root, &io);
    let mut tree = ExtentTree::new(&mut root, &io, OWNER);
    tree.shift(150, None, 7, ShiftDirection::Up).unwrap();
    assert_eq!(
        tree.find(149).unwrap(),
        Some(extent(100, 50, 50_000, false))
    );
    assert_eq!(tree.find(150).unwrap(), None);
    assert_eq!(
        tree.find(157).unwrap(),
        Some(extent(157, 50, 50_050, false))
    );
    let up = check(&root, &io);
    assert_eq!(up.extents, before.extents + 1);
    assert_eq!(up.mapping, shifted(&before.mapping, 150, 7, true));
    // Closing the hole makes the halves adjacent again: they merge back into one extent.
    let mut tree = ExtentTree::new(&mut root, &io, OWNER);
    tree.shift(157, None, 7, ShiftDirection::Down).unwrap();
    assert_eq!(
        tree.find(150).unwrap(),
        Some(extent(100, 100, 50_000, false))
    );
    let down = check(&root, &io);
    assert_eq!(down.extents, before.extents);
    assert_eq!(down.mapping, before.mapping);
}

#[test]
fn shifting_a_depth_2_tree_from_the_middle_of_an_index_node() {
    // 1 KiB blocks, every other block mapped: 84 per leaf, depth 2 past 4 × 84 extents.
    let io = MemoryMetaIo::new(1024, 100, 1 << 30);
    let mut root = new_root();
    let mut tree = ExtentTree::new(&mut root, &io, OWNER);
    append_unmergeable(&mut tree, 0, 2000);
    let before = check(&root, &io);
    assert_eq!(before.depth, 2);
    for from in [1, 777, 2001, 3999] {
        let mut tree = ExtentTree::new(&mut root, &io, OWNER);
        tree.shift(from, None, 123_457, ShiftDirection::Up).unwrap();
        let up = check(&root, &io);
        assert_eq!(up.mapping, shifted(&before.mapping, from, 123_457, true));
        let mut tree = ExtentTree::new(&mut root, &io, OWNER);
        tree.shift(from + 123_457, None, 123_457, ShiftDirection::Down)
            .unwrap();
        assert_eq!(check(&root, &io).mapping, before.mapping);
    }
}

/// A shift made in pieces (of whole leaves, as fallocate's steps make them, or cut inside
/// leaves), up from the last piece and down from the first, ends where one shift ends, and the tree between two pieces
/// is valid (`check`: keys, order and shape) with the blocks moved so far where they went.
#[test]
fn a_shift_in_pieces_of_leaves_ends_as_one_shift_and_is_valid_between_them() {
    const DISTANCE: u32 = 50_001;
    for count in [40u32, 2000] {
        let io = MemoryMetaIo::new(1024, 100, 1 << 30);
        let mut root = new_root();
        let mut tree = ExtentTree::new(&mut root, &io, OWNER);
        append_unmergeable(&mut tree, 0, count);
        let before = check(&root, &io);
        for from in [0, 1, 3, 2 * count / 3 + 1] {
            let tree = ExtentTree::new(&mut root, &io, OWNER);
            let starts = tree.leaf_starts(from).unwrap();
            assert!(starts.iter().all(|&s| s > from), "{starts:?} from {from}");
            assert!(starts.windows(2).all(|w| w[0] < w[1]), "{starts:?}");
            // Pieces of two leaves (from..s1, s1..s3, ..., the last to the end), and pieces
            // cut inside leaves.
            let by_leaves: Vec<u32> = starts.iter().copied().skip(1).step_by(2).collect();
            let inside: Vec<u32> = (1..)
                .map(|k| from + 333 * k)
                .take_while(|&b| b < 2 * count)
                .collect();
            for bounds in [by_leaves, inside] {
                let lows: Vec<u32> = std::iter::once(from)
                    .chain(bounds.iter().copied())
                    .collect();
                let highs: Vec<Option<u32>> =
                    bounds.iter().copied().map(Some).chain([None]).collect();
                let mut up = before.mapping.clone();
                for (&low, &high) in lows.iter().zip(&highs).rev() {
                    let mut tree = ExtentTree::new(&mut root, &io, OWNER);
                    tree.shift(low, high, DISTANCE, ShiftDirection::Up).unwrap();
                    up = up
                        .into_iter()
                        .map(|(l, v)| match l >= low && high.is_none_or(|h| l < h) {
                            true => (l + DISTANCE, v),
                            false => (l, v),
                        })
                        .collect();
                    assert_eq!(check(&root, &io).mapping, up, "up, piece from {low}");
                }
                assert_eq!(up, shifted(&before.mapping, from, DISTANCE, true));
                for (&low, &high) in lows.iter().zip(&highs) {
                    let mut tree = ExtentTree::new(&mut root, &io, OWNER);
                    let moved = |b: u32| b + DISTANCE;
                    tree.shift(moved(low), high.map(moved), DISTANCE, ShiftDirection::Down)
                        .unwrap();
                    check(&root, &io);
                }
                assert_eq!(check(&root, &io).mapping, before.mapping, "from {from}");
            }
        }
        assert!(before.depth >= 1);
    }
}

/// Leaf starts out of order across two interior nodes (each node's own keys in order, so
/// reading the nodes finds nothing) are refused, so no shift piece ends before it starts.
#[test]
fn leaf_starts_out_of_order_across_nodes_are_refused() {
    let io = MemoryMetaIo::new(1024, 100, 1 << 30);
    let mut root = new_root();
    let mut tree = ExtentTree::new(&mut root, &io, OWNER);
    // Two interior nodes of 84 leaves of 84 extents at most: over 7,056 extents.
    append_unmergeable(&mut tree, 0, 8000);
    assert_eq!(check(&root, &io).depth, 2);
    assert!(
        u16::from_le_bytes([root[2], root[3]]) >= 2,
        "one interior node"
    );
    let key_at = |bytes: &[u8], i: usize| {
        u32::from_le_bytes(bytes[12 + 12 * i..16 + 12 * i].try_into().unwrap())
    };
    // The first interior node's last key, raised past the second node's first.
    let child = u32::from_le_bytes(root[16..20].try_into().unwrap()) as u64;
    let second_key = key_at(&root, 1);
    let mut bytes = io.blocks.lock().unwrap()[&child].1.clone();
    let entries = usize::from(u16::from_le_bytes([bytes[2], bytes[3]]));
    let last = 12 + 12 * (entries - 1);
    bytes[last..last + 4].copy_from_slice(&(second_key + 5).to_le_bytes());
    io.write(child, BlockKind::ExtentNode, OWNER, &bytes)
        .unwrap();
    let tree = ExtentTree::new(&mut root, &io, OWNER);
    let refused = tree.leaf_starts(0).unwrap_err().to_string();
    assert!(refused.contains("not strictly increasing"), "{refused}");
}

/// One step of the model test.
#[derive(Debug, Clone)]
enum Op {
    Insert {
        logical: u32,
        len: u32,
        unwritten: bool,
        /// Physically continue the block before `logical` when it is mapped (to merge).
        contiguous: bool,
    },
    Remove {
        logical: u32,
        len: u32,
    },
    MarkWritten {
        logical: u32,
        len: u32,
    },
    Shift {
        from: u32,
        distance: u32,
        up: bool,
    },
}

fn op(space: u32) -> impl Strategy<Value = Op> {
    prop_oneof![
        5 => (0..space, 1..12u32, any::<bool>(), any::<bool>()).prop_map(
            |(logical, len, unwritten, contiguous)| Op::Insert { logical, len, unwritten, contiguous }
        ),
        2 => (0..space, 1..40u32).prop_map(|(logical, len)| Op::Remove { logical, len }),
        1 => (0..space, 1..300u32).prop_map(|(logical, len)| Op::Remove { logical, len }),
        2 => (0..space, 1..40u32).prop_map(|(logical, len)| Op::MarkWritten { logical, len }),
        1 => (0..space, 1..60u32, any::<bool>())
            .prop_map(|(from, distance, up)| Op::Shift { from, distance, up }),
    ]
}

fn run_model(block_size: usize, ops: Vec<Op>) {
    let io = MemoryMetaIo::new(block_size, 1 << 40, 1 << 41);
    let mut root = new_root();
    let mut model = Model::new();
    let mut next_physical = 1_000_000u64;
    let mut node_blocks = 0i64;
    for op in ops {
        let mut tree = ExtentTree::new(&mut root, &io, OWNER);
        match op {
            Op::Insert {
                logical,
                len,
                unwritten,
                contiguous,
            } => {
                // Blocks the file maps already are never given to it twice: the tree
                // refuses a block already on its path, and a model that did so (two runs
                // in one range, or a run continuing one whose next blocks a shift had
                // moved elsewhere in the file) failed one seed in many.
                let free = |start: u64| {
                    !model
                        .values()
                        .any(|&(q, _)| (start..start + u64::from(len)).contains(&q))
                };
                let physical = match model.get(&logical.wrapping_sub(1)) {
                    Some(&(p, _)) if contiguous && free(p + 1) => p + 1,
                    _ => {
                        next_physical += 1 << 20;
                        next_physical
                    }
                };
                let mapped = (logical..logical + len).any(|l| model.contains_key(&l));
                let result = tree.insert(extent(logical, len, physical, unwritten));
                assert_eq!(result.is_err(), mapped, "{result:?}");
                if !mapped {
                    for k in 0..len {
                        model.insert(logical + k, (physical + u64::from(k), unwritten));
                    }
                }
            }
            Op::Remove { logical, len } => {
                let runs = tree.remove(logical, u64::from(len)).unwrap();
                let mut expected = Vec::new();
                for l in logical..logical + len {
                    if let Some((p, _)) = model.remove(&l) {
                        expected.push(p);
                    }
                }
                let got: Vec<u64> = runs.iter().flat_map(|&(p, n)| p..p + n).collect();
                assert_eq!(got, expected);
            }
            Op::MarkWritten { logical, len } => {
                tree.mark_written(logical, u64::from(len)).unwrap();
                for l in logical..logical + len {
                    if let Some(entry) = model.get_mut(&l) {
                        entry.1 = false;
                    }
                }
            }
            Op::Shift { from, distance, up } => {
                let fits = up
                    || (from >= distance
                        && !(from - distance..from).any(|l| model.contains_key(&l)));
                let direction = if up {
                    ShiftDirection::Up
                } else {
                    ShiftDirection::Down
                };
                let result = tree.shift(from, None, distance, direction);
                assert_eq!(result.is_ok(), fits, "{result:?}");
                if fits {
                    model = shifted(&model, from, distance, up);
                }
            }
        }
        node_blocks += tree.node_blocks_change();
        let checked = check(&root, &io);
        assert_eq!(checked.mapping, model);
        assert_eq!(node_blocks, io.live_blocks() as i64, "tree block count");
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn matches_the_model_with_tiny_nodes(ops in prop::collection::vec(op(600), 1..300)) {
        run_model(TINY_BLOCK, ops);
    }

    #[test]
    fn matches_the_model_with_1k_blocks(ops in prop::collection::vec(op(3000), 1..300)) {
        run_model(1024, ops);
    }
}

/// What a lookup of a hole says of the block before it is what a lookup of that block
/// finds, in a tree of several levels: mapped (with the physical block after it) or
/// unmapped (plant: `Mapped` reporting the extent's last block instead of the one after
/// it: caught here).
#[test]
fn a_hole_lookup_tells_what_maps_the_block_before_it() {
    let io = MemoryMetaIo::new(TINY_BLOCK, 100, 1000);
    let mut root = new_root();
    let mut tree = ExtentTree::new(&mut root, &io, OWNER);
    // Pairs of blocks (unmergeable with each other) with a gap of one or three after each.
    for i in 0..40u32 {
        let logical = 4 * i + i % 2;
        tree.insert(extent(logical, 2, 20_000 + 8 * u64::from(i), i % 4 == 1))
            .unwrap();
    }
    assert!(check(&root, &io).depth >= 2);
    let tree = ExtentTree::new(&mut root, &io, OWNER);
    let (mut mapped, mut unmapped, mut unknown) = (0, 0, 0);
    for logical in 1..200u64 {
        let Lookup::Hole { previous, .. } = tree.lookup(logical).unwrap() else {
            continue;
        };
        let truth = tree.find((logical - 1) as u32).unwrap();
        match (previous, truth) {
            (Previous::Mapped { after }, Some(e)) => {
                assert_eq!(after, e.physical + (logical - 1 - u64::from(e.logical)) + 1);
                mapped += 1;
            }
            (Previous::Unmapped, None) => unmapped += 1,
            (Previous::Unknown, _) => unknown += 1,
            (said, truth) => panic!("block {logical}: the walk said {said:?}, {truth:?} maps it"),
        }
    }
    assert!(
        mapped > 10 && unmapped > 10,
        "{mapped} mapped, {unmapped} unmapped"
    );
    assert!(unknown < mapped, "{unknown} unknown");
}

//! Walking an extent tree as e2fsck's `scan_extent_node` does: every entry's physical start
//! and end inside the filesystem, logical order without overlap, each index entry matching
//! its child's first extent, children inside their parent's range, node headers and
//! checksums. An entry with a problem is skipped (not claimed, not counted), as `-n` leaves
//! it. Index nodes with several children are walked in parallel, so one file with a million
//! extents spreads over every thread; under bigalloc, where whether a cluster is claimed
//! depends on the extent before it, in order on one thread.

use rayon::prelude::*;

use e4_format::checksum::inode_csum_seed;
use e4_format::extent::{ExtentEntries, ExtentNode, ENTRY_SIZE};
use e4_format::inode::Inode;
use e4_format::{FormatError, Location as FormatLocation, MetadataBlock};

use crate::report::problem::{Location, ProblemCode};
use crate::state::block_claim::BlockWalk;
use crate::state::block_tally::BlockTally;
use crate::walk::too_big::{self, TooBig};

/// Node fan-out at which children are handed to other threads.
const PARALLEL_FANOUT: usize = 4;

/// Facts about the inode every node needs.
#[derive(Debug, Clone, Copy)]
struct TreeInfo {
    dir: bool,
    too_big: TooBig,
    /// Last logical block inside `i_size` (e2fsck's `eof_lblk`), or none for size 0.
    eof_block: Option<u64>,
    /// The per-inode checksum seed, under metadata_csum.
    csum_seed: Option<u32>,
    /// The root's depth: a node of depth `d` lies `root_depth - d` levels below it.
    root_depth: u16,
}

/// Walks the extent tree rooted in `inode`'s `i_block`.
pub fn walk_extent_tree(walk: &BlockWalk<'_>, inode: &Inode, dir: bool) -> BlockTally {
    let loc = Location::Inode(walk.ino);
    let root = match ExtentNode::parse(&inode.record.block, FormatLocation::Inode(walk.ino)) {
        Ok(root) => root,
        Err(e) => {
            walk.report(
                ProblemCode::PR_1_MISSING_EXTENT_HEADER,
                loc,
                format!(
                    "inode {} has corrupt extent header: {}",
                    walk.ino,
                    reason(&e)
                ),
            );
            return BlockTally::default();
        }
    };
    let block_size = u64::from(walk.ctx.block_size());
    let size = inode.size();
    let info = TreeInfo {
        dir,
        too_big: TooBig::for_inode(walk, inode),
        eof_block: size.div_ceil(block_size).checked_sub(1),
        csum_seed: walk
            .ctx
            .csum_seed
            .map(|seed| inode_csum_seed(seed, walk.ino, inode.record.generation)),
        root_depth: root.header.depth,
    };
    // The root's range ends at i_size, in blocks (ext2fs_extent_open's end_blk).
    let root_end = size.div_ceil(block_size);
    let mut tally = BlockTally {
        // A root alone (depth 0) is never noted: no counts for it.
        extent_levels: (root.header.depth > 0).then(Box::default),
        ..BlockTally::default()
    };
    walk_node(walk, &info, &root, 0, None, root_end, &mut tally);
    // After the walk's own problems, as `check_blocks_extents` ends.
    let shape = tally.extent_levels.take().and_then(|mut levels| {
        levels.add_node(0, root.header.entries, root.header.max);
        levels.optimization(root.header.depth, walk.ctx.block_size())
    });
    if let Some((code, level)) = shape {
        let how = if code == ProblemCode::PR_1E_CAN_NARROW_EXTENT_TREE {
            "narrower"
        } else {
            "shorter"
        };
        walk.report(
            code,
            loc,
            format!(
                "inode {} extent tree (at level {level}) could be {how}",
                walk.ino
            ),
        );
    }
    tally
}

/// Walks one node. `start_block` is the smallest logical block allowed; `end_block` the
/// last one allowed (none for the root, as in e2fsck); `node_end` is where the last index
/// entry's range ends. Returns whether the node had a problem.
fn walk_node(
    walk: &BlockWalk<'_>,
    info: &TreeInfo,
    node: &ExtentNode,
    mut start_block: u64,
    end_block: Option<u64>,
    node_end: u64,
    tally: &mut BlockTally,
) -> bool {
    let ctx = walk.ctx;
    let ino = walk.ino;
    let mut had_problem = false;
    match &node.entries {
        ExtentEntries::Leaf(leaves) => {
            let mut previous_last: Option<u64> = None;
            for leaf in leaves {
                let e = leaf.extent();
                let lblk = u64::from(e.logical);
                let len = u64::from(e.len);
                let last = (lblk + len).saturating_sub(1);
                let problem = if e.physical == 0 || !ctx.is_valid_block(e.physical) {
                    Some(ProblemCode::PR_1_EXTENT_BAD_START_BLK)
                } else if lblk < start_block {
                    Some(ProblemCode::PR_1_OUT_OF_ORDER_EXTENTS)
                } else if end_block.is_some_and(|end| last > end)
                    && !(info.eof_block.is_none_or(|eof| last > eof) && e.unwritten)
                {
                    Some(ProblemCode::PR_1_EXTENT_END_OUT_OF_BOUNDS)
                } else if len == 0 {
                    Some(ProblemCode::PR_1_EXTENT_LENGTH_ZERO)
                } else if !ctx.is_valid_range(e.physical, len) {
                    Some(ProblemCode::PR_1_EXTENT_ENDS_BEYOND)
                } else if info.too_big.extent_too_big(lblk, len) {
                    Some(ProblemCode::PR_1_TOOBIG_DIR)
                } else if previous_last.is_some_and(|p| lblk <= p) {
                    Some(ProblemCode::PR_1_EXTENT_COLLISION)
                } else {
                    None
                };
                if let Some(code) = problem {
                    had_problem = true;
                    if code == ProblemCode::PR_1_TOOBIG_DIR {
                        too_big::report(walk, code, Some(lblk + len), e.physical);
                        continue;
                    }
                    walk.report(
                        code,
                        Location::Inode(ino),
                        format!(
                            "inode {ino} has an invalid extent (logical block {lblk}, physical block {}, len {len})",
                            e.physical
                        ),
                    );
                    continue;
                }

                if info.dir && e.unwritten {
                    had_problem = true;
                    walk.report(
                        ProblemCode::PR_1_UNINIT_DBLOCK,
                        Location::Inode(ino),
                        format!(
                            "directory inode {ino} has extent marked uninitialized at block {lblk}"
                        ),
                    );
                }
                walk.claim_extent(lblk, e.physical, len, tally);
                tally.add_data(lblk, e.physical, len, !e.unwritten, info.dir);
                start_block = last;
                previous_last = Some(last);
            }
        }
        ExtentEntries::Index(indexes) => {
            // Order and bounds first, in entry order; then the children, in parallel.
            let mut children = Vec::with_capacity(indexes.len());
            for (i, index) in indexes.iter().enumerate() {
                let lblk = u64::from(index.block);
                let child_end = indexes
                    .get(i + 1)
                    .map_or(node_end, |next| u64::from(next.block));
                let last = child_end.saturating_sub(1);
                let physical = index.leaf();
                let problem = if physical == 0 || !ctx.is_valid_block(physical) {
                    Some(ProblemCode::PR_1_EXTENT_BAD_START_BLK)
                } else if lblk < start_block {
                    Some(ProblemCode::PR_1_OUT_OF_ORDER_EXTENTS)
                } else if end_block.is_some_and(|end| last > end) {
                    Some(ProblemCode::PR_1_EXTENT_END_OUT_OF_BOUNDS)
                } else {
                    None
                };
                if let Some(code) = problem {
                    had_problem = true;
                    walk.report(
                        code,
                        Location::Inode(ino),
                        format!(
                            "inode {ino} has an invalid extent index (logical block {lblk}, physical block {physical})"
                        ),
                    );
                    continue;
                }
                children.push((lblk, physical, child_end));
                start_block = last;
            }
            let depth = node.header.depth;
            if children.len() < PARALLEL_FANOUT || ctx.cluster_bits != 0 {
                for &(lblk, physical, child_end) in &children {
                    had_problem |= walk_child(
                        walk, info, depth, lblk, physical, child_end, end_block, tally,
                    );
                }
                return had_problem;
            }
            let results: Vec<(BlockTally, bool)> = children
                .par_iter()
                .map(|&(lblk, physical, child_end)| {
                    let mut sub = BlockTally::default();
                    let problem = walk_child(
                        walk, info, depth, lblk, physical, child_end, end_block, &mut sub,
                    );
                    (sub, problem)
                })
                .collect();
            for (sub, problem) in results {
                had_problem |= problem;
                tally.append(sub);
            }
        }
    }
    had_problem
}

/// Reads, checks and walks the child node at `physical` of an index entry starting at
/// `lblk`, then claims the node's block. Returns whether there was a problem.
#[allow(clippy::too_many_arguments)]
fn walk_child(
    walk: &BlockWalk<'_>,
    info: &TreeInfo,
    parent_depth: u16,
    lblk: u64,
    physical: u64,
    child_end: u64,
    parent_end: Option<u64>,
    tally: &mut BlockTally,
) -> bool {
    let ctx = walk.ctx;
    let ino = walk.ino;
    let loc = Location::InodeBlock {
        inode: ino,
        block: physical,
        logical: u32::try_from(lblk).unwrap_or(u32::MAX),
    };
    if !walk.enter(physical) {
        // Named again by this tree: claimed again (so it shows as shared), not re-walked.
        walk.claim(physical, 1, tally);
        tally.blocks += 1;
        return true;
    }
    let bytes = match ctx.image.read_blocks(physical, 1, ctx.block_size()) {
        Ok(bytes) => bytes,
        Err(e) => {
            walk.report(
                ProblemCode::PR_1_EXTENT_HEADER_INVALID,
                loc,
                format!("inode {ino} extent node at block {physical} cannot be read: {e}"),
            );
            return true;
        }
    };
    let format_loc = FormatLocation::InodeBlock {
        inode: ino,
        block: physical,
    };
    let header_problem = match ExtentNode::parse(&bytes, format_loc) {
        Err(e) => Err(reason(&e)),
        Ok(node) => {
            let capacity = (bytes.len() - ENTRY_SIZE) / ENTRY_SIZE;
            let max = usize::from(node.header.max);
            if node.header.depth + 1 != parent_depth {
                Err(format!(
                    "depth {} under a node of depth {parent_depth}",
                    node.header.depth
                ))
            } else if max + 2 < capacity {
                // ext2fs_extent_header_verify: eh_max within 2 of what the block holds.
                Err(format!(
                    "maximum {max} entries in a block that holds {capacity}"
                ))
            } else {
                Ok(node)
            }
        }
    };
    let node = match header_problem {
        Ok(node) => node,
        Err(why) => {
            tally.block_zero_unmappable |= lblk == 0;
            walk.report(
                ProblemCode::PR_1_EXTENT_HEADER_INVALID,
                loc,
                format!(
                    "inode {ino} has an invalid extent node (blk {physical}, lblk {lblk}): {why}"
                ),
            );
            return true;
        }
    };
    tally.extent_levels.get_or_insert_default().add_node(
        usize::from(info.root_depth - node.header.depth),
        node.header.entries,
        node.header.max,
    );
    let first = match &node.entries {
        ExtentEntries::Leaf(l) => l.first().map(|e| u64::from(e.block)),
        ExtentEntries::Index(i) => i.first().map(|e| u64::from(e.block)),
    };
    let mut had_problem = false;
    if let Some(first) = first.filter(|&f| f != lblk) {
        had_problem = true;
        walk.report(
            ProblemCode::PR_1_EXTENT_INDEX_START_INVALID,
            loc,
            format!(
                "interior extent node level {} of inode {ino}: logical start {lblk} does not match logical start {first} at next level",
                parent_depth - 1
            ),
        );
    }
    let end_block = Some(child_end.saturating_sub(1))
        .filter(|_| child_end > 0)
        .or(parent_end);
    had_problem |= walk_node(walk, info, &node, lblk, end_block, child_end, tally);
    if let Some(seed) = info.csum_seed {
        if let Err(FormatError::Checksum { .. }) = ExtentNode::verify(&bytes, seed, format_loc) {
            tally.block_zero_unmappable |= lblk == 0;
            // e2fsck reports a checksum alone only when the node passed every other check.
            if !had_problem {
                walk.report(
                    ProblemCode::PR_1_EXTENT_ONLY_CSUM_INVALID,
                    loc,
                    format!("inode {ino} extent block passes checks, but checksum does not match extent (logical block {lblk}, physical block {physical})"),
                );
            }
            had_problem = true;
        }
    }
    walk.claim(physical, 1, tally);
    tally.blocks += 1;
    had_problem
}

/// The reason part of a format error, for one-line messages.
fn reason(e: &FormatError) -> String {
    match e {
        FormatError::Corrupt { problem, .. } => problem.to_string(),
        other => other.to_string(),
    }
}

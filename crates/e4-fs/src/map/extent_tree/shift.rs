//! Moving every extent from a logical block on up or down by a distance: the tree half of
//! fallocate's INSERT_RANGE and COLLAPSE_RANGE (`ext4_ext_shift_extents`).
//!
//! Only logical starts change: every extent at or after the start point moves, and every
//! index key above a moved leaf follows its child's new first block. Physical blocks, lengths
//! and states stay, so no data moves and no block is allocated (except for the one split an
//! upward shift may need at its start point). As in the kernel, a moved extent merges into
//! its left neighbour in the same leaf when the two become logically and physically adjacent
//! (a collapse that removes the blocks between two parts of one run joins them again).

use e4_format::{Location, Problem};

use super::{can_merge, end_of, ExtentTree, Node, LOGICAL_LIMIT};
use crate::error::{Error, Result};

/// Which way [`ExtentTree::shift`] moves extents.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShiftDirection {
    /// Towards block 0 (`SHIFT_LEFT`, COLLAPSE_RANGE): the blocks below the start point
    /// must be a hole at least as long as the distance.
    Down,
    /// Away from block 0 (`SHIFT_RIGHT`, INSERT_RANGE): opens a hole of the distance's length
    /// at the start point.
    Up,
}

impl ExtentTree<'_> {
    /// Moves every extent at or after logical block `from` by `distance` blocks in
    /// `direction`. Moving up first splits an extent that runs across `from`; moving down
    /// requires logical blocks `from - distance .. from` to be unmapped. Fails with
    /// [`Error::Invalid`] (the kernel's EINVAL), changing nothing, when moving down would
    /// overlap or pass block 0, or moving up would pass the last block an extent may map
    /// (2^32 - 2); with `NoSpace`, changing nothing, when the split needs a node block and
    /// none is left.
    ///
    /// With an `until`, only the extents that start in `from..until` move: a shift too
    /// large for one transaction, cut where leaves start ([`Self::leaf_starts`]) and made a
    /// piece at a time, as the kernel's
    /// `ext4_ext_shift_extents` restarts its handle. Moving up, the pieces go from the last
    /// down (the extents above a piece have moved already, so it lands below them); moving
    /// down, from the first up (the blocks below a piece are free by then). Either way the
    /// tree between two pieces is valid. Moving up, only the last piece (no `until`) is
    /// checked against the format's last logical block: a piece below it lands below where
    /// that one went.
    pub fn shift(
        &mut self,
        from: u32,
        until: Option<u32>,
        distance: u32,
        direction: ShiftDirection,
    ) -> Result<()> {
        if distance == 0 || until.is_some_and(|until| until <= from) {
            return Ok(());
        }
        let ino = self.owner.ino;
        match direction {
            ShiftDirection::Down => {
                let floor = from.checked_sub(distance).ok_or_else(|| {
                    Error::Invalid(format!(
                        "inode {ino}: cannot move block {from} down by {distance} blocks"
                    ))
                })?;
                if let Some(e) = self.next_extent(floor)? {
                    if e.logical < from {
                        return Err(Error::Invalid(format!(
                            "inode {ino}: blocks {}..{} are mapped, so blocks from {from} \
                             cannot move down by {distance}",
                            e.logical.max(floor),
                            end_of(&e).min(u64::from(from))
                        )));
                    }
                }
            }
            ShiftDirection::Up => {
                if let Some(last) = self.last_extent()?.filter(|_| until.is_none()) {
                    // EXT_MAX_BLOCKS (2^32 - 1) is the first block no extent may reach.
                    if end_of(&last) + u64::from(distance) > LOGICAL_LIMIT - 1 {
                        return Err(Error::Invalid(format!(
                            "inode {ino}: moving blocks up by {distance} would pass the \
                             extent format's last logical block"
                        )));
                    }
                }
                // The split may split nodes up to the root and add a level.
                self.declare_edges(1)?;
                self.split_extent_at(from)?;
            }
        }
        let mut root = self.read_root()?;
        let until = until.map_or(LOGICAL_LIMIT, u64::from);
        if self.shift_in(&mut root, from, until, distance, direction)? {
            self.write_node(&root)?;
        }
        self.keep_e2fsck_shape()
    }

    /// The extent with the highest logical start, if any.
    fn last_extent(&self) -> Result<Option<super::Extent>> {
        let mut node = self.read_root()?;
        while node.depth > 0 {
            // OK to index: read_root and read_node refuse empty interior nodes.
            let last = node.indexes[node.indexes.len() - 1];
            node = self.read_node(last.child, node.depth - 1)?;
        }
        Ok(node.extents.last().copied())
    }

    /// The first logical block of every leaf after the one that maps `from` (or would),
    /// ascending: where a shift from `from` on can be cut into pieces of whole leaves.
    /// Reads interior nodes only; empty for a tree that is one leaf. Each node's keys are
    /// checked in order as it is read; keys out of order across two nodes (a damaged
    /// index) are refused here too, so a piece never ends before it starts.
    pub fn leaf_starts(&self, from: u32) -> Result<Vec<u32>> {
        let mut starts = Vec::new();
        self.leaf_starts_in(&self.read_root()?, from, &mut starts)?;
        if starts.windows(2).any(|pair| pair[0] >= pair[1]) {
            return Err(super::corrupt(
                Location::Inode(self.owner.ino),
                Problem::KeysOutOfOrder,
            ));
        }
        Ok(starts)
    }

    fn leaf_starts_in(&self, node: &Node, from: u32, starts: &mut Vec<u32>) -> Result<()> {
        for (i, index) in node.indexes.iter().enumerate() {
            let to = node
                .indexes
                .get(i + 1)
                .map_or(LOGICAL_LIMIT, |next| u64::from(next.logical));
            if to <= u64::from(from) {
                continue;
            }
            if node.depth == 1 {
                if index.logical > from {
                    starts.push(index.logical);
                }
            } else {
                self.leaf_starts_in(&self.read_node(index.child, node.depth - 1)?, from, starts)?;
            }
        }
        Ok(())
    }

    /// Shifts the extents that start in `from..until` under `node`, writing changed
    /// children; returns whether `node` itself changed (moved extents, or a key that
    /// followed its child), for the caller to write. Children that end before `from` or
    /// start at or after `until` are not read.
    fn shift_in(
        &mut self,
        node: &mut Node,
        from: u32,
        until: u64,
        distance: u32,
        direction: ShiftDirection,
    ) -> Result<bool> {
        let moved = |logical: u32| match direction {
            ShiftDirection::Down => logical - distance,
            ShiftDirection::Up => logical + distance,
        };
        if node.depth == 0 {
            let before = node.extents.len();
            let mut shifted = Vec::with_capacity(before);
            let mut changed = false;
            for e in &node.extents {
                let mut e = *e;
                if e.logical >= from && u64::from(e.logical) < until {
                    e.logical = moved(e.logical);
                    changed = true;
                    if let Some(left) = shifted.last_mut() {
                        if can_merge(left, &e) {
                            left.len += e.len;
                            continue;
                        }
                    }
                }
                shifted.push(e);
            }
            if shifted.len() < before {
                self.shape_may_have_changed = true;
            }
            node.extents = shifted;
            return Ok(changed);
        }
        let mut changed = false;
        for i in 0..node.indexes.len() {
            let to = node
                .indexes
                .get(i + 1)
                .map_or(LOGICAL_LIMIT, |next| u64::from(next.logical));
            if to <= u64::from(from) || u64::from(node.indexes[i].logical) >= until {
                continue;
            }
            let mut child = self.read_node(node.indexes[i].child, node.depth - 1)?;
            if self.shift_in(&mut child, from, until, distance, direction)? {
                // Which nodes a shift changes is known only as it walks: each is declared
                // before it is written.
                self.io.extend_credits(1);
                self.write_node(&child)?;
            }
            // OK to unwrap: shifting and merging never empty a node.
            let key = child.first_key().unwrap();
            if node.indexes[i].logical != key {
                node.indexes[i].logical = key;
                changed = true;
            }
        }
        Ok(changed)
    }
}

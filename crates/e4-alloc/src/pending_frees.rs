//! Blocks freed inside a transaction become reusable only when it commits (requirement S2):
//! until then another file could be given them and overwrite data the journal may still
//! need to restore. The pending runs are kept in the group they belong to (under its lock,
//! merged with their neighbours), so freeing never touches a global list; the transaction
//! only remembers which groups to visit.
//!
//! On disk the blocks are free in the bitmap written for the freeing transaction (ext4
//! clears the bit in the transaction that frees), which [`BlockAllocator::group_bitmap_for_disk`]
//! reflects; [`BlockAllocator::pending_runs`] lists them so a journal can log the change and
//! revoke freed metadata blocks.

use std::collections::BTreeMap;

use crate::block_allocator::{AllocError, BadFree, BlockAllocator, Extent};
use crate::block_group::GroupExtent;

/// One group's pending runs, by first block: disjoint (a free that overlaps one is refused),
/// and a transaction's runs that touch are one. Ordered so that checking a free against them
/// and merging it with its neighbours cost O(log runs): freeing every other block of a
/// fragmented file leaves 16,384 runs in one 4 KiB-block group, and the list this replaced
/// was scanned for each free (a punch of 4 million one-block extents took minutes).
#[derive(Debug, Default)]
pub(crate) struct PendingRuns {
    /// start → (len, transaction).
    runs: BTreeMap<u32, (u32, u64)>,
}

impl PendingRuns {
    /// Whether any pending run shares a block with `range`.
    pub(crate) fn overlaps(&self, range: GroupExtent) -> bool {
        if range.len == 0 {
            return false;
        }
        let end = u64::from(range.start) + u64::from(range.len);
        // Runs are disjoint, so only the last one starting before `end` can reach in.
        self.runs
            .range(..=u32::try_from(end - 1).unwrap_or(u32::MAX))
            .next_back()
            .is_some_and(|(&start, &(len, _))| start + len > range.start)
    }

    /// Adds `range`, freed by `txn` (the caller checked it overlaps nothing), merged with
    /// `txn`'s runs that end where it starts and start where it ends.
    pub(crate) fn insert(&mut self, txn: u64, range: GroupExtent) {
        let (mut start, mut len) = (range.start, range.len);
        if let Some((&before, &(before_len, before_txn))) = self.runs.range(..start).next_back() {
            if before_txn == txn && before + before_len == start {
                self.runs.remove(&before);
                start = before;
                len += before_len;
            }
        }
        if let Some(&(after_len, after_txn)) = self.runs.get(&(range.start + range.len)) {
            if after_txn == txn {
                self.runs.remove(&(range.start + range.len));
                len += after_len;
            }
        }
        self.runs.insert(start, (len, txn));
    }

    /// Takes `range` back out of `txn`'s runs (a free undone); false, changing nothing,
    /// unless one of `txn`'s runs holds all of it.
    pub(crate) fn remove(&mut self, txn: u64, range: GroupExtent) -> bool {
        let Some((&start, &(len, run_txn))) = self.runs.range(..=range.start).next_back() else {
            return false;
        };
        let end = range.start + range.len;
        if run_txn != txn || start + len < end {
            return false;
        }
        self.runs.remove(&start);
        if start < range.start {
            self.runs.insert(start, (range.start - start, txn));
        }
        if end < start + len {
            self.runs.insert(end, (start + len - end, txn));
        }
        true
    }

    /// `txn`'s runs, in block order.
    pub(crate) fn of(&self, txn: u64) -> impl Iterator<Item = GroupExtent> + '_ {
        self.runs
            .iter()
            .filter(move |(_, &(_, t))| t == txn)
            .map(|(&start, &(len, _))| GroupExtent { start, len })
    }

    /// Removes `txn`'s runs and returns them.
    pub(crate) fn take(&mut self, txn: u64) -> Vec<GroupExtent> {
        let taken: Vec<GroupExtent> = self.of(txn).collect();
        self.runs.retain(|_, &mut (_, t)| t != txn);
        taken
    }

    /// Every pending run, whoever freed it.
    pub(crate) fn all(&self) -> impl Iterator<Item = GroupExtent> + '_ {
        self.runs
            .iter()
            .map(|(&start, &(len, _))| GroupExtent { start, len })
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.runs.is_empty()
    }

    /// Heap bytes the runs hold, about: a B-tree's nodes are at least half full, so each
    /// entry costs at most twice its key and value.
    pub(crate) fn memory_bytes(&self) -> usize {
        self.runs.len() * 2 * std::mem::size_of::<(u32, (u32, u64))>()
    }

    /// Blocks in every pending run.
    pub(crate) fn blocks(&self) -> u64 {
        self.runs.values().map(|&(len, _)| u64::from(len)).sum()
    }
}

/// The frees of one transaction: its id and the groups holding its pending runs.
#[derive(Debug)]
pub struct TransactionFrees {
    txn: u64,
    groups: Vec<u32>,
}

impl TransactionFrees {
    pub fn new(txn: u64) -> Self {
        TransactionFrees {
            txn,
            groups: Vec::new(),
        }
    }

    /// The transaction's id.
    pub fn txn(&self) -> u64 {
        self.txn
    }
}

impl BlockAllocator {
    /// Frees `extent` when `txn` commits. Refused, changing nothing, unless every block is
    /// in use and neither reserved, already pending, nor metadata.
    pub fn free_in_transaction(
        &self,
        extent: Extent,
        txn: &mut TransactionFrees,
    ) -> Result<(), AllocError> {
        for (g, range) in self.checked_pieces(extent)? {
            let Some(mut state) = self.lock_group_for_free(g, range, 0, true)? else {
                continue;
            };
            state.check_free(range).map_err(|r| AllocError::BadFree {
                extent,
                reason: r.into(),
            })?;
            state.pending.insert(txn.txn, range);
            // The bitmap written for this transaction changes.
            self.mark_dirty(g);
            if !txn.groups.contains(&g) {
                txn.groups.push(g);
            }
        }
        Ok(())
    }

    /// Undoes [`Self::free_in_transaction`] of `extent` by `txn` (an operation that failed
    /// after freeing it): the blocks are in use again. Refused, changing nothing, unless
    /// `txn` freed all of them. A piece in a corrupt group was never freed (the free
    /// skipped it), so there is nothing to take back there.
    pub fn cancel_free_in_transaction(
        &self,
        extent: Extent,
        txn: &TransactionFrees,
    ) -> Result<(), AllocError> {
        let refused = || AllocError::BadFree {
            extent,
            reason: BadFree::NotPending,
        };
        let pieces = self.pieces(extent)?;
        for &(g, range) in &pieces {
            let Some(state) = self.lock_group_for_free(g, range, 0, false)? else {
                continue;
            };
            if !state
                .pending
                .of(txn.txn)
                .any(|p| p.start <= range.start && range.start + range.len <= p.start + p.len)
            {
                return Err(refused());
            }
        }
        for (g, range) in pieces {
            let Some(mut state) = self.lock_group_for_free(g, range, 0, false)? else {
                continue;
            };
            if !state.pending.remove(txn.txn, range) {
                return Err(refused());
            }
            self.mark_dirty(g);
        }
        Ok(())
    }

    /// The runs `txn` frees, group by group, in block order.
    pub fn pending_runs(&self, txn: &TransactionFrees) -> Vec<Extent> {
        let mut runs = Vec::new();
        for &g in &txn.groups {
            // A group with pending frees is loaded and never evicted.
            let Ok(state) = self.lock_group(g, 0) else {
                continue;
            };
            runs.extend(state.pending.of(txn.txn).map(|p| Extent {
                start: self.geometry().block_at(g, p.start),
                len: p.len,
            }));
        }
        runs.sort();
        runs
    }

    /// Commits `txn`: its pending runs become free space. It cannot fail: every run was
    /// checked when it was added, and nothing else may free a pending block.
    pub fn commit_frees(&self, txn: TransactionFrees, slot: usize) {
        for g in txn.groups {
            // A group with pending frees is loaded and never evicted.
            let Ok(mut state) = self.lock_group(g, slot) else {
                continue;
            };
            let mut freed = 0u64;
            for range in state.pending.take(txn.txn) {
                self.mark_free_locked(g, &mut state, range);
                freed += u64::from(range.len);
            }
            drop(state);
            self.release_free_blocks(slot, freed);
        }
    }

    /// Blocks waiting for a commit, over all groups (O(groups): for checks and reports).
    pub fn pending_blocks(&self) -> u64 {
        (0..self.geometry().groups())
            .map(|g| {
                let state = self.groups[g as usize]
                    .state
                    .lock(&self.stats().group_locks);
                state.as_ref().map_or(0, |s| s.pending.blocks())
            })
            .sum()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use std::collections::BTreeSet;

    use proptest::prelude::*;

    use super::*;

    fn run(start: u32, len: u32) -> GroupExtent {
        GroupExtent { start, len }
    }

    #[test]
    fn overlap_is_judged_at_both_edges() {
        let mut pending = PendingRuns::default();
        pending.insert(1, run(10, 5));
        assert!(!pending.overlaps(run(5, 5)));
        assert!(pending.overlaps(run(5, 6)));
        assert!(pending.overlaps(run(14, 1)));
        assert!(!pending.overlaps(run(15, 1)));
        assert!(pending.overlaps(run(0, 100)));
        assert!(!pending.overlaps(run(12, 0)));
    }

    #[test]
    fn a_run_joins_its_transactions_neighbours_on_both_sides_but_not_anothers() {
        let mut pending = PendingRuns::default();
        pending.insert(1, run(10, 2));
        pending.insert(1, run(14, 2));
        pending.insert(2, run(16, 2));
        pending.insert(1, run(12, 2));
        assert_eq!(pending.of(1).collect::<Vec<_>>(), vec![run(10, 6)]);
        assert_eq!(pending.take(2), vec![run(16, 2)]);
        assert_eq!(pending.all().collect::<Vec<_>>(), vec![run(10, 6)]);
        assert_eq!(pending.blocks(), 6);
    }

    proptest! {
        /// Against a model of (transaction, block) pairs: each transaction's runs cover
        /// exactly its blocks, touch none of its other runs, and overlap is reported exactly
        /// when a block is taken.
        #[test]
        fn runs_match_a_block_model(frees in prop::collection::vec((1u64..4, 0u32..200, 1u32..6), 1..150)) {
            let mut pending = PendingRuns::default();
            let mut model: BTreeSet<(u64, u32)> = BTreeSet::new();
            for (txn, start, len) in frees {
                let taken = (start..start + len).any(|b| model.iter().any(|&(_, m)| m == b));
                prop_assert_eq!(pending.overlaps(run(start, len)), taken);
                if !taken {
                    pending.insert(txn, run(start, len));
                    model.extend((start..start + len).map(|b| (txn, b)));
                }
            }
            for txn in 1..4 {
                let runs: Vec<GroupExtent> = pending.of(txn).collect();
                let blocks: BTreeSet<u32> =
                    runs.iter().flat_map(|r| r.start..r.start + r.len).collect();
                let expected: BTreeSet<u32> =
                    model.iter().filter(|&&(t, _)| t == txn).map(|&(_, b)| b).collect();
                prop_assert_eq!(blocks, expected);
                prop_assert!(runs.windows(2).all(|w| w[0].start + w[0].len < w[1].start));
            }
        }
    }
}

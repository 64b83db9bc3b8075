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

use crate::block_allocator::{AllocError, BlockAllocator, Extent};

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
            let mut state = self.lock_group(g, 0)?;
            state.check_free(range).map_err(|r| AllocError::BadFree {
                extent,
                reason: r.into(),
            })?;
            // Merge with a neighbouring run of the same transaction.
            let neighbour = state.pending.iter_mut().find(|(t, p)| {
                *t == txn.txn
                    && (p.start + p.len == range.start || range.start + range.len == p.start)
            });
            match neighbour {
                Some((_, p)) => {
                    p.start = p.start.min(range.start);
                    p.len += range.len;
                }
                None => state.pending.push((txn.txn, range)),
            }
            // The bitmap written for this transaction changes.
            self.mark_dirty(g);
            if !txn.groups.contains(&g) {
                txn.groups.push(g);
            }
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
            let mine = state.pending.iter().filter(|(t, _)| *t == txn.txn);
            runs.extend(mine.map(|(_, p)| Extent {
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
            let mut i = 0;
            while i < state.pending.len() {
                if state.pending[i].0 != txn.txn {
                    i += 1;
                    continue;
                }
                let (_, range) = state.pending.swap_remove(i);
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
                state.as_ref().map_or(0, |s| {
                    s.pending.iter().map(|(_, p)| u64::from(p.len)).sum::<u64>()
                })
            })
            .sum()
    }
}

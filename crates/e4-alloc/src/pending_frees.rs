//! Blocks freed inside a transaction become reusable only when it commits (requirement S2):
//! until then another file could be given them and overwrite data the journal may still
//! need to restore. The pending runs are kept in the group they belong to, merged with
//! their neighbours, so freeing never touches a global list; the transaction only
//! remembers which groups to visit at commit.

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
}

impl BlockAllocator {
    /// Frees `extent` when `txn` commits. The blocks must be in use.
    pub fn free_in_transaction(
        &self,
        extent: Extent,
        txn: &mut TransactionFrees,
    ) -> Result<(), AllocError> {
        for (g, range) in self.pieces(extent).ok_or(AllocError::BadFree(extent))? {
            let mut pending = self.group(g).pending.lock(&self.stats().group_locks);
            let overlaps = pending
                .iter()
                .any(|(_, p)| p.start < range.start + range.len && range.start < p.start + p.len);
            if overlaps {
                return Err(AllocError::BadFree(extent));
            }
            // Merge with a neighbouring run of the same transaction.
            let neighbour = pending.iter_mut().find(|(t, p)| {
                *t == txn.txn
                    && (p.start + p.len == range.start || range.start + range.len == p.start)
            });
            match neighbour {
                Some((_, p)) => {
                    p.start = p.start.min(range.start);
                    p.len += range.len;
                }
                None => pending.push((txn.txn, range)),
            }
            if !txn.groups.contains(&g) {
                txn.groups.push(g);
            }
        }
        Ok(())
    }

    /// Commits `txn`: its pending runs become free space.
    pub fn commit_frees(&self, txn: TransactionFrees, slot: usize) -> Result<(), AllocError> {
        for g in txn.groups {
            let runs: Vec<_> = {
                let mut pending = self.group(g).pending.lock(&self.stats().group_locks);
                let (mine, others): (Vec<_>, Vec<_>) =
                    pending.drain(..).partition(|(t, _)| *t == txn.txn);
                *pending = others;
                mine
            };
            for (_, range) in runs {
                self.free_in_group(g, range, slot)?;
            }
        }
        Ok(())
    }

    /// Blocks waiting for a commit, over all groups (O(groups): for checks and reports).
    pub fn pending_blocks(&self) -> u64 {
        (0..self.geometry().groups())
            .map(|g| {
                let pending = self.group(g).pending.lock(&self.stats().group_locks);
                pending.iter().map(|(_, p)| u64::from(p.len)).sum::<u64>()
            })
            .sum()
    }
}

//! An operation's undo log: what it changed through its [`crate::txn::txn_io::TxnIo`], so
//! that an operation failing part-way (a read that fails, a block that fails verification,
//! no space for the next step) can put everything back and leave the transaction as it
//! found it.
//!
//! Nothing an operation does reaches the disk before the commit, and no commit can start
//! while the operation holds its handle, so undoing it is a matter of memory: the first
//! contents of each metadata block it changed or freed (restored into the cache), the
//! blocks it took (given back at once: nothing can have seen them) and the blocks it freed
//! in the running transaction (taken back out of the pending frees). The operation itself
//! restores its inodes' records, which it holds locked. The log costs nothing until an
//! operation changes a block, then one copy of each block it changes.

use std::collections::HashSet;

use e4_alloc::Extent;

use crate::buffer::store::BlockStore;
use crate::error::{Error, Result};
use crate::space::Space;
use crate::txn::Transactions;

/// What one operation changed, in order.
#[derive(Default)]
pub(crate) struct UndoLog {
    /// Each metadata block's contents before the operation first changed or freed it;
    /// `None` for a block the operation allocated (nothing to restore: it is forgotten).
    blocks: Vec<(u64, Option<Box<[u8]>>)>,
    /// Blocks already in `blocks`.
    logged: HashSet<u64>,
    /// Runs the operation allocated.
    allocated: Vec<Extent>,
    /// Runs the operation freed in the running transaction.
    freed: Vec<(u64, u64)>,
}

impl UndoLog {
    /// Whether block `nr`'s first contents are logged already (or it is new).
    pub(crate) fn has_block(&self, nr: u64) -> bool {
        self.logged.contains(&nr)
    }

    /// Logs block `nr`'s contents before its first change; `None`: the operation
    /// allocated it.
    pub(crate) fn block(&mut self, nr: u64, before: Option<Box<[u8]>>) {
        if self.logged.insert(nr) {
            self.blocks.push((nr, before));
        }
    }

    /// Logs a run the operation allocated; its blocks have nothing to restore.
    pub(crate) fn allocated(&mut self, run: Extent) {
        for nr in run.start..run.start + u64::from(run.len) {
            self.logged.insert(nr);
        }
        self.allocated.push(run);
    }

    /// Logs a run the operation freed in the running transaction.
    pub(crate) fn freed(&mut self, start: u64, len: u64) {
        self.freed.push((start, len));
    }

    /// Whether the operation changed anything through the log.
    pub(crate) fn is_empty(&self) -> bool {
        self.blocks.is_empty() && self.allocated.is_empty() && self.freed.is_empty()
    }

    /// Puts everything back, last change first: frees taken back, blocks restored, blocks
    /// allocated given back. An error means something could not be put back; the caller
    /// then stops the filesystem from taking more changes.
    pub(crate) fn undo(
        self,
        store: &BlockStore,
        space: &Space,
        txns: &Transactions,
        slot: usize,
    ) -> Result<()> {
        let mut first_error = None;
        let mut keep = |r: Result<()>| {
            if let Err(e) = r {
                first_error.get_or_insert(e);
            }
        };
        for &(start, len) in self.freed.iter().rev() {
            keep(txns.cancel_free(&space.blocks, start, len, slot));
        }
        for (nr, before) in self.blocks.into_iter().rev() {
            match before {
                Some(bytes) => {
                    let buffer = store.cache().get_new(nr, &bytes);
                    store.cache().mark_dirty(&buffer);
                }
                None => store.cache().forget(nr),
            }
        }
        for run in self.allocated.into_iter().rev() {
            for nr in run.start..run.start + u64::from(run.len) {
                store.cache().forget(nr);
            }
            keep(
                space
                    .blocks
                    .free(run, slot)
                    .map_err(Error::from_block_allocation),
            );
        }
        first_error.map_or(Ok(()), Err)
    }
}

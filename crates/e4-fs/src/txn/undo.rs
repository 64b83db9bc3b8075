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
//! operation changes a block, then one copy of each block it changes, or, for an edit that
//! names the bytes it changes (a directory leaf's: `MetaIo::modify_in_ranges`), of those
//! bytes alone: the copy of the 4 KiB leaf an unlink changes a few dozen bytes of, its
//! cache misses more than its instructions, was 6 % of an unlink's time.

use e4_alloc::Extent;

use crate::buffer::cache::BufferRole;
use crate::buffer::store::BlockStore;
use crate::error::{Error, Result};
use crate::space::Space;
use crate::txn::Transactions;

/// A metadata block, or a range of its bytes, as it was before an operation changed or
/// freed it.
struct LoggedBlock {
    nr: u64,
    /// Where the bytes start in the block: 0 for the whole block.
    offset: usize,
    /// How many: the block size for the whole block.
    len: usize,
    /// Where they start in [`UndoLog::images`].
    at: usize,
    /// The role its buffer had (what write-back seals it by, and what a read verified it
    /// as): the operation may have rewritten it in another (a directory's leaf turned into
    /// its htree root), and the contents put back are of the old one.
    role: Option<BufferRole>,
}

/// What one operation changed, in order. Its vectors are kept from one operation to the
/// next on each thread ([`UndoLog::take`], [`UndoLog::give_back`]): allocating them for every
/// operation was most of what the log cost.
#[derive(Default)]
pub(crate) struct UndoLog {
    /// The metadata blocks the operation changed or freed, each as it was before.
    blocks: Vec<LoggedBlock>,
    /// The logged contents, one block after another.
    images: Vec<u8>,
    /// Blocks already in `blocks` or `allocated`: a handful for most operations (a linear
    /// search of a few words costs less than hashing; a hash set was 8 % of a create).
    logged: Vec<u64>,
    /// Runs the operation allocated.
    allocated: Vec<Extent>,
    /// Runs the operation freed in the running transaction.
    freed: Vec<(u64, u64)>,
}

thread_local! {
    /// This thread's log between operations.
    static SPARE: std::cell::RefCell<UndoLog> = std::cell::RefCell::default();
}

impl UndoLog {
    /// An empty log, with the room this thread's last operation left.
    pub(crate) fn take() -> Self {
        SPARE.with(|spare| std::mem::take(&mut *spare.borrow_mut()))
    }

    /// Empties the log and keeps its room for this thread's next operation.
    pub(crate) fn give_back(mut self) {
        self.clear();
        SPARE.with(|spare| *spare.borrow_mut() = self);
    }

    /// Forgets everything logged, keeping the room.
    pub(crate) fn clear(&mut self) {
        self.blocks.clear();
        self.images.clear();
        self.logged.clear();
        self.allocated.clear();
        self.freed.clear();
    }

    /// Whether block `nr`'s first contents are logged already (or it is new).
    pub(crate) fn has_block(&self, nr: u64) -> bool {
        self.logged.contains(&nr)
    }

    /// Notes `nr` as logged; false if it was already.
    fn note(&mut self, nr: u64) -> bool {
        if self.has_block(nr) {
            return false;
        }
        self.logged.push(nr);
        true
    }

    /// Logs block `nr`'s contents and role before its first change.
    pub(crate) fn block(&mut self, nr: u64, before: &[u8], role: Option<BufferRole>) {
        if self.note(nr) {
            self.push(nr, 0, before, role);
        }
    }

    /// Logs the bytes of block `nr` from `offset` before a change of them, unless the whole
    /// block is logged already (or new). Every such change is logged, in order: undone last
    /// first, each puts back what the one before it left.
    pub(crate) fn range(
        &mut self,
        nr: u64,
        offset: usize,
        before: &[u8],
        role: Option<BufferRole>,
    ) {
        if !self.has_block(nr) {
            self.push(nr, offset, before, role);
        }
    }

    fn push(&mut self, nr: u64, offset: usize, before: &[u8], role: Option<BufferRole>) {
        let at = self.images.len();
        self.images.extend_from_slice(before);
        self.blocks.push(LoggedBlock {
            nr,
            offset,
            len: before.len(),
            at,
            role,
        });
    }

    /// Logs a run the operation allocated; its blocks have nothing to restore.
    pub(crate) fn allocated(&mut self, run: Extent) {
        // Only metadata blocks are ever looked up: a run of data blocks is one entry.
        if run.len == 1 {
            self.note(run.start);
        }
        self.allocated.push(run);
    }

    /// Logs a run of file data the operation allocated: given back on undo, never looked up.
    pub(crate) fn allocated_data(&mut self, run: Extent) {
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
        &mut self,
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
        let block_size = store.block_size() as usize;
        for logged in self.blocks.iter().rev() {
            let LoggedBlock {
                nr,
                offset,
                len,
                at,
                role,
            } = *logged;
            let image = &self.images[at..at + len];
            let buffer = if len == block_size {
                store.cache().get_new(nr, image)
            } else {
                // Changed in this transaction, so dirty, so still cached: a dirty buffer is
                // never evicted, and one the operation replaced or forgot since was logged
                // whole after this and is put back before it.
                let Some(buffer) = store.cache().peek(nr) else {
                    keep(Err(Error::Internal(format!(
                        "block {nr}: {len} bytes at {offset} to put back, and the block is no \
                         longer cached"
                    ))));
                    continue;
                };
                buffer.bytes_mut()[offset..offset + len].copy_from_slice(image);
                buffer
            };
            buffer.restore_role(role);
            store.cache().mark_dirty(&buffer);
        }
        for &run in self.allocated.iter().rev() {
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

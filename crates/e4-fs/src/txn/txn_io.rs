//! The engine's [`MetaIo`]: the mechanisms' block access inside the running transaction.
//! Reads go through the buffer cache (verified in the role asked for); writes replace the
//! cached copy and mark it dirty with its role, so write-back seals it; allocations come from
//! e4-alloc near the goal; frees wait for the commit.

use std::cell::RefCell;

use e4_alloc::{AllocRequest, Extent, Reserve};
use e4_format::{FormatError, Location, Problem, Structure};

use crate::buffer::cache::{Buffer, BufferRole};
use crate::buffer::store::BlockStore;
use crate::error::{Error, Result, Shortage};
use crate::inode::cache::{InodeGuard, InodeState};
use crate::io::meta_io::{
    BlockKind, EditInRanges, EditWithDerived, LookWithDerived, MetaIo, Owner,
};
use crate::space::Space;
use crate::txn::undo::UndoLog;
use crate::txn::{Transactions, TxnHandle};

pub(crate) struct TxnIo<'a> {
    pub store: &'a BlockStore,
    pub space: &'a Space,
    pub txns: &'a Transactions,
    /// The operation's handle, which every credit it declares goes through; its thread
    /// slot picks the limit counters' and pending-free lists' slots.
    pub txn: &'a TxnHandle<'a>,
    /// The set-aside blocks the mechanisms' own blocks (tree nodes) may come from: the
    /// handle's ([`Space::reserve`]), or the metadata reserve when removing space.
    reserve: Reserve,
    /// What the operation changed, to put back if it fails part-way.
    undo: RefCell<UndoLog>,
}

impl<'a> TxnIo<'a> {
    /// Block access for an operation holding `txn`, a handle on `txns`'s running
    /// transaction.
    pub fn new(
        store: &'a BlockStore,
        space: &'a Space,
        txns: &'a Transactions,
        txn: &'a TxnHandle<'a>,
    ) -> Self {
        TxnIo {
            store,
            space,
            txns,
            txn,
            reserve: space.reserve,
            undo: RefCell::new(UndoLog::take()),
        }
    }

    /// Frees `len` blocks from `start` when the running transaction commits.
    pub fn free_blocks(&self, start: u64, len: u64) -> Result<()> {
        self.txns
            .free_blocks(self.txn, &self.space.blocks, start, len)?;
        self.undo.borrow_mut().freed(start, len);
        Ok(())
    }

    /// Records that the operation took `run` for good (mapped it): it goes back if the
    /// operation fails later. (A run given back at once on a failed step is not recorded.)
    pub fn took(&self, run: Extent) {
        self.undo.borrow_mut().allocated(run);
    }

    /// [`Self::took`] for a run of file data, which the operation never writes as metadata:
    /// it is not looked up as a logged block (a fallocate into free space broken into single
    /// blocks logged each, and each look-up scanned them all).
    pub fn took_data(&self, run: Extent) {
        self.undo.borrow_mut().allocated_data(run);
    }

    /// Settles a run whose mapping failed with `error`, before it was mapped: it goes back
    /// to free space at once, unless the mapping found the file already uses its blocks
    /// (the bitmap called them free: damage), when they stay in use, which is the truth.
    /// Returns the error to report.
    pub fn unmapped(&self, run: Extent, error: Error) -> Error {
        let in_use = matches!(
            &error,
            Error::Format(e4_format::FormatError::Corrupt {
                problem: e4_format::Problem::BlockReferencedTwice { .. },
                ..
            })
        );
        if in_use {
            return error;
        }
        let freed = self.space.blocks.free(run, self.txn.slot);
        error.after_undo(freed.map_err(Error::from_block_allocation))
    }

    /// Puts back everything the operation changed through this `TxnIo` (the operation
    /// restores its inodes' records itself). If something cannot be put back, the
    /// filesystem takes no more changes, and the error says so.
    pub fn undo(&self) -> Result<()> {
        let mut log = self.undo.borrow_mut();
        if log.is_empty() {
            return Ok(());
        }
        let undone = log.undo(self.store, self.space, self.txns, self.txn.slot);
        // Undone: nothing of the log may be undone a second time.
        log.clear();
        undone.map_err(|e| self.txns.fail(e))
    }

    /// Runs `change`, which edits the inode `state` holds (locked) and blocks through this
    /// `TxnIo`; if it fails, the inode's record is put back and every block change,
    /// allocation and free it made is undone, so the operation leaves nothing behind.
    pub fn all_or_nothing<T>(
        &self,
        state: &mut InodeState,
        change: impl FnOnce(&mut InodeState) -> Result<T>,
    ) -> Result<T> {
        let saved = state.inode.clone();
        match change(state) {
            Ok(value) => Ok(value),
            Err(e) => {
                state.inode = saved;
                Err(e.after_undo(self.undo()))
            }
        }
    }

    /// [`Self::all_or_nothing`] for an operation holding several inodes locked (a rename,
    /// an unlink): every record in `locked` is put back if `change` fails.
    pub fn all_or_nothing_locked<T>(
        &self,
        locked: &mut [(u32, InodeGuard<'_>)],
        change: impl FnOnce(&mut [(u32, InodeGuard<'_>)]) -> Result<T>,
    ) -> Result<T> {
        // On the stack for the four inodes a rename locks at most: an unlink's pair was a
        // heap allocation per unlink.
        let saved: smallvec::SmallVec<[_; 4]> =
            locked.iter().map(|(_, s)| s.inode.clone()).collect();
        match change(locked) {
            Ok(value) => Ok(value),
            Err(e) => {
                for ((_, state), inode) in locked.iter_mut().zip(saved) {
                    state.inode = inode;
                }
                Err(e.after_undo(self.undo()))
            }
        }
    }

    /// Logs block `nr`'s contents before its first change, reading it if the cache does
    /// not hold it (a failed read fails the change before anything is changed).
    fn log_block(&self, nr: u64) -> Result<()> {
        if !self.undo.borrow().has_block(nr) {
            self.log_buffer(&*self.store.read(nr)?);
        }
        Ok(())
    }

    /// Logs `buffer`'s contents unless its block is logged already (checked first, so a
    /// block changed again costs no look at its bytes).
    fn log_buffer(&self, buffer: &Buffer) {
        if !self.undo.borrow().has_block(buffer.nr()) {
            self.undo
                .borrow_mut()
                .block(buffer.nr(), &buffer.bytes(), buffer.role());
        }
    }

    /// Block access whose extent-tree blocks may come from the metadata reserve, as the
    /// kernel's `EXT4_GET_BLOCKS_METADATA_NOFAIL` lets them (data blocks never do): for
    /// operations that split extents without adding data (truncate, punch, collapse,
    /// insert), so that freeing space on a full filesystem does not fail for want of one
    /// block; and for writes, which the kernel's writeback maps with that flag
    /// (`mpage_map_one_extent`), so that writing into preallocated blocks on a full
    /// filesystem does not fail for the tree block marking them written needs.
    pub fn tree_blocks_from_reserve(mut self) -> Self {
        self.reserve = Reserve::Metadata;
        self
    }
}

impl Drop for TxnIo<'_> {
    fn drop(&mut self) {
        // The operation is over (done, or undone): the log's room goes to the next one.
        self.undo.take().give_back();
    }
}

/// What an edit through [`TxnIo`] keeps for its undo: the whole block before its first
/// change, or the ranges the edit names before each change.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Logged {
    Whole,
    Ranges,
}

impl TxnIo<'_> {
    /// Block `nr`, verified as `kind`, changed in place by `edit` and marked dirty, logged as
    /// `logged` says. Verifying records the role write-back seals by (where there is a
    /// checksum to seal), so the edit needs no second lock to set it. Debug builds check
    /// that an edit in ranges changed no byte outside them.
    fn edit_buffer(
        &self,
        nr: u64,
        kind: BlockKind,
        owner: Owner,
        logged: Logged,
        edit: &mut EditInRanges<'_>,
    ) -> Result<()> {
        let buffer = self.store.read_as(nr, BufferRole::of(kind, owner))?;
        if logged == Logged::Whole {
            self.log_buffer(&buffer);
        }
        let role = buffer.role();
        let mut contents = buffer.contents_mut();
        let contents = &mut *contents;
        let check = cfg!(debug_assertions) && logged == Logged::Ranges;
        let before = check.then(|| contents.bytes.to_vec());
        let mut named = Vec::new();
        edit(
            &mut contents.bytes,
            Some(&mut contents.derived),
            &mut |offset, bytes| {
                if logged == Logged::Ranges {
                    self.undo.borrow_mut().range(nr, offset, bytes, role);
                    if check {
                        named.push(offset..offset + bytes.len());
                    }
                }
            },
        )?;
        if let Some(before) = before {
            let unnamed = (0..before.len())
                .find(|&i| before[i] != contents.bytes[i] && !named.iter().any(|r| r.contains(&i)));
            assert_eq!(
                unnamed, None,
                "block {nr}: an edit in ranges changed a byte it did not name"
            );
        }
        self.store.cache().mark_dirty(&buffer);
        Ok(())
    }
}

impl MetaIo for TxnIo<'_> {
    fn block_size(&self) -> usize {
        self.store.block_size() as usize
    }

    fn visit(
        &self,
        nr: u64,
        kind: BlockKind,
        owner: Owner,
        look: &mut dyn FnMut(&[u8]) -> Result<()>,
    ) -> Result<()> {
        self.store.visit(nr, BufferRole::of(kind, owner), look)
    }

    fn modify(
        &self,
        nr: u64,
        kind: BlockKind,
        owner: Owner,
        edit: &mut dyn FnMut(&mut [u8]) -> Result<()>,
    ) -> Result<()> {
        // A plain edit keeps nothing derived from the bytes.
        self.modify_with_derived(nr, kind, owner, &mut |bytes, kept| {
            if let Some(kept) = kept {
                kept.clear();
            }
            edit(bytes)
        })
    }

    fn visit_with_derived(
        &self,
        nr: u64,
        kind: BlockKind,
        owner: Owner,
        look: &mut LookWithDerived<'_>,
    ) -> Result<()> {
        self.store
            .visit_with_derived(nr, BufferRole::of(kind, owner), look)
    }

    fn modify_with_derived(
        &self,
        nr: u64,
        kind: BlockKind,
        owner: Owner,
        edit: &mut EditWithDerived<'_>,
    ) -> Result<()> {
        self.edit_buffer(nr, kind, owner, Logged::Whole, &mut |bytes, kept, _| {
            edit(bytes, kept)
        })
    }

    /// Logs the ranges the edit names instead of the whole block.
    fn modify_in_ranges(
        &self,
        nr: u64,
        kind: BlockKind,
        owner: Owner,
        edit: &mut EditInRanges<'_>,
    ) -> Result<()> {
        self.edit_buffer(nr, kind, owner, Logged::Ranges, edit)
    }

    fn write(&self, nr: u64, kind: BlockKind, owner: Owner, bytes: &[u8]) -> Result<()> {
        self.log_block(nr)?;
        let buffer = self.store.cache().get_new(nr, bytes);
        buffer.set_role(BufferRole::of(kind, owner));
        self.store.cache().mark_dirty(&buffer);
        Ok(())
    }

    fn check_mapped(&self, start: u64, len: u64, owner: Owner) -> Result<()> {
        let geometry = self.space.blocks.geometry();
        let bad = |problem| {
            Error::from(FormatError::corrupt(
                Structure::BlockMapping,
                Location::Inode(owner.ino),
                problem,
            ))
        };
        let inside = start
            .checked_add(len)
            .is_some_and(|end| start >= geometry.first_data_block && end <= geometry.blocks);
        if !inside {
            return Err(bad(Problem::RunOutsideFilesystem { start, len }));
        }
        match self.space.blocks.system_zone_block(start, len) {
            Some(block) => Err(bad(Problem::RunInMetadata { start, len, block })),
            None => Ok(()),
        }
    }

    fn allocate(&self, goal: u64, owner: Owner) -> Result<u64> {
        self.space.may_allocate(Shortage::Blocks)?;
        let extent = self
            .space
            .blocks
            .allocate(AllocRequest {
                goal: (goal != 0).then_some(goal),
                len: 1,
                min_len: 1,
                slot: self.txn.slot,
                stream: u64::from(owner.ino),
                reserve: self.reserve,
            })
            .map_err(Error::from_block_allocation)?;
        self.took(extent);
        Ok(extent.start)
    }

    fn free(&self, start: u64, len: u64, _owner: Owner) -> Result<()> {
        self.free_blocks(start, len)?;
        for nr in start..start + len {
            // A freed block's cached contents may hold this transaction's earlier changes:
            // an undo puts them back.
            if let Some(buffer) = self.store.cache().peek(nr) {
                self.log_buffer(&buffer);
            }
            self.store.cache().forget(nr);
        }
        Ok(())
    }

    fn extend_credits(&self, credits: u32) {
        self.txn.extend(credits);
    }
}

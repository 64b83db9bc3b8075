//! Everything one group lock guards, and the line between what the allocator may hand out
//! and what the disk says.
//!
//! The allocator's bitmap ([`GroupSpace`]) marks a block used when it must not be handed out.
//! That is more than the on-disk bitmap holds: blocks reserved for files' future appends
//! (reservation and packing windows, [`ReservedRun`]) and blocks freed by a transaction that
//! has not committed (pending frees) are used to the allocator but free on disk. Only
//! [`GroupState::disk_bitmap`] may be written back; it subtracts both. The system zone
//! (superblocks, descriptors, bitmaps, inode tables, the journal) is used in both and can
//! neither be handed out nor freed.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;

use crate::block_group::{GroupExtent, GroupSpace};
use crate::pending_frees::PendingRuns;

/// A run of blocks of one group reserved for one owner's future allocations: the common
/// core of reservation windows and small-file packing windows.
///
/// The owner carves blocks off the front without taking the group lock, publishing the new
/// front in `next` (its own cache line in practice: no other thread writes it). The group
/// keeps an `Arc` to every run it has handed out, so the unused part `[next, end)` can be
/// subtracted from the on-disk bitmap and taken back. The owner never frees the run
/// itself: dropping or releasing it sets `released`, and the group takes back `[next, end)`
/// the next time its lock is held (or at once, by [`crate::BlockAllocator::release_window`]).
#[derive(Debug)]
pub(crate) struct ReservedRun {
    pub(crate) group: u32,
    /// The first block of the run not yet carved, as an offset in the group.
    pub(crate) next: AtomicU32,
    /// One past the run's last block, as an offset in the group.
    pub(crate) end: u32,
    /// Set by the owner when it no longer wants the rest.
    released: AtomicBool,
    /// The group's "some run was given up" flag, shared by all its runs, so a lock holder
    /// looks through the group's runs only when one was (not on every acquisition).
    group_has_released: Arc<AtomicBool>,
}

impl ReservedRun {
    pub(crate) fn new(group: u32, range: GroupExtent, group_has_released: Arc<AtomicBool>) -> Self {
        ReservedRun {
            group,
            next: AtomicU32::new(range.start),
            end: range.start + range.len,
            released: AtomicBool::new(false),
            group_has_released,
        }
    }

    /// The owner gives up the rest of the run; its group takes it back at its next lock.
    /// The run's flag is set before the group's (both release stores), so a lock holder
    /// that sees the group's flag (acquire) sees the run's.
    pub(crate) fn give_up(&self) {
        self.released.store(true, Ordering::Release);
        self.group_has_released.store(true, Ordering::Release);
    }

    /// The part not yet carved. Acquire pairs with the owner's release store of `next`, so
    /// a block carved (and perhaps written into a file's extent) is never shown unused.
    pub(crate) fn unused(&self) -> GroupExtent {
        let next = self.next.load(Ordering::Acquire).min(self.end);
        GroupExtent {
            start: next,
            len: self.end - next,
        }
    }
}

/// Why a free was refused. Nothing was changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FreeRefusal {
    /// Part of the range is already free.
    NotInUse,
    /// Part of the range is the unused part of a reservation (someone's future blocks).
    Reserved,
    /// Part of the range is already waiting in a transaction's pending frees.
    Pending,
    /// Part of the range is filesystem metadata.
    SystemZone,
}

/// One group's state behind its lock.
#[derive(Debug)]
pub(crate) struct GroupState {
    /// The allocator's bitmap and buddy summary: used = not to be handed out.
    pub(crate) space: GroupSpace,
    /// Runs reserved for windows: used in `space`, free on disk until carved.
    pub(crate) reserved: Vec<Arc<ReservedRun>>,
    /// Blocks freed by uncommitted transactions (transaction id, range): used in `space`
    /// so they are not reused before the free is durable, free in the bitmap written for
    /// the freeing transaction (as ext4 clears the bit in the transaction that frees).
    pub(crate) pending: PendingRuns,
    /// Metadata ranges of this group, sorted.
    pub(crate) system: Vec<GroupExtent>,
}

fn overlaps(a: GroupExtent, b: GroupExtent) -> bool {
    a.start < b.start + b.len && b.start < a.start + a.len
}

impl GroupState {
    pub(crate) fn new(space: GroupSpace, system: Vec<GroupExtent>) -> Self {
        GroupState {
            space,
            reserved: Vec::new(),
            pending: PendingRuns::default(),
            system,
        }
    }

    /// Checks that `range` may be freed by its owner: in use, and neither reserved for
    /// someone, already pending, nor metadata.
    pub(crate) fn check_free(&self, range: GroupExtent) -> Result<(), FreeRefusal> {
        if self.system.iter().any(|s| overlaps(*s, range)) {
            return Err(FreeRefusal::SystemZone);
        }
        let end = range
            .start
            .checked_add(range.len)
            .ok_or(FreeRefusal::NotInUse)?;
        if end > self.space_blocks() || self.space.next_free(range.start) < end {
            return Err(FreeRefusal::NotInUse);
        }
        if self.pending.overlaps(range) {
            return Err(FreeRefusal::Pending);
        }
        if self
            .reserved
            .iter()
            .any(|r| r.unused().len > 0 && overlaps(r.unused(), range))
        {
            return Err(FreeRefusal::Reserved);
        }
        Ok(())
    }

    fn space_blocks(&self) -> u32 {
        self.space.blocks()
    }

    /// Takes back the unused part of every released reservation; returns the blocks freed.
    pub(crate) fn reclaim_released(&mut self, group_has_released: &AtomicBool) -> u32 {
        // Cleared before the scan: a run given up during it sets the flag again.
        if !group_has_released.swap(false, Ordering::AcqRel) {
            return 0;
        }
        let mut freed = 0;
        let space = &mut self.space;
        self.reserved.retain(|run| {
            if !run.released.load(Ordering::Acquire) {
                return true;
            }
            let rest = run.unused();
            if rest.len > 0 {
                // OK to unwrap: the unused part of a run is used in `space` and only the
                // group (under this lock) ever frees it.
                space.mark_free(rest).unwrap();
                freed += rest.len;
            }
            false
        });
        freed
    }

    /// Removes `run` from the group and frees its unused part; returns the blocks freed.
    pub(crate) fn release(&mut self, run: &Arc<ReservedRun>) -> u32 {
        run.released.store(true, Ordering::Release);
        let before = self.reserved.len();
        self.reserved.retain(|r| !Arc::ptr_eq(r, run));
        if self.reserved.len() == before {
            return 0; // Already taken back by `reclaim_released`.
        }
        let rest = run.unused();
        // Nothing more may be carved: the owner gave the run up.
        run.next.store(run.end, Ordering::Release);
        if rest.len > 0 {
            // OK to unwrap: as in `reclaim_released`.
            self.space.mark_free(rest).unwrap();
        }
        rest.len
    }

    /// The bitmap to write to disk (`bytes` long, padded with ones past the group, as
    /// mke2fs does) and its free count: the allocator's bitmap without reservations' unused
    /// parts and without pending frees.
    pub(crate) fn disk_bitmap(&self, bytes: usize) -> (Vec<u8>, u32) {
        let mut bitmap = self.space.to_bitmap(bytes);
        let mut free = self.space.free();
        let unused = self.reserved.iter().map(|r| r.unused());
        for range in unused.chain(self.pending.all()) {
            for block in range.start..range.start + range.len {
                bitmap[(block / 8) as usize] &= !(1 << (block % 8));
            }
            free += range.len;
        }
        (bitmap, free)
    }

    /// Bytes this loaded state holds beyond its fixed size.
    pub(crate) fn memory_bytes(&self) -> usize {
        std::mem::size_of::<Self>()
            + self.space.memory_bytes()
            + self.reserved.len() * std::mem::size_of::<std::sync::Arc<ReservedRun>>()
            + self.pending.memory_bytes()
            + self.system.len() * std::mem::size_of::<GroupExtent>()
    }

    /// Blocks held in the unused parts of reservations.
    pub(crate) fn reserved_blocks(&self) -> u64 {
        self.reserved
            .iter()
            .map(|r| u64::from(r.unused().len))
            .sum()
    }
}

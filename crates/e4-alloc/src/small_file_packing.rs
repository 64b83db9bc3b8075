//! Small-file packing: ext4's locality groups, without their mutex.
//!
//! Files of a few blocks are worth keeping together (one thread unpacking an archive writes
//! thousands of them, later read together) and not worth a group-lock search each. So every
//! limit-counter slot (one per thread or CPU) keeps a packing window of `PACK_WINDOW` blocks,
//! and a small file is carved from the caller's window. The window sits behind its own
//! cache-line-padded lock, which only another thread using the same slot ever touches; if
//! it is busy the file is allocated normally rather than waiting. ext4 holds its per-CPU
//! `lg_mutex` across the whole allocation, and a migrated task waits on it.
//!
//! Like reservation windows, a packing window's blocks count as free for `statfs`. What is
//! left of a window when it is replaced (too short for the next file) is freed at once, and
//! the next window is asked for right there.

use std::sync::Arc;

use crossbeam_utils::CachePadded;

use crate::block_allocator::{AllocError, AllocRequest, BlockAllocator, Extent, Reserve};
use crate::group_state::ReservedRun;
use crate::instrumented_lock::InstrumentedMutex;
use crate::reservation_window::ReservationWindow;

/// Largest allocation packed, in blocks: ext4's stream threshold (`s_mb_stream_request`).
pub const SMALL_FILE_BLOCKS: u32 = 16;
/// Blocks a packing window reserves at a time: ext4's `s_mb_group_prealloc`.
pub const PACK_WINDOW: u32 = 512;

/// Blocks `[next, next + remaining)` reserved for one slot's small files: like a file's
/// reservation window, the group's reservation ([`ReservedRun`]), never on disk as used.
#[derive(Debug, Default)]
struct PackWindow {
    run: Option<Arc<ReservedRun>>,
    next: u64,
    remaining: u32,
}

/// One packing window per slot.
pub(crate) struct PackingWindows {
    slots: Box<[CachePadded<InstrumentedMutex<PackWindow>>]>,
}

impl PackingWindows {
    pub(crate) fn new(slots: usize) -> Self {
        PackingWindows {
            slots: (0..slots.max(1))
                .map(|_| CachePadded::new(InstrumentedMutex::new(PackWindow::default())))
                .collect(),
        }
    }
}

impl BlockAllocator {
    /// Allocates `len` blocks for a small file, packed after the previous small file of the
    /// same slot. Larger requests, and any when packing is off, are allocated normally
    /// (and may then come back shorter than `len`).
    pub fn allocate_small_file(
        &self,
        len: u32,
        slot: usize,
        stream: u64,
    ) -> Result<Extent, AllocError> {
        let plain = AllocRequest {
            goal: None,
            len,
            min_len: 1,
            slot,
            stream,
            reserve: Reserve::None,
        };
        if !self.config().pack_small_files || len == 0 || len > SMALL_FILE_BLOCKS {
            return self.allocate(plain);
        }
        let packing = self.packing();
        let cell = &packing.slots[slot % packing.slots.len()];
        let Some(mut window) = cell.try_lock(&self.stats().packing_locks) else {
            return self.allocate(plain);
        };
        if window.remaining < len {
            // The next window starts where this one's unused tail did, so a slot's small
            // files stay in order on disk with no gap.
            let goal = (window.next != 0).then_some(window.next);
            self.release_pack_window(&mut window, slot);
            let (fresh, run) = match self.allocate_run(
                AllocRequest {
                    goal,
                    len: PACK_WINDOW,
                    min_len: len,
                    ..plain
                },
                true,
            ) {
                Ok(fresh) => fresh,
                // Too fragmented or too full for a window: just this file.
                Err(_) => return self.allocate(plain),
            };
            self.window_stats().reserved.add(u64::from(fresh.len));
            *window = PackWindow {
                run,
                next: fresh.start,
                remaining: fresh.len,
            };
        }
        let PackWindow {
            run,
            next,
            remaining,
        } = &mut *window;
        Ok(self.carve(run.as_deref(), next, remaining, len))
    }

    /// [`Self::allocate_small_file`] for a caller that may use the root reserve when
    /// `privileged`. Root-reserved blocks are never put in a packing window (shared by
    /// every caller of the slot): when only the reserve is left, a privileged small file
    /// gets its blocks on their own.
    pub fn allocate_small_file_as(
        &self,
        len: u32,
        slot: usize,
        stream: u64,
        privileged: bool,
    ) -> Result<Extent, AllocError> {
        match self.allocate_small_file(len, slot, stream) {
            Err(AllocError::NoSpace) if privileged => self.allocate(AllocRequest {
                goal: None,
                len,
                min_len: 1,
                slot,
                stream,
                reserve: Reserve::Root,
            }),
            other => other,
        }
    }

    /// Hands what is left of a packing window to `window`, an empty reservation window of a
    /// file, when the packing window goes on right at `goal`, the block after the file's
    /// last: the file was the last one packed there and now grows past a small file's size.
    /// It then stays contiguous, as ext4's files do since it allocates at write-back,
    /// knowing their size; without this an archive's files (tar writes a few blocks first)
    /// took their first blocks here and the rest from a window elsewhere, in two extents.
    /// `slot`'s window is tried first, then the others' (a FUSE mount's workers write one
    /// file's pieces from different threads); a busy one is skipped, never waited for. The
    /// slot that gave its window asks for a new one at its next small file, after this
    /// one. For a file's first growth only: it touches every slot's lock.
    pub fn adopt_pack_window(
        &self,
        window: &mut ReservationWindow,
        goal: u64,
        slot: usize,
    ) -> bool {
        if !self.config().pack_small_files
            || self.config().window_cap == 0
            || window.remaining() != 0
        {
            return false;
        }
        let slots = &self.packing().slots;
        (0..slots.len()).any(|i| {
            let cell = &slots[(slot + i) % slots.len()];
            let Some(mut pack) = cell.try_lock(&self.stats().packing_locks) else {
                return false;
            };
            if pack.remaining == 0 || pack.next != goal {
                return false;
            }
            let end = pack.next + u64::from(pack.remaining);
            window.adopt(pack.run.take(), pack.next, pack.remaining);
            // The slot's next packing window is asked for after the one handed over.
            pack.next = end;
            pack.remaining = 0;
            true
        })
    }

    /// Gives what is left of a packing window back to its group.
    fn release_pack_window(&self, window: &mut PackWindow, slot: usize) {
        if let Some(run) = window.run.take() {
            self.release_run(&run, slot);
        }
        window.remaining = 0;
    }

    /// Frees what is left of every packing window (when a caller wants them gone, e.g. at
    /// unmount; the bitmap written to disk never contains them either way).
    pub fn release_small_file_windows(&self) {
        for (slot, cell) in self.packing().slots.iter().enumerate() {
            let mut window = cell.lock(&self.stats().packing_locks);
            self.release_pack_window(&mut window, slot);
        }
    }

    /// Frees what is left of every packing window not in use right now, returning how many
    /// blocks that gave back: part of the allocator's last resort before "no space". A
    /// window in use (its own caller's, perhaps) is skipped, not waited for.
    pub(crate) fn reclaim_small_file_windows(&self) -> u64 {
        let mut reclaimed = 0;
        for (slot, cell) in self.packing().slots.iter().enumerate() {
            if let Some(mut window) = cell.try_lock(&self.stats().packing_locks) {
                reclaimed += u64::from(window.remaining);
                self.release_pack_window(&mut window, slot);
            }
        }
        reclaimed
    }

    /// Blocks held in packing windows (O(slots), for checks and reports).
    pub fn small_file_window_blocks(&self) -> u64 {
        self.packing()
            .slots
            .iter()
            .map(|cell| u64::from(cell.lock(&self.stats().packing_locks).remaining))
            .sum()
    }
}

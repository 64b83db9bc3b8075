//! Reservation windows (requirement S1c): a file that appends gets a run of blocks reserved
//! ahead of its end, so that concurrent appenders do not interleave block by block.
//!
//! The window belongs to the file (the caller keeps it beside the inode, under the inode's
//! lock), so carving an append out of it touches no shared lock and no shared atomic. When
//! it runs out, the next window is requested at the block right after it, so a file that
//! grows alone stays one extent; the window doubles each time, from 16 blocks up to a cap.
//! This is mballoc's request normalization done once per window rather than per request:
//! a window is a power of two at least as large as the request, and a file reopened for
//! appending starts with a window the size of what it already holds
//! ([`ReservationWindow::for_file`]), as mballoc sizes its window from `i_size`.
//!
//! The cap: an extent cannot exceed 32,768 blocks (the `ee_len` limit, also the size of a
//! 4 KiB-block group), and a window is space other files cannot use until it is released.
//! 8,192 blocks (32 MiB at 4 KiB) keeps per-file stranded space bounded while making
//! extents of tens of MiB under any number of concurrent appenders. Windows are released
//! on close and truncate, and count as free space for `statfs`.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::block_allocator::{AllocError, AllocRequest, BlockAllocator, Extent, Reserve};
use crate::group_state::ReservedRun;

/// The largest window by default, in blocks.
pub const DEFAULT_WINDOW_CAP: u32 = 8192;
/// The first window a file gets.
const FIRST_WINDOW: u32 = 16;

/// A file's reserved run: blocks `[next, next + remaining)` are set aside for the file's
/// future appends.
///
/// It is an owned value, neither `Clone` nor `Copy`: two copies would hand the same blocks
/// out twice. Its blocks are never in the bitmap written to disk (they are the group's
/// reservation, [`ReservedRun`]), and dropping it gives them back: the group takes the
/// unused part back the next time its lock is held, or before any "no space" answer.
/// [`BlockAllocator::release_window`] gives them back at once.
#[derive(Debug, Default)]
pub struct ReservationWindow {
    run: Option<Arc<ReservedRun>>,
    /// The first unused block (or, once used up, the block after the window: where the next
    /// window is asked for).
    next: u64,
    remaining: u32,
    /// Size of the window to ask for next.
    grow_to: u32,
    /// The largest window this owner gets, below the allocator's cap (0: the allocator's).
    cap: u32,
}

impl Drop for ReservationWindow {
    fn drop(&mut self) {
        if let Some(run) = &self.run {
            run.give_up();
        }
    }
}

impl ReservationWindow {
    pub fn new() -> Self {
        ReservationWindow::default()
    }

    /// The window of a file that already holds `blocks` blocks: its first reservation is
    /// the file's size rounded up to a power of two (then capped), since a file's past
    /// growth predicts its next.
    pub fn for_file(blocks: u64) -> Self {
        ReservationWindow {
            run: None,
            next: 0,
            remaining: 0,
            grow_to: blocks.clamp(1, 1 << 31).next_power_of_two() as u32,
            cap: 0,
        }
    }

    /// The window of an owner that grows slowly and may stop at any time (a directory,
    /// one block per few dozen entries): windows of at most `cap` blocks, so what an
    /// owner that stops growing holds back is bounded, while concurrent growers still get
    /// runs rather than single blocks.
    pub fn capped(cap: u32) -> Self {
        ReservationWindow {
            run: None,
            next: 0,
            remaining: 0,
            grow_to: 0,
            cap: cap.max(1),
        }
    }

    /// Lets a capped window grow to `cap` blocks from now on (never lowers the cap; an
    /// uncapped window stays uncapped): an owner whose growth has proved larger than its
    /// first cap foresaw (a directory of thousands of blocks) gets larger runs.
    pub fn raise_cap(&mut self, cap: u32) {
        if self.cap != 0 {
            self.cap = self.cap.max(cap);
        }
    }

    /// Takes over the reservation `[next, next + remaining)` of `run` (a packing window's
    /// rest, [`BlockAllocator::adopt_pack_window`]), giving up the run this window held.
    pub(crate) fn adopt(&mut self, run: Option<Arc<ReservedRun>>, next: u64, remaining: u32) {
        if let Some(old) = std::mem::replace(&mut self.run, run) {
            old.give_up();
        }
        self.next = next;
        self.remaining = remaining;
    }

    /// Blocks reserved and not yet used.
    pub fn remaining(&self) -> u32 {
        self.remaining
    }

    /// Starts the window afresh, as [`BlockAllocator::release_window`] leaves it, when it
    /// holds no run: there is nothing to give back to a group, so no group lock or
    /// allocator slot is needed. Returns false, changing nothing, when it holds one.
    pub fn reset_if_unreserved(&mut self) -> bool {
        if self.run.is_some() {
            return false;
        }
        *self = ReservationWindow::new();
        true
    }

    /// The reserved blocks not yet used, if any.
    pub fn unused(&self) -> Option<Extent> {
        (self.remaining > 0).then_some(Extent {
            start: self.next,
            len: self.remaining,
        })
    }
}

impl BlockAllocator {
    /// Allocates up to `len` blocks for an append, from the file's window when it has room.
    /// `goal` is the block after the file's last one. The extent may be shorter than `len`
    /// when the window ends; the caller asks again for the rest.
    pub fn allocate_append(
        &self,
        window: &mut ReservationWindow,
        goal: Option<u64>,
        len: u32,
        slot: usize,
        stream: u64,
    ) -> Result<Extent, AllocError> {
        let cap = match (self.config().window_cap, window.cap) {
            (0, _) => 0,
            (allocator, 0) => allocator,
            (allocator, owner) => allocator.min(owner),
        };
        if cap == 0 {
            return self.allocate(AllocRequest {
                goal,
                len,
                min_len: 1,
                slot,
                stream,
                reserve: Reserve::None,
            });
        }
        if window.remaining == 0 {
            let size = len
                .checked_next_power_of_two()
                .unwrap_or(len)
                .max(window.grow_to.max(FIRST_WINDOW))
                .min(cap.max(len));
            let next_goal = if window.next != 0 {
                Some(window.next)
            } else {
                goal
            };
            let (fresh, run) = self.allocate_run(
                AllocRequest {
                    goal: next_goal,
                    len: size,
                    min_len: 1,
                    slot,
                    stream,
                    reserve: Reserve::None,
                },
                true,
            )?;
            self.window_stats().reserved.add(u64::from(fresh.len));
            // The used-up run is dropped here: the group forgets it at its next lock.
            if let Some(old) = std::mem::replace(&mut window.run, run) {
                old.give_up();
            }
            window.next = fresh.start;
            window.remaining = fresh.len;
            window.grow_to = size.saturating_mul(2).min(cap);
        }
        Ok(self.carve(
            window.run.as_deref(),
            &mut window.next,
            &mut window.remaining,
            len,
        ))
    }

    /// Takes up to `len` blocks off the front of a reservation, publishing the new front to
    /// the group (one release store to a line only this owner writes; no lock), and marks
    /// the group's bitmap changed (a load of the shared dirty word, and a store only for the
    /// first carve after a write-back). Carves run inside transactions and write-back takes
    /// the dirty marks with every transaction stopped, so no mark is lost between the two.
    pub(crate) fn carve(
        &self,
        run: Option<&ReservedRun>,
        next: &mut u64,
        remaining: &mut u32,
        len: u32,
    ) -> Extent {
        let take = len.min(*remaining);
        let extent = Extent {
            start: *next,
            len: take,
        };
        *next += u64::from(take);
        *remaining -= take;
        if let (Some(run), true) = (run, take > 0) {
            let (group, offset) = self.geometry().group_of(*next - 1);
            run.next.store(offset + 1, Ordering::Release);
            self.mark_dirty(group);
        }
        self.window_stats().consumed.add(u64::from(take));
        extent
    }

    /// [`Self::allocate_append`] for a caller that may use the root reserve (root, or the
    /// reserved uid/gid) when `privileged`. Root-reserved blocks are never put in a window,
    /// where an unprivileged writer of the same file could use them: when only the reserve
    /// is left, a privileged append gets exactly `len` blocks (or fewer), windowless.
    pub fn allocate_append_as(
        &self,
        window: &mut ReservationWindow,
        goal: Option<u64>,
        len: u32,
        slot: usize,
        stream: u64,
        privileged: bool,
    ) -> Result<Extent, AllocError> {
        match self.allocate_append(window, goal, len, slot, stream) {
            Err(AllocError::NoSpace) if privileged => {
                let extent = self.allocate(AllocRequest {
                    goal: if window.next != 0 {
                        Some(window.next)
                    } else {
                        goal
                    },
                    len,
                    min_len: 1,
                    slot,
                    stream,
                    reserve: Reserve::Root,
                })?;
                // The next window is asked for after this extent, to stay contiguous.
                window.next = extent.end();
                Ok(extent)
            }
            other => other,
        }
    }

    /// Gives back what is left of a window at once (on close or truncate).
    pub fn release_window(&self, window: &mut ReservationWindow, slot: usize) {
        if let Some(run) = window.run.take() {
            self.release_run(&run, slot);
        }
        *window = ReservationWindow::new();
    }
}

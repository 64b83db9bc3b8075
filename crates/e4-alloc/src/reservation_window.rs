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

use crate::block_allocator::{AllocError, AllocRequest, BlockAllocator, Extent};

/// The largest window by default, in blocks.
pub const DEFAULT_WINDOW_CAP: u32 = 8192;
/// The first window a file gets.
const FIRST_WINDOW: u32 = 16;

/// A file's reserved run: blocks `[next, next + remaining)` are allocated to the file's
/// future appends.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ReservationWindow {
    next: u64,
    remaining: u32,
    /// Size of the window to ask for next.
    grow_to: u32,
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
            grow_to: blocks.clamp(1, 1 << 31).next_power_of_two() as u32,
            ..ReservationWindow::default()
        }
    }

    /// Blocks reserved and not yet used.
    pub fn remaining(&self) -> u32 {
        self.remaining
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
        let cap = self.config().window_cap;
        if cap == 0 {
            return self.allocate(AllocRequest {
                goal,
                len,
                min_len: 1,
                slot,
                stream,
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
            let fresh = self.allocate(AllocRequest {
                goal: next_goal,
                len: size,
                min_len: 1,
                slot,
                stream,
            })?;
            self.window_stats().reserved.add(u64::from(fresh.len));
            window.next = fresh.start;
            window.remaining = fresh.len;
            window.grow_to = size.saturating_mul(2).min(cap);
        }
        let take = len.min(window.remaining);
        let extent = Extent {
            start: window.next,
            len: take,
        };
        window.next += u64::from(take);
        window.remaining -= take;
        self.window_stats().consumed.add(u64::from(take));
        Ok(extent)
    }

    /// Gives back what is left of a window (on close or truncate).
    pub fn release_window(
        &self,
        window: &mut ReservationWindow,
        slot: usize,
    ) -> Result<(), AllocError> {
        if window.remaining > 0 {
            let rest = Extent {
                start: window.next,
                len: window.remaining,
            };
            self.free(rest, slot)?;
            self.window_stats().consumed.add(u64::from(rest.len));
        }
        *window = ReservationWindow::new();
        Ok(())
    }

    /// Free blocks as `statfs` reports them: unreserved blocks plus blocks held in windows.
    pub fn free_blocks_for_statfs(&self) -> u64 {
        let w = self.window_stats();
        self.free_blocks() + (w.reserved.get() - w.consumed.get())
    }
}

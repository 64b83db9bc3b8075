//! The log room: what the operations running in a transaction may still add to it, reserved
//! before they join, so that a transaction always fits its log however many threads or
//! operations in steps are running (jbd2's `t_outstanding_credits`, checked in
//! `start_this_handle`).
//!
//! A transaction's size is bounded in two parts. What has been dirtied is counted exactly
//! (`commit.rs`, `log_blocks_pending`), and an operation does not join a transaction that
//! is already past the most it may log (the admission in [`super::Transactions::begin`]):
//! it commits, or waits for the commit, first. What the operations already in flight may
//! still add is bounded by this room: each handle reserves its credits here before it joins
//! and gives them back when it ends. Every block dirtied after a transaction passed its
//! bound is dirtied by a handle that was admitted before, and so holds a reservation while
//! it runs; the handles holding reservations at one time hold at most the room's total. A
//! transaction is therefore at most its bound plus the room, which `filesystem.rs` sizes
//! within the log. Before the room, 64 threads each unlinking a large file on a small log
//! made a transaction of 1,263 blocks for a log of 1,024 (`bounded_transactions`).
//!
//! The room is a [`LimitCounter`]: a reservation and its release touch the thread slot's
//! own cache line, so the hot path adds no shared write while the room is far from
//! exhausted. A thread that finds it exhausted waits, outside any transaction, for a
//! handle to end. A credit declared while a handle runs (an extent split, a freed group)
//! cannot wait (the handle holds locks, and a commit waits for it): it takes room if there
//! is some, and otherwise runs on the margin `filesystem.rs` leaves beyond the room,
//! counted in [`LogRoom::overdrafts`]. Operations whose size is known only as they run and
//! may be large (steps of a truncate or an unlink, pieces of a write) reserve their whole
//! step when they begin, so what they declare later is already covered.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use e4_alloc::stats::Counter;
use e4_alloc::LimitCounter;
use parking_lot::{Condvar, Mutex};

/// How long a thread waiting for room sleeps before it looks again, in case a release
/// fell between its last look and its sleep.
const RECHECK: Duration = Duration::from_millis(1);

/// Room taken beyond what a handle holds, at least this much at a time, so a handle that
/// declares a credit at a time (a block freed per group) does not take room per credit.
const TOP_UP: u64 = 8;

pub(crate) struct LogRoom {
    room: LimitCounter,
    /// The room's size: no reservation is larger.
    total: u64,
    /// Threads waiting for room: a release wakes them only when there are some.
    waiting: AtomicUsize,
    wake: Mutex<()>,
    freed: Condvar,
    /// Reservations that had to wait for room, and the nanoseconds they waited.
    waits: Counter,
    wait_nanos: Counter,
    /// Credits declared inside a handle when the room had none left.
    overdrafts: Counter,
}

/// What one handle holds of the room.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Held {
    /// Units taken from the room, given back when the handle ends.
    pub reserved: u64,
    /// Credits the handle declared (at its start and since).
    pub declared: u64,
}

impl LogRoom {
    /// A room of `total` log blocks for `slots` thread slots.
    pub(crate) fn new(total: u64, slots: usize) -> Self {
        let total = total.max(1);
        // A slot caches a batch; the counter refills slots only while the pool holds more
        // than all slots' batches, so a batch is a fraction of the room.
        let batch = (total / (4 * slots as u64)).clamp(1, 64);
        LogRoom {
            room: LimitCounter::new(total, slots, batch),
            total,
            waiting: AtomicUsize::new(0),
            wake: Mutex::new(()),
            freed: Condvar::new(),
            waits: Counter::default(),
            wait_nanos: Counter::default(),
            overdrafts: Counter::default(),
        }
    }

    /// Reserves `n` units (at most the room's total) from `slot`, waiting until they are
    /// free. The caller holds no handle and no lock another operation needs. While anyone
    /// waits, a new reservation waits with them rather than passing them: a step's large
    /// reservation would otherwise wait for as long as small ones kept arriving.
    pub(crate) fn reserve(&self, slot: usize, n: u64) -> u64 {
        let n = n.min(self.total);
        if self.waiting.load(Ordering::SeqCst) == 0 && self.room.try_reserve(slot, n) {
            return n;
        }
        self.waits.add(1);
        let started = Instant::now();
        self.waiting.fetch_add(1, Ordering::SeqCst);
        let mut guard = self.wake.lock();
        while !self.room.try_reserve(slot, n) {
            self.freed.wait_for(&mut guard, RECHECK);
        }
        drop(guard);
        self.waiting.fetch_sub(1, Ordering::SeqCst);
        // OK to cast: u64 nanoseconds cover 584 years.
        self.wait_nanos.add(started.elapsed().as_nanos() as u64);
        n
    }

    /// Covers what `held` declared beyond what it reserved, without waiting: from the room
    /// while it has some, else on the log's margin (counted).
    #[inline]
    pub(crate) fn top_up(&self, slot: usize, held: &mut Held) {
        if !self.try_cover(slot, held) {
            self.overdrafts.add(held.declared - held.reserved);
            // Counted once: what runs on the margin is not taken again.
            held.declared = held.reserved;
        }
    }

    /// Covers what `held` declared beyond what it reserved from the room, if the room has
    /// it; false (nothing taken) if not.
    #[inline]
    pub(crate) fn try_cover(&self, slot: usize, held: &mut Held) -> bool {
        let short = held.declared.saturating_sub(held.reserved);
        if short == 0 {
            return true;
        }
        let want = short.max(TOP_UP);
        if self.room.try_reserve(slot, want) {
            held.reserved += want;
            true
        } else if self.room.try_reserve(slot, short) {
            held.reserved += short;
            true
        } else {
            false
        }
    }

    /// Gives back what a handle reserved, waking threads waiting for room.
    pub(crate) fn release(&self, slot: usize, reserved: u64) {
        self.room.release(slot, reserved);
        if self.waiting.load(Ordering::SeqCst) > 0 {
            let _guard = self.wake.lock();
            self.freed.notify_all();
        }
    }

    /// Writes to the room's shared pool (slot refills, reservations served from the pool,
    /// drains): the room's only shared writes.
    pub(crate) fn shared_writes(&self) -> u64 {
        let s = self.room.stats();
        s.refills.get() + s.pool_direct.get() + s.drains.get()
    }

    /// Reservations that waited for room.
    pub(crate) fn waits(&self) -> u64 {
        self.waits.get()
    }

    /// Nanoseconds reservations spent waiting for room.
    pub(crate) fn wait_nanos(&self) -> u64 {
        self.wait_nanos.get()
    }

    /// Credits declared inside handles that found no room left.
    pub(crate) fn overdrafts(&self) -> u64 {
        self.overdrafts.get()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU64;

    #[test]
    fn a_reservation_larger_than_the_room_takes_all_of_it() {
        let room = LogRoom::new(100, 4);
        assert_eq!(room.reserve(0, 500), 100);
        room.release(0, 100);
        assert_eq!(room.reserve(1, 30), 30);
    }

    #[test]
    fn top_ups_take_room_until_none_is_left_then_count_overdrafts() {
        let room = LogRoom::new(20, 4);
        let mut held = Held {
            reserved: room.reserve(0, 10),
            declared: 12,
        };
        room.top_up(0, &mut held);
        assert_eq!(held.reserved, 18, "a top-up of at least {TOP_UP}");
        held.declared = 25;
        room.top_up(0, &mut held);
        assert_eq!(room.overdrafts(), 7, "2 left, 7 short: none taken");
        assert_eq!(held.reserved, 18);
        room.release(0, held.reserved);
        assert_eq!(room.reserve(2, 20), 20, "the overdraft was never taken");
    }

    /// Many more threads than cores reserve, hold and give back: at no moment do the
    /// reservations held add up to more than the room, and threads that found it full
    /// waited and went on (a release wakes them).
    #[test]
    fn reservations_held_at_once_never_exceed_the_room() {
        let room = LogRoom::new(30, 8);
        let held = AtomicU64::new(0);
        let most = AtomicU64::new(0);
        std::thread::scope(|s| {
            for t in 0..16usize {
                let (room, held, most) = (&room, &held, &most);
                s.spawn(move || {
                    for i in 0..2_000u64 {
                        let n = 1 + (i + t as u64) % 20;
                        let got = room.reserve(t, n);
                        let now = held.fetch_add(got, Ordering::SeqCst) + got;
                        most.fetch_max(now, Ordering::SeqCst);
                        std::thread::yield_now();
                        held.fetch_sub(got, Ordering::SeqCst);
                        room.release(t, got);
                    }
                });
            }
        });
        assert!(most.load(Ordering::SeqCst) <= 30);
        assert!(
            room.waits() > 0,
            "16 threads on a room of 30 must have waited"
        );
        assert!(room.wait_nanos() > 0, "and the waits are timed");
    }
}

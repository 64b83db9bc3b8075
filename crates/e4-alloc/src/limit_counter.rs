//! A free-space counter that never over-commits and stays O(1) per operation at any slot
//! count (requirement S4).
//!
//! Units live in exactly one place: the shared `pool`, a slot's private `budget`, or in the
//! hands of whoever reserved them. A reservation only ever moves units out of a budget or the
//! pool with a compare-and-swap that checks they are there, so it can never succeed when
//! fewer than `n` units are free: exactness is conservation, not summation.
//!
//! The common case touches only the caller's slot (its own cache line). A slot refills
//! `batch` units at a time from the pool, but only while the pool stays above
//! `threshold = slots * batch`, so at most `2 * slots * batch` units are ever cached in
//! slots: linear in the slot count, not quadratic like ext4's percpu watermark. Below the
//! threshold the counter degrades to the single pool atomic (releases go straight to the
//! pool). A request the pool cannot satisfy drains every slot back into the pool before it
//! fails, so stranded budgets never cause a false "no space"; a count of refills in flight
//! makes that failure exact even while other slots refill concurrently.

use crossbeam_utils::CachePadded;

use crate::stats::Counter;
use crate::sync::{AtomicU64, Ordering};

/// Encoding of `LimitCounter::refills`.
const REFILL_IN_FLIGHT: u64 = 1;
const REFILL_DONE: u64 = 1 << 16;
const IN_FLIGHT_MASK: u64 = REFILL_DONE - 1;

/// How a [`LimitCounter`]'s operations went, for reports.
#[derive(Default)]
pub struct LimitCounterStats {
    /// Slot refills from the pool (one shared CAS each, once per `batch` units).
    pub refills: Counter,
    /// Reservations served directly from the pool (degraded mode).
    pub pool_direct: Counter,
    /// Drains of every slot into the pool (only when the pool alone cannot serve).
    pub drains: Counter,
}

pub struct LimitCounter {
    pool: CachePadded<AtomicU64>,
    /// Refills in flight (low 16 bits) and refills completed (the rest): a failure is exact
    /// only if no refill was in flight or completed while it drained the slots.
    refills: CachePadded<AtomicU64>,
    slots: Box<[CachePadded<AtomicU64>]>,
    batch: u64,
    threshold: u64,
    stats: LimitCounterStats,
}

impl LimitCounter {
    /// A counter holding `total` units, with `slots` slots (one per thread or CPU) refilling
    /// `batch` units at a time.
    pub fn new(total: u64, slots: usize, batch: u64) -> Self {
        let slots = slots.max(1);
        let batch = batch.max(1);
        LimitCounter {
            pool: CachePadded::new(AtomicU64::new(total)),
            refills: CachePadded::new(AtomicU64::new(0)),
            slots: (0..slots)
                .map(|_| CachePadded::new(AtomicU64::new(0)))
                .collect(),
            batch,
            threshold: slots as u64 * batch,
            stats: LimitCounterStats::default(),
        }
    }

    pub fn stats(&self) -> &LimitCounterStats {
        &self.stats
    }

    fn slot(&self, slot: usize) -> &AtomicU64 {
        &self.slots[slot % self.slots.len()]
    }

    /// Subtracts `n` from `cell` if it holds at least `n`.
    fn take(cell: &AtomicU64, n: u64) -> bool {
        let mut cur = cell.load(Ordering::Acquire);
        loop {
            if cur < n {
                return false;
            }
            match cell.compare_exchange_weak(cur, cur - n, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return true,
                Err(seen) => cur = seen,
            }
        }
    }

    /// Reserves `n` units for the caller on `slot`; false if fewer than `n` are free.
    pub fn try_reserve(&self, slot: usize, n: u64) -> bool {
        if n == 0 {
            return true;
        }
        let own = self.slot(slot);
        // Served from the caller's slot: nothing shared touched, and nothing counted (a
        // count here was a second read-modify-write on every reservation).
        if Self::take(own, n) {
            return true;
        }
        if self.refill_and_take(own, n) {
            return true;
        }
        if Self::take(&self.pool, n) {
            self.stats.pool_direct.add(1);
            return true;
        }
        self.drain_and_take(n)
    }

    /// Reserves `n` units if they are free, else every free unit if there are `min` or more
    /// (fewer than `n`); returns how many (0: fewer than `min` are free). An allocation
    /// larger than the free space then gets what is left in one request, as ext4 halves its
    /// request until the free count covers it (`ext4_mb_new_blocks`), not `min` at a time.
    /// The fallback costs one compare-and-swap on the pool: the failed [`Self::try_reserve`]
    /// has drained every slot into it.
    pub fn try_reserve_up_to(&self, slot: usize, n: u64, min: u64) -> u64 {
        if self.try_reserve(slot, n) {
            return n;
        }
        let min = min.max(1);
        match self
            .pool
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |held| {
                (held >= min).then(|| held - held.min(n))
            }) {
            Ok(held) => {
                self.stats.pool_direct.add(1);
                held.min(n)
            }
            Err(_) => 0,
        }
    }

    /// Reserves as many of `n` units as are free, up to `n`, and returns how many: for taking
    /// back units that turned out not to exist (a group found corrupt) when some of them
    /// may already be promised. Whole-or-nothing attempts, halving on failure: O(log n).
    pub fn take_up_to(&self, slot: usize, n: u64) -> u64 {
        let (mut taken, mut ask) = (0, n);
        while ask > 0 {
            if self.try_reserve(slot, ask) {
                taken += ask;
                ask = ask.min(n - taken);
            } else {
                ask /= 2;
            }
        }
        taken
    }

    /// Moves `n + batch` units from the pool, keeping `batch` in the slot, if the pool stays
    /// above the threshold afterwards.
    fn refill_and_take(&self, own: &AtomicU64, n: u64) -> bool {
        let want = n + self.batch;
        let mut cur = self.pool.load(Ordering::Acquire);
        loop {
            if cur < want + self.threshold {
                return false;
            }
            self.refills.fetch_add(REFILL_IN_FLIGHT, Ordering::AcqRel);
            match self.pool.compare_exchange_weak(
                cur,
                cur - want,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => {
                    own.fetch_add(self.batch, Ordering::AcqRel);
                    self.refills
                        .fetch_add(REFILL_DONE - REFILL_IN_FLIGHT, Ordering::AcqRel);
                    self.stats.refills.add(1);
                    return true;
                }
                Err(seen) => {
                    self.refills.fetch_sub(REFILL_IN_FLIGHT, Ordering::AcqRel);
                    cur = seen;
                }
            }
        }
    }

    /// The slow path before failing: pull every slot's budget into the pool and try again.
    /// Fails only if no refill overlapped the drain, so the failure saw every free unit.
    fn drain_and_take(&self, n: u64) -> bool {
        loop {
            let before = self.refills.load(Ordering::Acquire);
            self.stats.drains.add(1);
            for slot in self.slots.iter() {
                let units = slot.swap(0, Ordering::AcqRel);
                if units > 0 {
                    self.pool.fetch_add(units, Ordering::AcqRel);
                }
            }
            if Self::take(&self.pool, n) {
                self.stats.pool_direct.add(1);
                return true;
            }
            let after = self.refills.load(Ordering::Acquire);
            if before == after && before & IN_FLIGHT_MASK == 0 {
                return false;
            }
            // A refill was in flight: its units may have been between pool and slot.
            crate::sync::spin_hint();
        }
    }

    /// Returns `n` units (freed blocks, a cancelled reservation).
    pub fn release(&self, slot: usize, n: u64) {
        if n == 0 {
            return;
        }
        // Cache in the slot only while plenty is free; near empty, the pool must see it.
        if self.pool.load(Ordering::Acquire) >= self.threshold {
            let own = self.slot(slot);
            let had = own.fetch_add(n, Ordering::AcqRel);
            // Keep a slot's cache bounded: return the excess over two batches.
            let excess = (had + n).saturating_sub(2 * self.batch);
            if excess > 0 && Self::take(own, excess) {
                self.pool.fetch_add(excess, Ordering::AcqRel);
            }
        } else {
            self.pool.fetch_add(n, Ordering::AcqRel);
        }
    }

    /// Units in the shared pool: a lower bound on [`Self::sum`], short by at most what the
    /// slots cache (two batches each). O(1), for heuristics such as Orlov's averages.
    pub fn estimate(&self) -> u64 {
        self.pool.load(Ordering::Relaxed)
    }

    /// Units not reserved: exact when no operation is in flight; O(slots), so for reports
    /// and write-back, never for the allocation path.
    pub fn sum(&self) -> u64 {
        self.pool.load(Ordering::Acquire)
            + self
                .slots
                .iter()
                .map(|s| s.load(Ordering::Acquire))
                .sum::<u64>()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU64 as StdAtomic;

    #[test]
    fn reserve_release_and_sum() {
        let c = LimitCounter::new(1000, 4, 8);
        assert!(c.try_reserve(0, 10));
        assert!(c.try_reserve(1, 990));
        assert!(!c.try_reserve(2, 1));
        assert_eq!(c.sum(), 0);
        c.release(3, 5);
        assert_eq!(c.sum(), 5);
        assert!(c.try_reserve(0, 5));
        assert!(!c.try_reserve(0, 1));
    }

    #[test]
    fn reserving_up_to_takes_what_is_free_in_one_request() {
        let c = LimitCounter::new(100, 4, 8);
        assert_eq!(c.try_reserve_up_to(1, 30, 1), 30, "covered: all of it");
        // 70 left, some cached in slot 1: the fallback drains them and takes every unit.
        assert_eq!(c.try_reserve_up_to(2, 500, 1), 70);
        assert_eq!(c.sum(), 0);
        assert_eq!(c.try_reserve_up_to(0, 5, 1), 0, "nothing free");
        c.release(3, 4);
        assert_eq!(c.try_reserve_up_to(0, 10, 5), 0, "fewer than min free");
        assert_eq!(c.sum(), 4, "a refused reservation takes nothing");
        assert_eq!(c.try_reserve_up_to(0, 10, 4), 4);
    }

    #[test]
    fn steady_state_touches_shared_state_once_per_batch() {
        let c = LimitCounter::new(1 << 30, 16, 64);
        for _ in 0..64_000 {
            assert!(c.try_reserve(3, 1));
        }
        let refills = c.stats().refills.get();
        assert!(refills <= 64_000 / 64 + 1, "{refills} refills");
        assert_eq!(c.stats().pool_direct.get() + c.stats().drains.get(), 0);
    }

    /// N threads on 1,728 slots race for the last K units in small requests: exactly K are
    /// handed out, never more, and nothing is left stranded in a slot.
    #[test]
    fn enospc_race_with_1728_slots() {
        for (total, batch) in [(10_000u64, 4u64), (777, 1), (50_000, 32)] {
            let c = LimitCounter::new(total, 1728, batch);
            let taken = StdAtomic::new(0);
            std::thread::scope(|s| {
                for t in 0..16usize {
                    let (c, taken) = (&c, &taken);
                    s.spawn(move || {
                        let mut n = 0;
                        // Each thread hops over many slots, as threads migrating between CPUs do.
                        let mut slot = t * 108;
                        loop {
                            let want = 1 + (slot as u64 % 3);
                            if c.try_reserve(slot, want) {
                                n += want;
                            } else if !c.try_reserve(slot, 1) {
                                break;
                            } else {
                                n += 1;
                            }
                            slot = (slot + 1) % 1728;
                        }
                        taken.fetch_add(n, std::sync::atomic::Ordering::Relaxed);
                    });
                }
            });
            assert_eq!(taken.load(std::sync::atomic::Ordering::Relaxed), total);
            assert_eq!(c.sum(), 0);
        }
    }

    /// Mixed reserve and release from many more threads than cores: units are conserved.
    #[test]
    fn conservation_under_stress() {
        let total = 100_000u64;
        let c = LimitCounter::new(total, 8, 16);
        let held = StdAtomic::new(0);
        std::thread::scope(|s| {
            for t in 0..64usize {
                let (c, held) = (&c, &held);
                s.spawn(move || {
                    let mut mine = Vec::new();
                    for i in 0..5_000u64 {
                        let n = 1 + (i * 7 + t as u64) % 50;
                        if i % 3 != 2 && c.try_reserve(t, n) {
                            mine.push(n);
                        } else if let Some(n) = mine.pop() {
                            c.release(t, n);
                        }
                    }
                    held.fetch_add(
                        mine.iter().sum::<u64>(),
                        std::sync::atomic::Ordering::Relaxed,
                    );
                });
            }
        });
        assert_eq!(
            c.sum() + held.load(std::sync::atomic::Ordering::Relaxed),
            total
        );
    }
}

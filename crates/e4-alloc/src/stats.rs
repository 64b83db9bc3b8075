//! Instrumentation that can stay on in benchmarks: every lock and shared atomic on the
//! allocation and free paths is counted, in striped counters so that counting does not
//! itself become a shared hot cache line.

use crossbeam_utils::CachePadded;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// Stripes per counter: threads hash onto them by a per-thread index.
const STRIPES: usize = 64;

fn thread_stripe() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static STRIPE: usize = NEXT.fetch_add(1, Ordering::Relaxed) % STRIPES;
    }
    STRIPE.with(|s| *s)
}

/// A monotonically increasing event count, striped over cache lines.
pub struct Counter {
    stripes: Box<[CachePadded<AtomicU64>]>,
}

impl Default for Counter {
    fn default() -> Self {
        Counter {
            stripes: (0..STRIPES)
                .map(|_| CachePadded::new(AtomicU64::new(0)))
                .collect(),
        }
    }
}

impl Counter {
    /// Adds `n` on the calling thread's stripe.
    #[inline]
    pub fn add(&self, n: u64) {
        self.stripes[thread_stripe()].fetch_add(n, Ordering::Relaxed);
    }

    /// Subtracts `n` on the calling thread's stripe (a stripe may wrap; the total does not
    /// as long as it never goes below zero).
    #[inline]
    pub fn sub(&self, n: u64) {
        self.stripes[thread_stripe()].fetch_sub(n, Ordering::Relaxed);
    }

    /// The total (not a snapshot: concurrent adds may or may not be included).
    pub fn get(&self) -> u64 {
        self.stripes
            .iter()
            .fold(0u64, |sum, s| sum.wrapping_add(s.load(Ordering::Relaxed)))
    }
}

/// Lock events of one kind of lock (e.g. all group locks).
#[derive(Default)]
pub struct LockStats {
    /// Acquisitions, blocking or by a successful try-lock.
    pub acquisitions: Counter,
    /// Acquisitions that found the lock held and had to wait.
    pub contended: Counter,
    /// Try-locks that found the lock held and skipped it.
    pub try_skips: Counter,
}

/// A plain copy of the counters, for reports.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LockSnapshot {
    pub acquisitions: u64,
    pub contended: u64,
    pub try_skips: u64,
}

impl LockStats {
    /// Takes a lock, counted: `try_take` first, and when the lock is busy, `take`, which
    /// waits, counted as contention. The one counting rule for every lock the engine and
    /// the allocators take (a mutex, or a reader-writer lock either way).
    pub fn take<G>(&self, try_take: impl FnOnce() -> Option<G>, take: impl FnOnce() -> G) -> G {
        self.acquisitions.add(1);
        if let Some(guard) = try_take() {
            return guard;
        }
        self.contended.add(1);
        take()
    }

    /// Counts a try-lock's outcome: an acquisition, or a skip when the lock was busy.
    pub fn take_if_free<G>(&self, taken: Option<G>) -> Option<G> {
        match taken {
            Some(_) => self.acquisitions.add(1),
            None => self.try_skips.add(1),
        }
        taken
    }

    pub fn snapshot(&self) -> LockSnapshot {
        LockSnapshot {
            acquisitions: self.acquisitions.get(),
            contended: self.contended.get(),
            try_skips: self.try_skips.get(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_across_threads() {
        let c = Counter::default();
        std::thread::scope(|s| {
            for _ in 0..8 {
                s.spawn(|| (0..1000).for_each(|_| c.add(1)));
            }
        });
        assert_eq!(c.get(), 8000);
        std::thread::scope(|s| {
            s.spawn(|| c.sub(8000));
        });
        assert_eq!(c.get(), 0);
    }
}

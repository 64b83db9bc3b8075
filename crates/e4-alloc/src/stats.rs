//! Instrumentation that can stay on in benchmarks: every lock and shared atomic on the
//! allocation and free paths is counted, in striped counters so that counting does not
//! itself become a shared hot cache line.

use crossbeam_utils::CachePadded;
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// Stripes a thread can own, one thread each at a time; threads beyond them share one more.
/// (No loom model: loom cannot run a thread-local destructor that touches its atomics, and
/// the hand-over is one release store read by one acquiring compare-exchange.)
const OWNED_STRIPES: usize = 64;

/// The stripe of threads that found every other one owned.
const SHARED_STRIPE: usize = OWNED_STRIPES;

/// Which stripes a live thread owns.
static OWNED: [AtomicBool; OWNED_STRIPES] = [const { AtomicBool::new(false) }; OWNED_STRIPES];

/// A claimed stripe, given back when its thread ends.
struct Stripe(usize);

impl Stripe {
    /// The first stripe no live thread owns, else the shared one. The claim's acquire pairs
    /// with the last owner's release in `drop`: the new owner adds on top of every count
    /// the last one stored.
    fn claim() -> Stripe {
        let free = (0..OWNED_STRIPES).find(|&i| {
            OWNED[i]
                .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
        });
        Stripe(free.unwrap_or(SHARED_STRIPE))
    }
}

impl Drop for Stripe {
    fn drop(&mut self) {
        if self.0 != SHARED_STRIPE {
            // Counts from the thread's remaining destructors go to the shared stripe.
            let _ = STRIPE.try_with(|s| s.set(SHARED_STRIPE));
            OWNED[self.0].store(false, Ordering::Release);
        }
    }
}

/// `STRIPE` before the thread's first count.
const UNCLAIMED: usize = usize::MAX;

thread_local! {
    /// The calling thread's stripe: a plain word, read on every count.
    static STRIPE: Cell<usize> = const { Cell::new(UNCLAIMED) };
    /// The claim behind `STRIPE`, whose destructor gives the stripe back.
    static CLAIM: Cell<Option<Stripe>> = const { Cell::new(None) };
}

/// The calling thread's stripe.
#[inline]
fn thread_stripe() -> usize {
    match STRIPE.get() {
        UNCLAIMED => claim_stripe(),
        at => at,
    }
}

#[cold]
fn claim_stripe() -> usize {
    let stripe = Stripe::claim();
    let at = stripe.0;
    // A thread already destroying its locals cannot keep a claim: the closure (and with it
    // the stripe) is dropped unrun, which gives the stripe back at once.
    if CLAIM.try_with(move |c| c.set(Some(stripe))).is_err() {
        return SHARED_STRIPE;
    }
    STRIPE.set(at);
    at
}

/// A monotonically increasing event count, striped over cache lines. A thread that owns
/// its stripe adds with a plain load and store, not a locked read-modify-write: nobody
/// else writes that stripe, so no update is lost, and counting stays off the hot paths'
/// costs (a locked add per lock taken was 2-3 % of an unlink).
pub struct Counter {
    stripes: Box<[CachePadded<AtomicU64>]>,
}

impl Default for Counter {
    fn default() -> Self {
        Counter {
            stripes: (0..=SHARED_STRIPE)
                .map(|_| CachePadded::new(AtomicU64::new(0)))
                .collect(),
        }
    }
}

impl Counter {
    /// Adds `n` on the calling thread's stripe.
    #[inline]
    pub fn add(&self, n: u64) {
        let at = thread_stripe();
        let stripe = &self.stripes[at];
        if at == SHARED_STRIPE {
            stripe.fetch_add(n, Ordering::Relaxed);
        } else {
            stripe.store(
                stripe.load(Ordering::Relaxed).wrapping_add(n),
                Ordering::Relaxed,
            );
        }
    }

    /// Subtracts `n` on the calling thread's stripe (a stripe may wrap; the total does not
    /// as long as it never goes below zero).
    #[inline]
    pub fn sub(&self, n: u64) {
        self.add(n.wrapping_neg());
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

    /// More threads than stripes, all alive at once: no two own one stripe (their plain
    /// adds would lose counts), the rest share the last one, and every add is counted; once
    /// they have ended, new threads add to the counts their stripes hold (plant: stripes
    /// dealt round-robin without a claim, as before, shares owned stripes: caught here).
    #[test]
    fn live_threads_own_distinct_stripes_and_count_exactly() {
        let c = Counter::default();
        let threads = 2 * OWNED_STRIPES + 3;
        let all_alive = std::sync::Barrier::new(threads);
        let stripes: Vec<usize> = std::thread::scope(|s| {
            let spawned: Vec<_> = (0..threads)
                .map(|_| {
                    s.spawn(|| {
                        c.add(1);
                        let mine = thread_stripe();
                        all_alive.wait();
                        (1..20_000).for_each(|_| c.add(1));
                        mine
                    })
                })
                .collect();
            spawned.into_iter().map(|t| t.join().unwrap()).collect()
        });
        // Other tests' threads may own stripes meanwhile: these threads' own are distinct.
        let mut owned: Vec<usize> = stripes
            .into_iter()
            .filter(|&s| s != SHARED_STRIPE)
            .collect();
        let claimed = owned.len();
        owned.sort_unstable();
        owned.dedup();
        assert_eq!(owned.len(), claimed, "two live threads owned one stripe");
        assert!(claimed > 0);
        assert_eq!(c.get(), threads as u64 * 20_000);
        // New threads take the ended ones' stripes and add to what they left.
        std::thread::scope(|s| {
            for _ in 0..threads {
                s.spawn(|| c.add(1));
            }
        });
        assert_eq!(c.get(), threads as u64 * 20_001);
    }

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

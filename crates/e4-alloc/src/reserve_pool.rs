//! Blocks set aside from the free count for some requests only: the root reserve
//! (`s_r_blocks_count`, so that a full filesystem still lets root or the reserved uid/gid
//! work) and the metadata reserve (the kernel's `s_resv_clusters`, so that an operation
//! that removes space, such as a punch that splits an extent, still gets the tree block it
//! needs on a full filesystem).
//!
//! ext4 checks thresholds on every allocation (`ext4_has_free_clusters` compares the free
//! count with the reserves). e4's free count is a limit counter with no cheap exact sum, so
//! each reserve is a separate pool instead: the main counter never holds it, requests
//! allowed to fall back to it do so when the main counter is dry, and freed blocks refill
//! the pools before they return to the main counter. When a pool is full, a free costs one
//! read of its (rarely written) word.

use std::sync::atomic::{AtomicU64, Ordering};

use crossbeam_utils::CachePadded;

pub(crate) struct ReservePool {
    /// Blocks the pool should hold.
    target: u64,
    /// Blocks it holds.
    pool: CachePadded<AtomicU64>,
}

impl ReservePool {
    pub(crate) fn new(target: u64, held: u64) -> Self {
        ReservePool {
            target,
            pool: CachePadded::new(AtomicU64::new(held)),
        }
    }

    /// Takes up to `n` blocks from the pool if it holds `min` or more; returns how many
    /// (0: fewer than `min`), as [`crate::limit_counter::LimitCounter::try_reserve_up_to`].
    pub(crate) fn take_up_to(&self, n: u64, min: u64) -> u64 {
        let min = min.max(1);
        self.pool
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |held| {
                (held >= min).then(|| held - held.min(n))
            })
            .map_or(0, |held| held.min(n))
    }

    /// Puts up to `n` freed blocks into the pool while it is below its target; returns
    /// what is left for the main counter.
    pub(crate) fn refill(&self, n: u64) -> u64 {
        if self.pool.load(Ordering::Relaxed) >= self.target {
            return n;
        }
        let mut added = 0;
        let _ = self
            .pool
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |held| {
                added = n.min(self.target.saturating_sub(held));
                (added > 0).then_some(held + added)
            });
        n - added
    }

    /// Blocks in the pool.
    pub(crate) fn held(&self) -> u64 {
        self.pool.load(Ordering::Acquire)
    }
}

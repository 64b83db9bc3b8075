//! Root-reserved blocks (`s_r_blocks_count`): space only privileged callers may use, so that
//! a full filesystem still lets root (or the reserved uid/gid) work.
//!
//! ext4 checks a threshold on every allocation (`ext4_has_free_clusters` compares the free
//! count with the reserve). e4's free count is a limit counter with no cheap exact sum, so
//! the reserve is a separate pool instead: the main counter never holds it, privileged
//! requests fall back to the pool when the main counter is dry, and freed blocks refill the
//! pool before they return to the main counter. When the pool is full, a free costs one
//! read of its (rarely written) word.

use std::sync::atomic::{AtomicU64, Ordering};

use crossbeam_utils::CachePadded;

pub(crate) struct RootReserve {
    /// Blocks the pool should hold.
    target: u64,
    /// Blocks it holds.
    pool: CachePadded<AtomicU64>,
}

impl RootReserve {
    pub(crate) fn new(target: u64, held: u64) -> Self {
        RootReserve {
            target,
            pool: CachePadded::new(AtomicU64::new(held)),
        }
    }

    /// Takes `n` blocks from the pool, all or nothing.
    pub(crate) fn take(&self, n: u64) -> bool {
        self.pool
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |held| {
                held.checked_sub(n)
            })
            .is_ok()
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

//! A mutex that counts its own acquisitions, contention and skipped try-locks, so that
//! benchmarks can report lock traffic per operation beside throughput.

use crate::stats::LockStats;
use crate::sync::{Mutex, MutexGuard};

pub struct InstrumentedMutex<T> {
    inner: Mutex<T>,
}

impl<T> InstrumentedMutex<T> {
    pub fn new(value: T) -> Self {
        InstrumentedMutex {
            inner: Mutex::new(value),
        }
    }

    /// Locks, waiting if needed; a wait is counted as contention.
    pub fn lock<'a>(&'a self, stats: &LockStats) -> MutexGuard<'a, T> {
        stats.take(|| self.inner.try_lock(), || self.inner.lock())
    }

    /// Locks only if free; a busy lock is counted as a skip.
    pub fn try_lock<'a>(&'a self, stats: &LockStats) -> Option<MutexGuard<'a, T>> {
        stats.take_if_free(self.inner.try_lock())
    }
}

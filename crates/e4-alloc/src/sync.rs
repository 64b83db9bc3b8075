//! Atomics from `std`, or from loom when the crate is built for model checking
//! (`RUSTFLAGS="--cfg loom"`), so the lock-free pieces are checked as written.

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicU64, Ordering};
#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{AtomicU64, Ordering};

/// Yield to other threads while waiting on one in flight (a loom yield under the model).
#[cfg(loom)]
pub(crate) fn spin_hint() {
    loom::thread::yield_now();
}

#[cfg(not(loom))]
pub(crate) fn spin_hint() {
    std::thread::yield_now();
}

//! Atomics and the mutex from `std` and parking_lot, or from loom when the crate is built
//! for model checking (`RUSTFLAGS="--cfg loom"`), so the lock-free pieces and the claims made
//! under group locks are checked as written.

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

#[cfg(not(loom))]
pub(crate) use parking_lot::{Mutex, MutexGuard};

/// loom's mutex with parking_lot's signatures (no poisoning: a panic under a group lock
/// fails the model anyway).
#[cfg(loom)]
pub(crate) struct Mutex<T>(loom::sync::Mutex<T>);

#[cfg(loom)]
pub(crate) type MutexGuard<'a, T> = loom::sync::MutexGuard<'a, T>;

#[cfg(loom)]
impl<T> Mutex<T> {
    pub(crate) fn new(value: T) -> Self {
        Mutex(loom::sync::Mutex::new(value))
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, T> {
        self.0.lock().unwrap()
    }

    pub(crate) fn try_lock(&self) -> Option<MutexGuard<'_, T>> {
        self.0.try_lock().ok()
    }
}

/// Yield to other threads while waiting on one in flight (a loom yield under the model).
#[cfg(loom)]
pub(crate) fn spin_hint() {
    loom::thread::yield_now();
}

#[cfg(not(loom))]
pub(crate) fn spin_hint() {
    std::thread::yield_now();
}

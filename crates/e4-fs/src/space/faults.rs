//! Allocation failures on demand, for the fault-injection tests: every place an operation
//! takes blocks or an inode asks [`AllocationFaults::check`] first, so a test can make the
//! `n`th allocation from now (and every one after it) find the filesystem full, and prove
//! that the operation then leaves the image as it found it. Off unless a test arms it: one
//! relaxed load per allocation.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::{Error, Result, Shortage};

/// Disarmed.
const NEVER: u64 = u64::MAX;

/// When allocations start failing, and how many were asked for.
pub(crate) struct AllocationFaults {
    /// Allocations left to succeed before they fail ([`NEVER`]: none fail).
    left: AtomicU64,
    /// Allocations asked for so far (a dry run counts an operation's allocation points).
    seen: AtomicU64,
}

impl AllocationFaults {
    pub(crate) fn new() -> Self {
        AllocationFaults {
            left: AtomicU64::new(NEVER),
            seen: AtomicU64::new(0),
        }
    }

    /// Makes the allocation after the next `succeed` fail, and every one after it;
    /// `None` disarms.
    pub(crate) fn arm(&self, succeed: Option<u64>) {
        self.left.store(succeed.unwrap_or(NEVER), Ordering::Relaxed);
    }

    /// Allocations asked for so far.
    pub(crate) fn seen(&self) -> u64 {
        self.seen.load(Ordering::Relaxed)
    }

    /// Called before an allocation of `what`: a "no space" if the plan says this one
    /// fails.
    pub(crate) fn check(&self, what: Shortage) -> Result<()> {
        self.seen.fetch_add(1, Ordering::Relaxed);
        let left = self.left.load(Ordering::Relaxed);
        if left == NEVER {
            return Ok(());
        }
        if left == 0 {
            return Err(Error::NoSpace(what));
        }
        self.left.fetch_sub(1, Ordering::Relaxed);
        Ok(())
    }
}

//! The ledger of transaction credits ([`crate::io::credits`] says what a credit is): what the
//! running transaction's handles declared, per thread slot, so operations on different
//! threads share no counter; a commit, with every operation stopped, sums them.
//!
//! The sum reserves nothing (the log room does, `log_room.rs`): the commit checks that it
//! wrote no more blocks than were declared and records any overrun
//! ([`CreditLedger::settle`]), which the credit tests assert never happens. It is a check
//! of the declarations, so only test builds (the `testing` feature) count: elsewhere a
//! declaration costs no read-modify-write (it was one on every operation's start and on
//! every credit declared as it ran).

use std::sync::atomic::{AtomicU64, Ordering};

use crossbeam_utils::CachePadded;
use parking_lot::Mutex;

/// The credits declared in the running transaction, per thread slot.
pub(crate) struct CreditLedger {
    /// Credits declared by the running transaction's handles.
    declared: Box<[CachePadded<AtomicU64>]>,
    /// Commits that wrote more blocks than their transaction declared.
    overruns: Mutex<Vec<CreditOverrun>>,
}

/// A commit that wrote more blocks than its transaction's handles declared (plus the
/// superblock): a handle under-declared, which with the journal would overflow the log
/// space it reserved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CreditOverrun {
    /// The transaction's number.
    pub txn: u64,
    /// Credits declared.
    pub declared: u64,
    /// Blocks the commit wrote, the superblock included.
    pub written: u64,
}

/// What a commit may write: the credits of the transaction it closed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Budget {
    txn: u64,
    credits: u64,
}

impl CreditLedger {
    /// A ledger for `slots` thread slots.
    pub(crate) fn new(slots: usize) -> Self {
        CreditLedger {
            declared: (0..slots)
                .map(|_| CachePadded::new(AtomicU64::new(0)))
                .collect(),
            overruns: Mutex::new(Vec::new()),
        }
    }

    /// Declares `credits` more for the running transaction, from thread slot `slot` (test
    /// builds only: see the module's comment).
    #[inline]
    pub(crate) fn declare(&self, slot: usize, credits: u32) {
        // Operations that change no block (a window given back) touch no counter.
        if cfg!(feature = "testing") && credits != 0 {
            self.declared[slot].fetch_add(u64::from(credits), Ordering::Relaxed);
        }
    }

    /// At the switch to the next transaction, with every operation stopped: the closed
    /// transaction `txn`'s budget, and the counters zeroed for the next.
    pub(crate) fn close(&self, txn: u64) -> Budget {
        Budget {
            txn,
            credits: self
                .declared
                .iter()
                .map(|s| s.swap(0, Ordering::Relaxed))
                .sum(),
        }
    }

    /// Checks a commit that wrote `written` blocks, its superblock included, against its
    /// budget, and records an overrun.
    pub(crate) fn settle(&self, budget: Budget, written: u64) {
        // Outside test builds nothing was counted (see the module's comment).
        if cfg!(feature = "testing") && written > budget.credits + 1 {
            self.overruns.lock().push(CreditOverrun {
                txn: budget.txn,
                declared: budget.credits,
                written,
            });
        }
    }

    /// The commits so far that wrote more than their transactions declared.
    #[cfg(feature = "testing")]
    pub(crate) fn overruns(&self) -> Vec<CreditOverrun> {
        self.overruns.lock().clone()
    }
}

//! Interval commits (DESIGN.md: a commit happens "on an interval, on fsync/sync, under memory
//! pressure, at unmount"; ext4's `commit=`, 5 s by default, [`OpenOptions::commit_interval`]).
//!
//! Two parts, because neither alone is enough:
//! - **At the end of every operation** ([`Transactions::wants_commit`]): one clock read and one
//!   atomic load compared with the last commit's time. A busy filesystem commits on time
//!   without any thread, and the check takes no lock and writes nothing shared (the
//!   last-commit time is written only by commits).
//! - **A background thread for idle filesystems**, which no operation would ever commit:
//!   [`Filesystem::into_shared`] starts it. It holds only a [`Weak`] reference, so it never
//!   keeps the filesystem alive: each time it wakes it upgrades, commits if the interval
//!   has passed and the transaction holds changes, and lets go; once the last handle is
//!   gone the upgrade fails and it ends. A thread owned by the `Filesystem` and joined at
//!   drop would need a stable address to borrow, which a `Filesystem` returned by value does
//!   not have (it would mean moving every field behind an `Arc`); a handle shared between
//!   threads, which is what a long-running server holds, is an `Arc` already.
//!
//! A plain (unshared) handle therefore commits at the end of the first operation after the
//! interval, and an idle one not until `sync` or unmount.
//!
//! [`OpenOptions::commit_interval`]: crate::OpenOptions::commit_interval
//! [`Transactions::wants_commit`]: crate::txn::Transactions::wants_commit
//! [`Filesystem::into_shared`]: crate::Filesystem::into_shared

use std::sync::Weak;
use std::time::Duration;

/// Starts the interval thread for the filesystem behind `fs`: it sleeps `interval`, then
/// calls `visit` with the filesystem and the interval for as long as the filesystem exists
/// and `visit` returns how long to sleep next. Starting it may fail (no threads left);
/// without it an idle filesystem commits at sync or unmount only, and the end-of-operation
/// check still runs, so that is not worth failing the caller for.
pub(crate) fn start_thread<F: Send + Sync + 'static>(
    fs: Weak<F>,
    interval: Duration,
    visit: fn(&F, Duration) -> Option<Duration>,
) {
    let _ = std::thread::Builder::new()
        .name("e4-interval-commit".into())
        .spawn(move || {
            let mut wait = interval;
            loop {
                std::thread::sleep(wait);
                let Some(fs) = fs.upgrade() else { return };
                match visit(&fs, interval) {
                    Some(next) => wait = next,
                    None => return,
                }
            }
        });
}

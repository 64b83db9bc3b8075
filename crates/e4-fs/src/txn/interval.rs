//! Interval commits (DESIGN.md: a commit happens "on an interval, on fsync/sync, under memory
//! pressure, at unmount"; ext4's `commit=`, 5 s by default, [`OpenOptions::commit_interval`]).
//!
//! Two parts, because neither alone is enough:
//! - **At the end of every operation** ([`Writer::wants_commit`]): one clock read and one
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
//! [`Writer::wants_commit`]: crate::txn::writer::Writer::wants_commit

use std::sync::{Arc, Weak};
use std::time::Duration;

use crate::filesystem::Filesystem;

impl Filesystem {
    /// This filesystem as a handle to share between threads, with a thread that commits it
    /// when it has been idle with changes for the commit interval (none when the interval
    /// is zero or the filesystem is read-only). The thread ends by itself after the last
    /// handle is dropped (dropping it unmounts, as for any `Filesystem`; to see an unmount
    /// error, [`Filesystem::sync`] first or unmount the `Arc::try_unwrap`ped handle).
    pub fn into_shared(self) -> Arc<Self> {
        let interval = self.writer.as_ref().and_then(|w| w.commit_interval());
        let fs = Arc::new(self);
        if let Some(interval) = interval {
            let weak = Arc::downgrade(&fs);
            // Without the thread an idle filesystem commits at sync or unmount only: the
            // end-of-operation check still runs, so this is not worth failing the caller for.
            let _ = std::thread::Builder::new()
                .name("e4-interval-commit".into())
                .spawn(move || commit_on_interval(&weak, interval));
        }
        fs
    }
}

/// The interval thread's loop: sleep until the interval would next pass, then commit if it
/// has passed and there is something to commit.
fn commit_on_interval(fs: &Weak<Filesystem>, interval: Duration) {
    let mut wait = interval;
    loop {
        std::thread::sleep(wait);
        let Some(fs) = fs.upgrade() else { return };
        let Some(writer) = fs.writer.as_ref().filter(|w| w.is_open()) else {
            return;
        };
        let since = writer.since_last_commit();
        wait = if since < interval {
            // An operation (or sync) committed meanwhile.
            interval - since
        } else {
            if writer.has_changes(&fs) && fs.sync().is_err() {
                // The writer is now failed and refuses changes; nothing more to commit.
                return;
            }
            interval
        };
    }
}

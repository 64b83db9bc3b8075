//! The current time, as inode timestamps store it.

use std::time::{SystemTime, UNIX_EPOCH};

use e4_format::inode::Timestamp;

pub(crate) fn now() -> Timestamp {
    if let Some(frozen) = frozen::now() {
        return frozen;
    }
    match SystemTime::now().duration_since(UNIX_EPOCH) {
        Ok(d) => Timestamp {
            seconds: d.as_secs() as i64,
            nanoseconds: d.subsec_nanos(),
        },
        Err(before) => {
            let d = before.duration();
            Timestamp {
                seconds: -(d.as_secs() as i64),
                nanoseconds: 0,
            }
        }
    }
}

/// The current time in whole seconds as the kernel's ext4 writes it into the superblock
/// (`ktime_get_real_seconds`: the time of the last timer tick), which is also what
/// `time(2)` returns. The fine clock of [`now`] runs up to a tick ahead of it just after a
/// second begins, and an e2fsck started within that tick then found the superblock's last
/// write "in the future" (a `damaged_operations` test failed so, about once in 50 runs
/// under load).
pub(crate) fn now_seconds_coarse() -> i64 {
    if let Some(frozen) = frozen::now() {
        return frozen.seconds;
    }
    // Through libc, whose vDSO call valgrind follows (rustix's own vDSO parser crashes
    // under it). The coarse clock always exists on Linux; the fine one stands in should it
    // not.
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_REALTIME_COARSE)
        .map_or_else(|_| now().seconds, |t| t.tv_sec())
}

/// A clock that can be stopped, so that two runs of the same work write the same bytes:
/// tests (a recovery of the same crash image) and reproducible images (`e4 mkfs -d` under
/// `SOURCE_DATE_EPOCH`, where every time e4 writes is that epoch).
pub mod frozen {
    use std::sync::atomic::{AtomicI64, Ordering};

    use e4_format::inode::Timestamp;

    /// Seconds the clock stands at; `i64::MIN` while it runs.
    static AT: AtomicI64 = AtomicI64::new(i64::MIN);

    /// Stops the clock of this process at `seconds` (every timestamp e4 writes is then
    /// `seconds`, 0 ns), or with `None` lets it run again.
    pub fn freeze_clock(seconds: Option<i64>) {
        AT.store(seconds.unwrap_or(i64::MIN), Ordering::Relaxed);
    }

    pub(super) fn now() -> Option<Timestamp> {
        let seconds = AT.load(Ordering::Relaxed);
        (seconds != i64::MIN).then_some(Timestamp {
            seconds,
            nanoseconds: 0,
        })
    }
}

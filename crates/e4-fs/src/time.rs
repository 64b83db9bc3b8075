//! The current time, as inode timestamps store it, chosen as the kernel's multigrain
//! timestamps choose it (Linux 6.13 on, `inode_set_ctime_current`): a change stamps the
//! time of the last timer tick, unless someone has looked at the inode's times since its
//! last change and the tick has not moved past them; then the fine clock, so that the
//! change shows. Reading the tick costs a fifth of the fine clock (4 ns against 20 ns on the
//! development VM), where one read of the fine clock was 7 % of a fallocate.
//!
//! A floor keeps the order across inodes: every fine time handed out raises it, and a tick
//! time below it is raised to it, so a change never carries an earlier time than one made
//! before it elsewhere.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use e4_format::inode::Timestamp;

/// The latest fine time handed out, in nanoseconds since the epoch (0: none yet).
static FLOOR: AtomicU64 = AtomicU64::new(0);

/// The time a change stamps on an inode whose change time is `last`; `shown` says whether
/// its times were read since that change (see the module doc).
pub(crate) fn change_time(last: Timestamp, shown: bool) -> Timestamp {
    if let Some(frozen) = frozen::now() {
        return frozen;
    }
    let tick = tick_time();
    if shown && tick <= last {
        return fine_time();
    }
    tick
}

/// The fine clock, for what is not an inode's time (a commit block's, a seed): it leaves
/// the floor alone.
pub(crate) fn now() -> Timestamp {
    if let Some(frozen) = frozen::now() {
        return frozen;
    }
    clock_time()
}

/// The fine clock for a change that must show, raising the floor to it.
fn fine_time() -> Timestamp {
    let t = clock_time();
    if let Some(nanos) = as_nanos(t) {
        FLOOR.fetch_max(nanos, Ordering::Relaxed);
    }
    t
}

/// The last tick's time, or the floor if a fine time already handed out is later.
fn tick_time() -> Timestamp {
    let tick = nix::time::clock_gettime(nix::time::ClockId::CLOCK_REALTIME_COARSE).map_or_else(
        |_| clock_time(),
        |t| Timestamp {
            seconds: t.tv_sec(),
            nanoseconds: t.tv_nsec() as u32,
        },
    );
    let floor = FLOOR.load(Ordering::Relaxed);
    match as_nanos(tick) {
        Some(nanos) if nanos < floor => from_nanos(floor),
        _ => tick,
    }
}

/// The fine clock as it reads.
fn clock_time() -> Timestamp {
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

/// `t` in nanoseconds since the epoch; `None` before it (the floor is for the present).
fn as_nanos(t: Timestamp) -> Option<u64> {
    let seconds = u64::try_from(t.seconds).ok()?;
    seconds
        .checked_mul(1_000_000_000)?
        .checked_add(u64::from(t.nanoseconds))
}

fn from_nanos(nanos: u64) -> Timestamp {
    Timestamp {
        seconds: (nanos / 1_000_000_000) as i64,
        nanoseconds: (nanos % 1_000_000_000) as u32,
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

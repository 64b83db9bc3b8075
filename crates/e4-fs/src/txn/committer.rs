//! The commit thread (jbd2's `kjournald2`): every filesystem open for writing has one, and
//! it makes the commits nobody waits for — those an operation asks for when it leaves the
//! running transaction past its threshold (dirty blocks, what the log can take, pending
//! frees), and those the commit interval calls for (ext4's `commit=`, 5 s by default,
//! [`OpenOptions::commit_interval`]), idle or busy.
//!
//! Why a thread: a commit's write-out (sealing, the log, the home writes, the flushes) took
//! a fifth of a one-thread create run's time when the operation that crossed the threshold
//! made it. On the thread, the operations wait only while the commit gathers (the gate
//! closed); the write-out overlaps the next transaction's operations, on another CPU when
//! there is one. A hand-off costs a wake-up (about 45 µs across vCPUs here), once per
//! commit, not per operation.
//!
//! What stays on the caller's thread: `fsync` and `sync` commit themselves (a wake-up
//! would add to every fsync's latency, and fsyncs already share commits,
//! [`Transactions::commit_through`]); an operation that finds the transaction twice past
//! its threshold commits, or waits for the running commit, itself, so a transaction stays
//! bounded however far the thread falls behind; the unmount stops the thread first and
//! then commits. When the thread cannot be started, or stopped because a commit failed,
//! operations commit for themselves as before (the request says so).
//!
//! An operation's side costs loads only until its transaction passes the threshold: then
//! the first operation to see it sets [`CommitRequests::pending`] and wakes the thread
//! (one lock, once per commit), and the others see the flag set and go on.
//!
//! [`OpenOptions::commit_interval`]: crate::OpenOptions::commit_interval
//! [`Transactions::commit_through`]: crate::txn::Transactions::commit_through

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_utils::CachePadded;
use parking_lot::{Condvar, Mutex};

/// How operations reach the commit thread.
#[derive(Default)]
pub(crate) struct CommitRequests {
    /// An operation found the running transaction past its threshold. Set by the first one
    /// to see it and cleared by the thread as it wakes, so it is written about twice per
    /// commit whatever the number of threads.
    pending: CachePadded<AtomicBool>,
    /// Whether a thread serves requests: none before it starts, after it stops, or if it
    /// could not be started.
    served: AtomicBool,
    /// Whether the thread must stop; the lock the thread sleeps under.
    stopping: Mutex<bool>,
    wake: Condvar,
}

impl CommitRequests {
    /// Whether a commit thread serves requests (and wakes for the commit interval).
    pub(crate) fn is_served(&self) -> bool {
        self.served.load(Ordering::Acquire)
    }

    /// Asks the commit thread for a commit. Returns false, having done nothing, when no
    /// thread serves requests: the caller commits itself.
    pub(crate) fn request(&self) -> bool {
        if !self.served.load(Ordering::Acquire) {
            return false;
        }
        if !self.pending.load(Ordering::Relaxed) && !self.pending.swap(true, Ordering::AcqRel) {
            // Under the lock, so a thread between its check of `pending` and its sleep
            // cannot miss the wake-up.
            let _stopping = self.stopping.lock();
            self.wake.notify_one();
        }
        true
    }
}

/// What the thread does after a visit.
pub(crate) enum Next {
    /// Sleep until a request, or at most this long (`None`: until a request).
    Wait(Option<Duration>),
    /// Stop serving: the filesystem takes no more changes (a failed commit, an unmount).
    Stop,
}

/// The running commit thread, owned by the filesystem's handle, which stops and joins it
/// before its own last commit.
pub(crate) struct Committer {
    thread: JoinHandle<()>,
    requests: Arc<CommitRequests>,
}

impl Committer {
    /// Starts the thread: it calls `visit` once `first_wait` has passed or an operation
    /// asks, and again as `visit` says. Returns `None` if no thread could be started
    /// (operations then commit themselves).
    pub(crate) fn start(
        requests: Arc<CommitRequests>,
        first_wait: Option<Duration>,
        mut visit: impl FnMut() -> Next + Send + 'static,
    ) -> Option<Committer> {
        requests.served.store(true, Ordering::Release);
        let served = Arc::clone(&requests);
        let thread = std::thread::Builder::new()
            .name("e4-commit".into())
            .spawn(move || {
                let mut wait = first_wait;
                while wait_for_work(&served, wait) {
                    match visit() {
                        Next::Wait(next) => wait = next,
                        Next::Stop => break,
                    }
                }
                served.served.store(false, Ordering::Release);
            });
        match thread {
            Ok(thread) => Some(Committer { thread, requests }),
            Err(_) => {
                requests.served.store(false, Ordering::Release);
                None
            }
        }
    }

    /// Stops the thread and waits for it: a commit it is making ends first. Requests from
    /// here on are the callers' to commit.
    pub(crate) fn stop(self) {
        self.requests.served.store(false, Ordering::Release);
        *self.requests.stopping.lock() = true;
        self.requests.wake.notify_one();
        // A panic in a commit has already been reported on the thread; the caller's own
        // last commit reports the state it left.
        let _ = self.thread.join();
    }
}

/// Sleeps until a request or `wait` has passed; false when the thread must stop.
fn wait_for_work(requests: &CommitRequests, wait: Option<Duration>) -> bool {
    let deadline = wait.and_then(|w| Instant::now().checked_add(w));
    let mut stopping = requests.stopping.lock();
    loop {
        if *stopping {
            return false;
        }
        if requests.pending.swap(false, Ordering::AcqRel) {
            return true;
        }
        match deadline {
            Some(deadline) => {
                if requests
                    .wake
                    .wait_until(&mut stopping, deadline)
                    .timed_out()
                {
                    return !*stopping;
                }
            }
            None => requests.wake.wait(&mut stopping),
        }
    }
}

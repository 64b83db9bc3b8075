//! Ctrl-C, SIGTERM and SIGHUP during a long edit of an image (`e4 import`, `e4 rm -r`):
//! the command stops taking new work, lets what is in flight finish, and the image is
//! written back and marked clean as after any other failure, instead of the process dying
//! with the image marked in use (which the journal makes recoverable, but which the next
//! user then has to recover).
//!
//! The handler only records the signal in an atomic; the work loops ask [`received`]
//! before each entry. It is installed with `SA_RESETHAND`, so a second signal of the same
//! kind takes its default action and ends the process at once, for a user who will not
//! wait: the image is then left for the journal to recover, as after a crash.

use std::sync::atomic::{AtomicI32, Ordering};

use nix::sys::signal::{sigaction, SaFlags, SigAction, SigHandler, SigSet, Signal};

/// The signals that stop an edit, as they stop `e4 mount`.
const STOPPING: [Signal; 3] = [Signal::SIGINT, Signal::SIGTERM, Signal::SIGHUP];

/// The first stopping signal received, 0 while none has been.
static RECEIVED: AtomicI32 = AtomicI32::new(0);

extern "C" fn record(signal: nix::libc::c_int) {
    // Only an atomic store: async-signal-safe.
    let _ = RECEIVED.compare_exchange(0, signal, Ordering::Relaxed, Ordering::Relaxed);
}

/// From now on, a stopping signal is recorded instead of ending the process (the first of
/// each kind; see the module doc).
pub fn catch() {
    let action = SigAction::new(
        SigHandler::Handler(record),
        SaFlags::SA_RESETHAND | SaFlags::SA_RESTART,
        SigSet::empty(),
    );
    for signal in STOPPING {
        // SAFETY: `record` only stores to an atomic, which is async-signal-safe, and it
        // replaces the default action, not a handler anyone else installed.
        if let Err(e) = unsafe { sigaction(signal, &action) } {
            eprintln!("e4: warning: cannot catch {signal}: {e}");
        }
    }
}

/// The stopping signal received since [`catch`], if any.
pub fn received() -> Option<Signal> {
    match RECEIVED.load(Ordering::Relaxed) {
        0 => None,
        n => Signal::try_from(n).ok(),
    }
}

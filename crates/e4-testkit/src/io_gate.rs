//! A gate a test's device holds one I/O at: the test arms it, the first I/O that passes
//! through an armed gate waits there, the test waits until one is held, looks at the
//! engine in that state (a commit half done, a read between its mapping and its data),
//! and lets it go.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex};

#[derive(Default)]
pub struct IoGate {
    armed: AtomicBool,
    /// (an I/O is held, it may go on)
    state: Mutex<(bool, bool)>,
    changed: Condvar,
}

impl IoGate {
    /// The next I/O that calls [`IoGate::hold_if_armed`] is held.
    pub fn arm(&self) {
        self.armed.store(true, Ordering::Release);
    }

    /// Called by the device on the I/O's way: holds it if the gate is armed (once), until
    /// [`IoGate::release`].
    pub fn hold_if_armed(&self) {
        if !self.armed.swap(false, Ordering::AcqRel) {
            return;
        }
        let mut state = self.state.lock().unwrap();
        state.0 = true;
        self.changed.notify_all();
        while !state.1 {
            state = self.changed.wait(state).unwrap();
        }
    }

    /// Waits until an I/O is held.
    pub fn wait_until_held(&self) {
        let mut state = self.state.lock().unwrap();
        while !state.0 {
            state = self.changed.wait(state).unwrap();
        }
    }

    /// Lets the held I/O (and any later one) go on.
    pub fn release(&self) {
        self.state.lock().unwrap().1 = true;
        self.changed.notify_all();
    }
}

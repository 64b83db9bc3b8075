//! Progress reporting (`-C`): each pass counts its units of work (inodes, directory
//! blocks, directories, groups) on one atomic counter and hands the count to a callback,
//! which may be called from any worker thread. Progress never changes the report.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Where a check has got to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProgressUpdate {
    /// The pass running, 1 to 5.
    pub pass: u8,
    /// Units of work done in this pass.
    pub done: u64,
    /// Units of work in this pass.
    pub total: u64,
}

/// A progress callback, shared by the worker threads.
#[derive(Clone)]
pub struct Progress(pub Arc<dyn Fn(ProgressUpdate) + Send + Sync>);

impl fmt::Debug for Progress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Progress(..)")
    }
}

/// Counts one pass's work and reports it.
pub struct PassMeter<'a> {
    progress: Option<&'a Progress>,
    pass: u8,
    total: u64,
    done: AtomicU64,
}

impl<'a> PassMeter<'a> {
    /// Starts pass `pass` with `total` units of work, reporting 0 done.
    pub fn start(progress: Option<&'a Progress>, pass: u8, total: u64) -> Self {
        let meter = PassMeter {
            progress,
            pass,
            total,
            done: AtomicU64::new(0),
        };
        meter.report(0);
        meter
    }

    /// Counts `units` more done.
    pub fn advance(&self, units: u64) {
        if self.progress.is_some() {
            let done = self.done.fetch_add(units, Ordering::Relaxed) + units;
            self.report(done);
        }
    }

    fn report(&self, done: u64) {
        if let Some(Progress(callback)) = self.progress {
            callback(ProgressUpdate {
                pass: self.pass,
                done: done.min(self.total),
                total: self.total,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    #[test]
    fn counts_reach_the_total_from_many_threads() {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let sink = seen.clone();
        let progress = Progress(Arc::new(move |u: ProgressUpdate| {
            sink.lock().unwrap().push(u)
        }));
        let meter = PassMeter::start(Some(&progress), 2, 100);
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| (0..25).for_each(|_| meter.advance(1)));
            }
        });
        let seen = seen.lock().unwrap();
        assert_eq!(seen.len(), 101);
        assert!(seen
            .iter()
            .any(|u| u.done == 100 && u.total == 100 && u.pass == 2));
    }
}

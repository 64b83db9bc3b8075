//! Wall time of each step of a check (`e4 fsck --timings`). The parallel passes are only
//! part of a check: opening the image, allocating the shared arrays, the totals at the end
//! and freeing the arrays run on one thread or not at all in parallel, and at two threads
//! they bound the speed-up (Amdahl). Measuring each step is how those were found; taking
//! the time costs a clock read per step, so it is always done.

use std::fmt;
use std::time::{Duration, Instant};

/// One step and how long it took.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PhaseTime {
    /// What the step did ("pass 1", "free state", ...).
    pub phase: &'static str,
    /// Its wall time.
    pub took: Duration,
}

/// The steps of one check, in the order they ran.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PhaseTimes {
    /// Steps so far.
    pub phases: Vec<PhaseTime>,
}

/// Times consecutive steps: each [`PhaseClock::lap`] ends one and starts the next.
#[derive(Debug)]
pub struct PhaseClock {
    since: Instant,
    times: PhaseTimes,
}

impl PhaseClock {
    /// Starts timing the first step.
    pub fn start() -> Self {
        PhaseClock {
            since: Instant::now(),
            times: PhaseTimes::default(),
        }
    }

    /// Ends the step running, named `phase`, and starts the next.
    pub fn lap(&mut self, phase: &'static str) {
        let now = Instant::now();
        self.times.phases.push(PhaseTime {
            phase,
            took: now - self.since,
        });
        self.since = now;
    }

    /// The steps timed.
    pub fn finish(self) -> PhaseTimes {
        self.times
    }
}

impl PhaseTimes {
    /// Adds the steps of `later`, which ran after these.
    pub fn extend(&mut self, later: PhaseTimes) {
        self.phases.extend(later.phases);
    }

    /// The sum of every step.
    pub fn total(&self) -> Duration {
        self.phases.iter().map(|p| p.took).sum()
    }
}

impl fmt::Display for PhaseTimes {
    /// One line per step, milliseconds, then the total.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for p in &self.phases {
            writeln!(f, "{:>9.3} ms  {}", p.took.as_secs_f64() * 1e3, p.phase)?;
        }
        writeln!(f, "{:>9.3} ms  total", self.total().as_secs_f64() * 1e3)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn laps_are_consecutive_and_sum_to_the_total() {
        let mut clock = PhaseClock::start();
        std::thread::sleep(Duration::from_millis(2));
        clock.lap("first");
        clock.lap("second");
        let times = clock.finish();
        let names: Vec<_> = times.phases.iter().map(|p| p.phase).collect();
        assert_eq!(names, ["first", "second"]);
        assert!(times.phases[0].took >= Duration::from_millis(2));
        assert_eq!(times.total(), times.phases[0].took + times.phases[1].took);
        let text = times.to_string();
        assert!(text.contains("ms  first\n") && text.ends_with("ms  total\n"));
    }
}

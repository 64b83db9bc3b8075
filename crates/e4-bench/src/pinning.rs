//! `--pin`: which CPU each party of a point runs on. On a small VM, waking a thread on the
//! other vCPU costs tens of microseconds, so a target that hands every operation to another
//! thread (fuse2fs: the workload thread asks the kernel, the kernel wakes the daemon, the
//! daemon answers and wakes the workload thread) is measured three ways: every party on one
//! CPU (each hand-off a context switch, never a cross-CPU wake), the daemon on one CPU and
//! the workload on the others (each hand-off a cross-CPU wake), and left to the scheduler.
//!
//! The CPUs are those this process may use ([`allowed_cpus`], `sched_getaffinity`), not
//! 0..n: under `taskset`, a cgroup cpuset or a container they need not start at 0 or be
//! contiguous. Workload threads pin themselves ([`Placement::enter`]); the daemon is started
//! under `taskset -c N` ([`Placement::daemon_cpu`]), so no `unsafe` `pre_exec` hook is
//! needed, and every thread it starts inherits the CPU.

use std::fmt;
use std::io;
use std::str::FromStr;

use rustix::thread::{sched_getaffinity, sched_setaffinity, CpuSet};

/// How `e4 bench --pin` places threads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Pin {
    /// No affinity set: the scheduler decides.
    #[default]
    None,
    /// The workload threads and the target's daemon all on the first allowed CPU.
    Same,
    /// The daemon on the first allowed CPU, the workload threads round-robin over the
    /// others.
    Split,
}

impl Pin {
    pub fn name(self) -> &'static str {
        match self {
            Pin::None => "none",
            Pin::Same => "same",
            Pin::Split => "split",
        }
    }
}

impl FromStr for Pin {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "none" => Ok(Pin::None),
            "same" => Ok(Pin::Same),
            "split" => Ok(Pin::Split),
            _ => Err(format!("'{s}' is not none, same or split")),
        }
    }
}

/// A [`Pin`] mode made concrete over the CPUs this process may use.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Placement {
    pin: Pin,
    /// The CPU of the target's daemon (fuse2fs, e4-fuse); `None` when unpinned.
    daemon: Option<usize>,
    /// The CPUs workload threads take in turn (thread t on `workers[t % len]`); empty when
    /// unpinned.
    workers: Vec<usize>,
}

/// The mode asked for needs more CPUs than this process may use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TooFewCpus {
    pub pin: Pin,
    /// The CPUs this process may use.
    pub allowed: Vec<usize>,
}

impl fmt::Display for TooFewCpus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let cpus: Vec<String> = self.allowed.iter().map(usize::to_string).collect();
        write!(
            f,
            "--pin {} needs {} CPUs at least, and this process may use {} ({})",
            self.pin.name(),
            Placement::cpus_needed(self.pin),
            self.allowed.len(),
            if cpus.is_empty() {
                "none".to_string()
            } else {
                format!("CPU {}", cpus.join(","))
            }
        )
    }
}

impl std::error::Error for TooFewCpus {}

impl Placement {
    /// Places `pin` over `allowed` (ascending CPU numbers, as [`allowed_cpus`] lists them).
    pub fn new(pin: Pin, allowed: &[usize]) -> Result<Placement, TooFewCpus> {
        if allowed.len() < Placement::cpus_needed(pin) {
            return Err(TooFewCpus {
                pin,
                allowed: allowed.to_vec(),
            });
        }
        Ok(match pin {
            Pin::None => Placement::default(),
            Pin::Same => Placement {
                pin,
                daemon: Some(allowed[0]),
                workers: vec![allowed[0]],
            },
            Pin::Split => Placement {
                pin,
                daemon: Some(allowed[0]),
                workers: allowed[1..].to_vec(),
            },
        })
    }

    /// `pin` over the CPUs this process may use now.
    pub fn for_this_process(pin: Pin) -> Result<Placement, String> {
        let allowed = allowed_cpus().map_err(|e| format!("sched_getaffinity: {e}"))?;
        Placement::new(pin, &allowed).map_err(|e| e.to_string())
    }

    fn cpus_needed(pin: Pin) -> usize {
        match pin {
            Pin::None => 0,
            Pin::Same => 1,
            Pin::Split => 2,
        }
    }

    pub fn pin(&self) -> Pin {
        self.pin
    }

    /// The CPU workload thread `thread` runs on, if pinned.
    pub fn worker_cpu(&self, thread: usize) -> Option<usize> {
        (!self.workers.is_empty()).then(|| self.workers[thread % self.workers.len()])
    }

    /// The CPU the target's daemon runs on, if pinned.
    pub fn daemon_cpu(&self) -> Option<usize> {
        self.daemon
    }

    /// Pins the calling thread as workload thread `thread` (nothing when unpinned). The
    /// kernel moves a running thread off a CPU its new mask excludes before the call
    /// returns, so the thread is on its CPU from here on.
    pub fn enter(&self, thread: usize) -> io::Result<()> {
        let Some(cpu) = self.worker_cpu(thread) else {
            return Ok(());
        };
        let mut set = CpuSet::new();
        set.set(cpu);
        sched_setaffinity(None, &set)
            .map_err(|e| io::Error::other(format!("pinning thread {thread} to CPU {cpu}: {e}")))
    }
}

/// The CPUs the calling thread may run on, ascending.
pub fn allowed_cpus() -> io::Result<Vec<usize>> {
    let set = sched_getaffinity(None)?;
    Ok((0..CpuSet::MAX_CPU)
        .filter(|&cpu| set.is_set(cpu))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// (daemon CPU, the CPUs of workload threads 0..4).
    fn placed(pin: Pin, allowed: &[usize]) -> (Option<usize>, Vec<Option<usize>>) {
        let p = Placement::new(pin, allowed).unwrap();
        assert_eq!(p.pin(), pin);
        (p.daemon_cpu(), (0..4).map(|t| p.worker_cpu(t)).collect())
    }

    #[test]
    fn none_pins_nothing_even_without_cpus() {
        for allowed in [
            &[0, 1][..],
            &(0..16).collect::<Vec<_>>(),
            &[3, 5],
            &[7],
            &[],
        ] {
            assert_eq!(placed(Pin::None, allowed), (None, vec![None; 4]));
        }
    }

    #[test]
    fn same_puts_everyone_on_the_first_allowed_cpu() {
        assert_eq!(placed(Pin::Same, &[0, 1]), (Some(0), vec![Some(0); 4]));
        let sixteen: Vec<usize> = (0..16).collect();
        assert_eq!(placed(Pin::Same, &sixteen), (Some(0), vec![Some(0); 4]));
        assert_eq!(placed(Pin::Same, &[3, 5]), (Some(3), vec![Some(3); 4]));
        assert_eq!(placed(Pin::Same, &[7]), (Some(7), vec![Some(7); 4]));
    }

    #[test]
    fn split_keeps_the_daemons_cpu_free_of_workload_threads() {
        assert_eq!(placed(Pin::Split, &[0, 1]), (Some(0), vec![Some(1); 4]));
        let sixteen: Vec<usize> = (0..16).collect();
        assert_eq!(
            placed(Pin::Split, &sixteen),
            (Some(0), vec![Some(1), Some(2), Some(3), Some(4)])
        );
        let p = Placement::new(Pin::Split, &sixteen).unwrap();
        // Round-robin over the 15 others: thread 15 wraps around to CPU 1.
        assert_eq!(p.worker_cpu(14), Some(15));
        assert_eq!(p.worker_cpu(15), Some(1));
        assert_eq!(placed(Pin::Split, &[3, 5]), (Some(3), vec![Some(5); 4]));
        assert_eq!(
            placed(Pin::Split, &[2, 4, 9]),
            (Some(2), vec![Some(4), Some(9), Some(4), Some(9)])
        );
    }

    #[test]
    fn split_is_refused_on_one_cpu_and_same_on_none() {
        let e = Placement::new(Pin::Split, &[7]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "--pin split needs 2 CPUs at least, and this process may use 1 (CPU 7)"
        );
        assert!(Placement::new(Pin::Same, &[]).is_err());
    }

    #[test]
    fn the_allowed_cpus_are_this_threads_affinity() {
        let allowed = allowed_cpus().unwrap();
        assert!(!allowed.is_empty());
        assert!(allowed.windows(2).all(|w| w[0] < w[1]), "{allowed:?}");
        assert!(allowed.contains(&rustix::thread::sched_getcpu()));
    }

    #[test]
    fn modes_parse_from_their_names() {
        for pin in [Pin::None, Pin::Same, Pin::Split] {
            assert_eq!(pin.name().parse::<Pin>(), Ok(pin));
        }
        assert!("both".parse::<Pin>().is_err());
    }
}

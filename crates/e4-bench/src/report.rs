//! The results: one [`Record`] per (workload, target, threads), the machine they ran on,
//! the terminal table with ratios against a baseline target, and the JSON document.

use std::collections::BTreeSet;
use std::fmt::Write as _;

use e4_fs::LockReport;
use serde::Serialize;

use crate::layout::{FreeExtentBucket, LayoutReport};
use crate::workload::{Measurement, Params, Workload};

/// Where the run happened.
#[derive(Debug, Clone, Serialize)]
pub struct Machine {
    /// Cores this process may run on.
    pub cores: usize,
    /// `uname -r`.
    pub kernel: String,
    /// The first "model name" of /proc/cpuinfo.
    pub cpu: String,
}

impl Machine {
    pub fn this() -> Machine {
        let uname = rustix::system::uname();
        let cpu = std::fs::read_to_string("/proc/cpuinfo")
            .ok()
            .and_then(|c| {
                c.lines()
                    .find(|l| l.starts_with("model name"))
                    .and_then(|l| l.split(':').nth(1))
                    .map(|m| m.trim().to_string())
            })
            .unwrap_or_default();
        Machine {
            cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
            kernel: uname.release().to_string_lossy().into_owned(),
            cpu,
        }
    }
}

/// One measured point.
#[derive(Debug, Clone, Serialize)]
pub struct Record {
    pub workload: String,
    pub target: String,
    pub threads: usize,
    /// `--pin`: none, same or split.
    pub pin: &'static str,
    pub ops: u64,
    pub seconds: f64,
    pub ops_per_sec: f64,
    /// For workloads that move data.
    pub mib_per_sec: Option<f64>,
    /// For the tree workloads (untar, rm-tree, git-status): the tree's regular files
    /// extracted, removed or examined per second (`ops_per_sec` counts trees or runs).
    pub files_per_sec: Option<f64>,
    /// Read back from the image after unmount (image-backed targets, workloads that write).
    pub extents_per_file: Option<f64>,
    pub mean_extent_bytes: Option<f64>,
    pub fragmentation_score: Option<f64>,
    pub free_extents: Option<u64>,
    pub free_extent_histogram: Option<Vec<FreeExtentBucket>>,
    /// e4 only: lock acquisitions, contended acquisitions, shared atomic writes and commits
    /// per operation, from the engine's counters.
    pub locks_per_op: Option<f64>,
    pub contended_per_op: Option<f64>,
    pub shared_atomic_writes_per_op: Option<f64>,
    pub commits_per_op: Option<f64>,
    /// e4 only: journal blocks written, and microseconds the workload's threads spent
    /// committing, waiting for a commit, held at the gate while one gathered, or waiting
    /// for log room, per operation (the commit thread's own time is not theirs).
    pub log_blocks_per_op: Option<f64>,
    pub commit_wait_us_per_op: Option<f64>,
    /// e4 only: commits during the point (an image without a journal commits on its
    /// interval or memory pressure, so a short point may have none: its commit work then
    /// comes after the clock stops), and the mean transaction's log blocks.
    pub commits: Option<u64>,
    pub log_blocks_per_commit: Option<f64>,
    /// e4 only: commits during the point written around the journal because they did not
    /// fit it (not crash-safe): the report flags any.
    pub unjournaled: Option<u64>,
    /// near-full only: bytes acknowledged but missing afterwards (0 when nothing was lost).
    pub lost_bytes: Option<u64>,
    /// near-full only: bytes acknowledged beyond the free space at the start (0 when
    /// nothing was over-committed).
    pub overcommitted_bytes: Option<u64>,
}

fn lock_totals(r: &LockReport) -> (u64, u64) {
    let kinds = [
        r.inode,
        r.inode_cache_shards,
        r.buffer_cache_shards,
        r.dentry_cache_shards,
        r.commit_gate,
        r.block_groups,
        r.packing_windows,
        r.inode_groups,
    ];
    (
        kinds.iter().map(|k| k.acquisitions).sum(),
        kinds.iter().map(|k| k.contended).sum(),
    )
}

impl Record {
    pub fn new(
        workload: Workload,
        target: &str,
        params: &Params,
        m: &Measurement,
        layout: Option<&LayoutReport>,
    ) -> Record {
        let seconds = m.elapsed.as_secs_f64().max(1e-9);
        // A workload that leaves no file blocks (dwtl ends empty) has no extents to report.
        let layout = layout.filter(|l| l.files > 0);
        let ops = m.ops.max(1) as f64;
        let per_op = |f: &dyn Fn(&LockReport, &LockReport) -> u64| {
            m.locks.as_ref().map(|(b, a)| f(b, a) as f64 / ops)
        };
        Record {
            workload: workload.name().into(),
            target: target.into(),
            threads: params.threads,
            pin: params.placement.pin().name(),
            ops: m.ops,
            seconds,
            ops_per_sec: m.ops as f64 / seconds,
            mib_per_sec: workload
                .moves_bytes()
                .then(|| m.bytes as f64 / seconds / f64::from(1 << 20)),
            files_per_sec: m.files.map(|f| f as f64 / seconds),
            extents_per_file: layout.map(|l| l.extents_per_file),
            mean_extent_bytes: layout.map(|l| l.mean_extent_bytes),
            fragmentation_score: layout.map(|l| l.fragmentation_score),
            free_extents: layout.map(|l| l.free_extents),
            free_extent_histogram: layout.map(|l| l.free_extent_histogram.clone()),
            locks_per_op: per_op(&|b, a| lock_totals(a).0 - lock_totals(b).0),
            contended_per_op: per_op(&|b, a| lock_totals(a).1 - lock_totals(b).1),
            shared_atomic_writes_per_op: per_op(&|b, a| {
                a.shared_atomic_writes - b.shared_atomic_writes
            }),
            commits_per_op: per_op(&|b, a| a.commits - b.commits),
            log_blocks_per_op: per_op(&|b, a| a.log_blocks - b.log_blocks),
            commit_wait_us_per_op: per_op(&|b, a| {
                (a.commit_wait_nanos + a.gate_wait_nanos + a.room_wait_nanos)
                    - (b.commit_wait_nanos + b.gate_wait_nanos + b.room_wait_nanos)
            })
            .map(|ns| ns / 1000.0),
            commits: m.locks.as_ref().map(|(b, a)| a.commits - b.commits),
            log_blocks_per_commit: m.locks.as_ref().and_then(|(b, a)| {
                let commits = a.commits - b.commits;
                (commits > 0).then(|| (a.log_blocks - b.log_blocks) as f64 / commits as f64)
            }),
            unjournaled: m.locks.as_ref().map(|(b, a)| a.unjournaled - b.unjournaled),
            lost_bytes: m.lost_bytes,
            overcommitted_bytes: m.overcommitted_bytes,
        }
    }
}

/// The whole result, as `--json` writes it.
#[derive(Debug, Clone, Serialize)]
pub struct BenchReport {
    pub machine: Machine,
    pub duration_secs: f64,
    pub baseline: String,
    /// `--pin` of every record.
    pub pin: &'static str,
    pub records: Vec<Record>,
    /// One line per target that could not be set up.
    pub skipped: Vec<String>,
}

impl BenchReport {
    pub fn to_json(&self) -> String {
        // OK to unwrap: every field serialises (no maps with non-string keys).
        serde_json::to_string_pretty(self).unwrap()
    }

    /// The terminal table: per workload, a row per thread count and target, with the ratio
    /// of each throughput to the baseline target's at the same thread count.
    pub fn table(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "{} cores, {}, Linux {}; {:.1} s per point; pinned: {}; ratios against {}",
            self.machine.cores,
            self.machine.cpu,
            self.machine.kernel,
            self.duration_secs,
            self.pin,
            self.baseline
        );
        let workloads: Vec<&str> = {
            let mut seen = Vec::new();
            for r in &self.records {
                if !seen.contains(&r.workload.as_str()) {
                    seen.push(r.workload.as_str());
                }
            }
            seen
        };
        let width = self
            .records
            .iter()
            .map(|r| r.target.len())
            .max()
            .unwrap_or(0)
            .max("target".len());
        for w in workloads {
            let _ = writeln!(
                out,
                "\n{w}\n  {:>7}  {:<width$} {:>12} {:>8} {:>9} {:>9} {:>10} {:>10} {:>6} {:>9} {:>12} {:>10} {:>10} {:>11} {:>7} {:>10}",
                "threads",
                "target",
                "ops/s",
                "ratio",
                "MiB/s",
                "files/s",
                "ext/file",
                "mean ext",
                "score",
                "locks/op",
                "contended/op",
                "atomics/op",
                "log blk/op",
                "commit µs/op",
                "commits",
                "blk/commit"
            );
            let rows: Vec<&Record> = self.records.iter().filter(|r| r.workload == w).collect();
            let threads: BTreeSet<usize> = rows.iter().map(|r| r.threads).collect();
            for t in threads {
                let baseline = rows
                    .iter()
                    .find(|r| r.threads == t && r.target == self.baseline)
                    .map(|r| r.ops_per_sec);
                for r in rows.iter().filter(|r| r.threads == t) {
                    let ratio = baseline
                        .filter(|b| *b > 0.0)
                        .map_or("-".to_string(), |b| format!("{:.2}x", r.ops_per_sec / b));
                    let opt =
                        |v: Option<f64>, f: &dyn Fn(f64) -> String| v.map_or("-".to_string(), f);
                    let _ = writeln!(
                        out,
                        "  {:>7}  {:<width$} {:>12} {:>8} {:>9} {:>9} {:>10} {:>10} {:>6} {:>9} {:>12} {:>10} {:>10} {:>11} {:>7} {:>10}",
                        t,
                        r.target,
                        ops_per_sec(r.ops_per_sec),
                        ratio,
                        opt(r.mib_per_sec, &|v| format!("{v:.0}")),
                        opt(r.files_per_sec, &|v| format!("{v:.0}")),
                        opt(r.extents_per_file, &|v| format!("{v:.1}")),
                        opt(r.mean_extent_bytes, &human_bytes),
                        opt(r.fragmentation_score, &|v| format!("{v:.0}")),
                        opt(r.locks_per_op, &|v| format!("{v:.1}")),
                        opt(r.contended_per_op, &|v| format!("{v:.4}")),
                        opt(r.shared_atomic_writes_per_op, &|v| format!("{v:.4}")),
                        opt(r.log_blocks_per_op, &|v| format!("{v:.3}")),
                        opt(r.commit_wait_us_per_op, &|v| format!("{v:.2}")),
                        r.commits.map_or("-".to_string(), |c| c.to_string()),
                        opt(r.log_blocks_per_commit, &|v| format!("{v:.0}")),
                    );
                    if let Some(around) = r.unjournaled.filter(|n| *n > 0) {
                        let _ = writeln!(
                            out,
                            "  {:>7}  journal check: FAILED: {around} commits too large for the log, written around it (not crash-safe)",
                            ""
                        );
                    }
                    if let (Some(lost), Some(over)) = (r.lost_bytes, r.overcommitted_bytes) {
                        let verdict = if lost == 0 && over == 0 {
                            "no over-commit, nothing lost".to_string()
                        } else {
                            format!("FAILED: {over} bytes over-committed, {lost} bytes lost")
                        };
                        let _ = writeln!(out, "  {:>7}  near-full check: {verdict}", "");
                    }
                }
            }
        }
        for line in &self.skipped {
            let _ = writeln!(out, "\nskipped: {line}");
        }
        out
    }
}

/// Whole operations per second, or three decimals below 100 (a tree workload
/// does a few trees a second).
fn ops_per_sec(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.3}")
    }
}

/// 1.5M, 128K: sizes in powers of 1024.
pub fn human_bytes(v: f64) -> String {
    let units = ["B", "K", "M", "G", "T"];
    let mut v = v;
    let mut i = 0;
    while v >= 1024.0 && i + 1 < units.len() {
        v /= 1024.0;
        i += 1;
    }
    if i == 0 {
        format!("{v:.0}{}", units[i])
    } else {
        format!("{v:.1}{}", units[i])
    }
}

/// 1.2M, 350K: counts with a decimal suffix, for axis labels.
pub fn human_count(v: f64) -> String {
    if v >= 1e6 {
        format!("{:.1}M", v / 1e6)
    } else if v >= 1e3 {
        format!("{:.0}K", v / 1e3)
    } else {
        format!("{v:.0}")
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::pinning::Placement;
    use crate::workload::AppendBy;

    /// The table of one e4 create point whose engine counters moved from `before` to
    /// `after`.
    fn table_for(before: LockReport, after: LockReport) -> String {
        let params = Params {
            threads: 1,
            duration: Duration::from_secs(1),
            size: 0,
            append_by: AppendBy::Write,
            placement: Placement::default(),
            settle: false,
            tree: None,
        };
        let measured = Measurement {
            ops: 1000,
            elapsed: Duration::from_secs(1),
            locks: Some((before, after)),
            ..Measurement::default()
        };
        BenchReport {
            machine: Machine {
                cores: 2,
                kernel: "6.18".into(),
                cpu: "test".into(),
            },
            duration_secs: 1.0,
            baseline: "e4".into(),
            pin: "none",
            records: vec![Record::new(
                Workload::Create,
                "e4",
                &params,
                &measured,
                None,
            )],
            skipped: Vec::new(),
        }
        .table()
    }

    #[test]
    fn a_point_with_a_commit_written_around_the_journal_is_flagged() {
        let before = LockReport {
            unjournaled: 1,
            ..LockReport::default()
        };
        let after = LockReport {
            unjournaled: 3,
            ..LockReport::default()
        };
        let table = table_for(before, after);
        assert!(
            table.contains("journal check: FAILED: 2 commits too large for the log"),
            "{table}"
        );
        let table = table_for(before, before);
        assert!(!table.contains("journal check"), "{table}");
    }
}

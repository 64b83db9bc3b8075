//! `e4 bench`: the experiments behind e4's scalability claims in one command, e4 side by
//! side with what users would pick instead.
//!
//! A [`Plan`] names workloads ([`Workload`]: will-it-scale fallocate2, appends, FxMark
//! micro-benchmarks, a near-full race, sequential 1 MiB writes and reads, a real tree's
//! untar, `rm -rf` and `git status`), targets ([`Target`]: e4 in process, the kernel's
//! ext4 on a loop device, fuse2fs, tmpfs, any directory) and thread counts. [`run`] measures
//! every point from a freshly made filesystem, reads the layout each image-backed target
//! left ([`LayoutReport`]) and returns a [`BenchReport`] for the table, `--json` and
//! `--chart`.
//!
//! ```no_run
//! use std::time::Duration;
//! use e4_bench::{run, Plan, Target, Workload};
//! let plan = Plan {
//!     workloads: vec![Workload::Create],
//!     targets: vec![Target::E4],
//!     threads: vec![1, 2],
//!     duration: Duration::from_secs(1),
//!     ..Plan::default()
//! };
//! let report = run(&plan, &mut |line| eprintln!("{line}"));
//! print!("{}", report.table());
//! ```

#![forbid(unsafe_code)]

pub mod chart;
pub mod fs_ops;
pub mod layout;
pub mod pinning;
pub mod real_tree;
pub mod report;
pub mod target;
pub mod workload;

use std::path::PathBuf;
use std::time::Duration;

pub use layout::LayoutReport;
pub use pinning::{Pin, Placement};
pub use real_tree::TreeTarball;
pub use report::{BenchReport, Machine, Record};
pub use target::{Target, TargetError};
pub use workload::{AppendBy, Params, Workload};

/// What to measure.
#[derive(Debug, Clone)]
pub struct Plan {
    pub workloads: Vec<Workload>,
    pub targets: Vec<Target>,
    pub threads: Vec<usize>,
    pub duration: Duration,
    /// Per-thread file size for `append` (and the size `dwtl` shrinks from).
    pub size: u64,
    pub append_by: AppendBy,
    /// The target ratios are taken against.
    pub baseline: Target,
    /// Where to leave each image (else scratch on tmpfs, removed after reading it back).
    pub keep: Option<PathBuf>,
    /// The CPUs the workload threads and a target's daemon run on (`--pin`).
    pub placement: Placement,
    /// Each point's clock stops after the filesystem is written back (`--settle`).
    pub settle: bool,
    /// The directory the tree workloads copy (`--tree`; [`real_tree::DEFAULT_TREE`]).
    pub tree: PathBuf,
}

impl Default for Plan {
    /// The short run `e4 bench` does with no arguments (about a minute): fallocate2,
    /// append, create and unlink at 1, 2 and 4 threads on e4 and the kernel's ext4.
    fn default() -> Self {
        Plan {
            workloads: vec![
                Workload::Fallocate2,
                Workload::Append,
                Workload::Create,
                Workload::Unlink,
            ],
            targets: vec![Target::E4, Target::kernel_ext4()],
            threads: vec![1, 2, 4],
            duration: Duration::from_secs(2),
            size: 256 << 20,
            append_by: AppendBy::Write,
            baseline: Target::kernel_ext4(),
            keep: None,
            placement: Placement::default(),
            settle: false,
            tree: PathBuf::from(real_tree::DEFAULT_TREE),
        }
    }
}

/// Runs every point of `plan`, telling `progress` what it is doing (one line per point).
/// A target that cannot be set up is skipped with one line, the first time it fails.
pub fn run(plan: &Plan, progress: &mut dyn FnMut(&str)) -> BenchReport {
    let scratch = plan
        .keep
        .clone()
        .unwrap_or_else(|| target::scratch_base().join(format!("e4-bench-{}", std::process::id())));
    let mut report = BenchReport {
        machine: Machine::this(),
        duration_secs: plan.duration.as_secs_f64(),
        baseline: plan.baseline.name(),
        pin: plan.placement.pin().name(),
        records: Vec::new(),
        skipped: Vec::new(),
    };
    if let Err(e) = std::fs::create_dir_all(&scratch) {
        report
            .skipped
            .push(format!("every target: {}: {e}", scratch.display()));
        return report;
    }
    let tree = tree_for(plan, &scratch, progress);
    let total = plan.workloads.len() * plan.threads.len() * plan.targets.len();
    let mut done = 0;
    let mut unavailable: Vec<Target> = Vec::new();
    let git = if plan.workloads.contains(&Workload::GitStatus) {
        real_tree::check_git()
    } else {
        Ok(())
    };
    for &workload in &plan.workloads {
        if workload.works_on_a_tree() {
            let cannot = match (&tree, &git) {
                (Err(why), _) => Some(why),
                (Ok(_), Err(why)) if workload == Workload::GitStatus => Some(why),
                _ => None,
            };
            if let Some(why) = cannot {
                let line = format!("{}: {why}", workload.name());
                progress(&format!("  skipped {line}"));
                report.skipped.push(line);
                done += plan.threads.len() * plan.targets.len();
                continue;
            }
        }
        let mut not_applicable: Vec<&Target> = Vec::new();
        for &threads in &plan.threads {
            for target in &plan.targets {
                done += 1;
                if unavailable.contains(target) || not_applicable.contains(&target) {
                    continue;
                }
                let params = Params {
                    threads,
                    duration: plan.duration,
                    size: plan.size,
                    append_by: plan.append_by,
                    placement: plan.placement.clone(),
                    settle: plan.settle,
                    tree: tree.clone().ok().flatten(),
                };
                let name = target.name();
                progress(&format!(
                    "[{done}/{total}] {} on {name}, {threads} thread(s)",
                    workload.name()
                ));
                let image_name = format!(
                    "{}-{}-{threads}.img",
                    name.replace(['/', ':'], "_"),
                    workload.name()
                );
                match target::run_point(target, workload, &params, &scratch, &image_name) {
                    Ok(point) => {
                        let layout = match (&point.image, workload.writes_data()) {
                            (Some(image), true) => match LayoutReport::read(image) {
                                Ok(l) => Some(l),
                                Err(e) => {
                                    progress(&format!("  layout not read: {e}"));
                                    None
                                }
                            },
                            _ => None,
                        };
                        if let (Some(image), None) = (&point.image, &plan.keep) {
                            let _ = std::fs::remove_file(image);
                        }
                        report.records.push(Record::new(
                            workload,
                            &name,
                            &params,
                            &point.measurement,
                            layout.as_ref(),
                        ));
                    }
                    Err(TargetError::Unavailable(why)) => {
                        let line = format!("{name}: {why}");
                        progress(&format!("  skipped {line}"));
                        report.skipped.push(line);
                        unavailable.push(target.clone());
                    }
                    Err(TargetError::NotApplicable(why)) => {
                        let line = format!("{name} {}: not applicable: {why}", workload.name());
                        progress(&format!("  skipped {line}"));
                        report.skipped.push(line);
                        not_applicable.push(target);
                    }
                    Err(TargetError::Failed(why)) => {
                        let line = format!("{name} {} {threads}: {why}", workload.name());
                        progress(&format!("  failed: {line}"));
                        report.skipped.push(line);
                    }
                }
            }
        }
    }
    if plan.keep.is_none() {
        let _ = std::fs::remove_dir_all(&scratch);
    } else if let Ok(Some(tree)) = &tree {
        let _ = std::fs::remove_file(&tree.path);
    }
    report
}

/// The tarball of `plan.tree` in `scratch`, made before any point, if a workload of the
/// plan needs one; why not, in one line, if it cannot be made.
fn tree_for(
    plan: &Plan,
    scratch: &std::path::Path,
    progress: &mut dyn FnMut(&str),
) -> Result<Option<TreeTarball>, String> {
    if !plan.workloads.iter().any(|w| w.works_on_a_tree()) {
        return Ok(None);
    }
    let tree = TreeTarball::build(&plan.tree, scratch)?;
    progress(&format!(
        "tree: {} ({} files, {})",
        tree.source.display(),
        tree.files,
        report::human_bytes(tree.bytes as f64)
    ));
    Ok(Some(tree))
}

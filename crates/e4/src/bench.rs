//! `e4 bench`: runs the workloads of e4-bench against e4 and the alternatives, prints the
//! comparison table, and writes `--json` and `--chart` files.

use std::path::PathBuf;
use std::time::Duration;

use e4_bench::{AppendBy, Pin, Placement, Plan, Target, Workload};

use crate::outln;
use crate::output::{CliError, Output};

/// The arguments of `e4 bench`, after clap.
pub struct BenchArgs {
    pub workloads: Vec<Workload>,
    pub targets: Option<Vec<Target>>,
    pub threads: Option<Vec<usize>>,
    pub duration: Option<f64>,
    pub size: Option<u64>,
    pub by: AppendBy,
    pub baseline: Option<Target>,
    pub json: Option<PathBuf>,
    pub chart: Option<PathBuf>,
    pub keep: Option<PathBuf>,
    pub pin: Pin,
    pub settle: bool,
    pub tree: Option<PathBuf>,
}

pub fn run(args: BenchArgs) -> Result<(), CliError> {
    let defaults = Plan::default();
    // Refused here, in one line, rather than as a failed point per target.
    let placement = Placement::for_this_process(args.pin)?;
    let plan = Plan {
        workloads: if args.workloads.is_empty() {
            defaults.workloads
        } else {
            args.workloads
        },
        targets: args.targets.unwrap_or(defaults.targets),
        threads: args.threads.unwrap_or(defaults.threads),
        duration: args
            .duration
            .map_or(defaults.duration, Duration::from_secs_f64),
        size: args.size.unwrap_or(defaults.size),
        append_by: args.by,
        baseline: args.baseline.unwrap_or(defaults.baseline),
        keep: args.keep,
        placement,
        settle: args.settle,
        tree: args.tree.unwrap_or(defaults.tree),
    };
    let report = e4_bench::run(&plan, &mut |line| eprintln!("{line}"));
    if let Some(path) = &args.json {
        std::fs::write(path, report.to_json() + "\n")
            .map_err(|e| CliError::Message(format!("{}: {e}", path.display())))?;
    }
    if let Some(path) = &args.chart {
        e4_bench::chart::write_chart(&report.records, path).map_err(CliError::Message)?;
    }
    let mut out = Output::new();
    outln!(out, "{}", report.table().trim_end())?;
    out.finish()?;
    if report.records.is_empty() {
        return Err(CliError::Message(
            "no point could be measured (see the skipped lines)".into(),
        ));
    }
    Ok(())
}

/// `--threads 1,2,4`.
pub fn parse_threads(s: &str) -> Result<Vec<usize>, String> {
    s.split(',')
        .map(|t| match t.trim().parse::<usize>() {
            Ok(n) if n > 0 => Ok(n),
            _ => Err(format!("'{t}' is not a thread count")),
        })
        .collect()
}

/// `--targets e4,kernel-ext4,posix:/mnt/x`.
pub fn parse_targets(s: &str) -> Result<Vec<Target>, String> {
    s.split(',').map(|t| t.trim().parse()).collect()
}

/// `--by write|fallocate`.
pub fn parse_append_by(s: &str) -> Result<AppendBy, String> {
    match s {
        "write" => Ok(AppendBy::Write),
        "fallocate" => Ok(AppendBy::Fallocate),
        _ => Err(format!("'{s}' is not write or fallocate")),
    }
}

/// `--duration 2.5`.
pub fn parse_duration(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v > 0.0 && v.is_finite() => Ok(v),
        _ => Err(format!("'{s}' is not a positive number of seconds")),
    }
}

/// `--size 268435456`, `256M`, `1G`: bytes, with an optional K, M or G (powers of 1024).
pub fn parse_size(s: &str) -> Result<u64, String> {
    let (digits, shift) = match s.char_indices().last() {
        Some((i, 'K' | 'k')) => (&s[..i], 10),
        Some((i, 'M' | 'm')) => (&s[..i], 20),
        Some((i, 'G' | 'g')) => (&s[..i], 30),
        _ => (s, 0),
    };
    digits
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(1 << shift))
        .filter(|&n| n >= 4096)
        .ok_or_else(|| format!("'{s}' is not a size of at least 4096 bytes (e.g. 64M)"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_take_binary_suffixes() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("64M"), Ok(64 << 20));
        assert_eq!(parse_size("1g"), Ok(1 << 30));
        assert_eq!(parse_size("8k"), Ok(8192));
        assert!(parse_size("12").is_err());
        assert!(parse_size("M").is_err());
        assert!(parse_size("99999999999G").is_err());
    }
}

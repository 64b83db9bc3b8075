//! `e4`: inspect, read and export ext2/3/4 images in user space.
//!
//! Exit status: 0 on success, 1 when a command fails (one line on stderr), 2 for bad
//! arguments. See [`output`].

use std::process::ExitCode;

use clap::{ArgAction, Parser, Subcommand};

mod bench;
mod cat;
mod export;
mod fsck;
mod info;
mod ls;
mod output;
mod stat;
mod time_format;

use output::{CliError, EXIT_RUNTIME, EXIT_USAGE};

#[derive(Parser)]
#[command(
    name = "e4",
    version,
    about = "ext4 in user space: read and export ext2/3/4 images without root",
    after_help = "Exit status: 0 on success, 1 when the command fails, 2 for bad arguments."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Measure e4 beside the kernel's ext4 (and fuse2fs, tmpfs, any directory): throughput
    /// per thread count, ratios against a baseline, and the layout each left on disk.
    /// With no arguments: a short run (about a minute) of fallocate2, append, create and
    /// unlink at 1, 2 and 4 threads on e4 and, when run as root, kernel-ext4.
    Bench {
        /// Workloads: fallocate2, append, create, unlink, create-shared, unlink-shared, dwol,
        /// dwtl, dwsl, mrpl, mrdl, mwrl, mwrm, near-full.
        #[arg(value_parser = |s: &str| s.parse::<e4_bench::Workload>())]
        workloads: Vec<e4_bench::Workload>,
        /// Comma-separated: e4, kernel-ext4, fuse2fs, tmpfs, posix:DIR.
        #[arg(long, value_parser = bench::parse_targets)]
        targets: Option<std::vec::Vec<e4_bench::Target>>,
        /// Comma-separated thread counts (default 1,2,4).
        #[arg(long, value_parser = bench::parse_threads)]
        threads: Option<std::vec::Vec<usize>>,
        /// Seconds per point (default 2).
        #[arg(long, value_parser = bench::parse_duration)]
        duration: Option<f64>,
        /// Bytes each append thread writes at most, and dwtl's starting size: a number with
        /// an optional K, M or G (default 256M).
        #[arg(long, value_parser = bench::parse_size)]
        size: Option<u64>,
        /// How append grows its files: write or fallocate.
        #[arg(long, default_value = "write", value_parser = bench::parse_append_by)]
        by: e4_bench::AppendBy,
        /// Target the ratios are against (default kernel-ext4).
        #[arg(long, value_parser = |s: &str| s.parse::<e4_bench::Target>())]
        baseline: Option<e4_bench::Target>,
        /// Write every record as JSON to FILE.
        #[arg(long, value_name = "FILE")]
        json: Option<String>,
        /// Draw ops/s against threads, a panel per workload, to FILE (SVG).
        #[arg(long, value_name = "FILE")]
        chart: Option<String>,
        /// Make and leave each target's image in DIR (a tmpfs keeps timings comparable).
        #[arg(long, value_name = "DIR")]
        keep: Option<String>,
    },
    /// Print the superblock summary (like `dumpe2fs -h`); with -g, every block group too.
    Info {
        /// The ext2/3/4 image file or block device.
        image: String,
        /// Also list every block group's descriptor.
        #[arg(short, long)]
        groups: bool,
    },
    /// List a directory (or show one file).
    #[command(disable_help_flag = true)]
    Ls {
        /// The ext2/3/4 image file or block device.
        image: String,
        /// Path inside the image, from its root; `/` by default.
        #[arg(default_value = "/")]
        path: String,
        /// Long listing: mode, links, owner, group, size, time.
        #[arg(short)]
        long: bool,
        /// With -l, sizes in powers of 1024 (1.5K, 12M), as `ls -lh`.
        #[arg(short = 'h', long = "human-readable")]
        human: bool,
        /// Print help.
        #[arg(long, action = ArgAction::Help)]
        help: Option<bool>,
    },
    /// Show an inode's attributes (like `stat`; the last symlink is not followed).
    Stat {
        /// The ext2/3/4 image file or block device.
        image: String,
        /// Path inside the image, from its root.
        path: String,
    },
    /// Write a file's contents to standard output.
    Cat {
        /// The ext2/3/4 image file or block device.
        image: String,
        /// Path of a regular file inside the image (symlinks are followed).
        path: String,
    },
    /// Extract the whole tree into DIR with modes, owners, times, symlinks, hard links,
    /// device nodes and xattrs. Goes on past files the host refuses, reports each one, and
    /// exits 1 at the end if any failed.
    Export {
        /// The ext2/3/4 image file or block device.
        image: String,
        /// Destination directory; created if missing, must be empty if present.
        dir: String,
        /// Worker threads; all cores by default.
        #[arg(short = 'j', long, value_parser = clap::value_parser!(u16).range(1..))]
        threads: Option<u16>,
    },
    /// Check the filesystem without changing it, as `e2fsck -n` does, on every core.
    /// Exit status as e2fsck's: 0 clean, 4 errors found, 8 cannot check, 16 usage.
    Fsck {
        /// The ext2/3/4 image file or block device.
        image: String,
        /// Open read-only and answer "no" to every question (required: no repair yet).
        #[arg(short = 'n')]
        no_changes: bool,
        /// Check even if the filesystem is marked clean.
        #[arg(short = 'f')]
        force: bool,
        /// Worker threads; all cores by default.
        #[arg(short = 'j', long, value_parser = clap::value_parser!(u16).range(1..))]
        threads: Option<u16>,
        /// Print the result as JSON records instead of text.
        #[arg(long)]
        json: bool,
        /// Show progress on stderr: a bar on a terminal, else "pass done total device"
        /// lines as `e2fsck -C 0` prints.
        #[arg(short = 'C')]
        progress: bool,
    },
}

fn run(cli: Cli) -> Result<(), CliError> {
    let open = |image: &str| {
        let fs = e4_fs::Filesystem::open(image, e4_fs::OpenOptions::default())
            .map_err(|e| CliError::Message(format!("{image}: {e}")))?;
        // Damage read around (a bad primary superblock, descriptor checksums): one line
        // each, and the command goes on, as the kernel's read-only mount does.
        for warning in fs.warnings() {
            eprintln!("e4: warning: {image}: {warning}");
        }
        Ok::<_, CliError>(fs)
    };
    match cli.command {
        Command::Info { image, groups } => info::run(&open(&image)?, groups),
        Command::Ls {
            image,
            path,
            long,
            human,
            help: _,
        } => ls::run(&open(&image)?, &path, ls::Listing { long, human }),
        Command::Stat { image, path } => stat::run(&open(&image)?, &path),
        Command::Cat { image, path } => cat::run(&open(&image)?, &path),
        Command::Export {
            image,
            dir,
            threads,
        } => export::run(
            &open(&image)?,
            std::path::Path::new(&dir),
            threads.map(usize::from),
        ),
        Command::Bench {
            workloads,
            targets,
            threads,
            duration,
            size,
            by,
            baseline,
            json,
            chart,
            keep,
        } => bench::run(bench::BenchArgs {
            workloads,
            targets,
            threads,
            duration,
            size,
            by,
            baseline,
            json: json.map(Into::into),
            chart: chart.map(Into::into),
            keep: keep.map(Into::into),
        }),
        Command::Fsck { .. } => unreachable!("fsck is dispatched by main"),
    }
}

fn main() -> ExitCode {
    // A panic is a bug in e4; report it on one line rather than with a backtrace.
    std::panic::set_hook(Box::new(|info| {
        let message = info.to_string().replace('\n', " ");
        eprintln!("e4: internal error (please report): {message}");
    }));
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) if !e.use_stderr() => {
            // --help and --version: clap prints them to stdout.
            let _ = e.print();
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            let rendered = e.render().to_string();
            let first = rendered.lines().next().unwrap_or_default();
            let message = first.strip_prefix("error: ").unwrap_or(first);
            eprintln!("e4: {message} (see 'e4 --help')");
            // fsck keeps e2fsck's usage status, 16.
            let fsck = std::env::args().nth(1).is_some_and(|a| a == "fsck");
            return ExitCode::from(if fsck {
                e4_fsck::report::EXIT_USAGE
            } else {
                EXIT_USAGE
            });
        }
    };
    if let Command::Fsck {
        image,
        no_changes,
        force,
        threads,
        json,
        progress,
    } = cli.command
    {
        return ExitCode::from(fsck::run(&fsck::FsckArgs {
            image,
            no_changes,
            force,
            threads: threads.map(usize::from),
            json,
            progress,
        }));
    }
    match run(cli) {
        Ok(()) | Err(CliError::StdoutClosed) => ExitCode::SUCCESS,
        Err(CliError::Message(message)) => {
            eprintln!("e4: {message}");
            ExitCode::from(EXIT_RUNTIME)
        }
    }
}

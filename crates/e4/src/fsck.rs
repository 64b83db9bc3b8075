//! `e4 fsck`: check an image without changing it, with e2fsck's exit statuses (0 clean,
//! 4 errors left, 8 cannot check, 12 errors and a check that stopped where e2fsck -n
//! stops, 16 usage) rather than the other commands' 0/1/2.

use std::io::{IsTerminal, Write};
use std::path::Path;
use std::sync::{Arc, Mutex};

use e4_fs::InUse;

use e4_fsck::phase_times::PhaseClock;
use e4_fsck::report::{EXIT_OPERATIONAL, EXIT_USAGE};
use e4_fsck::{Options, Progress, ProgressUpdate};

/// What `e4 fsck` was asked to do.
pub struct FsckArgs {
    pub image: String,
    pub no_changes: bool,
    pub force: bool,
    pub threads: Option<usize>,
    pub json: bool,
    pub progress: bool,
    /// Print each step's wall time to stderr.
    pub timings: bool,
}

/// Runs the check and returns the exit status.
pub fn run(args: &FsckArgs) -> u8 {
    if !args.no_changes {
        // Repair is not implemented: refuse rather than pretend (e2fsck without -n/-p/-y
        // would ask; there is no one to ask here).
        eprintln!("e4 fsck: only checking is supported; pass -n");
        return EXIT_USAGE;
    }
    // More workers than cores only adds switching between them (measured: 4 and 8 threads
    // were 2-10 % slower than 2 on a 2-core machine), so -j is a ceiling, not a count.
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let options = Options {
        threads: args.threads.map(|n| n.clamp(1, cores)),
        force: args.force,
        progress: args.progress.then(|| progress_on_stderr(&args.image)),
        // One check per process: the main thread works instead of waiting.
        use_calling_thread: true,
    };
    if let Some(InUse::Mounted {
        device,
        mount_point,
        read_write,
        ..
    }) = e4_fs::kernel_mount(Path::new(&args.image))
    {
        // e2fsck -n says "Warning! IMAGE is mounted." and goes on; so does e4, saying what
        // a read-write mount means for what the check sees.
        let through = if device == args.image {
            String::new()
        } else {
            format!(" through {device}")
        };
        if read_write {
            eprintln!(
                "e4 fsck: warning: {} is mounted read-write by the kernel at {mount_point}{through}: \
                 the check reads what the kernel last wrote, and changes not yet written may \
                 show as damage",
                args.image
            );
        } else {
            eprintln!(
                "e4 fsck: warning: {} is mounted read-only by the kernel at {mount_point}{through}",
                args.image
            );
        }
    }
    let report = match e4_fsck::check(Path::new(&args.image), &options) {
        Ok(report) => report,
        Err(e) => {
            eprintln!("e4 fsck: {}: {e}", args.image);
            return EXIT_OPERATIONAL;
        }
    };
    let mut writing = PhaseClock::start();
    let mut out = std::io::stdout().lock();
    let written = if args.json {
        report.write_json(&mut out)
    } else {
        report.write_text(&mut out, &args.image)
    };
    // A closed stdout does not change the verdict.
    let _ = written.and_then(|()| out.flush());
    if args.timings {
        writing.lap("write report");
        let mut phases = report.phases.clone();
        phases.extend(writing.finish());
        // Like progress, best effort: a closed stderr must not change the exit status.
        let _ = write!(std::io::stderr().lock(), "{phases}");
    }
    report.exit_code()
}

/// Progress on standard error: a bar when it is a terminal, else e2fsck's `-C 0` lines
/// ("pass done total device"), each printed when the pass's permille changes.
fn progress_on_stderr(device: &str) -> Progress {
    let terminal = std::io::stderr().is_terminal();
    let device = device.to_string();
    let last = Mutex::new((0u8, u64::MAX));
    Progress(Arc::new(move |u: ProgressUpdate| {
        let permille = (u.done * 1000).checked_div(u.total).unwrap_or(1000);
        let mut last = last.lock().unwrap_or_else(|e| e.into_inner());
        if *last == (u.pass, permille) {
            return;
        }
        *last = (u.pass, permille);
        let mut err = std::io::stderr().lock();
        // Progress is best effort: a closed stderr must not stop the check.
        let _ = if terminal {
            const WIDTH: u64 = 40;
            let filled = (permille * WIDTH / 1000) as usize;
            write!(
                err,
                "\r{device}: pass {} |{}{}| {:5.1}%",
                u.pass,
                "=".repeat(filled),
                " ".repeat(WIDTH as usize - filled),
                permille as f64 / 10.0
            )
            .and_then(|()| {
                if u.pass == 5 && permille == 1000 {
                    writeln!(err)
                } else {
                    Ok(())
                }
            })
        } else {
            writeln!(err, "{} {} {} {device}", u.pass, u.done, u.total)
        };
    }))
}

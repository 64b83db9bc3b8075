//! `e4 fsck`: check an image without changing it, with e2fsck's exit statuses (0 clean,
//! 4 errors left, 8 cannot check, 16 usage) rather than the other commands' 0/1/2.

use std::io::Write;
use std::path::Path;

use e4_fsck::report::{EXIT_OPERATIONAL, EXIT_USAGE};
use e4_fsck::Options;

/// What `e4 fsck` was asked to do.
pub struct FsckArgs {
    pub image: String,
    pub no_changes: bool,
    pub force: bool,
    pub threads: Option<usize>,
    pub json: bool,
}

/// Runs the check and returns the exit status.
pub fn run(args: &FsckArgs) -> u8 {
    if !args.no_changes {
        // Repair is not implemented: refuse rather than pretend (e2fsck without -n/-p/-y
        // would ask; there is no one to ask here).
        eprintln!("e4 fsck: only checking is supported; pass -n");
        return EXIT_USAGE;
    }
    let options = Options {
        threads: args.threads,
        force: args.force,
    };
    let report = match e4_fsck::check(Path::new(&args.image), &options) {
        Ok(report) => report,
        Err(e) => {
            eprintln!("e4 fsck: {}: {e}", args.image);
            return EXIT_OPERATIONAL;
        }
    };
    let mut out = std::io::stdout().lock();
    let written = if args.json {
        report.write_json(&mut out)
    } else {
        report.write_text(&mut out, &args.image)
    };
    // A closed stdout does not change the verdict.
    let _ = written.and_then(|()| out.flush());
    report.exit_code()
}

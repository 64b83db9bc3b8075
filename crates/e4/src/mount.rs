//! `e4 mount`: the arguments, then e4-fuse does the work (crates/e4-fuse, docs/FUSE.md).

use std::path::PathBuf;
use std::process::Command;

use e4_fuse::MountOptions;

use crate::output::CliError;

pub struct MountArgs {
    /// Every `-o` list, in order.
    pub options: Vec<String>,
    pub foreground: bool,
    /// This process is the daemon a plain `e4 mount` started.
    pub daemon: bool,
    pub image: PathBuf,
    pub dir: PathBuf,
}

/// Checks one `-o` list for clap, so a bad option is refused as a usage error.
pub fn parse_options(list: &str) -> Result<String, String> {
    MountOptions::parse(list)
        .map(|_| list.to_string())
        .map_err(|e| e.to_string())
}

pub fn run(args: MountArgs) -> Result<(), CliError> {
    let list = args.options.join(",");
    let options = MountOptions::parse(&list).map_err(|e| e.to_string())?;
    if args.foreground || args.daemon {
        let report = args.daemon;
        return e4_fuse::mount_until_signal(&args.image, &args.dir, &options, || {
            if report {
                // Nobody to tell if this fails: the starter then sees the daemon run on.
                let _ = e4_fuse::report_mounted();
            }
        })
        .map_err(|e| CliError::Message(e.to_string()));
    }
    let me = std::env::current_exe().map_err(|e| format!("cannot find the e4 program: {e}"))?;
    let mut daemon = Command::new(me);
    daemon.args(["mount", "--daemon", "-o", &list]);
    daemon.arg(&args.image).arg(&args.dir);
    match e4_fuse::start_daemon(daemon) {
        Ok(Ok(())) => Ok(()),
        // The daemon said why on the standard error it shares with this process.
        Ok(Err(status)) => Err(CliError::Reported(
            status.code().map_or(1, |c| c.clamp(1, 255) as u8),
        )),
        Err(e) => Err(CliError::Message(format!(
            "cannot start the mount daemon: {e}"
        ))),
    }
}

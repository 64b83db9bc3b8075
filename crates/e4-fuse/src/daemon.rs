//! `e4 mount` without `-f`: the mount runs in a daemon process, and the command returns
//! once the kernel has the mount (or with the daemon's error), as fuse2fs does.
//!
//! The daemon is the same program started again in the foreground mode, in a process
//! group of its own so a Ctrl-C at the terminal that started it does not reach it. Its
//! standard output is a pipe its starter reads to the end: once mounted, the daemon
//! writes one byte there and points its standard output at /dev/null, which ends the
//! starter's read. End of file without that byte means the daemon failed, and its own
//! one-line error is already on the standard error they share. No polling of the mount
//! table, no timeout to guess.

use std::fs::File;
use std::io::{self, Read, Write};
use std::os::unix::process::CommandExt;
use std::process::{Command, ExitStatus, Stdio};

/// The byte a daemon writes once its mount is up.
const MOUNTED: u8 = b'm';

/// Starts `daemon` (this program again, in the foreground mode, asked to call
/// [`report_mounted`] once mounted) and waits until it has mounted or exited.
/// Returns the daemon's exit status when it failed.
pub fn start_daemon(mut daemon: Command) -> io::Result<Result<(), ExitStatus>> {
    let mut child = daemon
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .process_group(0)
        .spawn()?;
    // OK to unwrap: stdout was set to a pipe just above.
    let mut ready = child.stdout.take().expect("a piped stdout");
    let mut said = Vec::new();
    ready.read_to_end(&mut said)?;
    if said == [MOUNTED] {
        Ok(Ok(()))
    } else {
        Ok(Err(child.wait()?))
    }
}

/// In the daemon: tells the starter the mount is up (see the module doc).
pub fn report_mounted() -> io::Result<()> {
    let mut out = io::stdout().lock();
    out.write_all(&[MOUNTED])?;
    out.flush()?;
    let null = File::options().write(true).open("/dev/null")?;
    nix::unistd::dup2_stdout(&null).map_err(io::Error::from)
}

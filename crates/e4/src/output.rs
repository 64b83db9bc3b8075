//! How the CLI fails and how it writes to standard output.
//!
//! Every failure is one line on stderr and a documented exit status: [`EXIT_RUNTIME`] when the
//! command could not do its job (a bad image, a missing path, a host error), [`EXIT_USAGE`]
//! for bad arguments (clap's own convention). A reader that closes standard output early
//! (`e4 ls IMG | head -1`) is not an error: the command stops quietly with status 0, as
//! ripgrep and most Unix tools behave.

use std::fmt;
use std::io::{self, BufWriter, StdoutLock, Write};

/// The command could not do its job.
pub const EXIT_RUNTIME: u8 = 1;
/// The arguments were wrong (set by clap when it rejects them).
pub const EXIT_USAGE: u8 = 2;

/// Why a command stopped early.
#[derive(Debug)]
pub enum CliError {
    /// A one-line message for stderr.
    Message(String),
    /// Standard output was closed by its reader; nothing to report.
    StdoutClosed,
    /// Already reported on stderr (by a daemon that shares it); exit with this status.
    Reported(u8),
}

impl From<String> for CliError {
    fn from(message: String) -> Self {
        CliError::Message(message)
    }
}

impl From<e4_fs::Error> for CliError {
    fn from(e: e4_fs::Error) -> Self {
        CliError::Message(e.to_string())
    }
}

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CliError::Message(m) => f.write_str(m),
            CliError::StdoutClosed => f.write_str("standard output was closed"),
            CliError::Reported(status) => write!(f, "failed with status {status}"),
        }
    }
}

/// `result`'s value; or, for a command that goes on past a path that fails, `None` once
/// its line is on stderr and `failed` counts it.
pub fn report_path<T>(result: Result<T, String>, failed: &mut usize) -> Option<T> {
    result
        .map_err(|line| {
            eprintln!("e4: {line}");
            *failed += 1;
        })
        .ok()
}

/// How a command that went on past failed paths ends: status 1 if any failed (each
/// already shown by [`report_path`]).
pub fn after_paths(failed: usize) -> Result<(), CliError> {
    match failed {
        0 => Ok(()),
        _ => Err(CliError::Reported(EXIT_RUNTIME)),
    }
}

/// Classifies a failed write to standard output.
pub fn stdout_error(e: io::Error) -> CliError {
    if e.kind() == io::ErrorKind::BrokenPipe {
        CliError::StdoutClosed
    } else {
        CliError::Message(format!("writing standard output: {e}"))
    }
}

/// Buffered standard output whose writes report [`CliError`]s.
pub struct Output(BufWriter<StdoutLock<'static>>);

impl Output {
    pub fn new() -> Self {
        Output(BufWriter::new(io::stdout().lock()))
    }

    /// Writes one line.
    pub fn line(&mut self, args: fmt::Arguments<'_>) -> Result<(), CliError> {
        self.0.write_fmt(args).map_err(stdout_error)?;
        self.0.write_all(b"\n").map_err(stdout_error)
    }

    /// Writes raw bytes.
    pub fn bytes(&mut self, bytes: &[u8]) -> Result<(), CliError> {
        self.0.write_all(bytes).map_err(stdout_error)
    }

    /// Flushes what is buffered; a command calls this last so a late failure is reported.
    pub fn finish(mut self) -> Result<(), CliError> {
        self.0.flush().map_err(stdout_error)
    }
}

/// `outln!(out, "...", args)`: one line to an [`Output`], `?`-able.
#[macro_export]
macro_rules! outln {
    ($out:expr, $($arg:tt)*) => {
        $out.line(format_args!($($arg)*))
    };
}

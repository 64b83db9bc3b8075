//! What every image-changing command shares: opening the image for writing, naming paths
//! inside it, turning engine errors into one line, and unmounting whatever happened.
//!
//! The image is unmounted (everything written back, the filesystem marked clean) on every
//! way out of a command: success, an error part-way, even a panic (the engine's `Drop` does
//! it then). So a failed `e4 rm -r` leaves an image `e2fsck -fn` finds clean, with some of the
//! tree removed, as an interrupted `rm -r` on a mounted filesystem would.
//!
//! Commands write with the credentials of the process that runs them ([`Caller`]).

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;

use e4_fs::{Caller, Error, Filesystem, OpenOptions};

use crate::output::CliError;

/// Opens `image` for writing, runs `command` on it, then unmounts it. A failure to unmount
/// is reported when the command itself succeeded; when both failed, the command's error is
/// the one shown (the unmount failure usually follows from it).
pub fn with_writable_image(
    image: &str,
    command: impl FnOnce(&Filesystem) -> Result<(), CliError>,
) -> Result<(), CliError> {
    with_writable_image_options(image, OpenOptions::writable(), command)
}

/// As [`with_writable_image`], opened with `options` (made writable, for the caller who
/// runs e4).
pub fn with_writable_image_options(
    image: &str,
    options: OpenOptions,
    command: impl FnOnce(&Filesystem) -> Result<(), CliError>,
) -> Result<(), CliError> {
    // The command writes as whoever runs it: root (or the image's reserved uid or gid) may
    // fill the blocks mke2fs -m kept back, as on a kernel mount.
    let options = OpenOptions {
        caller: Caller::of_this_process(),
        writable: true,
        ..options
    };
    let fs =
        Filesystem::open(image, options).map_err(|e| CliError::Message(format!("{image}: {e}")))?;
    for warning in fs.warnings() {
        eprintln!("e4: warning: {image}: {warning}");
    }
    if let Some(reason) = fs.read_only_reason() {
        return Err(CliError::Message(format!(
            "{image}: can only be read, not changed: {reason}"
        )));
    }
    let result = command(&fs);
    // Damage met while working (a group whose bitmap disagrees with its descriptor, which
    // the engine then leaves alone): one line per group, as the kernel logs it.
    for warning in fs.take_new_warnings() {
        eprintln!("e4: warning: {image}: {warning}");
    }
    let unmounted = fs
        .unmount()
        .map_err(|e| CliError::Message(format!("{image}: writing the image back failed: {e}")));
    result.and(unmounted)
}

/// A path inside the image as the user wrote it, and as the engine takes it (bytes, so
/// names that are not UTF-8 work).
#[derive(Clone, Copy)]
pub struct ImagePath<'a>(pub &'a OsStr);

impl<'a> ImagePath<'a> {
    pub fn from_bytes(bytes: &'a [u8]) -> Self {
        ImagePath(OsStr::from_bytes(bytes))
    }

    pub fn bytes(self) -> &'a [u8] {
        self.0.as_bytes()
    }

    /// The path for messages.
    pub fn shown(self) -> String {
        self.0.to_string_lossy().into_owned()
    }

    /// The directory part and the last name: `/a/b/` gives (`/a`, `b`). None for the root
    /// (and for paths ending in `.` or `..`, which name no entry that can be made or removed).
    pub fn split(self) -> Option<(&'a [u8], &'a [u8])> {
        let trimmed = trim_trailing_slashes(self.bytes());
        let (parent, name): (&[u8], &[u8]) = match trimmed.iter().rposition(|&b| b == b'/') {
            Some(at) => (&trimmed[..at], &trimmed[at + 1..]),
            None => (b"", trimmed),
        };
        if name.is_empty() || name == b"." || name == b".." {
            return None;
        }
        Some((parent, name))
    }

    /// The inode of this path's directory part, and its last name; an error line if the
    /// path is the root or the directory part does not resolve.
    pub fn parent_and_name(self, fs: &Filesystem) -> Result<(u32, &'a [u8]), String> {
        let (parent, name) = self
            .split()
            .ok_or_else(|| format!("{}: names no entry (the root, '.' or '..')", self.shown()))?;
        let dir = fs
            .resolve_bytes(parent, true)
            .map_err(|e| describe(self, &e))?;
        Ok((dir, name))
    }

    /// `self/name`, without doubling a slash this path ends with.
    pub fn joined(self, name: &[u8]) -> Vec<u8> {
        [trim_trailing_slashes(self.bytes()), b"/", name].concat()
    }

    /// The inode this path names (the last symlink followed when `follow`).
    pub fn resolve(self, fs: &Filesystem, follow: bool) -> Result<u32, String> {
        fs.resolve_bytes(self.bytes(), follow)
            .map_err(|e| describe(self, &e))
    }
}

/// The names in directory `ino` (at `path`, for messages), in its own order, without `.`
/// and `..`, and without the other names starting with `.` unless `dot_names`: what the
/// tools' `-R` walks (`iterate_on_dir`, nftw).
pub fn entry_names(
    fs: &Filesystem,
    ino: u32,
    path: ImagePath<'_>,
    dot_names: bool,
) -> Result<Vec<Vec<u8>>, String> {
    let entries = fs.read_dir(ino).map_err(|e| describe(path, &e))?;
    Ok(entries
        .into_iter()
        .map(|entry| entry.name)
        .filter(|name| name != b"." && name != b".." && (dot_names || !name.starts_with(b".")))
        .collect())
}

fn trim_trailing_slashes(path: &[u8]) -> &[u8] {
    let end = path.iter().rposition(|&b| b != b'/').map_or(0, |at| at + 1);
    &path[..end]
}

/// The last name of `path` (ignoring trailing slashes), for commands that put something
/// into an existing directory under its own name, as `mv` and `cp` do.
pub fn last_name(path: &[u8]) -> Option<&[u8]> {
    let trimmed = trim_trailing_slashes(path);
    let name = match trimmed.iter().rposition(|&b| b == b'/') {
        Some(at) => &trimmed[at + 1..],
        None => trimmed,
    };
    (!name.is_empty() && name != b"." && name != b"..").then_some(name)
}

/// One line for an engine error met at `path`: the path, then what is wrong with it. The
/// engine's own messages name the entry or inode it was working on; the user wants the path
/// they typed, so the errno-like kinds are reworded.
pub fn describe(path: ImagePath<'_>, error: &Error) -> String {
    let reason = match error {
        Error::NotFound(_) => "no such file or directory".to_string(),
        Error::NotADirectory(_) => "not a directory".to_string(),
        Error::Exists(_) => "file exists".to_string(),
        Error::NotEmpty(_) => "directory not empty".to_string(),
        Error::IsADirectory(_) => "is a directory".to_string(),
        Error::NameTooLong(_) => "file name too long".to_string(),
        Error::TooManyLinks(_) => "too many links".to_string(),
        Error::FileTooBig(_) => "file too large".to_string(),
        Error::SymlinkLoop(_) => "too many levels of symbolic links".to_string(),
        Error::WrongType { reason, .. } => (*reason).to_string(),
        other => other.to_string(),
    };
    format!("{}: {reason}", path.shown())
}

/// Whether an error is about the whole filesystem rather than one path (no space, a feature
/// the engine does not write, an I/O failure, a read-only image): going on with other paths
/// would only repeat it, so a command that works on many paths stops.
pub fn stops_everything(error: &Error) -> bool {
    matches!(
        error,
        Error::NoSpace(_) | Error::NotSupported(_) | Error::Io { .. } | Error::ReadOnly(_)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(path: &str) -> Option<(&[u8], &[u8])> {
        ImagePath(OsStr::new(path)).split()
    }

    #[test]
    fn split_takes_the_last_name_and_ignores_trailing_slashes() {
        assert_eq!(split("/a/b"), Some((&b"/a"[..], &b"b"[..])));
        assert_eq!(split("/a/b//"), Some((&b"/a"[..], &b"b"[..])));
        assert_eq!(split("/top"), Some((&b""[..], &b"top"[..])));
        assert_eq!(split("relative"), Some((&b""[..], &b"relative"[..])));
        assert_eq!(split("/"), None);
        assert_eq!(split(""), None);
        assert_eq!(split("/a/.."), None);
        assert_eq!(split("/a/."), None);
    }

    #[test]
    fn last_name_of_host_and_image_paths() {
        assert_eq!(last_name(b"/host/dir/file.txt"), Some(&b"file.txt"[..]));
        assert_eq!(last_name(b"dir/"), Some(&b"dir"[..]));
        assert_eq!(last_name(b"/"), None);
        assert_eq!(last_name(b".."), None);
    }
}

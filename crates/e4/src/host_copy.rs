//! Copying one host file into an inode of the image: its data (holes kept as holes), its
//! xattrs, and its attributes. Shared by `e4 put` (one file) and `e4 import` (a tree); a
//! reproducible import copies data in two steps instead, [`data_regions`] for the blocks
//! reserved in its ordered walk and [`fill_reserved`] on any thread.
//!
//! An import reads each entry of the host tree as a [`HostEntry`]: through its directory's
//! open descriptor and its name (`openat`, `readlinkat`, O_NOFOLLOW), never by a path from
//! the root, so a tree deeper than PATH_MAX imports.

use std::cell::RefCell;
use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::ops::Range;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use e4_fs::{Creator, DataReservation, Filesystem, SetAttributes, Timestamp, XattrSet};
use rustix::fs::{Mode, OFlags, SeekFrom};
use rustix::io::Errno;
use xattr::FileExt as _;

use crate::host_metadata::HostMetadata;

/// Bytes copied per read and per engine write: a contiguous file is one engine call per MiB,
/// and a buffer per thread stays cheap.
const CHUNK: usize = 1 << 20;

thread_local! {
    /// This worker's copy buffer, grown to the largest chunk met and reused, so small files
    /// cost no allocation.
    static COPY_BUFFER: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// Why copying into the image failed: the host side (the path is the host file's) or the
/// image side (an engine error, which the caller words with the image path and may treat as
/// stopping everything, as a full filesystem does).
#[derive(Debug)]
pub enum CopyError {
    Host(String),
    Image(e4_fs::Error),
}

impl From<e4_fs::Error> for CopyError {
    fn from(e: e4_fs::Error) -> Self {
        CopyError::Image(e)
    }
}

/// An entry of the host tree: `name` in the open directory `dir`, `shown` its path for
/// messages only.
pub struct HostEntry<'a> {
    pub dir: &'a File,
    pub name: &'a OsStr,
    pub shown: &'a Path,
}

impl HostEntry<'_> {
    /// The entry's own metadata (a symlink's, not its target's), read without opening it.
    pub fn metadata(&self) -> Result<HostMetadata, String> {
        HostMetadata::at(self.dir, self.name).map_err(|e| format!("{}: {e}", self.shown.display()))
    }

    /// The entry opened for reading (a symlink is refused, not followed).
    pub fn open_file(&self) -> Result<File, CopyError> {
        self.open(OFlags::RDONLY | OFlags::NOCTTY)
            .map_err(|e| CopyError::Host(format!("{}: cannot open: {e}", self.shown.display())))
    }

    /// The entry opened as a directory, which must still be host inode `key` (device,
    /// inode), as its metadata said (a directory renamed or replaced meanwhile is refused,
    /// not imported in its place).
    pub fn open_directory(&self, key: (u64, u64)) -> Result<File, String> {
        let shown = self.shown.display();
        let dir = self
            .open(OFlags::RDONLY | OFlags::DIRECTORY)
            .map_err(|e| format!("{shown}: {e}"))?;
        let now = HostMetadata::of(&dir).map_err(|e| format!("{shown}: {e}"))?;
        if now.key() != key {
            return Err(format!("{shown}: replaced during the import; skipped"));
        }
        Ok(dir)
    }

    /// A symlink's target.
    pub fn read_link(&self) -> Result<Vec<u8>, String> {
        rustix::fs::readlinkat(self.dir, self.name, Vec::new())
            .map(|target| target.into_bytes())
            .map_err(|e| format!("{}: {e}", self.shown.display()))
    }

    /// A short path naming the entry, for the xattr calls, which have no `*at` form: the
    /// directory's descriptor in /proc, then the name (as `e4 export` sets xattrs).
    pub fn proc_path(&self) -> PathBuf {
        let mut path = PathBuf::from(format!("/proc/self/fd/{}", self.dir.as_raw_fd()));
        path.push(self.name);
        path
    }

    fn open(&self, flags: OFlags) -> std::io::Result<File> {
        let flags = flags | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        Ok(File::from(rustix::fs::openat(
            self.dir,
            self.name,
            flags,
            Mode::empty(),
        )?))
    }
}

/// Owner and permission bits of a new inode for host file `meta`.
pub fn creator_of(meta: &HostMetadata) -> Creator {
    Creator {
        permissions: meta.permissions(),
        uid: meta.uid(),
        gid: meta.gid(),
        umask: 0,
    }
}

/// The host file's permissions and times, to apply last (after the data and the children,
/// whose writes change mtime). Permissions go again because a write may clear setuid.
pub fn final_attributes(meta: &HostMetadata) -> SetAttributes {
    let time = |(seconds, nanoseconds): (i64, u32)| Timestamp {
        seconds,
        // The kernel keeps tv_nsec in 0..1e9; a value out of range becomes 0.
        nanoseconds: if nanoseconds < 1_000_000_000 {
            nanoseconds
        } else {
            0
        },
    };
    SetAttributes {
        permissions: Some(meta.permissions()),
        // The owner again: an inode made in a set-group-ID directory of the image took that
        // directory's group (as in the kernel); a copy keeps the host's, as `cp -a` does.
        uid: Some(meta.uid()),
        gid: Some(meta.gid()),
        atime: Some(time(meta.atime())),
        mtime: Some(time(meta.mtime())),
        ..SetAttributes::default()
    }
}

/// Copies the data of host regular file `file` (at `host`, of `size` bytes) into the empty
/// regular file `ino`, reading only the host's data regions (SEEK_DATA/SEEK_HOLE), so a
/// sparse file stays sparse and the work follows the data, not the size. Returns the bytes
/// copied.
pub fn copy_data(
    fs: &Filesystem,
    ino: u32,
    file: &File,
    host: &Path,
    size: u64,
) -> Result<u64, CopyError> {
    let host_error =
        |what: &str, e: std::io::Error| CopyError::Host(format!("{}: {what}: {e}", host.display()));
    let mut copied = 0;
    let mut offset = 0;
    let mut grown = 0;
    COPY_BUFFER.with_borrow_mut(|buf| {
        while offset < size {
            let Some((start, end)) = next_data(file, offset, size)
                .map_err(|e| host_error("cannot find its data", e.into()))?
            else {
                break;
            };
            let mut at = start;
            while at < end {
                let want = ((end - at) as usize).min(CHUNK);
                if buf.len() < want {
                    buf.resize(want, 0);
                }
                let read = file
                    .read_at(&mut buf[..want], at)
                    .map_err(|e| host_error("cannot read", e))?;
                if read == 0 {
                    // The file shrank while being copied; what is left is a hole.
                    break;
                }
                write_all(fs, ino, at, &buf[..read])?;
                at += read as u64;
                copied += read as u64;
            }
            offset = end;
        }
        // A file whose size says 0 may still hold data (/proc and /sys files are made as
        // they are read), and one may grow while it is copied: read on from the stated size
        // to the end (one read that returns nothing for an ordinary file).
        if buf.len() < CHUNK {
            buf.resize(CHUNK, 0);
        }
        loop {
            let read = file
                .read_at(&mut buf[..CHUNK], size + grown)
                .map_err(|e| host_error("cannot read", e))?;
            if read == 0 {
                break;
            }
            write_all(fs, ino, size + grown, &buf[..read])?;
            grown += read as u64;
            copied += read as u64;
        }
        Ok::<_, CopyError>(())
    })?;
    // The size is the host's, not where the data ended (a trailing hole). Setting it also
    // gives back the blocks the engine reserved ahead for the file: it has no "close" that
    // would, as the kernel's last close discards preallocations, and a tree of files each
    // holding a reservation fills the filesystem early.
    fs.truncate(ino, size + grown)?;
    Ok(copied)
}

/// The byte ranges of host regular file `host` that hold data, for
/// [`Filesystem::reserve_data`]: the whole file when its allocated blocks cover its size
/// (known from `meta` without opening it), else the regions SEEK_DATA/SEEK_HOLE find.
pub fn data_regions(
    host: &HostEntry<'_>,
    meta: &HostMetadata,
) -> Result<Vec<Range<u64>>, CopyError> {
    let size = meta.size();
    if size == 0 {
        return Ok(Vec::new());
    }
    if meta.blocks() * 512 >= size {
        return Ok(std::iter::once(0..size).collect());
    }
    let file = host.open_file()?;
    let mut regions = Vec::new();
    let mut offset = 0;
    while let Some((start, end)) = next_data(&file, offset, size).map_err(|e| {
        CopyError::Host(format!(
            "{}: cannot find its data: {e}",
            host.shown.display()
        ))
    })? {
        regions.push(start..end);
        offset = end;
    }
    Ok(regions)
}

/// Copies host file `host` into the blocks `reservation` holds for it (see
/// [`data_regions`]). The size was fixed when the blocks were reserved: a host file that is
/// shorter now is an error (the blocks left read as zeros), and bytes it gained are not
/// copied. Returns the bytes copied.
pub fn fill_reserved(
    reservation: DataReservation<'_>,
    host: &HostEntry<'_>,
) -> Result<u64, CopyError> {
    // Opened first: a failure drops the reservation, which zeroes its blocks.
    let file = host.open_file()?;
    let host_error = |what: &str, e: std::io::Error| {
        CopyError::Host(format!("{}: {what}: {e}", host.shown.display()))
    };
    COPY_BUFFER.with_borrow_mut(|buf| {
        reservation.fill(buf, |offset, bytes| {
            file.read_exact_at(bytes, offset)
                .map_err(|e| match e.kind() {
                    std::io::ErrorKind::UnexpectedEof => CopyError::Host(format!(
                        "{}: it shrank while it was being copied",
                        host.shown.display()
                    )),
                    _ => host_error("cannot read", e),
                })
        })
    })
}

/// The next region of data at or after `offset`, as [start, end), or None when only a hole
/// is left. A host filesystem without SEEK_DATA support (EINVAL) is taken as all data.
fn next_data(file: &File, offset: u64, size: u64) -> Result<Option<(u64, u64)>, Errno> {
    let start = match rustix::fs::seek(file, SeekFrom::Data(offset)) {
        Ok(start) => start,
        Err(Errno::NXIO) => return Ok(None),
        Err(Errno::INVAL) => return Ok(Some((offset, size))),
        Err(e) => return Err(e),
    };
    if start >= size {
        return Ok(None);
    }
    let end = match rustix::fs::seek(file, SeekFrom::Hole(start)) {
        Ok(end) => end.min(size),
        Err(Errno::NXIO) => size,
        Err(e) => return Err(e),
    };
    Ok(Some((start, end)))
}

/// Writes all of `data` at `offset`: the engine writes fewer bytes only when the filesystem
/// fills part-way, and the next call then reports that as an error.
fn write_all(fs: &Filesystem, ino: u32, mut offset: u64, mut data: &[u8]) -> Result<(), CopyError> {
    while !data.is_empty() {
        let written = fs.write_at(ino, offset, data)?;
        offset += written as u64;
        data = &data[written..];
    }
    Ok(())
}

/// Where a host file's xattrs are read from.
#[derive(Clone, Copy)]
pub enum XattrSource<'a> {
    /// A path, not following a final symlink.
    Path(&'a Path),
    /// An open file or directory.
    File(&'a File),
}

/// A host file's xattrs as read: each name with its value, or why the value could not be
/// read (an attribute removed between the listing and the read is left out).
pub type HostXattrs = Vec<(OsString, Result<Vec<u8>, String>)>;

/// Reads every xattr of host file `host` (none where the host filesystem has no xattrs);
/// an error only when they cannot be listed. A reproducible import reads them on a
/// read-ahead thread ([`crate::read_ahead`]) and sets them in its ordered walk.
pub fn read_xattrs(host: XattrSource<'_>) -> Result<HostXattrs, String> {
    let listed = match host {
        XattrSource::Path(path) => xattr::list(path),
        XattrSource::File(file) => file.list_xattr(),
    };
    let names = match listed {
        Ok(names) => names,
        // A host filesystem without xattrs has none to copy.
        Err(e) if e.raw_os_error() == Some(Errno::OPNOTSUPP.raw_os_error()) => {
            return Ok(Vec::new())
        }
        Err(e) => return Err(format!("cannot list its xattrs: {e}")),
    };
    let mut read = Vec::new();
    for name in names {
        let value = match host {
            XattrSource::Path(path) => xattr::get(path, &name),
            XattrSource::File(file) => file.get_xattr(&name),
        };
        match value {
            // Removed between the listing and the read: nothing to copy.
            Ok(None) => {}
            Ok(Some(value)) => read.push((name, Ok(value))),
            Err(e) => read.push((name, Err(format!("cannot read it on the host: {e}")))),
        }
    }
    Ok(read)
}

/// Sets on inode `ino` the xattrs [`read_xattrs`] read. On failure, the message names the
/// attributes that could not be set and the first reason, so a file costs one line however
/// many attributes it has.
pub fn set_xattrs(fs: &Filesystem, ino: u32, xattrs: &HostXattrs) -> Result<(), String> {
    let mut failed = Vec::new();
    let mut first_reason = None;
    for (name, value) in xattrs {
        let result = match value {
            Ok(value) => fs
                .set_xattr(
                    ino,
                    std::os::unix::ffi::OsStrExt::as_bytes(name.as_os_str()),
                    value,
                    XattrSet::Either,
                )
                .map_err(|e| e.to_string()),
            Err(reason) => Err(reason.clone()),
        };
        if let Err(reason) = result {
            failed.push(name.to_string_lossy().into_owned());
            first_reason.get_or_insert(reason);
        }
    }
    match first_reason {
        None => Ok(()),
        Some(reason) => Err(format!(
            "cannot set xattr{} {}: {reason}",
            if failed.len() == 1 { "" } else { "s" },
            failed.join(", ")
        )),
    }
}

/// Copies every xattr of host file `host` to inode `ino` ([`read_xattrs`], then
/// [`set_xattrs`]).
pub fn copy_xattrs(fs: &Filesystem, ino: u32, host: XattrSource<'_>) -> Result<(), String> {
    set_xattrs(fs, ino, &read_xattrs(host)?)
}

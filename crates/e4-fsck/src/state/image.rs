//! The image, read with positional reads (`pread`) so any number of threads share one file
//! descriptor without a lock or a seek position.
//!
//! While it is checked the image holds a shared OFD lock (`fcntl(F_OFD_SETLK, F_RDLCK)`),
//! the lock every e4 writer holds exclusively (e4-fs's `io/image_lock.rs`): a check never
//! reads an image another e4 is half-way through writing, and says so instead. Other
//! readers share it. The kernel takes no such lock: a mounted image is checked as e2fsck
//! -n checks one, at the caller's word.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::fcntl::{fcntl, FcntlArg};
use nix::libc;

/// How long a lock held by someone else is tried again: a writer that has just closed the
/// image may still hold it for a moment through a child's copy of the descriptor.
const HANDOVER: Duration = Duration::from_millis(200);

/// A read-only image file or block device.
#[derive(Debug)]
#[allow(clippy::len_without_is_empty)] // an image is never asked whether it is empty
pub struct Image {
    file: File,
    len: u64,
}

impl Image {
    /// Opens `path` for reading.
    pub fn open(path: &Path) -> io::Result<Self> {
        let file = File::open(path)?;
        share_lock(&file)?;
        let len = device_len(&file)?;
        Ok(Image { file, len })
    }

    /// Size in bytes.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Reads `buf.len()` bytes at `offset`. Bytes past the end of the image read as an
    /// error, never as zeros, so a truncated image is reported rather than misread.
    pub fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        self.file.read_exact_at(buf, offset)
    }

    /// Reads `count` blocks of `block_size` bytes starting at block `block`.
    pub fn read_blocks(&self, block: u64, count: usize, block_size: u32) -> io::Result<Vec<u8>> {
        let mut buf = vec![0u8; count * block_size as usize];
        let offset = block
            .checked_mul(u64::from(block_size))
            .ok_or_else(|| io::Error::other(format!("block {block} is past any device")))?;
        self.read_at(offset, &mut buf)?;
        Ok(buf)
    }
}

/// A regular file's length, or a block device's size (seeking to its end).
fn device_len(file: &File) -> io::Result<u64> {
    use std::io::{Seek, SeekFrom};
    let meta = file.metadata()?;
    if meta.is_file() {
        return Ok(meta.len());
    }
    let mut handle = file.try_clone()?;
    handle.seek(SeekFrom::End(0))
}

/// Takes a shared lock on the whole of `file`, or fails with one line saying a writer has
/// it. Where locks are not supported (NFS without a lock manager) the check goes on.
fn share_lock(file: &File) -> io::Result<()> {
    let whole = libc::flock {
        // OK to cast: F_RDLCK and SEEK_SET are small constants.
        l_type: libc::F_RDLCK as libc::c_short,
        l_whence: libc::SEEK_SET as libc::c_short,
        l_start: 0,
        l_len: 0,
        l_pid: 0,
    };
    let give_up = Instant::now() + HANDOVER;
    loop {
        match fcntl(file.as_raw_fd(), FcntlArg::F_OFD_SETLK(&whole)) {
            Ok(_) | Err(Errno::ENOLCK | Errno::EINVAL) => return Ok(()),
            Err(Errno::EAGAIN | Errno::EACCES) if Instant::now() < give_up => {
                std::thread::sleep(HANDOVER / 20);
            }
            Err(Errno::EAGAIN | Errno::EACCES) => {
                return Err(io::Error::new(
                    io::ErrorKind::ResourceBusy,
                    "another program has the image open for writing (an e4 writer holds its lock); check it once that is done",
                ))
            }
            Err(e) => return Err(io::Error::from(e)),
        }
    }
}

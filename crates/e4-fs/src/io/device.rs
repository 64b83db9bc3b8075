//! Where the bytes live: an image file, a block device, or memory. Reads and writes are
//! positional (`pread`/`pwrite`), so any number of threads use a device at once without a
//! shared file offset or lock.

use std::fs::File;
use std::io::{self, Seek, SeekFrom};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::{Mutex, RwLock};

use super::hole_map::HoleMap;
use super::image_lock;
use crate::error::{Error, Result};

/// A byte-addressed store the filesystem lives on.
pub trait Device: Send + Sync {
    /// Fills `buf` from byte `offset`; reading past the end is an error.
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()>;
    /// Writes all of `buf` at byte `offset`; writing past the end is an error.
    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()>;
    /// Writes `bufs`, one after another, from byte `offset`: one write of their
    /// concatenation (a commit's adjacent blocks, without copying them together first
    /// where the device can gather, as a file can with `pwritev`).
    fn write_gathered_at(&self, bufs: &[&[u8]], offset: u64) -> io::Result<()> {
        self.write_all_at(&bufs.concat(), offset)
    }
    /// Makes every completed write durable.
    fn flush(&self) -> io::Result<()>;
    /// Size in bytes.
    fn size(&self) -> u64;
    /// Makes `len` bytes from `offset` read as zeros, durable at the next flush: blocks
    /// mapped to a file before their contents are written must never show what the disk
    /// held (another file's old data). This writes zeros; an image file punches a hole
    /// instead, which writes nothing.
    fn zero_range(&self, offset: u64, len: u64) -> io::Result<()> {
        write_zeros(offset, len, |zeros, at| self.write_all_at(zeros, at))
    }
}

/// Writes `len` zero bytes from `offset` through `write`, a megabyte at a time.
fn write_zeros(
    offset: u64,
    len: u64,
    write: impl Fn(&[u8], u64) -> io::Result<()>,
) -> io::Result<()> {
    const CHUNK: u64 = 1 << 20;
    let zeros = vec![0u8; len.min(CHUNK) as usize];
    let mut at = offset;
    while at < offset + len {
        let n = (offset + len - at).min(CHUNK) as usize;
        write(&zeros[..n], at)?;
        at += n as u64;
    }
    Ok(())
}

fn past_end(len: usize, offset: u64) -> io::Error {
    io::Error::new(
        io::ErrorKind::UnexpectedEof,
        format!("{len} bytes at {offset} reach past the end of the device"),
    )
}

/// An image file or block device.
pub struct FileDevice {
    file: File,
    size: u64,
    /// A regular file, whose ranges can be punched out (not a block device).
    regular: bool,
    /// What of the image file is known to read as zeros, where [`Self::tracking_holes`]
    /// asked for it: zeroing there is skipped.
    holes: Option<HoleMap>,
}

impl FileDevice {
    /// Opens `path`, for writing too when `writable`, holding the image's lock until the
    /// device is dropped: an image someone else writes, or the kernel uses, is refused with
    /// [`Error::InUse`] (see `io/image_lock.rs`). Works for regular files and block devices
    /// alike (the size of a block device is found by seeking to its end).
    pub fn open(path: &Path, writable: bool) -> Result<Self> {
        let mut file = image_lock::open_image(path, writable)?;
        let size = file
            .seek(SeekFrom::End(0))
            .map_err(|e| Error::io("cannot find the size of the image", e))?;
        let regular = file
            .metadata()
            .map_err(|e| Error::io("cannot read the image's metadata", e))?
            .is_file();
        Ok(FileDevice {
            file,
            size,
            regular,
            holes: None,
        })
    }

    /// The device, keeping track of which ranges of an image file read as zeros (its
    /// holes now, less what is written from now on), so that [`Device::zero_range`] skips
    /// them (`io/hole_map.rs`). A block device is returned as it is.
    pub fn tracking_holes(mut self) -> Result<Self> {
        if self.regular {
            let holes = HoleMap::of_file(&self.file, self.size)
                .map_err(|e| Error::io("cannot find the holes of the image", e))?;
            self.holes = Some(holes);
        }
        Ok(self)
    }

    /// `len` bytes from `offset` are about to be written.
    fn writing(&self, offset: u64, len: u64) {
        if let Some(holes) = &self.holes {
            holes.written(offset, len);
        }
    }
}

impl Device for FileDevice {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        FileExt::read_exact_at(&self.file, buf, offset)
    }

    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        if offset
            .checked_add(buf.len() as u64)
            .is_none_or(|end| end > self.size)
        {
            return Err(past_end(buf.len(), offset));
        }
        self.writing(offset, buf.len() as u64);
        FileExt::write_all_at(&self.file, buf, offset)
    }

    fn write_gathered_at(&self, bufs: &[&[u8]], offset: u64) -> io::Result<()> {
        let len: usize = bufs.iter().map(|b| b.len()).sum();
        if offset
            .checked_add(len as u64)
            .is_none_or(|end| end > self.size)
        {
            return Err(past_end(len, offset));
        }
        self.writing(offset, len as u64);
        let mut slices: Vec<io::IoSlice<'_>> = bufs.iter().map(|b| io::IoSlice::new(b)).collect();
        let mut rest: &mut [io::IoSlice<'_>] = &mut slices;
        let mut at = offset;
        while !rest.is_empty() {
            // At most IOV_MAX (1024) slices per call.
            let batch = rest.len().min(1024);
            let written = rustix::io::pwritev(&self.file, &rest[..batch], at)?;
            if written == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::WriteZero,
                    "pwritev wrote nothing",
                ));
            }
            at += written as u64;
            io::IoSlice::advance_slices(&mut rest, written);
        }
        Ok(())
    }

    fn flush(&self) -> io::Result<()> {
        self.file.sync_data()
    }

    fn size(&self) -> u64 {
        self.size
    }

    fn zero_range(&self, offset: u64, len: u64) -> io::Result<()> {
        if offset.checked_add(len).is_none_or(|end| end > self.size) {
            return Err(past_end(len as usize, offset));
        }
        if self
            .holes
            .as_ref()
            .is_some_and(|holes| holes.reads_as_zeros(offset, len))
        {
            return Ok(());
        }
        if self.regular {
            use rustix::fs::{fallocate, FallocateFlags};
            let punch = FallocateFlags::PUNCH_HOLE | FallocateFlags::KEEP_SIZE;
            match fallocate(&self.file, punch, offset, len) {
                Ok(()) => return Ok(()),
                // A host filesystem that cannot punch holes gets zeros written.
                Err(rustix::io::Errno::OPNOTSUPP) => {}
                Err(e) => return Err(e.into()),
            }
        }
        write_zeros(offset, len, |zeros, at| {
            FileExt::write_all_at(&self.file, zeros, at)
        })
    }
}

/// What a [`MemoryDevice`] shows the image to at every flush.
type FlushWatcher = Box<dyn Fn(&[u8]) + Send + Sync>;

/// A filesystem image held in memory (tests, fuzzing, images built in memory).
pub struct MemoryDevice {
    bytes: RwLock<Vec<u8>>,
    at_flush: Option<FlushWatcher>,
}

impl MemoryDevice {
    pub fn new(bytes: Vec<u8>) -> Self {
        MemoryDevice {
            bytes: RwLock::new(bytes),
            at_flush: None,
        }
    }

    /// A memory device that shows `at_flush` the whole image at every flush: what a crash
    /// right after that flush would leave (crash-consistency tests).
    pub fn watching_flushes(
        bytes: Vec<u8>,
        at_flush: impl Fn(&[u8]) + Send + Sync + 'static,
    ) -> Self {
        MemoryDevice {
            bytes: RwLock::new(bytes),
            at_flush: Some(Box::new(at_flush)),
        }
    }

    /// The image as it stands.
    pub fn bytes(&self) -> Vec<u8> {
        self.bytes.read().clone()
    }
}

pub(super) fn range(len: usize, offset: u64, size: usize) -> io::Result<std::ops::Range<usize>> {
    let start = usize::try_from(offset).map_err(|_| past_end(len, offset))?;
    match start.checked_add(len) {
        Some(end) if end <= size => Ok(start..end),
        _ => Err(past_end(len, offset)),
    }
}

impl Device for MemoryDevice {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        let bytes = self.bytes.read();
        buf.copy_from_slice(&bytes[range(buf.len(), offset, bytes.len())?]);
        Ok(())
    }

    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        let mut bytes = self.bytes.write();
        let r = range(buf.len(), offset, bytes.len())?;
        bytes[r].copy_from_slice(buf);
        Ok(())
    }

    fn flush(&self) -> io::Result<()> {
        if let Some(at_flush) = &self.at_flush {
            at_flush(&self.bytes.read());
        }
        Ok(())
    }

    fn size(&self) -> u64 {
        self.bytes.read().len() as u64
    }
}

/// Which operations a [`FaultyDevice`] fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Fault {
    /// None: a recording pass-through.
    #[default]
    Never,
    /// Every read from the `n`th on (counting from 0).
    ReadsFrom(u64),
    /// Every write from the `n`th on.
    WritesFrom(u64),
    /// The `n`th read only: a device that fails once.
    Read(u64),
    /// The `n`th read only returns its bytes with one bit flipped in every 8 bytes: damage a
    /// checksum or a structure check must catch.
    CorruptRead(u64),
    /// Every flush.
    Flushes,
}

/// A device for tests: passes through to another device, counts reads, writes and flushes,
/// records the byte ranges written, and fails operations as its [`Fault`] says (with EIO).
pub struct FaultyDevice<D> {
    inner: D,
    fault: Mutex<Fault>,
    reads: AtomicU64,
    writes: AtomicU64,
    flushes: AtomicU64,
    written: Mutex<Vec<(u64, usize)>>,
}

impl<D: Device> FaultyDevice<D> {
    pub fn new(inner: D, fault: Fault) -> Self {
        FaultyDevice {
            inner,
            fault: Mutex::new(fault),
            reads: AtomicU64::new(0),
            writes: AtomicU64::new(0),
            flushes: AtomicU64::new(0),
            written: Mutex::default(),
        }
    }

    /// Changes what fails from now on.
    pub fn set_fault(&self, fault: Fault) {
        *self.fault.lock() = fault;
    }

    /// (reads, writes, flushes) so far.
    pub fn counts(&self) -> (u64, u64, u64) {
        (
            self.reads.load(Ordering::Relaxed),
            self.writes.load(Ordering::Relaxed),
            self.flushes.load(Ordering::Relaxed),
        )
    }

    /// (offset, length) of every successful write, in order.
    pub fn writes(&self) -> Vec<(u64, usize)> {
        self.written.lock().clone()
    }

    pub fn inner(&self) -> &D {
        &self.inner
    }
}

fn injected(what: &str) -> io::Error {
    io::Error::other(format!("injected {what} error"))
}

impl<D: Device> Device for FaultyDevice<D> {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        let n = self.reads.fetch_add(1, Ordering::Relaxed);
        let fault = *self.fault.lock();
        match fault {
            Fault::ReadsFrom(from) if n >= from => return Err(injected("read")),
            Fault::Read(at) if n == at => return Err(injected("read")),
            _ => {}
        }
        self.inner.read_exact_at(buf, offset)?;
        if fault == Fault::CorruptRead(n) {
            for byte in buf.iter_mut().step_by(8) {
                *byte ^= 0x10;
            }
        }
        Ok(())
    }

    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        let n = self.writes.fetch_add(1, Ordering::Relaxed);
        if matches!(*self.fault.lock(), Fault::WritesFrom(from) if n >= from) {
            return Err(injected("write"));
        }
        self.inner.write_all_at(buf, offset)?;
        self.written.lock().push((offset, buf.len()));
        Ok(())
    }

    fn flush(&self) -> io::Result<()> {
        self.flushes.fetch_add(1, Ordering::Relaxed);
        if *self.fault.lock() == Fault::Flushes {
            return Err(injected("flush"));
        }
        self.inner.flush()
    }

    fn size(&self) -> u64 {
        self.inner.size()
    }
}

impl<D: Device + ?Sized> Device for std::sync::Arc<D> {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        (**self).read_exact_at(buf, offset)
    }
    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        (**self).write_all_at(buf, offset)
    }
    fn write_gathered_at(&self, bufs: &[&[u8]], offset: u64) -> io::Result<()> {
        (**self).write_gathered_at(bufs, offset)
    }
    fn flush(&self) -> io::Result<()> {
        (**self).flush()
    }
    fn size(&self) -> u64 {
        (**self).size()
    }
    // Forwarded, not the trait's default: the engine holds its device in an Arc, and the
    // default writes zeros where an image file would punch a hole (on `e4 mkfs -d`, the
    // reproducible walk wrote every file's size in zeros before its fill wrote the data).
    fn zero_range(&self, offset: u64, len: u64) -> io::Result<()> {
        (**self).zero_range(offset, len)
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::MetadataExt;

    use super::*;

    /// The bytes of `device`, read whole.
    fn contents(device: &dyn Device) -> Vec<u8> {
        let mut bytes = vec![0u8; device.size() as usize];
        device.read_exact_at(&mut bytes, 0).unwrap();
        bytes
    }

    /// A zeroed range reads as zeros and nothing around it changes, on an image file
    /// (a hole punched: the host's blocks given back) and on memory (zeros written).
    #[test]
    fn a_zeroed_range_reads_as_zeros_and_only_it() {
        const MIB: usize = 1 << 20;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("image");
        let filled = vec![0x5au8; 4 * MIB];
        std::fs::write(&path, &filled).unwrap();
        // Through an Arc, as the engine holds its device: the hole must still be punched.
        let file: std::sync::Arc<dyn Device> =
            std::sync::Arc::new(FileDevice::open(&path, true).unwrap());
        let memory = MemoryDevice::new(filled.clone());
        let (at, len) = (MIB + 4096, 2 * MIB);
        for device in [&file as &dyn Device, &memory] {
            device.zero_range(at as u64, len as u64).unwrap();
            device.flush().unwrap();
            let mut expected = filled.clone();
            expected[at..at + len].fill(0);
            assert!(contents(device) == expected);
        }
        // 512-byte units: a punched hole gives back what it covered.
        let allocated = std::fs::metadata(&path).unwrap().blocks() * 512;
        assert!(
            allocated <= (4 * MIB - len) as u64,
            "{allocated} bytes still allocated"
        );
        assert!(
            file.zero_range(3 * MIB as u64, 2 * MIB as u64).is_err(),
            "past the end"
        );
    }
}

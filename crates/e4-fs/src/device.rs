//! Where the bytes come from: an image file, a block device, or memory. Reads are positional
//! (`pread`), so any number of threads read at once without a shared file offset or lock.

use std::fs::File;
use std::io::{self, Seek, SeekFrom};
use std::os::unix::fs::FileExt;
use std::path::Path;

/// A byte-addressed store the filesystem lives on.
pub trait Device: Send + Sync {
    /// Fills `buf` from byte `offset`; reading past the end is an error.
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()>;
    /// Size in bytes.
    fn size(&self) -> u64;
}

/// An image file or block device.
pub struct FileDevice {
    file: File,
    size: u64,
}

impl FileDevice {
    /// Opens `path` for reading. Works for regular files and block devices alike (the size
    /// of a block device is found by seeking to its end).
    pub fn open(path: &Path) -> io::Result<Self> {
        let mut file = File::open(path)?;
        if file.metadata()?.is_dir() {
            return Err(io::Error::new(
                io::ErrorKind::IsADirectory,
                "is a directory",
            ));
        }
        let size = file.seek(SeekFrom::End(0))?;
        Ok(FileDevice { file, size })
    }
}

impl Device for FileDevice {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        FileExt::read_exact_at(&self.file, buf, offset)
    }

    fn size(&self) -> u64 {
        self.size
    }
}

/// A filesystem image held in memory (tests, fuzzing, images built in memory).
pub struct MemoryDevice {
    bytes: Vec<u8>,
}

impl MemoryDevice {
    pub fn new(bytes: Vec<u8>) -> Self {
        MemoryDevice { bytes }
    }
}

impl Device for MemoryDevice {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        let start = usize::try_from(offset).ok();
        let range = start.and_then(|s| Some(s..s.checked_add(buf.len())?));
        match range.and_then(|r| self.bytes.get(r)) {
            Some(src) => {
                buf.copy_from_slice(src);
                Ok(())
            }
            None => Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!(
                    "read of {} bytes at {offset} past the end of the image",
                    buf.len()
                ),
            )),
        }
    }

    fn size(&self) -> u64 {
        self.bytes.len() as u64
    }
}

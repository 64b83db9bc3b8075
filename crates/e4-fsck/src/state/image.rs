//! The image, read with positional reads (`pread`) so any number of threads share one file
//! descriptor without a lock or a seek position.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;

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

//! Copying a byte range from one regular file to another (`copy_file_range`). ext4 has no
//! copy of its own: the kernel copies the data through the page cache (`splice`), so the
//! copy is a read and a write here too, and every rule a write meets (immutable,
//! append-only, the maximum size, a full filesystem) it meets.

use e4_format::inode::FileType;

use crate::error::{Error, Result};
use crate::filesystem::Filesystem;

/// How much is read before it is written: a bound on the memory one copy holds.
const CHUNK: usize = 1 << 20;

impl Filesystem {
    /// Copies up to `len` bytes at `offset_in` of regular file `ino_in` to `offset_out` of
    /// regular file `ino_out`; returns the bytes copied: fewer than `len` when `ino_in`
    /// ends first (0 from its end on) or the filesystem fills up part-way. As
    /// `generic_copy_file_checks`: a directory is EISDIR, another kind EINVAL, and
    /// overlapping ranges of one file EINVAL.
    pub fn copy_range(
        &self,
        ino_in: u32,
        offset_in: u64,
        ino_out: u32,
        offset_out: u64,
        len: u64,
    ) -> Result<u64> {
        for ino in [ino_in, ino_out] {
            match self.caller_inode(ino)?.file_type() {
                Some(FileType::Regular) => {}
                Some(FileType::Directory) => {
                    return Err(Error::IsADirectory(format!("inode {ino}")))
                }
                _ => {
                    return Err(Error::Invalid(format!(
                        "copy_file_range on inode {ino}, not a regular file"
                    )))
                }
            }
        }
        let overlaps = ino_in == ino_out
            && offset_out < offset_in.saturating_add(len)
            && offset_in < offset_out.saturating_add(len);
        if overlaps {
            return Err(Error::Invalid(format!(
                "copy_file_range within inode {ino_in} between overlapping ranges"
            )));
        }
        let mut buf = vec![0; CHUNK.min(usize::try_from(len).unwrap_or(CHUNK))];
        let mut copied = 0;
        while copied < len {
            let want = buf
                .len()
                .min(usize::try_from(len - copied).unwrap_or(CHUNK));
            let read = self.read_at(ino_in, offset_in + copied, &mut buf[..want])?;
            if read == 0 {
                break;
            }
            let written = match self.write_at(ino_out, offset_out + copied, &buf[..read]) {
                Ok(n) => n,
                // Part of the copy done: report it, as a short write does.
                Err(_) if copied > 0 => break,
                Err(e) => return Err(e),
            };
            copied += written as u64;
            if written < read {
                break;
            }
        }
        Ok(copied)
    }
}

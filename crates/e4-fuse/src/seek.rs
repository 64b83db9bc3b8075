//! lseek's SEEK_DATA and SEEK_HOLE (the only two the kernel passes to a FUSE server; it
//! moves the offset itself for the others), answered from the file's block mapping as
//! the kernel's ext4 answers them (`ext4_llseek` through iomap).
//!
//! Data is a mapped, written block. An unwritten (fallocated) extent is a hole, as in
//! ext4 once its page cache holds nothing there: every write through this mount reaches
//! the engine before it is answered, so nothing of a file is in a cache the mapping does
//! not show. Inline data is data from 0 to the size. Offsets inside a block resolve to
//! themselves, and no answer passes the size, which ends the last data with a hole.

use e4_format::inode::flags;
use e4_fs::{Filesystem, Mapping};

/// What the caller seeks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Seek {
    Data,
    Hole,
}

/// Why there is no answer.
#[derive(Debug)]
pub(crate) enum SeekError {
    /// At or past the end of the file, or no data after the offset (ENXIO).
    Beyond,
    Engine(e4_fs::Error),
}

impl From<e4_fs::Error> for SeekError {
    fn from(e: e4_fs::Error) -> Self {
        SeekError::Engine(e)
    }
}

/// The first offset at or after `offset` in inode `ino` that is `wanted`.
pub(crate) fn seek(fs: &Filesystem, ino: u32, offset: u64, wanted: Seek) -> Result<u64, SeekError> {
    let inode = fs.read_inode(ino)?;
    let size = inode.size();
    if offset >= size {
        return Err(SeekError::Beyond);
    }
    if inode.has_flag(flags::INLINE_DATA) {
        return Ok(match wanted {
            Seek::Data => offset,
            Seek::Hole => size,
        });
    }
    let block_size = u64::from(fs.block_size());
    let end = size.div_ceil(block_size);
    let mut block = offset / block_size;
    while block < end {
        let (is_data, len) = match fs.map_block(&inode, block, end - block)? {
            Mapping::Hole { len } => (false, len),
            Mapping::Data { len, unwritten, .. } => (!unwritten, len),
        };
        if is_data == (wanted == Seek::Data) {
            return Ok(offset.max(block * block_size));
        }
        block = block.saturating_add(len.max(1));
    }
    match wanted {
        Seek::Data => Err(SeekError::Beyond),
        Seek::Hole => Ok(size),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use e4_fs::{Creator, FallocateMode, OpenOptions};

    const ROOT: u32 = 2;

    fn file(fs: &Filesystem, name: &str) -> u32 {
        let creator = Creator {
            permissions: 0o644,
            uid: 0,
            gid: 0,
            umask: 0,
        };
        fs.create(ROOT, name.as_bytes(), creator).unwrap()
    }

    #[test]
    fn data_and_holes_are_found_as_ext4_finds_them() {
        let image = e4_testkit::make_empty_image(&["-t", "ext4", "-b", "4096"], 16);
        let fs = Filesystem::open(&image.path, OpenOptions::writable()).unwrap();
        let bs = 4096u64;
        // Blocks: hole, data, hole, hole, data (half written); size 4.5 blocks.
        let f = file(&fs, "sparse");
        fs.write_at(f, bs, &[1; 4096]).unwrap();
        fs.write_at(f, 4 * bs, &[2; 2048]).unwrap();
        let at = |offset, wanted| seek(&fs, f, offset, wanted).map_err(|e| format!("{e:?}"));
        assert_eq!(at(0, Seek::Data), Ok(bs));
        assert_eq!(at(bs + 10, Seek::Data), Ok(bs + 10));
        assert_eq!(at(2 * bs, Seek::Data), Ok(4 * bs));
        assert_eq!(at(0, Seek::Hole), Ok(0));
        assert_eq!(at(bs, Seek::Hole), Ok(2 * bs));
        // The last data ends at the size, where a hole begins.
        assert_eq!(at(4 * bs, Seek::Hole), Ok(4 * bs + 2048));
        assert!(at(4 * bs + 2048, Seek::Data)
            .unwrap_err()
            .contains("Beyond"));
        assert!(at(1 << 30, Seek::Hole).unwrap_err().contains("Beyond"));

        // Fallocated (unwritten) blocks are holes; no data after them is ENXIO.
        let g = file(&fs, "fallocated");
        fs.fallocate(g, FallocateMode::Allocate, 0, 3 * bs).unwrap();
        let at = |offset, wanted| seek(&fs, g, offset, wanted).map_err(|e| format!("{e:?}"));
        assert!(at(0, Seek::Data).unwrap_err().contains("Beyond"));
        assert_eq!(at(5, Seek::Hole), Ok(5));
        fs.write_at(g, bs, b"x").unwrap();
        assert_eq!(at(0, Seek::Data), Ok(bs));
        assert_eq!(at(bs, Seek::Hole), Ok(2 * bs));
        fs.unmount().unwrap();
        e4_testkit::e2fsck_clean(&image.path).unwrap();
    }

    #[test]
    fn inline_data_is_data_up_to_the_size() {
        let image = e4_testkit::make_empty_image(
            &["-t", "ext4", "-b", "4096", "-O", "inline_data", "-I", "256"],
            16,
        );
        let fs = Filesystem::open(&image.path, OpenOptions::writable()).unwrap();
        let f = file(&fs, "small");
        fs.write_at(f, 0, b"inline").unwrap();
        assert!(fs.read_inode(f).unwrap().has_flag(flags::INLINE_DATA));
        assert_eq!(seek(&fs, f, 2, Seek::Data).unwrap(), 2);
        assert_eq!(seek(&fs, f, 2, Seek::Hole).unwrap(), 6);
        assert!(matches!(
            seek(&fs, f, 6, Seek::Data),
            Err(SeekError::Beyond)
        ));
        fs.unmount().unwrap();
    }
}

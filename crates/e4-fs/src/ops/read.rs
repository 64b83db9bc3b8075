//! Reading file contents: regular files through their block mapping (holes and unwritten
//! extents read as zeros), inline data, and symlink targets.

use e4_format::inline_data::{inline_file_content, SYSTEM_DATA};
use e4_format::inode::{flags, FileType, Inode};
use e4_format::{FormatError, Location, Problem, Structure};

use crate::error::Result;
use crate::filesystem::Filesystem;
use crate::map::run::Mapping;

/// Symlink targets longer than this are corrupt (`PATH_MAX`).
const MAX_SYMLINK_LEN: u64 = 4096;
/// The longest target a fast symlink holds in its 60-byte `i_block` (the kernel keeps a
/// terminating NUL there).
const FAST_SYMLINK_MAX_LEN: u64 = 59;

impl Filesystem {
    /// Reads up to `buf.len()` bytes at `offset` of file `ino`; returns how many were read
    /// (0 at the end).
    pub fn read_at(&self, ino: u32, offset: u64, buf: &mut [u8]) -> Result<usize> {
        self.read_caller_inode(ino, |inode| self.read_inode_at(inode, offset, buf))
    }

    /// Reads the whole of file `ino`, which must be at most `limit` bytes. A larger file is
    /// the caller's limit being too small (EFBIG), not a corrupt inode.
    pub fn read_file(&self, ino: u32, limit: u64) -> Result<Vec<u8>> {
        self.read_caller_inode(ino, |inode| {
            if inode.size() > limit {
                return Err(crate::error::Error::FileTooBig(format!(
                    "inode {ino} holds {} bytes, more than the {limit} asked for",
                    inode.size()
                )));
            }
            self.read_all(inode, limit)
        })
    }

    /// The target of symlink `ino`.
    pub fn read_link(&self, ino: u32) -> Result<Vec<u8>> {
        self.read_caller_inode(ino, |inode| self.read_link_of(inode))
    }

    pub(crate) fn read_inode_at(
        &self,
        inode: &Inode,
        offset: u64,
        buf: &mut [u8],
    ) -> Result<usize> {
        let size = inode.size();
        if offset >= size || buf.is_empty() {
            return Ok(0);
        }
        let want = buf
            .len()
            .min((size - offset).try_into().unwrap_or(usize::MAX));
        if inode.has_flag(flags::INLINE_DATA) {
            let content = self.inline_content(inode)?;
            // A size beyond the inline bytes (only in a corrupt inode) reads as zeros.
            let available = content.get(offset as usize..).unwrap_or_default();
            let got = want.min(available.len());
            buf[..got].copy_from_slice(&available[..got]);
            buf[got..want].fill(0);
            return Ok(want);
        }
        let bs = u64::from(self.block_size());
        let mut done = 0usize;
        while done < want {
            let pos = offset + done as u64;
            let (logical, within) = (pos / bs, pos % bs);
            let blocks_wanted = (within + (want - done) as u64).div_ceil(bs);
            let mapping = self.map_block(inode, logical, blocks_wanted)?;
            let run_blocks = match mapping {
                Mapping::Hole { len } | Mapping::Data { len, .. } => len,
            };
            let run_bytes = (run_blocks * bs - within).min((want - done) as u64) as usize;
            let dst = &mut buf[done..done + run_bytes];
            match mapping {
                Mapping::Data {
                    physical,
                    unwritten: false,
                    ..
                } => self.store.read_data(dst, physical * bs + within)?,
                _ => dst.fill(0),
            }
            done += run_bytes;
        }
        Ok(want)
    }

    /// Reads a whole file of at most `limit` bytes into memory.
    pub(crate) fn read_all(&self, inode: &Inode, limit: u64) -> Result<Vec<u8>> {
        let size = inode.size();
        if size > limit {
            return Err(FormatError::corrupt(
                Structure::Inode,
                Location::Inode(inode.ino),
                Problem::SizeTooLarge { size, limit },
            )
            .into());
        }
        let mut out = vec![0u8; size as usize];
        self.read_inode_at(inode, 0, &mut out)?;
        Ok(out)
    }

    /// The content of an inline-data inode: `i_block`, then `system.data`.
    pub(crate) fn inline_content(&self, inode: &Inode) -> Result<Vec<u8>> {
        let extra = self.raw_xattr(inode, SYSTEM_DATA)?.unwrap_or_default();
        Ok(inline_file_content(
            &inode.record.block,
            &extra,
            inode.size(),
        ))
    }

    /// The target of a symlink: in `i_block` for a fast symlink, in a data block otherwise.
    pub(crate) fn read_link_of(&self, inode: &Inode) -> Result<Vec<u8>> {
        let loc = Location::Inode(inode.ino);
        if inode.file_type() != Some(FileType::Symlink) {
            // The caller's mistake, not damage in the image (EINVAL, as readlink(2)).
            return Err(crate::error::Error::WrongType {
                path: format!("inode {}", inode.ino),
                reason: "not a symbolic link",
            });
        }
        let size = inode.size();
        if size > MAX_SYMLINK_LEN {
            let problem = Problem::SizeTooLarge {
                size,
                limit: MAX_SYMLINK_LEN,
            };
            return Err(FormatError::corrupt(Structure::Symlink, loc, problem).into());
        }
        if !inode.has_flag(flags::INLINE_DATA) && self.is_fast_symlink(inode) {
            if size > FAST_SYMLINK_MAX_LEN {
                let problem = Problem::SizeTooLarge {
                    size,
                    limit: FAST_SYMLINK_MAX_LEN,
                };
                return Err(FormatError::corrupt(Structure::Symlink, loc, problem).into());
            }
            return Ok(inode.record.block[..size as usize].to_vec());
        }
        self.read_all(inode, MAX_SYMLINK_LEN)
    }

    /// A fast symlink owns no blocks besides an xattr block (`ext4_inode_is_fast_symlink`).
    pub(crate) fn is_fast_symlink(&self, inode: &Inode) -> bool {
        if inode.has_flag(flags::EA_INODE) {
            return inode.size() < 60;
        }
        let bs = u64::from(self.block_size());
        let xattr_sectors = if inode.file_acl() != 0 {
            bs * u64::from(self.superblock().cluster_ratio()) / 512
        } else {
            0
        };
        let huge = self
            .superblock()
            .ro_compat()
            .contains(e4_format::features::RoCompatFeatures::HUGE_FILE);
        inode.blocks_512(huge, self.block_size()) == xattr_sectors
    }
}

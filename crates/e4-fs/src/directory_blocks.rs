//! A directory inode's blocks as the directory mechanism ([`crate::dir_write`]) sees them:
//! logical blocks mapped through the inode's extent tree, and growth by one block at a time
//! placed after the directory's last block.

use e4_alloc::AllocRequest;
use e4_format::inode::{flags, Inode};

use crate::dir_write::DirectoryBlocks;
use crate::error::{Error, Result};
use crate::file_map::Mapping;
use crate::file_mapping::FileMapping;
use crate::filesystem::Filesystem;
use crate::txn_io::TxnIo;

/// Directories larger than this need large_dir (`i_size_high` is only used with it).
const SMALL_DIR_LIMIT: u64 = 1 << 32;

/// A locked directory inode being edited.
pub(crate) struct InodeDirectoryBlocks<'a> {
    pub fs: &'a Filesystem,
    pub io: &'a TxnIo<'a>,
    pub inode: &'a mut Inode,
}

impl DirectoryBlocks for InodeDirectoryBlocks<'_> {
    fn block_count(&self) -> u64 {
        self.inode.size() / u64::from(self.fs.block_size())
    }

    fn physical(&self, logical: u64) -> Result<u64> {
        match self.fs.map_block(self.inode, logical, 1)? {
            Mapping::Data {
                physical,
                unwritten: false,
                ..
            } => Ok(physical),
            _ => Err(e4_format::FormatError::corrupt(
                e4_format::Structure::Directory,
                e4_format::Location::Inode(self.inode.ino),
                e4_format::Problem::Hole { logical },
            )
            .into()),
        }
    }

    fn append_block(&mut self) -> Result<u64> {
        let bs = u64::from(self.fs.block_size());
        let logical = self.block_count();
        let new_size = (logical + 1) * bs;
        let large_dir = self
            .fs
            .superblock()
            .incompat()
            .contains(e4_format::features::IncompatFeatures::LARGEDIR);
        if new_size >= SMALL_DIR_LIMIT && !large_dir {
            return Err(Error::FileTooBig(format!("directory {}", self.inode.ino)));
        }
        let goal = match logical.checked_sub(1) {
            Some(last) => self.physical(last)? + 1,
            None => {
                let group = (self.inode.ino - 1) / self.fs.geometry.inodes_per_group();
                self.fs.geometry.group_first_block(group)
            }
        };
        let got = self
            .io
            .writer
            .blocks
            .allocate(AllocRequest {
                goal: Some(goal),
                len: 1,
                min_len: 1,
                slot: self.io.slot,
                stream: u64::from(self.inode.ino),
                privileged: false,
            })
            .map_err(|_| Error::NoSpace("blocks".into()))?;
        let mut map = FileMapping::of(self.inode, self.io);
        let inserted = map.insert(logical, got.start, 1, false);
        let tree_blocks = map.node_blocks_change();
        if let Err(e) = inserted {
            self.io.writer.blocks.free(got, self.io.slot).ok();
            return Err(e);
        }
        self.fs.add_blocks(self.inode, 1 + tree_blocks)?;
        self.inode.set_size(new_size);
        Ok(got.start)
    }

    fn is_indexed(&self) -> bool {
        self.inode.has_flag(flags::INDEX)
    }

    fn set_indexed(&mut self, on: bool) {
        if on {
            self.inode.record.flags |= flags::INDEX;
        } else {
            self.inode.record.flags &= !flags::INDEX;
        }
    }
}

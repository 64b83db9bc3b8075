//! A directory inode's blocks as the directory mechanism ([`crate::dir::editor`]) sees them:
//! logical blocks mapped through the inode's extent tree, and growth by one block at a time
//! placed after the directory's last block.

use e4_alloc::{AllocRequest, ReservationWindow};
use e4_format::inode::{flags, Inode};

use crate::dir::editor::DirectoryBlocks;
use crate::error::{Error, Result};
use crate::filesystem::Filesystem;
use crate::map::file_mapping::Mapping;
use crate::space::placement::{directory_window_cap, first_window_goal, WINDOWLESS_BLOCKS};
use crate::txn::txn_io::TxnIo;

/// Directories larger than this need large_dir (`i_size_high` is only used with it).
const SMALL_DIR_LIMIT: u64 = 1 << 32;

/// A locked directory inode being edited.
pub(crate) struct InodeDirectoryBlocks<'a> {
    pub fs: &'a Filesystem,
    pub io: &'a TxnIo<'a>,
    pub inode: &'a mut Inode,
    /// The directory's reservation window, where its blocks past the first few come from:
    /// without one, directories that grow at the same time (each thread's own, under
    /// creates from every thread) take their blocks from the group by turns, and each ends
    /// up with one extent per block. `None` for a directory being made or leaving inline
    /// data, which is given its first block.
    pub window: Option<&'a mut ReservationWindow>,
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
        let group = (self.inode.ino - 1) / self.fs.geometry.inodes_per_group();
        let goal = match logical.checked_sub(1) {
            Some(_) if logical == WINDOWLESS_BLOCKS => first_window_goal(
                &self.fs.geometry,
                self.fs.superblock(),
                group,
                self.inode.ino,
            ),
            Some(last) => self.physical(last)? + 1,
            None => self.fs.geometry.group_first_block(group),
        };
        let blocks = &self.io.space.blocks;
        let stream = u64::from(self.inode.ino);
        let got = match self.window.as_deref_mut() {
            Some(window) if logical >= WINDOWLESS_BLOCKS => {
                window.raise_cap(directory_window_cap(logical));
                let privileged = self.io.space.may_use_root_reserve();
                blocks.allocate_append_as(window, Some(goal), 1, self.io.slot, stream, privileged)
            }
            _ => blocks.allocate(AllocRequest {
                goal: Some(goal),
                len: 1,
                min_len: 1,
                slot: self.io.slot,
                stream,
                reserve: self.io.space.reserve,
            }),
        }
        .map_err(Error::from_block_allocation)?;
        let inserted = self
            .fs
            .edit_mapping(self.io, self.inode, |map, data_blocks| {
                map.insert(logical, got.start, 1, false)?;
                *data_blocks += 1;
                Ok(())
            });
        if let Err(e) = inserted {
            let freed = self.io.space.blocks.free(got, self.io.slot);
            return Err(e.after_undo(freed.map_err(Error::from_block_allocation)));
        }
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

//! A directory inode's blocks as the directory mechanism ([`crate::dir::editor`]) sees them:
//! logical blocks mapped through the inode's extent tree, and growth by one block at a time
//! placed after the directory's last block.

use e4_alloc::{AllocRequest, ReservationWindow};
use e4_format::inode::{flags, Inode};

use crate::dir::editor::DirectoryBlocks;
use crate::error::{Error, Result};
use crate::filesystem::Filesystem;
use crate::map::file_mapping::FileMapping;
use crate::ops::mapping::Mapping;
use crate::txn::txn_io::TxnIo;

/// Directories larger than this need large_dir (`i_size_high` is only used with it).
const SMALL_DIR_LIMIT: u64 = 1 << 32;

/// Directories grow in reservation windows of at most this many blocks (256 KiB at 4 KiB)
/// once they are past their first blocks, or a quarter of their size when that is more
/// ([`directory_window_cap`]).
const DIRECTORY_WINDOW_CAP: u32 = 64;
/// A directory's blocks come one at a time from the group until it holds this many: most
/// directories never grow past a block or two, and a window would only hold space back.
const WINDOWLESS_BLOCKS: u64 = 2;

/// The largest window for a directory of `blocks` blocks: [`DIRECTORY_WINDOW_CAP`], or a
/// quarter of the directory when that is more. A directory that stops growing then holds
/// back at most a quarter of its size, and one that keeps growing beside others gets runs
/// that grow with it: two threads' directories of 2,800 blocks, made by turns, had 37
/// extents each with 64-block windows and have 17 (debugfs `ex`).
fn directory_window_cap(blocks: u64) -> u32 {
    u32::try_from(blocks / 4)
        .unwrap_or(u32::MAX)
        .max(DIRECTORY_WINDOW_CAP)
}

/// The window a directory's handle starts with.
pub(crate) fn directory_window() -> ReservationWindow {
    ReservationWindow::capped(DIRECTORY_WINDOW_CAP)
}

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

/// How many places directories that outgrow their first blocks are spread over: the
/// kernel's "colour" count (`ext4_inode_to_goal_block`).
const COLOURS: u64 = 16;

impl InodeDirectoryBlocks<'_> {
    /// Where a directory that outgrows its first blocks continues: one of [`COLOURS`]
    /// equal parts, chosen by inode number, of its inode's flex group past the first group
    /// (which holds the flex group's bitmaps and inode tables; the kernel sends regular
    /// files past it too), or of its own group without flex groups. Directories growing at
    /// the same time (each thread's own) would otherwise all continue from the same first
    /// free block and take their windows there by turns: two threads' 524-block
    /// directories had 5 to 11 extents each (a tree block, and one more block to read on
    /// every lookup) where one thread's had 2. The kernel colours a file's first block by
    /// process id (without delayed allocation); the inode number also spreads the
    /// directories one thread makes.
    fn first_window_goal(&self, group: u32) -> u64 {
        let geometry = &self.fs.geometry;
        let per_flex = self.fs.superblock().groups_per_flex().max(1);
        let flex_first = group - group % per_flex;
        let data_groups = per_flex.min(geometry.groups() - flex_first) - 1;
        let (start, groups) = match data_groups {
            0 => (group, 1),
            n => (flex_first + 1, n),
        };
        let first = geometry.group_first_block(start);
        let end = (first + u64::from(groups) * u64::from(geometry.blocks_per_group()))
            .min(self.fs.superblock().blocks_count());
        first + u64::from(self.inode.ino) % COLOURS * ((end - first) / COLOURS)
    }
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
            Some(_) if logical == WINDOWLESS_BLOCKS => self.first_window_goal(group),
            Some(last) => self.physical(last)? + 1,
            None => self.fs.geometry.group_first_block(group),
        };
        let blocks = &self.io.writer.blocks;
        let stream = u64::from(self.inode.ino);
        let got = match self.window.as_deref_mut() {
            Some(window) if logical >= WINDOWLESS_BLOCKS => {
                window.raise_cap(directory_window_cap(logical));
                let privileged = self.io.writer.may_use_root_reserve();
                blocks.allocate_append_as(window, Some(goal), 1, self.io.slot, stream, privileged)
            }
            _ => blocks.allocate(AllocRequest {
                goal: Some(goal),
                len: 1,
                min_len: 1,
                slot: self.io.slot,
                stream,
                reserve: self.io.writer.reserve,
            }),
        }
        .map_err(Error::from_block_allocation)?;
        let mut map = FileMapping::of(self.inode, self.io);
        let inserted = map.insert(logical, got.start, 1, false);
        let tree_blocks = map.node_blocks_change();
        if let Err(e) = inserted {
            let freed = self.io.writer.blocks.free(got, self.io.slot);
            return Err(e.after_undo(freed.map_err(Error::from_block_allocation)));
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

//! A directory inode's blocks as the directory mechanism ([`crate::dir::editor`]) sees them:
//! logical blocks mapped through the inode's extent tree, and growth by one block at a time
//! placed after the directory's last block.

use std::cell::RefCell;

use e4_alloc::{AllocRequest, ReservationWindow};
use e4_format::inode::{flags, Inode, I_BLOCK_SIZE};
use e4_format::{FormatError, Location, Problem, Structure};

use crate::dir::editor::DirectoryBlocks;
use crate::error::{Error, Result, Shortage};
use crate::filesystem::Filesystem;
use crate::io::credits::NEW_BLOCK;
use crate::io::meta_io::MetaIo;
use crate::map::file_mapping::{FileMapping, MappedRun};
use crate::map::run_cache::RunCache;
use crate::space::placement::{directory_window_cap, first_window_goal, WINDOWLESS_BLOCKS};
use crate::txn::txn_io::TxnIo;

/// Directories larger than this need large_dir (`i_size_high` is only used with it).
const SMALL_DIR_LIMIT: u64 = 1 << 32;

/// The run of written blocks from logical block `logical` of directory `ino`: a hole or an
/// unwritten extent in a directory is corruption.
fn written_run(mapping: &FileMapping<'_>, ino: u32, logical: u64) -> Result<MappedRun> {
    match mapping.lookup(logical)? {
        Some(run) if !run.unwritten => Ok(run),
        _ => Err(FormatError::corrupt(
            Structure::Directory,
            Location::Inode(ino),
            Problem::Hole { logical },
        )
        .into()),
    }
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
    /// The directory's recently used runs, where its state keeps them (`None` for one
    /// being made or leaving inline data).
    pub runs: Option<RefCell<&'a mut RunCache>>,
}

impl InodeDirectoryBlocks<'_> {
    fn walk(&self, logical: u64) -> Result<MappedRun> {
        let mut root = [0u8; I_BLOCK_SIZE];
        let mapping = FileMapping::reading(self.inode, &mut root, self.io);
        written_run(&mapping, self.inode.ino, logical)
    }
}

impl DirectoryBlocks for InodeDirectoryBlocks<'_> {
    fn block_count(&self) -> u64 {
        self.inode.size() / u64::from(self.fs.block_size())
    }

    fn physical(&self, logical: u64) -> Result<u64> {
        let Some(runs) = &self.runs else {
            return Ok(self.walk(logical)?.physical);
        };
        let mut runs = runs.borrow_mut();
        if let Some(physical) = runs.physical(self.inode, logical) {
            if cfg!(debug_assertions) {
                assert_eq!(
                    physical,
                    self.walk(logical)?.physical,
                    "directory {}: block {logical} cached at another place",
                    self.inode.ino
                );
            }
            return Ok(physical);
        }
        let run = self.walk(logical)?;
        runs.keep(self.inode, logical, run.len, run.physical);
        Ok(run.physical)
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
        // The new block and its group's bitmap and descriptor; its mapping declares its own.
        self.io.extend_credits(NEW_BLOCK);
        self.io.space.may_allocate(Shortage::Blocks)?;
        let got = match self.window.as_deref_mut() {
            Some(window) if logical >= WINDOWLESS_BLOCKS => {
                window.raise_cap(directory_window_cap(logical));
                let privileged = self.io.space.may_use_root_reserve();
                blocks.allocate_append_as(
                    window,
                    Some(goal),
                    1,
                    self.io.txn.slot,
                    stream,
                    privileged,
                )
            }
            _ => blocks.allocate(AllocRequest {
                goal: Some(goal),
                len: 1,
                min_len: 1,
                slot: self.io.txn.slot,
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
            return Err(self.io.unmapped(got, e));
        }
        self.io.took(got);
        self.inode.set_size(new_size);
        if let Some(runs) = &self.runs {
            runs.borrow_mut().clear();
        }
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

/// A directory inode's blocks for reading: the mapping looked up through a read-only
/// [`MetaIo`], nothing allocated. The read path lists and searches directories with the
/// editor over this.
pub(crate) struct ReadDirBlocks<'a> {
    mapping: FileMapping<'a>,
    ino: u32,
    blocks: u64,
    indexed: bool,
}

impl<'a> ReadDirBlocks<'a> {
    pub(crate) fn new(
        dir: &Inode,
        root: &'a mut [u8; I_BLOCK_SIZE],
        io: &'a dyn MetaIo,
        block_size: u32,
    ) -> Self {
        ReadDirBlocks {
            mapping: FileMapping::reading(dir, root, io),
            ino: dir.ino,
            blocks: dir.size() / u64::from(block_size),
            indexed: dir.has_flag(flags::INDEX),
        }
    }
}

impl DirectoryBlocks for ReadDirBlocks<'_> {
    fn block_count(&self) -> u64 {
        self.blocks
    }

    fn physical(&self, logical: u64) -> Result<u64> {
        Ok(written_run(&self.mapping, self.ino, logical)?.physical)
    }

    fn append_block(&mut self) -> Result<u64> {
        Err(Error::Internal(format!(
            "directory {}: a block appended through the read path",
            self.ino
        )))
    }

    fn is_indexed(&self) -> bool {
        self.indexed
    }

    /// Never called: every edit that indexes a directory appends a block first, which
    /// fails here.
    fn set_indexed(&mut self, _on: bool) {}
}

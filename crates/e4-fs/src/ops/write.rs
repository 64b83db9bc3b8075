//! Writing file contents (`write_at`), and what writing, truncating and fallocating share:
//! the writer, `i_blocks` kept in step with the mapping, the retry of a full filesystem.
//!
//! Data goes straight to its final place on the device while the operation runs; the blocks
//! come from the file's reservation window (or, for a small new file, from its thread's
//! packing window), so concurrent appenders each stay contiguous without delayed allocation.
//! A block that is newly allocated, or an unwritten block being written, is written whole,
//! zero-padded around the new bytes, so it never exposes what the disk held before.

use e4_format::features::{IncompatFeatures, RoCompatFeatures};
use e4_format::inode::{flags, FileType, Inode};

use e4_alloc::{Extent, ReservationWindow};

use crate::error::Shortage;
use crate::error::{Error, Result};
use crate::filesystem::Filesystem;
use crate::filesystem::Writer;
use crate::inode::cache::InodeState;
use crate::inode::user_flags;
use crate::io::credits::{GROUP, INODE, NEW_BLOCK};
use crate::io::meta_io::MetaIo;
use crate::map::extent_tree::Previous;
use crate::map::file_mapping::{FileMapping, RunOrHole};
use crate::txn::txn_io::TxnIo;

/// Most blocks one step of a write handles (bounds the zero-padding buffer).
const STEP_BLOCKS: u64 = 256;
/// Files that start with at most this many blocks are packed with other small files.
const SMALL_FILE_BLOCKS: u64 = 4;

impl Filesystem {
    /// The writer, or the reason this filesystem cannot be written.
    pub(crate) fn writer(&self) -> Result<&Writer> {
        self.writer
            .as_ref()
            .ok_or_else(|| Error::ReadOnly("the filesystem was opened read-only".into()))
    }

    /// Whether `inode`'s blocks are mapped by extents, or will be once it grows out of the
    /// inode: an inline file that moves out gets extents where the filesystem has them.
    pub(super) fn maps_by_extents(&self, inode: &Inode) -> bool {
        inode.has_flag(flags::EXTENTS)
            || (inode.has_flag(flags::INLINE_DATA)
                && self
                    .superblock()
                    .incompat()
                    .contains(IncompatFeatures::EXTENTS))
    }

    /// Largest size a file of `inode`'s mapping kind may have.
    pub(super) fn max_file_size(&self, inode: &Inode) -> u64 {
        let bs = u64::from(self.block_size());
        if self.maps_by_extents(inode) {
            // `ee_block` is 32 bits: the last logical block is 2^32 - 2 (EXT_MAX_BLOCKS - 1).
            ((1u64 << 32) - 1) * bs
        } else {
            let per = bs / 4;
            (12 + per + per * per + per * per * per).min(1 << 32) * bs
        }
    }

    /// Adds `blocks` filesystem blocks (negative: removes) to `i_blocks`.
    pub(crate) fn add_blocks(&self, inode: &mut Inode, blocks: i64) -> Result<()> {
        let huge = self
            .superblock()
            .ro_compat()
            .contains(RoCompatFeatures::HUGE_FILE);
        let per_block = i64::from(self.block_size() / 512);
        let now = inode.blocks_512(huge, self.block_size()) as i64;
        let next = (now + blocks * per_block).max(0) as u64;
        if !inode.set_blocks_512(next, huge) {
            return Err(Error::FileTooBig(format!("inode {}", inode.ino)));
        }
        Ok(())
    }

    /// Edits `inode`'s block mapping with `edit`, then keeps `i_blocks` in step: the data
    /// blocks `edit` counts in its second argument (mapped; negative: unmapped) and the tree
    /// blocks the mapping allocated or freed meanwhile. `i_blocks` is updated whether or not
    /// `edit` succeeded, so after a failure part-way it still counts what the mapping holds.
    pub(crate) fn edit_mapping<T>(
        &self,
        io: &dyn MetaIo,
        inode: &mut Inode,
        edit: impl FnOnce(&mut FileMapping<'_>, &mut i64) -> Result<T>,
    ) -> Result<T> {
        let mut data_blocks = 0i64;
        let (outcome, tree_blocks) = {
            let mut map = FileMapping::of(inode, io);
            let outcome = edit(&mut map, &mut data_blocks);
            (outcome, map.node_blocks_change())
        };
        let counted = self.add_blocks(inode, data_blocks + tree_blocks);
        outcome.and_then(|value| counted.map(|()| value))
    }

    /// A regular file that may be changed: linked, or an orphan someone still has open
    /// (an inode number kept past its last unlink without [`Filesystem::open_inode`] is
    /// stale: the number may already name another file).
    pub(super) fn require_regular(&self, state: &InodeState) -> Result<()> {
        let inode = &state.inode;
        if state.deleted || (inode.links_count() == 0 && state.open_count == 0) {
            return Err(Error::NotFound(format!("inode {} has no links", inode.ino)));
        }
        match inode.file_type() {
            Some(FileType::Regular) => {}
            Some(FileType::Directory) => {
                return Err(Error::IsADirectory(format!("inode {}", inode.ino)))
            }
            _ => {
                return Err(Error::Invalid(format!(
                    "inode {} is not a regular file",
                    inode.ino
                )))
            }
        }
        Ok(())
    }

    /// Writes `data` at byte `offset` of regular file `ino`, growing it as needed. Returns
    /// the bytes written: all of them, or fewer when the filesystem filled up part-way (then
    /// the file holds what was written). With nothing written, a full filesystem is an error.
    ///
    /// With a journal, a write whose blocks would take more log room than is free (a large
    /// write into fragmented free space touches a bitmap per group) goes in pieces, each a
    /// transaction of its own, as the kernel's writeback maps a large write in several
    /// handles: after a crash the file may hold a leading part of the write, never a
    /// block of anything else.
    pub fn write_at(&self, ino: u32, offset: u64, data: &[u8]) -> Result<usize> {
        self.release_windows_when_short(data.len() as u64)?;
        let mut done = 0;
        loop {
            let piece = self
                .retry_when_full(|| self.write_at_once(ino, offset + done as u64, &data[done..]));
            match piece {
                Ok(Written { bytes, more }) => {
                    done += bytes;
                    if !more || done == data.len() {
                        return Ok(done);
                    }
                }
                // What earlier pieces wrote stays written, as a short write.
                Err(_) if done > 0 => return Ok(done),
                Err(e) => return Err(e),
            }
        }
    }

    /// Near a full filesystem, gives back what reservation windows hold before a write of
    /// `bytes` that may need it. A write takes its blocks in one transaction (all or
    /// nothing at a crash), so one that ran out part-way stopped short while other files'
    /// windows held free blocks ([`Self::retry_when_full`] frees them only when nothing was
    /// written); the kernel discards its preallocations before it gives up too. Far from
    /// full this is one read of the free-block estimate, no lock.
    fn release_windows_when_short(&self, bytes: u64) -> Result<()> {
        let Some(writer) = &self.writer else {
            return Ok(());
        };
        let blocks = &writer.space.blocks;
        let needed = bytes.div_ceil(u64::from(self.block_size()));
        if blocks.free_blocks_estimate() >= needed || blocks.in_windows() == 0 {
            return Ok(());
        }
        self.release_all_windows()
    }

    /// Runs `op`; if it finds the filesystem full while blocks or inodes freed in the
    /// running transaction wait for a commit, commits (making them free) and runs it once
    /// more, so a "no space" is never reported while space is only waiting (the kernel's
    /// `ext4_should_retry_alloc`). `op` must change nothing when it fails with NoSpace, or
    /// (a fallocate that keeps what it allocated) leave what a second run goes on from.
    pub(crate) fn retry_when_full<T>(&self, op: impl Fn() -> Result<T>) -> Result<T> {
        match op() {
            Err(Error::NoSpace(Shortage::Blocks)) if self.writer.is_some() => {
                self.release_all_windows()?;
                self.sync()?;
                op()
            }
            Err(Error::NoSpace(Shortage::Inodes))
                if self
                    .writer
                    .as_ref()
                    .is_some_and(|w| w.txns.pending_inodes() > 0) =>
            {
                self.sync()?;
                op()
            }
            other => other,
        }
    }

    /// Gives back every reservation window and small-file packing window (the kernel's
    /// `ext4_mb_discard_preallocations` when it runs out): their blocks are free space that
    /// files which are not growing are holding.
    fn release_all_windows(&self) -> Result<()> {
        let writer = self.writer()?;
        // Giving back reservation windows changes no block.
        let txn = writer.begin(self, 0)?;
        for handle in self.inodes.all() {
            let mut state = handle.lock(&self.inodes);
            writer
                .space
                .blocks
                .release_window(&mut state.window, txn.slot);
        }
        writer.space.blocks.release_small_file_windows();
        Ok(())
    }

    /// One transaction of [`Self::write_at`]: all of `data`, or a leading part of it when
    /// the filesystem filled up part-way or (`more`) the log room ran out.
    fn write_at_once(&self, ino: u32, offset: u64, data: &[u8]) -> Result<Written> {
        let writer = self.writer()?;
        let written = {
            // The inode, and a block for inline bytes moving out of it; each run's
            // allocation and mapping edit declares its own.
            let mut txn = writer.begin(self, INODE + NEW_BLOCK)?;
            let handle = self.inode_handle(ino)?;
            let mut state = self.lock_for_change(&mut txn, &handle, None)?;
            self.require_regular(&state)?;
            user_flags::refuse_write(&state.inode, offset)?;
            offset
                .checked_add(data.len() as u64)
                .filter(|&end| end <= self.max_file_size(&state.inode))
                .ok_or_else(|| Error::FileTooBig(format!("inode {ino}")))?;
            if data.is_empty() {
                return Ok(Written::default());
            }
            let io = writer.io(self, &txn).tree_blocks_from_reserve();
            let end = offset + data.len() as u64;
            let new_len = end.max(state.inode.size());
            let written = io.all_or_nothing(&mut state, |state| {
                let inline = self.change_inline(&io, state, new_len, true, |content| {
                    // OK to cast: the content is `end` bytes or more, in memory.
                    content[offset as usize..end as usize].copy_from_slice(data)
                })?;
                if inline {
                    return Ok(Written {
                        bytes: data.len(),
                        more: false,
                    });
                }
                match self.write_blocks(&io, state, offset, data) {
                    Ok(bytes) => Ok(Written {
                        bytes,
                        more: bytes < data.len(),
                    }),
                    // The filesystem filled up part-way: the write stops short and keeps
                    // what it wrote, as the kernel's does. Any other failure, or nothing
                    // written, is undone whole.
                    Err(WriteStop {
                        written,
                        error: Error::NoSpace(_),
                    }) if written > 0 => Ok(Written {
                        bytes: written,
                        more: false,
                    }),
                    Err(WriteStop { error, .. }) => Err(error),
                }
            })?;
            let new_end = offset + written.bytes as u64;
            if new_end > state.inode.size() {
                self.set_file_size(&mut state.inode, new_end);
            }
            Self::touch(&mut state, true);
            self.inodes.mark_dirty(&handle);
            written
        };
        self.commit_if_needed()?;
        Ok(written)
    }

    /// Sets a file's size, turning on large_file once one reaches 2 GiB.
    pub(crate) fn set_file_size(&self, inode: &mut Inode, size: u64) {
        self.require_large_file(size);
        inode.set_size(size);
    }

    /// Sets the large_file feature once a file reaches 2 GiB.
    fn require_large_file(&self, size: u64) {
        if size >= 1 << 31 {
            if let Some(w) = &self.writer {
                w.space
                    .superblock
                    .add_ro_compat(RoCompatFeatures::LARGE_FILE);
            }
        }
    }

    /// The block writes of [`Filesystem::write_at`], stopping at the first failure with how
    /// much was written before it, or (returning the bytes written) before an allocation
    /// the log room cannot cover, once something is written. `i_blocks` is kept in step
    /// either way.
    fn write_blocks(
        &self,
        io: &TxnIo<'_>,
        state: &mut InodeState,
        offset: u64,
        data: &[u8],
    ) -> Result<usize, WriteStop> {
        let bs = u64::from(self.block_size());
        let InodeState { inode, window, .. } = state;
        let ino = inode.ino;
        let mut done = 0usize;
        self.edit_mapping(io, inode, |map, data_blocks| {
            let mut step = || -> Result<bool> {
                if done == data.len() {
                    return Ok(false);
                }
                let pos = offset + done as u64;
                let (logical, within) = (pos / bs, pos % bs);
                let rest = (data.len() - done) as u64;
                let span = (within + rest).div_ceil(bs).min(STEP_BLOCKS);
                let taken = match map.run_or_hole(logical, span.min(map.max_run()))? {
                    RunOrHole::Run(run) if !run.unwritten => {
                        let bytes = (run.len * bs - within).min(rest) as usize;
                        self.store
                            .write_data(&data[done..done + bytes], run.physical * bs + within)?;
                        bytes
                    }
                    RunOrHole::Run(run) => {
                        // Turning the run written edits the tree: with something written, a
                        // run the log room cannot cover ends this transaction's part.
                        if !io.txn.extend_or_stop(0, done > 0) {
                            return Ok(false);
                        }
                        let blocks = run.len.min(span);
                        let bytes = (blocks * bs - within).min(rest) as usize;
                        self.write_padded(run.physical, within, &data[done..done + bytes], blocks)?;
                        map.mark_written(logical, blocks)?;
                        bytes
                    }
                    RunOrHole::Hole { len, previous } => {
                        // The run's bitmap and descriptor: with something written, a run
                        // the log room cannot cover ends this transaction's part.
                        if !io.txn.extend_or_stop(GROUP, done > 0) {
                            return Ok(false);
                        }
                        let want = len as u32;
                        let file_end = (offset + data.len() as u64).div_ceil(bs);
                        let got = self.allocate_data_blocks(
                            io, map, window, ino, logical, want, file_end, previous,
                        )?;
                        let bytes = (u64::from(got.len) * bs - within).min(rest) as usize;
                        let placed = self
                            .write_padded(
                                got.start,
                                within,
                                &data[done..done + bytes],
                                u64::from(got.len),
                            )
                            .and_then(|()| {
                                map.insert(logical, got.start, u64::from(got.len), false)
                            });
                        if let Err(e) = placed {
                            // Never mapped: the blocks go straight back.
                            return Err(io.unmapped(got, e));
                        }
                        io.took_data(got);
                        *data_blocks += i64::from(got.len);
                        bytes
                    }
                };
                done += taken;
                Ok(true)
            };
            loop {
                match step() {
                    Ok(true) => {}
                    Ok(false) => break Ok(()),
                    Err(e) => break Err(e),
                }
            }
        })
        .map(|()| done)
        .map_err(|error| WriteStop {
            written: done,
            error,
        })
    }

    /// Allocates up to `want` blocks for the hole at logical block `logical` of file `ino`
    /// (whose data will end before logical block `file_end`), placed as a write places them:
    /// the blocks of a small new file (data from block 0 and at most [`SMALL_FILE_BLOCKS`])
    /// packed after the previous small file of this thread, other blocks after the file's
    /// previous block (a packed file that grows takes over the rest of the packing window
    /// it ends in), or else from its inode's group, through its reservation `window`.
    /// `previous` is what the caller's look at the hole saw of the block before it. The
    /// caller has declared the credits of one allocation (`GROUP`).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn allocate_data_blocks(
        &self,
        io: &TxnIo<'_>,
        map: &FileMapping<'_>,
        window: &mut ReservationWindow,
        ino: u32,
        logical: u64,
        want: u32,
        file_end: u64,
        previous: Previous,
    ) -> Result<Extent> {
        let small = logical == 0
            && map.hole_len(0, SMALL_FILE_BLOCKS + 1)? > SMALL_FILE_BLOCKS
            && file_end <= SMALL_FILE_BLOCKS;
        let blocks = &io.space.blocks;
        let privileged = io.space.may_use_root_reserve();
        let stream = u64::from(ino);
        io.space.may_allocate(Shortage::Blocks)?;
        if small {
            blocks.allocate_small_file_as(want, io.txn.slot, stream, privileged)
        } else {
            let after_previous = map.after_previous(logical, previous)?;
            // A small file growing on where a packing window goes on.
            if let Some(goal) = after_previous.filter(|_| logical <= SMALL_FILE_BLOCKS) {
                blocks.adopt_pack_window(window, goal, io.txn.slot);
            }
            let group = (ino - 1) / self.geometry.inodes_per_group();
            let goal = after_previous.unwrap_or_else(|| self.geometry.group_first_block(group));
            blocks.allocate_append_as(window, Some(goal), want, io.txn.slot, stream, privileged)
        }
        .map_err(Error::from_block_allocation)
    }

    /// Writes `data` at byte `within` of the `blocks` blocks from `physical`, zeroing every
    /// other byte of those blocks.
    fn write_padded(&self, physical: u64, within: u64, data: &[u8], blocks: u64) -> Result<()> {
        let bs = u64::from(self.block_size());
        let start = physical * bs;
        if within == 0 && data.len() as u64 == blocks * bs {
            return self.store.write_data(data, start);
        }
        let mut buf = vec![0u8; (blocks * bs) as usize];
        buf[within as usize..within as usize + data.len()].copy_from_slice(data);
        self.store.write_data(&buf, start)
    }

    /// Writes `bytes` from byte 0 of a new, empty inode (a slow symlink's target, an
    /// inline file's bytes leaving the inode) and sets the size to their length.
    pub(crate) fn write_first_blocks(
        &self,
        io: &TxnIo<'_>,
        state: &mut InodeState,
        bytes: &[u8],
    ) -> Result<()> {
        self.write_blocks(io, state, 0, bytes)
            .map_err(|stop| stop.error)?;
        state.inode.set_size(bytes.len() as u64);
        Ok(())
    }
}

/// What one transaction of a write wrote.
#[derive(Default)]
struct Written {
    bytes: usize,
    /// Stopped for want of log room, with more to write in the next transaction.
    more: bool,
}

/// Where a write stopped, and why.
struct WriteStop {
    written: usize,
    error: Error,
}

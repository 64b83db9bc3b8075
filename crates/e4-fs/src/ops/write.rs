//! Writing file contents: `write_at`, `truncate` and `fallocate`.
//!
//! Data goes straight to its final place on the device while the operation runs; the blocks
//! come from the file's reservation window (or, for a small new file, from its thread's
//! packing window), so concurrent appenders each stay contiguous without delayed allocation.
//! A block that is newly allocated, or an unwritten block being written, is written whole,
//! zero-padded around the new bytes, so it never exposes what the disk held before.

use e4_format::features::{IncompatFeatures, RoCompatFeatures};
use e4_format::inode::{flags, FileType, Inode};

use crate::error::Shortage;
use crate::error::{Error, Result};
use crate::filesystem::Filesystem;
use crate::filesystem::Writer;
use crate::inode::cache::InodeState;
use crate::map::extent_tree::ShiftDirection;
use crate::map::file_mapping::FileMapping;
use crate::txn::txn_io::TxnIo;

/// Most blocks one step of a write handles (bounds the zero-padding buffer).
const STEP_BLOCKS: u64 = 256;
/// Files that start with at most this many blocks are packed with other small files.
const SMALL_FILE_BLOCKS: u64 = 4;

/// How [`Filesystem::fallocate`] changes a range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FallocateMode {
    /// Allocate unwritten blocks and grow the size to cover the range.
    Allocate,
    /// Allocate unwritten blocks; leave the size.
    KeepSize,
    /// Free the blocks of the range (the size stays).
    PunchHole,
    /// Make the range read as zeros, allocated.
    ZeroRange,
    /// Remove the range: its blocks are freed, everything after it moves down by its
    /// length and the size shrinks by it. Offset and length are whole blocks, and the range
    /// ends before the end of the file.
    CollapseRange,
    /// Insert a hole of the range's length at its offset: everything from the offset on
    /// moves up by the length and the size grows by it. Offset and length are whole blocks,
    /// and the offset lies inside the file.
    InsertRange,
}

/// Refuses `fallocate` on anything but a regular file with the kernel's errors
/// (`vfs_fallocate`, before the filesystem is asked): ESPIPE for a FIFO, EISDIR for a
/// directory, ENODEV for a device, socket or symlink. (A block device's own fallocate
/// would reach the device, which e4 does not.)
fn require_fallocatable(inode: &Inode) -> Result<()> {
    let what = || format!("inode {}", inode.ino);
    match inode.file_type() {
        Some(FileType::Regular) => Ok(()),
        Some(FileType::Fifo) => Err(Error::IllegalSeek(what())),
        Some(FileType::Directory) => Err(Error::IsADirectory(what())),
        _ => Err(Error::NoDevice(what())),
    }
}

impl Filesystem {
    /// The writer, or the reason this filesystem cannot be written.
    pub(crate) fn writer(&self) -> Result<&Writer> {
        self.writer
            .as_ref()
            .ok_or_else(|| Error::ReadOnly("the filesystem was opened read-only".into()))
    }

    /// Whether `inode`'s blocks are mapped by extents, or will be once it grows out of the
    /// inode: an inline file that moves out gets extents where the filesystem has them.
    fn maps_by_extents(&self, inode: &Inode) -> bool {
        inode.has_flag(flags::EXTENTS)
            || (inode.has_flag(flags::INLINE_DATA)
                && self
                    .superblock()
                    .incompat()
                    .contains(IncompatFeatures::EXTENTS))
    }

    /// Largest size a file of `inode`'s mapping kind may have.
    fn max_file_size(&self, inode: &Inode) -> u64 {
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

    /// A regular file that may be changed: linked, or an orphan someone still has open
    /// (an inode number kept past its last unlink without [`Filesystem::open_inode`] is
    /// stale: the number may already name another file).
    fn require_regular(&self, state: &InodeState) -> Result<()> {
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
    pub fn write_at(&self, ino: u32, offset: u64, data: &[u8]) -> Result<usize> {
        self.retry_when_full(|| self.write_at_once(ino, offset, data))
    }

    /// Runs `op`; if it finds the filesystem full while blocks or inodes freed in the
    /// running transaction wait for a commit, commits (making them free) and runs it once
    /// more, so a "no space" is never reported while space is only waiting (the kernel's
    /// `ext4_should_retry_alloc`). `op` must change nothing when it fails with NoSpace.
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
        let txn = writer.begin()?;
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

    fn write_at_once(&self, ino: u32, offset: u64, data: &[u8]) -> Result<usize> {
        let writer = self.writer()?;
        let written = {
            let txn = writer.begin()?;
            let handle = self.inode_handle(ino)?;
            let mut state = handle.lock(&self.inodes);
            self.require_regular(&state)?;
            offset
                .checked_add(data.len() as u64)
                .filter(|&end| end <= self.max_file_size(&state.inode))
                .ok_or_else(|| Error::FileTooBig(format!("inode {ino}")))?;
            if data.is_empty() {
                return Ok(0);
            }
            let io = writer.io(self, &txn);
            let end = offset + data.len() as u64;
            let new_len = end.max(state.inode.size());
            let inline = self.change_inline(&io, &mut state, new_len, true, |content| {
                // OK to cast: the content is `end` bytes or more, in memory.
                content[offset as usize..end as usize].copy_from_slice(data)
            })?;
            let result = if inline {
                Ok(())
            } else {
                self.write_blocks(&io, &mut state, offset, data)
            };
            let written = match &result {
                Ok(()) => data.len(),
                Err(WriteStop { written, .. }) => *written,
            };
            if written > 0 {
                let new_end = offset + written as u64;
                if new_end > state.inode.size() {
                    self.set_file_size(&mut state.inode, new_end);
                }
                Self::touch(&mut state.inode, true);
            }
            self.inodes.mark_dirty(&handle);
            if let Err(WriteStop { written: 0, error }) = result {
                return Err(error);
            }
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
    /// much was written before it. `i_blocks` is kept in step either way.
    fn write_blocks(
        &self,
        io: &TxnIo<'_>,
        state: &mut InodeState,
        offset: u64,
        data: &[u8],
    ) -> Result<(), WriteStop> {
        let bs = u64::from(self.block_size());
        let InodeState { inode, window, .. } = state;
        let stream = u64::from(inode.ino);
        let group = (inode.ino - 1) / self.geometry.inodes_per_group();
        let group_start = self.geometry.group_first_block(group);
        let mut done = 0usize;
        let mut data_blocks = 0i64;
        let mut map = FileMapping::of(inode, io);
        let mut step = || -> Result<bool> {
            if done == data.len() {
                return Ok(false);
            }
            let pos = offset + done as u64;
            let (logical, within) = (pos / bs, pos % bs);
            let rest = (data.len() - done) as u64;
            let span = (within + rest).div_ceil(bs).min(STEP_BLOCKS);
            let taken = match map.lookup(logical)? {
                Some(run) if !run.unwritten => {
                    let bytes = (run.len * bs - within).min(rest) as usize;
                    self.store
                        .write_data(&data[done..done + bytes], run.physical * bs + within)?;
                    bytes
                }
                Some(run) => {
                    let blocks = run.len.min(span);
                    let bytes = (blocks * bs - within).min(rest) as usize;
                    self.write_padded(run.physical, within, &data[done..done + bytes], blocks)?;
                    map.mark_written(logical, blocks)?;
                    bytes
                }
                None => {
                    let want = map.hole_len(logical, span.min(map.max_run()))? as u32;
                    let after_previous = match logical.checked_sub(1) {
                        Some(prev) => map.lookup(prev)?.map(|r| r.physical + 1),
                        None => None,
                    };
                    let small = logical == 0
                        && map.hole_len(0, SMALL_FILE_BLOCKS + 1)? > SMALL_FILE_BLOCKS
                        && (offset + data.len() as u64).div_ceil(bs) <= SMALL_FILE_BLOCKS;
                    let blocks = &io.space.blocks;
                    let privileged = io.space.may_use_root_reserve();
                    let got = if small {
                        blocks.allocate_small_file_as(want, io.slot, stream, privileged)
                    } else {
                        let goal = after_previous.unwrap_or(group_start);
                        blocks.allocate_append_as(
                            window,
                            Some(goal),
                            want,
                            io.slot,
                            stream,
                            privileged,
                        )
                    }
                    .map_err(Error::from_block_allocation)?;
                    let bytes = (u64::from(got.len) * bs - within).min(rest) as usize;
                    let placed = self
                        .write_padded(
                            got.start,
                            within,
                            &data[done..done + bytes],
                            u64::from(got.len),
                        )
                        .and_then(|()| map.insert(logical, got.start, u64::from(got.len), false));
                    if let Err(e) = placed {
                        // Never mapped: the blocks go straight back.
                        let freed = blocks.free(got, io.slot);
                        return Err(e.after_undo(freed.map_err(Error::from_block_allocation)));
                    }
                    data_blocks += i64::from(got.len);
                    bytes
                }
            };
            done += taken;
            Ok(true)
        };
        let outcome = loop {
            match step() {
                Ok(true) => {}
                Ok(false) => break Ok(()),
                Err(e) => break Err(e),
            }
        };
        let tree_blocks = map.node_blocks_change();
        let counted = self.add_blocks(inode, data_blocks + tree_blocks);
        outcome.and(counted).map_err(|error| WriteStop {
            written: done,
            error,
        })
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

    /// Sets regular file `ino`'s size: shrinking frees the blocks past the new end (they
    /// become reusable at the next commit) and zeroes the rest of the last block on disk, so
    /// growing it again reads zeros; growing leaves a hole.
    pub fn truncate(&self, ino: u32, size: u64) -> Result<()> {
        let writer = self.writer()?;
        {
            let txn = writer.begin()?;
            let handle = self.inode_handle(ino)?;
            let mut state = handle.lock(&self.inodes);
            self.require_regular(&state)?;
            if size > self.max_file_size(&state.inode) {
                return Err(Error::FileTooBig(format!("inode {ino}")));
            }
            let io = writer.io(self, &txn).removing_space();
            let inline = self.change_inline(&io, &mut state, size, false, |_| {})?;
            if !inline && size < state.inode.size() {
                self.free_range(
                    &io,
                    &mut state,
                    size.div_ceil(u64::from(self.block_size())),
                    u64::MAX,
                )?;
                self.zero_tail(&io, &mut state, size)?;
            }
            writer
                .space
                .blocks
                .release_window(&mut state.window, txn.slot);
            self.set_file_size(&mut state.inode, size);
            Self::touch(&mut state.inode, true);
            self.inodes.mark_dirty(&handle);
        }
        self.commit_if_needed()
    }

    /// Unmaps logical blocks `first..first+len` (clamped to what extents can map), freeing
    /// their data blocks in the running transaction and keeping `i_blocks` in step.
    pub(crate) fn free_range(
        &self,
        io: &TxnIo<'_>,
        state: &mut InodeState,
        first: u64,
        len: u64,
    ) -> Result<()> {
        let mut map = FileMapping::of(&mut state.inode, io);
        let runs = map.remove(first, len)?;
        let tree_blocks = map.node_blocks_change();
        let mut freed = 0i64;
        for (start, n) in runs {
            io.free_blocks(start, n)?;
            freed += n as i64;
        }
        self.add_blocks(&mut state.inode, tree_blocks - freed)
    }

    /// Zeroes the bytes of the block holding byte `size` from `size` on, if that block is
    /// written (a later extension must read zeros there).
    fn zero_tail(&self, io: &TxnIo<'_>, state: &mut InodeState, size: u64) -> Result<()> {
        let bs = u64::from(self.block_size());
        let within = size % bs;
        if within == 0 {
            return Ok(());
        }
        let map = FileMapping::of(&mut state.inode, io);
        if let Some(run) = map.lookup(size / bs)? {
            if !run.unwritten {
                self.store.write_data(
                    &vec![0u8; (bs - within) as usize],
                    run.physical * bs + within,
                )?;
            }
        }
        Ok(())
    }
}

impl Filesystem {
    /// Changes the allocation of `len` bytes from `offset` of regular file `ino` (Linux's
    /// `fallocate`). Allocated ranges get unwritten extents, which read as zeros until
    /// written; only extent-mapped files have them (block-mapped files: NotSupported, as
    /// the kernel's EOPNOTSUPP). Collapsing and inserting ranges follow
    /// `ext4_collapse_range` and `ext4_insert_range` (see [`FallocateMode`]); an inline file
    /// first moves out of its inode, as the kernel converts inline data for every mode.
    /// Other kinds of file get the kernel's errors: [`Error::IsADirectory`] for a directory,
    /// [`Error::IllegalSeek`] for a FIFO, [`Error::NoDevice`] for the rest.
    pub fn fallocate(&self, ino: u32, mode: FallocateMode, offset: u64, len: u64) -> Result<()> {
        self.retry_when_full(|| self.fallocate_once(ino, mode, offset, len))
    }

    fn fallocate_once(&self, ino: u32, mode: FallocateMode, offset: u64, len: u64) -> Result<()> {
        let writer = self.writer()?;
        if len == 0 {
            return Err(Error::Invalid("fallocate of 0 bytes".into()));
        }
        {
            let txn = writer.begin()?;
            let handle = self.inode_handle(ino)?;
            let mut state = handle.lock(&self.inodes);
            require_fallocatable(&state.inode)?;
            self.require_regular(&state)?;
            let end = offset
                .checked_add(len)
                .filter(|&end| end <= self.max_file_size(&state.inode))
                .ok_or_else(|| Error::FileTooBig(format!("inode {ino}")))?;
            // Checked before an inline file moves out, so a refused range changes nothing.
            self.check_range_shift(&state.inode, mode, offset, len)?;
            let io = writer.io(self, &txn);
            // The modes the kernel runs with EXT4_GET_BLOCKS_METADATA_NOFAIL: an extent
            // split while removing or shifting space may take its tree block from the
            // metadata reserve.
            let io = match mode {
                FallocateMode::PunchHole
                | FallocateMode::CollapseRange
                | FallocateMode::InsertRange => io.removing_space(),
                _ => io,
            };
            if !self.fallocate_inline(&io, &mut state, mode, offset, end)? {
                self.fallocate_blocks(&io, &mut state, mode, offset, end)?;
            }
            let changes_data = !matches!(mode, FallocateMode::Allocate | FallocateMode::KeepSize);
            Self::touch(&mut state.inode, changes_data);
            drop(state);
            self.inodes.mark_dirty(&handle);
        }
        self.commit_if_needed()
    }

    /// [`Filesystem::fallocate`] on an inline file whose content still fits the inode:
    /// allocating only grows the size (inline bytes are always allocated), punching and
    /// zeroing write zeros. False when the file is not (or no longer) inline.
    fn fallocate_inline(
        &self,
        io: &TxnIo<'_>,
        state: &mut InodeState,
        mode: FallocateMode,
        offset: u64,
        end: u64,
    ) -> Result<bool> {
        let size = state.inode.size();
        let new_len = match mode {
            FallocateMode::Allocate | FallocateMode::ZeroRange => size.max(end),
            FallocateMode::KeepSize | FallocateMode::PunchHole => size,
            // Moving blocks needs blocks: no length fits inline, so the file moves out.
            FallocateMode::CollapseRange | FallocateMode::InsertRange => u64::MAX,
        };
        let zeroes = matches!(mode, FallocateMode::PunchHole | FallocateMode::ZeroRange);
        let inline = self.change_inline(io, state, new_len, false, |content| {
            if zeroes {
                let len = content.len() as u64;
                // OK to cast: both bounds are within the in-memory content.
                content[offset.min(len) as usize..end.min(len) as usize].fill(0);
            }
        })?;
        if inline {
            self.set_file_size(&mut state.inode, new_len);
        }
        Ok(inline)
    }

    /// [`Filesystem::fallocate`] on a file mapped by extents.
    fn fallocate_blocks(
        &self,
        io: &TxnIo<'_>,
        state: &mut InodeState,
        mode: FallocateMode,
        offset: u64,
        end: u64,
    ) -> Result<()> {
        let ino = state.inode.ino;
        if !state.inode.has_flag(flags::EXTENTS) {
            return Err(Error::NotSupported(format!(
                "fallocate on block-mapped inode {ino} (no unwritten extents)"
            )));
        }
        let bs = u64::from(self.block_size());
        let (first_full, end_full) = (offset.div_ceil(bs), end / bs);
        match mode {
            FallocateMode::Allocate | FallocateMode::KeepSize => {
                self.allocate_unwritten(io, state, offset / bs, end.div_ceil(bs))?;
                if mode == FallocateMode::Allocate && end > state.inode.size() {
                    self.set_file_size(&mut state.inode, end);
                }
            }
            FallocateMode::PunchHole | FallocateMode::ZeroRange => {
                self.zero_partial(io, state, offset, end)?;
                if end_full > first_full {
                    self.free_range(io, state, first_full, end_full - first_full)?;
                }
                if mode == FallocateMode::ZeroRange {
                    self.allocate_unwritten(io, state, offset / bs, end.div_ceil(bs))?;
                    if end > state.inode.size() {
                        self.set_file_size(&mut state.inode, end);
                    }
                }
            }
            FallocateMode::CollapseRange => {
                let (first, count) = (offset / bs, (end - offset) / bs);
                self.free_range(io, state, first, count)?;
                self.shift_blocks(io, state, first + count, count, ShiftDirection::Down)?;
                let size = state.inode.size() - (end - offset);
                self.set_file_size(&mut state.inode, size);
            }
            FallocateMode::InsertRange => {
                let (first, count) = (offset / bs, (end - offset) / bs);
                self.shift_blocks(io, state, first, count, ShiftDirection::Up)?;
                let size = state.inode.size() + (end - offset);
                self.set_file_size(&mut state.inode, size);
            }
        }
        Ok(())
    }

    /// The checks `ext4_collapse_range` and `ext4_insert_range` make, in their order, for a
    /// collapse or insert of `len` bytes at `offset` (other modes pass): extent-mapped file
    /// (else NotSupported, EOPNOTSUPP), whole blocks (else Invalid, EINVAL), then for a
    /// collapse a range that ends before the end of the file (EINVAL), for an insert a size
    /// that stays within the maximum (FileTooBig, EFBIG) and an offset inside the file
    /// (EINVAL).
    fn check_range_shift(
        &self,
        inode: &Inode,
        mode: FallocateMode,
        offset: u64,
        len: u64,
    ) -> Result<()> {
        let ino = inode.ino;
        let collapse = match mode {
            FallocateMode::CollapseRange => true,
            FallocateMode::InsertRange => false,
            _ => return Ok(()),
        };
        if !self.maps_by_extents(inode) {
            return Err(Error::NotSupported(format!(
                "moving the blocks of block-mapped inode {ino}"
            )));
        }
        let bs = u64::from(self.block_size());
        if offset % bs != 0 || len % bs != 0 {
            return Err(Error::Invalid(format!(
                "inode {ino}: offset {offset} and length {len} must be whole {bs}-byte blocks"
            )));
        }
        let size = inode.size();
        if collapse {
            // `offset + len` cannot overflow: fallocate checked it against the maximum size.
            if offset + len >= size {
                return Err(Error::Invalid(format!(
                    "inode {ino}: collapsing {offset}..{} reaches the end of the file                      ({size} bytes); truncate instead",
                    offset + len
                )));
            }
        } else {
            if len > self.max_file_size(inode).saturating_sub(size) {
                return Err(Error::FileTooBig(format!(
                    "inode {ino}: inserting {len} bytes into {size}"
                )));
            }
            if offset >= size {
                return Err(Error::Invalid(format!(
                    "inode {ino}: inserting at byte {offset}, at or past the end of the file                      ({size} bytes)"
                )));
            }
        }
        Ok(())
    }

    /// Moves every mapped block of `state` at or after logical block `from` by `count`
    /// blocks, keeping `i_blocks` in step with the tree's nodes. The file's reservation window
    /// is given back, as the kernel discards preallocations: it was placed after blocks that
    /// have moved.
    fn shift_blocks(
        &self,
        io: &TxnIo<'_>,
        state: &mut InodeState,
        from: u64,
        count: u64,
        direction: ShiftDirection,
    ) -> Result<()> {
        io.space.blocks.release_window(&mut state.window, io.slot);
        let mut map = FileMapping::of(&mut state.inode, io);
        let shifted = map.shift(from, count, direction);
        let tree_blocks = map.node_blocks_change();
        let counted = self.add_blocks(&mut state.inode, tree_blocks);
        shifted.and(counted)
    }

    /// Maps every hole in logical blocks `first..end` to newly allocated unwritten blocks.
    fn allocate_unwritten(
        &self,
        io: &TxnIo<'_>,
        state: &mut InodeState,
        first: u64,
        end: u64,
    ) -> Result<()> {
        let InodeState { inode, window, .. } = state;
        let stream = u64::from(inode.ino);
        let mut map = FileMapping::of(inode, io);
        let mut data_blocks = 0i64;
        let mut logical = first;
        let outcome = (|| -> Result<()> {
            while logical < end {
                if let Some(run) = map.lookup(logical)? {
                    logical += run.len;
                    continue;
                }
                // Unwritten extents hold at most 32,767 blocks.
                let want = map.hole_len(logical, (end - logical).min(32767))? as u32;
                let goal = match logical.checked_sub(1) {
                    Some(prev) => map.lookup(prev)?.map(|r| r.physical + 1),
                    None => None,
                };
                let got = io
                    .space
                    .blocks
                    .allocate_append_as(
                        window,
                        goal,
                        want,
                        io.slot,
                        stream,
                        io.space.may_use_root_reserve(),
                    )
                    .map_err(Error::from_block_allocation)?;
                if let Err(e) = map.insert(logical, got.start, u64::from(got.len), true) {
                    let freed = io.space.blocks.free(got, io.slot);
                    return Err(e.after_undo(freed.map_err(Error::from_block_allocation)));
                }
                data_blocks += i64::from(got.len);
                logical += u64::from(got.len);
            }
            Ok(())
        })();
        let tree_blocks = map.node_blocks_change();
        let counted = self.add_blocks(inode, data_blocks + tree_blocks);
        outcome.and(counted)
    }

    /// Writes zeros over the bytes of `offset..end` that lie in partly covered blocks, where
    /// those blocks are written (holes and unwritten blocks already read as zeros).
    fn zero_partial(
        &self,
        io: &TxnIo<'_>,
        state: &mut InodeState,
        offset: u64,
        end: u64,
    ) -> Result<()> {
        let bs = u64::from(self.block_size());
        let map = FileMapping::of(&mut state.inode, io);
        let mut edges = vec![(offset, end.min((offset / bs + 1) * bs))];
        if end % bs != 0 && end / bs != offset / bs {
            edges.push((end / bs * bs, end));
        }
        for (from, to) in edges {
            if from % bs == 0 && to - from == bs {
                continue; // a whole block: freed or left to the caller
            }
            if let Some(run) = map.lookup(from / bs)? {
                if !run.unwritten {
                    self.store.write_data(
                        &vec![0u8; (to - from) as usize],
                        run.physical * bs + from % bs,
                    )?;
                }
            }
        }
        Ok(())
    }
}

/// Where a write stopped, and why.
struct WriteStop {
    written: usize,
    error: Error,
}

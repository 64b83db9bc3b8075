//! `fallocate`: allocating (as unwritten extents), punching holes, zeroing, and collapsing or
//! inserting ranges, with the kernel's modes and errors.

use e4_format::inode::{flags, FileType, Inode, I_BLOCK_SIZE};

use crate::buffer::read_io::ReadIo;
use crate::error::{Error, Result, Shortage};
use crate::filesystem::Filesystem;
use std::sync::Arc;

use crate::inode::cache::{InodeHandle, InodeState, StepsOwner};
use crate::inode::user_flags::{refuse_if_immutable, refuse_if_protected};
use crate::io::credits::{GROUP, INODE};
use crate::map::extent_tree::ShiftDirection;
use crate::map::file_mapping::{FileMapping, RunOrHole};
use crate::txn::txn_io::TxnIo;

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

/// One transaction's part of a fallocate cut into steps: the mode over a byte range and,
/// for a collapse or an insert whose move is cut into pieces, the piece it moves.
#[derive(Debug, Clone, Copy)]
struct Step {
    mode: FallocateMode,
    offset: u64,
    len: u64,
    moves: Option<MovedPiece>,
}

/// The extents one step of a collapse or an insert moves: those that start in logical
/// blocks `from..until` (`None`: to the end of the file). The piece without an `until`
/// changes the size: an insert's first step (the kernel grows the file before it moves
/// anything, so no block is ever past the end), a collapse's last.
#[derive(Debug, Clone, Copy)]
struct MovedPiece {
    from: u64,
    until: Option<u64>,
}

/// How far [`Filesystem::allocate_unwritten`] got.
struct Reached {
    /// The logical block it stopped at: the end of its range unless the filesystem filled
    /// or the log room ran out.
    to: u64,
    /// Blocks it allocated.
    allocated: u64,
    /// It stopped because the log room could not cover the next run.
    out_of_room: bool,
}

/// How far one transaction of a fallocate got.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Progress {
    /// All of its range.
    Whole,
    /// Part of it: the filesystem filled up (what was allocated stays).
    FilledUp,
    /// Part of it: the log room ran out; the same step run again goes on from there
    /// (what is mapped is passed over), in a new transaction.
    OutOfRoom,
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
    ///
    /// An allocation, a punch, a zeroing or a collapse over more groups than one
    /// transaction may change runs in steps, each a fallocate of its own (`steps.rs`), the
    /// file owned by the operation between them: a failure or a crash part-way leaves the
    /// steps before it done, as the kernel's restarted handles do. A collapse punches its
    /// range a step at a time, then moves the blocks after it down; a move that changes
    /// more tree blocks than a step may is cut into pieces of whole leaves, as
    /// `ext4_ext_shift_extents` restarts its handle: a collapse moves its pieces from the
    /// first on and shrinks the size in its last step, an insert grows the size in its
    /// first step and moves its pieces from the last down. Between two pieces the tree is
    /// valid (e2fsck-clean) and the file's blocks partly moved, as the kernel leaves them.
    ///
    /// An allocation ([`FallocateMode::Allocate`], [`FallocateMode::KeepSize`]) that fills
    /// the filesystem keeps what it allocated and answers [`Error::NoSpace`], as
    /// `ext4_alloc_file_blocks` does: the blocks stay mapped (unwritten) and, without
    /// KEEP_SIZE, the size moves to the end of the last block mapped (never past the end
    /// asked for). Undoing it instead made a request larger than the free space cost an
    /// allocation, an undo, a commit and the same again before its "no space" (18 s for
    /// 1 GiB on a 512 MiB image). With nothing allocated and the size unmoved it changes
    /// nothing. A zeroing fallocate short of space undoes its step whole (the steps
    /// before it stay done).
    pub fn fallocate(&self, ino: u32, mode: FallocateMode, offset: u64, len: u64) -> Result<()> {
        let handle = self.inode_handle(ino)?;
        let Some((owner, steps)) =
            self.owned_steps(&handle, || self.fallocate_steps(&handle, mode, offset, len))?
        else {
            let whole = Step {
                mode,
                offset,
                len,
                moves: None,
            };
            while !self.retry_when_full(|| self.fallocate_once(&handle, whole, None))? {}
            return Ok(());
        };
        for step in steps {
            while !self.retry_when_full(|| self.fallocate_once(&handle, step, Some(&owner)))? {}
        }
        Ok(())
    }

    /// The steps of a fallocate too large for one transaction, in order; empty when one
    /// step does it all. A range the operation refuses is one step, refused whole (a
    /// collapse or insert the kernel refuses too, before any step).
    fn fallocate_steps(
        &self,
        handle: &InodeHandle,
        mode: FallocateMode,
        offset: u64,
        len: u64,
    ) -> Result<Vec<Step>> {
        // An allocation within one step's share is one step whatever the file holds: no
        // look at the file (its shared lock was 5 % of a one-block fallocate).
        let allocates = matches!(mode, FallocateMode::Allocate | FallocateMode::KeepSize);
        if allocates
            && self
                .allocation_cuts(offset, offset.saturating_add(len))
                .next()
                .is_none()
        {
            return Ok(Vec::new());
        }
        let state = handle.read(&self.inodes);
        let inode = &state.inode;
        let end = match offset.checked_add(len) {
            Some(end) if len > 0 && end <= self.max_file_size(inode) => end,
            _ => return Ok(Vec::new()),
        };
        let moves = matches!(
            mode,
            FallocateMode::CollapseRange | FallocateMode::InsertRange
        );
        if !inode.has_flag(flags::EXTENTS)
            || inode.has_flag(flags::INLINE_DATA)
            || (moves && self.check_range_shift(inode, mode, offset, len).is_err())
        {
            return Ok(Vec::new());
        }
        let cuts = self.fallocate_cuts(inode, mode, offset, end)?;
        let mut pieces = self.moved_pieces(inode, mode, offset, end)?;
        if cuts.is_empty() && pieces.is_empty() {
            return Ok(Vec::new());
        }
        let step = |mode, offset, len, moves| Step {
            mode,
            offset,
            len,
            moves,
        };
        let mut steps = Vec::new();
        let mut at = offset;
        for next in cuts.into_iter().chain(std::iter::once(end)) {
            // A collapse punches its range a step at a time; its move comes after.
            if !moves {
                steps.push(step(mode, at, next - at, None));
            } else if next < end {
                steps.push(step(FallocateMode::PunchHole, at, next - at, None));
            }
            at = next;
        }
        if moves {
            if mode == FallocateMode::InsertRange {
                pieces.reverse();
            }
            if pieces.is_empty() {
                steps.push(step(mode, offset, len, None));
            }
            steps.extend(pieces.into_iter().map(|p| step(mode, offset, len, Some(p))));
        }
        Ok(steps)
    }

    /// Where a collapse's or an insert's move over `offset..end` of `inode` is cut into
    /// pieces: none unless it changes more tree leaves than half of what one step may
    /// write, the rest left for the interior nodes above them.
    fn moved_pieces(
        &self,
        inode: &Inode,
        mode: FallocateMode,
        offset: u64,
        end: u64,
    ) -> Result<Vec<MovedPiece>> {
        let Some(blocks) = self.step_tree_blocks() else {
            return Ok(Vec::new());
        };
        let bs = u64::from(self.block_size());
        let from = match mode {
            FallocateMode::CollapseRange => end / bs,
            FallocateMode::InsertRange => offset / bs,
            _ => return Ok(Vec::new()),
        };
        let io = ReadIo::new(&self.store);
        let mut root = [0u8; I_BLOCK_SIZE];
        let starts = FileMapping::reading(inode, &mut root, &io).leaf_starts(from)?;
        // OK to cast: a step's blocks are a share of the log's.
        let per_piece = (blocks / 2).max(1) as usize;
        // The first piece takes the leaf that holds `from` and the leaves before its cut.
        let bounds: Vec<u64> = starts
            .into_iter()
            .skip(per_piece - 1)
            .step_by(per_piece)
            .collect();
        if bounds.is_empty() {
            return Ok(Vec::new());
        }
        let lows = std::iter::once(from).chain(bounds.iter().copied());
        let highs = bounds
            .iter()
            .copied()
            .map(Some)
            .chain(std::iter::once(None));
        Ok(lows
            .zip(highs)
            .map(|(from, until)| MovedPiece { from, until })
            .collect())
    }

    /// Where a fallocate of `offset..end` of `inode` is cut into steps (byte offsets
    /// inside the range, ascending): none unless it allocates or punches blocks in more
    /// groups than one step may touch.
    fn fallocate_cuts(
        &self,
        inode: &Inode,
        mode: FallocateMode,
        offset: u64,
        end: u64,
    ) -> Result<Vec<u64>> {
        if self.step_groups().is_none() {
            return Ok(Vec::new());
        }
        let bs = u64::from(self.block_size());
        let allocation_cuts = || self.allocation_cuts(offset, end);
        let freeing_cuts = || -> Result<Vec<u64>> {
            Ok(self
                .step_cuts(inode, offset.div_ceil(bs), end / bs)?
                .into_iter()
                .map(|block| block * bs)
                .collect())
        };
        Ok(match mode {
            FallocateMode::Allocate | FallocateMode::KeepSize => allocation_cuts().collect(),
            FallocateMode::PunchHole | FallocateMode::CollapseRange => freeing_cuts()?,
            // Frees what is mapped, then allocates the range: a step at either cut keeps
            // both within their share.
            FallocateMode::ZeroRange => {
                let mut cuts = freeing_cuts()?;
                cuts.extend(allocation_cuts());
                cuts.sort_unstable();
                cuts.dedup();
                cuts
            }
            FallocateMode::InsertRange => Vec::new(),
        })
    }

    /// Where an allocation of `offset..end` is cut into steps: allocation fills the range
    /// in order, and a step allocates what half its groups hold, which free space broken
    /// up may spread over the other half.
    fn allocation_cuts(&self, offset: u64, end: u64) -> impl Iterator<Item = u64> {
        let blocks_per_group = u64::from(self.geometry.blocks_per_group());
        let step = self
            .step_groups()
            .map(|groups| (groups / 2).max(1) * blocks_per_group * u64::from(self.block_size()));
        step.into_iter()
            .flat_map(move |step| (offset / step + 1..end.div_ceil(step)).map(move |n| n * step))
    }

    /// One step of [`Filesystem::fallocate`] (the whole of it unless `owner` owns the
    /// file for its steps), in a transaction of its own. False when the log room ran out
    /// part-way: the same step again goes on from there.
    fn fallocate_once(
        &self,
        handle: &Arc<InodeHandle>,
        step: Step,
        owner: Option<&StepsOwner<'_>>,
    ) -> Result<bool> {
        let Step {
            mode,
            offset,
            len,
            moves,
        } = step;
        let writer = self.writer()?;
        let ino = handle.ino;
        if len == 0 {
            return Err(Error::Invalid("fallocate of 0 bytes".into()));
        }
        let progress = {
            // The inode; each allocation and mapping edit declares its own, in room for a
            // step, or for a bitmap and descriptor per block of a smaller range.
            let room = match owner {
                Some(_) => self.step_credits().unwrap_or(0),
                None => self.room_for_blocks(len.div_ceil(u64::from(self.block_size()))),
            };
            let mut txn = writer.begin_with_room(self, INODE, room)?;
            let mut state = self.lock_for_change(&mut txn, handle, owner)?;
            // `vfs_fallocate`: an append-only file may only gain allocated space.
            match mode {
                FallocateMode::Allocate | FallocateMode::KeepSize => {
                    refuse_if_immutable(&state.inode, "fallocate")?
                }
                _ => refuse_if_protected(&state.inode, "fallocate that removes or moves data")?,
            }
            require_fallocatable(&state.inode)?;
            self.require_regular(&state)?;
            let end = offset
                .checked_add(len)
                .filter(|&end| end <= self.max_file_size(&state.inode))
                .ok_or_else(|| Error::FileTooBig(format!("inode {ino}")))?;
            // Checked before an inline file moves out, so a refused range changes nothing.
            // An insert's pieces after its first find the size grown: the first checked.
            if !(mode == FallocateMode::InsertRange && moves.is_some_and(|p| p.until.is_some())) {
                self.check_range_shift(&state.inode, mode, offset, len)?;
            }
            let io = writer.io(self, &txn);
            // The modes the kernel runs with EXT4_GET_BLOCKS_METADATA_NOFAIL: an extent
            // split while removing or shifting space may take its tree block from the
            // metadata reserve.
            let io = match mode {
                FallocateMode::PunchHole
                | FallocateMode::CollapseRange
                | FallocateMode::InsertRange => io.tree_blocks_from_reserve(),
                _ => io,
            };
            let progress = io.all_or_nothing(&mut state, |state| {
                if self.fallocate_inline(&io, state, mode, offset, end)? {
                    return Ok(Progress::Whole);
                }
                self.fallocate_blocks(&io, state, mode, offset, end, moves)
            })?;
            // Every mode moves mtime as well as ctime, allocation too (with KEEP_SIZE, and
            // within the size): Linux 6.18's ext4 does (measured on a loop mount; the FUSE
            // differential test compares).
            Self::touch(&mut state, true);
            drop(state);
            self.inodes.mark_dirty(handle);
            progress
        };
        self.commit_if_needed()?;
        match progress {
            Progress::Whole => Ok(true),
            Progress::OutOfRoom => Ok(false),
            Progress::FilledUp => Err(Error::NoSpace(Shortage::Blocks)),
        }
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

    /// [`Filesystem::fallocate`] on a file mapped by extents: how far it got (an allocation
    /// that filled the filesystem part-way keeps what it allocated; the caller commits it
    /// and answers no space).
    fn fallocate_blocks(
        &self,
        io: &TxnIo<'_>,
        state: &mut InodeState,
        mode: FallocateMode,
        offset: u64,
        end: u64,
        moves: Option<MovedPiece>,
    ) -> Result<Progress> {
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
                let reached =
                    self.allocate_unwritten(io, state, offset / bs, end.div_ceil(bs), true)?;
                // ext4's `epos`: the end of what is mapped, within the range asked for.
                let mapped_to = (reached.to * bs).min(end);
                let grows = mode == FallocateMode::Allocate && mapped_to > state.inode.size();
                if reached.to * bs < end && reached.allocated == 0 && !grows {
                    return Err(Error::NoSpace(Shortage::Blocks));
                }
                if grows {
                    self.set_file_size(&mut state.inode, mapped_to);
                }
                return Ok(if mapped_to == end {
                    Progress::Whole
                } else if reached.out_of_room {
                    Progress::OutOfRoom
                } else {
                    Progress::FilledUp
                });
            }
            FallocateMode::PunchHole | FallocateMode::ZeroRange => {
                // The mapping first: its failures are undone whole. The partial blocks'
                // bytes last, once nothing else can fail but their own writes.
                if end_full > first_full {
                    self.free_range(io, state, first_full, end_full - first_full)?;
                }
                if mode == FallocateMode::ZeroRange {
                    let last = end.div_ceil(bs);
                    // Short of space: all or nothing (undone whole by the caller).
                    if self
                        .allocate_unwritten(io, state, offset / bs, last, false)?
                        .to
                        < last
                    {
                        return Err(Error::NoSpace(Shortage::Blocks));
                    }
                    if end > state.inode.size() {
                        self.set_file_size(&mut state.inode, end);
                    }
                }
                self.zero_partial(io, state, offset, end)?;
            }
            FallocateMode::CollapseRange => {
                let (first, count) = (offset / bs, (end - offset) / bs);
                let piece = moves.unwrap_or(MovedPiece {
                    from: first + count,
                    until: None,
                });
                // The first piece frees what the punches before it left; the pieces after
                // it find the range holding the blocks it moved down.
                if piece.from == first + count {
                    self.free_range(io, state, first, count)?;
                }
                self.shift_blocks(io, state, piece, count, ShiftDirection::Down)?;
                if piece.until.is_none() {
                    let size = state.inode.size() - (end - offset);
                    self.set_file_size(&mut state.inode, size);
                }
            }
            FallocateMode::InsertRange => {
                let (first, count) = (offset / bs, (end - offset) / bs);
                let piece = moves.unwrap_or(MovedPiece {
                    from: first,
                    until: None,
                });
                if piece.until.is_none() {
                    let size = state.inode.size() + (end - offset);
                    self.set_file_size(&mut state.inode, size);
                }
                self.shift_blocks(io, state, piece, count, ShiftDirection::Up)?;
            }
        }
        Ok(Progress::Whole)
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

    /// Moves the mapped blocks of `state` that start in `piece` by `count` blocks, keeping
    /// `i_blocks` in step with the tree's nodes. The file's reservation window
    /// is given back, as the kernel discards preallocations: it was placed after blocks that
    /// have moved.
    fn shift_blocks(
        &self,
        io: &TxnIo<'_>,
        state: &mut InodeState,
        piece: MovedPiece,
        count: u64,
        direction: ShiftDirection,
    ) -> Result<()> {
        io.space
            .blocks
            .release_window(&mut state.window, io.txn.slot);
        self.edit_mapping(io, &mut state.inode, |map, _| {
            map.shift(piece.from, piece.until, count, direction)
        })
    }

    /// Maps every hole in logical blocks `first..end` to newly allocated unwritten blocks, in
    /// order, until the filesystem is full, or (with `may_stop`, once something is
    /// allocated) until the log room cannot cover the next run: what is mapped by then
    /// stays, and the caller decides what a shortfall means.
    fn allocate_unwritten(
        &self,
        io: &TxnIo<'_>,
        state: &mut InodeState,
        first: u64,
        end: u64,
        may_stop: bool,
    ) -> Result<Reached> {
        let InodeState { inode, window, .. } = state;
        let stream = u64::from(inode.ino);
        let mut logical = first;
        let mut allocated = 0;
        let mut out_of_room = false;
        self.edit_mapping(io, inode, |map, data_blocks| {
            while logical < end {
                // Unwritten extents hold at most 32,767 blocks.
                let (want, previous) = match map.run_or_hole(logical, (end - logical).min(32767))? {
                    RunOrHole::Run(run) => {
                        logical += run.len;
                        continue;
                    }
                    RunOrHole::Hole { len, previous } => (len as u32, previous),
                };
                let goal = map.after_previous(logical, previous)?;
                if !io.txn.extend_or_stop(GROUP, may_stop && allocated > 0) {
                    out_of_room = true;
                    break;
                }
                let got = io.space.may_allocate(Shortage::Blocks).and_then(|()| {
                    io.space
                        .blocks
                        .allocate_append_as(
                            window,
                            goal,
                            want,
                            io.txn.slot,
                            stream,
                            io.space.may_use_root_reserve(),
                        )
                        .map_err(Error::from_block_allocation)
                });
                let got = match got {
                    Ok(got) => got,
                    Err(Error::NoSpace(Shortage::Blocks)) => break,
                    Err(e) => return Err(e),
                };
                if let Err(e) = map.insert(logical, got.start, u64::from(got.len), true) {
                    return Err(io.unmapped(got, e));
                }
                io.took_data(got);
                *data_blocks += i64::from(got.len);
                allocated += u64::from(got.len);
                logical += u64::from(got.len);
            }
            Ok(())
        })?;
        Ok(Reached {
            to: logical,
            allocated,
            out_of_room,
        })
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

//! Truncating a regular file: shrinking frees the blocks past the new end and zeroes the
//! rest of the last block; growing leaves a hole.

use std::sync::Arc;

use crate::error::{Error, Result};
use crate::filesystem::Filesystem;
use crate::inode::cache::{InodeHandle, InodeState, StepsOwner};
use crate::inode::user_flags::refuse_if_protected;
use crate::io::credits::{INODE, ORPHAN};
use crate::map::file_mapping::FileMapping;
use crate::txn::txn_io::TxnIo;

impl Filesystem {
    /// Sets regular file `ino`'s size: shrinking, or setting the size it has, frees the
    /// blocks past the new end (they become reusable at the next commit; at the same size
    /// these are blocks fallocated past it with KEEP_SIZE, which ext4's truncate frees too)
    /// and zeroes the rest of the last block on disk, so growing it again reads zeros;
    /// growing leaves a hole.
    ///
    /// A truncate that frees blocks in more groups than one transaction may change runs in
    /// steps (`steps.rs`) as the kernel's does: the first sets the new size, frees the
    /// blocks from the last cut on and puts the file on the orphan list; the next free
    /// the file back to the new end, a cut at a time; the last takes it off the list. A
    /// crash between two steps leaves an orphan with the new size whose recovery (e4's
    /// writable open or the kernel's mount) frees the rest: the truncate is all or
    /// nothing across a crash.
    pub fn truncate(&self, ino: u32, size: u64) -> Result<()> {
        self.writer()?;
        let handle = self.inode_handle(ino)?;
        let Some((owner, cuts)) =
            self.owned_steps(&handle, || self.truncate_cuts(&handle, size))?
        else {
            return self.truncate_step(&handle, TruncateStep::Whole(size), None);
        };
        let Some((&last, rest)) = cuts.split_last() else {
            return self.truncate_step(&handle, TruncateStep::Whole(size), Some(&owner));
        };
        self.truncate_step(
            &handle,
            TruncateStep::Begin { size, from: last },
            Some(&owner),
        )?;
        for &cut in rest.iter().rev() {
            self.truncate_step(&handle, TruncateStep::Free(cut), Some(&owner))?;
        }
        self.truncate_step(&handle, TruncateStep::End(size), Some(&owner))
    }

    /// Where a truncate of `handle`'s file to `size` is cut into steps (see
    /// [`Filesystem::step_cuts`]); none for a truncate that grows the file.
    fn truncate_cuts(&self, handle: &InodeHandle, size: u64) -> Result<Vec<u64>> {
        let state = handle.read(&self.inodes);
        if size > state.inode.size() {
            return Ok(Vec::new());
        }
        let bs = u64::from(self.block_size());
        self.step_cuts(&state.inode, size.div_ceil(bs), u64::MAX)
    }

    /// One step of a truncate, in a transaction of its own, all or nothing. The steps
    /// after the first do nothing once the file is freed (unlinked meanwhile, and not
    /// open): its orphan's steps freed what was left.
    fn truncate_step(
        &self,
        handle: &Arc<InodeHandle>,
        step: TruncateStep,
        owner: Option<&StepsOwner<'_>>,
    ) -> Result<()> {
        let writer = self.writer()?;
        let bs = u64::from(self.block_size());
        let ino = handle.ino;
        {
            // The inode, and its neighbour on the orphan list where the step puts it on or
            // takes it off; the mapping's edits and the frees declare their own.
            let orphan_credits = match step {
                TruncateStep::Begin { .. } | TruncateStep::End(_) => ORPHAN,
                _ => 0,
            };
            let mut txn = match step {
                // Room for freeing what the file holds (a file in more groups than a step
                // goes in steps).
                TruncateStep::Whole(_) => {
                    let room = self.room_to_free(&handle.read(&self.inodes).inode);
                    writer.begin_with_room(self, INODE, room)?
                }
                _ => writer.begin_step(self, INODE + orphan_credits)?,
            };
            let mut state = self.lock_for_change(&mut txn, handle, owner)?;
            if matches!(step, TruncateStep::Whole(_))
                && txn.room_held() > 0
                && self.room_to_free(&state.inode) + u64::from(INODE) > txn.room_held()
            {
                // The file grew between the room's estimate and the lock: again, with the
                // room its blocks now need (at most a step's, less than the room's total).
                drop(state);
                drop(txn);
                return self.truncate_step(handle, step, owner);
            }
            let gone = state.deleted || (state.inode.links_count() == 0 && state.open_count == 0);
            if gone && matches!(step, TruncateStep::Free(_) | TruncateStep::End(_)) {
                return Ok(());
            }
            self.require_regular(&state)?;
            refuse_if_protected(&state.inode, "change its size")?;
            let (size, first_freed) = match step {
                TruncateStep::Whole(size) | TruncateStep::End(size) => (size, size.div_ceil(bs)),
                TruncateStep::Begin { size, from } => (size, from),
                TruncateStep::Free(from) => (state.inode.size(), from),
            };
            if size > self.max_file_size(&state.inode) {
                return Err(Error::FileTooBig(format!("inode {ino}")));
            }
            let io = writer.io(self, &txn).tree_blocks_from_reserve();
            io.all_or_nothing(&mut state, |state| {
                let inline = self.change_inline(&io, state, size, false, |_| {})?;
                // At the same size too, as ext4_setattr calls ext4_truncate: blocks
                // allocated past the end (fallocate KEEP_SIZE) go.
                if !inline && size <= state.inode.size() {
                    self.free_range(&io, state, first_freed, u64::MAX)?;
                    if let TruncateStep::Whole(_) | TruncateStep::Begin { .. } = step {
                        self.zero_tail(&io, state, size)?;
                    }
                }
                Ok(())
            })?;
            writer
                .space
                .blocks
                .release_window(&mut state.window, txn.slot);
            self.set_file_size(&mut state.inode, size);
            match step {
                TruncateStep::Begin { .. } => writer.space.orphans.add(ino),
                TruncateStep::End(_) => {
                    self.take_truncated_off_orphans(&mut state);
                }
                _ => {}
            }
            Self::touch(&mut state, true);
            drop(state);
            self.inodes.mark_dirty(handle);
        }
        self.commit_if_needed()
    }

    /// Takes `state`'s file off the orphan list, where a truncate in steps put it: false
    /// when it was not on it, or has no links (unlinked while open since, it stays on the
    /// list until its last close).
    pub(crate) fn take_truncated_off_orphans(&self, state: &mut InodeState) -> bool {
        let on_list = state.inode.links_count() > 0
            && self
                .writer
                .as_ref()
                .is_some_and(|w| w.space.orphans.remove(state.inode.ino));
        if on_list {
            state.inode.record.dtime = 0;
        }
        on_list
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
        self.edit_mapping(io, &mut state.inode, |map, data_blocks| {
            for (start, n) in map.remove(first, len)? {
                io.free_blocks(start, n)?;
                *data_blocks -= n as i64;
            }
            Ok(())
        })
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

/// What one transaction of a truncate does.
#[derive(Clone, Copy)]
enum TruncateStep {
    /// The whole truncate: the size set, the blocks past it freed, the rest of its last
    /// block zeroed.
    Whole(u64),
    /// The first of several: the size set and the rest of its last block zeroed, the
    /// blocks from logical block `from` on freed, the file put on the orphan list.
    Begin { size: u64, from: u64 },
    /// A middle one: the blocks from this logical block on freed.
    Free(u64),
    /// The last: the blocks past the size freed, the file taken off the orphan list.
    End(u64),
}

//! Truncating a regular file: shrinking frees the blocks past the new end and zeroes the
//! rest of the last block; growing leaves a hole.

use crate::error::{Error, Result};
use crate::filesystem::Filesystem;
use crate::inode::cache::InodeState;
use crate::inode::user_flags::refuse_if_protected;
use crate::io::credits::INODE;
use crate::map::file_mapping::FileMapping;
use crate::txn::txn_io::TxnIo;

impl Filesystem {
    /// Sets regular file `ino`'s size: shrinking, or setting the size it has, frees the
    /// blocks past the new end (they become reusable at the next commit; at the same size
    /// these are blocks fallocated past it with KEEP_SIZE, which ext4's truncate frees too)
    /// and zeroes the rest of the last block on disk, so growing it again reads zeros;
    /// growing leaves a hole.
    ///
    /// A truncate that frees blocks in more groups than one transaction may change cuts
    /// the file back in steps from its end, each step a truncate of its own (`steps.rs`).
    pub fn truncate(&self, ino: u32, size: u64) -> Result<()> {
        self.writer()?;
        let cuts = {
            let handle = self.inode_handle(ino)?;
            let state = handle.read(&self.inodes);
            if size <= state.inode.size() {
                let bs = u64::from(self.block_size());
                self.step_cuts(&state.inode, size.div_ceil(bs), u64::MAX)?
            } else {
                Vec::new()
            }
        };
        for cut in cuts.into_iter().rev() {
            self.truncate_once(ino, Cut::From(cut))?;
        }
        self.truncate_once(ino, Cut::To(size))
    }

    /// One truncate step, in a transaction of its own.
    fn truncate_once(&self, ino: u32, cut: Cut) -> Result<()> {
        let writer = self.writer()?;
        let bs = u64::from(self.block_size());
        {
            // The inode; the mapping's edits and the frees declare their own.
            let txn = writer.begin(INODE)?;
            let handle = self.inode_handle(ino)?;
            let mut state = handle.lock(&self.inodes);
            self.require_regular(&state)?;
            refuse_if_protected(&state.inode, "change its size")?;
            let (size, first_freed) = match cut {
                Cut::To(size) => (size, size.div_ceil(bs)),
                Cut::From(block) => (state.inode.size().min(block.saturating_mul(bs)), block),
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
                    if let Cut::To(_) = cut {
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

/// Where one truncate step cuts a file.
#[derive(Clone, Copy)]
enum Cut {
    /// To the size asked for: blocks past it freed, the rest of its last block zeroed.
    To(u64),
    /// Blocks from this logical block on freed, and the size brought down to it if it is
    /// past it: a step of a truncate too large for one transaction (`steps.rs`).
    From(u64),
}

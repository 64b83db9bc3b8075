//! Operations too large for one transaction. With a journal a transaction must fit its log,
//! and freeing or allocating a file's blocks changes one bitmap (and a share of a
//! descriptor block) for every group it touches: on a volume of many groups (a 1 KiB-block
//! image has one every 8 MiB) or with a small log, a truncate, an unlink, a punch or a
//! fallocate of a large file touched more groups than the whole log could hold, and its
//! commit was written around the log (not crash-safe; counted in
//! [`crate::JournalStats::unjournaled`]). These now run in steps: each step touches at
//! most [`Filesystem::step_groups`] groups and is a whole operation of its own, all or
//! nothing, in whatever transaction is running; between steps the operation commits when
//! the log's pressure asks (`commit_if_needed`, which counts changed groups), as the
//! kernel restarts its handle (`ext4_ext_truncate_extend_restart`,
//! `ext4_alloc_file_blocks`).
//!
//! What a crash between two steps leaves, each state e2fsck-clean:
//! - a truncate: the file at its new size, on the orphan list (its first step set both),
//!   with blocks past that size still mapped; the next writable open (e4's or the
//!   kernel's mount) frees them and takes it off the list, so the truncate is all or
//!   nothing, as the kernel's is (`ext4_truncate`, `ext4_orphan_cleanup`);
//! - a punch or an allocation: the range partly done, as the kernel's steps leave it;
//! - an unlinked file: an orphan whose blocks are partly freed; the next writable open
//!   (e4's or the kernel's mount) frees the rest, so the delete is as atomic as the
//!   kernel's.
//!
//! Steps are cut where the file's mapped runs cross into a new group, from a walk of its
//! mapping; a file with fewer blocks than a step's groups cannot touch more groups than
//! that and is not walked. Without a journal nothing bounds a transaction and every
//! operation is one step.
//!
//! Between two steps the operation owns the file ([`InodeHandle::own_steps`], the
//! kernel's `i_rwsem` held across restarted handles): a write, truncate, fallocate or
//! flag change that finds it owned leaves its transaction, waits for the last step, and
//! joins again ([`Filesystem::lock_for_change`]). Without that, a write past the new size
//! between two truncate steps would find the old blocks still mapped there (reading back
//! the old bytes around it) and the next step would free them under it. Unlinks and
//! renames do not wait: the steps after one stop where they find the file freed.

use std::collections::HashSet;

use e4_format::features::RoCompatFeatures;
use e4_format::inode::{flags, FileType, Inode, I_BLOCK_SIZE};

use crate::buffer::read_io::ReadIo;
use crate::error::Result;
use crate::filesystem::Filesystem;
use crate::inode::cache::{InodeGuard, InodeHandle, InodeState, StepsOwner};
use crate::io::credits::{GROUP, INODE};
use crate::map::file_mapping::FileMapping;
use crate::map::run::Mapping;
use crate::txn::TxnHandle;

impl Filesystem {
    /// Where an operation on `handle`'s file is cut into steps (`cut`), with the file
    /// owned for them ([`InodeHandle::own_steps`]); `None` for an operation of one step,
    /// which takes no ownership. Cut once unowned, and again once owned: until then the
    /// file could change (the second cut may find no step left).
    pub(crate) fn owned_steps<'h, S>(
        &'h self,
        handle: &'h InodeHandle,
        cut: impl Fn() -> Result<Vec<S>>,
    ) -> Result<Option<(StepsOwner<'h>, Vec<S>)>> {
        if cut()?.is_empty() {
            return Ok(None);
        }
        let owner = handle.own_steps(&self.inodes);
        Ok(Some((owner, cut()?)))
    }

    /// The lock of `handle`'s inode for a change to its blocks, size or flags, taken in
    /// `txn`, which has changed nothing yet. While an operation in steps owns the inode
    /// (`owner` is not its ownership) it leaves the transaction to wait for the last step
    /// (a wait inside it would hold up the commits between the steps) and tries again in
    /// the transaction then running. The flag is read under the lock the change takes
    /// anyway: no lock or shared word is added to a write.
    pub(crate) fn lock_for_change<'h>(
        &self,
        txn: &mut TxnHandle<'_>,
        handle: &'h InodeHandle,
        owner: Option<&StepsOwner<'_>>,
    ) -> Result<InodeGuard<'h>> {
        loop {
            let state = handle.lock(&self.inodes);
            if !state.stepping || owner.is_some_and(|o| o.owns(handle)) {
                return Ok(state);
            }
            drop(state);
            let writer = self.writer()?;
            txn.wait_outside(&self.commit_parts(writer), || handle.wait_for_steps())?;
        }
    }

    /// The most groups one step may touch: a quarter of what the running transaction may
    /// hold before it commits, each group counting its bitmap and descriptor. `None`
    /// without a journal (no bound).
    pub(crate) fn step_groups(&self) -> Option<u64> {
        let limit = self.writer.as_ref()?.txns.log_limit()?;
        Some((limit as u64 / (4 * u64::from(GROUP))).max(1))
    }

    /// The log room a step reserves when it begins ([`crate::filesystem::Writer::begin_step`]):
    /// the bitmaps and descriptors of [`Self::step_groups`] groups and the tree blocks of
    /// [`Self::step_tree_blocks`], which it declares as it frees or allocates (each
    /// extent inserted declares its worst case, a split at every level: far more than it
    /// dirties, but what is declared is what takes room). With the groups alone, a mixed
    /// run of 24 threads declared 7 credits beyond its room once in five runs; an
    /// allocation that finds no room left stops and goes on in a new transaction
    /// (`allocate_unwritten`). `None` without a journal.
    pub(crate) fn step_credits(&self) -> Option<u64> {
        Some(self.step_groups()? * u64::from(GROUP) + self.step_tree_blocks()?)
    }

    /// The filesystem blocks `inode` holds (data, tree and xattr block), from `i_blocks`.
    pub(crate) fn blocks_held(&self, inode: &Inode) -> u64 {
        let huge = self
            .superblock()
            .ro_compat()
            .contains(RoCompatFeatures::HUGE_FILE);
        inode.blocks_512(huge, self.block_size()) / u64::from(self.block_size() / 512)
    }

    /// The log room freeing `inode`'s blocks in one transaction may declare: a group's
    /// bitmap and descriptor per block at most, and never more than a step
    /// ([`Self::step_credits`]), since a file in more groups is freed in steps.
    pub(crate) fn room_to_free(&self, inode: &Inode) -> u64 {
        self.room_for_blocks(self.blocks_held(inode))
    }

    /// For an operation that takes a name away from `victim` in `txn`: the log room it needs
    /// (its own `credits` and freeing `victim`'s blocks) when that frees `victim` now (its
    /// last name, not open) and `txn` holds less. The caller then starts again in a handle
    /// that holds it ([`crate::filesystem::Writer::begin_with_room`]), before it changes
    /// anything. `None` when `txn` holds enough, or without a journal.
    pub(crate) fn room_short_to_free(
        &self,
        txn: &TxnHandle<'_>,
        victim: &InodeState,
        credits: u32,
    ) -> Option<u64> {
        let is_dir = victim.inode.file_type() == Some(FileType::Directory);
        let last_name = is_dir || victim.inode.links_count() <= 1;
        // No room is held without a journal, and none is needed.
        if txn.room_held() == 0 || !last_name || victim.open_count > 0 {
            return None;
        }
        let needed = self.room_to_free(&victim.inode) + u64::from(credits);
        (needed > txn.room_held()).then_some(needed)
    }

    /// The log room an operation on `blocks` blocks may declare in one transaction: a
    /// group's bitmap and descriptor per block at most, never more than a step. 0 without
    /// a journal.
    pub(crate) fn room_for_blocks(&self, blocks: u64) -> u64 {
        let per_block = blocks.saturating_mul(u64::from(GROUP));
        self.step_credits().map_or(0, |step| per_block.min(step))
    }

    /// The most tree blocks one step may write: a quarter of what the running transaction
    /// may hold before it commits, as for [`Self::step_groups`]. `None` without a journal.
    pub(crate) fn step_tree_blocks(&self) -> Option<u64> {
        let limit = self.writer.as_ref()?.txns.log_limit()?;
        Some((limit as u64 / 4).max(1))
    }

    /// Where to cut freeing or allocating `inode`'s mapped blocks in `from..to` (logical)
    /// into steps of at most [`Self::step_groups`] groups: the logical block each step
    /// after the first starts at, ascending. Empty when one step does it all.
    pub(crate) fn step_cuts(&self, inode: &Inode, from: u64, to: u64) -> Result<Vec<u64>> {
        let Some(limit) = self.step_groups() else {
            return Ok(Vec::new());
        };
        let blocks = self.blocks_held(inode);
        // Every block lies in one group, so this many blocks touch this many groups at most.
        if blocks <= limit || inode.has_flag(flags::INLINE_DATA) {
            return Ok(Vec::new());
        }
        let io = ReadIo::new(&self.store);
        let mut root = [0u8; I_BLOCK_SIZE];
        let mapping = FileMapping::reading(inode, &mut root, &io);
        let to = to.min(mapping.logical_limit());
        let geometry = &self.geometry;
        let per_group = u64::from(geometry.blocks_per_group());
        let group_of =
            |physical: u64| physical.saturating_sub(geometry.first_data_block()) / per_group;
        let mut cuts = Vec::new();
        let mut groups: HashSet<u64> = HashSet::new();
        let mut at = from;
        while at < to {
            match mapping.run_at(at, to - at)? {
                Mapping::Hole { len } => at += len,
                Mapping::Data { physical, len, .. } => {
                    // A group's worth at a time: a piece then touches two groups at most.
                    let len = len.min(per_group);
                    let touched = group_of(physical)..=group_of(physical + len - 1);
                    let new = touched.clone().filter(|g| !groups.contains(g)).count() as u64;
                    // A cut before this run if it would take the step past the limit.
                    if groups.len() as u64 + new > limit && !groups.is_empty() {
                        cuts.push(at);
                        groups.clear();
                    }
                    groups.extend(touched);
                    at += len;
                }
            }
        }
        Ok(cuts)
    }

    /// A step of freeing orphan `ino` (no links, not open): its blocks from logical block
    /// `first` on, in a transaction of its own, all or nothing. False when it is no longer
    /// such an orphan (freed meanwhile), and there is nothing to do.
    pub(crate) fn free_orphan_from(&self, ino: u32, first: u64) -> Result<bool> {
        let writer = self.writer()?;
        let txn = writer.begin_step(self, INODE)?;
        let io = writer.io(self, &txn).tree_blocks_from_reserve();
        let handle = self.inode_handle(ino)?;
        let mut state = handle.lock(&self.inodes);
        if state.deleted || state.open_count > 0 || state.inode.links_count() > 0 {
            return Ok(false);
        }
        io.all_or_nothing(&mut state, |state| {
            self.free_range(&io, state, first, u64::MAX)
        })?;
        drop(state);
        self.inodes.mark_dirty(&handle);
        Ok(true)
    }
}

//! Removing names: unlink and rmdir, and deleting an inode whose last link and last open
//! reference are gone (its space, its record, its number).

use e4_format::inode::{flags, FileType};

use crate::dir::editor::REMOVE_ENTRY_CREDITS;
use crate::dir::entry::check_name;
use crate::error::{Error, Result};
use crate::filesystem::Filesystem;
use crate::inode::cache::InodeState;
use crate::inode::user_flags::refuse_removal;
use crate::io::credits::{INODE, ORPHAN};
use crate::ops::namespace::{lock_in_order, shown, state, two_states};
use crate::txn::txn_io::TxnIo;
use crate::xattr::inline_data::InlineData;
use smallvec::smallvec;

/// Credits of a removal: the directory's inode and the entry's leaf, the victim's inode, its
/// neighbour on the orphan list, and its xattr block's reference count. Its blocks' and
/// inode's frees declare their own.
const REMOVE_CREDITS: u32 = 2 * INODE + REMOVE_ENTRY_CREDITS + ORPHAN + 1;

impl Filesystem {
    /// Removes `name` (not a directory) from `parent`; the inode is freed with its last link.
    pub fn unlink(&self, parent: u32, name: &[u8]) -> Result<()> {
        self.remove_name(parent, name, false)
    }

    /// Removes the empty directory `name` from `parent`.
    pub fn rmdir(&self, parent: u32, name: &[u8]) -> Result<()> {
        self.remove_name(parent, name, true)
    }

    pub(super) fn remove_name(&self, parent: u32, name: &[u8], directory: bool) -> Result<()> {
        if name == b"." || name == b".." {
            return Err(Error::Invalid(format!("cannot remove {:?}", shown(name))));
        }
        check_name(name)?;
        let writer = self.writer()?;
        let mut free_in_steps = None;
        // Log room for freeing the victim's blocks here, once found to need more than a
        // handle's allowance: the search starts again in a handle that holds it.
        let mut room_to_free = 0;
        loop {
            let txn = writer.begin_with_room(self, REMOVE_CREDITS, room_to_free)?;
            let io = writer.io(self, &txn);
            let format = self.dir_format();
            let parent_handle = self.inode_handle(parent)?;
            let mut p = parent_handle.lock(&self.inodes);
            self.require_live_directory(&p.inode)?;
            let mut located = self
                .edit_dir(&io, &format, &mut p, |e| e.locate(name))?
                .ok_or_else(|| Error::NotFound(shown(name)))?;
            let victim = located.entry.ino;
            if victim == parent {
                return Err(Error::Invalid(format!("cannot remove {:?}", shown(name))));
            }
            let victim_handle = self.inode_handle(victim)?;
            // The victim's lock is taken while the directory's is held when that keeps the
            // inode-number order, or when it is free (no wait, so no deadlock): the name
            // found is then still there. Otherwise both are taken in order, and the name
            // looked up again.
            let held = if victim > parent {
                Some(victim_handle.lock(&self.inodes))
            } else {
                victim_handle.try_lock(&self.inodes)
            };
            let mut locked = match held {
                Some(v) => smallvec![(parent, p), (victim, v)],
                None => {
                    drop(p);
                    let mut locked = lock_in_order(&self.inodes, [&parent_handle, &victim_handle]);
                    let dir = state(&mut locked, parent);
                    // Removed meanwhile (emptied and rmdir'd while nothing was locked).
                    self.require_live_directory(&dir.inode)?;
                    match self.edit_dir(&io, &format, dir, |e| e.locate(name))? {
                        Some(again) if again.entry.ino == victim => located = again,
                        _ => continue,
                    }
                    locked
                }
            };
            // `may_delete` refuses before it looks at the victim's type or contents.
            let (dir, target) = two_states(&mut locked, parent, victim);
            refuse_removal(&dir.inode, &target.inode)?;
            let is_dir = target.inode.file_type() == Some(FileType::Directory);
            match (directory, is_dir) {
                (false, true) => return Err(Error::IsADirectory(shown(name))),
                (true, false) => return Err(Error::NotADirectory(shown(name))),
                _ => {}
            }
            if is_dir {
                self.require_live_directory(&target.inode)?;
                if !self.edit_dir(&io, &format, target, |e| e.is_empty())? {
                    return Err(Error::NotEmpty(shown(name)));
                }
            }
            // Short again only if the name now leads to a larger file (renamed over it
            // meanwhile): the room needed is at most a step's, always less than the room's
            // total, so each retry's handle holds what it asked for.
            if let Some(room) = self.room_short_to_free(&txn, target, REMOVE_CREDITS) {
                room_to_free = room;
                continue;
            }
            // Forgotten under the directory's lock, before the edit (dentry_cache.rs).
            self.dentries.forget(parent, name);
            // The name goes and the victim is freed together or not at all: both stay
            // locked until the freeing is done, so that a failure part-way (a tree block
            // that cannot be read) puts the directory back as no one else has seen it.
            let freed = io.all_or_nothing_locked(&mut locked, |locked| {
                let (dir, target) = two_states(locked, parent, victim);
                self.edit_dir(&io, &format, dir, |e| e.remove_located(located))?;
                if is_dir {
                    Self::drop_dir_link(&mut dir.inode);
                    target.inode.record.links_count = 0;
                } else {
                    target.inode.record.links_count = target.inode.links_count().saturating_sub(1);
                }
                Self::touch(dir, true);
                Self::touch(target, false);
                let unused = target.inode.links_count() == 0 && target.open_count == 0;
                // A victim too large to free in one transaction stays an orphan, freed in
                // steps once this operation is done (`steps.rs`).
                let freed = unused && self.step_cuts(&target.inode, 0, u64::MAX)?.is_empty();
                if freed {
                    self.delete_inode(&io, target)?;
                }
                Ok(freed)
            })?;
            let target = state(&mut locked, victim);
            if !freed && target.inode.links_count() == 0 {
                writer.space.orphans.add(victim);
                if target.open_count == 0 {
                    free_in_steps = Some(victim);
                }
            }
            drop(locked);
            self.inodes.mark_dirty(&parent_handle);
            if !freed {
                self.inodes.mark_dirty(&victim_handle);
            }
            break;
        }
        if let Some(victim) = free_in_steps {
            self.close_orphan(victim)?;
        }
        self.commit_if_needed()
    }

    /// Frees an inode whose last link is gone and that nobody has open: its blocks and its
    /// number when the running transaction commits, its xattr block reference; writes its
    /// final record (links 0, dtime set) into the inode table now.
    pub(crate) fn delete_inode(&self, io: &TxnIo<'_>, state: &mut InodeState) -> Result<()> {
        // The number is freed at commit, which must not fail for want of its bitmap.
        io.space
            .inodes
            .load_group_of(state.inode.ino, io.txn.slot)
            .map_err(Error::from_inode_allocation)?;
        self.release_inode_space(io, state)?;
        let is_dir = state.inode.file_type() == Some(FileType::Directory);
        // Whole seconds of the last tick, as the kernel's `ktime_get_real_seconds`.
        state.inode.record.dtime = (crate::time::now_seconds_coarse() as u32).max(1);
        state.inode.record.links_count = 0;
        state.inode.set_size(0);
        // The last step that can fail: an operation that fails before it is undone whole.
        self.inode_table.write_record(&self.store, &state.inode)?;
        state.deleted = true;
        // Out of the cache before the number can be handed out again (after the commit).
        self.inodes.remove(state.inode.ino);
        io.txns.free_inode(io.txn, state.inode.ino, is_dir);
        Ok(())
    }

    /// Frees every block an inode owns (data, tree, xattr block reference) and its window.
    pub(super) fn release_inode_space(&self, io: &TxnIo<'_>, state: &mut InodeState) -> Result<()> {
        io.space
            .blocks
            .release_window(&mut state.window, io.txn.slot);
        let inode = &state.inode;
        let mapped = match inode.file_type() {
            Some(FileType::Regular | FileType::Directory) => true,
            // A fast symlink keeps its target in i_block, not block pointers.
            Some(FileType::Symlink) => {
                inode.has_flag(flags::EXTENTS) || !self.is_fast_symlink(inode)
            }
            _ => false,
        };
        if inode.has_flag(flags::INLINE_DATA) {
            // What an inline inode holds is in the inode itself: emptied as the kernel's
            // truncate to 0 leaves it (`ext4_inline_data_truncate`).
            let mut data = InlineData::load(&state.inode)?;
            if !data.store(&mut state.inode, &[]) {
                return Err(Error::Invalid(format!(
                    "inode {}: emptied inline data does not fit",
                    state.inode.ino
                )));
            }
        } else if mapped {
            self.free_range(io, state, 0, u64::MAX)?;
        }
        if state.inode.file_acl() != 0 {
            self.drop_xattr_block(io, &mut state.inode)?;
        }
        Ok(())
    }
}

//! Renaming: replace, no-replace and exchange, within a directory or across two (under
//! the rename lock, so no directory becomes its own ancestor).

use e4_format::features::RoCompatFeatures;
use e4_format::inode::{FileType, ROOT_INO};

use crate::dir::editor::{ADD_ENTRY_CREDITS, REMOVE_ENTRY_CREDITS};
use crate::dir::entry::{check_name, DirFormat};
use crate::error::{Error, Result};
use crate::filesystem::Filesystem;
use crate::inode::cache::{InodeGuard, InodeHandle};
use crate::inode::user_flags::{refuse_if_immutable, refuse_removal};
use crate::io::credits::{INODE, ORPHAN};
use crate::ops::namespace::{known_type, lock_in_order, shown, state, MAX_LINKS};
use crate::txn::txn_io::TxnIo;

/// How [`Filesystem::rename`] treats an existing target.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RenameMode {
    /// Replace it (POSIX rename).
    #[default]
    Replace,
    /// Fail with [`Error::Exists`] (RENAME_NOREPLACE).
    NoReplace,
    /// Swap the two names (RENAME_EXCHANGE); both must exist.
    Exchange,
}

/// Credits of a rename: both directories' and both entries' inodes, the new entry and the
/// old one's removal, a moved directory's `..`, and for a replaced entry its inode's
/// neighbour on the orphan list and its xattr block's reference count (its frees declare
/// their own).
const RENAME_CREDITS: u32 = 4 * INODE + ADD_ENTRY_CREDITS + REMOVE_ENTRY_CREDITS + 1 + ORPHAN + 1;

impl Filesystem {
    /// Renames `old_parent/old_name` to `new_parent/new_name`, per `mode`.
    pub fn rename(
        &self,
        old_parent: u32,
        old_name: &[u8],
        new_parent: u32,
        new_name: &[u8],
        mode: RenameMode,
    ) -> Result<()> {
        check_name(old_name)?;
        check_name(new_name)?;
        let writer = self.writer()?;
        // Log room for freeing a replaced file here, once found to need more than a
        // handle's allowance: the search starts again in a handle that holds it.
        let mut room_to_free = 0;
        let free_in_steps = loop {
            let txn = writer.begin_with_room(self, RENAME_CREDITS, room_to_free)?;
            // Moves between directories are serialised (the kernel's s_vfs_rename_mutex).
            let _moving = (old_parent != new_parent).then(|| writer.rename_lock.lock());
            let io = writer.io(self, &txn);
            let format = self.dir_format();
            let old_dir = self.inode_handle(old_parent)?;
            let new_dir = self.inode_handle(new_parent)?;
            // Find the inodes involved, then lock them all in order and check again. Their
            // handles are taken while the names still lead to them: once the directories
            // are unlocked, another thread may remove either inode and free its number,
            // whose record then no longer reads as an inode.
            let (source, target) = {
                let both = [old_dir.clone(), new_dir.clone()];
                let mut dirs = lock_in_order(&self.inodes, &both);
                let o = state(&mut dirs, old_parent);
                self.require_live_directory(&o.inode)?;
                let source = self
                    .lookup_locked(&io, &format, o, old_name)?
                    .ok_or_else(|| Error::NotFound(shown(old_name)))?;
                let n = state(&mut dirs, new_parent);
                self.require_live_directory(&n.inode)?;
                let target = self.lookup_locked(&io, &format, n, new_name)?;
                (
                    self.inode_handle(source.ino)?,
                    target.map(|t| self.inode_handle(t.ino)).transpose()?,
                )
            };
            if target.as_ref().is_some_and(|t| t.ino == source.ino) {
                // Two names of one inode: nothing to do (POSIX).
                return Ok(());
            }
            if old_parent != new_parent {
                let is_dir = |h: &InodeHandle| {
                    h.read(&self.inodes).inode.file_type() == Some(FileType::Directory)
                };
                let into_itself = (is_dir(&source) && self.is_ancestor(source.ino, new_parent)?)
                    || (mode == RenameMode::Exchange
                        && match &target {
                            Some(t) => is_dir(t) && self.is_ancestor(t.ino, old_parent)?,
                            None => false,
                        });
                if into_itself {
                    return Err(Error::Invalid("cannot move a directory into itself".into()));
                }
            }
            let mut handles = vec![old_dir.clone(), new_dir.clone(), source.clone()];
            handles.extend(target.clone());
            let mut locked = lock_in_order(&self.inodes, &handles);
            // A handle removed meanwhile is a freed inode, even if its number is back under
            // the same name.
            let removed = |locked: &mut [(u32, InodeGuard<'_>)], h: &InodeHandle| {
                state(locked, h.ino).deleted
            };
            if removed(&mut locked, &source)
                || target.as_ref().is_some_and(|t| removed(&mut locked, t))
            {
                continue;
            }
            // Either directory may have been removed while none was locked (an rmdir of an
            // empty destination while this rename waited for its source): ENOENT, as the
            // kernel's lookup in a dead directory answers, not a look into freed blocks.
            self.require_live_directory(&state(&mut locked, old_parent).inode)?;
            self.require_live_directory(&state(&mut locked, new_parent).inode)?;
            let (source, target) = (source.ino, target.map(|t| t.ino));
            let now_source = self
                .lookup_locked(&io, &format, state(&mut locked, old_parent), old_name)?
                .map(|e| e.ino);
            let now_target = self
                .lookup_locked(&io, &format, state(&mut locked, new_parent), new_name)?
                .map(|e| e.ino);
            if now_source != Some(source) || now_target != target {
                continue;
            }
            // As in `remove_name`: short again only for a larger file under the name.
            if let Some(t) = target.filter(|_| mode != RenameMode::Exchange) {
                if let Some(room) =
                    self.room_short_to_free(&txn, state(&mut locked, t), RENAME_CREDITS)
                {
                    room_to_free = room;
                    continue;
                }
            }
            // All or nothing: the records of every inode involved, put back with every
            // block change if the rename fails part-way.
            let free_in_steps = io.all_or_nothing_locked(&mut locked, |locked| {
                self.rename_locked(
                    &io, &format, locked, old_parent, old_name, new_parent, new_name, source,
                    target, mode,
                )
            })?;
            drop(locked);
            for h in &handles {
                self.inodes.mark_dirty(h);
            }
            break free_in_steps;
        };
        if let Some(replaced) = free_in_steps {
            self.close_orphan(replaced)?;
        }
        self.commit_if_needed()
    }

    /// Whether directory `ancestor` is `dir` or one of its ancestors, walking ".." up to
    /// the root. Called with no inode locked and the rename lock held, so no directory
    /// moves meanwhile (only renames between directories move one).
    pub(super) fn is_ancestor(&self, ancestor: u32, dir: u32) -> Result<bool> {
        let mut at = dir;
        // A chain longer than the inode count is a loop: corruption.
        for _ in 0..=self.superblock().inodes_count {
            if at == ancestor {
                return Ok(true);
            }
            if at == ROOT_INO {
                return Ok(false);
            }
            at = self.parent_of(&self.read_inode(at)?)?;
        }
        Err(e4_format::FormatError::corrupt(
            e4_format::Structure::Directory,
            e4_format::Location::Inode(dir),
            e4_format::Problem::DotDotLoop,
        )
        .into())
    }

    /// The rename's changes, with every inode involved locked. Returns a replaced file
    /// left an orphan because it is too large to free in this transaction: the caller
    /// frees it in steps (`steps.rs`).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn rename_locked(
        &self,
        io: &TxnIo<'_>,
        format: &DirFormat,
        locked: &mut [(u32, InodeGuard<'_>)],
        old_parent: u32,
        old_name: &[u8],
        new_parent: u32,
        new_name: &[u8],
        source: u32,
        target: Option<u32>,
        mode: RenameMode,
    ) -> Result<Option<u32>> {
        // A replaced file to free in steps after the rename.
        let mut freed_later = None;
        let type_of =
            |locked: &mut [(u32, InodeGuard<'_>)], ino: u32| known_type(&state(locked, ino).inode);
        let source_type = type_of(locked, source)?;
        let source_dir = source_type == FileType::Directory;
        let target_type = target.map(|t| type_of(locked, t)).transpose()?;
        let target_dir = target_type == Some(FileType::Directory);
        match (mode, target) {
            (RenameMode::NoReplace, Some(_)) => return Err(Error::Exists(shown(new_name))),
            (RenameMode::Exchange, None) => return Err(Error::NotFound(shown(new_name))),
            _ => {}
        }
        // `vfs_rename`: the source's name leaves its directory (`may_delete`); the
        // target's is made (`may_create`: not in an immutable directory) or replaced, or
        // for an exchange moved away (`may_delete` again).
        let mut inode = |ino| state(locked, ino).inode.clone();
        refuse_removal(&inode(old_parent), &inode(source))?;
        match target {
            Some(t) => refuse_removal(&inode(new_parent), &inode(t))?,
            None => refuse_if_immutable(&inode(new_parent), "add a name to it")?,
        }
        // The source name goes or (exchange) points elsewhere, and so does the target name
        // when it exists: both are forgotten under their directories' locks, before any
        // edit (dentry_cache.rs).
        self.dentries.forget(old_parent, old_name);
        self.dentries.forget(new_parent, new_name);
        let moving = old_parent != new_parent;
        if mode == RenameMode::Exchange {
            let target = target.expect("checked above");
            let target_type = target_type.expect("checked above");
            self.edit_dir(io, format, state(locked, new_parent), |e| {
                e.set_entry(new_name, source, source_type).map(drop)
            })?;
            self.edit_dir(io, format, state(locked, old_parent), |e| {
                e.set_entry(old_name, target, target_type).map(drop)
            })?;
            if moving {
                if source_dir {
                    self.edit_dir(io, format, state(locked, source), |e| {
                        e.set_parent(new_parent)
                    })?;
                }
                if target_dir {
                    self.edit_dir(io, format, state(locked, target), |e| {
                        e.set_parent(old_parent)
                    })?;
                }
                if source_dir != target_dir {
                    let (gains, loses) = if source_dir {
                        (new_parent, old_parent)
                    } else {
                        (old_parent, new_parent)
                    };
                    self.add_dir_link(&mut state(locked, gains).inode)?;
                    Self::drop_dir_link(&mut state(locked, loses).inode);
                }
            }
            for ino in [source, target] {
                Self::touch(state(locked, ino), false);
            }
        } else {
            if let Some(t) = target {
                match (source_dir, target_dir) {
                    (true, false) => return Err(Error::NotADirectory(shown(new_name))),
                    (false, true) => return Err(Error::IsADirectory(shown(new_name))),
                    (true, true)
                        if !self.edit_dir(io, format, state(locked, t), |e| e.is_empty())? =>
                    {
                        return Err(Error::NotEmpty(shown(new_name)));
                    }
                    _ => {}
                }
                self.edit_dir(io, format, state(locked, new_parent), |e| {
                    e.set_entry(new_name, source, source_type).map(drop)
                })?;
            } else {
                if source_dir && moving {
                    // Check the link before changing anything.
                    let n = &state(locked, new_parent).inode;
                    if n.links_count() >= MAX_LINKS - 1
                        && !self.has_feature(RoCompatFeatures::DIR_NLINK)
                    {
                        return Err(Error::TooManyLinks(shown(new_name)));
                    }
                }
                self.edit_dir(io, format, state(locked, new_parent), |e| {
                    e.add_entry(new_name, source, source_type)
                })?;
            }
            self.edit_dir(io, format, state(locked, old_parent), |e| {
                e.remove_entry(old_name)
            })?;
            if source_dir && moving {
                self.edit_dir(io, format, state(locked, source), |e| {
                    e.set_parent(new_parent)
                })?;
                Self::drop_dir_link(&mut state(locked, old_parent).inode);
                if !target_dir {
                    self.add_dir_link(&mut state(locked, new_parent).inode)?;
                }
            }
            if let Some(t) = target {
                let victim = state(locked, t);
                if target_dir {
                    victim.inode.record.links_count = 0;
                    // The replaced directory's ".." link to its parent goes. A directory
                    // moved in from elsewhere brings its own (not added above), so the
                    // parent's count only drops when the source was already its child.
                    if !moving {
                        Self::drop_dir_link(&mut state(locked, new_parent).inode);
                    }
                } else {
                    victim.inode.record.links_count = victim.inode.links_count().saturating_sub(1);
                }
                let victim = state(locked, t);
                Self::touch(victim, false);
                if victim.inode.links_count() == 0 {
                    // A replaced file too large to free in one transaction stays an orphan,
                    // freed in steps once the rename is done, as an unlinked one is.
                    let in_steps = !self.step_cuts(&victim.inode, 0, u64::MAX)?.is_empty();
                    if victim.open_count == 0 && !in_steps {
                        self.delete_inode(io, victim)?;
                    } else {
                        io.space.orphans.add(t);
                        if victim.open_count == 0 {
                            freed_later = Some(t);
                        }
                    }
                }
            }
            Self::touch(state(locked, source), false);
        }
        Self::touch(state(locked, old_parent), true);
        Self::touch(state(locked, new_parent), true);
        Ok(freed_later)
    }
}

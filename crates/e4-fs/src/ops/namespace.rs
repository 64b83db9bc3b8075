//! What the operations that change the tree of names share (create, mkdir, mknod, symlink,
//! link, unlink, rmdir and rename each have a file of their own).
//!
//! Each operation joins the running transaction, then locks the inodes it changes in
//! inode-number order (DESIGN.md, lock order), so operations in different directories share
//! no lock, and two operations on the same inodes cannot deadlock. A rename that moves
//! something to another directory first takes the filesystem's rename lock (as the kernel's
//! `s_vfs_rename_mutex`), so checking "the target is not inside the directory being moved"
//! cannot race with another such move.
//!
//! A name is looked up again once every lock is held; if it changed in between (another
//! thread renamed or removed it), the operation starts over.

use std::cell::RefCell;
use std::sync::Arc;

use e4_format::features::RoCompatFeatures;
use e4_format::inode::{flags, FileType, Inode};
use e4_format::{FormatError, Location, Problem, Structure};
use smallvec::SmallVec;

use crate::dir::editor::{DirectoryEdit, DirectoryEditor};
use crate::dir::entry::require_directory;
use crate::dir::entry::{DirEntry, DirFormat};
use crate::error::{Error, Result};
use crate::filesystem::Filesystem;
use crate::inode::cache::{InodeCache, InodeGuard, InodeHandle, InodeState};
use crate::io::meta_io::Owner;
use crate::ops::directory_blocks::InodeDirectoryBlocks;
use crate::ops::inline_directory::InlineDirectoryEditor;
use crate::txn::txn_io::TxnIo;

/// The kernel's cap on a directory's link count; past it, dir_nlink directories count 1.
pub(super) const MAX_LINKS: u16 = 65000;

pub(super) fn shown(name: &[u8]) -> String {
    String::from_utf8_lossy(name).into_owned()
}

/// The inodes an operation holds locked, with their numbers: two for an unlink or a link,
/// up to four for a rename, on the stack (a heap list was an allocation per unlink).
pub(super) type LockedInodes<'a> = SmallVec<[(u32, InodeGuard<'a>); 4]>;

/// Locks the handles' inodes in inode-number order (each once).
pub(super) fn lock_in_order<'a>(
    cache: &InodeCache,
    handles: impl IntoIterator<Item = &'a Arc<InodeHandle>>,
) -> LockedInodes<'a> {
    let mut order: SmallVec<[&Arc<InodeHandle>; 4]> = handles.into_iter().collect();
    order.sort_by_key(|h| h.ino);
    order.dedup_by_key(|h| h.ino);
    order.into_iter().map(|h| (h.ino, h.lock(cache))).collect()
}

/// The guard of inode `ino` among `locked`.
pub(super) fn state<'g, 'a>(
    locked: &'g mut [(u32, InodeGuard<'a>)],
    ino: u32,
) -> &'g mut InodeState {
    let at = locked
        .iter()
        .position(|(i, _)| *i == ino)
        .expect("the inode was locked");
    &mut locked[at].1
}

/// Two distinct entries of `locked`, mutably.
pub(super) fn two_states<'g, 'a>(
    locked: &'g mut [(u32, InodeGuard<'a>)],
    a: u32,
    b: u32,
) -> (&'g mut InodeState, &'g mut InodeState) {
    assert_ne!(a, b);
    let ia = locked.iter().position(|(i, _)| *i == a).expect("locked");
    let ib = locked.iter().position(|(i, _)| *i == b).expect("locked");
    if ia < ib {
        let (left, right) = locked.split_at_mut(ib);
        (&mut left[ia].1, &mut right[0].1)
    } else {
        let (left, right) = locked.split_at_mut(ia);
        (&mut right[0].1, &mut left[ib].1)
    }
}

impl Filesystem {
    /// Refuses an inode that is not a directory still in the tree: not one at all
    /// (ENOTDIR), or one removed while someone still held its number (ENOENT).
    pub(super) fn require_live_directory(&self, inode: &Inode) -> Result<()> {
        require_directory(inode)?;
        if inode.links_count() == 0 {
            return Err(Error::NotFound(format!("directory inode {}", inode.ino)));
        }
        Ok(())
    }

    pub(super) fn dir_format(&self) -> DirFormat {
        DirFormat::from_superblock(self.superblock())
    }

    /// Runs `f` on an editor of the locked directory `dir`: the inline editor while its
    /// entries are in the inode, the block editor otherwise.
    pub(super) fn edit_dir<T>(
        &self,
        io: &TxnIo<'_>,
        format: &DirFormat,
        dir: &mut InodeState,
        f: impl FnOnce(&mut dyn DirectoryEdit) -> Result<T>,
    ) -> Result<T> {
        if dir.inode.has_flag(flags::INLINE_DATA) {
            return f(&mut InlineDirectoryEditor {
                fs: self,
                io,
                format,
                inode: &mut dir.inode,
            });
        }
        let owner = Owner::of(&dir.inode);
        let mut blocks = InodeDirectoryBlocks {
            fs: self,
            io,
            inode: &mut dir.inode,
            window: Some(&mut dir.window),
            runs: Some(RefCell::new(&mut dir.runs)),
        };
        let mut editor = DirectoryEditor::new(io, &mut blocks, format, owner);
        f(&mut editor)
    }

    pub(super) fn lookup_locked(
        &self,
        io: &TxnIo<'_>,
        format: &DirFormat,
        dir: &mut InodeState,
        name: &[u8],
    ) -> Result<Option<DirEntry>> {
        self.edit_dir(io, format, dir, |e| e.lookup(name))
    }

    pub(super) fn has_feature(&self, feature: RoCompatFeatures) -> bool {
        self.superblock().ro_compat().contains(feature)
    }

    /// Adds one to a directory's link count for a new subdirectory: past 65,000 a dir_nlink
    /// filesystem records 1 ("many"), anything else refuses.
    pub(super) fn add_dir_link(&self, dir: &mut Inode) -> Result<()> {
        let links = dir.links_count();
        if links == 1 && self.has_feature(RoCompatFeatures::DIR_NLINK) {
            return Ok(());
        }
        if links >= MAX_LINKS - 1 {
            if self.has_feature(RoCompatFeatures::DIR_NLINK) {
                dir.record.links_count = 1;
                return Ok(());
            }
            return Err(Error::TooManyLinks(format!("directory inode {}", dir.ino)));
        }
        dir.record.links_count = links + 1;
        Ok(())
    }

    /// Takes one from a directory's link count for a removed subdirectory (a count of 1
    /// means "many" and stays, as the kernel's `ext4_dec_count`).
    pub(super) fn drop_dir_link(dir: &mut Inode) {
        if dir.record.links_count > 2 {
            dir.record.links_count -= 1;
        }
    }

    /// Sets the change time (and the modification time with `mtime`) to now, as a change
    /// stamps it (`InodeState::change_time`).
    pub(crate) fn touch(state: &mut InodeState, mtime: bool) {
        let now = state.change_time();
        state.inode.set_ctime(now);
        if mtime {
            state.inode.set_mtime(now);
        }
    }
}

/// `inode`'s file type; a mode that names none is damage in the inode, not the caller's
/// mistake.
pub(super) fn known_type(inode: &Inode) -> Result<FileType> {
    inode.file_type().ok_or_else(|| {
        FormatError::corrupt(
            Structure::Inode,
            Location::Inode(inode.ino),
            Problem::BadFileType {
                mode: inode.record.mode,
            },
        )
        .into()
    })
}

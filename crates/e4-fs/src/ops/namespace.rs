//! Changing the tree of names: create, mkdir, mknod, symlink, link, unlink, rmdir, rename.
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

use crate::io::meta_io::Owner;
use std::sync::Arc;

use e4_alloc::{InodeKind, InodeRequest};
use e4_format::dir_hash::{dir_hash, HashVersion};
use e4_format::features::{IncompatFeatures, RoCompatFeatures};
use e4_format::inode::{flags, FileType, Inode, ROOT_INO};

use crate::dir::editor::{DirectoryEdit, DirectoryEditor};
use crate::dir::entry::{check_name, DirEntry, DirFormat};
use crate::dir::inline::empty_inline_dir;
use crate::error::{Error, Result};
use crate::filesystem::Filesystem;
use crate::inode::cache::{InodeCache, InodeGuard, InodeHandle, InodeState};
use crate::map::extent_tree::ExtentTree;
use crate::ops::directory_blocks::InodeDirectoryBlocks;
use crate::ops::inline_directory::InlineDirectoryEditor;
use crate::txn::txn_io::TxnIo;
use crate::xattr::inline_data::InlineData;

/// The kernel's cap on a directory's link count; past it, dir_nlink directories count 1.
const MAX_LINKS: u16 = 65000;
/// Fast symlinks keep their target in `i_block`, which holds 60 bytes (one for the NUL).
const FAST_SYMLINK_MAX: usize = 59;

/// Who creates an inode, and with which permission bits (the file type comes from the
/// operation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Creator {
    /// Permission bits, including setuid, setgid and sticky.
    pub permissions: u16,
    pub uid: u32,
    pub gid: u32,
}

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

/// What a new inode is.
#[derive(Clone, Copy)]
enum NewKind<'a> {
    Regular,
    Directory,
    Symlink(&'a [u8]),
    Special {
        file_type: FileType,
        rdev: (u32, u32),
    },
}

impl NewKind<'_> {
    fn file_type(&self) -> FileType {
        match self {
            NewKind::Regular => FileType::Regular,
            NewKind::Directory => FileType::Directory,
            NewKind::Symlink(_) => FileType::Symlink,
            NewKind::Special { file_type, .. } => *file_type,
        }
    }
}

fn mode_bits(t: FileType) -> u16 {
    match t {
        FileType::Fifo => 0o010000,
        FileType::CharDevice => 0o020000,
        FileType::Directory => 0o040000,
        FileType::BlockDevice => 0o060000,
        FileType::Regular => 0o100000,
        FileType::Symlink => 0o120000,
        FileType::Socket => 0o140000,
    }
}

fn shown(name: &[u8]) -> String {
    String::from_utf8_lossy(name).into_owned()
}

/// A small random number for `i_generation` (not for security: it only distinguishes
/// successive uses of an inode number, for NFS handles and checksum seeds).
fn new_generation(ino: u32) -> u32 {
    use std::cell::Cell;
    thread_local!(static STATE: Cell<u64> = const { Cell::new(0) });
    STATE.with(|s| {
        let mut x = s.get();
        if x == 0 {
            let t = crate::time::now();
            x = (t.seconds as u64) ^ (u64::from(t.nanoseconds) << 20) ^ 0x9E37_79B9_7F4A_7C15;
        }
        x ^= u64::from(ino).wrapping_mul(0xD6E8_FEB8_6659_FD93);
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        s.set(x);
        (x >> 32) as u32
    })
}

/// Locks the handles' inodes in inode-number order (each once).
fn lock_in_order<'a>(
    cache: &InodeCache,
    handles: impl IntoIterator<Item = &'a Arc<InodeHandle>>,
) -> Vec<(u32, InodeGuard<'a>)> {
    let mut order: Vec<&Arc<InodeHandle>> = handles.into_iter().collect();
    order.sort_by_key(|h| h.ino);
    order.dedup_by_key(|h| h.ino);
    order.into_iter().map(|h| (h.ino, h.lock(cache))).collect()
}

/// The guard of inode `ino` among `locked`.
fn state<'g, 'a>(locked: &'g mut [(u32, InodeGuard<'a>)], ino: u32) -> &'g mut InodeState {
    let at = locked
        .iter()
        .position(|(i, _)| *i == ino)
        .expect("the inode was locked");
    &mut locked[at].1
}

/// Two distinct entries of `locked`, mutably.
fn two_states<'g, 'a>(
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
    fn dir_format(&self) -> DirFormat {
        DirFormat::from_superblock(self.superblock())
    }

    fn require_directory(&self, inode: &Inode) -> Result<()> {
        if inode.file_type() != Some(FileType::Directory) {
            return Err(Error::NotADirectory(format!("inode {}", inode.ino)));
        }
        if inode.links_count() == 0 {
            // Removed while someone still held its number.
            return Err(Error::NotFound(format!("directory inode {}", inode.ino)));
        }
        Ok(())
    }

    /// Runs `f` on an editor of the locked directory `dir`: the inline editor while its
    /// entries are in the inode, the block editor otherwise.
    fn edit_dir<T>(
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
        };
        let mut editor = DirectoryEditor::new(io, &mut blocks, format, owner);
        f(&mut editor)
    }

    fn lookup_locked(
        &self,
        io: &TxnIo<'_>,
        format: &DirFormat,
        dir: &mut InodeState,
        name: &[u8],
    ) -> Result<Option<DirEntry>> {
        self.edit_dir(io, format, dir, |e| e.lookup(name))
    }

    fn has_feature(&self, feature: RoCompatFeatures) -> bool {
        self.superblock().ro_compat().contains(feature)
    }

    /// Adds one to a directory's link count for a new subdirectory: past 65,000 a dir_nlink
    /// filesystem records 1 ("many"), anything else refuses.
    fn add_dir_link(&self, dir: &mut Inode) -> Result<()> {
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
    fn drop_dir_link(dir: &mut Inode) {
        if dir.record.links_count > 2 {
            dir.record.links_count -= 1;
        }
    }

    /// Sets the change time (and the modification time with `mtime`) to now.
    pub(crate) fn touch(inode: &mut Inode, mtime: bool) {
        let now = crate::time::now();
        inode.set_ctime(now);
        if mtime {
            inode.set_mtime(now);
        }
    }

    /// Creates a regular file `name` in directory `parent`; returns its inode number.
    pub fn create(&self, parent: u32, name: &[u8], creator: Creator) -> Result<u32> {
        self.make_node(parent, name, creator, NewKind::Regular)
    }

    /// Creates directory `name` in `parent`.
    pub fn mkdir(&self, parent: u32, name: &[u8], creator: Creator) -> Result<u32> {
        self.make_node(parent, name, creator, NewKind::Directory)
    }

    /// Creates a symlink `name` in `parent` pointing at `target` (up to 4,095 bytes; fast,
    /// in the inode, when it fits).
    pub fn symlink(
        &self,
        parent: u32,
        name: &[u8],
        target: &[u8],
        creator: Creator,
    ) -> Result<u32> {
        if target.is_empty() || target.len() >= 4096 {
            return Err(Error::NameTooLong(format!(
                "symlink target of {} bytes",
                target.len()
            )));
        }
        self.make_node(parent, name, creator, NewKind::Symlink(target))
    }

    /// Creates a special file (fifo, socket, character or block device) `name` in `parent`.
    pub fn mknod(
        &self,
        parent: u32,
        name: &[u8],
        file_type: FileType,
        rdev: (u32, u32),
        creator: Creator,
    ) -> Result<u32> {
        match file_type {
            FileType::Fifo | FileType::Socket | FileType::CharDevice | FileType::BlockDevice => {}
            _ => return Err(Error::Invalid(format!("mknod of a {file_type:?}"))),
        }
        self.make_node(parent, name, creator, NewKind::Special { file_type, rdev })
    }

    /// Makes and links a new inode; a full volume whose free blocks are only held in other
    /// inodes' reservation windows (a growing directory's, an open file's) gives them back
    /// and tries once more, as a write does.
    fn make_node(
        &self,
        parent: u32,
        name: &[u8],
        creator: Creator,
        kind: NewKind<'_>,
    ) -> Result<u32> {
        self.retry_when_full(|| self.make_node_once(parent, name, creator, kind))
    }

    /// [`Self::make_node`] once: on any error, nothing is left changed.
    fn make_node_once(
        &self,
        parent: u32,
        name: &[u8],
        creator: Creator,
        kind: NewKind<'_>,
    ) -> Result<u32> {
        check_name(name)?;
        let writer = self.writer()?;
        let ino = {
            let txn = writer.begin()?;
            let io = writer.io(self, &txn);
            let format = self.dir_format();
            let parent_handle = self.inode_handle(parent)?;
            let is_dir = matches!(kind, NewKind::Directory);
            // The new inode is allocated and filled before the directory is locked, so
            // that creators in one directory wait for each other only while the name goes
            // in. It gets its handle before the name exists, so a reader who finds the name
            // finds this inode, not a stale record from the table. What it took is given
            // back below if the name cannot be added; its failure is reported only once
            // the name is known to be absent (so "exists" comes before "no space", as in
            // the kernel).
            let mut prepared =
                Some(self.prepare_new_inode(&io, &format, &kind, parent, name, creator));
            let made = match &prepared {
                Some(Ok(handle)) => Some(handle.clone()),
                _ => None,
            };
            let mut parent_state = parent_handle.lock(&self.inodes);
            let parent_links = parent_state.inode.links_count();
            let mut make = || -> Result<u32> {
                if is_dir
                    && parent_links >= MAX_LINKS - 1
                    && !self.has_feature(RoCompatFeatures::DIR_NLINK)
                {
                    return Err(Error::TooManyLinks(shown(name)));
                }
                match prepared.take() {
                    Some(Ok(handle)) => Ok(handle.ino),
                    Some(Err(e)) => Err(e),
                    None => unreachable!("add_new makes one inode"),
                }
            };
            let linked = self
                .require_directory(&parent_state.inode)
                .and_then(|()| {
                    self.edit_dir(&io, &format, &mut parent_state, |e| {
                        e.add_new(name, kind.file_type(), &mut make)
                    })
                })
                .and_then(|ino| {
                    if is_dir {
                        self.add_dir_link(&mut parent_state.inode)?;
                    }
                    Ok(ino)
                });
            let (ino, handle) = match (linked, made) {
                (Ok(ino), Some(handle)) => (ino, handle),
                (Err(e), Some(handle)) => {
                    // Give back what the new inode took; the directory is unchanged.
                    // Nothing else can hold the new inode's lock: no name leads to it.
                    let ino = handle.ino;
                    let mut new_state = handle.lock(&self.inodes);
                    let released = self.release_inode_space(&io, &mut new_state);
                    new_state.deleted = true;
                    self.inodes.remove(ino);
                    let freed = writer
                        .space
                        .inodes
                        .free(ino, is_dir, txn.slot)
                        .map_err(Error::from_inode_allocation);
                    return Err(e.after_undo(released.and(freed)));
                }
                (Err(e), None) => return Err(e),
                (Ok(_), None) => unreachable!("add_new returns an inode only `make` made"),
            };
            Self::touch(&mut parent_state.inode, true);
            self.inodes.mark_dirty(&parent_handle);
            self.inodes.mark_dirty(&handle);
            ino
        };
        self.commit_if_needed()?;
        Ok(ino)
    }

    /// Allocates and fills a new inode for `name` in `parent` and makes its handle; on
    /// failure nothing it took is kept.
    fn prepare_new_inode(
        &self,
        io: &TxnIo<'_>,
        format: &DirFormat,
        kind: &NewKind<'_>,
        parent: u32,
        name: &[u8],
        creator: Creator,
    ) -> Result<Arc<InodeHandle>> {
        let is_dir = matches!(kind, NewKind::Directory);
        let new = io
            .space
            .inodes
            .allocate(
                &InodeRequest {
                    parent,
                    parent_hint: None,
                    kind: self.new_inode_kind(kind, parent, name),
                    slot: io.slot,
                },
                &io.space.blocks,
            )
            .map_err(Error::from_inode_allocation)?;
        let ino = new.ino;
        let mut inode = self.new_inode(ino, kind, creator);
        if let Err(e) = self.fill_new_inode(io, format, &mut inode, kind, parent) {
            let mut doomed = InodeState::detached(inode);
            let released = self.release_inode_space(io, &mut doomed);
            let freed = io
                .space
                .inodes
                .free(ino, is_dir, io.slot)
                .map_err(Error::from_inode_allocation);
            return Err(e.after_undo(released.and(freed)));
        }
        Ok(self.inodes.insert_new(inode))
    }

    /// How the inode allocator should place a new inode: Orlov spreads directories made in
    /// the root by their name's hash.
    fn new_inode_kind(&self, kind: &NewKind<'_>, parent: u32, name: &[u8]) -> InodeKind {
        match (kind, parent) {
            (NewKind::Directory, ROOT_INO) => {
                let sb = self.superblock();
                let version = HashVersion::from_disk(sb.def_hash_version, sb.unsigned_dir_hash())
                    .unwrap_or(HashVersion::HalfMd4);
                InodeKind::TopDirectory {
                    name_hash: dir_hash(version, name, &sb.hash_seed).major,
                }
            }
            (NewKind::Directory, _) => InodeKind::Directory,
            _ => InodeKind::Other,
        }
    }

    /// A fresh inode record: mode, owner, times, link count, and the mapping flags the
    /// kernel gives each kind.
    fn new_inode(&self, ino: u32, kind: &NewKind<'_>, creator: Creator) -> Inode {
        let sb = self.superblock();
        let file_type = kind.file_type();
        let mode = mode_bits(file_type) | (creator.permissions & 0o7777);
        let mut inode = Inode::new(ino, sb.inode_size() as usize, mode, new_generation(ino));
        inode.set_uid(creator.uid);
        inode.set_gid(creator.gid);
        let now = crate::time::now();
        inode.set_atime(now);
        inode.set_mtime(now);
        inode.set_ctime(now);
        inode.set_crtime(now);
        inode.record.links_count = if file_type == FileType::Directory {
            2
        } else {
            1
        };
        let extents = sb.incompat().contains(IncompatFeatures::EXTENTS);
        let mapped = match kind {
            NewKind::Regular | NewKind::Directory => true,
            NewKind::Symlink(target) => target.len() > FAST_SYMLINK_MAX,
            NewKind::Special { .. } => false,
        };
        if extents && mapped {
            inode.record.flags |= flags::EXTENTS;
            ExtentTree::init_empty(&mut inode.record.block);
        }
        inode
    }

    /// What a new inode holds before it is linked: a directory's first block, a symlink's
    /// target, a device number.
    fn fill_new_inode(
        &self,
        io: &TxnIo<'_>,
        format: &DirFormat,
        inode: &mut Inode,
        kind: &NewKind<'_>,
        parent: u32,
    ) -> Result<()> {
        match kind {
            NewKind::Regular => Ok(()),
            NewKind::Directory => {
                if self.start_inline_dir(inode, parent)? {
                    return Ok(());
                }
                let owner = Owner::of(inode);
                let mut blocks = InodeDirectoryBlocks {
                    fs: self,
                    io,
                    inode,
                    window: None,
                };
                DirectoryEditor::new(io, &mut blocks, format, owner).init(parent)
            }
            NewKind::Symlink(target) if target.len() <= FAST_SYMLINK_MAX => {
                inode.record.block[..target.len()].copy_from_slice(target);
                inode.set_size(target.len() as u64);
                Ok(())
            }
            NewKind::Symlink(target) => {
                let mut state = InodeState::detached(inode.clone());
                self.write_first_blocks(io, &mut state, target)?;
                *inode = state.inode;
                Ok(())
            }
            NewKind::Special { rdev, .. } => {
                let (major, minor) = *rdev;
                if major < 256 && minor < 256 {
                    inode.record.block[..4].copy_from_slice(&((major << 8) | minor).to_le_bytes());
                } else {
                    let new = (minor & 0xFF) | (major << 8) | ((minor & !0xFF) << 12);
                    inode.record.block[4..8].copy_from_slice(&new.to_le_bytes());
                }
                Ok(())
            }
        }
    }

    /// Makes new directory `inode` an empty inline one (`ext4_try_create_inline_dir`) when
    /// the filesystem has inline_data and the inode has room for `system.data`; false
    /// otherwise (the directory gets a block).
    fn start_inline_dir(&self, inode: &mut Inode, parent: u32) -> Result<bool> {
        if !self
            .superblock()
            .incompat()
            .contains(IncompatFeatures::INLINE_DATA)
        {
            return Ok(false);
        }
        let mut data = InlineData::load(inode)?;
        let content = empty_inline_dir(parent);
        if !data.store(inode, &content) {
            return Ok(false);
        }
        inode.set_size(content.len() as u64);
        Ok(true)
    }

    /// Adds a hard link `name` in `parent` to inode `ino` (not a directory).
    pub fn link(&self, ino: u32, parent: u32, name: &[u8]) -> Result<()> {
        check_name(name)?;
        self.check_caller_ino(ino)?;
        self.check_caller_ino(parent)?;
        let writer = self.writer()?;
        {
            let txn = writer.begin()?;
            let io = writer.io(self, &txn);
            let format = self.dir_format();
            let handles = [self.inode_handle(parent)?, self.inode_handle(ino)?];
            let mut locked = lock_in_order(&self.inodes, &handles);
            if parent == ino {
                return Err(Error::Invalid("a directory cannot be hard-linked".into()));
            }
            let (dir, target) = two_states(&mut locked, parent, ino);
            self.require_directory(&dir.inode)?;
            let file_type = target
                .inode
                .file_type()
                .ok_or_else(|| Error::Invalid(format!("inode {ino} has no valid file type")))?;
            if file_type == FileType::Directory {
                return Err(Error::Invalid("a directory cannot be hard-linked".into()));
            }
            if target.inode.links_count() == 0 {
                return Err(Error::NotFound(format!("inode {ino}")));
            }
            if target.inode.links_count() >= MAX_LINKS {
                return Err(Error::TooManyLinks(shown(name)));
            }
            if self.lookup_locked(&io, &format, dir, name)?.is_some() {
                return Err(Error::Exists(shown(name)));
            }
            self.edit_dir(&io, &format, dir, |e| e.add_entry(name, ino, file_type))?;
            target.inode.record.links_count += 1;
            Self::touch(&mut target.inode, false);
            Self::touch(&mut dir.inode, true);
            drop(locked);
            for h in &handles {
                self.inodes.mark_dirty(h);
            }
        }
        self.commit_if_needed()
    }

    /// Removes `name` (not a directory) from `parent`; the inode is freed with its last link.
    pub fn unlink(&self, parent: u32, name: &[u8]) -> Result<()> {
        self.remove_name(parent, name, false)
    }

    /// Removes the empty directory `name` from `parent`.
    pub fn rmdir(&self, parent: u32, name: &[u8]) -> Result<()> {
        self.remove_name(parent, name, true)
    }

    fn remove_name(&self, parent: u32, name: &[u8], directory: bool) -> Result<()> {
        if name == b"." || name == b".." {
            return Err(Error::Invalid(format!("cannot remove {:?}", shown(name))));
        }
        check_name(name)?;
        let writer = self.writer()?;
        loop {
            let txn = writer.begin()?;
            let io = writer.io(self, &txn);
            let format = self.dir_format();
            let parent_handle = self.inode_handle(parent)?;
            let mut p = parent_handle.lock(&self.inodes);
            self.require_directory(&p.inode)?;
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
                Some(v) => vec![(parent, p), (victim, v)],
                None => {
                    drop(p);
                    let mut locked = lock_in_order(&self.inodes, [&parent_handle, &victim_handle]);
                    let dir = state(&mut locked, parent);
                    match self.edit_dir(&io, &format, dir, |e| e.locate(name))? {
                        Some(again) if again.entry.ino == victim => located = again,
                        _ => continue,
                    }
                    locked
                }
            };
            let (dir, target) = two_states(&mut locked, parent, victim);
            let is_dir = target.inode.file_type() == Some(FileType::Directory);
            match (directory, is_dir) {
                (false, true) => return Err(Error::IsADirectory(shown(name))),
                (true, false) => return Err(Error::NotADirectory(shown(name))),
                _ => {}
            }
            if is_dir {
                self.require_directory(&target.inode)?;
                if !self.edit_dir(&io, &format, target, |e| e.is_empty())? {
                    return Err(Error::NotEmpty(shown(name)));
                }
            }
            // Forgotten under the directory's lock, before the edit (dentry_cache.rs).
            self.dentries.forget(parent, name);
            self.edit_dir(&io, &format, dir, |e| e.remove_located(located))?;
            if is_dir {
                Self::drop_dir_link(&mut dir.inode);
                target.inode.record.links_count = 0;
            } else {
                target.inode.record.links_count = target.inode.links_count().saturating_sub(1);
            }
            Self::touch(&mut dir.inode, true);
            Self::touch(&mut target.inode, false);
            // The directory is done with: other operations in it need not wait for the
            // victim's freeing, which is most of an unlink of the last link (the kernel too
            // evicts the inode after the directory's lock is dropped). The victim stays
            // locked, so nothing that finds it by number sees it half freed.
            let at = locked
                .iter()
                .position(|(ino, _)| *ino == parent)
                .expect("the directory was locked");
            drop(locked.swap_remove(at));
            self.inodes.mark_dirty(&parent_handle);
            let target = state(&mut locked, victim);
            let freed = target.inode.links_count() == 0 && target.open_count == 0;
            if freed {
                self.delete_inode(&io, target)?;
            } else if target.inode.links_count() == 0 {
                writer.space.orphans.add(victim);
            }
            drop(locked);
            if !freed {
                self.inodes.mark_dirty(&victim_handle);
            }
            break;
        }
        self.commit_if_needed()
    }

    /// Frees an inode whose last link is gone and that nobody has open: its blocks and its
    /// number when the running transaction commits, its xattr block reference; writes its
    /// final record (links 0, dtime set) into the inode table now.
    pub(crate) fn delete_inode(&self, io: &TxnIo<'_>, state: &mut InodeState) -> Result<()> {
        self.release_inode_space(io, state)?;
        let is_dir = state.inode.file_type() == Some(FileType::Directory);
        let now = crate::time::now();
        state.inode.record.dtime = (now.seconds as u32).max(1);
        state.inode.record.links_count = 0;
        state.inode.set_size(0);
        state.deleted = true;
        self.inode_table.write_record(&self.store, &state.inode)?;
        // Out of the cache before the number can be handed out again (after the commit).
        self.inodes.remove(state.inode.ino);
        io.txns.free_inode(state.inode.ino, is_dir, io.slot);
        Ok(())
    }

    /// Frees every block an inode owns (data, tree, xattr block reference) and its window.
    fn release_inode_space(&self, io: &TxnIo<'_>, state: &mut InodeState) -> Result<()> {
        io.space.blocks.release_window(&mut state.window, io.slot);
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
        loop {
            let txn = writer.begin()?;
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
                self.require_directory(&o.inode)?;
                let source = self
                    .lookup_locked(&io, &format, o, old_name)?
                    .ok_or_else(|| Error::NotFound(shown(old_name)))?;
                let n = state(&mut dirs, new_parent);
                self.require_directory(&n.inode)?;
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
            self.rename_locked(
                &io,
                &format,
                &mut locked,
                old_parent,
                old_name,
                new_parent,
                new_name,
                source,
                target,
                mode,
            )?;
            drop(locked);
            for h in &handles {
                self.inodes.mark_dirty(h);
            }
            break;
        }
        self.commit_if_needed()
    }

    /// Whether directory `ancestor` is `dir` or one of its ancestors, walking ".." up to
    /// the root. Called with no inode locked and the rename lock held, so no directory
    /// moves meanwhile (only renames between directories move one).
    fn is_ancestor(&self, ancestor: u32, dir: u32) -> Result<bool> {
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

    #[allow(clippy::too_many_arguments)]
    fn rename_locked(
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
    ) -> Result<()> {
        let type_of = |locked: &mut [(u32, InodeGuard<'_>)], ino: u32| {
            state(locked, ino)
                .inode
                .file_type()
                .ok_or_else(|| Error::Invalid(format!("inode {ino} has no valid file type")))
        };
        let source_type = type_of(locked, source)?;
        let source_dir = source_type == FileType::Directory;
        let target_type = target.map(|t| type_of(locked, t)).transpose()?;
        let target_dir = target_type == Some(FileType::Directory);
        match (mode, target) {
            (RenameMode::NoReplace, Some(_)) => return Err(Error::Exists(shown(new_name))),
            (RenameMode::Exchange, None) => return Err(Error::NotFound(shown(new_name))),
            _ => {}
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
                Self::touch(&mut state(locked, ino).inode, false);
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
                Self::touch(&mut victim.inode, false);
                if victim.inode.links_count() == 0 {
                    if victim.open_count == 0 {
                        self.delete_inode(io, victim)?;
                    } else {
                        io.space.orphans.add(t);
                    }
                }
            }
            Self::touch(&mut state(locked, source).inode, false);
        }
        Self::touch(&mut state(locked, old_parent).inode, true);
        Self::touch(&mut state(locked, new_parent).inode, true);
        Ok(())
    }
}

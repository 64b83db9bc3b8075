//! Making inodes with names: create, mkdir, mknod, symlink. The new inode is made and
//! filled before the parent directory is locked (`prepare_new_inode`); under the lock only
//! the entry goes in, and a failure gives the inode back.

use std::sync::Arc;

use e4_alloc::{InodeKind, InodeRequest};
use e4_format::dir_hash::{dir_hash, HashVersion};
use e4_format::features::{IncompatFeatures, RoCompatFeatures};
use e4_format::inode::{flags, FileType, Inode, ROOT_INO};

use crate::dir::editor::{DirectoryEditor, ADD_ENTRY_CREDITS};
use crate::dir::entry::{check_name, DirFormat};
use crate::dir::inline::empty_inline_dir;
use crate::error::{Error, Result, Shortage};
use crate::filesystem::Filesystem;
use crate::inode::cache::{InodeHandle, InodeState};
use crate::inode::user_flags::{self, refuse_if_immutable};
use crate::io::credits::{INODE, NEW_INODE};
use crate::io::meta_io::Owner;
use crate::map::extent_tree::ExtentTree;
use crate::ops::acl_inheritance::{acls_for_new_inode, InheritedAcls};
use crate::ops::directory_blocks::InodeDirectoryBlocks;
use crate::ops::namespace::{shown, MAX_LINKS};
use crate::txn::txn_io::TxnIo;
use crate::xattr::inline_data::InlineData;

/// Fast symlinks keep their target in `i_block`, which holds 60 bytes (one for the NUL).
pub(super) const FAST_SYMLINK_MAX: usize = 59;

/// Linux's `PATH_MAX`: the longest path (with its NUL) a system call takes.
const PATH_MAX: usize = 4096;

/// Who creates an inode, and with which permission bits (the file type comes from the
/// operation).
///
/// `permissions` are what the VFS hands ext4 with a setgid bit the caller may not set
/// already dropped (`mode_strip_sgid`, which needs the caller's groups and `CAP_FSETID`);
/// the engine then does what `inode_init_owner` does (in a set-group-ID directory the new
/// inode takes the directory's group instead of `gid`, and a new directory keeps the
/// setgid bit) and what `posix_acl_create` does: in a directory with a default ACL the
/// new inode's permissions are masked by that ACL and `umask` is ignored; elsewhere
/// `umask` is taken off (a caller that applied its umask already passes 0).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Creator {
    /// Permission bits, including setuid, setgid and sticky.
    pub permissions: u16,
    pub uid: u32,
    pub gid: u32,
    /// The creating process's umask, for the engine to apply (see above).
    pub umask: u16,
}

/// `S_ISGID`: on a directory, new inodes in it take its group.
const SET_GROUP_ID: u16 = 0o2000;

impl Creator {
    /// The owner and permissions of a new inode in a directory with mode `parent_mode` and
    /// group `parent_gid` (`inode_init_owner` in fs/inode.c).
    pub(super) fn in_directory(self, parent_mode: u16, parent_gid: u32, is_dir: bool) -> Self {
        if parent_mode & SET_GROUP_ID == 0 {
            return self;
        }
        Creator {
            permissions: if is_dir {
                self.permissions | SET_GROUP_ID
            } else {
                self.permissions
            },
            gid: parent_gid,
            ..self
        }
    }
}

/// What a new inode takes from its directory: the flags it inherits (masked for its type
/// by `new_inode`) and its POSIX ACLs.
pub(super) struct Inherited {
    pub flags: u32,
    pub acls: InheritedAcls,
}

/// What a new inode is.
#[derive(Clone, Copy)]
pub(super) enum NewKind<'a> {
    Regular,
    Directory,
    Symlink(&'a [u8]),
    Special {
        file_type: FileType,
        rdev: (u32, u32),
    },
}

/// Credits of a create: the directory's inode, the new inode and its entry. A directory's
/// first block and a symlink's target blocks declare their own as they are allocated.
const CREATE_CREDITS: u32 = INODE + NEW_INODE + ADD_ENTRY_CREDITS;

impl NewKind<'_> {
    pub(super) fn file_type(&self) -> FileType {
        match self {
            NewKind::Regular => FileType::Regular,
            NewKind::Directory => FileType::Directory,
            NewKind::Symlink(_) => FileType::Symlink,
            NewKind::Special { file_type, .. } => *file_type,
        }
    }
}

pub(super) fn mode_bits(t: FileType) -> u16 {
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

/// A small random number for `i_generation` (not for security: it only distinguishes
/// successive uses of an inode number, for NFS handles and checksum seeds).
pub(super) fn new_generation(ino: u32) -> u32 {
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

impl Filesystem {
    /// Creates a regular file `name` in directory `parent`; returns its inode number.
    pub fn create(&self, parent: u32, name: &[u8], creator: Creator) -> Result<u32> {
        self.make_node(parent, name, creator, NewKind::Regular)
    }

    /// Creates directory `name` in `parent`.
    pub fn mkdir(&self, parent: u32, name: &[u8], creator: Creator) -> Result<u32> {
        self.make_node(parent, name, creator, NewKind::Directory)
    }

    /// Creates a symlink `name` in `parent` pointing at `target` (fast, in the inode, when it
    /// fits). The target and its NUL must fit in one block and in `PATH_MAX`: up to 1,023
    /// bytes on 1 KiB blocks, 2,047 on 2 KiB, 4,095 otherwise. As the kernel answers, a
    /// longer one is [`Error::SymlinkTargetTooLong`] and an empty one [`Error::NotFound`].
    pub fn symlink(
        &self,
        parent: u32,
        name: &[u8],
        target: &[u8],
        creator: Creator,
    ) -> Result<u32> {
        if target.is_empty() {
            return Err(Error::NotFound("an empty symlink target".to_string()));
        }
        let max = self.max_symlink_target();
        if target.len() > max {
            return Err(Error::SymlinkTargetTooLong {
                length: target.len(),
                max,
            });
        }
        self.make_node(parent, name, creator, NewKind::Symlink(target))
    }

    /// The longest symlink target this filesystem takes: `ext4_symlink` refuses a target
    /// whose length with its NUL passes the block size, and the VFS one that does not fit
    /// in `PATH_MAX` with its NUL (`getname`).
    pub fn max_symlink_target(&self) -> usize {
        let block_size = self.superblock().block_size() as usize;
        block_size.min(PATH_MAX) - 1
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
    pub(super) fn make_node(
        &self,
        parent: u32,
        name: &[u8],
        creator: Creator,
        kind: NewKind<'_>,
    ) -> Result<u32> {
        self.retry_when_full(|| self.make_node_once(parent, name, creator, kind))
    }

    /// [`Self::make_node`] once: on any error, nothing is left changed.
    pub(super) fn make_node_once(
        &self,
        parent: u32,
        name: &[u8],
        creator: Creator,
        kind: NewKind<'_>,
    ) -> Result<u32> {
        check_name(name)?;
        let writer = self.writer()?;
        let ino = {
            let txn = writer.begin(self, CREATE_CREDITS)?;
            let io = writer.io(self, &txn);
            let format = self.dir_format();
            let parent_handle = self.inode_handle(parent)?;
            let is_dir = matches!(kind, NewKind::Directory);
            let (creator, parent_flags, parent_default) = {
                let p = &parent_handle.read(&self.inodes).inode;
                (
                    creator.in_directory(p.record.mode, p.gid(), is_dir),
                    p.flags(),
                    self.default_acl(p)?,
                )
            };
            let (permissions, acls) = acls_for_new_inode(
                creator.permissions,
                creator.umask,
                kind.file_type(),
                parent,
                parent_default,
            )?;
            let creator = Creator {
                permissions,
                ..creator
            };
            let inherited = Inherited {
                flags: parent_flags,
                acls,
            };
            // The new inode is allocated and filled before the directory is locked, so
            // that creators in one directory wait for each other only while the name goes
            // in. It gets its handle before the name exists, so a reader who finds the name
            // finds this inode, not a stale record from the table. What it took is given
            // back below if the name cannot be added; its failure is reported only once
            // the name is known to be absent (so "exists" comes before "no space", as in
            // the kernel).
            let mut prepared = Some(
                self.prepare_new_inode(&io, &format, &kind, parent, name, creator, &inherited),
            );
            let made = match &prepared {
                Some(Ok(handle)) => Some(handle.clone()),
                _ => None,
            };
            let mut parent_state = parent_handle.lock(&self.inodes);
            // Put back if the name cannot be added: adding it may have grown the directory
            // (a full one-block directory gets block 1 before the index can fail).
            let parent_before = parent_state.inode.clone();
            let parent_links = parent_state.inode.links_count();
            // `may_create`: an immutable directory takes no new name (once the name is
            // known to be new: "exists" comes first, as in the kernel).
            let mut refusal = refuse_if_immutable(&parent_state.inode, "add a name to it").err();
            let mut make = || -> Result<u32> {
                if let Some(e) = refusal.take() {
                    return Err(e);
                }
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
                .require_live_directory(&parent_state.inode)
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
                    // Put everything back: the directory's blocks and record as they were,
                    // and what the new inode took (its blocks through the undo log, its
                    // number here). Nothing else can hold the new inode's lock: no name
                    // leads to it.
                    parent_state.inode = parent_before;
                    let ino = handle.ino;
                    let mut new_state = handle.lock(&self.inodes);
                    new_state.deleted = true;
                    self.inodes.remove(ino);
                    let undone = io.undo();
                    let freed = writer
                        .space
                        .inodes
                        .free(ino, is_dir, txn.slot)
                        .map_err(Error::from_inode_allocation);
                    return Err(e.after_undo(undone.and(freed)));
                }
                (Err(e), None) => return Err(e),
                (Ok(_), None) => unreachable!("add_new returns an inode only `make` made"),
            };
            Self::touch(&mut parent_state, true);
            self.inodes.mark_dirty(&parent_handle);
            self.inodes.mark_dirty(&handle);
            ino
        };
        self.commit_if_needed()?;
        Ok(ino)
    }

    /// Allocates and fills a new inode for `name` in `parent`, with what it `inherited`
    /// from there, and makes its handle; on failure nothing it took is kept.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn prepare_new_inode(
        &self,
        io: &TxnIo<'_>,
        format: &DirFormat,
        kind: &NewKind<'_>,
        parent: u32,
        name: &[u8],
        creator: Creator,
        inherited: &Inherited,
    ) -> Result<Arc<InodeHandle>> {
        let is_dir = matches!(kind, NewKind::Directory);
        io.space.may_allocate(Shortage::Inodes)?;
        let new = io
            .space
            .inodes
            .allocate(
                &InodeRequest {
                    parent,
                    parent_hint: None,
                    kind: self.new_inode_kind(kind, parent, name),
                    slot: io.txn.slot,
                },
                &io.space.blocks,
            )
            .map_err(Error::from_inode_allocation)?;
        let ino = new.ino;
        let mut inode = self.new_inode(ino, kind, creator, inherited.flags);
        // The ACLs first, as `ext4_new_inode` does: an inline directory's `system.data`
        // takes what room is left.
        let filled = self
            .store_inherited_acls(io, &mut inode, &inherited.acls)
            .and_then(|()| self.fill_new_inode(io, format, &mut inode, kind, parent));
        if let Err(e) = filled {
            let mut doomed = InodeState::detached(inode);
            let released = self.release_inode_space(io, &mut doomed);
            let freed = io
                .space
                .inodes
                .free(ino, is_dir, io.txn.slot)
                .map_err(Error::from_inode_allocation);
            return Err(e.after_undo(released.and(freed)));
        }
        Ok(self.inodes.insert_new(inode))
    }

    /// How the inode allocator should place a new inode: Orlov spreads directories made in
    /// the root by their name's hash.
    pub(super) fn new_inode_kind(&self, kind: &NewKind<'_>, parent: u32, name: &[u8]) -> InodeKind {
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

    /// A fresh inode record: mode, owner, times, link count, the flags it inherits from a
    /// directory with `parent_flags` (`ext4_new_inode`), and the mapping flags the kernel
    /// gives each kind.
    pub(super) fn new_inode(
        &self,
        ino: u32,
        kind: &NewKind<'_>,
        creator: Creator,
        parent_flags: u32,
    ) -> Inode {
        let sb = self.superblock();
        let file_type = kind.file_type();
        let mode = mode_bits(file_type) | (creator.permissions & 0o7777);
        let mut inode = Inode::new(ino, sb.inode_size() as usize, mode, new_generation(ino));
        inode.set_uid(creator.uid);
        inode.set_gid(creator.gid);
        // A new inode's times: nobody has read them.
        let now = crate::time::change_time(e4_format::inode::Timestamp::default(), false);
        inode.set_atime(now);
        inode.set_mtime(now);
        inode.set_ctime(now);
        inode.set_crtime(now);
        inode.record.flags = user_flags::inherited(parent_flags, file_type);
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
    pub(super) fn fill_new_inode(
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
                    runs: None,
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
    pub(super) fn start_inline_dir(&self, inode: &mut Inode, parent: u32) -> Result<bool> {
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
}

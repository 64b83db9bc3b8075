//! Changing extended attributes through the API: which names may be written, POSIX ACLs
//! converted to their disk form, and the change made inside a transaction under the
//! inode's lock. Where the attributes are stored is [`crate::xattr::store`]'s business.

use e4_format::features::CompatFeatures;
use e4_format::inode::{flags, FileType, Inode};
use e4_format::posix_acl::PosixAcl;
use e4_format::xattr::split_name;

use crate::error::{Error, Result};
use crate::filesystem::Filesystem;
use crate::inode::cache::InodeState;
use crate::inode::user_flags::refuse_if_protected;
use crate::io::credits::{INODE, NEW_BLOCK};
use crate::txn::txn_io::TxnIo;
use crate::xattr::store::{release_xattr_block, set_file_acl, InodeXattrs, XattrKey};

/// How [`Filesystem::set_xattr`] treats an existing attribute.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum XattrSet {
    /// Create it or replace it.
    #[default]
    Either,
    /// Fail with [`crate::Error::Exists`] if it exists (XATTR_CREATE).
    Create,
    /// Fail with [`crate::Error::NoAttribute`] if it does not exist (XATTR_REPLACE).
    Replace,
}

/// The longest attribute name, prefix included (`XATTR_NAME_MAX`).
const MAX_NAME_LEN: usize = 255;

/// Name indexes with a meaning of their own (`e_name_index`).
const INDEX_ACL_ACCESS: u8 = 2;
const INDEX_ACL_DEFAULT: u8 = 3;

/// The permission bits an access ACL decides (`S_IRWXUGO`).
const RWX_BITS: u16 = 0o777;

/// The index and stored name of a name the API may write. As in the kernel, only the
/// `user.`, `trusted.` and `security.` namespaces and the two ACL names have handlers; other
/// `system.` names (`system.data` holds inline data) belong to the engine.
fn writable_name(name: &[u8]) -> Result<XattrKey<'_>> {
    let shown = || String::from_utf8_lossy(name).into_owned();
    if name.len() > MAX_NAME_LEN {
        return Err(Error::NameTooLong(shown()));
    }
    if name.contains(&0) {
        return Err(Error::Invalid(format!(
            "{}: a NUL byte in the name",
            shown()
        )));
    }
    let Some((index, stored)) = split_name(name) else {
        return Err(Error::NotSupported(format!(
            "{}: no namespace of that prefix",
            shown()
        )));
    };
    match index {
        INDEX_ACL_ACCESS | INDEX_ACL_DEFAULT => {}
        1 | 4 | 6 if !stored.is_empty() => {}
        1 | 4 | 6 => return Err(Error::Invalid(format!("{}: an empty name", shown()))),
        _ => {
            return Err(Error::NotSupported(format!(
                "{}: not a name the system namespace lets callers write",
                shown()
            )))
        }
    }
    Ok(XattrKey {
        index,
        name: stored,
    })
}

/// What an operation does to an attribute once it knows whether it exists.
#[derive(Debug, Clone, Copy)]
pub(super) enum XattrChange<'a> {
    /// Store this value (`how` checked first).
    Set { value: &'a [u8], how: XattrSet },
    /// Remove it; it must exist.
    Remove,
    /// Remove it if it exists (`how` checked first): an ACL with no entries, or an access
    /// ACL that the permission bits express.
    Clear { how: XattrSet },
}

impl<'a> XattrChange<'a> {
    /// What becomes of the attribute, whose value is now `current`: `None` when nothing
    /// changes, else its new value (`Some(None)`: removed). Errors per `how`.
    fn resolve(
        self,
        current: Option<&[u8]>,
        name: impl Fn() -> String,
    ) -> Result<Option<Option<&'a [u8]>>> {
        let how = match self {
            XattrChange::Set { how, .. } | XattrChange::Clear { how } => how,
            XattrChange::Remove => XattrSet::Replace,
        };
        match (how, current) {
            (XattrSet::Create, Some(_)) => return Err(Error::Exists(name())),
            (XattrSet::Replace, None) => return Err(Error::NoAttribute(name())),
            _ => {}
        }
        Ok(match self {
            XattrChange::Set { value, .. } if current != Some(value) => Some(Some(value)),
            XattrChange::Set { .. } => None,
            XattrChange::Remove | XattrChange::Clear { .. } => current.is_some().then_some(None),
        })
    }
}

/// One change an API call makes to an inode.
pub(super) struct XattrUpdate<'a> {
    /// The full name, for errors.
    name: &'a [u8],
    key: XattrKey<'a>,
    change: XattrChange<'a>,
    /// New permission bits (`rwxrwxrwx`), from an access ACL.
    permissions: Option<u16>,
    /// Only directories may have it (a default ACL).
    directories_only: bool,
}

impl<'a> XattrUpdate<'a> {
    /// `change` to attribute `name` (with its prefix), which must be one the API may
    /// write; no permission bits change with it.
    pub(super) fn new(name: &'a [u8], change: XattrChange<'a>) -> Result<Self> {
        let key = writable_name(name)?;
        Ok(XattrUpdate {
            name,
            key,
            change,
            permissions: None,
            directories_only: key.index == INDEX_ACL_DEFAULT,
        })
    }
}

impl Filesystem {
    /// Sets extended attribute `name` (with its namespace prefix, e.g. `user.comment` or
    /// `system.posix_acl_access`) of inode `ino` to `value`. Attributes go into the inode's
    /// own space while they fit, then into one xattr block; a block other inodes share is
    /// copied first.
    ///
    /// An ACL is given in the form `setxattr` takes (version 2) and checked as the kernel
    /// checks it. As `setfacl` through the kernel does, an access ACL also sets the
    /// permission bits, and one that says no more than they do is not stored (setting it
    /// removes a stored one); an ACL with no entries removes the ACL. Unlike the kernel,
    /// `how` applies to ACLs as to any other name.
    ///
    /// Errors: [`Error::Exists`] / [`Error::NoAttribute`] per `how`,
    /// [`Error::NameTooLong`] for names over 255 bytes, [`Error::NotSupported`] for names
    /// outside `user.`, `trusted.`, `security.` and the ACLs, [`Error::Invalid`] for a
    /// malformed ACL or a default ACL on a non-directory, [`Error::NoSpace`] when the value
    /// fits neither the inode nor one xattr block (e4 does not store values in inodes of
    /// their own, ea_inode).
    pub fn set_xattr(&self, ino: u32, name: &[u8], value: &[u8], how: XattrSet) -> Result<()> {
        let mut update = XattrUpdate::new(name, XattrChange::Set { value, how })?;
        let key = update.key;
        if key.index != INDEX_ACL_ACCESS && key.index != INDEX_ACL_DEFAULT {
            return self.change_xattr(ino, &update);
        }
        let acl = PosixAcl::from_xattr(value)
            .and_then(|acl| acl.map(|a| a.check_ids().map(|()| a)).transpose())
            .map_err(|e| Error::Invalid(format!("{}: {e}", String::from_utf8_lossy(name))))?;
        let Some(acl) = acl else {
            update.change = XattrChange::Clear { how };
            return self.change_xattr(ino, &update);
        };
        let disk = acl.to_disk();
        update.change = XattrChange::Set { value: &disk, how };
        if key.index == INDEX_ACL_ACCESS {
            let (bits, equivalent) = acl.equivalent_mode();
            update.permissions = Some(bits);
            if equivalent {
                update.change = XattrChange::Clear { how };
            }
        }
        self.change_xattr(ino, &update)
    }

    /// Removes extended attribute `name` of inode `ino`; [`Error::NoAttribute`] if it has
    /// none of that name. Removing an access ACL leaves the permission bits as they are.
    pub fn remove_xattr(&self, ino: u32, name: &[u8]) -> Result<()> {
        let mut update = XattrUpdate::new(name, XattrChange::Remove)?;
        // Any inode may lose a default ACL it has.
        update.directories_only = false;
        self.change_xattr(ino, &update)
    }

    /// Runs `update` on inode `ino` inside a transaction, under the inode's lock.
    fn change_xattr(&self, ino: u32, update: &XattrUpdate<'_>) -> Result<()> {
        let writer = self.writer()?;
        {
            // The inode (in-inode attributes), a new attribute block, and the reference
            // count of the block it replaces (whose free declares its own).
            let txn = writer.begin(self, INODE + NEW_BLOCK + 1)?;
            let io = writer.io(self, &txn);
            let handle = self.inode_handle(ino)?;
            let mut state = handle.lock(&self.inodes);
            if is_gone(&state) {
                return Err(Error::NotFound(format!("inode {ino}")));
            }
            // `xattr_permission`: no attribute of a protected inode changes.
            refuse_if_protected(&state.inode, "change its xattrs")?;
            let inode = &mut state.inode;
            if self.update_xattrs(&io, inode, update)? {
                Self::touch(&mut state, false);
                drop(state);
                self.inodes.mark_dirty(&handle);
            }
        }
        self.commit_if_needed()
    }

    /// Makes `update`'s change to `inode`; whether anything changed.
    pub(super) fn update_xattrs(
        &self,
        io: &TxnIo<'_>,
        inode: &mut Inode,
        update: &XattrUpdate<'_>,
    ) -> Result<bool> {
        let shown = || String::from_utf8_lossy(update.name).into_owned();
        if inode.has_flag(flags::EA_INODE) {
            return Err(Error::Invalid(format!(
                "inode {} holds an attribute value, not a file",
                inode.ino
            )));
        }
        if update.directories_only && inode.file_type() != Some(FileType::Directory) {
            return Err(Error::Invalid(format!(
                "{}: a default ACL on inode {}, which is not a directory",
                shown(),
                inode.ino
            )));
        }
        let stored = InodeXattrs::load(io, inode)?;
        let current = stored.value(update.key);
        let new_value = update.change.resolve(current, shown)?;
        let mut changed = false;
        if let Some(value) = new_value {
            let layout = stored.change(
                update.key,
                value,
                inode.xattr_area.len(),
                self.block_size() as usize,
            )?;
            let group = (inode.ino - 1) / self.geometry.inodes_per_group();
            let goal = self.geometry.group_first_block(group);
            let lock = self.writer()?.xattr_block_locks.of(inode.file_acl());
            let blocks = stored.store(io, inode, &layout, goal, lock)?;
            self.add_blocks(inode, blocks)?;
            if value.is_some()
                && !self
                    .superblock()
                    .compat()
                    .contains(CompatFeatures::EXT_ATTR)
            {
                io.space.superblock.add_compat(CompatFeatures::EXT_ATTR);
            }
            changed = true;
        }
        if let Some(bits) = update.permissions {
            let mode = (inode.record.mode & !RWX_BITS) | bits;
            changed |= mode != inode.record.mode;
            inode.record.mode = mode;
        }
        Ok(changed)
    }

    /// Takes `inode`'s reference to its xattr block away (freeing the block with its last
    /// reference) and clears `i_file_acl`.
    pub(crate) fn drop_xattr_block(&self, io: &TxnIo<'_>, inode: &mut Inode) -> Result<()> {
        let nr = inode.file_acl();
        release_xattr_block(io, inode, nr, self.writer()?.xattr_block_locks.of(nr))?;
        set_file_acl(inode, 0);
        self.add_blocks(inode, -1)
    }
}

/// Whether the inode is freed, or unlinked and not open (about to be freed).
fn is_gone(state: &InodeState) -> bool {
    state.deleted || (state.inode.links_count() == 0 && state.open_count == 0)
}

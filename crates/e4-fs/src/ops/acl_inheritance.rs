//! POSIX ACLs that follow from other operations (fs/posix_acl.c): a new inode's, from its
//! directory's default ACL (`posix_acl_create`), and an access ACL kept in step with a
//! chmod (`posix_acl_chmod`). Setting and reading them as xattrs is `xattr_write.rs` and
//! `xattr_read.rs`.

use e4_format::inode::{FileType, Inode};
use e4_format::posix_acl::PosixAcl;
use e4_format::{FormatError, Location, Problem, Structure};

use crate::error::Result;
use crate::filesystem::Filesystem;
use crate::io::credits::NEW_BLOCK;
use crate::ops::xattr_write::{XattrChange, XattrSet, XattrUpdate};
use crate::txn::txn_io::TxnIo;

pub(super) const ACCESS_ACL: &[u8] = b"system.posix_acl_access";
pub(super) const DEFAULT_ACL: &[u8] = b"system.posix_acl_default";

/// The permission bits an ACL speaks for (`S_IRWXUGO`).
const RWX_BITS: u16 = 0o777;

/// The ACLs a new inode gets.
#[derive(Debug, Default)]
pub(super) struct InheritedAcls {
    /// Its access ACL, when its directory's default ACL says more than its mode.
    access: Option<PosixAcl>,
    /// A new directory's default ACL: its parent's.
    default: Option<PosixAcl>,
}

/// An ACL the engine cannot derive a mode from, in inode `ino`.
fn unusable(ino: u32) -> crate::error::Error {
    FormatError::corrupt(
        Structure::PosixAcl,
        Location::Inode(ino),
        Problem::AclWithoutGroupOrMask,
    )
    .into()
}

/// `posix_acl_create`: the permission bits of a new inode of `file_type` asked for with
/// `permissions` by a process with `umask`, and the ACLs the inode gets, in directory
/// `parent` whose default ACL is `parent_default`. A symlink gets neither (its mode is
/// always 0777); without a default ACL the umask is taken off; with one, the umask is
/// ignored and the ACL masks the mode.
pub(super) fn acls_for_new_inode(
    permissions: u16,
    umask: u16,
    file_type: FileType,
    parent: u32,
    parent_default: Option<PosixAcl>,
) -> Result<(u16, InheritedAcls)> {
    if file_type == FileType::Symlink {
        return Ok((permissions, InheritedAcls::default()));
    }
    let Some(default) = parent_default else {
        return Ok((permissions & !(umask & RWX_BITS), InheritedAcls::default()));
    };
    let mut access = default.clone();
    let (bits, equivalent) = access
        .create_masq(permissions & RWX_BITS)
        .map_err(|_| unusable(parent))?;
    let acls = InheritedAcls {
        access: (!equivalent).then_some(access),
        default: (file_type == FileType::Directory).then_some(default),
    };
    Ok(((permissions & !RWX_BITS) | bits, acls))
}

impl Filesystem {
    /// The default ACL of directory `dir`, if it has one.
    pub(super) fn default_acl(&self, dir: &Inode) -> Result<Option<PosixAcl>> {
        self.raw_xattr(dir, DEFAULT_ACL)?
            .map(|value| PosixAcl::from_disk(&value, Location::Inode(dir.ino)))
            .transpose()
            .map_err(Into::into)
    }

    /// Stores `acls` on new inode `inode`, which no name leads to yet: the default ACL
    /// first, as `ext4_init_acl` does (so `listxattr` lists them in its order).
    pub(super) fn store_inherited_acls(
        &self,
        io: &TxnIo<'_>,
        inode: &mut Inode,
        acls: &InheritedAcls,
    ) -> Result<()> {
        for (name, acl) in [(DEFAULT_ACL, &acls.default), (ACCESS_ACL, &acls.access)] {
            if let Some(acl) = acl {
                self.store_acl(io, inode, name, acl)?;
            }
        }
        Ok(())
    }

    /// `posix_acl_chmod`: after `inode`'s permission bits changed, its access ACL (if it
    /// has one) says the same of the owner, the mask (or group) and others.
    pub(super) fn chmod_access_acl(&self, io: &TxnIo<'_>, inode: &mut Inode) -> Result<()> {
        let Some(value) = self.raw_xattr(inode, ACCESS_ACL)? else {
            return Ok(());
        };
        let mut acl = PosixAcl::from_disk(&value, Location::Inode(inode.ino))?;
        acl.chmod_masq(inode.record.mode & RWX_BITS)
            .map_err(|_| unusable(inode.ino))?;
        self.store_acl(io, inode, ACCESS_ACL, &acl)
    }

    fn store_acl(
        &self,
        io: &TxnIo<'_>,
        inode: &mut Inode,
        name: &[u8],
        acl: &PosixAcl,
    ) -> Result<()> {
        // Its xattr block: a new one (or a copy of a shared one) and the reference count
        // of the block it leaves.
        io.txn.extend(NEW_BLOCK + 1);
        let disk = acl.to_disk();
        let update = XattrUpdate::new(
            name,
            XattrChange::Set {
                value: &disk,
                how: XattrSet::Either,
            },
        )?;
        self.update_xattrs(io, inode, &update).map(drop)
    }
}

//! Extended attributes of an inode: the in-inode area and the xattr block, values stored in
//! separate inodes (ea_inode), and POSIX ACLs converted to the form `getxattr` returns.

use e4_format::features::IncompatFeatures;
use e4_format::inode::{flags, Inode};
use e4_format::posix_acl::PosixAcl;
use e4_format::xattr::{
    decode_xattr_block, parse_inode_xattrs, Xattr, XattrBlockHeader, XattrValue,
};
use e4_format::{BlockSeed, FormatError, Location, MetadataBlock, Problem, Structure};

use crate::error::Result;
use crate::filesystem::Filesystem;

/// The largest value the kernel accepts (`XATTR_SIZE_MAX`).
const MAX_VALUE_SIZE: u64 = 65536;

/// Names the kernel lists; others (`system.data`, richacl) are internal.
fn is_listed(name: &[u8]) -> bool {
    [&b"user."[..], b"trusted.", b"security."]
        .iter()
        .any(|p| name.starts_with(p))
        || name == b"system.posix_acl_access"
        || name == b"system.posix_acl_default"
}

impl Filesystem {
    /// All attributes as stored: in-inode first, then the block.
    fn stored_xattrs(&self, inode: &Inode) -> Result<Vec<Xattr>> {
        let mut all = parse_inode_xattrs(&inode.xattr_area, Location::Inode(inode.ino))?;
        let block_nr = inode.file_acl();
        if block_nr != 0 {
            let loc = Location::InodeBlock {
                inode: inode.ino,
                block: block_nr,
            };
            let block = self.store.read(block_nr)?;
            // Damage leaves the cache, not kept for every later reader (a create reads its
            // directory's block for a default ACL).
            let parsed = self.store.checked(&block, |block| {
                let (_, parsed) = decode_xattr_block(&block.bytes(), loc)?;
                if let Some(seed) = self.store.csum_seed() {
                    let seed = BlockSeed { seed, block_nr };
                    let role = crate::buffer::cache::BufferRole {
                        kind: crate::io::meta_io::BlockKind::XattrBlock,
                        owner: None,
                    };
                    block.verify_as(role, |b| XattrBlockHeader::verify(b, seed, loc))?;
                }
                Ok(parsed)
            })?;
            all.extend(parsed);
        }
        Ok(all)
    }

    fn value_of(&self, owner: u32, xattr: Xattr) -> Result<Vec<u8>> {
        match xattr.value {
            XattrValue::Inline(bytes) => Ok(bytes),
            XattrValue::InInode { inode, size } => {
                // ext4_xattr_inode_get: a value in an inode needs the ea_inode feature.
                if !self
                    .superblock()
                    .incompat()
                    .contains(IncompatFeatures::EA_INODE)
                {
                    return Err(FormatError::corrupt(
                        Structure::XattrEntry,
                        Location::Inode(owner),
                        Problem::ValueInodeWithoutFeature { inode },
                    )
                    .into());
                }
                let holder = self.read_inode_record(inode)?;
                if !holder.has_flag(flags::EA_INODE) || holder.size() != u64::from(size) {
                    return Err(FormatError::corrupt(
                        Structure::XattrValueInode,
                        Location::Inode(inode),
                        Problem::ValueInodeMismatch { owner, size },
                    )
                    .into());
                }
                self.read_all(&holder, MAX_VALUE_SIZE)
            }
        }
    }

    /// A stored attribute's raw value (internal names included).
    pub(crate) fn raw_xattr(&self, inode: &Inode, name: &[u8]) -> Result<Option<Vec<u8>>> {
        match self
            .stored_xattrs(inode)?
            .into_iter()
            .find(|x| x.is_known() && x.name == name)
        {
            Some(x) => self.value_of(inode.ino, x).map(Some),
            None => Ok(None),
        }
    }

    /// Names of the attributes `listxattr` would show.
    /// The names of inode `ino`'s extended attributes, with their namespace prefixes.
    pub fn list_xattrs(&self, ino: u32) -> Result<Vec<Vec<u8>>> {
        self.read_caller_inode(ino, |inode| self.list_xattrs_of(inode))
    }

    /// The value of inode `ino`'s extended attribute `name` (with its prefix, e.g.
    /// `user.comment`), if it has one.
    pub fn get_xattr(&self, ino: u32, name: &[u8]) -> Result<Option<Vec<u8>>> {
        self.read_caller_inode(ino, |inode| self.get_xattr_of(inode, name))
    }

    pub(crate) fn list_xattrs_of(&self, inode: &Inode) -> Result<Vec<Vec<u8>>> {
        Ok(self
            .stored_xattrs(inode)?
            .into_iter()
            .filter(|x| x.is_known() && is_listed(&x.name))
            .map(|x| x.name)
            .collect())
    }

    /// An attribute's value as `getxattr` returns it.
    pub(crate) fn get_xattr_of(&self, inode: &Inode, name: &[u8]) -> Result<Option<Vec<u8>>> {
        if !is_listed(name) {
            return Ok(None);
        }
        let Some(value) = self.raw_xattr(inode, name)? else {
            return Ok(None);
        };
        if name.starts_with(b"system.posix_acl_") {
            let acl = PosixAcl::from_disk(&value, Location::Inode(inode.ino))?;
            return Ok(Some(acl.to_xattr()));
        }
        Ok(Some(value))
    }
}

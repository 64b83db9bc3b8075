//! Changing extended attributes. An xattr block may be shared by many inodes (its
//! `h_refcount`); an inode that stops using one takes its reference away, and the block is
//! freed with its last reference.

use e4_format::inode::Inode;
use e4_format::xattr::{XattrBlockHeader, XATTR_MAGIC};
use e4_format::{FormatError, Location};

use crate::error::Result;
use crate::file_write::owner_of;
use crate::filesystem::Filesystem;
use crate::meta_io::{BlockKind, MetaIo};
use crate::txn_io::TxnIo;

/// How [`Filesystem::set_xattr`] treats an existing attribute.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum XattrSet {
    /// Create it or replace it.
    #[default]
    Either,
    /// Fail with [`crate::Error::Exists`] if it exists (XATTR_CREATE).
    Create,
    /// Fail if it does not exist (XATTR_REPLACE).
    Replace,
}

impl Filesystem {
    /// Sets extended attribute `name` (with its namespace prefix, e.g. `user.comment` or
    /// `system.posix_acl_access`) of inode `ino` to `value`.
    pub fn set_xattr(&self, ino: u32, name: &[u8], value: &[u8], how: XattrSet) -> Result<()> {
        let _ = (ino, name, value, how);
        Err(crate::Error::NotSupported(
            "setting extended attributes".into(),
        ))
    }

    /// Removes extended attribute `name` of inode `ino`.
    pub fn remove_xattr(&self, ino: u32, name: &[u8]) -> Result<()> {
        let _ = (ino, name);
        Err(crate::Error::NotSupported(
            "removing extended attributes".into(),
        ))
    }

    /// Takes `inode`'s reference to its xattr block away (freeing the block with its last
    /// reference) and clears `i_file_acl`.
    pub(crate) fn drop_xattr_block(&self, io: &TxnIo<'_>, inode: &mut Inode) -> Result<()> {
        let nr = inode.file_acl();
        let owner = owner_of(inode);
        let mut bytes = io.read(nr, BlockKind::XattrBlock, owner)?;
        let mut header = XattrBlockHeader::decode(
            e4_format::codec::prefix::<{ XattrBlockHeader::SIZE }>(&bytes)
                .expect("a block is longer than the header"),
        );
        if header.magic != XATTR_MAGIC || header.refcount == 0 {
            return Err(FormatError::corrupt(
                "xattr block",
                Location::InodeBlock {
                    inode: inode.ino,
                    block: nr,
                },
                "bad magic or zero reference count",
            )
            .into());
        }
        if header.refcount > 1 {
            header.refcount -= 1;
            let mut raw = [0u8; XattrBlockHeader::SIZE];
            header.encode(&mut raw);
            bytes[..XattrBlockHeader::SIZE].copy_from_slice(&raw);
            io.write(nr, BlockKind::XattrBlock, owner, &bytes)?;
        } else {
            io.free(nr, 1, owner)?;
        }
        inode.record.file_acl_lo = 0;
        inode.record.file_acl_high = 0;
        self.add_blocks(inode, -1)
    }
}

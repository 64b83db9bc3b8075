//! Changing an inode's attributes: permissions, owner, times and size (`setattr`), and
//! opening and closing files (an inode unlinked while open lives until its last close).

use e4_format::inode::{FileType, Timestamp};

use crate::error::{Error, Result};
use crate::filesystem::Filesystem;
use crate::metadata::Metadata;

/// The attributes [`Filesystem::setattr`] changes; `None` leaves one as it is. The change
/// time is always set to now, as the kernel does.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SetAttributes {
    /// Permission bits including setuid, setgid and sticky (the file type stays).
    pub permissions: Option<u16>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    /// A new size (regular files only): a truncate or an extension with a hole.
    pub size: Option<u64>,
    pub atime: Option<Timestamp>,
    pub mtime: Option<Timestamp>,
}

impl Filesystem {
    /// Changes the attributes of inode `ino`; returns them as they now are.
    pub fn setattr(&self, ino: u32, attrs: &SetAttributes) -> Result<Metadata> {
        if let Some(size) = attrs.size {
            self.truncate(ino, size)?;
        }
        let writer = self.writer()?;
        {
            let _txn = writer.begin()?;
            let handle = self.inode_handle(ino)?;
            let mut state = handle.lock();
            let inode = &mut state.inode;
            if inode.links_count() == 0 && inode.file_type() != Some(FileType::Regular) {
                return Err(Error::NotFound(format!("inode {ino}")));
            }
            if let Some(p) = attrs.permissions {
                inode.record.mode = (inode.record.mode & !0o7777) | (p & 0o7777);
            }
            if let Some(uid) = attrs.uid {
                inode.set_uid(uid);
            }
            if let Some(gid) = attrs.gid {
                inode.set_gid(gid);
            }
            if let Some(t) = attrs.atime {
                inode.set_atime(t);
            }
            if let Some(t) = attrs.mtime {
                inode.set_mtime(t);
            }
            inode.set_ctime(crate::time::now());
            drop(state);
            self.inodes.mark_dirty(&handle);
        }
        self.commit_if_needed()?;
        self.metadata(ino)
    }
}

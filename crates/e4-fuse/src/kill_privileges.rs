//! Set-user-ID and set-group-ID taken away by the mount itself when a file is written,
//! truncated, fallocated or chowned (FUSE_HANDLE_KILLPRIV_V2).
//!
//! Without that capability the kernel's FUSE checks before every write and fallocate
//! whether the file holds `security.capability` (`file_remove_privs`, which never caches
//! "no" on a FUSE mount): one GETXATTR round trip more for every 4 KiB append and every
//! fallocate (docs/BENCHMARKS.md, "Requests and instructions per operation through e4's
//! mount"). With it the kernel marks the superblock SB_NOSEC, so an inode found without
//! privileges is not asked about again until its mode or a `security.*` attribute
//! changes, and leaves clearing the bits to the server. Where the kernel would have
//! cleared them before a write or fallocate, or for a chown naming no owner, it now sends
//! an empty SETATTR; a write also carries `FUSE_WRITE_KILL_SUIDGID`. For truncate and
//! O_TRUNC it sends `FATTR_KILL_SUIDGID` and `FUSE_OPEN_KILL_SUIDGID`, which fuser 0.18
//! does not pass on, so there the mount takes a caller other than root for one without
//! CAP_FSETID. `security.capability` is still removed by the kernel itself (it asks
//! whenever S_NOSEC is not set, which a `security.*` change clears).

use e4_fs::{FileType, Filesystem, Result, SetAttributes};

/// `S_ISUID`, `S_ISGID` and `S_IXGRP`.
const SET_USER_ID: u16 = 0o4000;
const SET_GROUP_ID: u16 = 0o2000;
const GROUP_EXECUTE: u16 = 0o0010;

/// The permissions after a write by a caller without CAP_FSETID (`should_remove_suid`):
/// set-user-ID goes, and set-group-ID with group execute (without it, it marks mandatory
/// locking and stays).
fn without_privileges(permissions: u16) -> u16 {
    let mut kept = permissions & !SET_USER_ID;
    if kept & GROUP_EXECUTE != 0 {
        kept &= !SET_GROUP_ID;
    }
    kept
}

/// Clears inode `ino`'s set-user-ID and set-group-ID bits as the kernel's ext4 does before
/// a write, truncate or fallocate by a caller without CAP_FSETID; a change of mode, so an
/// immutable or append-only file refuses it (EPERM), as ext4's `notify_change` does.
/// A directory keeps both (a chown's rule; nothing writes or truncates one).
pub(crate) fn kill_privileges(fs: &Filesystem, ino: u32) -> Result<()> {
    let metadata = fs.metadata(ino)?;
    if metadata.file_type == FileType::Directory {
        return Ok(());
    }
    let permissions = metadata.permissions;
    let kept = without_privileges(permissions);
    if kept != permissions {
        fs.setattr(
            ino,
            &SetAttributes {
                permissions: Some(kept),
                ..Default::default()
            },
        )?;
    }
    Ok(())
}

/// Whether the caller of a truncate or O_TRUNC open is taken to lack CAP_FSETID: fuser
/// 0.18 drops the kernel's own flag for these, so anyone but root.
pub(crate) fn caller_lacks_fsetid(uid: u32) -> bool {
    uid != 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_group_id_without_group_execute_stays() {
        assert_eq!(without_privileges(0o6755), 0o0755);
        assert_eq!(without_privileges(0o6745), 0o2745);
        assert_eq!(without_privileges(0o0644), 0o0644);
    }
}

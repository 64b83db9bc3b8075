//! The inode flags users see and set (`FS_IOC_GETFLAGS`/`FS_IOC_SETFLAGS`: `lsattr`,
//! `chattr`), which of them a new inode inherits, and what immutable and append-only
//! forbid. The kernel enforces the last in the VFS (`IS_IMMUTABLE`, `IS_APPEND` in
//! fs/namei.c, fs/open.c, fs/attr.c, fs/xattr.c) and in `ext4_setattr`; e4 has no VFS
//! between its callers and the engine, so each operation asks here.

use e4_format::inode::{flags::*, FileType, Inode};

use crate::error::{Error, Result};

/// `EXT4_FL_USER_MODIFIABLE`: the flags `FS_IOC_SETFLAGS` changes; the other visible ones
/// it silently keeps as they are (chattr sends back what GETFLAGS gave, plus its change).
pub const USER_MODIFIABLE: u32 = SECRM
    | UNRM
    | COMPR
    | SYNC
    | IMMUTABLE
    | APPEND
    | NODUMP
    | NOATIME
    | JOURNAL_DATA
    | NOTAIL
    | DIRSYNC
    | TOPDIR
    | EXTENTS
    | EOFBLOCKS
    | DAX
    | PROJINHERIT
    | CASEFOLD;

/// `EXT4_FL_USER_VISIBLE`: the flags `FS_IOC_GETFLAGS` shows; setting any other is
/// EOPNOTSUPP.
pub const USER_VISIBLE: u32 =
    USER_MODIFIABLE | DIRTY | COMPRBLK | NOCOMPR | ENCRYPT | INDEX | VERITY | INLINE_DATA;

/// `EXT4_FL_INHERITED`: the flags a new inode takes from its directory (then masked for
/// its type, `ext4_mask_flags`).
const INHERITED: u32 = SECRM
    | UNRM
    | COMPR
    | SYNC
    | NODUMP
    | NOATIME
    | NOCOMPR
    | JOURNAL_DATA
    | NOTAIL
    | DIRSYNC
    | PROJINHERIT
    | CASEFOLD
    | DAX;

/// `EXT4_REG_FLMASK`: what a regular file may carry (all but the directory-only flags).
const REGULAR_MASK: u32 = !(DIRSYNC | TOPDIR | CASEFOLD | PROJINHERIT);

/// `EXT4_OTHER_FLMASK`: what a symlink, device, FIFO or socket may carry.
const OTHER_MASK: u32 = NODUMP | NOATIME;

/// `flags` less those inappropriate for an inode of `file_type` (`ext4_mask_flags`).
pub(crate) fn mask_for_type(file_type: Option<FileType>, flags: u32) -> u32 {
    match file_type {
        Some(FileType::Directory) => flags,
        Some(FileType::Regular) => flags & REGULAR_MASK,
        _ => flags & OTHER_MASK,
    }
}

/// The flags a new inode of `file_type` inherits from a directory with `parent_flags`.
pub(crate) fn inherited(parent_flags: u32, file_type: FileType) -> u32 {
    mask_for_type(Some(file_type), parent_flags & INHERITED)
}

/// The flags `FS_IOC_GETFLAGS` shows for `inode` (`ext4_fileattr_get`: a regular file's
/// PROJINHERIT is hidden).
pub(crate) fn visible(inode: &Inode) -> u32 {
    let flags = inode.flags() & USER_VISIBLE;
    if inode.file_type() == Some(FileType::Regular) {
        flags & !PROJINHERIT
    } else {
        flags
    }
}

fn is_immutable(inode: &Inode) -> bool {
    inode.has_flag(IMMUTABLE)
}

fn is_append_only(inode: &Inode) -> bool {
    inode.has_flag(APPEND)
}

fn refused(inode: &Inode, flag: &str, what: &str) -> Error {
    Error::NotPermitted(format!("inode {} is {flag}: {what}", inode.ino))
}

/// An immutable inode takes no change at all (`ext4_setattr`, `inode_permission` with
/// MAY_WRITE, `ext4_write_checks`, `vfs_fallocate`).
pub(crate) fn refuse_if_immutable(inode: &Inode, what: &str) -> Result<()> {
    if is_immutable(inode) {
        return Err(refused(inode, "immutable", what));
    }
    Ok(())
}

/// Changes neither an immutable nor an append-only inode takes: its mode, owner or
/// named times (`notify_change`), its size (`vfs_truncate`, `do_ftruncate`), its xattrs
/// (`xattr_permission`), a new link to it (`vfs_link`), removing or renaming its name
/// (`may_delete`).
pub(crate) fn refuse_if_protected(inode: &Inode, what: &str) -> Result<()> {
    refuse_if_immutable(inode, what)?;
    if is_append_only(inode) {
        return Err(refused(inode, "append-only", what));
    }
    Ok(())
}

/// A write of data at `offset`: none to an immutable inode, and to an append-only one
/// only at its end (the kernel requires O_APPEND to open it for writing, and refuses
/// `fcntl` taking O_APPEND away, so every write it lets through lands at the end).
pub(crate) fn refuse_write(inode: &Inode, offset: u64) -> Result<()> {
    refuse_if_immutable(inode, "write")?;
    if is_append_only(inode) && offset != inode.size() {
        return Err(refused(
            inode,
            "append-only",
            &format!("write at {offset}, not at its end {}", inode.size()),
        ));
    }
    Ok(())
}

/// A directory's names may be removed (or renamed away) only when it is neither
/// immutable nor append-only (`may_delete`), and the named inode neither either.
pub(crate) fn refuse_removal(dir: &Inode, victim: &Inode) -> Result<()> {
    refuse_if_protected(dir, "remove a name from it")?;
    refuse_if_protected(victim, "remove or rename its name")
}

/// What an open asks for, for [`refuse_open`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OpenIntent {
    /// Opened for writing (O_WRONLY or O_RDWR).
    pub write: bool,
    /// O_APPEND.
    pub append: bool,
    /// O_TRUNC.
    pub truncate: bool,
}

/// `may_open`: an immutable inode opens for neither writing nor truncation; an
/// append-only one for writing only with O_APPEND, and never with O_TRUNC.
pub(crate) fn refuse_open(inode: &Inode, intent: OpenIntent) -> Result<()> {
    if intent.write || intent.truncate {
        refuse_if_immutable(inode, "open for writing")?;
    }
    if is_append_only(inode) && ((intent.write && !intent.append) || intent.truncate) {
        return Err(refused(
            inode,
            "append-only",
            "open for writing without O_APPEND, or with O_TRUNC",
        ));
    }
    Ok(())
}

/// The flags inode `inode` takes from `FS_IOC_SETFLAGS` with `requested`, or why not
/// (`ext4_fileattr_set`, `ext4_ioctl_check_immutable`, `ext4_ioctl_setflags` and the VFS's
/// `fileattr_set_prepare`). `may_protect` says whether the caller holds
/// CAP_LINUX_IMMUTABLE, without which immutable and append-only stay as they are.
pub(crate) fn after_set(inode: &Inode, requested: u32, may_protect: bool) -> Result<u32> {
    let ino = inode.ino;
    let old = inode.flags();
    // The VFS checks the capability before ext4 sees the request.
    if (old ^ requested) & (IMMUTABLE | APPEND) != 0 && !may_protect {
        return Err(Error::NotPermitted(format!(
            "changing immutable or append-only on inode {ino} needs CAP_LINUX_IMMUTABLE"
        )));
    }
    if requested & !USER_VISIBLE != 0 {
        return Err(Error::NotSupported(format!(
            "inode flags {:#x} (not user-visible) on inode {ino}",
            requested & !USER_VISIBLE
        )));
    }
    let wanted = requested & USER_MODIFIABLE;
    let file_type = inode.file_type();
    if mask_for_type(file_type, wanted) != wanted {
        return Err(Error::NotSupported(format!(
            "inode flags {:#x} on inode {ino} of type {file_type:?}",
            wanted & !mask_for_type(file_type, wanted)
        )));
    }
    let changed = (old ^ wanted) & USER_MODIFIABLE;
    if old & wanted & IMMUTABLE != 0 && changed & !IMMUTABLE != 0 {
        return Err(refused(
            inode,
            "immutable",
            "change its flags but immutable",
        ));
    }
    // What ext4 does with these flags goes beyond the inode record (migrating the
    // mapping, journaling the data, case-folding the names); e4 does not, so it refuses
    // the change rather than record a flag that would not mean what it says.
    let unsupported = changed & (EXTENTS | JOURNAL_DATA | CASEFOLD | DAX);
    if unsupported != 0 {
        return Err(Error::NotSupported(format!(
            "changing inode flags {unsupported:#x} on inode {ino}"
        )));
    }
    Ok((old & !USER_MODIFIABLE) | wanted)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inode_with(mode: u16, flags: u32) -> Inode {
        let mut inode = Inode::new(12, 256, mode, 0);
        inode.record.flags = flags;
        inode
    }

    const REGULAR: u16 = 0o100644;
    const DIRECTORY: u16 = 0o040755;

    #[test]
    fn set_flags_follows_ext4s_rules() {
        let file = inode_with(REGULAR, EXTENTS);
        // Visible but not modifiable: silently kept as they were.
        assert_eq!(after_set(&file, EXTENTS | INDEX, false).unwrap(), EXTENTS);
        assert_eq!(
            after_set(&file, EXTENTS | NODUMP, false).unwrap(),
            EXTENTS | NODUMP
        );
        // Not visible: EOPNOTSUPP; a directory flag on a file: EOPNOTSUPP.
        assert!(matches!(
            after_set(&file, EXTENTS | HUGE_FILE, true),
            Err(Error::NotSupported(_))
        ));
        assert!(matches!(
            after_set(&file, EXTENTS | DIRSYNC, true),
            Err(Error::NotSupported(_))
        ));
        let dir = inode_with(DIRECTORY, EXTENTS);
        assert_eq!(
            after_set(&dir, EXTENTS | DIRSYNC, false).unwrap(),
            EXTENTS | DIRSYNC
        );
        // Immutable and append-only need the capability, both ways.
        for flag in [IMMUTABLE, APPEND] {
            assert!(matches!(
                after_set(&file, EXTENTS | flag, false),
                Err(Error::NotPermitted(_))
            ));
            let set = after_set(&file, EXTENTS | flag, true).unwrap();
            assert_eq!(set, EXTENTS | flag);
            let protected = inode_with(REGULAR, set);
            assert!(matches!(
                after_set(&protected, EXTENTS, false),
                Err(Error::NotPermitted(_))
            ));
            assert_eq!(after_set(&protected, EXTENTS, true).unwrap(), EXTENTS);
        }
        // While immutable stays, nothing else changes.
        let immutable = inode_with(REGULAR, EXTENTS | IMMUTABLE);
        assert!(matches!(
            after_set(&immutable, EXTENTS | IMMUTABLE | NODUMP, true),
            Err(Error::NotPermitted(_))
        ));
        assert_eq!(
            after_set(&immutable, EXTENTS | IMMUTABLE, false).unwrap(),
            EXTENTS | IMMUTABLE
        );
        // Changing the mapping is not done.
        assert!(matches!(
            after_set(&file, 0, true),
            Err(Error::NotSupported(_))
        ));
    }

    #[test]
    fn new_inodes_inherit_what_ext4_passes_down() {
        let parent = SYNC | NODUMP | DIRSYNC | IMMUTABLE | APPEND | INDEX | EXTENTS | TOPDIR;
        assert_eq!(
            inherited(parent, FileType::Directory),
            SYNC | NODUMP | DIRSYNC
        );
        assert_eq!(inherited(parent, FileType::Regular), SYNC | NODUMP);
        assert_eq!(inherited(parent, FileType::Symlink), NODUMP);
    }

    #[test]
    fn protection_refuses_what_the_kernel_refuses() {
        let mut append = inode_with(REGULAR, APPEND);
        append.set_size(10);
        assert!(refuse_write(&append, 10).is_ok());
        assert!(matches!(
            refuse_write(&append, 9),
            Err(Error::NotPermitted(_))
        ));
        let write = OpenIntent {
            write: true,
            ..Default::default()
        };
        assert!(refuse_open(&append, write).is_err());
        assert!(refuse_open(
            &append,
            OpenIntent {
                append: true,
                ..write
            }
        )
        .is_ok());
        assert!(refuse_open(
            &append,
            OpenIntent {
                truncate: true,
                ..Default::default()
            }
        )
        .is_err());
        assert!(refuse_open(&append, OpenIntent::default()).is_ok());
        let immutable = inode_with(REGULAR, IMMUTABLE);
        assert!(refuse_write(&immutable, 0).is_err());
        assert!(refuse_open(&immutable, write).is_err());
        assert!(refuse_open(&immutable, OpenIntent::default()).is_ok());
        let dir = inode_with(DIRECTORY, APPEND);
        let file = inode_with(REGULAR, 0);
        assert!(refuse_removal(&dir, &file).is_err());
        assert!(refuse_removal(&inode_with(DIRECTORY, 0), &file).is_ok());
    }
}

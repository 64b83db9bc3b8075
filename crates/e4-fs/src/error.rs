//! Errors from the engine: the format layer's (corrupt, checksum, incompatible), I/O, and
//! the ones a caller causes (a path that does not exist, a file that is not a directory).

use std::io;

use e4_format::FormatError;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The image is corrupt or uses an unsupported feature.
    #[error(transparent)]
    Format(#[from] FormatError),
    /// Reading the device failed.
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: io::Error,
    },
    /// The device holds no ext2/3/4 filesystem at all (too small, or no superblock magic):
    /// not a damaged filesystem, something else entirely.
    #[error("not an ext2/ext3/ext4 filesystem: {0}")]
    NotAFilesystem(String),
    /// A path component does not exist.
    #[error("{0}: no such file or directory")]
    NotFound(String),
    /// A path component that must be a directory is not one.
    #[error("{0}: not a directory")]
    NotADirectory(String),
    /// An operation that needs a regular file or symlink got something else.
    #[error("{path}: {reason}")]
    WrongType { path: String, reason: &'static str },
    /// Symlinks nest too deeply or form a loop.
    #[error("{0}: too many levels of symbolic links")]
    SymlinkLoop(String),
    /// No space left (ENOSPC): of what, as a [`Shortage`].
    #[error("no space left on the filesystem ({0})")]
    NoSpace(Shortage),
    /// A name that must be new already exists (EEXIST).
    #[error("{0}: file exists")]
    Exists(String),
    /// An extended attribute that must exist does not (ENODATA).
    #[error("{0}: no such attribute")]
    NoAttribute(String),
    /// A directory that must be empty is not (ENOTEMPTY).
    #[error("{0}: directory not empty")]
    NotEmpty(String),
    /// An operation on files met a directory (EISDIR).
    #[error("{0}: is a directory")]
    IsADirectory(String),
    /// A name longer than 255 bytes (ENAMETOOLONG).
    #[error("{0}: file name too long")]
    NameTooLong(String),
    /// A symlink target the filesystem cannot hold: with its NUL it passes the block size or
    /// `PATH_MAX` (ENAMETOOLONG, as `ext4_symlink` answers).
    #[error("a symlink target of {length} bytes is too long (at most {max} on this filesystem)")]
    SymlinkTargetTooLong { length: usize, max: usize },
    /// A link count would pass its limit (EMLINK).
    #[error("{0}: too many links")]
    TooManyLinks(String),
    /// A size or offset the format cannot express (EFBIG).
    #[error("{0}: file too large")]
    FileTooBig(String),
    /// A bad argument (EINVAL).
    #[error("invalid argument: {0}")]
    Invalid(String),
    /// The inode's flags forbid the change: it is immutable or append-only, or its
    /// directory is (EPERM, as the kernel's `IS_IMMUTABLE`/`IS_APPEND` checks answer); or a
    /// flag change needs a capability the caller lacks.
    #[error("operation not permitted: {0}")]
    NotPermitted(String),
    /// The filesystem is open read-only, or can only be read (EROFS).
    #[error("read-only filesystem: {0}")]
    ReadOnly(String),
    /// An operation a file of this kind does not support: `fallocate` on a device, socket
    /// or symlink (ENODEV, as the kernel's `vfs_fallocate` answers).
    #[error("{0}: no such device")]
    NoDevice(String),
    /// A file-position operation on a FIFO, which has no positions (ESPIPE).
    #[error("{0}: illegal seek")]
    IllegalSeek(String),
    /// The operation is valid but this filesystem's features do not allow it (EOPNOTSUPP).
    #[error("not supported: {0}")]
    NotSupported(String),
    /// A group's block or inode bitmap cannot be used: it could not be read, its checksum
    /// is wrong, or it disagrees with what the group must hold (EUCLEAN, as the kernel's
    /// `ext4_read_block_bitmap` answers). Never reported as a full filesystem: the space
    /// may be there, and retrying after a commit would not find it.
    #[error("the {bitmap} bitmap of group {group} cannot be used: {reason}")]
    BitmapUnusable {
        bitmap: &'static str,
        group: u32,
        reason: String,
    },
    /// The engine found one of its own rules broken (a bug, or damage it cannot name more
    /// precisely): EIO, never a caller's EINVAL.
    #[error("internal error: {0}")]
    Internal(String),
    /// The image is in use by someone e4 must not share it with (EBUSY): see [`InUse`].
    #[error("{0}")]
    InUse(InUse),
}

/// Why an image may not be opened as asked: who else uses it. Each reads as a sentence
/// that ends with what to do. See `io/image_lock.rs` for the rules.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InUse {
    /// Another open file description holds a lock on the image file that conflicts with
    /// ours: another e4 (command, mount or library user, in this process or another), or a
    /// program that locks images (QEMU does).
    Locked {
        /// The holder writes (else it reads, and we wanted to write).
        holder_writes: bool,
        /// The holder's process, where it could be found (see `io/image_lock.rs`).
        holder: Option<Holder>,
        /// We wanted to write.
        for_writing: bool,
    },
    /// The kernel has the image mounted.
    Mounted {
        /// The block device the kernel mounted: the image itself, or a loop device over it.
        device: String,
        /// Where (the first of its mount points).
        mount_point: String,
        /// Mounted read-write (the superblock's mode, not one bind mount's).
        read_write: bool,
        /// We wanted to write.
        for_writing: bool,
    },
    /// The image file backs a loop device (not mounted): the kernel writes whatever is
    /// written to that device.
    LoopAttached {
        /// The loop device, e.g. `/dev/loop3`.
        device: String,
    },
    /// An exclusive open of the block device failed with EBUSY and no mount names why:
    /// device-mapper, md, or another exclusive opener holds it.
    DeviceBusy,
}

/// A process that holds an image's lock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holder {
    pub pid: u32,
    /// Its command name (`/proc/PID/comm`), e.g. `e4`.
    pub command: String,
}

impl std::fmt::Display for InUse {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            InUse::Locked {
                holder_writes,
                holder,
                for_writing,
            } => {
                let who = match holder {
                    Some(Holder { pid, command }) => format!("process {pid} ({command})"),
                    None => "another e4 (or another program that locks images)".to_string(),
                };
                let what = if *holder_writes { "writing" } else { "reading" };
                let why = match (holder_writes, for_writing) {
                    (true, true) => "one writer at a time",
                    (false, _) => "a writer must have it to itself",
                    (true, false) => "reading it now could see it half-written",
                };
                write!(f, "the image is locked: {who} has it open for {what} ({why})")
            }
            InUse::Mounted {
                device,
                mount_point,
                read_write,
                for_writing,
            } => {
                let mode = if *read_write { "read-write" } else { "read-only" };
                let then = if *for_writing {
                    "unmount it first"
                } else {
                    "read it through the mount, or unmount it first"
                };
                write!(
                    f,
                    "the kernel has the image mounted {mode} on {mount_point} ({device}); {then}"
                )
            }
            InUse::LoopAttached { device } => write!(
                f,
                "the image backs loop device {device}, through which the kernel may write it; detach it first (losetup -d {device})"
            ),
            InUse::DeviceBusy => f.write_str(
                "the block device is busy: something holds it exclusively (another e4 writer, device-mapper, md, or a mount in another namespace)",
            ),
        }
    }
}

/// What ran out, for [`Error::NoSpace`]. The kinds a caller can act on are variants;
/// `Room` says in words what had no room.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Shortage {
    /// Free blocks.
    Blocks,
    /// Free inodes.
    Inodes,
    /// Room in a directory's htree index (two levels without large_dir, three with it).
    DirectoryIndex,
    /// Room inside one structure (a directory block, an inode's attribute area, an xattr
    /// block), described in the words.
    Room(String),
}

impl std::fmt::Display for Shortage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Shortage::Blocks => f.write_str("blocks"),
            Shortage::Inodes => f.write_str("inodes"),
            Shortage::DirectoryIndex => f.write_str("directory index"),
            Shortage::Room(what) => f.write_str(what),
        }
    }
}

impl Error {
    /// The errno this error stands for, as the kernel's ext4 would answer the same
    /// operation (a FUSE reply, or a tool's exit message). Damage is EUCLEAN (the kernel's
    /// EFSCORRUPTED), a checksum that does not match EBADMSG (EFSBADCRC), a feature e4
    /// cannot handle EOPNOTSUPP, a table too large for memory ENOMEM; I/O keeps the device's own errno where it has one.
    pub fn errno(&self) -> i32 {
        use rustix::io::Errno;
        let errno = match self {
            Error::Format(FormatError::Corrupt { .. }) => Errno::UCLEAN,
            Error::Format(FormatError::Checksum { .. }) => Errno::BADMSG,
            Error::Format(FormatError::Incompatible(_)) => Errno::OPNOTSUPP,
            Error::Format(FormatError::TableTooLarge(_)) => Errno::NOMEM,
            Error::Io { source, .. } => {
                return source.raw_os_error().unwrap_or(Errno::IO.raw_os_error())
            }
            Error::NotAFilesystem(_) => Errno::INVAL,
            Error::NotFound(_) => Errno::NOENT,
            Error::NotADirectory(_) => Errno::NOTDIR,
            Error::WrongType { .. } => Errno::INVAL,
            Error::SymlinkLoop(_) => Errno::LOOP,
            Error::NoSpace(_) => Errno::NOSPC,
            Error::Exists(_) => Errno::EXIST,
            Error::NoAttribute(_) => Errno::NODATA,
            Error::NotEmpty(_) => Errno::NOTEMPTY,
            Error::IsADirectory(_) => Errno::ISDIR,
            Error::NameTooLong(_) | Error::SymlinkTargetTooLong { .. } => Errno::NAMETOOLONG,
            Error::TooManyLinks(_) => Errno::MLINK,
            Error::FileTooBig(_) => Errno::FBIG,
            Error::Invalid(_) => Errno::INVAL,
            Error::NotPermitted(_) => Errno::PERM,
            Error::ReadOnly(_) => Errno::ROFS,
            Error::NoDevice(_) => Errno::NODEV,
            Error::IllegalSeek(_) => Errno::SPIPE,
            Error::NotSupported(_) => Errno::OPNOTSUPP,
            Error::BitmapUnusable { .. } => Errno::UCLEAN,
            Error::Internal(_) => Errno::IO,
            Error::InUse(_) => Errno::BUSY,
        };
        errno.raw_os_error()
    }

    /// The error for an allocation e4-alloc refused: a full filesystem only when it is
    /// full; a bitmap it could not trust as that.
    pub(crate) fn from_block_allocation(e: e4_alloc::AllocError) -> Self {
        use e4_alloc::AllocError;
        match e {
            AllocError::NoSpace => Error::NoSpace(Shortage::Blocks),
            AllocError::GroupCorrupt(damage) => Error::from_group_damage(damage),
            AllocError::BitmapUnreadable { group, reason } => Error::BitmapUnusable {
                bitmap: "block",
                group,
                reason,
            },
            other => Error::Internal(format!("block allocation: {other:?}")),
        }
    }

    /// The error for an inode claim e4-alloc refused (see [`Self::from_block_allocation`]).
    pub(crate) fn from_inode_allocation(e: e4_alloc::InodeError) -> Self {
        use e4_alloc::InodeError;
        match e {
            InodeError::NoSpace => Error::NoSpace(Shortage::Inodes),
            InodeError::BitmapUnreadable { group, reason } => Error::BitmapUnusable {
                bitmap: "inode",
                group,
                reason,
            },
            InodeError::GroupCorrupt(damage) => Error::from_group_damage(damage),
            // Every group's bitmap was full with every group locked: the count is wrong.
            InodeError::CountMismatch { counted_free } => FormatError::corrupt(
                e4_format::Structure::Superblock,
                e4_format::Location::Superblock,
                e4_format::Problem::FieldMismatch {
                    field: "s_free_inodes_count",
                    found: counted_free,
                    expected: 0,
                },
            )
            .into(),
            other => Error::Internal(format!("inode allocation: {other}")),
        }
    }

    /// The error for a group e4-alloc refused as corrupt when it loaded its bitmap.
    fn from_group_damage(damage: e4_alloc::GroupDamage) -> Self {
        Error::BitmapUnusable {
            bitmap: damage.bitmap(),
            group: damage.group,
            reason: damage.reason(),
        }
    }

    /// `self`, the reason an operation failed, once it has tried to give back what it took
    /// (`undo`): when the undo failed too, that is said as well, as an internal error, for
    /// the image may now hold what the failed operation took.
    pub(crate) fn after_undo(self, undo: Result<()>) -> Self {
        match undo {
            Ok(()) => self,
            Err(undo) => {
                Error::Internal(format!("{self}; giving back what it took failed: {undo}"))
            }
        }
    }

    pub(crate) fn io(context: impl Into<String>, source: io::Error) -> Self {
        Error::Io {
            context: context.into(),
            source,
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

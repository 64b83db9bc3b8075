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
    /// No space left: the string says of what ("blocks", "inodes", "directory index").
    #[error("no space left on the filesystem ({0})")]
    NoSpace(String),
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
    /// A link count would pass its limit (EMLINK).
    #[error("{0}: too many links")]
    TooManyLinks(String),
    /// A size or offset the format cannot express (EFBIG).
    #[error("{0}: file too large")]
    FileTooBig(String),
    /// A bad argument (EINVAL).
    #[error("invalid argument: {0}")]
    Invalid(String),
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
}

impl Error {
    pub(crate) fn io(context: impl Into<String>, source: io::Error) -> Self {
        Error::Io {
            context: context.into(),
            source,
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

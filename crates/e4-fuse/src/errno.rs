//! The errno a FUSE request gets for an engine error.

use e4_format::FormatError;
use e4_fs::Error;
use fuser::Errno;

/// The errno the kernel's ext4 gives for what `error` says went wrong, so programs see the
/// same failures on an e4 mount as on a kernel mount. A damaged structure answers EUCLEAN
/// and a bad checksum EBADMSG (ext4's EFSCORRUPTED and EFSBADCRC); an I/O error passes the
/// device's errno through.
///
/// Replaced by `e4_fs::Error::errno()` when it lands.
pub fn errno_of(error: &Error) -> Errno {
    match error {
        Error::Format(FormatError::Corrupt { .. }) => Errno::from_i32(libc::EUCLEAN),
        Error::Format(FormatError::Checksum { .. }) => Errno::EBADMSG,
        Error::Format(FormatError::Incompatible(_)) | Error::NotSupported(_) => Errno::EOPNOTSUPP,
        Error::Io { source, .. } => source.raw_os_error().map_or(Errno::EIO, Errno::from_i32),
        Error::NotAFilesystem(_) | Error::WrongType { .. } | Error::Invalid(_) => Errno::EINVAL,
        Error::NotFound(_) => Errno::ENOENT,
        Error::NotADirectory(_) => Errno::ENOTDIR,
        Error::SymlinkLoop(_) => Errno::ELOOP,
        Error::NoSpace(_) => Errno::ENOSPC,
        Error::Exists(_) => Errno::EEXIST,
        Error::NoAttribute(_) => Errno::ENODATA,
        Error::NotEmpty(_) => Errno::ENOTEMPTY,
        Error::IsADirectory(_) => Errno::EISDIR,
        Error::NameTooLong(_) => Errno::ENAMETOOLONG,
        Error::TooManyLinks(_) => Errno::EMLINK,
        Error::FileTooBig(_) => Errno::EFBIG,
        Error::ReadOnly(_) => Errno::EROFS,
        Error::NoDevice(_) => Errno::ENODEV,
        Error::IllegalSeek(_) => Errno::ESPIPE,
    }
}

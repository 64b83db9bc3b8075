//! What can go wrong making a filesystem: the options (a bad value, or a feature e4 does not
//! make), a size too small or too large for the geometry, or the I/O.

use std::path::PathBuf;

/// Why `e4 mkfs` could not make the filesystem. Every message is one sentence that names
/// the option, feature or file.
#[derive(Debug, thiserror::Error)]
pub enum MkfsError {
    /// An option's value is not valid (`-b 3000`, `-O frobnicate`).
    #[error("invalid {option}: {reason}")]
    InvalidOption { option: String, reason: String },
    /// Options or features mke2fs has and e4 does not implement.
    #[error("not supported by e4 mkfs: {0}")]
    Unsupported(String),
    /// The size leaves no room for the filesystem's own structures.
    #[error("{0}")]
    Geometry(String),
    /// The configuration file could not be read or parsed.
    #[error("{path}: {reason}")]
    Profile { path: PathBuf, reason: String },
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

pub type Result<T> = std::result::Result<T, MkfsError>;

pub(crate) fn invalid(option: &str, reason: impl Into<String>) -> MkfsError {
    MkfsError::InvalidOption {
        option: option.to_string(),
        reason: reason.into(),
    }
}

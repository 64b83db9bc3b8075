//! What a directory entry is, apart from where it is stored: the facts of the filesystem
//! that shape entries ([`DirFormat`]), the entry as callers see it ([`DirEntry`]), and the
//! rule for a name a caller may create.

use e4_format::dir_entry::{file_type as ft, MAX_NAME_LEN};
use e4_format::features::{CompatFeatures, IncompatFeatures};
use e4_format::inode::{FileType, Inode};
use e4_format::superblock::Superblock;

use crate::error::{Error, Result};

/// A directory entry as returned to callers ("." and ".." are not included).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirEntry {
    pub name: Vec<u8>,
    pub ino: u32,
    /// The type recorded in the entry, when the filetype feature records one.
    pub file_type: Option<FileType>,
}

/// The filesystem-wide facts directory edits depend on, read from the superblock once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirFormat {
    /// Block size in bytes.
    pub block_size: usize,
    /// INCOMPAT_FILETYPE: entries record their file type.
    pub filetype: bool,
    /// RO_COMPAT_METADATA_CSUM: leaves end with a checksum tail, index blocks with a dx_tail.
    pub metadata_csum: bool,
    /// COMPAT_DIR_INDEX: full one-block directories become htree-indexed.
    pub dir_index: bool,
    /// INCOMPAT_LARGEDIR: three index levels instead of two.
    pub large_dir: bool,
    /// `s_def_hash_version`: the hash a new index root records (0 legacy, 1 half-MD4, 2 TEA).
    pub def_hash_version: u8,
    /// `s_flags` EXT2_FLAGS_UNSIGNED_HASH: hash names as unsigned bytes.
    pub unsigned_hash: bool,
    /// `s_hash_seed`.
    pub hash_seed: [u32; 4],
}

impl DirFormat {
    pub fn from_superblock(sb: &Superblock) -> Self {
        DirFormat {
            block_size: sb.block_size() as usize,
            filetype: sb.incompat().contains(IncompatFeatures::FILETYPE),
            metadata_csum: sb.has_metadata_csum(),
            dir_index: sb.compat().contains(CompatFeatures::DIR_INDEX),
            large_dir: sb.incompat().contains(IncompatFeatures::LARGEDIR),
            def_hash_version: sb.def_hash_version,
            unsigned_hash: sb.unsigned_dir_hash(),
            hash_seed: sb.hash_seed,
        }
    }

    /// The `file_type` code an entry records: 0 without the filetype feature.
    pub(crate) fn file_type_code(&self, t: FileType) -> u8 {
        if self.filetype {
            ft::from_file_type(t)
        } else {
            ft::UNKNOWN
        }
    }

    /// Index levels an htree may have, the root included (`ext4_dir_htree_level`).
    pub(crate) fn max_index_levels(&self) -> u8 {
        if self.large_dir {
            e4_format::dir_htree::MAX_LEVELS_LARGEDIR
        } else {
            e4_format::dir_htree::MAX_LEVELS
        }
    }
}

/// Rejects a name no directory may hold: longer than 255 bytes (ENAMETOOLONG), or empty,
/// "." or "..", or holding '/' or NUL (EINVAL). The one check: operations run it before they
/// lock anything, and the editor again as a last line.
pub(crate) fn check_name(name: &[u8]) -> Result<()> {
    let shown = || String::from_utf8_lossy(name).into_owned();
    if name.len() > MAX_NAME_LEN {
        return Err(Error::NameTooLong(shown()));
    }
    if name.is_empty() || name == b"." || name == b".." || name.contains(&b'/') || name.contains(&0)
    {
        return Err(Error::Invalid(format!(
            "{:?} cannot be a file name",
            shown()
        )));
    }
    Ok(())
}

/// Refuses an inode that is not a directory (ENOTDIR): the one check of what every
/// directory operation, reading or writing, needs of its inode.
pub(crate) fn require_directory(inode: &Inode) -> Result<()> {
    if inode.file_type() != Some(FileType::Directory) {
        return Err(Error::NotADirectory(format!("inode {}", inode.ino)));
    }
    Ok(())
}

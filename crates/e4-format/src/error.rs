//! The ways reading a structure can fail are kept apart: the bytes are corrupt, the
//! checksum does not match, the filesystem needs a feature e4 does not implement, or a
//! table its claims size does not fit in memory.

use std::fmt;

use crate::problem::{Problem, Structure};
use crate::table::TableTooLarge;

/// Where in the image a structure was found. It displays with its preposition, so that an
/// error reads as a sentence: "extent tree node in block 812 of inode 12 ...".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Location {
    /// The primary superblock at byte 1024.
    Superblock,
    /// A block group's descriptor.
    Group(u32),
    /// An inode record, or data held inside it (`i_block`, in-inode xattrs).
    Inode(u32),
    /// A filesystem block, not tied to one inode.
    Block(u64),
    /// A block that belongs to an inode (extent node, directory block, xattr block).
    InodeBlock { inode: u32, block: u64 },
    /// A block inside the journal, by its number in the journal.
    JournalBlock(u64),
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Location::Superblock => write!(f, "at byte 1024"),
            Location::Group(g) => write!(f, "of group {g}"),
            Location::Inode(i) => write!(f, "of inode {i}"),
            Location::Block(b) => write!(f, "in block {b}"),
            Location::InodeBlock { inode, block } => write!(f, "in block {block} of inode {inode}"),
            Location::JournalBlock(b) => write!(f, "in journal block {b}"),
        }
    }
}

/// A failure to understand on-disk bytes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FormatError {
    /// The bytes do not form a valid structure.
    #[error("{structure} {location} is corrupt: {problem}")]
    Corrupt {
        structure: Structure,
        location: Location,
        problem: Problem,
    },
    /// The structure parsed, but its checksum does not match its contents.
    #[error("{structure} {location} has an invalid checksum (stored {stored:#x}, computed {computed:#x})")]
    Checksum {
        structure: Structure,
        location: Location,
        stored: u32,
        computed: u32,
    },
    /// The filesystem uses a feature e4 cannot handle safely.
    #[error("the filesystem uses {0}, which e4 does not support")]
    Incompatible(String),
    /// A table sized by what the image claims cannot be held in memory.
    #[error(transparent)]
    TableTooLarge(#[from] TableTooLarge),
}

impl FormatError {
    /// Builds a [`FormatError::Corrupt`].
    pub fn corrupt(structure: Structure, location: Location, problem: Problem) -> Self {
        FormatError::Corrupt {
            structure,
            location,
            problem,
        }
    }
}

/// Checks a stored checksum against the computed one.
pub fn verify_checksum(
    structure: Structure,
    location: Location,
    stored: u32,
    computed: u32,
) -> Result<()> {
    if stored == computed {
        Ok(())
    } else {
        Err(FormatError::Checksum {
            structure,
            location,
            stored,
            computed,
        })
    }
}

pub type Result<T, E = FormatError> = std::result::Result<T, E>;

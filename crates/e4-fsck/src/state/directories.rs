//! The directories pass 1 finds and the links to them pass 2 finds: what passes 2 and 3
//! are handed, kept here so that no pass imports another.

/// A directory found in pass 1, with what pass 2 needs to check it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Directory {
    /// Its inode number.
    pub ino: u32,
    /// `i_generation`, for the checksum seed.
    pub generation: u32,
    /// `EXT4_INDEX_FL` on a filesystem with dir_index: block 0 is an htree root.
    pub htree: bool,
    /// `i_size` and `i_blocks_lo`, which bound the depth an htree may claim
    /// (`PR_1_HTREE_DEPTH`).
    pub size: u64,
    pub i_blocks_lo: u32,
    /// Block 0 cannot be mapped as libext2fs maps it (an extent node on its path fails
    /// its checks): e2fsck's `handle_htree` calls such a root invalid.
    pub root_unmappable: bool,
    /// `EXT4_CASEFOLD_FL` under the casefold feature and the utf8 encoding: names are
    /// hashed and compared case-folded ([`e4_format::casefold`]).
    pub casefold: bool,
    /// Its blocks, (logical, physical), in logical order.
    pub blocks: Vec<(u32, u64)>,
    /// For an inline directory: `i_block` and the `system.data` value (boxed: one
    /// directory record per directory is kept until pass 3, and most are not inline).
    pub inline: Option<Box<(Vec<u8>, Vec<u8>)>>,
}

/// Hole reports past this many in one directory are folded into one: e2fsck prints one
/// per block, which a damaged extent far out (up to 2^32 blocks with large_dir) would
/// make billions.
pub const HOLE_REPORTS_PER_DIRECTORY: u32 = 1024;

/// An entry naming a directory (not `.` or `..`): the candidate parent links pass 3
/// chooses from. Ordered by where the entry is, as e2fsck meets them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct SubdirLink {
    /// The directory named.
    pub child: u32,
    /// Physical block of the entry (0 for an inline directory).
    pub block: u64,
    /// Byte offset of the entry in its block.
    pub offset: u32,
    /// The directory holding the entry.
    pub parent: u32,
}

/// What pass 2 hands to pass 3.
#[derive(Debug, Default)]
pub struct Pass2Result {
    /// Every entry naming a directory, sorted by child then position.
    pub subdir_links: Vec<SubdirLink>,
}

//! The directories pass 1 finds and the links to them pass 2 finds: what passes 2 and 3
//! are handed, kept here so that no pass imports another.

use rayon::prelude::*;

/// A directory found in pass 1, with what pass 2 needs to check it. Its blocks and inline
/// contents are kept beside it in [`Directories`], so that a record is 24 bytes: one is
/// kept per directory until pass 3, and a record holding its own block vector (and a
/// pointer for the rare inline contents) cost 120 bytes with its allocation — 3.7 MB of
/// the 31,000-directory benchmark image's check, where e2fsck keeps 12 bytes a directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Directory {
    /// `i_size`, which with `i_blocks_lo` bounds the depth an htree may claim
    /// (`PR_1_HTREE_DEPTH`).
    pub size: u64,
    /// Its inode number.
    pub ino: u32,
    /// `i_generation`, for the checksum seed.
    pub generation: u32,
    pub i_blocks_lo: u32,
    /// `i_links_count`, handed to the inode state after pass 1
    /// ([`InodeStates::count_directories`](super::inode_state::InodeStates::count_directories)).
    pub links: u16,
    /// [`DirectoryFlags`], packed in a byte to keep the record at 24 bytes.
    flags: u8,
}

/// What pass 1 learned of a directory's flags.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DirectoryFlags {
    /// `EXT4_INDEX_FL` on a filesystem with dir_index: block 0 is an htree root.
    pub htree: bool,
    /// Block 0 cannot be mapped as libext2fs maps it (an extent node on its path fails
    /// its checks): e2fsck's `handle_htree` calls such a root invalid.
    pub root_unmappable: bool,
    /// `EXT4_CASEFOLD_FL` under the casefold feature and the utf8 encoding: names are
    /// hashed and compared case-folded ([`e4_format::casefold`]).
    pub casefold: bool,
    /// `EXT4_ENCRYPT_FL` with `EXT4_CASEFOLD_FL` (e2fsprogs' `ext4_hash_in_dirent` of the
    /// inode, flags alone): its htree root must name SipHash, and no other root may.
    pub siphash: bool,
}

impl Directory {
    const HTREE: u8 = 1;
    const ROOT_UNMAPPABLE: u8 = 2;
    const CASEFOLD: u8 = 4;
    const SIPHASH: u8 = 8;

    pub fn new(
        ino: u32,
        generation: u32,
        size: u64,
        i_blocks_lo: u32,
        links: u16,
        flags: DirectoryFlags,
    ) -> Self {
        let bit = |on: bool, bit: u8| if on { bit } else { 0 };
        Directory {
            size,
            ino,
            generation,
            i_blocks_lo,
            links,
            flags: bit(flags.htree, Self::HTREE)
                | bit(flags.root_unmappable, Self::ROOT_UNMAPPABLE)
                | bit(flags.casefold, Self::CASEFOLD)
                | bit(flags.siphash, Self::SIPHASH),
        }
    }

    /// See [`DirectoryFlags::htree`].
    pub fn htree(&self) -> bool {
        self.flags & Self::HTREE != 0
    }

    /// See [`DirectoryFlags::root_unmappable`].
    pub fn root_unmappable(&self) -> bool {
        self.flags & Self::ROOT_UNMAPPABLE != 0
    }

    /// See [`DirectoryFlags::casefold`].
    pub fn casefold(&self) -> bool {
        self.flags & Self::CASEFOLD != 0
    }

    /// See [`DirectoryFlags::siphash`].
    pub fn siphash(&self) -> bool {
        self.flags & Self::SIPHASH != 0
    }
}

/// One block of a directory: 16 bytes, all directories' in one vector.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DirBlock {
    pub physical: u64,
    pub logical: u32,
    /// Its directory's inode number.
    pub ino: u32,
}

/// An inline directory's contents: `i_block` and the `system.data` value.
pub type InlineContents = (Vec<u8>, Vec<u8>);

/// The directories pass 1 found, as flat arrays: the records, every directory's blocks in
/// one vector, and the few inline directories' contents, each by inode number. Pass 1's
/// workers add each directory as they meet it, under a lock; [`Directories::sort`] then
/// puts all three in inode order (a directory's blocks in logical order), in place.
/// Per-piece lists, joined in order at the end of pass 1 or appended under the lock, left
/// what they had freed resident in each worker's allocator pages: 0.9 and 0.8 MiB more
/// at the end of a two-thread pass 1 on the benchmark's 31,000-directory image.
#[derive(Debug, Default)]
pub struct Directories {
    records: Vec<Directory>,
    blocks: Vec<DirBlock>,
    inline: Vec<(u32, InlineContents)>,
}

impl Directories {
    /// Adds a directory, with its blocks as (logical, physical) in logical order.
    pub fn push(
        &mut self,
        record: Directory,
        blocks: &[(u32, u64)],
        inline: Option<InlineContents>,
    ) {
        let ino = record.ino;
        self.records.push(record);
        self.blocks
            .extend(blocks.iter().map(|&(logical, physical)| DirBlock {
                physical,
                logical,
                ino,
            }));
        self.inline.extend(inline.map(|contents| (ino, contents)));
    }

    /// Puts the directories in inode order, and each one's blocks in logical order.
    pub fn sort(&mut self) {
        self.records.par_sort_unstable_by_key(|d| d.ino);
        // Physical too, so that a logical block a damaged map names twice keeps one order.
        self.blocks
            .par_sort_unstable_by_key(|b| (b.ino, b.logical, b.physical));
        self.inline.sort_unstable_by_key(|&(ino, _)| ino);
    }

    /// The directories, in inode order.
    pub fn records(&self) -> &[Directory] {
        &self.records
    }

    /// The directory `ino`.
    pub fn record(&self, ino: u32) -> Option<&Directory> {
        let at = self.records.binary_search_by_key(&ino, |d| d.ino).ok()?;
        Some(&self.records[at])
    }

    /// Every directory's blocks, by inode number and logical block, taken out (for pass
    /// 2, which checks them in another order and then frees them): [`Self::blocks_of`]
    /// finds none after.
    pub fn take_blocks(&mut self) -> Vec<DirBlock> {
        std::mem::take(&mut self.blocks)
    }

    /// The blocks of directory `ino`, in logical order.
    pub fn blocks_of(&self, ino: u32) -> &[DirBlock] {
        let start = self.blocks.partition_point(|b| b.ino < ino);
        let end = start + self.blocks[start..].partition_point(|b| b.ino == ino);
        &self.blocks[start..end]
    }

    /// The inline directories: inode number and contents.
    pub fn inline(&self) -> &[(u32, InlineContents)] {
        &self.inline
    }
}

/// Hole reports past this many in one directory are folded into one: e2fsck prints one
/// per block, which a damaged extent far out (up to 2^32 blocks with large_dir) would
/// make billions.
pub const HOLE_REPORTS_PER_DIRECTORY: u32 = 1024;

/// An entry naming a directory (not `.` or `..`): the candidate parent links pass 3
/// chooses from. Ordered by where the entry is, as e2fsck meets them. 16 bytes: one is
/// kept per directory from pass 2 to pass 3.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct SubdirLink {
    /// The directory named.
    pub child: u32,
    /// Where the entry is: its physical block (0 for an inline directory) above 16 bits
    /// of byte offset in the block. A directory block is at most 64 KiB, and block
    /// numbers have 48 bits (the extent format's), so both fit.
    position: u64,
    /// The directory holding the entry.
    pub parent: u32,
}

impl SubdirLink {
    pub fn new(child: u32, block: u64, offset: u32, parent: u32) -> Self {
        SubdirLink {
            child,
            position: block << 16 | u64::from(offset & 0xffff),
            parent,
        }
    }

    /// Byte offset of the entry in its block.
    pub fn offset(&self) -> u32 {
        (self.position & 0xffff) as u32
    }
}

/// What pass 2 hands to pass 3.
#[derive(Debug, Default)]
pub struct Pass2Result {
    /// Every entry naming a directory, sorted by child then position.
    pub subdir_links: Vec<SubdirLink>,
}

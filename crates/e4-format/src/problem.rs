//! What is wrong, typed: which structure ([`Structure`]) and which fact about it
//! ([`Problem`]). The engine and the checker match on these, never on messages; `Display`
//! keeps them readable as the tail of a sentence ("extent tree node in block 812 of inode 12
//! is corrupt: 5 entries exceed the maximum 4").

use std::fmt;

/// The on-disk structure a problem was found in. Displays as its name in prose.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Structure {
    /// `struct ext4_super_block`.
    Superblock,
    /// `struct ext4_group_desc`.
    GroupDescriptor,
    /// A group's block bitmap (its block, or its checksum in the descriptor).
    BlockBitmap,
    /// A group's inode bitmap.
    InodeBitmap,
    /// A group's inode table (where it lies).
    InodeTable,
    /// An inode number, as a reference to an inode record.
    InodeNumber,
    /// `struct ext4_inode`.
    Inode,
    /// A block number taken from some structure, before the block is read.
    BlockPointer,
    /// A run of blocks an inode maps (an extent, a block-map run).
    BlockMapping,
    /// The indirect blocks of an ext2/ext3 block map.
    BlockMap,
    /// `struct ext4_extent_header` and its entries.
    ExtentNode,
    /// A directory as a whole (its inode and its block list).
    Directory,
    /// A linear directory block (leaf).
    DirectoryBlock,
    /// `struct ext4_dir_entry_2`.
    DirectoryEntry,
    /// A directory stored in its inode (inline_data).
    InlineDirectory,
    /// `struct dx_root`: block 0 of an indexed directory.
    HtreeRoot,
    /// `struct dx_node`: an interior index block.
    HtreeNode,
    /// The htree index as a whole (the blocks it points at).
    HtreeIndex,
    /// An external xattr block (`struct ext4_xattr_header`).
    XattrBlock,
    /// `struct ext4_xattr_entry`, in a block or in the inode.
    XattrEntry,
    /// An inode holding one xattr value (ea_inode).
    XattrValueInode,
    /// A symlink's target.
    Symlink,
    /// A POSIX ACL in an xattr value.
    PosixAcl,
    /// A block of the orphan file.
    OrphanBlock,
    /// `struct mmp_struct`: the multiple-mount protection block.
    MmpBlock,
    /// A quota file: its header (`struct v2_disk_dqheader`, `v2_disk_dqinfo`), tree
    /// blocks and entries.
    QuotaFile,
    /// `journal_superblock_t`.
    JournalSuperblock,
    /// `journal_header_t` at the start of a journal block.
    JournalBlockHeader,
    /// A descriptor block of the journal.
    JournalDescriptor,
    /// A commit block of the journal.
    JournalCommit,
    /// A revoke block of the journal.
    JournalRevoke,
}

impl fmt::Display for Structure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Structure::Superblock => "superblock",
            Structure::GroupDescriptor => "group descriptor",
            Structure::BlockBitmap => "block bitmap",
            Structure::InodeBitmap => "inode bitmap",
            Structure::InodeTable => "inode table",
            Structure::InodeNumber => "inode number",
            Structure::Inode => "inode record",
            Structure::BlockPointer => "block pointer",
            Structure::BlockMapping => "block mapping",
            Structure::BlockMap => "block map",
            Structure::ExtentNode => "extent tree node",
            Structure::Directory => "directory",
            Structure::DirectoryBlock => "directory block",
            Structure::DirectoryEntry => "directory entry",
            Structure::InlineDirectory => "inline directory",
            Structure::HtreeRoot => "htree root",
            Structure::HtreeNode => "htree node",
            Structure::HtreeIndex => "htree index",
            Structure::XattrBlock => "xattr block",
            Structure::XattrEntry => "xattr entry",
            Structure::XattrValueInode => "xattr value inode",
            Structure::Symlink => "symlink",
            Structure::PosixAcl => "POSIX ACL",
            Structure::OrphanBlock => "orphan block",
            Structure::MmpBlock => "MMP block",
            Structure::QuotaFile => "quota file",
            Structure::JournalSuperblock => "journal superblock",
            Structure::JournalBlockHeader => "journal block header",
            Structure::JournalDescriptor => "journal descriptor",
            Structure::JournalCommit => "journal commit block",
            Structure::JournalRevoke => "journal revoke block",
        })
    }
}

/// One fact that makes a structure invalid, with the values a checker or a repair needs.
/// Offsets are in bytes from the start of the block (or region) the structure lives in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Problem {
    /// The bytes end before the structure does.
    TooShort { len: usize, need: usize },
    /// The magic number is not the structure's.
    BadMagic { found: u32, expected: u32 },
    /// A field holds a value the format does not allow (named by its on-disk name).
    FieldOutOfRange { field: &'static str, value: u64 },
    /// A field that has exactly one valid value holds another.
    FieldMismatch {
        field: &'static str,
        found: u64,
        expected: u64,
    },
    /// `s_inodes_count` is more than the groups hold.
    InodesExceedGroups {
        inodes: u32,
        groups: u64,
        per_group: u32,
    },
    /// The filesystem is larger than the device holding it.
    DeviceTooSmall {
        blocks: u64,
        block_size: u32,
        device_bytes: u64,
    },
    /// The journal superblock's block is some other journal block type.
    NotAJournalSuperblock,
    /// A journal block header names no known block type.
    UnknownJournalBlockType { found: u32 },
    /// `s_first` does not lie inside the log of `s_maxlen` blocks.
    LogStartOutside { first: u32, maxlen: u32 },
    /// The journal inode maps no block at this journal block, inside the log.
    JournalHole,
    /// The orphan list names an inode number outside the inode table.
    OrphanOutOfRange,
    /// The orphan list comes back to an inode it already passed.
    OrphanLoop,
    /// A node's `eh_max` is more slots than its space holds.
    MaxExceedsCapacity { max: u16, capacity: usize },
    /// A node's `eh_entries` is above its `eh_max`.
    EntriesExceedMax { entries: u16, max: u16 },
    /// A tree is deeper than the kernel builds.
    DepthTooLarge { depth: u16, max: u16 },
    /// A node below the root has a depth other than its parent's less one.
    ChildDepthMismatch { depth: u16, parent_depth: u16 },
    /// A child node's first key is not the key its index entry gives it.
    ChildKeyMismatch { first: Option<u32>, key: u32 },
    /// A node of an extent tree has no entries where it must have some.
    EmptyNode { depth: u16 },
    /// An extent of length 0.
    ZeroLengthExtent { logical: u32 },
    /// Two extents of a leaf overlap, or are not in logical order.
    ExtentsOverlap,
    /// An index node's keys are not strictly increasing.
    KeysOutOfOrder,
    /// The block has no checksum tail where metadata_csum puts one.
    NoChecksumTail,
    /// A directory entry's 8-byte header does not fit in what is left of the block.
    EntryHeaderPastEnd { offset: usize, left: usize },
    /// A directory entry's `rec_len` is too small or not a multiple of 4.
    BadRecLen { offset: usize, rec_len: usize },
    /// A directory entry's `rec_len` runs past the end of the block.
    RecLenPastEnd { offset: usize, rec_len: usize },
    /// A directory entry's name does not fit in its record.
    NameLenExceedsRecLen {
        offset: usize,
        name_len: usize,
        rec_len: usize,
    },
    /// A live directory entry has a zero-length name (e2fsck's `PR_2_NULL_NAME`): it
    /// decodes, but no name can be listed or looked up through it.
    EmptyName,
    /// A directory block is not one block long.
    WrongBlockSize { len: usize, expected: usize },
    /// `dx_root_info` has a wrong `info_length` or a nonzero reserved field.
    BadRootInfo { info_length: u8, reserved_zero: u32 },
    /// An htree has more levels than the filesystem allows (2, 3 with large_dir).
    TooManyLevels { levels: u32, max: u8 },
    /// The block is not an interior index block (its fake dirent does not span it).
    NotAnIndexBlock,
    /// An index node's `count` is 0 or above its `limit`.
    BadCount { count: u16, limit: u16 },
    /// An index node's hashes are not in order.
    HashesOutOfOrder,
    /// `dx_root_info.hash_version` names no hash e4 knows.
    UnknownHashVersion { version: u8 },
    /// An index entry points outside the directory's `blocks` blocks (or at block 0).
    IndexPointsOutside { block: u64, blocks: u64 },
    /// One block is referenced twice by a structure that must reference it once.
    BlockReferencedTwice { block: u64 },
    /// The directory has no block at logical block `logical`.
    Hole { logical: u64 },
    /// The directory has no blocks at all.
    NoBlocks,
    /// The directory's first block does not start with "." and "..".
    MissingDotEntries,
    /// The directory has no ".." entry.
    MissingDotDot,
    /// Following ".." entries upwards comes back to where it started.
    DotDotLoop,
    /// `i_extra_isize` does not fit the inode record, or is not a multiple of 4.
    BadExtraIsize {
        extra_isize: usize,
        inode_size: usize,
    },
    /// `i_mode` has no valid file type.
    BadFileType { mode: u16 },
    /// A file holds more bytes than its kind allows.
    SizeTooLarge { size: u64, limit: u64 },
    /// The inode has EXT4_EA_INODE_FL but is used as a file.
    UnexpectedEaInodeFlag,
    /// An inode number is 0 or above `s_inodes_count`.
    NumberOutOfRange,
    /// The inode lies past `bg_itable_unused` of its group, where no inode is initialized.
    InUninitializedInodeTable { group: u32 },
    /// A block lies outside the filesystem.
    OutsideFilesystem { block: u64 },
    /// A run of blocks lies (partly) outside the filesystem, or in its first block.
    RunOutsideFilesystem { start: u64, len: u64 },
    /// A run of blocks a file's mapping names (data, or a block of the mapping's own)
    /// overlaps the filesystem's fixed metadata (superblocks and descriptors, bitmaps, inode
    /// tables), first at `block`.
    RunInMetadata { start: u64, len: u64, block: u64 },
    /// Blocks the engine was told to free are not in use, are reserved, or are metadata.
    UnfreeableBlocks { len: u64 },
    /// An entry or list entry stops in the middle.
    TruncatedEntry { offset: usize },
    /// An xattr entry list has no terminating zero word.
    EntriesPastEnd { offset: usize },
    /// An xattr entry's name runs past the end of its region.
    NamePastEnd { offset: usize },
    /// An xattr entry's value (`start..end`) runs past the end of its region.
    ValuePastEnd {
        offset: usize,
        start: usize,
        end: usize,
    },
    /// An xattr value lives in an inode, but the filesystem has no ea_inode feature.
    ValueInodeWithoutFeature { inode: u32 },
    /// The xattr value inode does not hold the value an entry of `owner` expects.
    ValueInodeMismatch { owner: u32, size: u32 },
    /// A version field names no version e4 knows.
    UnknownVersion { found: u32 },
    /// The superblock's `s_checksum_type` is not crc32c.
    UnknownChecksumType { found: u8 },
    /// A POSIX ACL with neither a group nor a mask entry, so no mode can be derived from
    /// it (the kernel's `posix_acl_create_masq` answers EIO).
    AclWithoutGroupOrMask,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Problem::TooShort { len, need } => {
                write!(f, "{len} bytes, fewer than the {need} it needs")
            }
            Problem::BadMagic { found, expected } => {
                write!(f, "bad magic {found:#x} (expected {expected:#x})")
            }
            Problem::FieldOutOfRange { field, value } => {
                write!(f, "{field} {value} is out of range")
            }
            Problem::FieldMismatch {
                field,
                found,
                expected,
            } => write!(f, "{field} is {found}, expected {expected}"),
            Problem::InodesExceedGroups {
                inodes,
                groups,
                per_group,
            } => write!(
                f,
                "{inodes} inodes do not fit in {groups} groups of {per_group}"
            ),
            Problem::DeviceTooSmall {
                blocks,
                block_size,
                device_bytes,
            } => write!(
                f,
                "{blocks} blocks of {block_size} bytes do not fit in a {device_bytes}-byte device"
            ),
            Problem::NotAJournalSuperblock => f.write_str("the block is not a journal superblock"),
            Problem::UnknownJournalBlockType { found } => {
                write!(f, "unknown block type {found}")
            }
            Problem::LogStartOutside { first, maxlen } => {
                write!(f, "log starts at {first} of {maxlen}")
            }
            Problem::JournalHole => f.write_str("the journal inode maps no block here"),
            Problem::OrphanOutOfRange => f.write_str("the orphan list names no inode"),
            Problem::OrphanLoop => f.write_str("the orphan list loops back here"),
            Problem::MaxExceedsCapacity { max, capacity } => {
                write!(f, "{max} entries cannot fit ({capacity} slots)")
            }
            Problem::EntriesExceedMax { entries, max } => {
                write!(f, "{entries} entries exceed the maximum {max}")
            }
            Problem::DepthTooLarge { depth, max } => {
                write!(f, "depth {depth} is above the maximum {max}")
            }
            Problem::ChildDepthMismatch {
                depth,
                parent_depth,
            } => write!(f, "depth {depth} under a node of depth {parent_depth}"),
            Problem::ChildKeyMismatch { first, key } => write!(
                f,
                "starts at logical block {first:?}, but its index key is {key}"
            ),
            Problem::EmptyNode { depth } => write!(f, "node of depth {depth} has no entries"),
            Problem::ZeroLengthExtent { logical } => {
                write!(f, "extent at logical block {logical} has length 0")
            }
            Problem::ExtentsOverlap => f.write_str("extents overlap or are out of order"),
            Problem::KeysOutOfOrder => f.write_str("keys are not strictly increasing"),
            Problem::NoChecksumTail => f.write_str("no checksum tail at the end"),
            Problem::EntryHeaderPastEnd { offset, left } => {
                write!(
                    f,
                    "at offset {offset}: {left} bytes left, too few for an entry"
                )
            }
            Problem::BadRecLen { offset, rec_len } => {
                write!(f, "at offset {offset}: record length {rec_len}")
            }
            Problem::RecLenPastEnd { offset, rec_len } => write!(
                f,
                "at offset {offset}: record length {rec_len} runs past the end"
            ),
            Problem::NameLenExceedsRecLen {
                offset,
                name_len,
                rec_len,
            } => write!(
                f,
                "at offset {offset}: name length {name_len} in a {rec_len}-byte record"
            ),
            Problem::EmptyName => f.write_str("a live entry has a zero-length name"),
            Problem::WrongBlockSize { len, expected } => {
                write!(f, "{len} bytes, not one block of {expected}")
            }
            Problem::BadRootInfo {
                info_length,
                reserved_zero,
            } => write!(
                f,
                "root info length {info_length} (reserved {reserved_zero:#x})"
            ),
            Problem::TooManyLevels { levels, max } => {
                write!(f, "{levels} index levels (at most {max})")
            }
            Problem::NotAnIndexBlock => f.write_str("not an index block"),
            Problem::BadCount { count, limit } => write!(f, "count {count} with limit {limit}"),
            Problem::HashesOutOfOrder => f.write_str("hashes out of order"),
            Problem::UnknownHashVersion { version } => {
                write!(f, "unknown hash version {version}")
            }
            Problem::IndexPointsOutside { block, blocks } => {
                write!(f, "points at block {block} of a {blocks}-block directory")
            }
            Problem::BlockReferencedTwice { block } => {
                write!(f, "references block {block} a second time")
            }
            Problem::Hole { logical } => write!(f, "block {logical} is a hole"),
            Problem::NoBlocks => f.write_str("has no blocks"),
            Problem::MissingDotEntries => f.write_str("does not start with \".\" and \"..\""),
            Problem::MissingDotDot => f.write_str("has no \"..\" entry"),
            Problem::DotDotLoop => f.write_str("its \"..\" entries form a loop"),
            Problem::BadExtraIsize {
                extra_isize,
                inode_size,
            } => write!(
                f,
                "extra size {extra_isize} does not fit a {inode_size}-byte inode"
            ),
            Problem::BadFileType { mode } => {
                write!(f, "mode {mode:#o} has no valid file type")
            }
            Problem::SizeTooLarge { size, limit } => {
                write!(f, "size {size} is larger than the {limit} bytes allowed")
            }
            Problem::UnexpectedEaInodeFlag => {
                f.write_str("unexpected EA_INODE flag (it holds an xattr value, not a file)")
            }
            Problem::NumberOutOfRange => f.write_str("out of range"),
            Problem::InUninitializedInodeTable { group } => write!(
                f,
                "lies in the uninitialized part of group {group}'s inode table"
            ),
            Problem::OutsideFilesystem { block } => {
                write!(f, "block {block} lies outside the filesystem")
            }
            Problem::RunOutsideFilesystem { start, len } => {
                write!(f, "blocks {start}+{len} lie outside the filesystem")
            }
            Problem::RunInMetadata { start, len, block } => write!(
                f,
                "blocks {start}+{len} overlap the filesystem's metadata (block {block})"
            ),
            Problem::UnfreeableBlocks { len } => write!(
                f,
                "{len} blocks to free are not in use, reserved, or metadata"
            ),
            Problem::TruncatedEntry { offset } => write!(f, "at offset {offset}: truncated entry"),
            Problem::EntriesPastEnd { offset } => {
                write!(f, "at offset {offset}: entries run past the end")
            }
            Problem::NamePastEnd { offset } => {
                write!(f, "at offset {offset}: name runs past the end")
            }
            Problem::ValuePastEnd { offset, start, end } => write!(
                f,
                "at offset {offset}: value at {start}..{end} runs past the end"
            ),
            Problem::ValueInodeWithoutFeature { inode } => {
                write!(f, "value in inode {inode} without the ea_inode feature")
            }
            Problem::ValueInodeMismatch { owner, size } => {
                write!(f, "does not hold the {size}-byte value of inode {owner}")
            }
            Problem::UnknownVersion { found } => write!(f, "unknown version {found}"),
            Problem::AclWithoutGroupOrMask => f.write_str("neither a group nor a mask entry"),
            Problem::UnknownChecksumType { found } => {
                write!(f, "unknown checksum type {found}")
            }
        }
    }
}

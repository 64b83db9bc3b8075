//! Problems the checker reports: a stable code named after e2fsck's (`PR_*` in
//! `e2fsck/problem.h`, with the same numeric value), where it was found, one line of text,
//! and what a repair would do, so that repair can follow without changing the record.

use std::fmt;

/// What e2fsck's answer "yes" would do for a problem (its prompt, `PROMPT_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Repair {
    /// Rewrite the field or structure with the computed value (`PROMPT_FIX`).
    Fix,
    /// Clear the entry, inode, extent or block reference (`PROMPT_CLEAR`).
    Clear,
    /// Clear the whole inode (`PROMPT_CLEAR_INODE`).
    ClearInode,
    /// Rebuild the directory's hash tree (`PROMPT_CLEAR_HTREE`).
    ClearHtree,
    /// Reconnect to /lost+found (`PROMPT_CONNECT`).
    Connect,
    /// Give each claimant its own copy of shared blocks (`PROMPT_CLONE`).
    Clone,
    /// Salvage what parses of a directory block (`PROMPT_SALVAGE`).
    Salvage,
    /// Move metadata to a free place (`PROMPT_RELOCATE`).
    Relocate,
    /// Create a missing structure (`PROMPT_CREATE`).
    Create,
    /// Build a structure again from scratch (`PROMPT_RECREATE`).
    Recreate,
    /// Stop the check (`PROMPT_ABORT`); declined, e2fsck goes on to its next step.
    Abort,
    /// Rebuild a sound structure smaller (`PROMPT_OPTIMIZE`): no repair.
    Optimize,
    /// Nothing to answer: the message is information (`PROMPT_NONE`).
    None,
}

impl Repair {
    /// The word e2fsck prints as its question.
    pub fn prompt(self) -> &'static str {
        match self {
            Repair::Fix => "Fix",
            Repair::Clear => "Clear",
            Repair::ClearInode => "Clear inode",
            Repair::ClearHtree => "Clear HTree index",
            Repair::Connect => "Connect to /lost+found",
            Repair::Clone => "Clone multiply-claimed blocks",
            Repair::Salvage => "Salvage",
            Repair::Relocate => "Relocate",
            Repair::Create => "Create",
            Repair::Recreate => "Recreate",
            Repair::Optimize => "Optimize",
            Repair::Abort => "Abort",
            Repair::None => "",
        }
    }
}

/// Which kind of damage a problem is: the unit on which the agreement tests compare e4 with
/// e2fsck (each e2fsck message maps to one class too).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ProblemClass {
    /// Superblock fields and summary counters.
    Superblock,
    /// Group descriptor fields and checksums.
    GroupDescriptor,
    /// The resize inode and the reserved descriptor blocks it maps.
    ResizeInode,
    /// Inode fields: mode, dtime, flags, checksum.
    Inode,
    /// Extent tree structure, order, bounds, checksums.
    ExtentTree,
    /// Block numbers outside the filesystem in a block map, or logical blocks past what
    /// the inode's kind may map (`PR_1_TOOBIG_*`).
    IllegalBlock,
    /// `i_size` disagrees with the blocks found.
    InodeSize,
    /// `i_blocks` disagrees with the blocks found.
    InodeBlocks,
    /// A block claimed by two owners.
    MultiplyClaimed,
    /// Extended attribute blocks and their reference counts.
    Xattr,
    /// Directory block structure: rec_len, name_len, checksum, `.` and `..`.
    DirectoryBlock,
    /// A directory entry's target, name or file type.
    DirectoryEntry,
    /// htree index nodes.
    Htree,
    /// Directories not reachable from the root, or `..` wrong.
    Connectivity,
    /// `i_links_count` disagrees with the references found.
    LinkCount,
    /// Block bitmap differences.
    BlockBitmap,
    /// Inode bitmap differences.
    InodeBitmap,
    /// Free block, free inode or directory counts.
    FreeCounts,
    /// Bitmap checksums.
    BitmapChecksum,
    /// The orphan list.
    Orphan,
    /// The journal superblock and recovery state.
    Journal,
    /// Quota files against the usage found.
    Quota,
}

macro_rules! problem_codes {
    ($( $(#[$doc:meta])* $name:ident = $value:expr, $repair:ident, $class:ident, $error:expr; )*) => {
        /// A problem's identity: e2fsck's name and number for it.
        #[allow(non_camel_case_types)]
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub enum ProblemCode {
            $( $(#[$doc])* $name, )*
        }

        impl ProblemCode {
            /// e2fsck's name, e.g. `PR_1_BAD_I_SIZE`.
            pub fn name(self) -> &'static str {
                match self { $( ProblemCode::$name => stringify!($name), )* }
            }

            /// e2fsck's numeric code (`0x01000C` for `PR_1_BAD_I_SIZE`).
            pub fn value(self) -> u32 {
                match self { $( ProblemCode::$name => $value, )* }
            }

            /// What a repair would do.
            pub fn repair(self) -> Repair {
                match self { $( ProblemCode::$name => Repair::$repair, )* }
            }

            /// The class the agreement tests compare.
            pub fn class(self) -> ProblemClass {
                match self { $( ProblemCode::$name => ProblemClass::$class, )* }
            }

            /// Whether leaving the problem unrepaired leaves the filesystem in error (exit
            /// 4 under `-n`). e2fsck flags the exceptions `PR_NO_OK`, or prints them
            /// without a prompt: summary counters that the kernel recomputes, for example.
            pub fn is_error(self) -> bool {
                match self { $( ProblemCode::$name => $error, )* }
            }

            /// Whether e2fsck cannot go on after the problem (a `fatal_error`, exit 8; 12
            /// when it is an error itself, a declined repair, or follows one).
            pub fn is_fatal(self) -> bool {
                matches!(
                    self,
                    ProblemCode::EXT2_ET_INODE_CSUM_INVALID
                        | ProblemCode::PR_1_EXTATTR_READ_ABORT
                        | ProblemCode::PR_1_RESIZE_INODE_CREATE
                        | ProblemCode::PR_0_JOURNAL_BAD_INODE
                        | ProblemCode::PR_0_JOURNAL_BAD_SUPER
                        | ProblemCode::PR_0_JOURNAL_UNSUPP_MULTIFS
                        | ProblemCode::PR_0_CANT_FIND_JOURNAL
                        | ProblemCode::PR_1_BLOCK_ITERATE
                        | ProblemCode::PR_1_ISCAN_ERROR
                        | ProblemCode::PR_1B_ISCAN_ERROR
                        | ProblemCode::EXT2_ET_BAD_INODE_CSUM_INVALID
                        | ProblemCode::EXT2_ET_PASS4_INODE_CSUM_INVALID
                        | ProblemCode::PR_2_DIR_CORRUPTED
                        | ProblemCode::PR_3_NO_ROOT_INODE
                        | ProblemCode::E2FSCK_UNSUPPORTED_ENCODING
                )
            }

            /// The pass that finds the problem: 0 before pass 1, then 1 to 5 (1B and later
            /// sub-passes count as their pass).
            pub fn pass(self) -> u8 {
                (self.value() >> 16) as u8
            }
        }
    };
}

problem_codes! {
    /// The superblock's checksum does not match (e2fsck falls back to a backup).
    PR_0_SB_CORRUPT = 0x000004, Fix, Superblock, true;
    /// The descriptor table failed `ext2fs_check_desc`; the backup is used instead.
    PR_0_CHECK_DESC_FAILED = 0x000045, None, GroupDescriptor, true;
    /// A group's block bitmap lies outside the filesystem or its flex group.
    PR_0_BB_NOT_GROUP = 0x000001, Relocate, GroupDescriptor, true;
    /// A group's inode bitmap lies outside the filesystem or its flex group.
    PR_0_IB_NOT_GROUP = 0x000002, Relocate, GroupDescriptor, true;
    /// A group's inode table lies outside the filesystem or its flex group.
    PR_0_ITABLE_NOT_GROUP = 0x000003, Relocate, GroupDescriptor, true;
    /// A group descriptor's checksum does not match. `e2fsck -n` answers the latch
    /// question no and ignores each descriptor, leaving the exit status 0 (observed with
    /// e2fsprogs 1.47.0; the agreement tests pin it).
    PR_0_GDT_CSUM = 0x000035, Fix, GroupDescriptor, false;
    /// A group is marked uninitialized on a filesystem without group checksums. This and
    /// the next two are asked in `check_super_block`, after which e2fsck marks the
    /// filesystem valid again ("'til proven otherwise"): declined, they leave exit 0.
    PR_0_GDT_UNINIT = 0x000036, Fix, GroupDescriptor, false;
    /// `bg_itable_unused` is larger than the group's free inodes.
    PR_0_GDT_ITABLE_UNUSED = 0x000038, Fix, GroupDescriptor, false;
    /// The last group is marked BLOCK_UNINIT.
    PR_0_BB_UNINIT_LAST = 0x000039, Fix, GroupDescriptor, false;
    /// Without the resize_inode feature, `s_reserved_gdt_blocks` is not zero. Not an error
    /// under `-n`: e2fsck marks the filesystem valid again after these checks.
    PR_0_NONZERO_RESERVED_GDT_BLOCKS = 0x00002E, Fix, ResizeInode, false;
    /// Without the resize_inode feature, the resize inode's `i_block` is not all zero.
    PR_0_CLEAR_RESIZE_INODE = 0x00002F, Clear, ResizeInode, false;
    /// The resize inode does not map the reserved descriptor blocks as it must.
    PR_0_RESIZE_INODE_INVALID = 0x000030, Recreate, ResizeInode, false;
    /// Both resize_inode and meta_bg are set; they exclude each other.
    PR_0_DISABLE_RESIZE_INODE = 0x000051, Fix, ResizeInode, false;
    /// `s_mmp_block` lies outside the filesystem (declined, e2fsck stops).
    PR_0_MMP_INVALID_BLK = 0x000042, Clear, Superblock, true;
    /// The MMP block's magic is wrong (declined, e2fsck stops).
    PR_0_MMP_INVALID_MAGIC = 0x000043, Fix, Superblock, true;
    /// The MMP block's checksum does not match (declined, e2fsck stops).
    PR_0_MMP_CSUM_INVALID = 0x000047, Fix, Superblock, true;
    /// The MMP block's sequence is `EXT4_MMP_SEQ_FSCK`: a checker has the filesystem.
    /// e2fsck stops ("MMP: e2fsck being run", exit 12) through com_err, not a problem
    /// code, so this takes libext2fs's error name and a number of e4's own, in pass 0
    /// above e2fsck's.
    EXT2_ET_MMP_FSCK_ON = 0x00F001, None, Superblock, true;
    /// The MMP block's sequence is above `EXT4_MMP_SEQ_MAX` and no mark: e2fsck stops
    /// ("MMP: undergoing an unknown operation", exit 12), as for `EXT2_ET_MMP_FSCK_ON`.
    EXT2_ET_MMP_UNKNOWN_SEQ = 0x00F002, None, Superblock, true;
    /// casefold with an `s_encoding` e2fsck does not know: it stops ("has unsupported
    /// encoding", "Get a newer version of e2fsck!", exit 12) outside any problem code,
    /// so this takes a number of e4's own. e4 goes on, folding no name.
    E2FSCK_UNSUPPORTED_ENCODING = 0x00F003, None, Superblock, true;
    /// An inode e2fsck reads on its own in pass 1 (an xattr value inode) fails its
    /// checksum: `e2fsck_read_inode` stops e2fsck with a fatal error (exit 8), through
    /// com_err, so this takes libext2fs's error name and a number of e4's own, in pass 1
    /// above e2fsck's. e4 reports it and goes on, with e2fsck's exit status.
    EXT2_ET_INODE_CSUM_INVALID = 0x01F001, None, Inode, false;
    /// The resize inode cannot be read (its checksum fails), so re-creating it at the
    /// end of pass 1 fails; declined, e2fsck stops (exit 12 under `-n`).
    PR_1_RESIZE_INODE_CREATE = 0x01004E, None, ResizeInode, true;
    /// `EXT2_ET_INODE_CSUM_INVALID` again, where pass 2's `process_bad_inode` reads an
    /// inode pass 1 marked bad, for an entry naming it, and its checksum fails: fatal
    /// (exit 12 after the checksum error). An e4 number, in pass 2 where e2fsck stops.
    EXT2_ET_BAD_INODE_CSUM_INVALID = 0x02F001, None, Inode, false;
    /// The journal inode cannot be used (unreadable, bad checksum, no block 0, no
    /// journal magic): declined, e2fsck cannot go on ("Cannot proceed with file system
    /// check", exit 12).
    PR_0_JOURNAL_BAD_INODE = 0x00000F, Clear, Journal, true;
    /// The journal superblock cannot be used: declined, e2fsck cannot go on (exit 12).
    PR_0_JOURNAL_BAD_SUPER = 0x000015, Fix, Journal, true;
    /// A v1 journal superblock with v2 fields set (features, `s_nr_users`), or a v2 one
    /// with several users and no `s_journal_uuid`: e2fsck says it clears them, which
    /// `-n` leaves as a message.
    PR_0_CLEAR_V2_JOURNAL = 0x00002A, None, Journal, false;
    /// A v2 journal superblock with more than one user: an internal journal has one, and
    /// e2fsck stops at once (exit 12).
    PR_0_JOURNAL_UNSUPP_MULTIFS = 0x000010, None, Journal, true;
    /// The superblock names an external journal (`s_journal_uuid` not zero), which
    /// e2fsck looks for among the system's devices and, for an image, does not find: it
    /// stops at once (exit 12). e4 checks the image alone and finds none either.
    PR_0_CANT_FIND_JOURNAL = 0x000011, None, Journal, true;
    /// A journal superblock block type that is none of jbd2's.
    PR_0_JOURNAL_UNSUPP_VERSION = 0x000027, Abort, Journal, true;
    /// An incompatible journal feature jbd2 does not know.
    PR_0_JOURNAL_UNSUPP_INCOMPAT = 0x000026, Abort, Journal, true;
    /// A read-only compatible journal feature (jbd2 knows none).
    PR_0_JOURNAL_UNSUPP_ROCOMPAT = 0x000025, Abort, Journal, true;
    /// The journal needs recovery; `-n` checks the image as it stands.
    PR_0_JOURNAL_RUN = 0x00002B, None, Journal, false;
    /// The bad blocks inode has a mode, an owner, links, the inline-data flag, an xattr
    /// block or a failed checksum.
    PR_1_INVALID_BAD_INODE = 0x010065, Clear, Inode, true;
    /// The bad blocks inode lists a block, or names an indirect block, outside the
    /// filesystem (asked once, "Bad block inode has illegal block(s)", then ignored).
    PR_1_BB_ILLEGAL_BLOCK_NUM = 0x010012, Clear, IllegalBlock, true;
    /// An unused quota inode slot (3, 4 or the project quota inode) holds links, blocks
    /// or a block pointer.
    PR_1_QUOTA_INODE_NOT_CLEAR = 0x010063, Clear, Inode, true;
    /// A quota inode the superblock names is not a regular file.
    PR_1_QUOTA_BAD_MODE = 0x010062, Clear, Inode, true;
    /// The root inode is not a directory.
    PR_1_ROOT_NO_DIR = 0x010001, Clear, Inode, true;
    /// The root inode has a deletion time.
    PR_1_ROOT_DTIME = 0x010002, Fix, Inode, true;
    /// A reserved inode has a mode it must not have.
    PR_1_RESERVED_BAD_MODE = 0x010003, Clear, Inode, true;
    /// An inode's dtime is an inode number: it was left on a corrupted orphan list
    /// (`e2fsck -n` does not process the orphan list, so pass 1 finds its members).
    PR_1_LOW_DTIME = 0x010036, Fix, Orphan, true;
    /// A deleted inode (no links) has no deletion time.
    PR_1_ZERO_DTIME = 0x010004, Fix, Inode, true;
    /// An inode in use has a deletion time.
    PR_1_SET_DTIME = 0x010005, Fix, Inode, true;
    /// `i_extra_isize` does not fit the inode.
    PR_1_EXTRA_ISIZE = 0x01004F, Fix, Inode, true;
    /// The inode scan stops: a group's inode table lies outside the filesystem, or
    /// cannot be read. Fatal (`PR_FATAL`: e2fsck stops, 8, or 12 after an error), and not
    /// an error itself (no question is declined).
    PR_1_ISCAN_ERROR = 0x010028, None, Inode, false;
    /// Two extents map the same logical block.
    PR_1_EXTENT_COLLISION = 0x01007D, Clear, ExtentTree, true;
    /// A directory extent is marked uninitialized.
    PR_1_UNINIT_DBLOCK = 0x010073, Fix, ExtentTree, true;
    /// A symlink, device, fifo or socket has the immutable or append-only flag, which
    /// the kernel never sets on one (`PR_NO_OK`: not an error).
    PR_1_SET_IMMUTABLE = 0x010030, Clear, Inode, false;
    /// A device, fifo or socket has a non-zero `i_size`.
    PR_1_SET_NONZSIZE = 0x010032, Fix, Inode, true;
    /// A device, fifo or socket has the extents or inline-data flag.
    PR_1_SPECIAL_EXTENTS_IDATA = 0x010076, Clear, Inode, true;
    /// The inline-data flag, with a `system.data` attribute, on a filesystem without the
    /// inline_data feature (repair would set the feature).
    PR_1_INLINE_DATA_FEATURE = 0x01006F, Fix, Inode, true;
    /// The inline-data flag on a filesystem without the inline_data feature.
    PR_1_INLINE_DATA_SET = 0x010070, Clear, Inode, true;
    /// Under bigalloc, a block whose offset in its physical cluster differs from its
    /// logical block's in its logical cluster, or a logical cluster spread over two
    /// physical ones; information only: its clusters are claimed twice, for pass 1B.
    PR_1_MISALIGNED_CLUSTER = 0x010074, None, MultiplyClaimed, false;
    /// A block-mapped regular file or directory with data blocks under bigalloc, which
    /// the kernel cannot allocate clusters to.
    PR_1_NO_BIGALLOC_BLOCKMAP_FILES = 0x010080, Fix, Inode, true;
    /// `EXT4_CASEFOLD_FL` on an inode that is not a directory.
    PR_1_CASEFOLD_NONDIR = 0x010088, Clear, Inode, true;
    /// `EXT4_CASEFOLD_FL` on a filesystem without the casefold feature.
    PR_1_CASEFOLD_FEATURE = 0x010089, Clear, Inode, true;
    /// `EXT4_ENCRYPT_FL` without an encryption context (the attribute `c`).
    PR_1_MISSING_ENCRYPTION_XATTR = 0x01008A, Clear, Inode, true;
    /// An encryption context of a known version with the wrong size, or of version 0.
    PR_1_CORRUPT_ENCRYPTION_XATTR = 0x01008B, ClearInode, Inode, true;
    /// The inline-data flag, with the feature, but no `system.data` attribute to be
    /// found in the inode or its xattr block (or one of them does not parse).
    PR_1_INLINE_DATA_NO_ATTR = 0x010075, Clear, Inode, true;
    /// Both the inline-data and extents flags, and `i_block` holds an extent header
    /// (repair would clear the inline-data flag).
    PR_1_CLEAR_INLINE_DATA_FOR_EXTENT = 0x010077, Fix, Inode, true;
    /// Both flags, and `i_size` would fit inline (repair would clear the extents flag).
    PR_1_CLEAR_EXTENT_FOR_INLINE_DATA = 0x010078, Fix, Inode, true;
    /// Both flags, and every `i_block` word could be a block number (repair would clear
    /// both flags).
    PR_1_CLEAR_EXTENT_INLINE_DATA_FLAGS = 0x010079, Fix, Inode, true;
    /// Both flags: the last offer, to clear the inode.
    PR_1_CLEAR_EXTENT_INLINE_DATA_INODE = 0x01007A, ClearInode, Inode, true;
    /// An inode whose mode is no directory holds a directory's `.` and `..` in its first
    /// block (repair would make it a directory).
    PR_1_TREAT_AS_DIRECTORY = 0x010055, Fix, Inode, true;
    /// An xattr entry names a value inode outside the usable inode numbers.
    PR_1_ATTR_VALUE_EA_INODE = 0x010083, Clear, Xattr, true;
    /// An attribute's name in an inode does not fit what is left of the area.
    PR_1_ATTR_NAME_LEN = 0x010050, Clear, Xattr, true;
    /// An attribute's value in an inode does not fit what is left of the area.
    PR_1_ATTR_VALUE_SIZE = 0x010053, Clear, Xattr, true;
    /// Pieces of an inode's attribute area overlap, or one passes its end.
    PR_1_INODE_EA_ALLOC_COLLISION = 0x010069, Clear, Xattr, true;
    /// An xattr entry's `e_hash` matches neither form of its name and value's hash (in
    /// an inode, a stored 0 means none).
    PR_1_ATTR_HASH = 0x010054, Clear, Xattr, true;
    /// An xattr entry names a value inode without `EXT4_EA_INODE_FL` (asked after
    /// `PR_1_ATTR_SET_EA_INODE_FL` is declined).
    PR_1_ATTR_NO_EA_INODE_FL = 0x010085, Clear, Xattr, true;
    /// The value inode an xattr entry names lacks `EXT4_EA_INODE_FL` (repair would set
    /// it).
    PR_1_ATTR_SET_EA_INODE_FL = 0x010086, Fix, Xattr, true;
    /// A directory has no blocks.
    PR_1_ZERO_LENGTH_DIR = 0x010006, Clear, Inode, true;
    /// An extent of a directory starts past the block after the one before it (repair
    /// would move it down to close the hole).
    PR_1_COLLAPSE_DBLOCK = 0x010072, Fix, DirectoryBlock, true;
    /// `i_size` disagrees with the blocks the inode maps.
    PR_1_BAD_I_SIZE = 0x01000C, Fix, InodeSize, true;
    /// `i_blocks` disagrees with the blocks the inode owns.
    PR_1_BAD_I_BLOCKS = 0x01000D, Fix, InodeBlocks, true;
    /// A block map points outside the filesystem.
    PR_1_ILLEGAL_BLOCK_NUM = 0x01000E, Clear, IllegalBlock, true;
    /// A directory maps a logical block past `2^21` KiB without large_dir, or its block
    /// map reaches e2fsck's block count limit (the block is then not counted).
    PR_1_TOOBIG_DIR = 0x010044, Clear, IllegalBlock, true;
    /// A regular file's block map reaches e2fsck's block count limit (the block is then
    /// not counted).
    PR_1_TOOBIG_REG = 0x010045, Clear, IllegalBlock, true;
    /// A block-mapped symlink maps a block past its block 0.
    PR_1_TOOBIG_SYMLINK = 0x010046, Clear, IllegalBlock, true;
    /// An xattr block's `h_magic` is not version 2's (e2fsck declines to clear the
    /// reference and goes on to use the block).
    PR_1_BAD_EA_BLOCK = 0x01003A, Clear, Xattr, true;
    /// An xattr block could not be read.
    PR_1_READ_EA_BLOCK = 0x010039, Clear, Xattr, true;
    /// An xattr block's `h_blocks` is not 1.
    PR_1_EA_MULTI_BLOCK = 0x01003E, Clear, Xattr, true;
    /// Pieces of an xattr block (header, entry records with their names, values, the
    /// four bytes that end the list) overlap, or one passes the block's end.
    PR_1_EA_ALLOC_COLLISION = 0x010040, Clear, Xattr, true;
    /// An entry of an xattr block has name index 0.
    PR_1_EA_BAD_NAME = 0x010041, Clear, Xattr, true;
    /// The value of an entry of an xattr block ends past the block.
    PR_1_EA_BAD_VALUE = 0x010042, Clear, Xattr, true;
    /// An xattr block whose reference count must be fixed cannot be read again for it
    /// (its header is not one libext2fs reads, or its checksum fails): fatal to e2fsck
    /// at the end of pass 1 (exit 8, or 12 after an earlier error).
    PR_1_EXTATTR_READ_ABORT = 0x01003B, None, Xattr, false;
    /// An xattr block's reference count disagrees with the inodes using it.
    PR_1_EXTATTR_REFCOUNT = 0x01003C, Fix, Xattr, true;
    /// An extent's physical start is outside the filesystem.
    PR_1_EXTENT_BAD_START_BLK = 0x010058, Clear, ExtentTree, true;
    /// An extent runs past the end of the filesystem.
    PR_1_EXTENT_ENDS_BEYOND = 0x010059, Clear, ExtentTree, true;
    /// Extents are not in increasing, non-overlapping logical order.
    PR_1_OUT_OF_ORDER_EXTENTS = 0x01005E, Clear, ExtentTree, true;
    /// An extent tree node's header is invalid.
    PR_1_EXTENT_HEADER_INVALID = 0x01005F, Clear, ExtentTree, true;
    /// An extent has length zero.
    PR_1_EXTENT_LENGTH_ZERO = 0x010066, Clear, ExtentTree, true;
    /// An inode record's checksum does not match.
    PR_1_INODE_ONLY_CSUM_INVALID = 0x010068, Fix, Inode, true;
    /// An extent tree block's checksum does not match.
    PR_1_EXTENT_ONLY_CSUM_INVALID = 0x01006A, Fix, ExtentTree, true;
    /// A sound extent tree could lose a level (pass 1E's note, printed in pass 1 under
    /// `-n`; `PR_NO_OK`, so no error).
    PR_1E_CAN_COLLAPSE_EXTENT_TREE = 0x014006, Optimize, ExtentTree, false;
    /// A sound extent tree's level could have fewer nodes (as above).
    PR_1E_CAN_NARROW_EXTENT_TREE = 0x014007, Optimize, ExtentTree, false;
    /// An xattr block's checksum does not match.
    PR_1_EA_BLOCK_ONLY_CSUM_INVALID = 0x01006C, Fix, Xattr, true;
    /// An index entry's logical start differs from its child's first extent.
    PR_1_EXTENT_INDEX_START_INVALID = 0x01006D, Fix, ExtentTree, true;
    /// An extent runs past the range its index entry covers.
    PR_1_EXTENT_END_OUT_OF_BOUNDS = 0x01006E, Clear, ExtentTree, true;
    /// The extent header in `i_block` is missing or invalid.
    PR_1_MISSING_EXTENT_HEADER = 0x010081, ClearInode, ExtentTree, true;
    /// `EXT2_ET_INODE_CSUM_INVALID` in pass 4: e2fsck reads an inode again when no entry
    /// names it (`check_ea_inode`) or the references counted differ from its links count
    /// (before `PR_4_BAD_REF_COUNT`), and one whose checksum fails stops it (exit 12 after
    /// the checksum error). An e4 number; declared before pass 4's codes, so that it sorts
    /// before them at one inode, as e2fsck reads the inode before it reports on it.
    EXT2_ET_PASS4_INODE_CSUM_INVALID = 0x04F001, None, Inode, false;
    /// A value inode's stored reference count differs from the xattr entries naming it.
    PR_4_EA_INODE_REF_COUNT = 0x040005, Fix, Xattr, true;
    /// A quota file's usage differs from what the check found, or the file cannot be
    /// read (reported once per quota type, after pass 5).
    PR_6_UPDATE_QUOTAS = 0x060002, Fix, Quota, true;
    /// libext2fs's walk of an inode's blocks ended in an error (an indirect block outside
    /// the filesystem, or the bad blocks inode failing its checksum): e2fsck stops at
    /// once (exit 8, 12 after the illegal block it follows). Declared after pass 1's
    /// other codes, so that what e2fsck reports before it at one inode sorts before it.
    PR_1_BLOCK_ITERATE = 0x010029, None, IllegalBlock, false;
    /// Blocks are claimed by more than one inode, or by an inode and metadata (pass 1B).
    PR_1B_DUP_BLOCK = 0x011002, Clone, MultiplyClaimed, true;
    /// Pass 1B's inode scan meets an inode whose checksum fails (pass 1 forgave it):
    /// e2fsck stops (exit 8, 12 after the checksum error).
    PR_1B_ISCAN_ERROR = 0x011006, None, MultiplyClaimed, false;
    /// An inode's xattr block number is invalid (or the filesystem has no xattrs).
    PR_2_FILE_ACL_BAD = 0x020032, Clear, Xattr, true;
    /// An entry points past the inode count, or at a reserved inode.
    PR_2_BAD_INO = 0x020002, Clear, DirectoryEntry, true;
    /// An entry points at an unused inode.
    PR_2_UNUSED_INODE = 0x020003, Clear, DirectoryEntry, true;
    /// An entry other than `.` points at its own directory.
    PR_2_LINK_DOT = 0x020004, Clear, DirectoryEntry, true;
    /// A second entry points at a directory (directories have one parent).
    PR_2_LINK_DIR = 0x020006, Clear, DirectoryEntry, true;
    /// An entry points at the root directory.
    PR_2_LINK_ROOT = 0x020007, Clear, DirectoryEntry, true;
    /// A live entry has a zero-length name.
    PR_2_NULL_NAME = 0x020030, Clear, DirectoryEntry, true;
    /// A name holds `/` or NUL.
    PR_2_BAD_NAME = 0x020008, Fix, DirectoryEntry, true;
    /// A name in an encrypted directory shorter than one cipher block (16 bytes).
    PR_2_BAD_ENCRYPTED_NAME = 0x020050, Clear, DirectoryEntry, true;
    /// An entry of an encrypted directory names a regular file, directory or symlink
    /// that is not encrypted.
    PR_2_UNENCRYPTED_FILE = 0x020051, Clear, DirectoryEntry, true;
    /// A name in a casefolded directory under strict mode that is not valid UTF-8.
    PR_2_BAD_ENCODED_NAME = 0x020053, Fix, DirectoryEntry, true;
    /// An entry of an encrypted directory names a file of another encryption policy.
    PR_2_INCONSISTENT_ENCRYPTION_POLICY = 0x020052, Clear, DirectoryEntry, true;
    /// The first entry of a directory has no inode (`.` missing).
    PR_2_MISSING_DOT = 0x020009, Fix, DirectoryBlock, true;
    /// The second entry of a directory has no inode (`..` missing).
    PR_2_MISSING_DOT_DOT = 0x02000A, Fix, DirectoryBlock, true;
    /// The first entry of a directory, with an inode, is not named `.`.
    PR_2_1ST_NOT_DOT = 0x02000B, Fix, DirectoryBlock, true;
    /// The second entry of a directory, with an inode, is not named `..`.
    PR_2_2ND_NOT_DOT_DOT = 0x02000C, Fix, DirectoryBlock, true;
    /// `.` does not point at the directory itself.
    PR_2_BAD_INODE_DOT = 0x020001, Fix, DirectoryBlock, true;
    /// An inode's mode is not a valid file type.
    PR_2_BAD_MODE = 0x020012, Clear, Inode, true;
    /// A character device inode is not valid (htree or extent flag, or stray `i_block`
    /// words with immutable set).
    PR_2_BAD_CHAR_DEV = 0x020018, Clear, Inode, true;
    /// A block device inode is not valid, as for a character device.
    PR_2_BAD_BLOCK_DEV = 0x020019, Clear, Inode, true;
    /// A fifo inode is not valid, as for a character device.
    PR_2_BAD_FIFO = 0x020025, Clear, Inode, true;
    /// A socket inode is not valid, as for a character device.
    PR_2_BAD_SOCKET = 0x020026, Clear, Inode, true;
    /// A symlink's size does not match its target, or its target is not held as a
    /// symlink's must be (empty, NUL-less, more than one block, htree flag).
    PR_2_INVALID_SYMLINK = 0x020031, Clear, Inode, true;
    /// `i_faddr` (obsolete fragment address) is not zero.
    PR_2_FADDR_ZERO = 0x02000D, Clear, Inode, true;
    /// A directory has `i_size_high` set without large_dir.
    PR_2_DIR_SIZE_HIGH_ZERO = 0x02000F, Clear, Inode, true;
    /// `i_blocks_hi` is set without huge_file.
    PR_2_BLOCKS_HI_ZERO = 0x020044, Clear, Inode, true;
    /// `i_file_acl_hi` is set without 64bit.
    PR_2_I_FILE_ACL_HI_ZERO = 0x020048, Clear, Inode, true;
    /// A directory block's entries do not parse (rec_len or name_len). Declined, the
    /// block is not salvaged and e2fsck stops ("aborted", exit 12).
    PR_2_DIR_CORRUPTED = 0x020013, Salvage, DirectoryBlock, true;
    /// A directory has a hole (a logical block with no physical block).
    PR_2_DIRECTORY_HOLE = 0x020015, Fix, DirectoryBlock, true;
    /// The byte after the `.` entry's name is not NUL.
    PR_2_DOT_NULL_TERM = 0x020016, Fix, DirectoryBlock, true;
    /// The byte after the `..` entry's name is not NUL.
    PR_2_DOT_DOT_NULL_TERM = 0x020017, Fix, DirectoryBlock, true;
    /// A second `.` entry.
    PR_2_DUP_DOT = 0x02001A, Fix, DirectoryBlock, true;
    /// A second `..` entry.
    PR_2_DUP_DOT_DOT = 0x02001B, Fix, DirectoryBlock, true;
    /// An entry's file type disagrees with its inode's mode.
    PR_2_BAD_FILETYPE = 0x020028, Fix, DirectoryEntry, true;
    /// An entry has a file type on a filesystem without the filetype feature.
    PR_2_CLEAR_FILETYPE = 0x020029, Clear, DirectoryEntry, true;
    /// An htree root's checksum does not match.
    PR_2_HTREE_ROOT_CSUM_INVALID = 0x020049, ClearHtree, Htree, true;
    /// A leaf block of an htree is not referenced by the index.
    PR_2_HTREE_NOTREF = 0x020034, ClearHtree, Htree, true;
    /// A leaf block of an htree is referenced twice.
    PR_2_HTREE_DUPREF = 0x020035, ClearHtree, Htree, true;
    /// A leaf holds a name hashing below its index range.
    PR_2_HTREE_MIN_HASH = 0x020036, ClearHtree, Htree, true;
    /// An htree index with a bad min or max hash, a leaf at the wrong depth or a block
    /// referenced never or twice (e2fsck's question after its last look at the index).
    PR_2_HTREE_CLEAR = 0x020038, ClearHtree, Htree, true;
    /// A leaf holds a name hashing above its index range.
    PR_2_HTREE_MAX_HASH = 0x020037, ClearHtree, Htree, true;
    /// `INDEX_FL` on a regular file or symlink.
    PR_1_HTREE_NODIR = 0x010048, ClearHtree, Htree, true;
    /// `INDEX_FL` on a filesystem without dir_index.
    PR_1_HTREE_SET = 0x010047, ClearHtree, Htree, true;
    /// An htree root has no block, or `reserved_zero` / `info_length` are wrong.
    PR_1_HTREE_BADROOT = 0x010049, ClearHtree, Htree, true;
    /// An htree root names a hash version it may not.
    PR_1_HTREE_HASHV = 0x01004A, ClearHtree, Htree, true;
    /// An htree root carries the incompatible flag.
    PR_1_HTREE_INCOMPAT = 0x01004B, ClearHtree, Htree, true;
    /// An htree root names SipHash in a directory that is not both encrypted and
    /// casefolded.
    PR_1_HTREE_CANNOT_SIPHASH = 0x01008E, ClearHtree, Htree, true;
    /// An encrypted and casefolded directory's htree root names another hash than
    /// SipHash (the only one such a directory's names can be placed by).
    PR_1_HTREE_NEEDS_SIPHASH = 0x01008D, ClearHtree, Htree, true;
    /// An htree root claims more index levels than any directory may have, or than a
    /// directory of its size may have without large_dir (`handle_htree`).
    PR_1_HTREE_DEPTH = 0x01004C, ClearHtree, Htree, true;
    /// A leaf of an htree does not lie as many index levels below the root as the root
    /// says.
    PR_2_HTREE_BAD_DEPTH = 0x020040, ClearHtree, Htree, true;
    /// A directory needs the large_dir feature (more than two index levels, or 2 GiB or
    /// more), which the superblock lacks.
    PR_2_FEATURE_LARGE_DIRS = 0x020039, Fix, Superblock, true;
    /// An htree index entry names a block past the directory's end.
    PR_2_HTREE_BADBLK = 0x02003A, ClearHtree, Htree, true;
    /// An htree root is invalid.
    PR_2_HTREE_BAD_ROOT = 0x02003C, ClearHtree, Htree, true;
    /// An htree index block's limit is not its capacity.
    PR_2_HTREE_BAD_LIMIT = 0x02003D, ClearHtree, Htree, true;
    /// An htree index block's count is past its capacity (its entries are read up to
    /// the capacity).
    PR_2_HTREE_BAD_COUNT = 0x02003E, ClearHtree, Htree, true;
    /// An htree node's hashes are not in order.
    PR_2_HTREE_HASH_ORDER = 0x02003F, ClearHtree, Htree, true;
    /// Two entries in one directory have the same name.
    PR_2_DUPLICATE_DIRENT = 0x020041, Clear, DirectoryEntry, true;
    /// Two entries of one block have the same bytes for a name, which the rehash that
    /// follows does not find equal (casefolded, not strict, a name that does not fold):
    /// e2fsck reports it and the filesystem stays valid.
    PR_2_REPORT_DUP_DIRENT = 0x020043, None, DirectoryEntry, false;
    /// An htree index node's checksum does not match.
    PR_2_HTREE_NODE_CSUM_INVALID = 0x02004A, ClearHtree, Htree, true;
    /// A directory leaf block has no checksum tail.
    PR_2_LEAF_NODE_MISSING_CSUM = 0x02004C, Fix, DirectoryBlock, true;
    /// A directory leaf block parses but its checksum does not match.
    PR_2_LEAF_NODE_ONLY_CSUM_INVALID = 0x02004D, Fix, DirectoryBlock, true;
    /// The root inode is not allocated. Declined, e2fsck cannot go on without a root
    /// ("aborted", exit 12).
    PR_3_NO_ROOT_INODE = 0x030001, Create, Connectivity, true;
    /// A directory is not reachable from the root.
    PR_3_UNCONNECTED_DIR = 0x030003, Connect, Connectivity, true;
    /// `..` names a directory other than the parent.
    PR_3_BAD_DOT_DOT = 0x030005, Fix, Connectivity, true;
    /// Directories form a loop not reachable from the root.
    PR_3_LOOPED_DIR = 0x03001D, Connect, Connectivity, true;
    /// An inode in use has no directory entry and no content.
    PR_4_ZERO_LEN_INODE = 0x040001, Clear, LinkCount, false;
    /// An inode in use has no directory entry.
    PR_4_UNATTACHED_INODE = 0x040002, Connect, LinkCount, true;
    /// `i_links_count` disagrees with the entries found.
    PR_4_BAD_REF_COUNT = 0x040003, Fix, LinkCount, true;
    /// Bits past the last inode (`s_inodes_count`) are not set.
    PR_5_INODE_BMAP_PADDING = 0x050001, Fix, InodeBitmap, true;
    /// Bits past the last block of the last group are not set.
    PR_5_BLOCK_BMAP_PADDING = 0x050002, Fix, BlockBitmap, true;
    /// The block bitmap marks blocks used that nothing owns.
    PR_5_BLOCK_UNUSED = 0x050004, Fix, BlockBitmap, true;
    /// The block bitmap marks blocks free that are in use.
    PR_5_BLOCK_USED = 0x050005, Fix, BlockBitmap, true;
    /// The inode bitmap marks inodes used that are not.
    PR_5_INODE_UNUSED = 0x050008, Fix, InodeBitmap, true;
    /// The inode bitmap marks inodes free that are in use.
    PR_5_INODE_USED = 0x050009, Fix, InodeBitmap, true;
    /// A group's free inode count is wrong.
    PR_5_FREE_INODE_COUNT_GROUP = 0x05000B, Fix, FreeCounts, true;
    /// A group's directory count is wrong.
    PR_5_FREE_DIR_COUNT_GROUP = 0x05000C, Fix, FreeCounts, true;
    /// The superblock's free inode count is wrong (`PR_NO_OK`: not an error).
    PR_5_FREE_INODE_COUNT = 0x05000D, Fix, FreeCounts, false;
    /// A group's free block count is wrong.
    PR_5_FREE_BLOCK_COUNT_GROUP = 0x05000E, Fix, FreeCounts, true;
    /// The superblock's free block count is wrong (`PR_NO_OK`: not an error).
    PR_5_FREE_BLOCK_COUNT = 0x05000F, Fix, FreeCounts, false;
    /// An inode bitmap's checksum does not match.
    PR_5_INODE_BITMAP_CSUM_INVALID = 0x05001A, Fix, BitmapChecksum, true;
    /// A block bitmap's checksum does not match.
    PR_5_BLOCK_BITMAP_CSUM_INVALID = 0x05001B, Fix, BitmapChecksum, true;
}

impl fmt::Display for ProblemCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Where a problem is. Ordered so that sorting problems gives one order whatever the thread
/// count: by pass, then by place.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Location {
    /// The filesystem as a whole (summary counters).
    Filesystem,
    /// The primary superblock.
    Superblock,
    /// The journal.
    Journal,
    /// A block group.
    Group(u32),
    /// An inode.
    Inode(u32),
    /// A block of an inode (extent node, directory block, xattr block), by physical number,
    /// with the logical block where it has one.
    InodeBlock {
        inode: u32,
        block: u64,
        logical: u32,
    },
    /// A directory entry: the directory, its logical block and the entry's byte offset.
    DirEntry { dir: u32, logical: u32, offset: u32 },
    /// A filesystem block not tied to one inode.
    Block(u64),
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Location::Filesystem => write!(f, "filesystem"),
            Location::Superblock => write!(f, "superblock"),
            Location::Journal => write!(f, "journal"),
            Location::Group(g) => write!(f, "group {g}"),
            Location::Inode(i) => write!(f, "inode {i}"),
            Location::InodeBlock {
                inode,
                block,
                logical,
            } => write!(f, "inode {inode} block {block} (logical {logical})"),
            Location::DirEntry {
                dir,
                logical,
                offset,
            } => write!(f, "directory {dir} block {logical} offset {offset}"),
            Location::Block(b) => write!(f, "block {b}"),
        }
    }
}

/// One problem found.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Problem {
    /// e2fsck's code for it.
    pub code: ProblemCode,
    /// Where it is.
    pub location: Location,
    /// One line saying what is wrong, with the values found and expected: its bytes and
    /// no spare capacity (a `String` from `format!` keeps some, and is 8 bytes longer).
    /// An image claiming 2^16 groups of garbage descriptors has a problem in each: this
    /// cut e4 fsck's peak on it by 2.6 MiB.
    pub message: Box<str>,
}

impl Problem {
    /// A problem at `location`.
    pub fn new(code: ProblemCode, location: Location, message: impl Into<String>) -> Self {
        Problem {
            code,
            location,
            message: message.into().into_boxed_str(),
        }
    }

    /// What a repair would do.
    pub fn repair(&self) -> Repair {
        self.code.repair()
    }

    /// The order reports are printed in: by pass, then location, then code and text, so
    /// the output is the same whatever the thread count.
    pub fn sort_key(&self) -> (u8, Location, ProblemCode, &str) {
        (self.code.pass(), self.location, self.code, &self.message)
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({}): {}", self.code, self.location, self.message)?;
        match self.repair().prompt() {
            "" => Ok(()),
            prompt => write!(f, "  {prompt}? no"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_keep_e2fsck_names_and_values() {
        assert_eq!(ProblemCode::PR_1_BAD_I_SIZE.name(), "PR_1_BAD_I_SIZE");
        assert_eq!(ProblemCode::PR_1_BAD_I_SIZE.value(), 0x01000C);
        assert_eq!(ProblemCode::PR_5_FREE_BLOCK_COUNT.pass(), 5);
        assert!(!ProblemCode::PR_5_FREE_BLOCK_COUNT.is_error());
        assert_eq!(ProblemCode::PR_1B_DUP_BLOCK.pass(), 1);
    }

    #[test]
    fn sorting_is_by_pass_then_place() {
        let late = Problem::new(ProblemCode::PR_5_BLOCK_USED, Location::Block(1), "x");
        let early = Problem::new(ProblemCode::PR_1_BAD_I_SIZE, Location::Inode(99), "y");
        let mut v = [late.clone(), early.clone()];
        v.sort_by(|a, b| a.sort_key().cmp(&b.sort_key()));
        assert_eq!(v, [early, late]);
    }
}

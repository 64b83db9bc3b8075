//! Reserved inode numbers that e4-format does not name (it has the root and the journal).

/// `EXT2_BAD_INO`: the bad blocks inode, whose block map lists the blocks never to use.
pub const BAD_BLOCKS_INO: u32 = 1;
/// `EXT4_USR_QUOTA_INO`: the user quota file's slot.
pub const USR_QUOTA_INO: u32 = 3;
/// `EXT4_GRP_QUOTA_INO`: the group quota file's slot.
pub const GRP_QUOTA_INO: u32 = 4;
/// `EXT2_RESIZE_INO`: the resize inode, whose double indirect block maps the reserved
/// descriptor blocks.
pub const RESIZE_INO: u32 = 7;

//! Symlinks, devices, fifos and sockets: the inodes whose `i_block` is not (or not only) a
//! map of data blocks. Pass 1 checks them as e2fsck's pass 1 does
//! (`e2fsck_pass1_check_device_inode`, `e2fsck_pass1_check_symlink`, `check_immutable`,
//! `check_size`, `check_extents_inlinedata`). An inode that fails its type's test is
//! e2fsck's "bad inode": pass 2's `process_bad_inode` reports it with the type's
//! `PR_2_BAD_*` code, and each directory entry naming it should then have file type 0.

use e4_format::extent::{ExtentNodeView, EXTENT_MAGIC};
use e4_format::inode::{flags, FileType, Inode, I_BLOCK_SIZE};

use crate::report::problem::{Location, ProblemCode};
use crate::state::block_claim::BlockWalk;

/// `EXT2_IMMUTABLE_FL`: the file cannot be changed.
const IMMUTABLE_FL: u32 = 0x10;
/// `EXT2_APPEND_FL`: the file can only be appended to.
const APPEND_FL: u32 = 0x20;
/// Neither can be set on a special file through the kernel (`BAD_SPECIAL_FLAGS`).
const BAD_SPECIAL_FLAGS: u32 = IMMUTABLE_FL | APPEND_FL;
/// `i_block` words past the device numbers: a device with immutable or append-only set
/// must have them zero (the kernel leaves stale words there otherwise, so e2fsck only
/// looks when one of those flags shows the inode was damaged).
const DEVICE_WORDS: usize = 4;
/// `EXT4_MIN_INLINE_DATA_SIZE`: the part of inline data held in `i_block`.
const INLINE_IBLOCK_SIZE: u64 = I_BLOCK_SIZE as u64;

/// Checks a symlink, device, fifo or socket inode. Returns false when it is not a valid
/// inode of its type (already reported, with e2fsck's pass 2 code); pass 1 then records
/// it as bad.
pub fn check_special(
    walk: &BlockWalk<'_>,
    inode: &Inode,
    file_type: FileType,
    inline_data_len: impl Fn() -> Option<u64>,
) -> bool {
    let ino = walk.ino;
    let (valid, code, what) = match file_type {
        FileType::Symlink => (
            symlink_is_valid(walk, inode, inline_data_len),
            ProblemCode::PR_2_INVALID_SYMLINK,
            "symlink",
        ),
        FileType::CharDevice => (
            device_is_valid(inode),
            ProblemCode::PR_2_BAD_CHAR_DEV,
            "character device",
        ),
        FileType::BlockDevice => (
            device_is_valid(inode),
            ProblemCode::PR_2_BAD_BLOCK_DEV,
            "block device",
        ),
        FileType::Fifo => (device_is_valid(inode), ProblemCode::PR_2_BAD_FIFO, "FIFO"),
        FileType::Socket => (
            device_is_valid(inode),
            ProblemCode::PR_2_BAD_SOCKET,
            "socket",
        ),
        FileType::Regular | FileType::Directory => return true,
    };
    if !valid {
        walk.report_bad_inode(code, format!("inode {ino} is an illegal {what}"));
        return false;
    }
    if inode.flags() & BAD_SPECIAL_FLAGS != 0 {
        walk.report(
            ProblemCode::PR_1_SET_IMMUTABLE,
            Location::Inode(ino),
            format!("special file (inode {ino}) has immutable or append-only flag set"),
        );
    }
    if file_type == FileType::Symlink {
        return true;
    }
    if inode.has_flag(flags::EXTENTS) || inode.has_flag(flags::INLINE_DATA) {
        walk.report(
            ProblemCode::PR_1_SPECIAL_EXTENTS_IDATA,
            Location::Inode(ino),
            format!("special file (inode {ino}) has extents or inline-data flag set"),
        );
    }
    if inode.size() != 0 {
        walk.report(
            ProblemCode::PR_1_SET_NONZSIZE,
            Location::Inode(ino),
            format!("special inode {ino} has non-zero size {}", inode.size()),
        );
    }
    true
}

/// e2fsck's `e2fsck_pass1_check_device_inode`, for devices, fifos and sockets: no htree
/// or extent flag, and with immutable or append-only set nothing past the device numbers.
fn device_is_valid(inode: &Inode) -> bool {
    if inode.has_flag(flags::INDEX) || inode.has_flag(flags::EXTENTS) {
        return false;
    }
    inode.flags() & BAD_SPECIAL_FLAGS == 0
        || inode.record.block[DEVICE_WORDS * 4..]
            .iter()
            .all(|&b| b == 0)
}

/// e2fsck's `e2fsck_pass1_check_symlink`: a non-empty size that fits in 32 bits and
/// matches the target's length, the target held in the inline data, in `i_block` (fast)
/// or in exactly one block at logical 0 (slow), ending before the space holding it does.
fn symlink_is_valid(
    walk: &BlockWalk<'_>,
    inode: &Inode,
    inline_data_len: impl Fn() -> Option<u64>,
) -> bool {
    let size = inode.size();
    if inode.record.size_high != 0 || size == 0 || inode.has_flag(flags::INDEX) {
        return false;
    }
    if inode.has_flag(flags::INLINE_DATA) {
        return !inode.has_flag(flags::EXTENTS) && inline_data_len() == Some(size);
    }
    // `ext2fs_is_fast_symlink`: the size alone says where the target is.
    let target = if size < INLINE_IBLOCK_SIZE {
        if inode.has_flag(flags::EXTENTS) {
            return false;
        }
        inode.record.block.to_vec()
    } else {
        match slow_symlink_block(walk, inode) {
            Some(block) => block,
            None => return false,
        }
    };
    let len = if inode.has_flag(flags::ENCRYPT) {
        // An encrypted target is a 2-byte length and that many bytes of ciphertext.
        usize::from(u16::from_le_bytes([target[0], target[1]])) + 2
    } else {
        target.iter().position(|&b| b == 0).unwrap_or(target.len())
    };
    len < target.len() && len as u64 == size
}

/// The one block holding a slow symlink's target: logical block 0 of a one-extent,
/// depth-0 tree, or `i_block[0]` with every other word zero. None if it is not so, lies
/// outside the filesystem or cannot be read.
fn slow_symlink_block(walk: &BlockWalk<'_>, inode: &Inode) -> Option<Vec<u8>> {
    let ctx = walk.ctx;
    let i_block = &inode.record.block;
    let physical = if inode.has_flag(flags::EXTENTS) {
        let root = ExtentNodeView::new(i_block, e4_format::Location::Inode(walk.ino)).ok()?;
        if root.header.magic != EXTENT_MAGIC || root.header.depth != 0 || root.len() != 1 {
            return None;
        }
        let extent = root.leaf(0).extent();
        if extent.logical != 0 || extent.len != 1 {
            return None;
        }
        extent.physical
    } else {
        if i_block[4..].iter().any(|&b| b != 0) {
            return None;
        }
        u64::from(u32::from_le_bytes([
            i_block[0], i_block[1], i_block[2], i_block[3],
        ]))
    };
    if !ctx.is_valid_block(physical) {
        return None;
    }
    let block_size = u64::from(ctx.block_size());
    let mut block = vec![0u8; block_size as usize];
    ctx.image
        .read_at(physical.checked_mul(block_size)?, &mut block)
        .ok()?;
    Some(block)
}

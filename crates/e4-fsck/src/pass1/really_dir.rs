//! An inode whose mode says device, fifo, socket or nothing valid, but whose first block
//! holds a directory's `.` and `..` (e2fsck's `check_is_really_dir`,
//! `PR_1_TREAT_AS_DIRECTORY`): a directory whose mode was damaged. Under `-n` the repair
//! is declined and the inode is checked by its mode, so this adds the one report.

use e4_format::checksum::inode_csum_seed;
use e4_format::dir_entry::{has_tail, rec_len_from_disk, DirLeafBlock, ENTRY_HEADER_SIZE};
use e4_format::dir_htree::DxNode;
use e4_format::features::IncompatFeatures;
use e4_format::inode::{flags, FileType, Inode, ROOT_INO};
use e4_format::MetadataBlock;

use crate::pass1::inline_data::inline_data_size;
use crate::report::problem::{Location, ProblemCode};
use crate::state::block_claim::BlockWalk;
use crate::state::context::Context;
use crate::walk::file_map::map_logical;
use crate::xattr::lookup::BlockChecksum;

/// Where the first entry starts in an inline directory's `i_block`: after the parent
/// (`EXT4_INLINE_DATA_DOTDOT_SIZE`).
const INLINE_DOTDOT_SIZE: usize = 4;
/// The smallest directory record (`EXT2_DIR_REC_LEN(1)`).
const MIN_REC_LEN: usize = 12;
/// Block-map words past the fourth are never set in a device inode.
const DEVICE_WORDS: usize = 4;

/// Reports `PR_1_TREAT_AS_DIRECTORY` for `inode` when its content looks like a
/// directory's. One difference is kept: e2fsck rules out a block-map block that an inode
/// scanned before this one already claimed (its `block_found_map` at that moment, which
/// depends on scan order); e4 scans in parallel and rules out only metadata blocks.
pub fn check(walk: &BlockWalk<'_>, inode: &Inode) {
    if looks_like_directory(walk.ctx, inode) {
        let ino = walk.ino;
        walk.report(
            ProblemCode::PR_1_TREAT_AS_DIRECTORY,
            Location::Inode(ino),
            format!("inode {ino} is not a directory by its mode but it looks like it is really a directory"),
        );
    }
}

fn looks_like_directory(ctx: &Context, inode: &Inode) -> bool {
    let file_type = inode.file_type();
    if matches!(
        file_type,
        Some(FileType::Directory | FileType::Regular | FileType::Symlink)
    ) || word(&inode.record.block, 0) == 0
    {
        return false;
    }
    let features = ctx.sb.incompat();
    let mut not_device = false;
    let block =
        if features.contains(IncompatFeatures::INLINE_DATA) && inode.has_flag(flags::INLINE_DATA) {
            // Device files never have a `system.data`, so no device test follows.
            return inline_looks_like_directory(ctx, inode);
        } else if features.contains(IncompatFeatures::EXTENTS) && inode.has_flag(flags::EXTENTS) {
            // Device files are never extent mapped.
            not_device = true;
            match map_logical(ctx, inode, 0) {
                Some(block) => block,
                None => return false,
            }
        } else {
            for i in 0..inode.record.block.len() / 4 {
                let block = u64::from(word(&inode.record.block, i));
                if block == 0 {
                    continue;
                }
                not_device |= i >= DEVICE_WORDS;
                if !ctx.is_valid_block(block) || ctx.metadata.get(ctx.cluster_of(block)) {
                    return false;
                }
            }
            u64::from(word(&inode.record.block, 0))
        };
    if matches!(
        file_type,
        Some(FileType::CharDevice | FileType::BlockDevice)
    ) && inode.links_count() == 1
        && !not_device
    {
        return false;
    }
    first_block_holds_dots(ctx, inode, block)
}

/// The inline form: `i_block` starts with a parent number and an entry whose numbers are
/// plausible, and the inline size is a multiple of 4.
fn inline_looks_like_directory(ctx: &Context, inode: &Inode) -> bool {
    let Some(size) = inline_data_size(ctx, inode, BlockChecksum::Verify) else {
        return false;
    };
    let i_block = &inode.record.block;
    let parent = word(i_block, 0);
    let entry_inode = word(i_block, 1);
    let rec_len = rec_len_from_disk(
        u16::from_le_bytes([i_block[8], i_block[9]]),
        ctx.block_size() as usize,
    );
    let inodes = ctx.sb.inodes_count;
    let first_ino = ctx.sb.first_ino();
    size % 4 == 0
        && parent < inodes
        && (parent >= first_ino || parent == ROOT_INO)
        && entry_inode < inodes
        && (entry_inode >= first_ino || entry_inode == 0)
        && rec_len <= i_block.len() - INLINE_DOTDOT_SIZE
}

/// Whether `block` starts with `.` naming the inode and then `..`, with sane record
/// lengths, and (under metadata_csum) passes its checksum, as `ext2fs_read_dir_block4`
/// requires.
fn first_block_holds_dots(ctx: &Context, inode: &Inode, block: u64) -> bool {
    let Ok(bytes) = ctx.image.read_blocks(block, 1, ctx.block_size()) else {
        return false;
    };
    let bs = bytes.len();
    if let Some(seed) = ctx.csum_seed {
        let seed = inode_csum_seed(seed, inode.ino, inode.record.generation);
        let loc = e4_format::Location::Block(block);
        let verified = if has_tail(&bytes) {
            DirLeafBlock::verify(&bytes, seed, loc).is_ok()
        } else {
            DxNode::verify(&bytes, seed, loc).is_ok()
        };
        if !verified {
            return false;
        }
    }
    let entry = |at: usize| -> Option<(u32, usize, &[u8])> {
        let header = bytes.get(at..at + ENTRY_HEADER_SIZE)?;
        let rec_len = rec_len_from_disk(u16::from_le_bytes([header[4], header[5]]), bs);
        let name_len = usize::from(header[6]);
        let name = bytes.get(at + ENTRY_HEADER_SIZE..at + ENTRY_HEADER_SIZE + name_len)?;
        Some((word(header, 0), rec_len, name))
    };
    let Some((dot_inode, dot_len, dot)) = entry(0) else {
        return false;
    };
    if dot != b"."
        || dot_inode != inode.ino
        || dot_len < MIN_REC_LEN
        || dot_len % 4 != 0
        || dot_len >= bs - MIN_REC_LEN
    {
        return false;
    }
    let Some((_, dotdot_len, dotdot)) = entry(dot_len) else {
        return false;
    };
    dotdot == b".." && dotdot_len >= MIN_REC_LEN && dotdot_len % 4 == 0
}

/// Little-endian word `i` of `bytes`.
fn word(bytes: &[u8], i: usize) -> u32 {
    u32::from_le_bytes([
        bytes[4 * i],
        bytes[4 * i + 1],
        bytes[4 * i + 2],
        bytes[4 * i + 3],
    ])
}

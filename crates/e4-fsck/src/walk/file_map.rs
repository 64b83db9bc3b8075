//! One logical block of a file mapped to its physical block, as libext2fs's
//! `ext2fs_bmap2` maps it for a read: through the extent tree, or the block map's direct,
//! indirect and double indirect blocks. For the few reads outside pass 1's walks (the
//! first block of an inode whose mode is no directory, the quota files), where a walk of
//! the whole tree would be too much.

use e4_format::extent::{ExtentNodeView, MAX_DEPTH};
use e4_format::inode::{flags, Inode};

use crate::state::context::Context;

/// `i_block` words: twelve direct blocks, then the indirect and double indirect block.
const DIRECT_BLOCKS: u64 = 12;
const INDIRECT: usize = 12;
const DOUBLE_INDIRECT: usize = 13;

/// The physical block holding `logical` of `inode`, 0 for a hole (an unwritten extent's
/// block is given, as `ext2fs_bmap2` gives it); `None` when a mapping block cannot be
/// read or does not parse.
pub fn map_logical(ctx: &Context, inode: &Inode, logical: u64) -> Option<u64> {
    if inode.has_flag(flags::EXTENTS) {
        map_extent(ctx, inode, logical)
    } else {
        map_block_map(ctx, inode, logical)
    }
}

fn map_extent(ctx: &Context, inode: &Inode, logical: u64) -> Option<u64> {
    let loc = e4_format::Location::Inode(inode.ino);
    let mut node = inode.record.block.to_vec();
    // One node per level: a tree that names itself, or goes deeper than the format
    // allows, ends here.
    for _ in 0..=MAX_DEPTH {
        let view = ExtentNodeView::new(&node, loc).ok()?;
        let covering = view.entries_starting_by(logical).checked_sub(1);
        if view.is_leaf() {
            return Some(covering.map_or(0, |i| {
                let extent = view.leaf(i).extent();
                let offset = logical - u64::from(extent.logical);
                if offset < u64::from(extent.len) {
                    extent.physical + offset
                } else {
                    0
                }
            }));
        }
        let child = view.index(covering?).leaf();
        node = ctx.image.read_blocks(child, 1, ctx.block_size()).ok()?;
    }
    None
}

fn map_block_map(ctx: &Context, inode: &Inode, logical: u64) -> Option<u64> {
    let per_block = u64::from(ctx.block_size() / 4);
    let i_block = &inode.record.block;
    if logical < DIRECT_BLOCKS {
        return Some(word(i_block, logical as usize));
    }
    let rest = logical - DIRECT_BLOCKS;
    if rest < per_block {
        return entry_of(ctx, word(i_block, INDIRECT), rest);
    }
    let rest = rest - per_block;
    if rest < per_block * per_block {
        let indirect = entry_of(ctx, word(i_block, DOUBLE_INDIRECT), rest / per_block)?;
        return entry_of(ctx, indirect, rest % per_block);
    }
    // Past the double indirect range: not read here (no file this serves is that big).
    None
}

/// Entry `index` of indirect block `block` (0 for a hole when `block` is 0).
fn entry_of(ctx: &Context, block: u64, index: u64) -> Option<u64> {
    if block == 0 {
        return Some(0);
    }
    if !ctx.is_valid_block(block) {
        return None;
    }
    let bytes = ctx.image.read_blocks(block, 1, ctx.block_size()).ok()?;
    Some(word(&bytes, usize::try_from(index).ok()?))
}

/// Little-endian word `i` of `bytes` (0 past the end).
fn word(bytes: &[u8], i: usize) -> u64 {
    bytes.get(4 * i..4 * i + 4).map_or(0, |w| {
        u64::from(u32::from_le_bytes([w[0], w[1], w[2], w[3]]))
    })
}

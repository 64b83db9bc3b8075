//! Walking an ext2/ext3 block map (`i_block`: 12 direct pointers, then single, double and
//! triple indirect), as e2fsck's `process_block` sees it through `ext2fs_block_iterate3`:
//! a pointer outside the filesystem is reported and neither claimed nor followed.
//! Double and triple indirect blocks hand their children to other threads.

use rayon::prelude::*;

use e4_format::block_map::{DIRECT_BLOCKS, SINGLE_INDIRECT_SLOT};
use e4_format::codec::le32;
use e4_format::inode::Inode;

use crate::block_claim::BlockWalk;
use crate::block_tally::BlockTally;
use crate::problem::{Location, ProblemCode};
// The resize inode's double indirect block is the only one of its blocks it owns; the
// rest are reserved descriptor blocks, counted as metadata.
use crate::resize_inode::RESIZE_INO;
use crate::too_big::{self, TooBig};

/// What every block of one map needs to know about its inode.
#[derive(Debug, Clone, Copy)]
struct MapInfo {
    dir: bool,
    too_big: TooBig,
}

/// Walks the block map in `inode`'s `i_block`.
pub fn walk_block_map(walk: &BlockWalk<'_>, inode: &Inode, dir: bool) -> BlockTally {
    let info = MapInfo {
        dir,
        too_big: TooBig::for_inode(walk, inode),
    };
    let mut tally = BlockTally::default();
    let pointer = |slot: usize| le32(&inode.record.block, 4 * slot).unwrap_or(0);
    for slot in 0..SINGLE_INDIRECT_SLOT {
        let block = u64::from(pointer(slot));
        visit_data(walk, slot as u64, block, info, &mut tally);
    }
    let per = u64::from(walk.ctx.block_size() / 4);
    let mut base = DIRECT_BLOCKS;
    for level in 1..=3u32 {
        let block = u64::from(pointer(SINGLE_INDIRECT_SLOT + level as usize - 1));
        if block != 0 {
            visit_indirect(walk, block, level, base, info, &mut tally);
        }
        base += per.pow(level);
    }
    tally
}

/// One data block pointer at `logical`.
fn visit_data(
    walk: &BlockWalk<'_>,
    logical: u64,
    block: u64,
    info: MapInfo,
    tally: &mut BlockTally,
) {
    if block == 0 {
        return;
    }
    if !walk.ctx.is_valid_block(block) {
        report_illegal(walk, block, logical);
        return;
    }
    if let Some(code) = info.too_big.block_map_problem(logical) {
        too_big::report(walk, code, logical, block);
        return;
    }
    if walk.ino != RESIZE_INO {
        walk.claim(block, 1, tally);
    }
    tally.add_data(logical, block, 1, true, info.dir);
}

/// An indirect block of `level` (1 = single) mapping logical blocks from `base`.
fn visit_indirect(
    walk: &BlockWalk<'_>,
    block: u64,
    level: u32,
    base: u64,
    info: MapInfo,
    tally: &mut BlockTally,
) {
    let ctx = walk.ctx;
    if !ctx.is_valid_block(block) {
        report_illegal(walk, block, base);
        return;
    }
    // The resize inode owns only its double indirect block (e2fsck's process_block).
    if walk.ino != RESIZE_INO || level == 2 {
        walk.claim(block, 1, tally);
    }
    tally.blocks += 1;
    if !walk.enter(block) {
        // Named again by this map: counted and claimed again, not re-walked.
        return;
    }
    let bytes = match ctx.image.read_blocks(block, 1, ctx.block_size()) {
        Ok(bytes) => bytes,
        Err(e) => {
            walk.report(
                ProblemCode::PR_1_ILLEGAL_BLOCK_NUM,
                Location::Inode(walk.ino),
                format!(
                    "indirect block {block} of inode {} cannot be read: {e}",
                    walk.ino
                ),
            );
            return;
        }
    };
    let per = u64::from(ctx.block_size() / 4);
    let span = per.pow(level - 1);
    let pointers: Vec<(u64, u64)> = (0..per)
        .filter_map(|i| {
            let child = u64::from(le32(&bytes, 4 * i as usize).unwrap_or(0));
            (child != 0).then_some((base + i * span, child))
        })
        .collect();
    if level == 1 {
        for (logical, child) in pointers {
            visit_data(walk, logical, child, info, tally);
        }
        return;
    }
    let subtrees: Vec<BlockTally> = pointers
        .par_iter()
        .map(|&(logical, child)| {
            let mut sub = BlockTally::default();
            visit_indirect(walk, child, level - 1, logical, info, &mut sub);
            sub
        })
        .collect();
    for sub in subtrees {
        tally.append(sub);
    }
}

fn report_illegal(walk: &BlockWalk<'_>, block: u64, logical: u64) {
    walk.report(
        ProblemCode::PR_1_ILLEGAL_BLOCK_NUM,
        Location::Inode(walk.ino),
        format!("illegal block #{logical} ({block}) in inode {}", walk.ino),
    );
}

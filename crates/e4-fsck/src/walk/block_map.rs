//! Walking an ext2/ext3 block map (`i_block`: 12 direct pointers, then single, double and
//! triple indirect), as e2fsck's `process_block` sees it through `ext2fs_block_iterate3`:
//! a pointer outside the filesystem is reported and neither claimed nor followed; an
//! indirect one also ends libext2fs's walk in an error, which stops e2fsck.
//! Double and triple indirect blocks hand their children to other threads, unless the
//! blocks under them could reach the count limit of [`TooBig`]: which block reaches it
//! depends on e2fsck's order (each indirect block before its children), so such a
//! subtree is walked in that order on one thread; so is every map under bigalloc, where
//! whether a block's cluster is claimed depends on the block before it.

use rayon::prelude::*;

use e4_format::block_map::{DIRECT_BLOCKS, SINGLE_INDIRECT_SLOT};
use e4_format::codec::le32;
use e4_format::inode::Inode;

use crate::report::problem::{Location, ProblemCode};
use crate::state::block_claim::BlockWalk;
use crate::state::block_tally::BlockTally;
// The resize inode's double indirect block is the only one of its blocks it owns; the
// rest are reserved descriptor blocks, counted as metadata.
use crate::state::reserved_inodes::RESIZE_INO;
use crate::walk::too_big::{self, TooBig};

/// What every block of one map needs to know about its inode.
#[derive(Debug, Clone, Copy)]
struct MapInfo {
    dir: bool,
    too_big: TooBig,
    /// Pointers per indirect block.
    per_block: u64,
}

/// Where a subtree's walk stands in e2fsck's count of the inode's blocks: `Some(n)` when
/// it is walked in e2fsck's order and the inode owned `n` blocks before the subtree's
/// tally began (so `n + tally.blocks` are owned before its next block); `None` when no
/// block of it can reach the count limit, so its order does not matter.
type OwnedBefore = Option<u64>;

/// Walks the block map in `inode`'s `i_block` under the limits `too_big`, the inode
/// already owning `owned_before` blocks (its xattr block and values, which e2fsck's
/// `check_blocks` counts before the map).
pub fn walk_block_map(
    walk: &BlockWalk<'_>,
    inode: &Inode,
    dir: bool,
    too_big: TooBig,
    owned_before: u64,
) -> BlockTally {
    let info = MapInfo {
        dir,
        too_big,
        per_block: u64::from(walk.ctx.block_size() / 4),
    };
    // The top level is walked in order, so the count is always known here.
    let owned = Some(owned_before);
    let mut tally = BlockTally::default();
    let pointer = |slot: usize| le32(&inode.record.block, 4 * slot).unwrap_or(0);
    for slot in 0..SINGLE_INDIRECT_SLOT {
        let block = u64::from(pointer(slot));
        visit_data(walk, slot as u64, block, info, owned, &mut tally);
    }
    let mut base = DIRECT_BLOCKS;
    for level in 1..=3u32 {
        let block = u64::from(pointer(SINGLE_INDIRECT_SLOT + level as usize - 1));
        if block != 0 {
            visit_indirect(walk, block, level, base, info, owned, &mut tally);
        }
        base += info.per_block.pow(level);
    }
    if tally.indirect_unfollowed {
        // `check_blocks` then reports the walk's error, which stops e2fsck.
        walk.report(
            ProblemCode::PR_1_BLOCK_ITERATE,
            Location::Inode(walk.ino),
            format!(
                "error while iterating over blocks in inode {}: illegal indirect block found",
                walk.ino
            ),
        );
    }
    tally
}

/// The problem e2fsck's `process_block` finds with the next block of the map (not its
/// place in the filesystem, checked before), given what `tally` owns so far.
fn count_problem(
    info: MapInfo,
    owned_before: OwnedBefore,
    tally: &BlockTally,
) -> Option<ProblemCode> {
    owned_before.and_then(|before| info.too_big.count_problem(before + tally.blocks))
}

/// The most blocks an indirect block of `level` and everything under it can own.
fn subtree_capacity(level: u32, per_block: u64) -> u64 {
    (0..level).fold(1u64, |below, _| {
        per_block.saturating_mul(below).saturating_add(1)
    })
}

/// One data block pointer at `logical`.
fn visit_data(
    walk: &BlockWalk<'_>,
    logical: u64,
    block: u64,
    info: MapInfo,
    owned_before: OwnedBefore,
    tally: &mut BlockTally,
) {
    if block == 0 {
        return;
    }
    if !walk.ctx.is_valid_block(block) {
        report_illegal(walk, block, logical);
        return;
    }
    let problem = info
        .too_big
        .block_map_problem(logical)
        .or_else(|| count_problem(info, owned_before, tally));
    if let Some(code) = problem {
        too_big::report(walk, code, Some(logical), block);
        return;
    }
    if walk.ino == RESIZE_INO {
        tally.blocks += 1;
    } else {
        walk.claim_mapped_block(logical as i64, block, tally);
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
    owned_before: OwnedBefore,
    tally: &mut BlockTally,
) {
    let ctx = walk.ctx;
    if !ctx.is_valid_block(block) {
        report_illegal(walk, block, base);
        tally.indirect_unfollowed = true;
        return;
    }
    if let Some(code) = count_problem(info, owned_before, tally) {
        // Not owned, but still walked: e2fsck's iterator reads the block it was not
        // allowed to clear.
        too_big::report(walk, code, None, block);
    } else {
        // The resize inode owns only its double indirect block (e2fsck's process_block),
        // and counts each of its blocks alone.
        if walk.ino == RESIZE_INO {
            if level == 2 {
                walk.claim(block, 1, tally);
            }
            tally.blocks += 1;
        } else {
            walk.claim_mapped_block(-i64::from(level), block, tally);
        }
    }
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
    let per = info.per_block;
    let span = per.pow(level - 1);
    let pointers: Vec<(u64, u64)> = (0..per)
        .filter_map(|i| {
            let child = u64::from(le32(&bytes, 4 * i as usize).unwrap_or(0));
            (child != 0).then_some((base + i * span, child))
        })
        .collect();
    if level == 1 {
        for (logical, child) in pointers {
            visit_data(walk, logical, child, info, owned_before, tally);
        }
        return;
    }
    let most = (pointers.len() as u64).saturating_mul(subtree_capacity(level - 1, per));
    let in_order = ctx.cluster_bits != 0
        || owned_before
            .is_some_and(|before| !info.too_big.count_stays_below(before + tally.blocks, most));
    if in_order {
        for (logical, child) in pointers {
            visit_indirect(walk, child, level - 1, logical, info, owned_before, tally);
        }
        return;
    }
    let subtrees: Vec<BlockTally> = pointers
        .par_iter()
        .map(|&(logical, child)| {
            let mut sub = BlockTally::default();
            visit_indirect(walk, child, level - 1, logical, info, None, &mut sub);
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

#[cfg(test)]
mod tests {
    use std::collections::HashSet;
    use std::process::Command;
    use std::sync::Mutex;

    use e4_format::inode::FileType;
    use e4_testkit::{e2fsck_clean, make_empty_image, Image};

    use super::*;
    use crate::pass0::superblock::open_and_check;
    use crate::report::phase_times::PhaseClock;
    use crate::state::block_claim::WalkMode;
    use crate::state::context::Context;

    /// The file's inode on a 1 KiB-block ext2 image: 784 pointers in all, 12 direct,
    /// the single indirect block and its 256, the double indirect block and two single
    /// indirect blocks of 256 each.
    const FILE_INO: u32 = 12;
    const FILE_BLOCKS: usize = 12 + 256 + 512;

    fn image_with_file() -> (Image, Context) {
        let image = make_empty_image(&["-t", "ext2", "-b", "1024"], 4);
        // Not zeros: debugfs leaves holes for zero blocks.
        let data = image.path.with_extension("data");
        std::fs::write(&data, vec![0x5a; FILE_BLOCKS * 1024]).unwrap();
        let write = format!("write {} f", data.display());
        let out = Command::new(e4_testkit::tool("debugfs"))
            .args(["-w", "-R", &write])
            .arg(&image.path)
            .output()
            .unwrap();
        assert!(out.status.success(), "debugfs: {out:?}");
        e2fsck_clean(&image.path).unwrap();
        let ctx = open_and_check(&image.path, &mut PhaseClock::start()).unwrap();
        (image, ctx)
    }

    /// The map's pointers in e2fsck's order (each indirect block before its children),
    /// read here on their own.
    fn pointers_in_order(ctx: &Context, block: u64, level: u32, out: &mut Vec<u64>) {
        out.push(block);
        if level == 0 {
            return;
        }
        let bytes = ctx.image.read_blocks(block, 1, ctx.block_size()).unwrap();
        for chunk in bytes.chunks(4) {
            let child = u64::from(u32::from_le_bytes(chunk.try_into().unwrap()));
            if child != 0 {
                pointers_in_order(ctx, child, level - 1, out);
            }
        }
    }

    /// Walks the file under a count limit of `max_blocks`, returning the blocks owned and
    /// the physical blocks reported too big.
    fn walk_with_limit(ctx: &Context, max_blocks: u64) -> (u64, Vec<u64>) {
        let inode = ctx.read_inode(FILE_INO).unwrap();
        let entered = Mutex::new(HashSet::new());
        let walk = BlockWalk {
            ctx,
            ino: FILE_INO,
            mode: WalkMode::Claim,
            entered: &entered,
        };
        let too_big = TooBig::new(Some(FileType::Regular), None, max_blocks);
        let tally = walk_block_map(&walk, &inode, false, too_big, 0);
        let mut reported: Vec<u64> = ctx
            .take_problems()
            .unwrap()
            .iter()
            .filter(|p| p.code == ProblemCode::PR_1_TOOBIG_REG)
            .map(|p| {
                let physical = p.message.split('(').nth(1).unwrap().split(')').next();
                physical.unwrap().parse().unwrap()
            })
            .collect();
        reported.sort_unstable();
        (tally.blocks, reported)
    }

    /// With the limit just past the second single indirect block under the double
    /// indirect one, that block is too big (not owned, but walked) and so are all its
    /// children; everything before is owned. Walked in parallel, the fan-out would not
    /// know the count.
    #[test]
    fn count_limit_reached_at_an_indirect_block() {
        let (_image, ctx) = image_with_file();
        let inode = ctx.read_inode(FILE_INO).unwrap();
        let pointer = |slot: usize| u64::from(le32(&inode.record.block, 4 * slot).unwrap());
        let mut order: Vec<u64> = (0..12).map(pointer).collect();
        pointers_in_order(&ctx, pointer(12), 1, &mut order);
        pointers_in_order(&ctx, pointer(13), 2, &mut order);
        assert_eq!(order.len(), FILE_BLOCKS + 4);
        // The second indirect block under the double indirect one comes after 527.
        let second_child = 12 + 1 + 256 + 1 + 1 + 256;
        let (owned, reported) = walk_with_limit(&ctx, second_child as u64 + 1);
        assert_eq!(owned, second_child as u64);
        let mut expected = order[second_child..].to_vec();
        expected.sort_unstable();
        assert_eq!(reported, expected);
    }

    /// One block more than the map holds: nothing is too big, all is owned.
    #[test]
    fn count_limit_one_past_the_map() {
        let (_image, ctx) = image_with_file();
        let all = FILE_BLOCKS as u64 + 4;
        assert_eq!(walk_with_limit(&ctx, all + 1), (all, vec![]));
    }
}

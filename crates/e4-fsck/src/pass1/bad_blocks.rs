//! The bad blocks inode (inode 1), as e2fsck's pass 1 treats it before any other inode:
//! it must look like no file (`PR_1_INVALID_BAD_INODE`: a mode, an owner, links, the
//! inline-data flag, an xattr block or a failed checksum), and its block map, which
//! lists the blocks never to use, is walked as `ext2fs_block_iterate3` walks it for
//! `process_bad_block`: each indirect block before its children, and a pointer outside
//! the filesystem, listed block or indirect block, is `PR_1_BB_ILLEGAL_BLOCK_NUM` and not
//! followed. An indirect block that cannot be followed makes libext2fs's walk end in an
//! error, which stops e2fsck at the end of the walk (`PR_1_BLOCK_ITERATE`), as does a
//! checksum that fails (the walk reads the inode again). Every other block is claimed. Its size and `i_blocks` mean nothing and are not checked.

use e4_format::block_map::{DIRECT_BLOCKS, SINGLE_INDIRECT_SLOT};
use e4_format::codec::le32;
use e4_format::inode::{flags, Inode};

use crate::report::problem::{Location, ProblemCode};
use crate::state::block_claim::BlockWalk;
use crate::state::block_tally::BlockTally;
use crate::state::reserved_inodes::BAD_BLOCKS_INO;

/// The names e2fsck gives blocks of indirection levels 1 to 3 (`%B` for a negative
/// block count).
const INDIRECT_NAMES: [&str; 3] = [
    "indirect block",
    "double indirect block",
    "triple indirect block",
];

/// Checks inode 1 (`inode`, whose checksum verified when `csum_ok`) and claims the
/// blocks its map lists; returns their tally.
pub fn check(walk: &BlockWalk<'_>, inode: &Inode, csum_ok: bool) -> BlockTally {
    let loc = Location::Inode(BAD_BLOCKS_INO);
    let record = &inode.record;
    if !csum_ok
        || record.mode != 0
        || inode.uid() != 0
        || inode.gid() != 0
        || inode.links_count() != 0
        || inode.has_flag(flags::INLINE_DATA)
        || inode.file_acl() != 0
    {
        walk.report(
            ProblemCode::PR_1_INVALID_BAD_INODE,
            loc,
            "the bad block inode looks invalid",
        );
    }
    if !csum_ok {
        // `ext2fs_block_iterate3` reads inode 1 again, and the checksum stops it.
        walk.report(
            ProblemCode::PR_1_BLOCK_ITERATE,
            loc,
            format!("error while iterating over blocks in inode {BAD_BLOCKS_INO}: inode checksum does not match inode"),
        );
        return BlockTally::default();
    }
    let mut map = BadBlockMap {
        walk,
        per_block: u64::from(walk.ctx.block_size() / 4),
        tally: BlockTally::default(),
        unfollowed: None,
    };
    for slot in 0..SINGLE_INDIRECT_SLOT {
        let block = le32(&record.block, 4 * slot).unwrap_or(0);
        map.visit(u64::from(block), 0, slot as u64);
    }
    let mut first = DIRECT_BLOCKS;
    for level in 1..=3u32 {
        let slot = SINGLE_INDIRECT_SLOT + level as usize - 1;
        let block = le32(&record.block, 4 * slot).unwrap_or(0);
        map.visit(u64::from(block), level, first);
        first += map.per_block.pow(level);
    }
    if let Some(level) = map.unfollowed {
        walk.report(
            ProblemCode::PR_1_BLOCK_ITERATE,
            loc,
            format!(
                "error while iterating over blocks in inode {BAD_BLOCKS_INO}: illegal {} found",
                INDIRECT_NAMES[level as usize - 1]
            ),
        );
    }
    map.tally
}

/// One walk of the bad blocks list.
struct BadBlockMap<'a, 'w> {
    walk: &'a BlockWalk<'w>,
    /// Pointers per indirect block.
    per_block: u64,
    tally: BlockTally,
    /// The level of the last indirect block that could not be followed: libext2fs's
    /// error names the last one (`ctx.errcode`).
    unfollowed: Option<u32>,
}

impl BadBlockMap<'_, '_> {
    /// Visits pointer `block` of indirection `level` (0: a listed bad block), whose first
    /// listed block is number `first` of the map.
    fn visit(&mut self, block: u64, level: u32, first: u64) {
        if block == 0 {
            return;
        }
        let ctx = self.walk.ctx;
        if !ctx.is_valid_block(block) {
            let what = match level {
                0 => format!("block #{first}"),
                _ => INDIRECT_NAMES[level as usize - 1].to_string(),
            };
            self.walk.report(
                ProblemCode::PR_1_BB_ILLEGAL_BLOCK_NUM,
                Location::Inode(BAD_BLOCKS_INO),
                format!("illegal {what} ({block}) in bad block inode"),
            );
            if level > 0 {
                self.unfollowed = Some(level);
            }
            return;
        }
        self.walk.claim(block, 1, &mut self.tally);
        self.tally.blocks += 1;
        if level == 0 || !self.walk.enter(block) {
            return;
        }
        // An indirect block that cannot be read lists nothing more here; e2fsck's read
        // error is reported by the bitmaps' differences, as for any unreadable block.
        let Ok(bytes) = ctx.image.read_blocks(block, 1, ctx.block_size()) else {
            return;
        };
        let span = self.per_block.pow(level - 1);
        for i in 0..self.per_block {
            let child = le32(&bytes, 4 * i as usize).unwrap_or(0);
            self.visit(u64::from(child), level - 1, first + i * span);
        }
    }
}

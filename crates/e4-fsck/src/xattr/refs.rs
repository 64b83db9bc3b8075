//! Extended attribute blocks and their reference counts (e2fsck's `check_ext_attr` and
//! `ea_refcount`). The first inode to name a block reads and checks it and claims it; every
//! inode naming it counts one use and one block of its `i_blocks`. After pass 1 each
//! block's `h_refcount` is compared with its uses. The table is sharded by block number so
//! threads rarely meet on a lock, and it holds only blocks that exist (few on most
//! filesystems).

use std::collections::HashMap;
use std::sync::Mutex;

use e4_format::features::CompatFeatures;
use e4_format::inode::Inode;
use e4_format::xattr::{xattr_block_checksum, XattrBlockHeader};
use e4_format::BlockSeed;

use crate::report::problem::{Location, ProblemCode};
use crate::state::block_claim::{BlockWalk, WalkMode};
use crate::state::block_tally::BlockTally;
use crate::state::context::Context;
use crate::xattr::block::{self, BlockProblem};
use crate::xattr::ea_inode::ValueCharge;
use crate::xattr::entries::{check_entries, value_inodes_named, XattrPlace};

const SHARDS: usize = 64;

/// What is known of one xattr block.
#[derive(Debug, Clone, Copy)]
struct XattrBlockUse {
    /// `h_refcount` on disk; `None` when the block could not be read.
    refcount: Option<u32>,
    /// Whether e2fsck could read the block again at the end of pass 1 to fix its
    /// refcount: its header is one libext2fs reads and its checksum holds.
    rereadable: bool,
    /// Inodes found naming it.
    users: u32,
    /// What the xattr values its entries hold in inodes charge to every inode naming
    /// the block, as e2fsck charges them (`ea_block_quota_blocks`, `_inodes`).
    values: ValueCharge,
}

/// Every xattr block seen in pass 1.
#[derive(Debug)]
pub struct XattrBlocks {
    shards: Vec<Mutex<HashMap<u64, XattrBlockUse>>>,
}

impl Default for XattrBlocks {
    fn default() -> Self {
        XattrBlocks {
            shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
        }
    }
}

impl XattrBlocks {
    /// Checks the xattr block of `owner` (`walk.ino`) and counts its use in `tally`;
    /// returns the value inodes its entries charge to the inode, for quota.
    pub fn visit(&self, walk: &BlockWalk<'_>, owner: &Inode, tally: &mut BlockTally) -> u64 {
        let ctx = walk.ctx;
        let ino = walk.ino;
        let block = owner.file_acl();
        if !ctx.sb.compat().contains(CompatFeatures::EXT_ATTR) || !ctx.is_valid_block(block) {
            walk.report_bad_inode(
                ProblemCode::PR_2_FILE_ACL_BAD,
                format!("extended attribute block for inode {ino} is invalid ({block})"),
            );
            return 0;
        }
        if walk.mode == WalkMode::CountShared {
            walk.claim(block, 1, tally);
            return 0;
        }
        let shard = &self.shards[(block % SHARDS as u64) as usize];
        let mut map = shard.lock().unwrap_or_else(|e| e.into_inner());
        // First sight: read and check it while holding only this shard. e2fsck checks
        // the block once, for the first inode naming it.
        let entry = map
            .entry(block)
            .or_insert_with(|| read_and_check(ctx, owner, block));
        match entry.refcount {
            Some(_) => {
                entry.users += 1;
                if entry.users == 1 {
                    walk.claim(block, 1, tally);
                }
                tally.blocks += 1 + entry.values.blocks;
                entry.values.inodes
            }
            None => {
                walk.report(
                    ProblemCode::PR_1_READ_EA_BLOCK,
                    Location::Inode(ino),
                    format!("error reading extended attribute block {block} for inode {ino}"),
                );
                0
            }
        }
    }

    /// Reports each block whose reference count differs from the inodes naming it.
    pub fn check_refcounts(&self, ctx: &Context) {
        for shard in &self.shards {
            let map = shard.lock().unwrap_or_else(|e| e.into_inner());
            for (&block, usage) in map.iter() {
                let Some(refcount) = usage.refcount.filter(|&r| r != usage.users) else {
                    continue;
                };
                let users = usage.users;
                if usage.rereadable {
                    ctx.report(
                        ProblemCode::PR_1_EXTATTR_REFCOUNT,
                        Location::Block(block),
                        format!(
                            "extended attribute block {block} has reference count {refcount}, should be {users}"
                        ),
                    );
                } else {
                    ctx.report(
                        ProblemCode::PR_1_EXTATTR_READ_ABORT,
                        Location::Block(block),
                        format!(
                            "error reading extended attribute block {block} to set its reference count {refcount} to {users}"
                        ),
                    );
                }
            }
        }
    }
}

/// Reads xattr block `block` for inode `owner`, the first to name it, and checks it as
/// e2fsck's `check_ext_attr` does under `-n`: its layout (`xattr_block.rs`), its
/// entries' hashes and value inodes (whose entries are counted once here, however many
/// inodes share the block), and, where libext2fs reads its header, its checksum. Every
/// problem is declined, so the block is used whatever it holds.
fn read_and_check(ctx: &Context, owner: &Inode, block: u64) -> XattrBlockUse {
    let ino = owner.ino;
    let Ok(bytes) = ctx.image.read_blocks(block, 1, ctx.block_size()) else {
        return XattrBlockUse {
            refcount: None,
            rereadable: false,
            users: 0,
            values: ValueCharge::default(),
        };
    };
    let layout = block::walk(&bytes);
    for problem in &layout.problems {
        let loc = match problem {
            BlockProblem::BadMagic(_) => Location::Inode(ino),
            _ => Location::Block(block),
        };
        ctx.report(problem.code(), loc, problem.describe(ino, block));
    }
    let values = check_entries(ctx, owner, &layout.xattrs, XattrPlace::Block(block)).charged;
    let list = bytes.get(XattrBlockHeader::SIZE..).unwrap_or_default();
    ctx.ea_inodes.add_refs(&value_inodes_named(list));
    // libext2fs looks at the checksum only of a header it reads, and e2fsck, declining
    // every fix before, asks about it last.
    let checksum_fails = layout.header_readable
        && ctx.csum_seed.is_some_and(|seed| {
            let seed = BlockSeed {
                seed,
                block_nr: block,
            };
            xattr_block_checksum(&bytes, seed) != layout.header.checksum
        });
    if checksum_fails {
        ctx.report(
            ProblemCode::PR_1_EA_BLOCK_ONLY_CSUM_INVALID,
            Location::InodeBlock {
                inode: ino,
                block,
                logical: 0,
            },
            format!("inode {ino} extended attribute block {block} passes checks, but checksum does not match block"),
        );
    }
    XattrBlockUse {
        refcount: Some(layout.header.refcount),
        rereadable: layout.header_readable && !checksum_fails,
        users: 0,
        values,
    }
}

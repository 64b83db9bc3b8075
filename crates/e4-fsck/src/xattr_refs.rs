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
use e4_format::xattr::{decode_xattr_block, XattrBlockHeader};
use e4_format::{BlockSeed, FormatError, Location as FormatLocation, MetadataBlock};

use crate::block_claim::{BlockWalk, WalkMode};
use crate::block_tally::BlockTally;
use crate::context::Context;
use crate::ea_inode::ValueCharge;
use crate::problem::{Location, ProblemCode};
use crate::xattr_entries::{check_entries, XattrPlace};

const SHARDS: usize = 64;

/// What is known of one xattr block.
#[derive(Debug, Clone, Copy)]
struct XattrBlockUse {
    /// `h_refcount` on disk; `None` when the block is not a valid xattr block.
    refcount: Option<u32>,
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
            walk.report(
                ProblemCode::PR_2_FILE_ACL_BAD,
                Location::Inode(ino),
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
        let entry = match map.get_mut(&block) {
            Some(entry) => entry,
            // First sight: read and check it while holding only this shard.
            None => {
                let (refcount, values) = match read_and_check(ctx, owner, block) {
                    Some((refcount, values)) => (Some(refcount), values),
                    None => (None, ValueCharge::default()),
                };
                map.entry(block).or_insert(XattrBlockUse {
                    refcount,
                    users: 0,
                    values,
                })
            }
        };
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
                    ProblemCode::PR_1_BAD_EA_BLOCK,
                    Location::Inode(ino),
                    format!("inode {ino} has a bad extended attribute block {block}"),
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
                if let Some(refcount) = usage.refcount.filter(|&r| r != usage.users) {
                    ctx.report(
                        ProblemCode::PR_1_EXTATTR_REFCOUNT,
                        Location::Block(block),
                        format!(
                            "extended attribute block {block} has reference count {refcount}, should be {}",
                            usage.users
                        ),
                    );
                }
            }
        }
    }
}

/// Reads xattr block `block` for inode `owner`, the first to name it, and returns its
/// refcount and the blocks of the values its entries hold in inodes (whose entries are
/// counted once here, however many inodes share the block), or `None` if it is not a
/// valid xattr block.
fn read_and_check(ctx: &Context, owner: &Inode, block: u64) -> Option<(u32, ValueCharge)> {
    let ino = owner.ino;
    let loc = FormatLocation::InodeBlock { inode: ino, block };
    let bytes = ctx.image.read_blocks(block, 1, ctx.block_size()).ok()?;
    // The structure must decode for the checksum alone to be the problem.
    let (header, xattrs) = decode_xattr_block(&bytes, loc).ok()?;
    let seed = ctx.csum_seed.map(|seed| BlockSeed {
        seed,
        block_nr: block,
    });
    if let Some(seed) = seed {
        if let Err(FormatError::Checksum { .. }) = XattrBlockHeader::verify(&bytes, seed, loc) {
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
    }
    let values = check_entries(ctx, owner, &xattrs, XattrPlace::Block(block)).charged;
    Some((header.refcount, values))
}

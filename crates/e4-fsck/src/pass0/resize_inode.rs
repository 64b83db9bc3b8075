//! The resize inode (inode 7), checked before pass 1 as e2fsck's `check_resize_inode`
//! (super.c) checks it. With the resize_inode feature its double indirect block maps the
//! reserved descriptor blocks that online growth fills: entry `desc_blocks + i` (modulo
//! the entries a block holds) names reserved block `i` after the descriptor table, and
//! that block, read as an indirect block, names its copies in each later group with a
//! superblock backup, in group order. Without the feature the inode and
//! `s_reserved_gdt_blocks` must be zero.
//!
//! Under `-n` none of these is an error on its own: e2fsck marks the filesystem valid
//! again after the superblock and resize inode checks ("'til proven otherwise"), so
//! `e2fsck -fn` exits 0 on them (observed with 1.47.0); what the passes then find about
//! the inode's blocks (`i_blocks`, bitmap differences) is.

use e4_format::codec::le32;
use e4_format::features::{CompatFeatures, IncompatFeatures};
use e4_format::inode::{Inode, I_BLOCK_SIZE};

use crate::report::problem::{Location, ProblemCode};
use crate::state::context::Context;
use crate::state::reserved_inodes::RESIZE_INO;

/// `EXT2_DIND_BLOCK`: the one `i_block` word the resize inode may use.
const DIND_SLOT: usize = 13;
/// `LINUX_S_IFREG`, tested as a bit as e2fsck does: any mode with it passes here (a
/// socket too; pass 1 then reports its mode).
const S_IFREG: u16 = 0o100000;

/// Runs e2fsck's resize inode checks.
pub fn check(ctx: &Context) {
    let sb = &ctx.sb;
    let feature = sb.compat().contains(CompatFeatures::RESIZE_INODE);
    if feature && sb.incompat().contains(IncompatFeatures::META_BG) {
        ctx.report(
            ProblemCode::PR_0_DISABLE_RESIZE_INODE,
            Location::Superblock,
            "resize_inode and meta_bg features are enabled; those features are not compatible, the resize inode should be disabled",
        );
    }
    if !feature && sb.reserved_gdt_blocks != 0 {
        ctx.report(
            ProblemCode::PR_0_NONZERO_RESERVED_GDT_BLOCKS,
            Location::Superblock,
            format!(
                "filesystem does not have resize_inode enabled, but s_reserved_gdt_blocks is {}; should be zero",
                sb.reserved_gdt_blocks
            ),
        );
    }
    // An inode that cannot be read (its checksum fails) is left to pass 1, as e2fsck
    // leaves it, flagging it for re-creation; at the end of pass 1 the re-creation reads
    // it again and fails (`PR_1_RESIZE_INODE_CREATE`), and declined, e2fsck stops.
    let inode = match ctx.read_inode(RESIZE_INO) {
        Ok(inode) => inode,
        Err(why) => {
            if feature {
                ctx.report(
                    ProblemCode::PR_1_RESIZE_INODE_CREATE,
                    Location::Inode(RESIZE_INO),
                    format!("resize inode (re)creation failed: {why}"),
                );
            }
            return;
        }
    };
    let words: Vec<u32> = (0..I_BLOCK_SIZE / 4)
        .map(|slot| le32(&inode.record.block, 4 * slot).unwrap_or(0))
        .collect();
    if !feature {
        if words.iter().any(|&w| w != 0) {
            ctx.report(
                ProblemCode::PR_0_CLEAR_RESIZE_INODE,
                Location::Inode(RESIZE_INO),
                "resize_inode not enabled, but the resize inode is non-zero",
            );
        }
        return;
    }
    if let Err(why) = check_layout(ctx, &inode, &words) {
        ctx.report(
            ProblemCode::PR_0_RESIZE_INODE_INVALID,
            Location::Inode(RESIZE_INO),
            format!("resize inode not valid: {why}"),
        );
    }
}

/// The inode's own fields, then the reserved descriptor blocks its double indirect block
/// maps. e2fsck looks at the first quarter of `s_reserved_gdt_blocks` only (its loop
/// bound is `s_reserved_gdt_blocks / 4`), so damage past it goes unreported in both.
fn check_layout(ctx: &Context, inode: &Inode, words: &[u32]) -> Result<(), String> {
    let dind = u64::from(words[DIND_SLOT]);
    if let Some(slot) = (0..words.len()).find(|&s| s != DIND_SLOT && words[s] != 0) {
        return Err(format!(
            "i_block[{slot}] is {}, should be zero",
            words[slot]
        ));
    }
    if dind == 0 {
        return Err("it has no double indirect block".into());
    }
    if inode.links_count() == 0 {
        return Err("its links count is zero".into());
    }
    if inode.record.mode & S_IFREG == 0 {
        return Err(format!(
            "its mode {:#o} is not a regular file's",
            inode.record.mode
        ));
    }
    if dind < ctx.geo.first_data_block() || dind >= ctx.geo.blocks() {
        return Err(format!(
            "its double indirect block {dind} is outside the filesystem"
        ));
    }
    let geo = &ctx.geo;
    let per_block = (geo.block_size() / 4) as usize;
    let read = |block: u64| {
        ctx.image
            .read_blocks(block, 1, geo.block_size())
            .map_err(|e| format!("block {block} cannot be read: {e}"))
    };
    let dind_block = read(dind)?;
    let table_blocks = geo.descriptor_table_blocks();
    // After the primary superblock's block and the descriptor table (with 1 KiB blocks
    // under bigalloc the superblock is in block 1 though the first data block is 0:
    // e2fsck's "1024 blocksize bigalloc" adjustment).
    let first_reserved = geo.primary_superblock_block() + 1 + table_blocks;
    for i in 0..u64::from(ctx.sb.reserved_gdt_blocks / 4) {
        let reserved = first_reserved + i;
        let gdt_off = ((table_blocks + i) % per_block as u64) as usize;
        let named = le32(&dind_block, 4 * gdt_off).unwrap_or(0);
        if u64::from(named) != reserved {
            return Err(format!(
                "double indirect entry {gdt_off} is {named}, should be {reserved}"
            ));
        }
        let copies = read(reserved)?;
        let backups = (1..geo.groups()).filter(|&g| geo.has_superblock(g));
        for (at, group) in backups.enumerate() {
            let expect = reserved + u64::from(group) * u64::from(geo.blocks_per_group());
            // More backups than entries in a block: e2fsck would read past its buffer;
            // no entry can match there.
            let named = le32(&copies, 4 * at);
            if named.map(u64::from) != Some(expect) {
                return Err(format!(
                    "reserved descriptor block {reserved} names {named:?} for group {group}'s copy, should be {expect}"
                ));
            }
        }
    }
    Ok(())
}

//! The internal journal's superblock (e2fsck's `e2fsck_check_ext3_journal`): the journal
//! inode's first block must hold a valid jbd2 superblock. e2fsck cannot go on without one
//! and stops; the checker reports it and goes on with the rest.

use e4_format::codec::le32;
use e4_format::extent::{ExtentEntries, ExtentNode};
use e4_format::features::CompatFeatures;
use e4_format::inode::{flags, Inode};
use e4_format::journal::JournalSuperblock;
use e4_format::{Location as FormatLocation, MetadataBlock};

use crate::report::problem::{Location, ProblemCode};
use crate::state::context::Context;

/// Deepest extent tree the walk to block 0 descends.
const MAX_DEPTH: usize = 5;

/// Checks the journal superblock of a filesystem with an internal journal.
pub fn check(ctx: &Context) {
    let sb = &ctx.sb;
    if !sb.compat().contains(CompatFeatures::HAS_JOURNAL)
        || sb.journal_inum == 0
        || sb.journal_dev != 0
    {
        return;
    }
    let ino = sb.journal_inum;
    // e2fsck will not trust a journal inode whose checksum fails.
    let inode = match ctx.read_inode(ino) {
        Ok(inode) => inode,
        Err(why) => {
            bad_inode(
                ctx,
                format!("superblock has an invalid journal (inode {ino}): {why}"),
            );
            return;
        }
    };
    let Some(block) = first_block(ctx, &inode) else {
        bad_inode(
            ctx,
            format!("superblock has an invalid journal (inode {ino}): no block 0"),
        );
        return;
    };
    match ctx.image.read_blocks(block, 1, ctx.block_size()) {
        Ok(bytes) => {
            let decoded = JournalSuperblock::decode_checked(&bytes).and_then(|_| {
                JournalSuperblock::verify(&bytes, (), FormatLocation::JournalBlock(0))
            });
            if let Err(e) = decoded {
                report(ctx, format!("journal superblock is corrupt: {e}"));
            }
        }
        Err(e) => report(
            ctx,
            format!("journal superblock at block {block} cannot be read: {e}"),
        ),
    }
}

fn bad_inode(ctx: &Context, message: String) {
    ctx.report(
        ProblemCode::PR_0_JOURNAL_BAD_INODE,
        Location::Journal,
        message,
    );
}

fn report(ctx: &Context, message: String) {
    ctx.report(
        ProblemCode::PR_0_JOURNAL_BAD_SUPER,
        Location::Journal,
        message,
    );
}

/// The physical block holding logical block 0 of `inode`.
fn first_block(ctx: &Context, inode: &Inode) -> Option<u64> {
    if !inode.has_flag(flags::EXTENTS) {
        let block = u64::from(le32(&inode.record.block, 0)?);
        return ctx.is_valid_block(block).then_some(block);
    }
    let loc = FormatLocation::Inode(inode.ino);
    let mut node = ExtentNode::parse(&inode.record.block, loc).ok()?;
    for _ in 0..=MAX_DEPTH {
        match node.entries {
            ExtentEntries::Leaf(leaves) => {
                let first = leaves.first()?.extent();
                return (first.logical == 0 && ctx.is_valid_block(first.physical))
                    .then_some(first.physical);
            }
            ExtentEntries::Index(indexes) => {
                let child = indexes.first()?.leaf();
                if !ctx.is_valid_block(child) {
                    return None;
                }
                let bytes = ctx.image.read_blocks(child, 1, ctx.block_size()).ok()?;
                node = ExtentNode::parse(&bytes, FormatLocation::Block(child)).ok()?;
            }
        }
    }
    None
}

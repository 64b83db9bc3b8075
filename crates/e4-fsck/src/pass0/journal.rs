//! The internal journal (e2fsck's `e2fsck_check_ext3_journal`): the journal inode must be
//! usable (`e2fsck_get_journal`) and its first block must hold a journal superblock that
//! `e2fsck_journal_load` accepts: the magic, a superblock block type, v2 fields only in
//! a v2 superblock, one user, known features, one checksum kind with its type and
//! value, the filesystem's block size, and no more blocks than the inode holds. e2fsck
//! cannot go on without one and stops (exit 12 under `-n`); the checker reports it, goes
//! on with the rest, and exits as e2fsck does.

use e4_format::codec::le32;
use e4_format::extent::{ExtentEntries, ExtentNode};
use e4_format::features::CompatFeatures;
use e4_format::inode::{flags, FileType, Inode};
use e4_format::journal::{JournalSuperblock, JOURNAL_MAGIC};
use e4_format::{Location as FormatLocation, MetadataBlock};

use crate::report::problem::{Location, ProblemCode};
use crate::state::context::Context;

/// Deepest extent tree the walk to block 0 descends.
const MAX_DEPTH: usize = 5;
/// The smallest journal jbd2 accepts, in blocks (`JBD2_MIN_JOURNAL_BLOCKS`).
const MIN_JOURNAL_BLOCKS: u64 = 1024;
/// Fast-commit blocks when `s_num_fc_blks` is 0 (`JBD2_DEFAULT_FAST_COMMIT_BLOCKS`).
const DEFAULT_FAST_COMMIT_BLOCKS: u32 = 256;
/// Block types of the journal superblock (`JBD2_SUPERBLOCK_V1`, `_V2`), and of the
/// blocks that must never stand in its place (descriptor, commit, revoke).
const SUPERBLOCK_V1: u32 = 3;
const SUPERBLOCK_V2: u32 = 4;
const LOG_BLOCK_TYPES: [u32; 3] = [1, 2, 5];
/// `JBD2_FEATURE_COMPAT_CHECKSUM`: the v1 commit checksum, exclusive with v2 and v3.
const COMPAT_CHECKSUM: u32 = 0x1;
/// `JBD2_KNOWN_INCOMPAT_FEATURES` (revoke, 64bit, async commit, checksums v2 and v3,
/// fast commit); jbd2 knows no read-only compatible feature.
const KNOWN_INCOMPAT: u32 = 0x3F;
const INCOMPAT_CSUM_V2: u32 = 0x8;
const INCOMPAT_CSUM_V3: u32 = 0x10;
const INCOMPAT_FAST_COMMIT: u32 = 0x20;
/// Bytes of a v1 journal superblock (`V1_SB_SIZE`): the fields up to `s_errno`.
const V1_SUPERBLOCK_SIZE: usize = 0x24;

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
    // `e2fsck_get_journal`: a journal is a regular file with links (the backup of its
    // block map in the superblock does not save it under `-n`).
    if inode.links_count() == 0 || inode.file_type() != Some(FileType::Regular) {
        bad_inode(
            ctx,
            format!(
                "superblock has an invalid journal (inode {ino}): mode {:#o}, {} links",
                inode.record.mode,
                inode.links_count()
            ),
        );
        return;
    }
    let blocks = inode.size() / u64::from(ctx.block_size());
    if blocks < MIN_JOURNAL_BLOCKS {
        bad_inode(
            ctx,
            format!("superblock has an invalid journal (inode {ino}): {blocks} blocks, fewer than {MIN_JOURNAL_BLOCKS}"),
        );
        return;
    }
    let Some(block) = first_block(ctx, &inode) else {
        bad_inode(
            ctx,
            format!("superblock has an invalid journal (inode {ino}): no block 0"),
        );
        return;
    };
    match ctx.image.read_blocks(block, 1, ctx.block_size()) {
        Ok(bytes) => {
            if let Err((code, why)) = load(ctx, &bytes, blocks) {
                if code != ProblemCode::PR_0_JOURNAL_BAD_SUPER {
                    ctx.report(code, Location::Journal, why.clone());
                }
                if code != ProblemCode::PR_0_JOURNAL_UNSUPP_MULTIFS {
                    report(ctx, format!("journal superblock is corrupt: {why}"));
                }
            }
        }
        Err(e) => report(
            ctx,
            format!("journal superblock at block {block} cannot be read: {e}"),
        ),
    }
}

/// e2fsck's `e2fsck_journal_load` on the journal superblock `bytes` of a journal of
/// `blocks` blocks: the first reason it refuses the superblock, as the problem e2fsck
/// asks about first (then it says the superblock is corrupt, but for several users,
/// where it stops at once). A v1 superblock's v2 fields are only reported.
fn load(ctx: &Context, bytes: &[u8], blocks: u64) -> Result<(), (ProblemCode, String)> {
    let corrupt = |why: String| Err((ProblemCode::PR_0_JOURNAL_BAD_SUPER, why));
    let Some(raw) = bytes.first_chunk::<1024>() else {
        return corrupt(format!("{} bytes, not a journal superblock", bytes.len()));
    };
    let jsb = JournalSuperblock::decode(raw);
    let (magic, kind) = (header_word(&jsb, 0), header_word(&jsb, 4));
    if magic != JOURNAL_MAGIC {
        // `e2fsck_journal_fix_bad_inode`: no magic, so probably not a journal at all.
        return Err((
            ProblemCode::PR_0_JOURNAL_BAD_INODE,
            format!(
                "superblock has an invalid journal (inode {}): magic {magic:#x}",
                ctx.sb.journal_inum
            ),
        ));
    }
    let v2_fields =
        jsb.feature_compat | jsb.feature_incompat | jsb.feature_ro_compat | jsb.nr_users;
    match kind {
        SUPERBLOCK_V1 => {
            if v2_fields != 0 {
                clear_v2_fields(ctx);
            }
            // A v1 journal has no features and no checksum to check.
            return check_lengths(ctx, &jsb, blocks);
        }
        SUPERBLOCK_V2 => {
            if jsb.nr_users > 1 && ctx.sb.journal_uuid == [0; 16] {
                clear_v2_fields(ctx);
            }
            if jsb.nr_users > 1 {
                return Err((
                    ProblemCode::PR_0_JOURNAL_UNSUPP_MULTIFS,
                    format!("the internal journal has {} users", jsb.nr_users),
                ));
            }
        }
        kind if LOG_BLOCK_TYPES.contains(&kind) => {
            return corrupt(format!(
                "the journal's first block is a log block (type {kind})"
            ));
        }
        kind => {
            return Err((
                ProblemCode::PR_0_JOURNAL_UNSUPP_VERSION,
                format!("journal superblock type {kind} is not supported"),
            ));
        }
    }
    if jsb.feature_incompat & !KNOWN_INCOMPAT != 0 {
        return Err((
            ProblemCode::PR_0_JOURNAL_UNSUPP_INCOMPAT,
            format!(
                "journal superblock has unknown incompatible features {:#x}",
                jsb.feature_incompat & !KNOWN_INCOMPAT
            ),
        ));
    }
    if jsb.feature_ro_compat != 0 {
        return Err((
            ProblemCode::PR_0_JOURNAL_UNSUPP_ROCOMPAT,
            format!(
                "journal superblock has unknown read-only features {:#x}",
                jsb.feature_ro_compat
            ),
        ));
    }
    let csum_v2 = jsb.feature_incompat & INCOMPAT_CSUM_V2 != 0;
    let csum_v3 = jsb.feature_incompat & INCOMPAT_CSUM_V3 != 0;
    if csum_v2 && csum_v3 {
        return corrupt("journal checksums v2 and v3 both set".into());
    }
    if (csum_v2 || csum_v3) && jsb.feature_compat & COMPAT_CHECKSUM != 0 {
        return corrupt("journal checksum v1 set beside v2 or v3".into());
    }
    // The checksum type and value (`e2fsck_journal_verify_csum_type`,
    // `e2fsck_journal_sb_csum_verify`).
    JournalSuperblock::verify(bytes, (), FormatLocation::JournalBlock(0))
        .or_else(|e| corrupt(e.to_string()))?;
    check_lengths(ctx, &jsb, blocks)
}

/// What `e2fsck_journal_load` checks after the format: the block size, `s_maxlen`
/// against the inode's blocks (shorter is accepted), and room for the fast-commit area
/// (computed in 32 bits, as e2fsck's unsigned subtraction wraps).
fn check_lengths(
    ctx: &Context,
    jsb: &JournalSuperblock,
    blocks: u64,
) -> Result<(), (ProblemCode, String)> {
    let corrupt = |why: String| Err((ProblemCode::PR_0_JOURNAL_BAD_SUPER, why));
    if jsb.blocksize != ctx.block_size() {
        return corrupt(format!(
            "journal block size {} is not the filesystem's {}",
            jsb.blocksize,
            ctx.block_size()
        ));
    }
    if u64::from(jsb.maxlen) > blocks {
        return corrupt(format!(
            "journal too short: s_maxlen {} past its {blocks} blocks",
            jsb.maxlen
        ));
    }
    if jsb.feature_incompat & INCOMPAT_FAST_COMMIT != 0 && header_word(jsb, 4) == SUPERBLOCK_V2 {
        let fast_commit = match jsb.num_fc_blks {
            0 => DEFAULT_FAST_COMMIT_BLOCKS,
            n => n,
        };
        if u64::from(jsb.maxlen.wrapping_sub(fast_commit)) < MIN_JOURNAL_BLOCKS {
            return corrupt(format!(
                "incorrect fast commit blocks: {fast_commit} of {}",
                jsb.maxlen
            ));
        }
    }
    Ok(())
}

/// The big-endian word at byte `at` of the superblock's header (0: the magic, 4: the
/// block type).
fn header_word(jsb: &JournalSuperblock, at: usize) -> u32 {
    let bytes = jsb.header[at..at + 4].try_into();
    // OK to unwrap: four bytes of a twelve-byte header.
    u32::from_be_bytes(bytes.unwrap())
}

/// `clear_v2_journal_fields`: v2 fields in a superblock that should not have them.
fn clear_v2_fields(ctx: &Context) {
    ctx.report(
        ProblemCode::PR_0_CLEAR_V2_JOURNAL,
        Location::Journal,
        format!("found invalid V2 journal superblock fields (from V1 journal); clearing fields beyond the V1 journal superblock ({V1_SUPERBLOCK_SIZE} bytes)"),
    );
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

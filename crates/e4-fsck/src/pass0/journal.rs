//! The internal journal (e2fsck's `e2fsck_check_ext3_journal`): the journal inode must be
//! usable (`e2fsck_get_journal`) and its first block must hold a journal superblock that
//! `e2fsck_journal_load` accepts: the magic, a superblock block type, v2 fields only in
//! a v2 superblock, one user, known features, one checksum kind with its type and
//! value, the filesystem's block size, and no more blocks than the inode holds. e2fsck
//! cannot go on without one and stops (exit 12 under `-n`); the checker reports it, goes
//! on with the rest, and exits as e2fsck does.

use e4_format::block_map::{DIRECT_BLOCKS, SINGLE_INDIRECT_SLOT};
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

/// Checks the journal superblock of a filesystem with an internal journal; a journal
/// UUID names an external one, which e2fsck (`e2fsck_get_journal`) looks for whatever
/// the features say, and does not find for an image (found by the sweep: one flipped
/// bit in `s_journal_uuid` stopped e2fsck, exit 12, and e4 called the image clean).
pub fn check(ctx: &Context) {
    let sb = &ctx.sb;
    if sb.journal_uuid != [0; 16] {
        ctx.report(
            ProblemCode::PR_0_CANT_FIND_JOURNAL,
            Location::Journal,
            "can't find external journal",
        );
        return;
    }
    // With a null UUID e2fsck takes the journal inode, whatever `s_journal_dev` says.
    if !sb.compat().contains(CompatFeatures::HAS_JOURNAL) || sb.journal_inum == 0 {
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
    let needed = inode.size().div_ceil(u64::from(ctx.block_size()));
    let map = JournalMap::walk(ctx, &inode, needed);
    if map.reached < needed {
        bad_inode(
            ctx,
            format!(
                "superblock has an invalid journal (inode {ino}): its map reaches {} of its {needed} blocks",
                map.reached
            ),
        );
        return;
    }
    let Some(block) = map.block_zero else {
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
            // An internal journal's UUID in the superblock is zero (a non-zero one names
            // an external journal, refused before), so e2fsck's "clear the v2 fields"
            // for a zero UUID always comes first.
            if jsb.nr_users > 1 {
                clear_v2_fields(ctx);
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

/// How far `e2fsck_get_journal`'s walk of the journal's map gets
/// (`ext2fs_block_iterate3` with `BLOCK_FLAG_HOLE` and `process_journal_block`, which
/// stops at a block outside the filesystem and, in a block map, at a hole).
#[derive(Debug, Default)]
struct JournalMap {
    /// One past the last logical block reached.
    reached: u64,
    /// The block holding logical block 0.
    block_zero: Option<u64>,
}

impl JournalMap {
    /// Walks `inode`'s map until it stops or reaches `needed` blocks.
    fn walk(ctx: &Context, inode: &Inode, needed: u64) -> JournalMap {
        let mut map = JournalMap::default();
        if inode.has_flag(flags::EXTENTS) {
            map.extents(
                ctx,
                &inode.record.block,
                FormatLocation::Inode(inode.ino),
                0,
                needed,
            );
            return map;
        }
        for slot in 0..DIRECT_BLOCKS as usize {
            let block = le32(&inode.record.block, 4 * slot).unwrap_or(0);
            if !map.block_map(ctx, u64::from(block), 0, needed) {
                return map;
            }
        }
        for level in 1..=3u32 {
            let slot = SINGLE_INDIRECT_SLOT + level as usize - 1;
            let block = le32(&inode.record.block, 4 * slot).unwrap_or(0);
            if !map.block_map(ctx, u64::from(block), level, needed) {
                return map;
            }
        }
        map
    }

    /// Block-map pointer `block` of indirection `level` (0: data), in logical order;
    /// false where the walk stops.
    fn block_map(&mut self, ctx: &Context, block: u64, level: u32, needed: u64) -> bool {
        if !ctx.is_valid_block(block) {
            return false;
        }
        if level == 0 {
            if self.reached == 0 {
                self.block_zero = Some(block);
            }
            self.reached += 1;
            return self.reached < needed;
        }
        let Ok(bytes) = ctx.image.read_blocks(block, 1, ctx.block_size()) else {
            return false;
        };
        (0..bytes.len() / 4).all(|i| {
            let child = le32(&bytes, 4 * i).unwrap_or(0);
            self.block_map(ctx, u64::from(child), level - 1, needed)
        })
    }

    /// The extent node in `bytes` (at `loc`, `depth` levels below the inode), in
    /// order; false where the walk stops.
    fn extents(
        &mut self,
        ctx: &Context,
        bytes: &[u8],
        loc: FormatLocation,
        depth: usize,
        needed: u64,
    ) -> bool {
        let Ok(node) = ExtentNode::parse(bytes, loc) else {
            return false;
        };
        match node.entries {
            ExtentEntries::Leaf(leaves) => leaves.iter().all(|leaf| {
                let e = leaf.extent();
                let len = u64::from(e.len);
                let valid = if ctx.is_valid_block(e.physical) {
                    len.min(ctx.geo.blocks() - e.physical)
                } else {
                    0
                };
                if e.logical == 0 && valid > 0 {
                    self.block_zero = Some(e.physical);
                }
                if valid > 0 {
                    self.reached = self.reached.max(u64::from(e.logical) + valid);
                }
                valid == len && self.reached < needed
            }),
            ExtentEntries::Index(indexes) => indexes.iter().all(|index| {
                let child = index.leaf();
                if depth == MAX_DEPTH || !ctx.is_valid_block(child) {
                    return false;
                }
                let Ok(bytes) = ctx.image.read_blocks(child, 1, ctx.block_size()) else {
                    return false;
                };
                self.extents(ctx, &bytes, FormatLocation::Block(child), depth + 1, needed)
            }),
        }
    }
}

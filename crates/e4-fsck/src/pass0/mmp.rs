//! Multiple-mount protection (the mmp feature): the block `s_mmp_block` names holds a
//! `struct mmp_struct` (e4-format's [`MmpBlock`]) that a mounting node updates. e2fsck
//! reads it before anything else (`e2fsck_check_mmp`, through libext2fs's
//! `ext2fs_mmp_start` and `ext2fs_mmp_read`): a block number outside the filesystem, a
//! checksum that fails or a wrong magic is a problem, and declining its repair stops
//! e2fsck (exit 12 under `-n`); so does a sound block whose sequence says a checker has
//! the filesystem or holds no value any writer uses. A mounted node's sequence is not
//! waited on under `-n` (the wait is for a read-write open). e4 reports each of these and
//! goes on. Pass 1 then counts the block as in use.

use e4_format::features::IncompatFeatures;
use e4_format::mmp::{MmpBlock, MmpState};
use e4_format::{FormatError, Location as FormatLocation, MetadataBlock, Problem};

use crate::report::problem::{Location, ProblemCode};
use crate::state::context::Context;

/// Checks the MMP block as `ext2fs_mmp_start` does: its place, then its checksum (under
/// metadata_csum), then its magic, which wins when both fail, then its sequence.
pub fn check(ctx: &Context) {
    if !ctx.sb.incompat().contains(IncompatFeatures::MMP) {
        return;
    }
    let Some(block) = ctx.mmp_block() else {
        ctx.report(
            ProblemCode::PR_0_MMP_INVALID_BLK,
            Location::Superblock,
            format!("superblock has invalid MMP block {}", ctx.sb.mmp_block),
        );
        return;
    };
    let loc = Location::Block(block);
    let magic_wrong = |what: &str| {
        ctx.report(
            ProblemCode::PR_0_MMP_INVALID_MAGIC,
            loc,
            format!("superblock has invalid MMP magic ({what})"),
        );
    };
    let Ok(bytes) = ctx.image.read_blocks(block, 1, ctx.block_size()) else {
        magic_wrong("the block cannot be read");
        return;
    };
    let format_loc = FormatLocation::Block(block);
    let mmp = match MmpBlock::decode_checked(&bytes, format_loc) {
        Ok(mmp) => mmp,
        Err(FormatError::Corrupt {
            problem: Problem::BadMagic { found, .. },
            ..
        }) => {
            magic_wrong(&format!("{found:#x}"));
            return;
        }
        Err(e) => {
            magic_wrong(&e.to_string());
            return;
        }
    };
    if let Some(seed) = ctx.csum_seed {
        if let Err(e) = MmpBlock::verify(&bytes, seed, format_loc) {
            ctx.report(
                ProblemCode::PR_0_MMP_CSUM_INVALID,
                loc,
                format!("superblock MMP block checksum does not match: {e}"),
            );
            return;
        }
    }
    match mmp.state() {
        MmpState::Clean | MmpState::InUse(_) => {}
        MmpState::Fsck => ctx.report(
            ProblemCode::EXT2_ET_MMP_FSCK_ON,
            loc,
            "MMP: e2fsck being run (sequence EXT4_MMP_SEQ_FSCK)",
        ),
        MmpState::Unknown(seq) => ctx.report(
            ProblemCode::EXT2_ET_MMP_UNKNOWN_SEQ,
            loc,
            format!("MMP: undergoing an unknown operation (sequence {seq:#x})"),
        ),
    }
}

//! Multiple-mount protection (the mmp feature): the block `s_mmp_block` names holds a
//! `struct mmp_struct` that a mounting node updates. e2fsck reads it before anything else
//! (`e2fsck_check_mmp`, through libext2fs's `ext2fs_mmp_read`): a block number outside
//! the filesystem, a checksum that fails or a wrong magic is a problem, and declining
//! its repair stops e2fsck (exit 12 under `-n`); e4 reports it and goes on. Pass 1 then
//! counts the block as in use.

use e4_format::checksum::crc32c_raw;
use e4_format::codec::le32;
use e4_format::features::IncompatFeatures;

use crate::context::Context;
use crate::problem::{Location, ProblemCode};

/// `mmp_magic`.
const MMP_MAGIC: u32 = 0x004D_4D50;
/// Offset of `mmp_checksum`, which covers the bytes before it.
const CHECKSUM_OFFSET: usize = 1020;

/// The MMP block, when the feature is on and `s_mmp_block` lies inside the filesystem
/// past its first data block (where `ext2fs_mmp_read` accepts it and pass 1 marks it).
pub fn mmp_block(ctx: &Context) -> Option<u64> {
    let block = ctx.sb.mmp_block;
    (ctx.sb.incompat().contains(IncompatFeatures::MMP)
        && block > ctx.geo.first_data_block()
        && block < ctx.geo.blocks())
    .then_some(block)
}

/// Checks the MMP block as `ext2fs_mmp_read` does: its place, then its checksum (under
/// metadata_csum), then its magic, which wins when both fail.
pub fn check(ctx: &Context) {
    if !ctx.sb.incompat().contains(IncompatFeatures::MMP) {
        return;
    }
    let Some(block) = mmp_block(ctx) else {
        ctx.report(
            ProblemCode::PR_0_MMP_INVALID_BLK,
            Location::Superblock,
            format!("superblock has invalid MMP block {}", ctx.sb.mmp_block),
        );
        return;
    };
    let magic_wrong = |what: &str| {
        ctx.report(
            ProblemCode::PR_0_MMP_INVALID_MAGIC,
            Location::Block(block),
            format!("superblock has invalid MMP magic ({what})"),
        );
    };
    let Ok(bytes) = ctx.image.read_blocks(block, 1, ctx.block_size()) else {
        magic_wrong("the block cannot be read");
        return;
    };
    let magic = le32(&bytes, 0);
    if magic != Some(MMP_MAGIC) {
        magic_wrong(&format!("{:#x}", magic.unwrap_or(0)));
        return;
    }
    let (Some(seed), Some(stored)) = (ctx.csum_seed, le32(&bytes, CHECKSUM_OFFSET)) else {
        return;
    };
    let computed = crc32c_raw(seed, &bytes[..CHECKSUM_OFFSET]);
    if stored != computed {
        ctx.report(
            ProblemCode::PR_0_MMP_CSUM_INVALID,
            Location::Block(block),
            format!(
                "superblock MMP block checksum does not match (stored {stored:#x}, computed {computed:#x})"
            ),
        );
    }
}

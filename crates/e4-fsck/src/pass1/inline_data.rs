//! Inline data (`EXT4_INLINE_DATA_FL`): a small file, directory or symlink held in
//! `i_block` and the `system.data` extended attribute. Pass 1 checks the flag against the
//! feature (e2fsck's `PR_1_INLINE_DATA_FEATURE`, `PR_1_INLINE_DATA_SET`), against the
//! extents flag (`fix_inline_data_extents_file`), that `system.data` can be found
//! (`PR_1_INLINE_DATA_NO_ATTR`), and sizes against what the two places hold.

use e4_format::extent::{ExtentHeader, ENTRY_SIZE as EXTENT_ENTRY_SIZE, EXTENT_MAGIC};
use e4_format::features::IncompatFeatures;
use e4_format::inode::{flags, FileType, Inode, I_BLOCK_SIZE};
use e4_format::xattr::XattrValue;

use crate::report::problem::{Location, ProblemCode};
use crate::state::block_claim::BlockWalk;
use crate::state::context::Context;
use crate::xattr::lookup::{all_attributes, BlockChecksum};

/// `system.data` is stored as name index 7 (`system.`) with the name `data`; e4-format
/// gives the full name, prefix included.
const XATTR_INDEX_SYSTEM: u8 = 7;
const SYSTEM_DATA_NAME: &[u8] = b"system.data";
/// The base inode, before `i_extra_isize` (`EXT2_GOOD_OLD_INODE_SIZE`).
const GOOD_OLD_INODE_SIZE: u64 = 128;

/// What libext2fs finds of an inode's `system.data` attribute.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SystemData {
    /// The value (a value held in an EA inode is taken as empty).
    Found(Vec<u8>),
    /// Neither the inode nor its xattr block has one.
    Absent,
    /// The inode's attributes or its xattr block do not parse, or the block's checksum
    /// fails: libext2fs returns the error rather than a value.
    Unreadable,
}

/// The `system.data` attribute of an inode, looked for among all its attributes
/// ([`all_attributes`]).
pub fn system_data(ctx: &Context, inode: &Inode, checksum: BlockChecksum) -> SystemData {
    let Some(xattrs) = all_attributes(ctx, inode, checksum) else {
        return SystemData::Unreadable;
    };
    xattrs
        .into_iter()
        .find(|x| x.index == XATTR_INDEX_SYSTEM && x.name == SYSTEM_DATA_NAME)
        .map_or(SystemData::Absent, |x| match x.value {
            XattrValue::Inline(v) => SystemData::Found(v),
            XattrValue::InInode { .. } => SystemData::Found(Vec::new()),
        })
}

/// What an inline-data inode holds (libext2fs's `ext2fs_inline_data_size`): all of
/// `i_block` and the `system.data` value, if any; `None` when the attributes cannot be
/// read (libext2fs returns the error, which e2fsck takes as a size that does not match).
pub fn inline_data_size(ctx: &Context, inode: &Inode, checksum: BlockChecksum) -> Option<u64> {
    match system_data(ctx, inode, checksum) {
        SystemData::Found(value) => Some((I_BLOCK_SIZE + value.len()) as u64),
        SystemData::Absent => Some(I_BLOCK_SIZE as u64),
        SystemData::Unreadable => None,
    }
}

/// The inline-data flag on a filesystem without the feature. e2fsck offers to set the
/// feature when the inode has a `system.data` attribute (`PR_1_INLINE_DATA_FEATURE`) and,
/// that declined or impossible, to clear the inode (`PR_1_INLINE_DATA_SET`); under `-n`
/// both are asked.
pub fn check_flag_without_feature(walk: &BlockWalk<'_>, inode: &Inode) {
    let ctx = walk.ctx;
    if !inode.has_flag(flags::INLINE_DATA)
        || ctx.sb.incompat().contains(IncompatFeatures::INLINE_DATA)
    {
        return;
    }
    let ino = walk.ino;
    let text =
        format!("inode {ino} has INLINE_DATA_FL flag on filesystem without inline data support");
    if let SystemData::Found(_) = system_data(ctx, inode, BlockChecksum::Verify) {
        walk.report(
            ProblemCode::PR_1_INLINE_DATA_FEATURE,
            Location::Inode(ino),
            text.clone(),
        );
    }
    walk.report(
        ProblemCode::PR_1_INLINE_DATA_SET,
        Location::Inode(ino),
        text,
    );
}

/// The inline-data flag with the feature but no `system.data` to be found
/// (`PR_1_INLINE_DATA_NO_ATTR`). e2fsck verifies the xattr block's checksum for this
/// unless the inode's own checksum failed (`inode_csum_ok`).
pub fn check_system_data_present(walk: &BlockWalk<'_>, inode: &Inode, inode_csum_ok: bool) {
    let ctx = walk.ctx;
    if !inode.has_flag(flags::INLINE_DATA)
        || !ctx.sb.incompat().contains(IncompatFeatures::INLINE_DATA)
    {
        return;
    }
    let checksum = if inode_csum_ok {
        BlockChecksum::Verify
    } else {
        BlockChecksum::Ignore
    };
    if !matches!(system_data(ctx, inode, checksum), SystemData::Found(_)) {
        let ino = walk.ino;
        walk.report(
            ProblemCode::PR_1_INLINE_DATA_NO_ATTR,
            Location::Inode(ino),
            format!("inode {ino} has INLINE_DATA_FL flag but extended attribute not found"),
        );
    }
}

/// Both the inline-data and the extents flag (e2fsck's `fix_inline_data_extents_file`).
/// e2fsck offers, in turn, to clear the inline flag when `i_block` holds a valid extent
/// header, to clear the extents flag when `i_size` would fit inline, to clear both when
/// every `i_block` word could be a block number, and to clear the inode; under `-n` each
/// that applies is asked, and the inode is then checked as inline data. Devices, fifos
/// and sockets get `PR_1_SPECIAL_EXTENTS_IDATA` instead (special_inode.rs).
pub fn check_flag_conflict(walk: &BlockWalk<'_>, inode: &Inode) {
    let ctx = walk.ctx;
    let features = ctx.sb.incompat();
    if !inode.has_flag(flags::INLINE_DATA)
        || !inode.has_flag(flags::EXTENTS)
        || !(features.contains(IncompatFeatures::EXTENTS)
            || features.contains(IncompatFeatures::INLINE_DATA))
        || matches!(
            inode.file_type(),
            Some(FileType::CharDevice | FileType::BlockDevice | FileType::Fifo | FileType::Socket)
        )
    {
        return;
    }
    let ino = walk.ino;
    let report = |code, what: &str| {
        walk.report(code, Location::Inode(ino), format!("inode {ino} {what}"));
    };
    if i_block_has_extent_header(&inode.record.block) {
        report(
            ProblemCode::PR_1_CLEAR_INLINE_DATA_FOR_EXTENT,
            "has extent header but inline data flag is set",
        );
    }
    // As e2fsck computes it, in unsigned (wrapping) arithmetic: the room for
    // `system.data` after the extra fields.
    let inode_size = inode.inode_size as u64;
    let max_inline_xattr = if inode_size > GOOD_OLD_INODE_SIZE {
        inode_size.wrapping_sub(GOOD_OLD_INODE_SIZE + u64::from(inode.record.extra_isize))
    } else {
        0
    };
    if inode.size() < (I_BLOCK_SIZE as u64).wrapping_add(max_inline_xattr) {
        report(
            ProblemCode::PR_1_CLEAR_EXTENT_FOR_INLINE_DATA,
            "seems to have inline data but extent flag is set",
        );
    }
    let blocks = ctx.sb.blocks_count();
    if inode
        .record
        .block
        .chunks_exact(4)
        .all(|w| u64::from(u32::from_le_bytes([w[0], w[1], w[2], w[3]])) < blocks)
    {
        report(
            ProblemCode::PR_1_CLEAR_EXTENT_INLINE_DATA_FLAGS,
            "seems to have block map but inline data and extent flags set",
        );
    }
    report(
        ProblemCode::PR_1_CLEAR_EXTENT_INLINE_DATA_INODE,
        "has inline data and extent flags set but i_block contains junk",
    );
}

/// libext2fs's `ext2fs_extent_header_verify` on `i_block`: the magic, entries within
/// `eh_max`, and `eh_max` within two of what 60 bytes hold (no depth limit).
fn i_block_has_extent_header(i_block: &[u8; I_BLOCK_SIZE]) -> bool {
    // OK to unwrap: `i_block` is 60 bytes.
    let header = ExtentHeader::decode(i_block.first_chunk::<12>().unwrap());
    let capacity = (I_BLOCK_SIZE - EXTENT_ENTRY_SIZE) / EXTENT_ENTRY_SIZE;
    let max = usize::from(header.max);
    header.magic == EXTENT_MAGIC
        && header.entries <= header.max
        && max <= capacity
        && max + 2 >= capacity
}

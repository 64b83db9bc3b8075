//! Inline data (`EXT4_INLINE_DATA_FL`): a small file, directory or symlink held in
//! `i_block` and the `system.data` extended attribute in the inode. Pass 1 checks the
//! flag against the feature (e2fsck's `PR_1_INLINE_DATA_FEATURE`, `PR_1_INLINE_DATA_SET`)
//! and sizes against what the two places hold.

use e4_format::features::IncompatFeatures;
use e4_format::inode::{flags, Inode, I_BLOCK_SIZE};
use e4_format::xattr::{parse_inode_xattrs, XattrValue};

use crate::block_claim::BlockWalk;
use crate::problem::{Location, ProblemCode};

/// `system.data` is stored as name index 7 (`system.`) with the name `data`; e4-format
/// gives the full name, prefix included.
const XATTR_INDEX_SYSTEM: u8 = 7;
const SYSTEM_DATA_NAME: &[u8] = b"system.data";

/// The `system.data` attribute of an inline-data inode, if it has one.
pub fn system_data(inode: &Inode) -> Option<Vec<u8>> {
    let loc = e4_format::Location::Inode(inode.ino);
    parse_inode_xattrs(&inode.xattr_area, loc)
        .ok()?
        .into_iter()
        .find(|x| x.index == XATTR_INDEX_SYSTEM && x.name == SYSTEM_DATA_NAME)
        .and_then(|x| match x.value {
            XattrValue::Inline(v) => Some(v),
            XattrValue::InInode { .. } => None,
        })
}

/// What an inline-data inode holds (libext2fs's `ext2fs_inline_data_size`): all of
/// `i_block` and the `system.data` value.
pub fn inline_data_size(inode: &Inode) -> u64 {
    I_BLOCK_SIZE as u64 + system_data(inode).map_or(0, |v| v.len() as u64)
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
    if system_data(inode).is_some() {
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

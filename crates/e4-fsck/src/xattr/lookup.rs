//! An inode's attributes as libext2fs's `ext2fs_xattrs_read` reads them, for the checks
//! that look one up by name (`system.data` for inline data, `c` for an encryption
//! context): those in the inode, then all of its xattr block's, so a block that fails
//! makes even an attribute in the inode unreadable.

use e4_format::features::CompatFeatures;
use e4_format::inode::Inode;
use e4_format::xattr::{decode_xattr_block, parse_inode_xattrs, Xattr, XattrBlockHeader};
use e4_format::{BlockSeed, MetadataBlock};

use crate::state::context::Context;

/// Whether an xattr block's checksum is verified when an attribute is looked for there:
/// libext2fs verifies it unless the caller set `EXT2_FLAG_IGNORE_CSUM_ERRORS`, as e2fsck
/// does for an inline directory's size and for the attribute check of an inode whose own
/// checksum failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BlockChecksum {
    Verify,
    Ignore,
}

/// Every attribute of `inode`, the inode's first; `None` where libext2fs fails to read
/// them (the in-inode area does not parse, or the xattr block does not read as
/// [`block_attributes`] says).
pub fn all_attributes(ctx: &Context, inode: &Inode, checksum: BlockChecksum) -> Option<Vec<Xattr>> {
    let loc = e4_format::Location::Inode(inode.ino);
    let mut xattrs = parse_inode_xattrs(&inode.xattr_area, loc).ok()?;
    let block = inode.file_acl();
    if block != 0 {
        xattrs.extend(block_attributes(ctx, inode.ino, block, checksum)?);
    }
    Some(xattrs)
}

/// The attributes of inode `ino`'s xattr block `block`; `None` when libext2fs would
/// fail to read them (no xattr feature, a block outside the filesystem, a checksum that
/// fails when `checksum` says to verify it, a block that does not parse).
fn block_attributes(
    ctx: &Context,
    ino: u32,
    block: u64,
    checksum: BlockChecksum,
) -> Option<Vec<Xattr>> {
    if !ctx.sb.compat().contains(CompatFeatures::EXT_ATTR) || !ctx.is_valid_block(block) {
        return None;
    }
    let bytes = ctx.image.read_blocks(block, 1, ctx.block_size()).ok()?;
    let loc = e4_format::Location::InodeBlock { inode: ino, block };
    if let (Some(seed), BlockChecksum::Verify) = (ctx.csum_seed, checksum) {
        let seed = BlockSeed {
            seed,
            block_nr: block,
        };
        XattrBlockHeader::verify(&bytes, seed, loc).ok()?;
    }
    Some(decode_xattr_block(&bytes, loc).ok()?.1)
}

//! The quota inode slots (inodes 3 and 4, and the project quota inode), as e2fsck's pass 1
//! treats them before any other reserved inode (`quota_inum_is_reserved`): with the quota
//! feature, a slot the superblock names is a quota file and must be a regular file
//! (`PR_1_QUOTA_BAD_MODE`) whose blocks are walked; any other slot must be clear (no
//! links, no `i_blocks`, no `i_block[0]`: `PR_1_QUOTA_INODE_NOT_CLEAR`) and nothing else
//! of it is looked at, not its mode, blocks or xattr block.

use e4_format::codec::le32;
use e4_format::features::RoCompatFeatures;
use e4_format::inode::{flags, FileType, Inode};

use crate::report::problem::{Location, ProblemCode};
use crate::state::block_claim::BlockWalk;
use crate::state::context::Context;
use crate::state::reserved_inodes::{GRP_QUOTA_INO, USR_QUOTA_INO};

/// What pass 1 does with a quota slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QuotaSlot {
    /// Not a quota slot: checked as any other inode.
    No,
    /// A live quota file: checked (its mode here) and walked as a reserved inode.
    QuotaFile,
    /// An unused slot: checked here and not walked.
    Unused,
}

/// Which kind of quota slot `ino` is.
pub fn quota_slot(ctx: &Context, ino: u32) -> QuotaSlot {
    let sb = &ctx.sb;
    let slot =
        ino == USR_QUOTA_INO || ino == GRP_QUOTA_INO || (ino != 0 && ino == sb.prj_quota_inum);
    if !slot {
        return QuotaSlot::No;
    }
    let named = [sb.usr_quota_inum, sb.grp_quota_inum, sb.prj_quota_inum].contains(&ino);
    if named && sb.ro_compat().contains(RoCompatFeatures::QUOTA) {
        QuotaSlot::QuotaFile
    } else {
        QuotaSlot::Unused
    }
}

/// Checks quota slot `inode` of kind `slot` (not [`QuotaSlot::No`]).
pub fn check(walk: &BlockWalk<'_>, inode: &Inode, slot: QuotaSlot) {
    let ino = walk.ino;
    let loc = Location::Inode(ino);
    match slot {
        QuotaSlot::QuotaFile if inode.file_type() != Some(FileType::Regular) => walk.report(
            ProblemCode::PR_1_QUOTA_BAD_MODE,
            loc,
            format!("quota inode {ino} is not a regular file"),
        ),
        QuotaSlot::Unused
            if inode.links_count() != 0
                || inode.record.blocks_lo != 0
                || le32(&inode.record.block, 0).unwrap_or(0) != 0 =>
        {
            walk.report(
                ProblemCode::PR_1_QUOTA_INODE_NOT_CLEAR,
                loc,
                format!("quota inode {ino} is not in use, but contains data"),
            )
        }
        _ => {}
    }
}

/// Whether pass 1 charges inode `ino` (links counted): the root and every inode from
/// `s_first_ino` on, but for the project quota file and xattr value inodes
/// (`check_blocks`). An inline-data symlink e2fsck finds valid never reaches that point
/// (`valid_inline_symlink`).
pub fn charges(ctx: &Context, inode: &Inode, valid_inline_symlink: bool) -> bool {
    let ino = inode.ino;
    ctx.sb.ro_compat().contains(RoCompatFeatures::QUOTA)
        && ino != ctx.sb.prj_quota_inum
        && (ino == e4_format::inode::ROOT_INO || ino >= ctx.sb.first_ino())
        && !inode.has_flag(flags::EA_INODE)
        && !valid_inline_symlink
}

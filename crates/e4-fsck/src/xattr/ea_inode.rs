//! Extended attribute values held in inodes (the ea_inode feature): an xattr entry names
//! an inode (`e_value_inum`) flagged `EXT4_EA_INODE_FL` whose data is the value, and that
//! inode stores how many entries name it (`i_ctime` high word, `l_i_version` low word).
//! Pass 1 checks each named inode (e2fsck's `check_large_ea_inode`), counts the entries
//! naming it (`inc_ea_inode_refs`: an xattr block's entries once, however many inodes
//! share the block) and charges its blocks to the owner's `i_blocks`, as the kernel
//! charges them to the owner's quota; pass 4 compares the counts (`check_ea_inode`).
//!
//! The entry's hash decides between a sound reference, an old Lustre-style one (charged
//! nothing) and a bad one, as in e2fsck.

use e4_format::inode::{flags, Inode};
use e4_format::xattr::{xattr_entry_hash_matches, Xattr};

use crate::report::problem::{Location, ProblemCode};
use crate::state::context::{Context, ReadInodeError};
use crate::xattr::report_bad_hash;

/// What xattr values held in inodes charge to their owner: their blocks (in its
/// `i_blocks`; clusters under bigalloc) and, for quota, one inode each.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ValueCharge {
    pub blocks: u64,
    pub inodes: u64,
}

/// e2fsck's `check_large_ea_inode` for an entry of inode `owner`, `xattr`, whose value
/// of `size` bytes is held in inode `value_ino`, reporting at `loc`: returns the blocks
/// the value charges to its owner (`size_to_quota_blocks`), or `None` after reporting
/// its problem. The entry's hash covers its name and the value inode's own hash
/// (`i_atime`); one that does not match is an old Lustre-style reference when the value
/// inode's `i_mtime` and generation are its owner's (charged nothing), a bad reference
/// when the inode lacks the flag too (`PR_1_ATTR_VALUE_EA_INODE`), else a bad hash.
pub fn check_value_inode(
    ctx: &Context,
    owner: &Inode,
    xattr: &Xattr,
    value_ino: u32,
    size: u32,
    loc: Location,
) -> Option<u64> {
    let owner_ino = owner.ino;
    let bad_reference = || {
        ctx.report(
            ProblemCode::PR_1_ATTR_VALUE_EA_INODE,
            loc,
            format!("inode {owner_ino} has illegal extended attribute value inode {value_ino}"),
        );
    };
    if value_ino < ctx.sb.first_ino() || value_ino > ctx.sb.inodes_count {
        bad_reference();
        return None;
    }
    // `size_to_quota_blocks`: whole clusters under bigalloc, counted as allocation units.
    let blocks = u64::from(size).div_ceil(u64::from(ctx.block_size()) * ctx.cluster_ratio());
    // e2fsck reads the value inode with `e2fsck_read_inode`, for which a checksum that
    // fails is fatal (exit 8); one that cannot be decoded otherwise is left to its own
    // scan.
    let value = match ctx.read_inode(value_ino) {
        Ok(value) => value,
        Err(ReadInodeError::Checksum(e)) => {
            // At the owner, where e2fsck's scan stops.
            ctx.report(
                ProblemCode::EXT2_ET_INODE_CSUM_INVALID,
                Location::Inode(owner_ino),
                format!("{e} while reading inode {value_ino} in pass1"),
            );
            return None;
        }
        Err(ReadInodeError::Unreadable(_)) => return Some(blocks),
    };
    let flagged = value.has_flag(flags::EA_INODE);
    let value_hash = value.record.atime.to_le_bytes();
    let charged = if xattr_entry_hash_matches(xattr.hash, xattr.stored_name(), &value_hash) {
        blocks
    } else if value.record.mtime == owner_ino && value.record.generation == owner.record.generation
    {
        0
    } else if !flagged {
        bad_reference();
        return None;
    } else {
        report_bad_hash(ctx, owner_ino, xattr, loc);
        return None;
    };
    if !flagged {
        // Declined, the repair leaves the entry invalid.
        ctx.report(
            ProblemCode::PR_1_ATTR_SET_EA_INODE_FL,
            loc,
            format!("EA inode {value_ino} for parent inode {owner_ino} missing EA_INODE flag"),
        );
        ctx.report(
            ProblemCode::PR_1_ATTR_NO_EA_INODE_FL,
            loc,
            format!("inode {owner_ino} has invalid extended attribute: EA inode {value_ino} missing EA_INODE flag"),
        );
        return None;
    }
    Some(charged)
}

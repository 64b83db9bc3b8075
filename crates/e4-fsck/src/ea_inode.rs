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

use std::collections::HashMap;
use std::sync::Mutex;

use e4_format::inode::{flags, Inode};
use e4_format::xattr::{xattr_entry_hash_matches, Xattr};

use crate::context::{Context, ReadInodeError};
use crate::problem::{Location, ProblemCode};
use crate::xattr_entries::report_bad_hash;

/// An inode flagged as an xattr value, as pass 1 found it.
#[derive(Debug, Clone, Copy)]
struct ValueInode {
    /// The references it stores (`ext2fs_get_ea_inode_ref`).
    stored_refs: u64,
    /// Old Lustre-style value inodes store no count: their `i_ctime` equals `i_atime`.
    lustre: bool,
}

/// What pass 1 learns of value inodes, for pass 4. Only inodes with xattrs in inodes touch
/// it, so one lock each is enough.
#[derive(Debug, Default)]
pub struct EaInodes {
    /// Entries naming each inode.
    refs: Mutex<HashMap<u32, u64>>,
    /// Inodes flagged as values.
    found: Mutex<HashMap<u32, ValueInode>>,
}

impl EaInodes {
    /// Counts one entry naming each of `inodes` (one number per entry).
    pub fn add_refs(&self, inodes: &[u32]) {
        let mut refs = self.refs.lock().unwrap_or_else(|e| e.into_inner());
        for &inode in inodes {
            *refs.entry(inode).or_default() += 1;
        }
    }

    /// Records inode `inode`, flagged `EXT4_EA_INODE_FL`, whatever its mode: e2fsck
    /// 1.47.0 asks nothing more of it (`PR_1_EA_INODE_NONREG` came later).
    pub fn record(&self, inode: &Inode) {
        let ino = inode.ino;
        let record = &inode.record;
        let value = ValueInode {
            stored_refs: (u64::from(record.ctime) << 32) | u64::from(record.version_lo),
            lustre: record.ctime == record.atime,
        };
        let mut found = self.found.lock().unwrap_or_else(|e| e.into_inner());
        found.insert(ino, value);
    }

    /// Pass 4 for value inodes (e2fsck's `check_ea_inode`, then the link count): one no
    /// entry names is unattached, unless a directory names it; one that entries name
    /// counts as one link, and must store their number.
    pub fn check_refs(&self, ctx: &Context) {
        let found = self.found.lock().unwrap_or_else(|e| e.into_inner());
        let refs = self.refs.lock().unwrap_or_else(|e| e.into_inner());
        for (&ino, value) in found.iter() {
            let loc = Location::Inode(ino);
            let from_dirs = ctx.inodes.refs(ino);
            let from_xattrs = refs.get(&ino).copied().unwrap_or(0);
            let counted = if from_dirs > 0 {
                from_dirs
            } else if from_xattrs > 0 {
                if value.stored_refs != from_xattrs && !value.lustre {
                    ctx.report(
                        ProblemCode::PR_4_EA_INODE_REF_COUNT,
                        loc,
                        format!(
                            "extended attribute inode {ino} ref count is {}, should be {from_xattrs}",
                            value.stored_refs
                        ),
                    );
                }
                1
            } else {
                // Declined, e2fsck leaves the links count alone.
                let (code, what) = if ctx.inodes.is_zero_length(ino) {
                    (ProblemCode::PR_4_ZERO_LEN_INODE, "zero-length inode")
                } else {
                    (ProblemCode::PR_4_UNATTACHED_INODE, "inode")
                };
                ctx.report(code, loc, format!("unattached {what} {ino}"));
                continue;
            };
            let on_disk = u32::from(ctx.inodes.links(ino));
            if counted != on_disk {
                ctx.report(
                    ProblemCode::PR_4_BAD_REF_COUNT,
                    loc,
                    format!("inode {ino} ref count is {on_disk}, should be {counted}"),
                );
            }
        }
    }
}

/// What xattr values held in inodes charge to their owner: their blocks (in its
/// `i_blocks`) and, for quota, one inode each.
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
    let blocks = u64::from(size).div_ceil(u64::from(ctx.block_size()));
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

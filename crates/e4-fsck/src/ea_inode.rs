//! Extended attribute values held in inodes (the ea_inode feature): an xattr entry names
//! an inode (`e_value_inum`) flagged `EXT4_EA_INODE_FL` whose data is the value, and that
//! inode stores how many entries name it (`i_ctime` high word, `l_i_version` low word).
//! Pass 1 checks each named inode (e2fsck's `check_large_ea_inode`), counts the entries
//! naming it (`inc_ea_inode_refs`: an xattr block's entries once, however many inodes
//! share the block) and charges its blocks to the owner's `i_blocks`, as the kernel
//! charges them to the owner's quota; pass 4 compares the counts (`check_ea_inode`).
//!
//! Kept difference: e4 checks no xattr entry hash (`PR_1_ATTR_HASH`), so an entry whose
//! hash does not match its value inode is taken as sound, where e2fsck reports it (or,
//! the inode lacking the flag too, `PR_1_ATTR_VALUE_EA_INODE`) and charges nothing for
//! an old Lustre-style reference.

use std::collections::HashMap;
use std::sync::Mutex;

use e4_format::inode::{flags, Inode};
use e4_format::xattr::{Xattr, XattrValue};

use crate::context::Context;
use crate::problem::{Location, ProblemCode};

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
    /// Counts one entry naming each value inode of `xattrs`.
    fn add_refs(&self, xattrs: &[Xattr]) {
        let mut refs = self.refs.lock().unwrap_or_else(|e| e.into_inner());
        for x in xattrs {
            if let XattrValue::InInode { inode, .. } = x.value {
                *refs.entry(inode).or_default() += 1;
            }
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

/// Checks the value inodes named by `xattrs`, attributes of inode `owner` (in the inode,
/// or in its xattr block when `in_block`), reporting at `loc`; counts the entries naming
/// each; returns what their values charge to the owner (`size_to_quota_blocks`, one
/// inode each).
/// As e2fsck's loop over the attributes in an inode stops charging at the first problem,
/// so does this; in a block every entry is charged but those with a problem.
pub fn check_value_inodes(
    ctx: &Context,
    owner: u32,
    xattrs: &[Xattr],
    in_block: bool,
    loc: Location,
) -> ValueCharge {
    ctx.ea_inodes.add_refs(xattrs);
    let block_size = u64::from(ctx.block_size());
    let mut charged = ValueCharge::default();
    for x in xattrs {
        let XattrValue::InInode { inode, size } = x.value else {
            continue;
        };
        if value_inode_is_sound(ctx, owner, inode, loc) {
            charged.blocks += u64::from(size).div_ceil(block_size);
            charged.inodes += 1;
        } else if !in_block {
            break;
        }
    }
    charged
}

/// e2fsck's `check_large_ea_inode`, but for the entry hash. (e2fsck 1.47.0 does not yet
/// ask for the ea_inode feature, `PR_1_EA_INODE_FEATURE`.)
fn value_inode_is_sound(ctx: &Context, owner: u32, value_ino: u32, loc: Location) -> bool {
    if value_ino < ctx.sb.first_ino() || value_ino > ctx.sb.inodes_count {
        ctx.report(
            ProblemCode::PR_1_ATTR_VALUE_EA_INODE,
            loc,
            format!("inode {owner} has illegal extended attribute value inode {value_ino}"),
        );
        return false;
    }
    // An inode that cannot be read is left to its own scan.
    let Ok(value) = ctx.read_inode(value_ino) else {
        return true;
    };
    if !value.has_flag(flags::EA_INODE) {
        // Declined, the repair leaves the entry invalid.
        ctx.report(
            ProblemCode::PR_1_ATTR_SET_EA_INODE_FL,
            loc,
            format!("EA inode {value_ino} for parent inode {owner} missing EA_INODE flag"),
        );
        ctx.report(
            ProblemCode::PR_1_ATTR_NO_EA_INODE_FL,
            loc,
            format!("inode {owner} has invalid extended attribute: EA inode {value_ino} missing EA_INODE flag"),
        );
        return false;
    }
    true
}

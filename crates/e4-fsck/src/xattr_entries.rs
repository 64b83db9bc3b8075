//! The entries of an inode's extended attributes, in the inode or in its xattr block,
//! checked as e2fsck's `check_ea_in_inode` and `check_ext_attr` walk them: an entry whose
//! value lies beside it must carry that value's hash (`PR_1_ATTR_HASH`), and one whose
//! value is held in an inode names a sound value inode (`ea_inode`). e2fsck accepts the
//! hash computed with the name's bytes signed or unsigned (kernels before 6.2 hashed them
//! signed on x86), and a hash of 0 in an inode, where older kernels stored none. The
//! block's own hash (`h_hash`) is not checked: e2fsck does not check it either.

use e4_format::inode::Inode;
use e4_format::xattr::{
    name_prefix, xattr_entry_hash_matches, Xattr, XattrEntryRecord, XattrValue,
};

use crate::context::Context;
use crate::ea_inode::{check_value_inode, ValueCharge};
use crate::problem::{Location, ProblemCode};

/// Where the attributes are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum XattrPlace {
    /// In the owner's inode, after its extra fields.
    Inode,
    /// In the xattr block of this number.
    Block(u64),
}

/// What checking a list of entries found.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EntriesChecked {
    /// What their values held in inodes charge to the owner.
    pub charged: ValueCharge,
    /// Whether an entry in an inode had a problem, which ends e2fsck's walk there.
    pub stopped: bool,
}

/// The attribute entry `record` describes, with its name as stored (without the
/// index's prefix) and its value: what both layout walks (in an inode, in a block) give
/// for each entry they pass.
pub fn xattr_of(record: &XattrEntryRecord, stored_name: &[u8], value: XattrValue) -> Xattr {
    let mut name = name_prefix(record.name_index)
        .unwrap_or_default()
        .as_bytes()
        .to_vec();
    name.extend_from_slice(stored_name);
    Xattr {
        index: record.name_index,
        name,
        value,
        hash: record.hash,
    }
}

/// Checks `xattrs`, attributes of inode `owner` held at `place`, counts the entries
/// naming each value inode, and returns what their values held in inodes charge to the
/// owner. In an inode e2fsck stops at the first entry with a problem (declined, the rest
/// are neither checked nor charged); in a block it checks and charges every entry but
/// those with a problem.
pub fn check_entries(
    ctx: &Context,
    owner: &Inode,
    xattrs: &[Xattr],
    place: XattrPlace,
) -> EntriesChecked {
    ctx.ea_inodes.add_refs(xattrs);
    let loc = match place {
        XattrPlace::Inode => Location::Inode(owner.ino),
        XattrPlace::Block(block) => Location::Block(block),
    };
    let mut charged = ValueCharge::default();
    for xattr in xattrs {
        let sound = match &xattr.value {
            XattrValue::Inline(value) => {
                let none_stored = place == XattrPlace::Inode && xattr.hash == 0;
                let sound =
                    none_stored || xattr_entry_hash_matches(xattr.hash, xattr.stored_name(), value);
                if !sound {
                    report_bad_hash(ctx, owner.ino, xattr, loc);
                }
                sound
            }
            &XattrValue::InInode { inode, size } => {
                match check_value_inode(ctx, owner, xattr, inode, size, loc) {
                    Some(blocks) => {
                        charged.blocks += blocks;
                        charged.inodes += 1;
                        true
                    }
                    None => false,
                }
            }
        };
        if !sound && place == XattrPlace::Inode {
            return EntriesChecked {
                charged,
                stopped: true,
            };
        }
    }
    EntriesChecked {
        charged,
        stopped: false,
    }
}

/// `PR_1_ATTR_HASH` for `xattr`, an entry of inode `owner`, named so that two bad
/// entries of one block stay two reports.
pub fn report_bad_hash(ctx: &Context, owner: u32, xattr: &Xattr, loc: Location) {
    ctx.report(
        ProblemCode::PR_1_ATTR_HASH,
        loc,
        format!(
            "extended attribute {} in inode {owner} has a hash ({}) which is invalid",
            String::from_utf8_lossy(&xattr.name),
            xattr.hash
        ),
    );
}

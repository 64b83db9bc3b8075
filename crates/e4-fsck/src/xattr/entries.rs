//! The entries of an inode's extended attributes, in the inode or in its xattr block,
//! checked as e2fsck's `check_ea_in_inode` and `check_ext_attr` walk them: an entry whose
//! value lies beside it must carry that value's hash (`PR_1_ATTR_HASH`), and one whose
//! value is held in an inode names a sound value inode (`ea_inode`). e2fsck accepts the
//! hash computed with the name's bytes signed or unsigned (kernels before 6.2 hashed them
//! signed on x86), and a hash of 0 in an inode, where older kernels stored none. The
//! block's own hash (`h_hash`) is not checked: e2fsck does not check it either.

use e4_format::codec::le32;
use e4_format::inode::Inode;
use e4_format::xattr::{
    entry_len, name_prefix, xattr_entry_hash_matches, Xattr, XattrEntryRecord, XattrValue,
};

use crate::report::problem::Location;
use crate::state::context::Context;
use crate::xattr::ea_inode::{check_value_inode, ValueCharge};
use crate::xattr::report_bad_hash;

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

/// The value inodes the entry list `list` names (its first record at 0), as e2fsck
/// counts them after either walk (`inc_ea_inode_refs`): every record up to the four zero
/// bytes that end the list, stepping by each record's length, whatever the layout walk
/// made of it (so a value inode named after a broken entry still counts), as long as
/// the next record starts before the end of `list` (e2fsck's loop asks that of the
/// next record, so a record reaching the end, or running past it, names none and ends
/// the count).
pub fn value_inodes_named(list: &[u8]) -> Vec<u32> {
    let mut inodes = Vec::new();
    let mut at = 0;
    while let Some(word) = le32(list, at) {
        let next = at + entry_len(usize::from(list[at]));
        if word == 0 || next >= list.len() {
            break;
        }
        // Inside the list: the record is at least 16 bytes and the next one starts
        // before the end.
        if let Some(inode) = le32(list, at + 4).filter(|&inode| inode != 0) {
            inodes.push(inode);
        }
        at = next;
    }
    inodes
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

/// Checks `xattrs`, attributes of inode `owner` held at `place`, and returns what their
/// values held in inodes charge to the owner. In an inode e2fsck stops at the first entry with a problem (declined, the rest
/// are neither checked nor charged); in a block it checks and charges every entry but
/// those with a problem.
pub fn check_entries(
    ctx: &Context,
    owner: &Inode,
    xattrs: &[Xattr],
    place: XattrPlace,
) -> EntriesChecked {
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Records of 20 bytes (`a` and `bb`) then one cut short by the end: the value
    /// inodes named by records whose next one starts inside the list are counted.
    #[test]
    fn value_inodes_named_up_to_the_end_of_the_list() {
        let mut list = vec![0u8; 44];
        // `a`: name length 1, index 1, value inode 13.
        list[0] = 1;
        list[1] = 1;
        list[4..8].copy_from_slice(&13u32.to_le_bytes());
        // `bb`: name length 2, no value inode.
        list[20] = 2;
        list[21] = 1;
        assert_eq!(value_inodes_named(&list), [13]);
        // A third record at 40 running past the end names none.
        list[40] = 3;
        assert_eq!(value_inodes_named(&list), [13]);
        // A record reaching exactly the end names none either (e2fsck wants the next
        // record to start before the end).
        assert_eq!(value_inodes_named(&list[..20]), []);
        assert_eq!(value_inodes_named(&list[..24]), [13]);
        // Four zero bytes end the list before a later record.
        list[20..24].fill(0);
        list[24 + 4..24 + 8].copy_from_slice(&99u32.to_le_bytes());
        assert_eq!(value_inodes_named(&list), [13]);
    }
}

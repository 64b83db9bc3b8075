//! The attributes stored in an inode, after its extra fields, walked as e2fsck's
//! `check_ea_in_inode` walks them: the area (`i_extra_isize` to the inode's end) starts
//! with the magic, then entry records, and values packed from the end; every record, name
//! and value must fit what is left of the area (`PR_1_ATTR_NAME_LEN`,
//! `PR_1_ATTR_VALUE_SIZE`) and none may overlap another, the magic or the four zero bytes
//! that end the list (`PR_1_INODE_EA_ALLOC_COLLISION`, e2fsck's `region_allocate`,
//! shared with the xattr block's walk in `xattr_region.rs`).
//! The records are e4-format's [`XattrEntryRecord`]; this is e2fsck's reading of them.

use e4_format::codec::{le32, prefix};
use e4_format::xattr::{
    entry_len, value_len, Xattr, XattrEntryRecord, XattrValue, INODE_HEADER_SIZE, XATTR_MAGIC,
};

use crate::report::problem::ProblemCode;
use crate::xattr::entries::xattr_of;
use crate::xattr::region::Regions;

/// What is wrong with the layout of an inode's attributes, where the walk stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AreaProblem {
    /// An entry's name does not fit what is left (`e_name_len`).
    NameLen(u8),
    /// An entry's value does not fit what is left (`e_value_size`).
    ValueSize(u32),
    /// Two pieces of the area overlap, or one lies past its end.
    Collision,
}

impl AreaProblem {
    /// e2fsck's code for it.
    pub fn code(self) -> ProblemCode {
        match self {
            AreaProblem::NameLen(_) => ProblemCode::PR_1_ATTR_NAME_LEN,
            AreaProblem::ValueSize(_) => ProblemCode::PR_1_ATTR_VALUE_SIZE,
            AreaProblem::Collision => ProblemCode::PR_1_INODE_EA_ALLOC_COLLISION,
        }
    }

    /// The tail of e2fsck's message.
    pub fn describe(self) -> String {
        match self {
            AreaProblem::NameLen(len) => format!("has a namelen ({len}) which is invalid"),
            AreaProblem::ValueSize(size) => format!("has a value size ({size}) which is invalid"),
            AreaProblem::Collision => "is corrupt (allocation collision)".to_string(),
        }
    }
}

/// The entry list of an inode's area `area` (after the magic; value offsets count from
/// its start), or `None` when the area does not hold the magic, or nothing after it.
pub fn entry_list(area: &[u8]) -> Option<&[u8]> {
    if area.len() <= INODE_HEADER_SIZE || le32(area, 0) != Some(XATTR_MAGIC) {
        return None;
    }
    Some(&area[INODE_HEADER_SIZE..])
}

/// The attributes of an inode's area `area` (from the magic to the inode's end), in
/// order, as far as their layout holds, and the layout problem that stopped the walk, if
/// any. An area without the magic, or too small to hold it, holds none.
pub fn walk(area: &[u8]) -> (Vec<Xattr>, Option<AreaProblem>) {
    let mut xattrs = Vec::new();
    let Some(entries) = entry_list(area) else {
        return (xattrs, None);
    };
    let mut regions = Regions::new(area.len());
    // The magic: it cannot collide with nothing.
    regions.allocate(0, INODE_HEADER_SIZE);
    let mut at = 0usize;
    let mut remain = entries.len();
    while remain >= XattrEntryRecord::SIZE && le32(entries, at) != Some(0) {
        // OK to unwrap: `remain` bytes from `at` lie inside the area.
        let record = XattrEntryRecord::decode(prefix(&entries[at..]).unwrap());
        let name_len = usize::from(record.name_len);
        if !regions.allocate(INODE_HEADER_SIZE + at, entry_len(name_len)) {
            return (xattrs, Some(AreaProblem::Collision));
        }
        remain -= XattrEntryRecord::SIZE;
        if value_len(name_len) > remain {
            return (xattrs, Some(AreaProblem::NameLen(record.name_len)));
        }
        remain -= value_len(name_len);
        let name_start = at + XattrEntryRecord::SIZE;
        let stored_name = &entries[name_start..name_start + name_len];
        let value = if record.value_inum != 0 {
            XattrValue::InInode {
                inode: record.value_inum,
                size: record.value_size,
            }
        } else {
            let size = record.value_size as usize;
            if size > remain {
                return (xattrs, Some(AreaProblem::ValueSize(record.value_size)));
            }
            let start = usize::from(record.value_offs);
            if size != 0 && !regions.allocate(INODE_HEADER_SIZE + start, value_len(size)) {
                return (xattrs, Some(AreaProblem::Collision));
            }
            remain -= size;
            // An empty value takes no room, wherever its offset points.
            let value = match size {
                0 => &[][..],
                _ => match entries.get(start..start + size) {
                    Some(value) => value,
                    None => return (xattrs, Some(AreaProblem::Collision)),
                },
            };
            XattrValue::Inline(value.to_vec())
        };
        xattrs.push(xattr_of(&record, stored_name, value));
        at += entry_len(name_len);
    }
    // The four zero bytes that end the list.
    let end_marker =
        (!regions.allocate(INODE_HEADER_SIZE + at, 4)).then_some(AreaProblem::Collision);
    (xattrs, end_marker)
}

#[cfg(test)]
mod tests {
    use super::*;
    use e4_format::xattr::{encode_inode_xattrs, XattrEntry};

    fn user(name: &str, value: &[u8]) -> XattrEntry {
        XattrEntry {
            index: 1,
            name: name.as_bytes().to_vec(),
            value: value.to_vec(),
        }
    }

    #[test]
    fn a_sound_area_walks_to_its_end() {
        let area = encode_inode_xattrs(&[user("a", b"hello"), user("bb", b"")], 96).unwrap();
        let (xattrs, problem) = walk(&area);
        assert_eq!(problem, None);
        assert_eq!(xattrs.len(), 2);
        assert_eq!(xattrs[0].name, b"user.a");
        assert_eq!(xattrs[0].value, XattrValue::Inline(b"hello".to_vec()));
        assert_eq!(walk(&[0u8; 96]), (Vec::new(), None));
    }

    #[test]
    fn layout_problems() {
        let area = encode_inode_xattrs(&[user("a", b"hello")], 96).unwrap();
        // e_value_size (record offset 8) past what is left.
        let mut big = area.clone();
        big[4 + 8..4 + 12].copy_from_slice(&200u32.to_le_bytes());
        assert_eq!(walk(&big).1, Some(AreaProblem::ValueSize(200)));
        // e_name_len past what is left: the record's room is taken first, and fails.
        let mut long = area.clone();
        long[4] = 90;
        assert_eq!(walk(&long).1, Some(AreaProblem::Collision));
        // The value moved onto the entry record.
        let mut overlap = area.clone();
        overlap[4 + 2..4 + 4].copy_from_slice(&0u16.to_le_bytes());
        assert_eq!(walk(&overlap).1, Some(AreaProblem::Collision));
        // An empty value's offset is not looked at.
        let mut empty = encode_inode_xattrs(&[user("a", b"")], 96).unwrap();
        empty[4 + 2..4 + 4].copy_from_slice(&5000u16.to_le_bytes());
        assert_eq!(walk(&empty).1, None);
        // A value past the end of the area.
        let mut past = area;
        past[4 + 2..4 + 4].copy_from_slice(&90u16.to_le_bytes());
        assert_eq!(walk(&past).1, Some(AreaProblem::Collision));
    }
}

//! Where an inline inode keeps its bytes (write-path.md §4, `fs/ext4/inline.c`): the first 60
//! in `i_block`, the rest as the value of the `system.data` attribute in the inode's own
//! attribute area. The kernel never moves `system.data` to an xattr block, so how much an
//! inode holds inline is `i_block` plus the largest value that fits the in-inode area beside
//! the inode's other in-inode attributes (`ext4_get_max_inline_size`).
//!
//! Only the inode record changes here (no block I/O), so the mechanism is tested on bare
//! inodes. The caller holds the inode's lock and checked INCOMPAT_INLINE_DATA.

use e4_format::inline_data::SYSTEM_DATA;
use e4_format::inode::{flags, Inode, I_BLOCK_SIZE};
use e4_format::xattr::{encode_inode_xattrs_after, fits_inode_xattrs, split_name, XattrEntry};

use crate::error::{Error, Result};
use crate::xattr::store::in_inode_entries;

/// Values are stored padded to 4 bytes (`EXT4_XATTR_ROUND`), so only multiples of 4 change
/// what fits.
const VALUE_ROUND: usize = 4;

/// `system.data` as an entry: its name index (7, `system.`) and stored name (`data`).
fn system_data_entry(value: Vec<u8>) -> XattrEntry {
    // OK to unwrap: "system." is a known prefix (e4-format's name table).
    let (index, name) = split_name(SYSTEM_DATA).expect("system. is a known prefix");
    XattrEntry {
        index,
        name: name.to_vec(),
        value,
    }
}

fn is_system_data(entry: &XattrEntry) -> bool {
    let template = system_data_entry(Vec::new());
    entry.index == template.index && entry.name == template.name
}

/// An inode's in-inode attributes, with `system.data` among them or not yet.
#[derive(Debug, Clone)]
pub(crate) struct InlineData {
    /// The in-inode attributes in their stored order.
    entries: Vec<XattrEntry>,
    /// Where `system.data` is in `entries`.
    data_at: Option<usize>,
    /// Bytes of the in-inode attribute area (from the end of the extra fields to the end of
    /// the inode).
    area_len: usize,
}

impl InlineData {
    /// Reads `inode`'s in-inode attributes.
    pub fn load(inode: &Inode) -> Result<Self> {
        let entries = in_inode_entries(inode)?;
        let data_at = entries.iter().position(is_system_data);
        Ok(InlineData {
            entries,
            data_at,
            area_len: inode.xattr_area.len(),
        })
    }

    /// The `system.data` value (empty when the inode has none).
    pub fn value(&self) -> &[u8] {
        self.data_at.map_or(&[], |at| &self.entries[at].value)
    }

    /// The inline bytes: `i_block`, then the `system.data` value.
    pub fn content(&self, inode: &Inode) -> Vec<u8> {
        let mut out = inode.record.block.to_vec();
        out.extend_from_slice(self.value());
        out
    }

    /// The most bytes the inode can hold inline: `i_block` and the largest `system.data`
    /// value that fits beside the other in-inode attributes. `None` when not even an empty
    /// value fits (128-byte inodes, or an area full of other attributes).
    pub fn capacity(&self) -> Option<usize> {
        let mut value_len = self.area_len / VALUE_ROUND * VALUE_ROUND;
        loop {
            if self.fits(value_len) {
                return Some(I_BLOCK_SIZE + value_len);
            }
            value_len = value_len.checked_sub(VALUE_ROUND)?;
        }
    }

    /// Whether a `system.data` value of `value_len` bytes fits the in-inode area.
    fn fits(&self, value_len: usize) -> bool {
        let entries = self.with_value(vec![0; value_len]);
        fits_inode_xattrs(&entries, self.area_len)
    }

    /// The in-inode entries with `system.data` set to `value` (kept in place, or added last).
    fn with_value(&self, value: Vec<u8>) -> Vec<XattrEntry> {
        let mut entries = self.entries.clone();
        match self.data_at {
            Some(at) => entries[at].value = value,
            None => entries.push(system_data_entry(value)),
        }
        entries
    }

    /// Stores `content` inline: its first 60 bytes in `i_block` (zero-padded), the rest as
    /// the `system.data` value; sets INLINE_DATA_FL and clears EXTENTS_FL, as
    /// `ext4_create_inline_data` does. False, changing nothing, when it does not fit.
    pub fn store(&mut self, inode: &mut Inode, content: &[u8]) -> bool {
        let (head, rest) = content.split_at(content.len().min(I_BLOCK_SIZE));
        let entries = self.with_value(rest.to_vec());
        let Some(area) = encode_inode_xattrs_after(&inode.xattr_area, &entries, self.area_len)
        else {
            return false;
        };
        inode.xattr_area = area;
        inode.record.block = [0; I_BLOCK_SIZE];
        inode.record.block[..head.len()].copy_from_slice(head);
        inode.record.flags = (inode.record.flags | flags::INLINE_DATA) & !flags::EXTENTS;
        self.data_at = Some(self.data_at.unwrap_or(self.entries.len()));
        self.entries = entries;
        true
    }

    /// Takes the inline data out of the inode (`ext4_destroy_inline_data`): removes
    /// `system.data`, zeroes `i_block` and clears INLINE_DATA_FL. The caller gives the inode
    /// its block mapping.
    pub fn remove(&mut self, inode: &mut Inode) -> Result<()> {
        if let Some(at) = self.data_at.take() {
            self.entries.remove(at);
        }
        // Fewer entries than were read from this area always fit it again.
        let area = encode_inode_xattrs_after(&inode.xattr_area, &self.entries, self.area_len);
        inode.xattr_area = area.ok_or_else(|| {
            Error::Invalid(format!(
                "inode {}: its in-inode attributes no longer fit",
                inode.ino
            ))
        })?;
        inode.record.block = [0; I_BLOCK_SIZE];
        inode.record.flags &= !flags::INLINE_DATA;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use e4_format::xattr::encode_inode_xattrs;

    /// A 256-byte inode: 96 bytes of in-inode attribute area.
    fn inode() -> Inode {
        let mut inode = Inode::new(12, 256, 0o100644, 1);
        inode.record.flags |= flags::EXTENTS;
        inode
    }

    #[test]
    fn capacity_is_i_block_plus_the_largest_value_that_fits() {
        let inode = inode();
        let data = InlineData::load(&inode).unwrap();
        assert_eq!(inode.xattr_area.len(), 96);
        // 96 - 4 magic - 4 end marker - 20 entry ("data" padded) = 68.
        assert_eq!(data.capacity(), Some(60 + 68));
        let small = Inode::new(12, 128, 0o100644, 1);
        assert_eq!(InlineData::load(&small).unwrap().capacity(), None);
    }

    #[test]
    fn content_splits_between_i_block_and_the_value() {
        let mut inode = inode();
        let mut data = InlineData::load(&inode).unwrap();
        let content: Vec<u8> = (0..100u8).collect();
        assert!(data.store(&mut inode, &content));
        assert!(inode.has_flag(flags::INLINE_DATA));
        assert!(!inode.has_flag(flags::EXTENTS));
        assert_eq!(inode.record.block[..], content[..60]);
        let reread = InlineData::load(&inode).unwrap();
        assert_eq!(reread.value(), &content[60..]);
        assert_eq!(reread.content(&inode), content);
        // Shrinking below 60 leaves an empty value and zeroes the rest of i_block.
        let mut data = reread;
        assert!(data.store(&mut inode, &content[..10]));
        let reread = InlineData::load(&inode).unwrap();
        assert_eq!(reread.value(), b"");
        assert_eq!(inode.record.block[10..], [0; 50]);
    }

    #[test]
    fn what_does_not_fit_changes_nothing() {
        let mut inode = inode();
        let mut data = InlineData::load(&inode).unwrap();
        let before = inode.clone();
        assert!(!data.store(&mut inode, &[7; 60 + 72]));
        assert_eq!(inode, before);
        assert!(data.store(&mut inode, &[7; 60 + 68]));
    }

    #[test]
    fn removal_keeps_other_attributes() {
        let mut inode = inode();
        let user = XattrEntry {
            index: 1,
            name: b"k".to_vec(),
            value: b"v".to_vec(),
        };
        inode.xattr_area = encode_inode_xattrs(std::slice::from_ref(&user), 96).unwrap();
        let mut data = InlineData::load(&inode).unwrap();
        // The user attribute takes a 20-byte entry and a 4-byte value: 24 fewer for ours.
        assert_eq!(data.capacity(), Some(60 + 44));
        assert!(data.store(&mut inode, &[1; 70]));
        data.remove(&mut inode).unwrap();
        assert!(!inode.has_flag(flags::INLINE_DATA));
        assert_eq!(inode.record.block, [0; 60]);
        assert_eq!(in_inode_entries(&inode).unwrap(), vec![user]);
    }
}

//! Extended attributes: the block form (`struct ext4_xattr_header` then entries, values
//! packed from the end of the block) and the in-inode form (a 4-byte magic after the extra
//! fields, then entries whose value offsets count from the first entry).

use crate::checksum::crc32c_raw;
use crate::codec::{on_disk_struct, prefix, Le};
use crate::error::{verify_checksum, FormatError, Location, Result};

/// `h_magic` and the in-inode header magic.
pub const XATTR_MAGIC: u32 = 0xEA02_0000;
/// Size of the entry record before the name.
const ENTRY_SIZE: usize = 16;
/// Offset of `h_checksum` in the block header.
const BLOCK_CHECKSUM_OFFSET: usize = 16;

on_disk_struct! {
    /// `struct ext4_xattr_header`, at the start of an xattr block.
    pub struct XattrBlockHeader(Le, 32) {
        /// `h_magic`.
        magic: u32 = 0x0,
        /// `h_refcount`: inodes sharing this block.
        refcount: u32 = 0x4,
        /// `h_blocks`: always 1.
        blocks: u32 = 0x8,
        /// `h_hash`.
        hash: u32 = 0xC,
        /// `h_checksum`.
        checksum: u32 = 0x10,
        /// `h_reserved`.
        reserved: [u32; 3] = 0x14,
    }
}

on_disk_struct! {
    /// `struct ext4_xattr_entry`, followed by `name_len` bytes of name, padded to 4.
    pub struct XattrEntryRecord(Le, 16) {
        /// `e_name_len`.
        name_len: u8 = 0x0,
        /// `e_name_index`: which prefix the name has.
        name_index: u8 = 0x1,
        /// `e_value_offs`.
        value_offs: u16 = 0x2,
        /// `e_value_inum`: with ea_inode, the inode holding the value.
        value_inum: u32 = 0x4,
        /// `e_value_size`.
        value_size: u32 = 0x8,
        /// `e_hash`.
        hash: u32 = 0xC,
    }
}

/// Where an attribute's value is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum XattrValue {
    /// Stored beside the entry.
    Inline(Vec<u8>),
    /// Stored as the content of an inode (ea_inode feature).
    InInode { inode: u32, size: u32 },
}

/// One attribute with its full name (prefix included).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Xattr {
    /// `e_name_index`. Indexes e4 has no prefix for (fs-verity's 11, Lustre's 5, the Hurd's
    /// 10, ...) are kept, unnamed, so a writer can carry them over; the kernel hides them
    /// from `listxattr` and so does e4.
    pub index: u8,
    /// The full name: the index's prefix and the stored suffix; only the suffix when the
    /// index is unknown ([`Xattr::is_known`] is false).
    pub name: Vec<u8>,
    pub value: XattrValue,
}

impl Xattr {
    /// Whether the name index is one e4 knows a prefix for.
    pub fn is_known(&self) -> bool {
        name_prefix(self.index).is_some()
    }
}

/// The prefix for `e_name_index`, or `None` for an index e4 does not know.
pub fn name_prefix(index: u8) -> Option<&'static str> {
    Some(match index {
        1 => "user.",
        2 => "system.posix_acl_access",
        3 => "system.posix_acl_default",
        4 => "trusted.",
        6 => "security.",
        7 => "system.",
        8 => "system.richacl",
        _ => return None,
    })
}

/// Parses the attributes of an xattr block, verifying its checksum when `csum_seed` is set.
pub fn parse_xattr_block(
    block: &[u8],
    block_nr: u64,
    csum_seed: Option<u32>,
    loc: Location,
) -> Result<Vec<Xattr>> {
    let header = XattrBlockHeader::decode(
        prefix::<32>(block).ok_or_else(|| FormatError::corrupt("xattr block", loc, "too small"))?,
    );
    if header.magic != XATTR_MAGIC || header.blocks != 1 {
        return Err(FormatError::corrupt(
            "xattr block",
            loc,
            format!(
                "bad header (magic {:#x}, {} blocks)",
                header.magic, header.blocks
            ),
        ));
    }
    if let Some(seed) = csum_seed {
        verify_checksum(
            "xattr block",
            loc,
            header.checksum,
            xattr_block_checksum(block, block_nr, seed),
        )?;
    }
    parse_entries(block, XattrBlockHeader::SIZE, 0, loc)
}

/// The checksum of an xattr block: over its number, then the block with `h_checksum` zeroed.
pub fn xattr_block_checksum(block: &[u8], block_nr: u64, seed: u32) -> u32 {
    let mut sum = crc32c_raw(seed, &block_nr.to_le_bytes());
    sum = crc32c_raw(sum, &block[..BLOCK_CHECKSUM_OFFSET]);
    sum = crc32c_raw(sum, &[0; 4]);
    crc32c_raw(sum, &block[BLOCK_CHECKSUM_OFFSET + 4..])
}

/// Parses the in-inode attributes from the area after the extra fields. An area without the
/// magic holds no attributes.
pub fn parse_inode_xattrs(area: &[u8], loc: Location) -> Result<Vec<Xattr>> {
    match crate::codec::le32(area, 0) {
        Some(XATTR_MAGIC) => parse_entries(&area[4..], 0, 0, loc),
        _ => Ok(Vec::new()),
    }
}

/// Walks entries starting at `first` in `region`; value offsets are relative to `base`.
fn parse_entries(region: &[u8], first: usize, base: usize, loc: Location) -> Result<Vec<Xattr>> {
    let bad = |at: usize, reason: String| {
        FormatError::corrupt("xattr entry", loc, format!("at offset {at}: {reason}"))
    };
    let mut out = Vec::new();
    let mut at = first;
    loop {
        // An entry list ends with four zero bytes.
        match crate::codec::le32(region, at) {
            Some(0) => break,
            None => return Err(bad(at, "entries run past the end".into())),
            Some(_) => {}
        }
        let record = XattrEntryRecord::decode(
            region
                .get(at..)
                .and_then(prefix::<16>)
                .ok_or_else(|| bad(at, "truncated entry".into()))?,
        );
        let name_start = at + ENTRY_SIZE;
        let name = region
            .get(name_start..name_start + usize::from(record.name_len))
            .ok_or_else(|| bad(at, "name runs past the end".into()))?;
        let prefix = name_prefix(record.name_index).unwrap_or_default();
        let mut full = prefix.as_bytes().to_vec();
        full.extend_from_slice(name);
        let value = if record.value_inum != 0 {
            XattrValue::InInode {
                inode: record.value_inum,
                size: record.value_size,
            }
        } else {
            let start = base + usize::from(record.value_offs);
            let end = start + record.value_size as usize;
            let bytes = region
                .get(start..end)
                .ok_or_else(|| bad(at, format!("value at {start}..{end} runs past the end")))?;
            XattrValue::Inline(bytes.to_vec())
        };
        out.push(Xattr {
            index: record.name_index,
            name: full,
            value,
        });
        at = name_start + ((usize::from(record.name_len) + 3) & !3);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(region: &mut [u8], at: usize, index: u8, name: &[u8], offs: u16, size: u32) {
        let rec = XattrEntryRecord {
            name_len: name.len() as u8,
            name_index: index,
            value_offs: offs,
            value_inum: 0,
            value_size: size,
            hash: 0,
        };
        let mut raw = [0u8; 16];
        rec.encode(&mut raw);
        region[at..at + 16].copy_from_slice(&raw);
        region[at + 16..at + 16 + name.len()].copy_from_slice(name);
    }

    #[test]
    fn block_with_checksum() {
        let mut block = vec![0u8; 1024];
        let header = XattrBlockHeader {
            magic: XATTR_MAGIC,
            refcount: 1,
            blocks: 1,
            hash: 0,
            checksum: 0,
            reserved: [0; 3],
        };
        header.encode(prefix_mut(&mut block));
        entry(&mut block, 32, 1, b"color", 1000, 4);
        block[1000..1004].copy_from_slice(b"blue");
        let sum = xattr_block_checksum(&block, 77, 9);
        block[16..20].copy_from_slice(&sum.to_le_bytes());
        let attrs = parse_xattr_block(&block, 77, Some(9), Location::Block(77)).unwrap();
        assert_eq!(attrs[0].name, b"user.color");
        assert_eq!(attrs[0].value, XattrValue::Inline(b"blue".to_vec()));
        assert!(parse_xattr_block(&block, 78, Some(9), Location::Block(78)).is_err());
    }

    fn prefix_mut(block: &mut [u8]) -> &mut [u8; 32] {
        (&mut block[..32]).try_into().unwrap()
    }

    #[test]
    fn value_out_of_range_is_corrupt() {
        let mut area = vec![0u8; 100];
        area[..4].copy_from_slice(&XATTR_MAGIC.to_le_bytes());
        entry(&mut area[4..], 0, 1, b"x", 90, 20);
        assert!(parse_inode_xattrs(&area, Location::Inode(12)).is_err());
    }
}

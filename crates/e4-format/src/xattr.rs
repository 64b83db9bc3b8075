//! Extended attributes: the block form (`struct ext4_xattr_header` then entries, values
//! packed from the end of the block) and the in-inode form (a 4-byte magic after the extra
//! fields, then entries whose value offsets count from the first entry).
//!
//! Both directions live here: the parsers give [`Xattr`]s, and the encoders lay out
//! [`XattrEntry`]s as the kernel does (`fs/ext4/xattr.c`): entry records from the front, each
//! value zero-padded to 4 bytes and packed downward from the end, four zero bytes after the
//! last entry; block entries sorted and hashed, in-inode entries in the order given with a
//! zero hash.

use crate::checksum::crc32c_raw;
use crate::codec::{on_disk_struct, prefix, Le};
use crate::error::{verify_checksum, FormatError, Location, Result};
use crate::metadata_block::{BlockSeed, MetadataBlock};
use crate::problem::{Problem, Structure};

/// `h_magic` and the in-inode header magic.
pub const XATTR_MAGIC: u32 = 0xEA02_0000;
/// The first version's `h_magic` (`EXT2_EXT_ATTR_MAGIC_v1`): libext2fs still reads such
/// a block (and checks its checksum), though e2fsck and the kernel take only version 2.
pub const XATTR_MAGIC_V1: u32 = 0xEA01_0000;
/// Size of the entry record before the name.
const ENTRY_SIZE: usize = 16;
/// The four zero bytes that end an entry list.
const END_OF_ENTRIES_SIZE: usize = 4;
/// Size of the in-inode header (`struct ext4_xattr_ibody_header`): only the magic.
pub const INODE_HEADER_SIZE: usize = 4;
/// Names and values are padded to this (`EXT4_XATTR_PAD`).
const PAD: usize = 4;
/// `NAME_HASH_SHIFT`, `VALUE_HASH_SHIFT` and `BLOCK_HASH_SHIFT` of `fs/ext4/xattr.c`.
const NAME_HASH_SHIFT: u32 = 5;
const VALUE_HASH_SHIFT: u32 = 16;
const BLOCK_HASH_SHIFT: u32 = 16;
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
    /// `e_hash` as stored: the kernel writes it in blocks (and, since ea_inode, in
    /// inodes); 0 in an inode means none was computed.
    pub hash: u32,
}

impl Xattr {
    /// Whether the name index is one e4 knows a prefix for.
    pub fn is_known(&self) -> bool {
        name_prefix(self.index).is_some()
    }

    /// The name as the entry stores it: without the index's prefix.
    pub fn stored_name(&self) -> &[u8] {
        let prefix_len = name_prefix(self.index).map_or(0, str::len);
        &self.name[prefix_len..]
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

/// The name index and stored name for a full attribute name (`user.comment` → 1,
/// `comment`), the inverse of [`name_prefix`]: a prefix ending in `.` takes any suffix, the
/// others (`system.posix_acl_access`, ...) are whole names stored with an empty suffix and
/// win over the `system.` prefix. `None` when no index has the name's prefix.
pub fn split_name(full: &[u8]) -> Option<(u8, &[u8])> {
    let mut by_prefix = None;
    for index in 1..=u8::MAX {
        let Some(prefix) = name_prefix(index) else {
            continue;
        };
        if prefix.ends_with('.') {
            if let Some(suffix) = full.strip_prefix(prefix.as_bytes()) {
                by_prefix = Some((index, suffix));
            }
        } else if full == prefix.as_bytes() {
            return Some((index, &[]));
        }
    }
    by_prefix
}

/// Bytes an entry record takes with its name, padded (`EXT4_XATTR_LEN`).
pub fn entry_len(name_len: usize) -> usize {
    padded(ENTRY_SIZE + name_len)
}

/// Bytes a value takes, zero-padded (`EXT4_XATTR_SIZE`).
pub fn value_len(size: usize) -> usize {
    padded(size)
}

fn padded(len: usize) -> usize {
    len.div_ceil(PAD) * PAD
}

/// `e_hash` of an entry in a block (`ext4_xattr_hash_entry`): the name's bytes (unsigned, as
/// kernels since 6.2 and e2fsprogs 1.47 hash them), then the value as zero-padded
/// little-endian words. An entry whose value is held in an inode (ea_inode) hashes as its
/// value the one word of that inode's own hash (`i_atime`), as the kernel's
/// `ext4_xattr_inode_hash` entry does and e2fsck's `ext2fs_ext_attr_hash_entry2`.
pub fn xattr_entry_hash(name: &[u8], value: &[u8]) -> u32 {
    entry_hash(name, value, u32::from)
}

/// `e_hash` as kernels before 6.2 computed it where `char` is signed (x86): each name
/// byte sign-extended (`ext2fs_ext_attr_hash_entry_signed`). Names of ASCII bytes hash
/// the same either way.
pub fn xattr_entry_hash_signed(name: &[u8], value: &[u8]) -> u32 {
    entry_hash(name, value, |byte| byte as i8 as u32)
}

/// Whether `stored` is the hash of an entry with `name` and `value`, computed either way
/// (e2fsck 1.47 accepts both, since images from older kernels hold the signed form).
pub fn xattr_entry_hash_matches(stored: u32, name: &[u8], value: &[u8]) -> bool {
    stored == xattr_entry_hash(name, value) || stored == xattr_entry_hash_signed(name, value)
}

/// The entry hash with each name byte widened by `widen`.
fn entry_hash(name: &[u8], value: &[u8], widen: impl Fn(u8) -> u32) -> u32 {
    let mut hash = 0u32;
    for &byte in name {
        hash = hash.rotate_left(NAME_HASH_SHIFT) ^ widen(byte);
    }
    for word in value.chunks(PAD) {
        let mut padded_word = [0u8; PAD];
        padded_word[..word.len()].copy_from_slice(word);
        hash = hash.rotate_left(VALUE_HASH_SHIFT) ^ u32::from_le_bytes(padded_word);
    }
    hash
}

/// `h_hash` of a block (`ext4_xattr_rehash`): the entry hashes folded in order; 0 when an
/// entry's hash is 0, which marks the block as not to be shared.
pub fn xattr_block_hash(entry_hashes: impl IntoIterator<Item = u32>) -> u32 {
    let mut hash = 0u32;
    for entry_hash in entry_hashes {
        if entry_hash == 0 {
            return 0;
        }
        hash = hash.rotate_left(BLOCK_HASH_SHIFT) ^ entry_hash;
    }
    hash
}

/// An attribute as a writer stores it: its value held beside the entry (values in their own
/// inode, ea_inode, are not written by e4).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct XattrEntry {
    /// `e_name_index`.
    pub index: u8,
    /// The name without the index's prefix (`e_name`), at most 255 bytes.
    pub name: Vec<u8>,
    /// The value, at most what fits a block.
    pub value: Vec<u8>,
}

impl XattrEntry {
    /// Bytes the entry takes in a block or inode: record, name and value, each padded.
    pub fn footprint(&self) -> usize {
        entry_len(self.name.len()) + value_len(self.value.len())
    }

    /// The kernel's order of entries in a block (`ext4_xattr_find_entry`, sorted): by index,
    /// then name length, then name.
    fn block_order(&self) -> (u8, usize, &[u8]) {
        (self.index, self.name.len(), &self.name)
    }
}

/// Whether `entries` fit an xattr block of `block_size` bytes.
pub fn fits_xattr_block(entries: &[XattrEntry], block_size: usize) -> bool {
    fits(entries, block_size.saturating_sub(XattrBlockHeader::SIZE))
}

/// Whether `entries` fit an in-inode area of `area_len` bytes (from the end of the extra
/// fields to the end of the inode, the magic included).
pub fn fits_inode_xattrs(entries: &[XattrEntry], area_len: usize) -> bool {
    fits(entries, area_len.saturating_sub(INODE_HEADER_SIZE))
}

/// Whether entries and their values fit `room` bytes with the end-of-entries marker (the
/// kernel's free-space rule in `ext4_xattr_set_entry`).
fn fits(entries: &[XattrEntry], room: usize) -> bool {
    let used: usize = entries.iter().map(XattrEntry::footprint).sum();
    entries.iter().all(|e| e.name.len() <= usize::from(u8::MAX))
        && used + END_OF_ENTRIES_SIZE <= room
}

/// A whole xattr block holding `entries` (sorted here), with `h_refcount` = `refcount`,
/// `h_blocks` 1, entry hashes and `h_hash`; `h_checksum` is left 0 for the writer to seal
/// (`XattrBlockHeader`'s [`MetadataBlock::seal`]). `None` when they do not fit.
pub fn encode_xattr_block(
    entries: &[XattrEntry],
    refcount: u32,
    block_size: usize,
) -> Option<Vec<u8>> {
    if !fits_xattr_block(entries, block_size) {
        return None;
    }
    let mut sorted: Vec<&XattrEntry> = entries.iter().collect();
    sorted.sort_by(|a, b| a.block_order().cmp(&b.block_order()));
    let mut block = vec![0u8; block_size];
    let hashes = write_entries(&mut block, XattrBlockHeader::SIZE, &sorted, &[], true);
    let header = XattrBlockHeader {
        magic: XATTR_MAGIC,
        refcount,
        blocks: 1,
        hash: xattr_block_hash(hashes),
        checksum: 0,
        reserved: [0; 3],
    };
    let mut raw = [0u8; XattrBlockHeader::SIZE];
    header.encode(&mut raw);
    block[..XattrBlockHeader::SIZE].copy_from_slice(&raw);
    Some(block)
}

/// The in-inode area (`area_len` bytes) holding `entries` in the order given, with hash 0
/// as the kernel writes there; all zeros (no magic) when there are none, as the kernel
/// leaves an inode whose last in-inode attribute went. The values are packed down from the
/// area's end in entry order. `None` when they do not fit.
pub fn encode_inode_xattrs(entries: &[XattrEntry], area_len: usize) -> Option<Vec<u8>> {
    encode_inode_xattrs_after(&[], entries, area_len)
}

/// As [`encode_inode_xattrs`], for an area that held `previous` (its bytes) and now holds
/// `entries`: the values go where the kernel's in-place edit (`ext4_xattr_set_entry`)
/// leaves them. Values stay packed down from the area's end; one whose entry was there
/// with a value of the same padded size keeps its place in the old order, and a new or
/// resized one goes below all of them (the kernel takes the old value out, closing the
/// gap, and puts the new one at the lowest offset).
pub fn encode_inode_xattrs_after(
    previous: &[u8],
    entries: &[XattrEntry],
    area_len: usize,
) -> Option<Vec<u8>> {
    let mut area = vec![0u8; area_len];
    if entries.is_empty() {
        return Some(area);
    }
    if !fits_inode_xattrs(entries, area_len) {
        return None;
    }
    area[..INODE_HEADER_SIZE].copy_from_slice(&XATTR_MAGIC.to_le_bytes());
    let old = previous_value_offsets(previous);
    // The rank of each entry's value: kept ones by old offset, highest (nearest the end)
    // first, then the others in entry order.
    let mut order: Vec<(bool, std::cmp::Reverse<usize>, usize)> = entries
        .iter()
        .enumerate()
        .map(|(i, e)| {
            let kept = old.iter().find(|(index, name, _, size)| {
                *index == e.index
                    && *name == e.name.as_slice()
                    && value_len(*size) == value_len(e.value.len())
            });
            match kept {
                Some(&(_, _, offs, _)) => (false, std::cmp::Reverse(offs), i),
                None => (true, std::cmp::Reverse(0), i),
            }
        })
        .collect();
    order.sort();
    let order: Vec<usize> = order.into_iter().map(|(_, _, i)| i).collect();
    let ordered: Vec<&XattrEntry> = entries.iter().collect();
    write_entries(&mut area[INODE_HEADER_SIZE..], 0, &ordered, &order, false);
    Some(area)
}

/// `(e_name_index, name, e_value_offs, e_value_size)` of each entry with a value in the
/// in-inode area `area`, as far as it reads as one (an unreadable tail is left out: its
/// values are then placed as new ones).
fn previous_value_offsets(area: &[u8]) -> Vec<(u8, &[u8], usize, usize)> {
    let mut found = Vec::new();
    if area.len() < INODE_HEADER_SIZE || area[..INODE_HEADER_SIZE] != XATTR_MAGIC.to_le_bytes() {
        return found;
    }
    let region = &area[INODE_HEADER_SIZE..];
    let mut at = 0;
    while at + END_OF_ENTRIES_SIZE <= region.len()
        && region[at..at + END_OF_ENTRIES_SIZE] != [0; END_OF_ENTRIES_SIZE]
        && at + ENTRY_SIZE <= region.len()
    {
        let mut raw = [0u8; ENTRY_SIZE];
        raw.copy_from_slice(&region[at..at + ENTRY_SIZE]);
        let record = XattrEntryRecord::decode(&raw);
        let name_end = at + ENTRY_SIZE + usize::from(record.name_len);
        let Some(name) = region.get(at + ENTRY_SIZE..name_end) else {
            break;
        };
        if record.value_inum == 0 && record.value_size > 0 {
            found.push((
                record.name_index,
                name,
                usize::from(record.value_offs),
                record.value_size as usize,
            ));
        }
        at += entry_len(name.len());
    }
    found
}

/// Writes entry records into `region` (zeroed, known to be large enough) from `first`, and
/// their values packed down from its end in `value_order` (indexes into `entries`; entry
/// order when empty); value offsets count from the region's start. Returns the entry
/// hashes (all 0 unless `hashed`).
fn write_entries(
    region: &mut [u8],
    first: usize,
    entries: &[&XattrEntry],
    value_order: &[usize],
    hashed: bool,
) -> Vec<u32> {
    let mut offsets = vec![0; entries.len()];
    let mut values_start = region.len();
    let in_entry_order: Vec<usize> = (0..entries.len()).collect();
    let order = if value_order.is_empty() {
        &in_entry_order
    } else {
        value_order
    };
    for &i in order {
        let value = &entries[i].value;
        if !value.is_empty() {
            values_start -= value_len(value.len());
            region[values_start..values_start + value.len()].copy_from_slice(value);
            offsets[i] = values_start;
        }
    }
    let mut at = first;
    let mut hashes = Vec::with_capacity(entries.len());
    for (entry, &value_offs) in entries.iter().zip(&offsets) {
        let hash = if hashed {
            xattr_entry_hash(&entry.name, &entry.value)
        } else {
            0
        };
        hashes.push(hash);
        let record = XattrEntryRecord {
            // OK to truncate: `fits` checked that names are at most 255 bytes.
            name_len: entry.name.len() as u8,
            name_index: entry.index,
            // OK to truncate: offsets lie inside a block or an inode (at most 64 KiB).
            value_offs: value_offs as u16,
            value_inum: 0,
            value_size: entry.value.len() as u32,
            hash,
        };
        let mut raw = [0u8; ENTRY_SIZE];
        record.encode(&mut raw);
        region[at..at + ENTRY_SIZE].copy_from_slice(&raw);
        region[at + ENTRY_SIZE..at + ENTRY_SIZE + entry.name.len()].copy_from_slice(&entry.name);
        at += entry_len(entry.name.len());
    }
    hashes
}

impl XattrBlockHeader {
    /// Decodes the header of an xattr block, checking `h_magic` and `h_blocks` (always 1);
    /// the checksum is [`MetadataBlock::verify`]'s business.
    pub fn decode_checked(block: &[u8], loc: Location) -> Result<Self> {
        let bad = |problem| FormatError::corrupt(Structure::XattrBlock, loc, problem);
        let header = XattrBlockHeader::decode(prefix::<32>(block).ok_or_else(|| {
            bad(Problem::TooShort {
                len: block.len(),
                need: XattrBlockHeader::SIZE,
            })
        })?);
        if header.magic != XATTR_MAGIC {
            return Err(bad(Problem::BadMagic {
                found: header.magic,
                expected: XATTR_MAGIC,
            }));
        }
        if header.blocks != 1 {
            return Err(bad(Problem::FieldMismatch {
                field: "h_blocks",
                found: header.blocks.into(),
                expected: 1,
            }));
        }
        Ok(header)
    }
}

/// Decodes an xattr block (its header and its attributes), whatever its checksum says.
pub fn decode_xattr_block(block: &[u8], loc: Location) -> Result<(XattrBlockHeader, Vec<Xattr>)> {
    let header = XattrBlockHeader::decode_checked(block, loc)?;
    Ok((
        header,
        parse_entries(block, XattrBlockHeader::SIZE, 0, loc)?,
    ))
}

/// An external xattr block: `h_checksum` is crc32c, seeded with the filesystem's seed (the
/// block may be shared between inodes), over the block number and then the block with
/// `h_checksum` zeroed.
impl MetadataBlock for XattrBlockHeader {
    /// The filesystem's seed and the block's number.
    type Seed = BlockSeed;

    fn verify(block: &[u8], seed: BlockSeed, loc: Location) -> Result<()> {
        let header = XattrBlockHeader::decode_checked(block, loc)?;
        verify_checksum(
            Structure::XattrBlock,
            loc,
            header.checksum,
            xattr_block_checksum(block, seed),
        )
    }

    fn seal(block: &mut [u8], seed: BlockSeed) {
        if block.len() < XattrBlockHeader::SIZE {
            return;
        }
        let sum = xattr_block_checksum(block, seed);
        block[BLOCK_CHECKSUM_OFFSET..BLOCK_CHECKSUM_OFFSET + 4].copy_from_slice(&sum.to_le_bytes());
    }
}

/// `h_checksum` as it should be for `block` at `seed` (what [`MetadataBlock::verify`]
/// compares, whatever the header holds): a checker compares it for a block whose header
/// `verify` would refuse but libext2fs reads (the first version's magic).
pub fn xattr_block_checksum(block: &[u8], BlockSeed { seed, block_nr }: BlockSeed) -> u32 {
    // A block too short to hold `h_checksum` (never one read from a filesystem) sums
    // what it has rather than panic.
    let head = &block[..block.len().min(BLOCK_CHECKSUM_OFFSET)];
    let tail = block.get(BLOCK_CHECKSUM_OFFSET + 4..).unwrap_or_default();
    let mut sum = crc32c_raw(seed, &block_nr.to_le_bytes());
    sum = crc32c_raw(sum, head);
    sum = crc32c_raw(sum, &[0; 4]);
    crc32c_raw(sum, tail)
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
    let bad = |problem| FormatError::corrupt(Structure::XattrEntry, loc, problem);
    let mut out = Vec::new();
    let mut at = first;
    loop {
        // An entry list ends with four zero bytes.
        match crate::codec::le32(region, at) {
            Some(0) => break,
            None => return Err(bad(Problem::EntriesPastEnd { offset: at })),
            Some(_) => {}
        }
        let record = XattrEntryRecord::decode(
            region
                .get(at..)
                .and_then(prefix::<16>)
                .ok_or_else(|| bad(Problem::TruncatedEntry { offset: at }))?,
        );
        let name_start = at + ENTRY_SIZE;
        let name = region
            .get(name_start..name_start + usize::from(record.name_len))
            .ok_or_else(|| bad(Problem::NamePastEnd { offset: at }))?;
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
            let bytes = region.get(start..end).ok_or_else(|| {
                bad(Problem::ValuePastEnd {
                    offset: at,
                    start,
                    end,
                })
            })?;
            XattrValue::Inline(bytes.to_vec())
        };
        out.push(Xattr {
            index: record.name_index,
            name: full,
            value,
            hash: record.hash,
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
        let seed = |block_nr| BlockSeed { seed: 9, block_nr };
        XattrBlockHeader::seal(&mut block, seed(77));
        XattrBlockHeader::verify(&block, seed(77), Location::Block(77)).unwrap();
        let (_, attrs) = decode_xattr_block(&block, Location::Block(77)).unwrap();
        assert_eq!(attrs[0].name, b"user.color");
        assert_eq!(attrs[0].value, XattrValue::Inline(b"blue".to_vec()));
        // The checksum covers the block number: the same bytes elsewhere do not verify.
        assert!(XattrBlockHeader::verify(&block, seed(78), Location::Block(78)).is_err());
    }

    /// The checksum alone, for a header `verify` refuses: the first version's magic.
    #[test]
    fn block_checksum_whatever_the_magic() {
        let mut block = vec![0u8; 1024];
        block[..4].copy_from_slice(&XATTR_MAGIC_V1.to_le_bytes());
        block[8..12].copy_from_slice(&1u32.to_le_bytes());
        let seed = BlockSeed {
            seed: 9,
            block_nr: 5,
        };
        XattrBlockHeader::seal(&mut block, seed);
        let stored = u32::from_le_bytes(block[16..20].try_into().unwrap());
        assert_eq!(xattr_block_checksum(&block, seed), stored);
        assert!(XattrBlockHeader::verify(&block, seed, Location::Block(5)).is_err());
        // Too short to hold `h_checksum`: a sum, no panic.
        xattr_block_checksum(&block[..10], seed);
    }

    fn prefix_mut(block: &mut [u8]) -> &mut [u8; 32] {
        (&mut block[..32]).try_into().unwrap()
    }

    /// `(name, e_value_offs)` of each entry of an in-inode area, which must parse.
    fn value_offsets(area: &[u8]) -> Vec<(Vec<u8>, u16)> {
        assert!(parse_inode_xattrs(area, Location::Inode(12)).is_ok());
        previous_value_offsets(area)
            .into_iter()
            .map(|(_, name, offs, _)| (name.to_vec(), offs as u16))
            .collect()
    }

    #[test]
    fn a_resized_value_goes_below_the_others_and_a_same_sized_one_stays() {
        let before = encode_inode_xattrs(&[user("a", b"1234"), user("b", b"12")], 96).unwrap();
        assert_eq!(
            value_offsets(&before),
            [(b"a".to_vec(), 88), (b"b".to_vec(), 84)]
        );
        // "a" grows: it is taken out ("b" moves up to the end) and put at the bottom.
        let grown = [user("a", b"12345"), user("b", b"12")];
        let after = encode_inode_xattrs_after(&before, &grown, 96).unwrap();
        assert_eq!(
            value_offsets(&after),
            [(b"a".to_vec(), 80), (b"b".to_vec(), 88)]
        );
        // "b" changes within its padded size: it stays where it is.
        let same = [user("a", b"12345"), user("b", b"xyz")];
        let again = encode_inode_xattrs_after(&after, &same, 96).unwrap();
        assert_eq!(value_offsets(&again), value_offsets(&after));
        // Without a previous area, values go in entry order from the end.
        let fresh = encode_inode_xattrs(&grown, 96).unwrap();
        assert_eq!(
            value_offsets(&fresh),
            [(b"a".to_vec(), 84), (b"b".to_vec(), 80)]
        );
    }

    fn user(name: &str, value: &[u8]) -> XattrEntry {
        XattrEntry {
            index: 1,
            name: name.as_bytes().to_vec(),
            value: value.to_vec(),
        }
    }

    /// The block the kernel (6.18) wrote for two files given `user.x` = "same value" on a
    /// 1 KiB filesystem (checksum left out: it is sealed separately).
    #[test]
    fn block_matches_the_kernel_byte_for_byte() {
        let mut kernel = vec![0u8; 1024];
        kernel[..16].copy_from_slice(&[
            0, 0, 2, 0xEA, 2, 0, 0, 0, 1, 0, 0, 0, 0x67, 0x68, 0x35, 0x13,
        ]);
        kernel[32..52].copy_from_slice(&[
            1, 1, 0xF4, 3, 0, 0, 0, 0, 10, 0, 0, 0, 0x67, 0x68, 0x35, 0x13, b'x', 0, 0, 0,
        ]);
        kernel[1012..1022].copy_from_slice(b"same value");
        let ours = encode_xattr_block(&[user("x", b"same value")], 2, 1024).unwrap();
        assert_eq!(ours, kernel);
    }

    #[test]
    fn entry_hash_rotates_name_bytes_then_value_words() {
        // 'a' = 0x61; the value "b" is the padded word 0x62.
        assert_eq!(xattr_entry_hash(b"a", b"b"), (0x61u32 << 16) ^ 0x62);
        assert_eq!(xattr_entry_hash(b"ab", b""), (0x61u32 << 5) ^ 0x62);
        // Name bytes are unsigned: 0xE9 is not sign-extended, but is in the old form.
        assert_eq!(xattr_entry_hash(&[0xE9], b""), 0xE9);
        assert_eq!(xattr_entry_hash_signed(&[0xE9], b""), 0xFFFF_FFE9);
        assert_eq!(
            xattr_entry_hash_signed(b"ab", b"c"),
            xattr_entry_hash(b"ab", b"c")
        );
        // Either form matches; nothing else does.
        let name = [b'x', 0xE9, b'z'];
        assert!(xattr_entry_hash_matches(
            xattr_entry_hash(&name, b"v"),
            &name,
            b"v"
        ));
        assert!(xattr_entry_hash_matches(
            xattr_entry_hash_signed(&name, b"v"),
            &name,
            b"v"
        ));
        assert!(!xattr_entry_hash_matches(
            xattr_entry_hash(&name, b"v") ^ 1,
            &name,
            b"v"
        ));
        // Both forms of an in-inode `user.\xE9z` = "vv", as e2fsck 1.47.0 accepted them.
        assert_eq!(xattr_entry_hash(&[0xE9, b'z'], b"vv"), 492_467_830);
        assert_eq!(xattr_entry_hash_signed(&[0xE9, b'z'], b"vv"), 4_249_192_841);
        assert_eq!(xattr_block_hash([1, 2]), (1u32 << 16) ^ 2);
        assert_eq!(xattr_block_hash([1, 0, 2]), 0);
    }

    #[test]
    fn block_round_trips_sorted_with_hashes() {
        let entries = vec![
            user("zz", b"v1"),
            XattrEntry {
                index: 6,
                name: b"selinux".to_vec(),
                value: b"ctx\0".to_vec(),
            },
            user("b", b""),
            user("aaa", &[7; 100]),
            user("a", b"12345"),
        ];
        let block = encode_xattr_block(&entries, 1, 4096).unwrap();
        let (_, parsed) = decode_xattr_block(&block, Location::Block(5)).unwrap();
        let names: Vec<&[u8]> = parsed.iter().map(|x| x.name.as_slice()).collect();
        assert_eq!(
            names,
            [
                &b"user.a"[..],
                b"user.b",
                b"user.zz",
                b"user.aaa",
                b"security.selinux"
            ]
        );
        for x in &parsed {
            let original = entries
                .iter()
                .find(|e| e.index == x.index && e.name == x.stored_name())
                .unwrap();
            assert_eq!(x.value, XattrValue::Inline(original.value.clone()));
        }
        // Every stored e_hash matches its entry; h_hash folds them in order.
        let mut at = XattrBlockHeader::SIZE;
        let mut hashes = Vec::new();
        for x in &parsed {
            let record = XattrEntryRecord::decode(prefix::<16>(&block[at..]).unwrap());
            let XattrValue::Inline(value) = &x.value else {
                unreachable!()
            };
            assert_eq!(record.hash, xattr_entry_hash(x.stored_name(), value));
            hashes.push(record.hash);
            at += entry_len(usize::from(record.name_len));
        }
        let header = XattrBlockHeader::decode(prefix::<32>(&block).unwrap());
        assert_eq!(header.hash, xattr_block_hash(hashes));
        assert_eq!((header.refcount, header.blocks), (1, 1));
    }

    #[test]
    fn inode_area_round_trips_in_order_with_zero_hashes() {
        let entries = vec![user("second", b"2"), user("first", b"one value")];
        let area = encode_inode_xattrs(&entries, 96).unwrap();
        assert_eq!(&area[..4], &XATTR_MAGIC.to_le_bytes());
        let parsed = parse_inode_xattrs(&area, Location::Inode(12)).unwrap();
        assert_eq!(parsed[0].name, b"user.second");
        assert_eq!(parsed[1].value, XattrValue::Inline(b"one value".to_vec()));
        let record = XattrEntryRecord::decode(prefix::<16>(&area[4..]).unwrap());
        assert_eq!(record.hash, 0);
        // Values are packed from the end: the first entry's value ends the area.
        assert_eq!(&area[92..93], b"2");
        assert_eq!(encode_inode_xattrs(&[], 96).unwrap(), vec![0; 96]);
    }

    #[test]
    fn space_is_counted_like_the_kernel() {
        // 4 magic + (16 + 4 name) + 4 end + 8 value = 36 bytes.
        let entry = user("abcd", b"12345678");
        assert_eq!(entry.footprint(), 28);
        assert!(fits_inode_xattrs(std::slice::from_ref(&entry), 36));
        assert!(!fits_inode_xattrs(std::slice::from_ref(&entry), 35));
        assert!(encode_inode_xattrs(std::slice::from_ref(&entry), 35).is_none());
        // 32 header + 20 entry + 4 end + value: a 1 KiB block holds 968 value bytes.
        assert!(encode_xattr_block(&[user("abcd", &[1; 968])], 1, 1024).is_some());
        assert!(encode_xattr_block(&[user("abcd", &[1; 969])], 1, 1024).is_none());
        let long = user(&"n".repeat(256), b"");
        assert!(!fits_xattr_block(&[long], 4096));
    }

    #[test]
    fn names_split_into_index_and_suffix() {
        assert_eq!(split_name(b"user.comment"), Some((1, &b"comment"[..])));
        assert_eq!(split_name(b"system.posix_acl_access"), Some((2, &b""[..])));
        assert_eq!(split_name(b"system.posix_acl_default"), Some((3, &b""[..])));
        assert_eq!(split_name(b"trusted.x"), Some((4, &b"x"[..])));
        assert_eq!(split_name(b"security.selinux"), Some((6, &b"selinux"[..])));
        assert_eq!(split_name(b"system.data"), Some((7, &b"data"[..])));
        assert_eq!(split_name(b"other.x"), None);
        assert_eq!(split_name(b"user"), None);
        let x = Xattr {
            index: 1,
            name: b"user.comment".to_vec(),
            value: XattrValue::Inline(Vec::new()),
            hash: 0,
        };
        assert_eq!(x.stored_name(), b"comment");
    }

    #[test]
    fn value_out_of_range_is_corrupt() {
        let mut area = vec![0u8; 100];
        area[..4].copy_from_slice(&XATTR_MAGIC.to_le_bytes());
        entry(&mut area[4..], 0, 1, b"x", 90, 20);
        assert!(parse_inode_xattrs(&area, Location::Inode(12)).is_err());
    }
}

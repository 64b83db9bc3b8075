//! Hashed directory index nodes (htree): `struct dx_root` in the directory's first block,
//! `struct dx_node` in interior blocks, and `struct dx_tail` holding the checksum. To linear
//! readers both look like blocks of deleted entries, which is how htree stays compatible.

use crate::checksum::crc32c_raw;
use crate::codec::{le16, le32, on_disk_struct, prefix, Le};
use crate::error::{verify_checksum, FormatError, Location, Result};
use crate::metadata_block::MetadataBlock;
use crate::problem::{Problem, Structure};

/// Offset of `dx_root_info` (after the "." and ".." entries).
const ROOT_INFO_OFFSET: usize = 0x18;
/// `dx_root_info.info_length`.
const ROOT_INFO_LENGTH: u8 = 8;
/// Offset of the root's entries (after "." , ".." and `dx_root_info`).
const ROOT_ENTRIES_OFFSET: usize = ROOT_INFO_OFFSET + ROOT_INFO_LENGTH as usize;
/// Offset of the entries in an interior node (after a fake empty dirent).
const NODE_ENTRIES_OFFSET: usize = 8;
/// Bits of `dx_entry.block` that hold the block number (`EXT4_DX_BLOCK_MASK`); the top four
/// are reserved.
pub const DX_BLOCK_MASK: u32 = 0x0FFF_FFFF;
/// Size of a `dx_entry` (hash, block) and of `dx_tail`.
const DX_ENTRY_SIZE: usize = 8;
const DX_TAIL_SIZE: usize = 8;
/// Deepest index the kernel builds: 2 levels, 3 with large_dir.
pub const MAX_LEVELS_LARGEDIR: u8 = 3;
pub const MAX_LEVELS: u8 = 2;

on_disk_struct! {
    /// `struct dx_root_info`.
    pub struct DxRootInfo(Le, 8) {
        /// `reserved_zero`.
        reserved_zero: u32 = 0x0,
        /// `hash_version`.
        hash_version: u8 = 0x4,
        /// `info_length`: 8.
        info_length: u8 = 0x5,
        /// `indirect_levels`: interior levels below the root.
        indirect_levels: u8 = 0x6,
        /// `unused_flags`.
        unused_flags: u8 = 0x7,
    }
}

/// One `dx_entry`: names hashing at or above `hash` are under `block` (a logical block of
/// the directory). The first entry's hash slot holds `limit`/`count` instead; it reads as 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DxEntry {
    pub hash: u32,
    pub block: u32,
}

/// An index node (root or interior): its entries, sorted by hash.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DxNode {
    /// `dx_countlimit.limit`: capacity.
    pub limit: u16,
    /// The entries; `entries[0].hash` is 0.
    pub entries: Vec<DxEntry>,
    /// Where the entries start in the block.
    entries_offset: usize,
}

/// Whether a view of an index block walks its entries to check that their hashes are in
/// order, or relies on [`check_index_block`] having checked the same bytes: a lookup reads
/// the root's few hundred entries on every operation, and its buffer cache checks each
/// block once, when the block is first read, not on every look.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HashOrder {
    Check,
    CheckedBefore,
}

/// Checks an index block read from the disk, once, as a lookup needs it: the root (block 0,
/// "." and ".." first) or an interior node (one empty record spanning the block), told apart
/// by its first record; `limit`, `count`, the root's info, and the hashes in order, which
/// binary search relies on (out of order, a lookup follows the wrong child, misses a name
/// that is there, and a create then adds it twice).
pub fn check_index_block(block: &[u8], csum: bool, max_levels: u8, loc: Location) -> Result<()> {
    if is_interior_layout(block) {
        DxNode::entries_in(block, csum, HashOrder::Check, loc).map(drop)
    } else {
        DxRoot::entries_in(block, csum, max_levels, HashOrder::Check, loc).map(drop)
    }
}

/// Whether `block` starts as an interior node does: a record of inode 0 spanning the block.
fn is_interior_layout(block: &[u8]) -> bool {
    let fake_len = le16(block, 4).map(|l| crate::dir_entry::rec_len_from_disk(l, block.len()));
    le32(block, 0) == Some(0) && fake_len == Some(block.len())
}

/// The parsed root block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DxRoot {
    pub info: DxRootInfo,
    pub node: DxNode,
}

impl DxRoot {
    /// Parses block 0 of an indexed directory. `csum` says whether a dx_tail is present
    /// (metadata_csum); `max_levels` is 2, or 3 with large_dir.
    pub fn parse(block: &[u8], csum: bool, max_levels: u8, loc: Location) -> Result<Self> {
        let (info, entries) = Self::entries_in(block, csum, max_levels, HashOrder::Check, loc)?;
        Ok(DxRoot {
            info,
            node: entries.to_node(),
        })
    }

    /// Block 0's root info and its entries where they lie, checked as [`DxRoot::parse`]
    /// checks them (the hash order as `order` says), without copying them: a lookup
    /// follows one entry of each node on its way down.
    pub fn entries_in(
        block: &[u8],
        csum: bool,
        max_levels: u8,
        order: HashOrder,
        loc: Location,
    ) -> Result<(DxRootInfo, DxEntries<'_>)> {
        let bad = |problem| FormatError::corrupt(Structure::HtreeRoot, loc, problem);
        // A root checked in the layout of an interior node would not have had its own
        // entries' order checked (`check_index_block` tells them apart so).
        if is_interior_layout(block) {
            return Err(bad(Problem::NotAnIndexBlock));
        }
        let info_bytes = block
            .get(ROOT_INFO_OFFSET..)
            .and_then(prefix::<8>)
            .ok_or_else(|| {
                bad(Problem::TooShort {
                    len: block.len(),
                    need: ROOT_ENTRIES_OFFSET,
                })
            })?;
        let info = DxRootInfo::decode(info_bytes);
        if info.reserved_zero != 0 || info.info_length != ROOT_INFO_LENGTH {
            return Err(bad(Problem::BadRootInfo {
                info_length: info.info_length,
                reserved_zero: info.reserved_zero,
            }));
        }
        if info.indirect_levels >= max_levels {
            return Err(bad(Problem::TooManyLevels {
                levels: u32::from(info.indirect_levels) + 1,
                max: max_levels,
            }));
        }
        let entries = DxEntries::parse_at(
            block,
            ROOT_ENTRIES_OFFSET,
            csum,
            order,
            Structure::HtreeRoot,
            loc,
        )?;
        Ok((info, entries))
    }

    /// The root a directory gets when it becomes indexed (`make_indexed_dir`): no interior
    /// levels, one entry pointing at `first_leaf`. `hash_version` is the superblock's
    /// `s_def_hash_version` (0-2; the unsigned variant is the superblock's business).
    pub fn new(block_size: usize, csum: bool, hash_version: u8, first_leaf: u32) -> Self {
        DxRoot {
            info: DxRootInfo {
                reserved_zero: 0,
                hash_version,
                info_length: ROOT_INFO_LENGTH,
                indirect_levels: 0,
                unused_flags: 0,
            },
            node: DxNode {
                limit: DxNode::limit_for(block_size, ROOT_ENTRIES_OFFSET, csum),
                entries: vec![DxEntry {
                    hash: 0,
                    block: first_leaf,
                }],
                entries_offset: ROOT_ENTRIES_OFFSET,
            },
        }
    }

    /// Writes `dx_root_info` and the index into block 0 of the directory, whose "." and ".."
    /// entries (the first 24 bytes) are left as they are. Unused slots and the `dx_tail` are
    /// zeroed; [`DxNode::seal`](MetadataBlock::seal) fills the tail.
    pub fn encode_into(&self, block: &mut [u8]) {
        block[ROOT_INFO_OFFSET..].fill(0);
        let mut info = [0u8; DxRootInfo::SIZE];
        self.info.encode(&mut info);
        block[ROOT_INFO_OFFSET..ROOT_ENTRIES_OFFSET].copy_from_slice(&info);
        self.node.encode_into(block);
    }
}

impl DxNode {
    /// Parses an interior index block.
    pub fn parse(block: &[u8], csum: bool, loc: Location) -> Result<Self> {
        Ok(Self::entries_in(block, csum, HashOrder::Check, loc)?.to_node())
    }

    /// An interior index block's entries where they lie, checked as [`DxNode::parse`]
    /// checks them (the hash order as `order` says), without copying them.
    pub fn entries_in(
        block: &[u8],
        csum: bool,
        order: HashOrder,
        loc: Location,
    ) -> Result<DxEntries<'_>> {
        // The fake dirent must span the whole block, or this is not an index node.
        if !is_interior_layout(block) {
            return Err(FormatError::corrupt(
                Structure::HtreeNode,
                loc,
                Problem::NotAnIndexBlock,
            ));
        }
        DxEntries::parse_at(
            block,
            NODE_ENTRIES_OFFSET,
            csum,
            order,
            Structure::HtreeNode,
            loc,
        )
    }

    fn expected_limit(block_len: usize, offset: usize, csum: bool) -> usize {
        let tail = if csum { DX_TAIL_SIZE } else { 0 };
        block_len.saturating_sub(offset + tail) / DX_ENTRY_SIZE
    }

    /// `limit` as a u16: block sizes are at most 64 KiB, so at most 8191 entries.
    fn limit_for(block_len: usize, offset: usize, csum: bool) -> u16 {
        u16::try_from(Self::expected_limit(block_len, offset, csum)).unwrap_or(u16::MAX)
    }

    /// An interior index node holding `entries` (`entries[0].hash` is not stored).
    pub fn new_interior(block_size: usize, csum: bool, entries: Vec<DxEntry>) -> Self {
        DxNode {
            limit: Self::limit_for(block_size, NODE_ENTRIES_OFFSET, csum),
            entries,
            entries_offset: NODE_ENTRIES_OFFSET,
        }
    }

    /// A whole interior index block for this node: the fake dirent spanning the block (so
    /// linear readers see one deleted entry), the index, zeroed unused slots and a zeroed
    /// `dx_tail` that [`DxNode::seal`](MetadataBlock::seal) fills.
    pub fn encode_interior(&self, block_size: usize) -> Vec<u8> {
        let mut block = vec![0u8; block_size];
        crate::dir_entry::encode_entry(&mut block, 0, block_size, 0, &[]);
        self.encode_into(&mut block);
        block
    }

    /// Writes `limit`, `count` and the entries into `block` at this node's offset.
    pub fn encode_into(&self, block: &mut [u8]) {
        let at = self.entries_offset;
        for (i, e) in self.entries.iter().enumerate() {
            let slot = at + DX_ENTRY_SIZE * i;
            block[slot..slot + 4].copy_from_slice(&e.hash.to_le_bytes());
            block[slot + 4..slot + 8].copy_from_slice(&e.block.to_le_bytes());
        }
        block[at..at + 2].copy_from_slice(&self.limit.to_le_bytes());
        block[at + 2..at + 4].copy_from_slice(&(self.entries.len() as u16).to_le_bytes());
    }
}

/// An index node's entries where they lie in its block, checked as a parse checks them
/// (`limit` as the block's size says, `count` within it, hashes in order): what a lookup
/// reads on its way down, with no copy. [`DxEntries::to_node`] copies them for an edit.
#[derive(Debug, Clone, Copy)]
pub struct DxEntries<'a> {
    /// `count` entries of 8 bytes; the first one's hash bytes hold limit and count.
    raw: &'a [u8],
    /// `dx_countlimit.limit`.
    pub limit: u16,
    /// Where the entries start in the block.
    offset: usize,
}

impl<'a> DxEntries<'a> {
    fn parse_at(
        block: &'a [u8],
        offset: usize,
        csum: bool,
        order: HashOrder,
        structure: Structure,
        loc: Location,
    ) -> Result<Self> {
        let bad = |problem| FormatError::corrupt(structure, loc, problem);
        let (Some(limit), Some(count)) = (le16(block, offset), le16(block, offset + 2)) else {
            return Err(bad(Problem::TooShort {
                len: block.len(),
                need: offset + 4,
            }));
        };
        let expected = DxNode::expected_limit(block.len(), offset, csum);
        if usize::from(limit) != expected {
            return Err(bad(Problem::FieldMismatch {
                field: "limit",
                found: limit.into(),
                expected: expected as u64,
            }));
        }
        if count == 0 || count > limit {
            return Err(bad(Problem::BadCount { count, limit }));
        }
        // The limit fits in the block (checked above) and count <= limit.
        let entries = DxEntries {
            raw: &block[offset..offset + DX_ENTRY_SIZE * usize::from(count)],
            limit,
            offset,
        };
        if order == HashOrder::CheckedBefore {
            return Ok(entries);
        }
        // The order checked without a branch per pair.
        let mut hashes =
            entries.raw.chunks_exact(DX_ENTRY_SIZE).skip(1).map(|e| {
                u32::from_le_bytes(e[..4].try_into().expect("an entry's hash is 4 bytes"))
            });
        let in_order = hashes.next().is_none_or(|first| {
            hashes
                .fold((true, first), |(in_order, last), hash| {
                    (in_order & (last <= hash), hash)
                })
                .0
        });
        if !in_order {
            return Err(bad(Problem::HashesOutOfOrder));
        }
        Ok(entries)
    }

    /// `count`: the live entries.
    pub fn len(&self) -> usize {
        self.raw.len() / DX_ENTRY_SIZE
    }

    /// Never true: a node holds at least one entry (a count of 0 is corrupt).
    pub fn is_empty(&self) -> bool {
        self.raw.is_empty()
    }

    /// Entry `i` (`i < len()`); the first one's hash reads as 0.
    pub fn get(&self, i: usize) -> DxEntry {
        let at = i * DX_ENTRY_SIZE;
        let raw = u64::from_le_bytes(
            self.raw[at..at + DX_ENTRY_SIZE]
                .try_into()
                .expect("an entry is 8 bytes"),
        );
        DxEntry {
            hash: if i == 0 { 0 } else { raw as u32 },
            block: (raw >> 32) as u32,
        }
    }

    fn hash(&self, i: usize) -> u32 {
        self.get(i).hash
    }

    /// The child to follow for `hash`: the last entry whose hash is not above it.
    pub fn child_for(&self, hash: u32) -> usize {
        // Entry 0's hash reads as 0, so at least one entry is not above `hash`.
        let (mut low, mut high) = (1, self.len());
        while low < high {
            let mid = low + (high - low) / 2;
            if self.hash(mid) <= hash {
                low = mid + 1;
            } else {
                high = mid;
            }
        }
        low - 1
    }

    /// The entries, in order.
    pub fn iter(&self) -> impl Iterator<Item = DxEntry> + '_ {
        (0..self.len()).map(|i| self.get(i))
    }

    /// The node as an owned, editable copy.
    pub fn to_node(&self) -> DxNode {
        DxNode {
            limit: self.limit,
            entries: self.iter().collect(),
            entries_offset: self.offset,
        }
    }
}

/// (tail offset, checksum) of an index block whose count/limit is at `offset`: crc32c over
/// the header and the `count` live entries, then `dt_reserved` and a zero checksum field.
fn dx_checksum(
    block: &[u8],
    offset: usize,
    count: usize,
    limit: usize,
    inode_seed: u32,
) -> (usize, u32) {
    let tail = offset + DX_ENTRY_SIZE * limit;
    let covered = offset + DX_ENTRY_SIZE * count;
    let sum = crc32c_raw(inode_seed, &block[..covered]);
    let sum = crc32c_raw(sum, &block[tail..tail + 4]);
    (tail, crc32c_raw(sum, &[0; 4]))
}

/// Where an index block's checksum lies: which structure it is (an interior node starts with
/// a fake dirent spanning the block, the root with "." and "..") and its (offset of
/// count/limit, count, limit), or `None` if count/limit leave no room for a `dx_tail`.
fn index_layout(block: &[u8]) -> (Structure, Option<(usize, usize, usize)>) {
    let (structure, offset) = if is_interior_layout(block) {
        (Structure::HtreeNode, NODE_ENTRIES_OFFSET)
    } else {
        (Structure::HtreeRoot, ROOT_ENTRIES_OFFSET)
    };
    let (Some(limit), Some(count)) = (le16(block, offset), le16(block, offset + 2)) else {
        return (structure, None);
    };
    let (limit, count) = (usize::from(limit), usize::from(count));
    if count > limit || offset + DX_ENTRY_SIZE * limit + DX_TAIL_SIZE > block.len() {
        return (structure, None);
    }
    (structure, Some((offset, count, limit)))
}

/// An htree root or interior block (metadata_csum): the `dx_tail` after `limit` slots holds
/// crc32c, seeded with the directory inode's seed, over the live entries and `dt_reserved`.
impl MetadataBlock for DxNode {
    /// The directory inode's checksum seed.
    type Seed = u32;

    fn verify(block: &[u8], inode_seed: u32, loc: Location) -> Result<()> {
        let (structure, layout) = index_layout(block);
        let Some((offset, count, limit)) = layout else {
            return Err(FormatError::corrupt(
                structure,
                loc,
                Problem::NoChecksumTail,
            ));
        };
        let (tail, computed) = dx_checksum(block, offset, count, limit, inode_seed);
        // OK to unwrap: index_layout checked that the tail fits.
        let stored = le32(block, tail + 4).unwrap();
        verify_checksum(structure, loc, stored, computed)
    }

    fn seal(block: &mut [u8], inode_seed: u32) {
        let (_, Some((offset, count, limit))) = index_layout(block) else {
            return;
        };
        let tail = offset + DX_ENTRY_SIZE * limit;
        block[tail..tail + 4].fill(0);
        let (tail, sum) = dx_checksum(block, offset, count, limit, inode_seed);
        block[tail + 4..tail + 8].copy_from_slice(&sum.to_le_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node_block(csum: bool) -> Vec<u8> {
        let mut block = vec![0u8; 1024];
        block[4..6].copy_from_slice(&1024u16.to_le_bytes());
        let node = DxNode {
            limit: DxNode::expected_limit(1024, 8, csum) as u16,
            entries: vec![
                DxEntry { hash: 0, block: 1 },
                DxEntry {
                    hash: 0x100,
                    block: 2,
                },
                DxEntry {
                    hash: 0x900,
                    block: 3,
                },
            ],
            entries_offset: 8,
        };
        node.encode_into(&mut block);
        if csum {
            DxNode::seal(&mut block, 42);
        }
        block
    }

    #[test]
    fn node_round_trip_and_lookup() {
        let block = node_block(true);
        let loc = Location::Block(4);
        let node = DxNode::parse(&block, true, loc).unwrap();
        DxNode::verify(&block, 42, loc).unwrap();
        let entries = DxNode::entries_in(&block, true, HashOrder::Check, loc).unwrap();
        assert_eq!(entries.child_for(0x50), 0);
        assert_eq!(entries.child_for(0x100), 1);
        assert_eq!(entries.child_for(0x8ff), 1);
        assert_eq!(entries.child_for(u32::MAX), 2);
        assert_eq!(entries.to_node(), node);
        let mut again = vec![0u8; 1024];
        again[4..6].copy_from_slice(&1024u16.to_le_bytes());
        node.encode_into(&mut again);
        DxNode::seal(&mut again, 42);
        assert_eq!(again, block);
    }

    #[test]
    fn hashes_out_of_order_are_corrupt_and_equal_hashes_are_not() {
        let loc = Location::Block(4);
        let with_hashes = |hashes: &[u32]| {
            let entries = std::iter::once(0)
                .chain(hashes.iter().copied())
                .zip(1..)
                .map(|(hash, block)| DxEntry { hash, block })
                .collect();
            DxNode::new_interior(1024, false, entries).encode_interior(1024)
        };
        // A run of one hash (collisions spread over leaves) is in order.
        assert!(DxNode::parse(&with_hashes(&[0x100, 0x100, 0x900]), false, loc).is_ok());
        for hashes in [&[0x900, 0x100][..], &[0x100, 0x900, 0x800, 0xa00]] {
            let block = with_hashes(hashes);
            let err = DxNode::parse(&block, false, loc).unwrap_err();
            assert!(err.to_string().contains("hashes out of order"), "{err}");
            let err = check_index_block(&block, false, MAX_LEVELS, loc).unwrap_err();
            assert!(err.to_string().contains("hashes out of order"), "{err}");
            // A view of bytes checked before does not walk them again.
            assert!(DxNode::entries_in(&block, false, HashOrder::CheckedBefore, loc).is_ok());
        }
    }

    /// A root block with its "." and "..", `dx_root_info` and `hashes` after the first entry.
    fn root_block(hashes: &[u32]) -> Vec<u8> {
        let mut block = vec![0u8; 1024];
        crate::dir_entry::encode_entry(&mut block, 2, 12, 2, b".");
        crate::dir_entry::encode_entry(&mut block[12..], 2, 1024 - 12, 2, b"..");
        let mut root = DxRoot::new(1024, false, 1, 1);
        root.node.entries.extend(
            hashes
                .iter()
                .zip(2..)
                .map(|(&hash, block)| DxEntry { hash, block }),
        );
        root.encode_into(&mut block);
        block
    }

    #[test]
    fn the_check_of_a_root_walks_the_root_and_a_root_is_never_read_as_a_node() {
        let loc = Location::Block(4);
        check_index_block(&root_block(&[0x100, 0x900]), false, MAX_LEVELS, loc).unwrap();
        let err =
            check_index_block(&root_block(&[0x900, 0x100]), false, MAX_LEVELS, loc).unwrap_err();
        assert!(err.to_string().contains("hashes out of order"), "{err}");
        // Block 0 laid out as an interior node is checked as one, so it must not then be
        // read as the root whose order nobody checked.
        let node = DxNode::new_interior(1024, false, vec![DxEntry { hash: 0, block: 1 }]);
        let as_node = node.encode_interior(1024);
        check_index_block(&as_node, false, MAX_LEVELS, loc).unwrap();
        let err = DxRoot::entries_in(&as_node, false, MAX_LEVELS, HashOrder::CheckedBefore, loc)
            .unwrap_err();
        assert!(err.to_string().contains("index"), "{err}");
    }

    #[test]
    fn the_child_followed_is_the_last_entry_not_above_the_hash() {
        let loc = Location::Block(4);
        // Runs of equal hashes (collisions spread over leaves) and gaps, at every count.
        for count in 1..=40u32 {
            let entries: Vec<DxEntry> = (0..count)
                .map(|i| DxEntry {
                    hash: if i == 0 { 0 } else { (i / 3) * 16 + 16 },
                    block: i + 1,
                })
                .collect();
            let block = DxNode::new_interior(1024, false, entries.clone()).encode_interior(1024);
            let view = DxNode::entries_in(&block, false, HashOrder::Check, loc).unwrap();
            assert_eq!(view.iter().collect::<Vec<_>>(), entries);
            for hash in (0..count * 6 + 40).chain([u32::MAX]) {
                let expected = entries.iter().rposition(|e| e.hash <= hash).unwrap();
                assert_eq!(view.child_for(hash), expected, "count {count} hash {hash}");
            }
        }
    }

    #[test]
    fn wrong_limit_is_corrupt() {
        let block = node_block(false);
        assert!(DxNode::parse(&block, true, Location::Block(4)).is_err());
    }

    #[test]
    fn sealed_interior_block_parses_and_verifies() {
        let loc = Location::Block(9);
        let node = DxNode::new_interior(
            1024,
            true,
            vec![
                DxEntry { hash: 0, block: 1 },
                DxEntry {
                    hash: 0x100,
                    block: 2,
                },
            ],
        );
        assert_eq!(node.limit, 126);
        let mut block = node.encode_interior(1024);
        DxNode::seal(&mut block, 42);
        let parsed = DxNode::parse(&block, true, loc).unwrap();
        assert_eq!(parsed, node);
        DxNode::verify(&block, 42, loc).unwrap();
        assert!(DxNode::verify(&block, 43, loc).is_err());
    }

    #[test]
    fn sealed_root_block_parses_and_verifies() {
        use crate::dir_entry::{encode_entry, file_type::DIRECTORY};
        let loc = Location::Block(9);
        let mut block = vec![0xAAu8; 4096];
        encode_entry(&mut block, 2, 12, DIRECTORY, b".");
        encode_entry(&mut block[12..], 2, 4096 - 12, DIRECTORY, b"..");
        let mut root = DxRoot::new(4096, true, 1, 1);
        root.node.entries.push(DxEntry {
            hash: 0x200,
            block: 2,
        });
        root.encode_into(&mut block);
        DxNode::seal(&mut block, 7);
        let parsed = DxRoot::parse(&block, true, MAX_LEVELS, loc).unwrap();
        assert_eq!(parsed, root);
        assert_eq!(parsed.node.limit, 507);
        DxNode::verify(&block, 7, loc).unwrap();
        // Without metadata_csum there is no tail: the limit takes its room.
        assert_eq!(DxRoot::new(4096, false, 1, 1).node.limit, 508);
    }
}

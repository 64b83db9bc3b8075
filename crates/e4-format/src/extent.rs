//! Extent tree nodes (`struct ext4_extent_header`, `ext4_extent_idx`, `ext4_extent`, and the
//! `ext4_extent_tail` checksum). The root lives in the inode's `i_block`; deeper nodes fill a
//! block each and end with a crc32c of everything before the tail.

use crate::checksum::crc32c_raw;
use crate::codec::{on_disk_struct, prefix, Le};
use crate::error::{verify_checksum, FormatError, Location, Result};
use crate::metadata_block::MetadataBlock;
use crate::problem::{Problem, Structure};

/// `eh_magic`.
pub const EXTENT_MAGIC: u16 = 0xF30A;
/// The kernel refuses trees deeper than this (`EXT4_MAX_EXTENT_DEPTH`).
pub const MAX_DEPTH: u16 = 5;
/// Size of the header and of each entry.
pub const ENTRY_SIZE: usize = 12;
/// `ee_len` above this marks an unwritten (preallocated) extent.
pub const MAX_INIT_LEN: u16 = 32768;

on_disk_struct! {
    /// `struct ext4_extent_header`.
    pub struct ExtentHeader(Le, 12) {
        /// `eh_magic`: 0xF30A.
        magic: u16 = 0x0,
        /// `eh_entries`: entries in use.
        entries: u16 = 0x2,
        /// `eh_max`: capacity of this node.
        max: u16 = 0x4,
        /// `eh_depth`: 0 for leaves.
        depth: u16 = 0x6,
        /// `eh_generation`.
        generation: u32 = 0x8,
    }
}

on_disk_struct! {
    /// `struct ext4_extent_idx`: points at the node covering blocks from `block` on.
    pub struct ExtentIndex(Le, 12) {
        /// `ei_block`: first logical block covered.
        block: u32 = 0x0,
        /// `ei_leaf_lo`.
        leaf_lo: u32 = 0x4,
        /// `ei_leaf_hi`.
        leaf_hi: u16 = 0x8,
        /// `ei_unused`.
        unused: u16 = 0xA,
    }
}

on_disk_struct! {
    /// `struct ext4_extent`: a run of logical blocks mapped to contiguous physical blocks.
    pub struct ExtentLeaf(Le, 12) {
        /// `ee_block`: first logical block.
        block: u32 = 0x0,
        /// `ee_len`: length; above 32768 the extent is unwritten.
        len: u16 = 0x4,
        /// `ee_start_hi`.
        start_hi: u16 = 0x6,
        /// `ee_start_lo`.
        start_lo: u32 = 0x8,
    }
}

impl ExtentIndex {
    /// Physical block of the child node.
    pub fn leaf(&self) -> u64 {
        u64::from(self.leaf_lo) | (u64::from(self.leaf_hi) << 32)
    }
}

/// A decoded leaf extent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Extent {
    /// First logical block.
    pub logical: u32,
    /// Number of blocks.
    pub len: u32,
    /// First physical block.
    pub physical: u64,
    /// Allocated but not written: reads as zeros.
    pub unwritten: bool,
}

impl ExtentLeaf {
    pub fn extent(&self) -> Extent {
        let unwritten = self.len > MAX_INIT_LEN;
        Extent {
            logical: self.block,
            len: u32::from(if unwritten {
                self.len - MAX_INIT_LEN
            } else {
                self.len
            }),
            physical: u64::from(self.start_lo) | (u64::from(self.start_hi) << 32),
            unwritten,
        }
    }
}

/// The entries of a node: indexes in interior nodes, extents in leaves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExtentEntries {
    Index(Vec<ExtentIndex>),
    Leaf(Vec<ExtentLeaf>),
}

/// One node of an extent tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExtentNode {
    pub header: ExtentHeader,
    pub entries: ExtentEntries,
}

const STRUCTURE: Structure = Structure::ExtentNode;

/// A node read in place: the header checked, entries decoded only when asked for. A lookup
/// binary-searches the entries where they lie, so finding one extent among a leaf's 340
/// costs nine entry reads, not a decoded copy of the whole node.
#[derive(Debug, Clone)]
pub struct ExtentNodeView<'a> {
    pub header: ExtentHeader,
    bytes: &'a [u8],
}

impl<'a> ExtentNodeView<'a> {
    /// Checks the header of the node in `bytes` (60 bytes for the root in `i_block`, a block
    /// otherwise): the magic, that the entries fit, and that depth is within the kernel's
    /// limit.
    pub fn new(bytes: &'a [u8], loc: Location) -> Result<Self> {
        let bad = |problem| FormatError::corrupt(STRUCTURE, loc, problem);
        let header = ExtentHeader::decode(prefix::<12>(bytes).ok_or_else(|| {
            bad(Problem::TooShort {
                len: bytes.len(),
                need: ENTRY_SIZE,
            })
        })?);
        if header.magic != EXTENT_MAGIC {
            return Err(bad(Problem::BadMagic {
                found: header.magic.into(),
                expected: EXTENT_MAGIC.into(),
            }));
        }
        let capacity = (bytes.len() - ENTRY_SIZE) / ENTRY_SIZE;
        if usize::from(header.max) > capacity {
            return Err(bad(Problem::MaxExceedsCapacity {
                max: header.max,
                capacity,
            }));
        }
        if header.entries > header.max {
            return Err(bad(Problem::EntriesExceedMax {
                entries: header.entries,
                max: header.max,
            }));
        }
        if header.depth > MAX_DEPTH {
            return Err(bad(Problem::DepthTooLarge {
                depth: header.depth,
                max: MAX_DEPTH,
            }));
        }
        Ok(ExtentNodeView { header, bytes })
    }

    /// Entries in use.
    pub fn len(&self) -> usize {
        usize::from(self.header.entries)
    }

    pub fn is_empty(&self) -> bool {
        self.header.entries == 0
    }

    pub fn is_leaf(&self) -> bool {
        self.header.depth == 0
    }

    fn record(&self, i: usize) -> &'a [u8; 12] {
        // OK to unwrap: callers index below `entries`, and entries <= max <= capacity was
        // checked in `new`.
        prefix::<12>(&self.bytes[ENTRY_SIZE * (i + 1)..]).unwrap()
    }

    /// Entry `i` of a leaf (`i` below [`Self::len`]).
    pub fn leaf(&self, i: usize) -> ExtentLeaf {
        ExtentLeaf::decode(self.record(i))
    }

    /// Entry `i` of an interior node (`i` below [`Self::len`]).
    pub fn index(&self, i: usize) -> ExtentIndex {
        ExtentIndex::decode(self.record(i))
    }

    /// The first logical block entry `i` covers (`ee_block` or `ei_block`: the first field of
    /// both kinds).
    pub fn first_block(&self, i: usize) -> u32 {
        u32::from_le_bytes(*prefix::<4>(self.record(i)).unwrap())
    }

    /// How many entries start at or before `logical`: the entry that may cover it is the one
    /// before this position. Entries are sorted; on a node that is not, the answer is some
    /// position where the order holds locally, as with any binary search.
    pub fn entries_starting_by(&self, logical: u64) -> usize {
        let (mut low, mut high) = (0, self.len());
        while low < high {
            let mid = low + (high - low) / 2;
            if u64::from(self.first_block(mid)) <= logical {
                low = mid + 1;
            } else {
                high = mid;
            }
        }
        low
    }
}

impl ExtentNode {
    /// Parses a node from `bytes` (60 bytes for the root in `i_block`, a block otherwise),
    /// with the checks of [`ExtentNodeView::new`].
    pub fn parse(bytes: &[u8], loc: Location) -> Result<Self> {
        let view = ExtentNodeView::new(bytes, loc)?;
        let entries = if view.is_leaf() {
            ExtentEntries::Leaf((0..view.len()).map(|i| view.leaf(i)).collect())
        } else {
            ExtentEntries::Index((0..view.len()).map(|i| view.index(i)).collect())
        };
        Ok(ExtentNode {
            header: view.header,
            entries,
        })
    }

    /// Writes the header and entries into `bytes`; other bytes are left as they are.
    pub fn encode_into(&self, bytes: &mut [u8]) {
        let mut chunk = [0u8; 12];
        self.header.encode(&mut chunk);
        bytes[..ENTRY_SIZE].copy_from_slice(&chunk);
        let mut put = |i: usize, chunk: &[u8; 12]| {
            bytes[ENTRY_SIZE * (i + 1)..ENTRY_SIZE * (i + 2)].copy_from_slice(chunk)
        };
        match &self.entries {
            ExtentEntries::Leaf(leaves) => leaves.iter().enumerate().for_each(|(i, e)| {
                e.encode(&mut chunk);
                put(i, &chunk);
            }),
            ExtentEntries::Index(indexes) => indexes.iter().enumerate().for_each(|(i, e)| {
                e.encode(&mut chunk);
                put(i, &chunk);
            }),
        }
    }
}

/// Offset of the `ext4_extent_tail` of a node block: after the header and all `eh_max`
/// entry slots (12 + 12·`eh_max`), whether the slots are used or not. `None` if the block is
/// shorter than a header.
fn tail_offset(block: &[u8]) -> Option<usize> {
    let header = prefix::<12>(block).map(ExtentHeader::decode)?;
    Some(ENTRY_SIZE * (1 + usize::from(header.max)))
}

/// A non-root extent node block: its checksum is crc32c seeded with the owning inode's seed
/// (see [`crate::checksum::inode_csum_seed`]) over the header and all `eh_max` entry slots.
/// The engine seals once per dirty node at write-back (DESIGN.md, concurrency rule 4), so the
/// tree code never computes checksums.
impl MetadataBlock for ExtentNode {
    /// The owning inode's checksum seed.
    type Seed = u32;

    fn verify(block: &[u8], inode_seed: u32, loc: Location) -> Result<()> {
        let bad = |problem| FormatError::corrupt(STRUCTURE, loc, problem);
        let magic = crate::codec::le16(block, 0);
        if magic != Some(EXTENT_MAGIC) {
            return Err(bad(match magic {
                Some(found) => Problem::BadMagic {
                    found: found.into(),
                    expected: EXTENT_MAGIC.into(),
                },
                None => Problem::TooShort {
                    len: block.len(),
                    need: ENTRY_SIZE,
                },
            }));
        }
        let tail = tail_offset(block).ok_or_else(|| {
            bad(Problem::TooShort {
                len: block.len(),
                need: ENTRY_SIZE,
            })
        })?;
        let stored = crate::codec::le32(block, tail).ok_or_else(|| bad(Problem::NoChecksumTail))?;
        verify_checksum(
            STRUCTURE,
            loc,
            stored,
            crc32c_raw(inode_seed, &block[..tail]),
        )
    }

    fn seal(block: &mut [u8], inode_seed: u32) {
        let Some(tail) = tail_offset(block).filter(|t| t + 4 <= block.len()) else {
            return;
        };
        let sum = crc32c_raw(inode_seed, &block[..tail]);
        block[tail..tail + 4].copy_from_slice(&sum.to_le_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leaf_round_trip_and_checksum() {
        let node = ExtentNode {
            header: ExtentHeader {
                magic: EXTENT_MAGIC,
                entries: 2,
                max: 340,
                depth: 0,
                generation: 0,
            },
            entries: ExtentEntries::Leaf(vec![
                ExtentLeaf {
                    block: 0,
                    len: 8,
                    start_hi: 1,
                    start_lo: 100,
                },
                ExtentLeaf {
                    block: 8,
                    len: MAX_INIT_LEN + 4,
                    start_hi: 0,
                    start_lo: 500,
                },
            ]),
        };
        let mut block = vec![0u8; 4096];
        node.encode_into(&mut block);
        ExtentNode::seal(&mut block, 77);
        let loc = Location::Block(9);
        let back = ExtentNode::parse(&block, loc).unwrap();
        assert_eq!(back, node);
        ExtentNode::verify(&block, 77, loc).unwrap();
        let ExtentEntries::Leaf(leaves) = &back.entries else {
            panic!("leaf expected")
        };
        assert_eq!(leaves[0].extent().physical, (1 << 32) | 100);
        assert!(leaves[1].extent().unwritten);
        assert_eq!(leaves[1].extent().len, 4);
        block[20] ^= 1;
        assert!(ExtentNode::verify(&block, 77, loc).is_err());
    }

    #[test]
    fn a_view_finds_the_entry_covering_a_block_without_decoding_the_node() {
        let leaves: Vec<ExtentLeaf> = [0u32, 10, 20, 4000]
            .iter()
            .map(|&block| ExtentLeaf {
                block,
                len: 5,
                start_hi: 0,
                start_lo: 1000 + block,
            })
            .collect();
        let node = ExtentNode {
            header: ExtentHeader {
                magic: EXTENT_MAGIC,
                entries: leaves.len() as u16,
                max: 340,
                depth: 0,
                generation: 0,
            },
            entries: ExtentEntries::Leaf(leaves.clone()),
        };
        let mut block = vec![0u8; 4096];
        node.encode_into(&mut block);
        let view = ExtentNodeView::new(&block, Location::Block(1)).unwrap();
        assert!(view.is_leaf());
        assert_eq!(view.len(), 4);
        // (block, entries starting at or before it)
        for (logical, expected) in [
            (0, 1),
            (9, 1),
            (10, 2),
            (19, 2),
            (20, 3),
            (3999, 3),
            (4000, 4),
            (u64::MAX, 4),
        ] {
            assert_eq!(
                view.entries_starting_by(logical),
                expected,
                "block {logical}"
            );
        }
        assert_eq!(view.leaf(2), leaves[2]);
        assert_eq!(view.first_block(3), 4000);
        let mut empty = block.clone();
        empty[2..4].copy_from_slice(&0u16.to_le_bytes());
        let view = ExtentNodeView::new(&empty, Location::Block(1)).unwrap();
        assert_eq!(view.entries_starting_by(50), 0);
        // The view checks what parse checks.
        let mut bad = block;
        bad[4..6].copy_from_slice(&400u16.to_le_bytes());
        assert!(ExtentNodeView::new(&bad, Location::Block(1)).is_err());
    }

    #[test]
    fn sealed_node_verifies_and_tail_sits_after_all_slots() {
        let node = ExtentNode {
            header: ExtentHeader {
                magic: EXTENT_MAGIC,
                entries: 1,
                max: 84,
                depth: 0,
                generation: 0,
            },
            entries: ExtentEntries::Leaf(vec![ExtentLeaf {
                block: 3,
                len: 2,
                start_hi: 0,
                start_lo: 900,
            }]),
        };
        let mut block = vec![0u8; 1024];
        node.encode_into(&mut block);
        ExtentNode::seal(&mut block, 0x1234_5678);
        let loc = Location::Block(5);
        ExtentNode::verify(&block, 0x1234_5678, loc).unwrap();
        // The tail follows all 84 slots (12 + 12 * 84 = 1020), not just the used one.
        let expected = crc32c_raw(0x1234_5678, &block[..1020]);
        assert_eq!(block[1020..1024], expected.to_le_bytes());
        assert!(ExtentNode::verify(&block, 0x1234_5679, loc).is_err());
    }

    #[test]
    fn seal_leaves_a_block_without_room_for_the_tail_alone() {
        let mut block = vec![0u8; 64];
        block[..2].copy_from_slice(&EXTENT_MAGIC.to_le_bytes());
        block[4..6].copy_from_slice(&5u16.to_le_bytes());
        let before = block.clone();
        ExtentNode::seal(&mut block, 7);
        assert_eq!(block, before);
        ExtentNode::seal(&mut block[..3], 7);
    }

    #[test]
    fn rejects_overfull_root() {
        let mut root = [0u8; 60];
        root[..2].copy_from_slice(&EXTENT_MAGIC.to_le_bytes());
        root[2..4].copy_from_slice(&5u16.to_le_bytes());
        root[4..6].copy_from_slice(&5u16.to_le_bytes());
        assert!(ExtentNode::parse(&root, Location::Inode(12)).is_err());
    }
}

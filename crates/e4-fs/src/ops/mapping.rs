//! Mapping a file's logical blocks to physical blocks, through an extent tree (ext4) or an
//! indirect block map (ext2/ext3). A lookup returns a whole run, so a reader issues one
//! device read per contiguous extent, not one per block.

use crate::buffer::cache::BufferRole;
use crate::io::meta_io::Owner;
use e4_format::block_map::{block_map_path, indirect_pointer};
use e4_format::checksum::inode_csum_seed;
use e4_format::extent::{ExtentNode, ExtentNodeView};
use e4_format::inode::{flags, Inode};
use e4_format::{FormatError, Location, MetadataBlock, Problem, Structure};

use crate::error::{Error, Result};
use crate::filesystem::Filesystem;
use crate::io::meta_io::BlockKind;

/// What a run of logical blocks starting at the requested one maps to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mapping {
    /// Not allocated: reads as zeros. `len` blocks until the next mapped block (`u64::MAX`
    /// when nothing follows).
    Hole { len: u64 },
    /// `len` blocks at `physical`; unwritten blocks read as zeros.
    Data {
        physical: u64,
        len: u64,
        unwritten: bool,
    },
}

impl Filesystem {
    /// Maps `logical` of `inode`; the run returned is at most `max_len` blocks. Inline-data
    /// inodes have no blocks to map.
    pub fn map_block(&self, inode: &Inode, logical: u64, max_len: u64) -> Result<Mapping> {
        if inode.has_flag(flags::INLINE_DATA) {
            return Err(Error::WrongType {
                path: format!("inode {}", inode.ino),
                reason: "its data is inline and has no block mapping",
            });
        }
        let mapping = if inode.has_flag(flags::EXTENTS) {
            self.map_extent(inode, logical)?
        } else {
            self.map_indirect(inode, logical, max_len)?
        };
        Ok(match mapping {
            Mapping::Hole { len } => Mapping::Hole {
                len: len.clamp(1, max_len.max(1)),
            },
            Mapping::Data {
                physical,
                len,
                unwritten,
            } => Mapping::Data {
                physical,
                len: len.clamp(1, max_len.max(1)),
                unwritten,
            },
        })
    }

    /// Walks the tree down to the leaf that may cover `logical`, reading each node in place
    /// (a binary search over its entries; nothing decoded but the entries it probes).
    fn map_extent(&self, inode: &Inode, logical: u64) -> Result<Mapping> {
        let ino = inode.ino;
        // Where the next mapped region starts, from index entries seen on the way down.
        let mut next_start = u64::MAX;
        let mut loc = Location::Inode(ino);
        // The node below the root being walked, with the depth its parent expects of it.
        let mut below: Option<(std::sync::Arc<crate::buffer::cache::Buffer>, u16)> = None;
        loop {
            let guard = below.as_ref().map(|(block, _)| block.bytes());
            let bytes: &[u8] = match &guard {
                Some(bytes) => bytes,
                None => &inode.record.block,
            };
            let node = ExtentNodeView::new(bytes, loc)?;
            if let Some((_, expected)) = below {
                if node.header.depth != expected {
                    return Err(FormatError::corrupt(
                        Structure::ExtentNode,
                        loc,
                        Problem::ChildDepthMismatch {
                            depth: node.header.depth,
                            parent_depth: expected + 1,
                        },
                    )
                    .into());
                }
            }
            let pos = node.entries_starting_by(logical);
            if pos < node.len() {
                next_start = next_start.min(u64::from(node.first_block(pos)));
            }
            if node.is_leaf() {
                if pos > 0 {
                    let extent = node.leaf(pos - 1).extent();
                    let offset = logical - u64::from(extent.logical);
                    if offset < u64::from(extent.len) {
                        self.check_extent_bounds(
                            extent.physical,
                            u64::from(extent.len),
                            Location::Inode(ino),
                        )?;
                        return Ok(Mapping::Data {
                            physical: extent.physical + offset,
                            len: u64::from(extent.len) - offset,
                            unwritten: extent.unwritten,
                        });
                    }
                }
                return Ok(hole_until(logical, next_start));
            }
            if pos == 0 {
                return Ok(hole_until(logical, next_start));
            }
            let child_nr = node.index(pos - 1).leaf();
            let child_depth = node.header.depth - 1;
            drop(guard);
            loc = Location::InodeBlock {
                inode: ino,
                block: child_nr,
            };
            let block = self.store.read(child_nr)?;
            if let Some(fs_seed) = self.store.csum_seed() {
                // The seed only when the block is verified: once per buffer.
                block.verify_as(
                    BufferRole::of(BlockKind::ExtentNode, Owner::of(inode)),
                    |b| {
                        let seed = inode_csum_seed(fs_seed, ino, inode.record.generation);
                        ExtentNode::verify(b, seed, loc)
                    },
                )?;
            }
            below = Some((block, child_depth));
        }
    }

    fn map_indirect(&self, inode: &Inode, logical: u64, max_len: u64) -> Result<Mapping> {
        let Some(path) = block_map_path(logical, self.block_size()) else {
            return Ok(Mapping::Hole { len: u64::MAX });
        };
        // Walk down to the array holding the final pointer: i_block, or an indirect block.
        let root = &inode.record.block;
        let mut pointer = word(root, path.slot);
        let mut array: Option<std::sync::Arc<crate::buffer::cache::Buffer>> = None;
        for level in 0..path.depth {
            if pointer == 0 {
                return Ok(Mapping::Hole { len: 1 });
            }
            self.check_extent_bounds(u64::from(pointer), 1, Location::Inode(inode.ino))?;
            let block = self.store.read(u64::from(pointer))?;
            // OK to unwrap: the index is below block_size / 4.
            pointer = indirect_pointer(&block.bytes(), path.indexes[level]).unwrap();
            array = Some(block);
        }
        // Extend the run over following pointers in the same array.
        let guard = array.as_ref().map(|block| block.bytes());
        let (words, at): (&[u8], usize) = match &guard {
            Some(bytes) => (bytes, path.indexes[path.depth - 1] as usize),
            None => (&root[..4 * 12], path.slot),
        };
        let slots = words.len() / 4;
        let limit = max_len.min((slots - at) as u64) as usize;
        let run = (1..limit)
            .take_while(|&k| {
                let next = word(words, at + k);
                if pointer == 0 {
                    next == 0
                } else {
                    next != 0 && u64::from(next) == u64::from(pointer) + k as u64
                }
            })
            .count()
            + 1;
        if pointer == 0 {
            return Ok(Mapping::Hole { len: run as u64 });
        }
        self.check_extent_bounds(u64::from(pointer), run as u64, Location::Inode(inode.ino))?;
        Ok(Mapping::Data {
            physical: u64::from(pointer),
            len: run as u64,
            unwritten: false,
        })
    }
}

fn hole_until(logical: u64, next_start: u64) -> Mapping {
    Mapping::Hole {
        len: next_start.saturating_sub(logical).max(1),
    }
}

fn word(bytes: &[u8], index: usize) -> u32 {
    // OK to unwrap: callers index within the array.
    e4_format::codec::le32(bytes, 4 * index).unwrap()
}

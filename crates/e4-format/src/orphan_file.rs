//! Orphan file blocks (the orphan_file feature): each block of the orphan file is an array of
//! inode numbers (0 = free slot) followed by `struct ext4_orphan_block_tail`
//! (`ob_magic`, `ob_checksum`).

use crate::checksum::crc32c_raw;
use crate::codec::le32;
use crate::error::{verify_checksum, FormatError, Location, Result};
use crate::metadata_block::{BlockSeed, MetadataBlock};
use crate::problem::{Problem, Structure};

/// `ob_magic`.
pub const ORPHAN_BLOCK_MAGIC: u32 = 0x0B10_CA04;
/// Size of the tail.
const TAIL_SIZE: usize = 8;

/// A block of the orphan file. `ob_checksum` is crc32c, seeded with the orphan file inode's
/// seed, over the block number and the slot array.
pub struct OrphanBlock;

impl OrphanBlock {
    /// Decodes an orphan file block into the inode numbers in use, checking the tail's magic
    /// but not its checksum.
    pub fn decode(block: &[u8], loc: Location) -> Result<Vec<u32>> {
        let slots_end = Self::check_tail(block, loc)?;
        Ok(block[..slots_end]
            .chunks_exact(4)
            .map(|w| u32::from_le_bytes([w[0], w[1], w[2], w[3]]))
            .filter(|&ino| ino != 0)
            .collect())
    }

    /// Where the tail starts, once its magic is checked.
    fn check_tail(block: &[u8], loc: Location) -> Result<usize> {
        let bad = |problem| FormatError::corrupt(Structure::OrphanBlock, loc, problem);
        let slots_end = block.len().checked_sub(TAIL_SIZE).ok_or_else(|| {
            bad(Problem::TooShort {
                len: block.len(),
                need: TAIL_SIZE,
            })
        })?;
        // OK to unwrap: the tail is inside the block.
        let magic = le32(block, slots_end).unwrap();
        if magic != ORPHAN_BLOCK_MAGIC {
            return Err(bad(Problem::BadMagic {
                found: magic,
                expected: ORPHAN_BLOCK_MAGIC,
            }));
        }
        Ok(slots_end)
    }
}

impl MetadataBlock for OrphanBlock {
    /// The orphan file inode's seed and the block's number.
    type Seed = BlockSeed;

    fn verify(block: &[u8], seed: BlockSeed, loc: Location) -> Result<()> {
        let slots_end = Self::check_tail(block, loc)?;
        // OK to unwrap: the tail is inside the block.
        let stored = le32(block, slots_end + 4).unwrap();
        verify_checksum(
            Structure::OrphanBlock,
            loc,
            stored,
            orphan_block_checksum(block, seed),
        )
    }

    fn seal(block: &mut [u8], seed: BlockSeed) {
        let Some(slots_end) = block.len().checked_sub(TAIL_SIZE) else {
            return;
        };
        let sum = orphan_block_checksum(block, seed);
        block[slots_end + 4..].copy_from_slice(&sum.to_le_bytes());
    }
}

/// The checksum stored in `ob_checksum`.
fn orphan_block_checksum(block: &[u8], BlockSeed { seed, block_nr }: BlockSeed) -> u32 {
    let sum = crc32c_raw(seed, &block_nr.to_le_bytes());
    crc32c_raw(sum, &block[..block.len() - TAIL_SIZE])
}

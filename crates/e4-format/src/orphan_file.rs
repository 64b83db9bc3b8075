//! Orphan file blocks (the orphan_file feature): each block of the orphan file is an array of
//! inode numbers (0 = free slot) followed by `struct ext4_orphan_block_tail`
//! (`ob_magic`, `ob_checksum`).

use crate::checksum::crc32c_raw;
use crate::codec::le32;
use crate::error::{verify_checksum, FormatError, Location, Result};
use crate::problem::{Problem, Structure};

/// `ob_magic`.
pub const ORPHAN_BLOCK_MAGIC: u32 = 0x0B10_CA04;
/// Size of the tail.
const TAIL_SIZE: usize = 8;

/// Parses an orphan file block, returning the inode numbers in use. `seed` is the orphan
/// file inode's checksum seed (metadata_csum); the checksum covers the block number and the
/// slot array.
pub fn parse_orphan_block(
    block: &[u8],
    block_nr: u64,
    seed: Option<u32>,
    loc: Location,
) -> Result<Vec<u32>> {
    let slots_end = block.len().checked_sub(TAIL_SIZE).ok_or_else(|| {
        FormatError::corrupt(
            Structure::OrphanBlock,
            loc,
            Problem::TooShort {
                len: block.len(),
                need: TAIL_SIZE,
            },
        )
    })?;
    // OK to unwrap: the tail is inside the block.
    let magic = le32(block, slots_end).unwrap();
    if magic != ORPHAN_BLOCK_MAGIC {
        return Err(FormatError::corrupt(
            Structure::OrphanBlock,
            loc,
            Problem::BadMagic {
                found: magic,
                expected: ORPHAN_BLOCK_MAGIC,
            },
        ));
    }
    if let Some(seed) = seed {
        // OK to unwrap: the tail is inside the block.
        let stored = le32(block, slots_end + 4).unwrap();
        verify_checksum(
            Structure::OrphanBlock,
            loc,
            stored,
            orphan_block_checksum(block, block_nr, seed),
        )?;
    }
    Ok(block[..slots_end]
        .chunks_exact(4)
        .map(|w| u32::from_le_bytes([w[0], w[1], w[2], w[3]]))
        .filter(|&ino| ino != 0)
        .collect())
}

/// The checksum stored in `ob_checksum`.
pub fn orphan_block_checksum(block: &[u8], block_nr: u64, seed: u32) -> u32 {
    let sum = crc32c_raw(seed, &block_nr.to_le_bytes());
    crc32c_raw(sum, &block[..block.len() - TAIL_SIZE])
}

//! `struct jbd2_journal_block_tail`: with checksums v2/v3, descriptor and revoke blocks end
//! in a big-endian crc32c, seeded with the journal's seed, over the whole block with the
//! tail zeroed (`jbd2_descriptor_block_csum_verify`). One tail for both kinds, so their
//! verifiers cannot drift apart.

use crate::checksum::crc32c_raw;
use crate::error::{verify_checksum, FormatError, Location, Result};
use crate::problem::{Problem, Structure};

use super::HEADER_SIZE;

/// Bytes the tail takes at the end of the block.
pub(super) const TAIL_SIZE: usize = 4;

/// Where the tail starts, if the block holds a header and a tail.
fn tail_offset(block: &[u8]) -> Option<usize> {
    (block.len() >= HEADER_SIZE + TAIL_SIZE).then(|| block.len() - TAIL_SIZE)
}

/// The checksum the tail at `tail` should hold.
fn tail_checksum(block: &[u8], tail: usize, seed: u32) -> u32 {
    crc32c_raw(crc32c_raw(seed, &block[..tail]), &[0; TAIL_SIZE])
}

/// Checks the tail of `block`, a `structure` block at `loc`.
pub(super) fn verify_tail(
    block: &[u8],
    seed: u32,
    structure: Structure,
    loc: Location,
) -> Result<()> {
    let tail = tail_offset(block).ok_or_else(|| {
        FormatError::corrupt(
            structure,
            loc,
            Problem::TooShort {
                len: block.len(),
                need: HEADER_SIZE + TAIL_SIZE,
            },
        )
    })?;
    let mut stored = [0u8; TAIL_SIZE];
    stored.copy_from_slice(&block[tail..]);
    verify_checksum(
        structure,
        loc,
        u32::from_be_bytes(stored),
        tail_checksum(block, tail, seed),
    )
}

/// Writes the tail of `block`; a block too short to hold one is left as it is.
pub(super) fn seal_tail(block: &mut [u8], seed: u32) {
    if let Some(tail) = tail_offset(block) {
        let sum = tail_checksum(block, tail, seed);
        block[tail..].copy_from_slice(&sum.to_be_bytes());
    }
}

//! Revoke blocks (`jbd2_journal_revoke_header_t`): filesystem blocks whose earlier logged
//! copies must not be replayed.

use crate::codec::prefix;
use crate::error::{FormatError, Location, Result};
use crate::metadata_block::MetadataBlock;
use crate::problem::{Problem, Structure};

use super::block_tail::{seal_tail, verify_tail, TAIL_SIZE};
use super::{JournalFeatures, JournalHeader, JOURNAL_MAGIC};

/// Header plus `r_count`.
const RECORDS_OFFSET: usize = 16;
/// `h_blocktype` of a revoke block.
const REVOKE_BLOCK: u32 = 5;

/// A revoke block: a header, `r_count` (the bytes used, header included) and the revoked
/// block numbers, 4 or 8 bytes each (64bit).
pub struct RevokeBlock;

impl RevokeBlock {
    /// Decodes the revoked block numbers, whatever the tail's checksum says.
    pub fn decode(block: &[u8], f: &JournalFeatures, loc: Location) -> Result<Vec<u64>> {
        let bad = |problem| FormatError::corrupt(Structure::JournalRevoke, loc, problem);
        if block.len() < RECORDS_OFFSET + TAIL_SIZE {
            return Err(bad(Problem::TooShort {
                len: block.len(),
                need: RECORDS_OFFSET + TAIL_SIZE,
            }));
        }
        let limit = if f.has_block_checksums() {
            block.len() - TAIL_SIZE
        } else {
            block.len()
        };
        // OK to unwrap: the length was checked above.
        let count = u32::from_be_bytes(*prefix::<4>(&block[12..]).unwrap()) as usize;
        // jbd2 refuses only a count past the records' room (`scan_revoke_records`); one
        // short of the header holds no record.
        if count > limit {
            return Err(bad(Problem::FieldOutOfRange {
                field: "r_count",
                value: count as u64,
            }));
        }
        let size = record_size(f);
        Ok(block[RECORDS_OFFSET..count.max(RECORDS_OFFSET)]
            .chunks_exact(size)
            .map(|r| r.iter().fold(0u64, |acc, &b| (acc << 8) | u64::from(b)))
            .collect())
    }

    /// How many records one revoke block of `block_size` bytes holds.
    pub fn capacity(f: &JournalFeatures, block_size: usize) -> usize {
        let tail = if f.has_block_checksums() {
            TAIL_SIZE
        } else {
            0
        };
        block_size.saturating_sub(RECORDS_OFFSET + tail) / record_size(f)
    }

    /// Encodes a revoke block of transaction `sequence` revoking `blocks` (at most
    /// [`Self::capacity`]), sealed with the tail under checksums v2/v3 (`seed`).
    pub fn encode(
        blocks: &[u64],
        f: &JournalFeatures,
        block_size: usize,
        sequence: u32,
        seed: u32,
    ) -> Vec<u8> {
        debug_assert!(blocks.len() <= Self::capacity(f, block_size));
        let mut block = vec![0u8; block_size];
        let header = JournalHeader {
            magic: JOURNAL_MAGIC,
            blocktype: REVOKE_BLOCK,
            sequence,
        };
        // OK to unwrap: a block holds its header.
        header.encode((&mut block[..12]).try_into().unwrap());
        let size = record_size(f);
        let mut at = RECORDS_OFFSET;
        for &nr in blocks {
            let bytes = nr.to_be_bytes();
            block[at..at + size].copy_from_slice(&bytes[8 - size..]);
            at += size;
        }
        // OK to cast: at most a block's size.
        block[12..16].copy_from_slice(&(at as u32).to_be_bytes());
        if f.has_block_checksums() {
            seal_tail(&mut block, seed);
        }
        block
    }
}

/// Bytes of one record: 8 with 64-bit block numbers, else 4.
fn record_size(f: &JournalFeatures) -> usize {
    if f.bit64 {
        8
    } else {
        4
    }
}

/// Checksums v2/v3: the block tail.
impl MetadataBlock for RevokeBlock {
    /// The journal's seed ([`super::JournalSuperblock::csum_seed`]).
    type Seed = u32;

    fn verify(block: &[u8], seed: u32, loc: Location) -> Result<()> {
        verify_tail(block, seed, Structure::JournalRevoke, loc)
    }

    fn seal(block: &mut [u8], seed: u32) {
        seal_tail(block, seed)
    }
}

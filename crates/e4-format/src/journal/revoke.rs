//! Revoke blocks (`jbd2_journal_revoke_header_t`): filesystem blocks whose earlier logged
//! copies must not be replayed.

use crate::codec::prefix;
use crate::error::{FormatError, Location, Result};
use crate::metadata_block::MetadataBlock;
use crate::problem::{Problem, Structure};

use super::block_tail::{seal_tail, verify_tail, TAIL_SIZE};
use super::JournalFeatures;

/// Header plus `r_count`.
const RECORDS_OFFSET: usize = 16;

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
        if count < RECORDS_OFFSET || count > limit {
            return Err(bad(Problem::FieldOutOfRange {
                field: "r_count",
                value: count as u64,
            }));
        }
        let size = if f.bit64 { 8 } else { 4 };
        Ok(block[RECORDS_OFFSET..count]
            .chunks_exact(size)
            .map(|r| r.iter().fold(0u64, |acc, &b| (acc << 8) | u64::from(b)))
            .collect())
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

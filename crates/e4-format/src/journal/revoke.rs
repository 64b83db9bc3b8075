//! Revoke blocks (`jbd2_journal_revoke_header_t`): filesystem blocks whose earlier logged
//! copies must not be replayed.

use crate::checksum::crc32c_raw;
use crate::codec::prefix;
use crate::error::{verify_checksum, FormatError, Location, Result};
use crate::problem::{Problem, Structure};

use super::JournalFeatures;

/// Header plus `r_count`.
const RECORDS_OFFSET: usize = 16;

/// Parses the revoked block numbers. With checksums, verifies the block's tail.
pub fn parse_revoke_block(
    block: &[u8],
    f: &JournalFeatures,
    seed: u32,
    loc: Location,
) -> Result<Vec<u64>> {
    let bad = |problem| FormatError::corrupt(Structure::JournalRevoke, loc, problem);
    if block.len() < RECORDS_OFFSET + 4 {
        return Err(bad(Problem::TooShort {
            len: block.len(),
            need: RECORDS_OFFSET + 4,
        }));
    }
    let word = |at: usize| prefix::<4>(&block[at..]).map(|w| u32::from_be_bytes(*w));
    let csum = f.csum_v2 || f.csum_v3;
    let limit = if csum { block.len() - 4 } else { block.len() };
    if csum {
        let sum = crc32c_raw(crc32c_raw(seed, &block[..limit]), &[0; 4]);
        // OK to unwrap: limit + 4 is the block's length.
        verify_checksum(Structure::JournalRevoke, loc, word(limit).unwrap(), sum)?;
    }
    // OK to unwrap: the length was checked above.
    let count = word(12).unwrap() as usize;
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

//! Descriptor blocks: a list of tags, each naming the filesystem block that the next log
//! block is a copy of (`journal_block_tag_t`, or `journal_block_tag3_t` with csum v3).

use crate::checksum::crc32c_raw;
use crate::codec::prefix;
use crate::error::{FormatError, Location, Result};
use crate::metadata_block::MetadataBlock;
use crate::problem::{Problem, Structure};

use super::block_tail::{seal_tail, verify_tail, TAIL_SIZE};
use super::{JournalFeatures, HEADER_SIZE};

/// Tag flags (`JBD2_FLAG_*`).
const FLAG_ESCAPE: u32 = 0x1;
const FLAG_SAME_UUID: u32 = 0x2;
const FLAG_LAST_TAG: u32 = 0x8;
const UUID_SIZE: usize = 16;

/// One tag of a descriptor block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JournalTag {
    /// The filesystem block the logged copy belongs to.
    pub block: u64,
    /// The logged copy had the journal magic in its first word, replaced by zero.
    pub escaped: bool,
    /// Checksum of the logged data (16 bits with csum v2).
    pub checksum: u32,
}

fn tag_size(f: &JournalFeatures) -> usize {
    if f.csum_v3 {
        16
    } else {
        8 + if f.csum_v2 { 2 } else { 0 } + if f.bit64 { 4 } else { 0 }
    }
}

fn be32(b: &[u8], at: usize) -> u32 {
    // OK to unwrap: callers check that `at + 4` is inside the block.
    u32::from_be_bytes(*prefix::<4>(&b[at..]).unwrap())
}

/// A descriptor block: a header, then tags until one has `LAST_TAG`, then (checksums
/// v2/v3) the block tail.
pub struct DescriptorBlock;

impl DescriptorBlock {
    /// Decodes the tags of a descriptor block, whatever the tail's checksum says.
    pub fn decode(block: &[u8], f: &JournalFeatures, loc: Location) -> Result<Vec<JournalTag>> {
        if block.len() < HEADER_SIZE + TAIL_SIZE {
            return Err(FormatError::corrupt(
                Structure::JournalDescriptor,
                loc,
                Problem::TooShort {
                    len: block.len(),
                    need: HEADER_SIZE + TAIL_SIZE,
                },
            ));
        }
        let end = if f.has_block_checksums() {
            block.len() - TAIL_SIZE
        } else {
            block.len()
        };
        let size = tag_size(f);
        let mut tags = Vec::new();
        let mut at = HEADER_SIZE;
        loop {
            if at + size > end {
                return Err(FormatError::corrupt(
                    Structure::JournalDescriptor,
                    loc,
                    Problem::TagsPastEnd,
                ));
            }
            let (low, flags, high, checksum) = if f.csum_v3 {
                (
                    be32(block, at),
                    be32(block, at + 4),
                    be32(block, at + 8),
                    be32(block, at + 12),
                )
            } else {
                let word = be32(block, at + 4);
                let high = if f.bit64 { be32(block, at + 8) } else { 0 };
                (be32(block, at), word & 0xFFFF, high, word >> 16)
            };
            let block_nr = u64::from(low) | if f.bit64 { u64::from(high) << 32 } else { 0 };
            tags.push(JournalTag {
                block: block_nr,
                escaped: flags & FLAG_ESCAPE != 0,
                checksum,
            });
            at += size;
            if flags & FLAG_SAME_UUID == 0 {
                at += UUID_SIZE;
            }
            if flags & FLAG_LAST_TAG != 0 {
                break;
            }
        }
        Ok(tags)
    }
}

/// Checksums v2/v3: the block tail. The tags' own checksums cover the logged blocks, not
/// this one ([`logged_block_checksum`]).
impl MetadataBlock for DescriptorBlock {
    /// The journal's seed ([`super::JournalSuperblock::csum_seed`]).
    type Seed = u32;

    fn verify(block: &[u8], seed: u32, loc: Location) -> Result<()> {
        verify_tail(block, seed, Structure::JournalDescriptor, loc)
    }

    fn seal(block: &mut [u8], seed: u32) {
        seal_tail(block, seed)
    }
}

/// The checksum a tag carries for its logged block (csum v2 keeps the low 16 bits): over
/// the transaction's sequence number, big-endian, then the block as logged.
pub fn logged_block_checksum(seed: u32, sequence: u32, data: &[u8]) -> u32 {
    crc32c_raw(crc32c_raw(seed, &sequence.to_be_bytes()), data)
}

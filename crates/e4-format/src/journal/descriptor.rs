//! Descriptor blocks: a list of tags, each naming the filesystem block that the next log
//! block is a copy of (`journal_block_tag_t`, or `journal_block_tag3_t` with csum v3).

use crate::checksum::crc32c_raw;
use crate::codec::prefix;
use crate::error::{FormatError, Location, Result};
use crate::metadata_block::MetadataBlock;
use crate::problem::{Problem, Structure};

use super::block_tail::{seal_tail, verify_tail, TAIL_SIZE};
use super::{JournalFeatures, JournalHeader, HEADER_SIZE};

/// Tag flags (`JBD2_FLAG_*`).
const FLAG_ESCAPE: u32 = 0x1;
const FLAG_SAME_UUID: u32 = 0x2;
const FLAG_LAST_TAG: u32 = 0x8;
const UUID_SIZE: usize = 16;
/// `h_blocktype` of a descriptor block.
const DESCRIPTOR_BLOCK: u32 = 1;

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

/// Bytes of one tag in this journal's format (`journal_tag_bytes`).
pub fn tag_size(f: &JournalFeatures) -> usize {
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
    /// Decodes the tags of a descriptor block, whatever the tail's checksum says, as jbd2's
    /// recovery reads them (`count_tags`, `do_one_pass`): tag after tag until one carries
    /// `LAST_TAG` or the next would not fit before the tail. A block too short for a
    /// header and a tail is an error; a list that runs out of room simply ends there, as
    /// the kernel's does (the transaction's commit checksum is what guards the list).
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
        let end = tags_end(block.len(), f);
        let size = tag_size(f);
        let mut tags = Vec::new();
        let mut at = HEADER_SIZE;
        while at + size <= end {
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

    /// How many tags one descriptor block of `block_size` bytes holds as jbd2 writes them:
    /// the first with the journal's UUID after it, the rest `SAME_UUID`, and a tag added only
    /// while room for one more tag, a UUID and the tail remains (`jbd2_journal_commit_transaction`).
    pub fn capacity(f: &JournalFeatures, block_size: usize) -> usize {
        let size = tag_size(f);
        let tail = if f.has_block_checksums() {
            TAIL_SIZE
        } else {
            0
        };
        let mut left = block_size.saturating_sub(HEADER_SIZE);
        let mut tags = 0;
        while left >= size + UUID_SIZE + tail {
            left -= size + if tags == 0 { UUID_SIZE } else { 0 };
            tags += 1;
        }
        tags
    }

    /// Encodes a descriptor block of transaction `sequence` listing `tags` (at most
    /// [`Self::capacity`]), the UUID after the first, `LAST_TAG` on the last; sealed with
    /// the tail when the journal has checksums v2/v3 (`seed`).
    pub fn encode(
        tags: &[JournalTag],
        f: &JournalFeatures,
        block_size: usize,
        sequence: u32,
        uuid: &[u8; 16],
        seed: u32,
    ) -> Vec<u8> {
        debug_assert!(!tags.is_empty() && tags.len() <= Self::capacity(f, block_size));
        let mut block = vec![0u8; block_size];
        let header = JournalHeader {
            magic: super::JOURNAL_MAGIC,
            blocktype: DESCRIPTOR_BLOCK,
            sequence,
        };
        // OK to unwrap: a block holds its header.
        header.encode(prefix_mut(&mut block));
        let size = tag_size(f);
        let mut at = HEADER_SIZE;
        for (i, tag) in tags.iter().enumerate() {
            let mut flags = 0;
            if tag.escaped {
                flags |= FLAG_ESCAPE;
            }
            if i > 0 {
                flags |= FLAG_SAME_UUID;
            }
            if i + 1 == tags.len() {
                flags |= FLAG_LAST_TAG;
            }
            // OK to cast: the low and high halves of a block number.
            let (low, high) = (tag.block as u32, (tag.block >> 32) as u32);
            let put = |block: &mut [u8], at: usize, v: u32| {
                block[at..at + 4].copy_from_slice(&v.to_be_bytes());
            };
            put(&mut block, at, low);
            if f.csum_v3 {
                put(&mut block, at + 4, flags);
                put(&mut block, at + 8, high);
                put(&mut block, at + 12, tag.checksum);
            } else {
                // `t_checksum` (the low 16 bits, v2 only) then `t_flags`.
                let checksum = if f.csum_v2 { tag.checksum & 0xFFFF } else { 0 };
                put(&mut block, at + 4, (checksum << 16) | flags);
                if f.bit64 {
                    put(&mut block, at + 8, high);
                }
            }
            at += size;
            if i == 0 {
                block[at..at + UUID_SIZE].copy_from_slice(uuid);
                at += UUID_SIZE;
            }
        }
        if f.has_block_checksums() {
            seal_tail(&mut block, seed);
        }
        block
    }
}

/// Where tags must end: before the tail with checksums v2/v3.
fn tags_end(len: usize, f: &JournalFeatures) -> usize {
    if f.has_block_checksums() {
        len - TAIL_SIZE
    } else {
        len
    }
}

/// The header's bytes at the start of `block`, which holds at least a header.
fn prefix_mut(block: &mut [u8]) -> &mut [u8; HEADER_SIZE] {
    // OK to unwrap: callers pass whole journal blocks.
    (&mut block[..HEADER_SIZE]).try_into().unwrap()
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

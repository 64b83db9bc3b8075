//! Commit blocks (`struct commit_header`): a transaction is durable once its commit block is.

use crate::checksum::crc32c_raw;
use crate::codec::{on_disk_struct, prefix, Be};
use crate::error::{verify_checksum, FormatError, Location, Result};
use crate::metadata_block::MetadataBlock;
use crate::problem::{Problem, Structure};

/// Offset of `h_chksum[0]`, zeroed while the checksum is computed.
const CHECKSUM_OFFSET: usize = 0x10;

on_disk_struct! {
    /// `struct commit_header`.
    pub struct CommitBlock(Be, 0x3C) {
        /// `h_magic`, `h_blocktype`, `h_sequence`.
        header: [u8; 12] = 0x0,
        /// `h_chksum_type`.
        chksum_type: u8 = 0xC,
        /// `h_chksum_size`.
        chksum_size: u8 = 0xD,
        /// `h_padding`.
        padding: [u8; 2] = 0xE,
        /// `h_chksum`: the commit block's own checksum in word 0 under csum v2/v3.
        chksum: [u32; 8] = 0x10,
        /// `h_commit_sec`.
        commit_sec: u64 = 0x30,
        /// `h_commit_nsec`.
        commit_nsec: u32 = 0x38,
    }
}

/// `h_blocktype` of a commit block.
const COMMIT_BLOCK: u32 = 2;
/// `h_chksum_type` and `h_chksum_size` of a checksum v1 commit (`JBD2_CRC32_CHKSUM`).
const CRC32_CHECKSUM_TYPE: u8 = 1;
const CRC32_CHECKSUM_SIZE: u8 = 4;

impl CommitBlock {
    /// Encodes the commit block of transaction `sequence`, committed at `time` (seconds and
    /// nanoseconds since the epoch), the rest of the block zero. `v1_checksum` is the
    /// transaction's crc32 under checksum v1 ([`crate::checksum::crc32_be`] over its
    /// descriptors and logged blocks); under v2/v3 the block is sealed with `seed`.
    pub fn encode_block(
        sequence: u32,
        f: &super::JournalFeatures,
        block_size: usize,
        time: (u64, u32),
        v1_checksum: Option<u32>,
        seed: u32,
    ) -> Vec<u8> {
        let mut header = [0u8; 12];
        super::JournalHeader {
            magic: super::JOURNAL_MAGIC,
            blocktype: COMMIT_BLOCK,
            sequence,
        }
        .encode(&mut header);
        let mut chksum = [0u32; 8];
        let (chksum_type, chksum_size) = match v1_checksum {
            Some(sum) => {
                chksum[0] = sum;
                (CRC32_CHECKSUM_TYPE, CRC32_CHECKSUM_SIZE)
            }
            None => (0, 0),
        };
        let commit = CommitBlock {
            header,
            chksum_type,
            chksum_size,
            padding: [0; 2],
            chksum,
            commit_sec: time.0,
            commit_nsec: time.1,
        };
        let mut block = vec![0u8; block_size];
        // OK to unwrap: a journal block is at least 1 KiB.
        commit.encode((&mut block[..CommitBlock::SIZE]).try_into().unwrap());
        if f.has_block_checksums() {
            CommitBlock::seal(&mut block, seed);
        }
        block
    }

    /// Whether a checksum v1 commit's stored checksum is right for a transaction whose
    /// blocks sum to `sum`, or absent (`do_one_pass`: type and size zero and no value).
    pub fn v1_checksum_matches(&self, sum: u32) -> bool {
        (self.chksum[0] == sum
            && self.chksum_type == CRC32_CHECKSUM_TYPE
            && self.chksum_size == CRC32_CHECKSUM_SIZE)
            || (self.chksum_type == 0 && self.chksum_size == 0 && self.chksum[0] == 0)
    }

    /// Decodes a commit block, whatever its checksum says.
    pub fn decode_checked(block: &[u8], loc: Location) -> Result<Self> {
        Ok(CommitBlock::decode(commit_bytes(block, loc)?))
    }
}

/// The commit header's bytes, or a [`Problem::TooShort`] at `loc`.
fn commit_bytes(block: &[u8], loc: Location) -> Result<&[u8; CommitBlock::SIZE]> {
    prefix::<{ CommitBlock::SIZE }>(block).ok_or_else(|| {
        FormatError::corrupt(
            Structure::JournalCommit,
            loc,
            Problem::TooShort {
                len: block.len(),
                need: CommitBlock::SIZE,
            },
        )
    })
}

/// The commit checksum (v2/v3): crc32c, seeded with the journal's seed, over the whole
/// block with `h_chksum[0]` zeroed (`jbd2_commit_block_csum_verify`).
fn commit_checksum(block: &[u8], seed: u32) -> u32 {
    let sum = crc32c_raw(seed, &block[..CHECKSUM_OFFSET]);
    crc32c_raw(crc32c_raw(sum, &[0; 4]), &block[CHECKSUM_OFFSET + 4..])
}

/// Checksums v2/v3: `h_chksum[0]`, big-endian. (Checksum v1's crc32 over the whole
/// transaction, stored here with `h_chksum_type` 1, is not a property of this block alone.)
impl MetadataBlock for CommitBlock {
    /// The journal's seed ([`super::JournalSuperblock::csum_seed`]).
    type Seed = u32;

    fn verify(block: &[u8], seed: u32, loc: Location) -> Result<()> {
        let commit = CommitBlock::decode(commit_bytes(block, loc)?);
        verify_checksum(
            Structure::JournalCommit,
            loc,
            commit.chksum[0],
            commit_checksum(block, seed),
        )
    }

    fn seal(block: &mut [u8], seed: u32) {
        if block.len() < CommitBlock::SIZE {
            return;
        }
        let sum = commit_checksum(block, seed);
        block[CHECKSUM_OFFSET..CHECKSUM_OFFSET + 4].copy_from_slice(&sum.to_be_bytes());
    }
}

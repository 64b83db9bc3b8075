//! Commit blocks (`struct commit_header`): a transaction is durable once its commit block is.

use crate::checksum::crc32c_raw;
use crate::codec::{on_disk_struct, prefix, Be};
use crate::error::{verify_checksum, FormatError, Location, Result};
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

impl CommitBlock {
    /// Parses a commit block; with `seed` (csum v2/v3), verifies its checksum.
    pub fn parse(block: &[u8], seed: Option<u32>, loc: Location) -> Result<Self> {
        let raw = prefix::<0x3C>(block).ok_or_else(|| {
            FormatError::corrupt(
                Structure::JournalCommit,
                loc,
                Problem::TooShort {
                    len: block.len(),
                    need: 0x3C,
                },
            )
        })?;
        let commit = CommitBlock::decode(raw);
        if let Some(seed) = seed {
            let sum = crc32c_raw(seed, &block[..CHECKSUM_OFFSET]);
            let sum = crc32c_raw(crc32c_raw(sum, &[0; 4]), &block[CHECKSUM_OFFSET + 4..]);
            verify_checksum(Structure::JournalCommit, loc, commit.chksum[0], sum)?;
        }
        Ok(commit)
    }
}

//! jbd2, the journal ext3 and ext4 write through: every journal block starts with a
//! big-endian header naming its type. The journal superblock describes the log; descriptor
//! blocks list the filesystem blocks logged after them, commit blocks end a transaction and
//! revoke blocks cancel earlier logged copies.
//!
//! Every checksummed journal block kind is under the verifier contract
//! ([`crate::MetadataBlock`]): [`JournalSuperblock`], [`DescriptorBlock`], [`CommitBlock`]
//! and [`RevokeBlock`] decode whatever their checksums say, and verify and seal them
//! separately (checksums v2/v3).

mod block_tail;
mod commit;
mod descriptor;
mod revoke;
mod superblock;

pub use commit::CommitBlock;
pub use descriptor::{logged_block_checksum, DescriptorBlock, JournalTag};
pub use revoke::RevokeBlock;
pub use superblock::{JournalFeatures, JournalSuperblock};

use crate::codec::{on_disk_struct, prefix, Be};
use crate::error::{FormatError, Location, Result};
use crate::problem::{Problem, Structure};

/// `h_magic`.
pub const JOURNAL_MAGIC: u32 = 0xC03B_3998;
/// `journal_header_t`'s size: where a block's own fields begin.
const HEADER_SIZE: usize = 12;

on_disk_struct! {
    /// `journal_header_t`, the first 12 bytes of every metadata block in the journal.
    pub struct JournalHeader(Be, 12) {
        /// `h_magic`.
        magic: u32 = 0x0,
        /// `h_blocktype`.
        blocktype: u32 = 0x4,
        /// `h_sequence`: the transaction this block belongs to.
        sequence: u32 = 0x8,
    }
}

/// `h_blocktype` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JournalBlockType {
    Descriptor,
    Commit,
    SuperblockV1,
    SuperblockV2,
    Revoke,
}

impl JournalHeader {
    /// Reads a header; `None` if the block does not start with the journal magic (a data
    /// block, or the end of the log).
    pub fn parse(block: &[u8]) -> Option<Self> {
        let header = JournalHeader::decode(prefix::<12>(block)?);
        (header.magic == JOURNAL_MAGIC).then_some(header)
    }

    /// The block type, or an error naming an unknown one.
    pub fn block_type(&self, loc: Location) -> Result<JournalBlockType> {
        Ok(match self.blocktype {
            1 => JournalBlockType::Descriptor,
            2 => JournalBlockType::Commit,
            3 => JournalBlockType::SuperblockV1,
            4 => JournalBlockType::SuperblockV2,
            5 => JournalBlockType::Revoke,
            other => {
                return Err(FormatError::corrupt(
                    Structure::JournalBlockHeader,
                    loc,
                    Problem::UnknownJournalBlockType { found: other },
                ))
            }
        })
    }
}

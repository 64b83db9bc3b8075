//! The journal superblock (`journal_superblock_t`), in the journal's first block.

use crate::checksum::crc32c_raw;
use crate::codec::{on_disk_struct, prefix, Be};
use crate::error::{verify_checksum, FormatError, Location, Result};
use crate::metadata_block::MetadataBlock;
use crate::problem::{Problem, Structure};

use super::{JournalBlockType, JournalHeader};

/// Offset of `s_checksum`.
const CHECKSUM_OFFSET: usize = 0xFC;
/// `s_checksum_type` for crc32c (`JBD2_CRC32C_CHKSUM`), the only one checksums v2/v3 use.
const CHECKSUM_TYPE_CRC32C: u8 = 4;

on_disk_struct! {
    /// `journal_superblock_t` (v2 layout; v1 uses only the fields up to `errno`).
    pub struct JournalSuperblock(Be, 1024) {
        /// `s_header`.
        header: [u8; 12] = 0x0,
        /// `s_blocksize`.
        blocksize: u32 = 0xC,
        /// `s_maxlen`: blocks in the journal.
        maxlen: u32 = 0x10,
        /// `s_first`: first block of log data.
        first: u32 = 0x14,
        /// `s_sequence`: first commit ID expected in the log.
        sequence: u32 = 0x18,
        /// `s_start`: block of the start of the log; 0 means the journal is empty.
        start: u32 = 0x1C,
        /// `s_errno`.
        errno: u32 = 0x20,
        /// `s_feature_compat`.
        feature_compat: u32 = 0x24,
        /// `s_feature_incompat`.
        feature_incompat: u32 = 0x28,
        /// `s_feature_ro_compat`.
        feature_ro_compat: u32 = 0x2C,
        /// `s_uuid`.
        uuid: [u8; 16] = 0x30,
        /// `s_nr_users`.
        nr_users: u32 = 0x40,
        /// `s_dynsuper`.
        dynsuper: u32 = 0x44,
        /// `s_max_transaction`.
        max_transaction: u32 = 0x48,
        /// `s_max_trans_data`.
        max_trans_data: u32 = 0x4C,
        /// `s_checksum_type`.
        checksum_type: u8 = 0x50,
        /// `s_padding2`.
        padding2: [u8; 3] = 0x51,
        /// `s_num_fc_blks`: fast-commit blocks.
        num_fc_blks: u32 = 0x54,
        /// `s_head`.
        head: u32 = 0x58,
        /// `s_padding`.
        padding: [u32; 40] = 0x5C,
        /// `s_checksum`.
        checksum: u32 = 0xFC,
        /// `s_users`: UUIDs of filesystems sharing the journal.
        users: [u8; 768] = 0x100,
    }
}

/// `s_feature_incompat` bits (`JBD2_FEATURE_INCOMPAT_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct JournalFeatures {
    pub revoke: bool,
    pub bit64: bool,
    pub async_commit: bool,
    pub csum_v2: bool,
    pub csum_v3: bool,
    pub fast_commit: bool,
}

impl JournalFeatures {
    /// Whether journal blocks carry crc32c checksums (v2 or v3): the superblock's
    /// `s_checksum`, descriptor and revoke tails, commit checksums and tag checksums.
    pub fn has_block_checksums(&self) -> bool {
        self.csum_v2 || self.csum_v3
    }
}

/// Incompat bits this crate can parse.
const KNOWN_INCOMPAT: u32 = 0x3F;

impl JournalSuperblock {
    /// Decodes the journal superblock, whatever its checksum says, and checks what makes
    /// the journal unusable: the header, the block size, where the log starts, and (v2)
    /// incompat features e4 does not know. The checksum is [`MetadataBlock::verify`]'s
    /// business.
    pub fn decode_checked(block: &[u8]) -> Result<Self> {
        let loc = Location::JournalBlock(0);
        let bad = |problem| FormatError::corrupt(Structure::JournalSuperblock, loc, problem);
        let header = JournalHeader::parse(block).ok_or_else(|| {
            bad(Problem::BadMagic {
                found: prefix::<4>(block).map_or(0, |m| u32::from_be_bytes(*m)),
                expected: super::JOURNAL_MAGIC,
            })
        })?;
        let kind = header.block_type(loc)?;
        if !matches!(
            kind,
            JournalBlockType::SuperblockV1 | JournalBlockType::SuperblockV2
        ) {
            return Err(bad(Problem::NotAJournalSuperblock));
        }
        let sb = JournalSuperblock::decode(journal_superblock_bytes(block, loc)?);
        if sb.blocksize < 1024 || !sb.blocksize.is_power_of_two() || sb.blocksize > 65536 {
            return Err(bad(Problem::FieldOutOfRange {
                field: "s_blocksize",
                value: sb.blocksize.into(),
            }));
        }
        if sb.first == 0 || sb.first >= sb.maxlen {
            return Err(bad(Problem::LogStartOutside {
                first: sb.first,
                maxlen: sb.maxlen,
            }));
        }
        let unknown = sb.feature_incompat & !KNOWN_INCOMPAT;
        if kind == JournalBlockType::SuperblockV2 && unknown != 0 {
            return Err(FormatError::Incompatible(format!(
                "journal incompatible feature bits {unknown:#x}"
            )));
        }
        Ok(sb)
    }

    /// Whether the superblock carries a checksum: a v2 superblock with checksums v2 or
    /// v3 (a v1 superblock's feature fields mean nothing).
    fn is_checksummed(&self) -> bool {
        self.is_v2() && self.features().has_block_checksums()
    }

    /// Whether this is a version 2 superblock: a v1 superblock has no feature fields (they
    /// mean nothing there), so no revoke records, 64-bit tags or checksums.
    pub fn is_v2(&self) -> bool {
        let kind = JournalHeader::decode(&self.header).block_type(Location::JournalBlock(0));
        kind.ok() == Some(JournalBlockType::SuperblockV2)
    }

    pub fn features(&self) -> JournalFeatures {
        let bit = |b: u32| self.feature_incompat & b != 0;
        JournalFeatures {
            revoke: bit(0x1),
            bit64: bit(0x2),
            async_commit: bit(0x4),
            csum_v2: bit(0x8),
            csum_v3: bit(0x10),
            fast_commit: bit(0x20),
        }
    }

    /// Seed for descriptor, commit, revoke and data-block checksums.
    pub fn csum_seed(&self) -> u32 {
        crc32c_raw(!0, &self.uuid)
    }

    /// Whether the log holds transactions to replay.
    pub fn needs_recovery(&self) -> bool {
        self.start != 0
    }
}

/// The first 1024 bytes of `block`, or a [`Problem::TooShort`] at `loc`.
fn journal_superblock_bytes(block: &[u8], loc: Location) -> Result<&[u8; 1024]> {
    prefix::<1024>(block).ok_or_else(|| {
        FormatError::corrupt(
            Structure::JournalSuperblock,
            loc,
            Problem::TooShort {
                len: block.len(),
                need: 1024,
            },
        )
    })
}

/// `s_checksum`: crc32c from `~0` over the 1024 bytes with `s_checksum` zeroed
/// (`jbd2_superblock_csum`).
fn journal_superblock_checksum(raw: &[u8; 1024]) -> u32 {
    let sum = crc32c_raw(!0, &raw[..CHECKSUM_OFFSET]);
    let sum = crc32c_raw(sum, &[0; 4]);
    crc32c_raw(sum, &raw[CHECKSUM_OFFSET + 4..])
}

/// A v2 superblock with checksums v2/v3: `s_checksum_type` must say crc32c
/// (`jbd2_verify_csum_type`) and `s_checksum` must match. Anything else has no checksum.
/// Nothing seeds it: the superblock's UUID seeds the rest of the journal.
impl MetadataBlock for JournalSuperblock {
    type Seed = ();

    fn verify(block: &[u8], (): (), loc: Location) -> Result<()> {
        let raw = journal_superblock_bytes(block, loc)?;
        let sb = JournalSuperblock::decode(raw);
        if !sb.is_checksummed() {
            return Ok(());
        }
        if sb.checksum_type != CHECKSUM_TYPE_CRC32C {
            return Err(FormatError::corrupt(
                Structure::JournalSuperblock,
                loc,
                Problem::UnknownChecksumType {
                    found: sb.checksum_type,
                },
            ));
        }
        verify_checksum(
            Structure::JournalSuperblock,
            loc,
            sb.checksum,
            journal_superblock_checksum(raw),
        )
    }

    fn seal(block: &mut [u8], (): ()) {
        let Some(raw) = prefix::<1024>(block) else {
            return;
        };
        if JournalSuperblock::decode(raw).is_checksummed() {
            let sum = journal_superblock_checksum(raw);
            block[CHECKSUM_OFFSET..CHECKSUM_OFFSET + 4].copy_from_slice(&sum.to_be_bytes());
        }
    }
}

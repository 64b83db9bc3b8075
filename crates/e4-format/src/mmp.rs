//! Multiple-mount protection (the mmp feature): the block `s_mmp_block` names holds a
//! `struct mmp_struct` that a node using the filesystem keeps updating, so that a second
//! node sees it busy. Its sequence word says who holds it: nobody (`EXT4_MMP_SEQ_CLEAN`),
//! a checker (`EXT4_MMP_SEQ_FSCK`), or a mounted node (any value up to
//! `EXT4_MMP_SEQ_MAX`, bumped at each update).
//!
//! The structure takes the first 1,024 bytes of its block; under metadata_csum
//! `mmp_checksum` is crc32c, seeded with the filesystem's seed, over the bytes before it.

use crate::checksum::crc32c_raw;
use crate::codec::{on_disk_struct, prefix, Le};
use crate::error::{verify_checksum, FormatError, Location, Result};
use crate::metadata_block::MetadataBlock;
use crate::problem::{Problem, Structure};

/// `EXT4_MMP_MAGIC`.
pub const MMP_MAGIC: u32 = 0x004D_4D50;
/// `EXT4_MMP_SEQ_CLEAN`: no node has the filesystem.
pub const MMP_SEQ_CLEAN: u32 = 0xFF4D_4D50;
/// `EXT4_MMP_SEQ_FSCK`: a checker has it.
pub const MMP_SEQ_FSCK: u32 = 0xE24D_4D50;
/// `EXT4_MMP_SEQ_MAX`: the largest sequence a mounted node writes.
pub const MMP_SEQ_MAX: u32 = 0xE24D_4D4F;
/// Offset of `mmp_checksum`, which covers the bytes before it.
const CHECKSUM_OFFSET: usize = 1020;

on_disk_struct! {
    /// `struct mmp_struct`.
    pub struct MmpBlock(Le, 1024) {
        /// `mmp_magic`.
        magic: u32 = 0x0,
        /// `mmp_seq`: who holds the filesystem (see [`MmpState`]).
        seq: u32 = 0x4,
        /// `mmp_time`: when the holder last wrote the block, in seconds.
        time: u64 = 0x8,
        /// `mmp_nodename`: the holder's host name, NUL-padded.
        nodename: [u8; 64] = 0x10,
        /// `mmp_bdevname`: the device the holder opened, NUL-padded.
        bdevname: [u8; 32] = 0x50,
        /// `mmp_check_interval`: seconds between the holder's updates.
        check_interval: u16 = 0x70,
        /// `mmp_checksum`.
        checksum: u32 = 0x3FC,
    }
}

/// What `mmp_seq` says about who has the filesystem.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MmpState {
    /// `EXT4_MMP_SEQ_CLEAN`: nobody.
    Clean,
    /// `EXT4_MMP_SEQ_FSCK`: a checker.
    Fsck,
    /// A sequence a mounted node writes (at most `EXT4_MMP_SEQ_MAX`).
    InUse(u32),
    /// Above `EXT4_MMP_SEQ_MAX` and neither of the two marks: nothing writes it.
    Unknown(u32),
}

impl MmpBlock {
    /// Decodes the block, checking `mmp_magic` but not the checksum (that is
    /// [`MetadataBlock::verify`]'s business).
    pub fn decode_checked(block: &[u8], loc: Location) -> Result<Self> {
        let bad = |problem| FormatError::corrupt(Structure::MmpBlock, loc, problem);
        let mmp = MmpBlock::decode(prefix::<{ MmpBlock::SIZE }>(block).ok_or_else(|| {
            bad(Problem::TooShort {
                len: block.len(),
                need: MmpBlock::SIZE,
            })
        })?);
        if mmp.magic != MMP_MAGIC {
            return Err(bad(Problem::BadMagic {
                found: mmp.magic,
                expected: MMP_MAGIC,
            }));
        }
        Ok(mmp)
    }

    /// Who has the filesystem, by `mmp_seq`.
    pub fn state(&self) -> MmpState {
        match self.seq {
            MMP_SEQ_CLEAN => MmpState::Clean,
            MMP_SEQ_FSCK => MmpState::Fsck,
            seq if seq <= MMP_SEQ_MAX => MmpState::InUse(seq),
            seq => MmpState::Unknown(seq),
        }
    }
}

impl MetadataBlock for MmpBlock {
    /// The filesystem's seed.
    type Seed = u32;

    fn verify(block: &[u8], seed: u32, loc: Location) -> Result<()> {
        let Some(covered) = block.get(..CHECKSUM_OFFSET + 4) else {
            return Err(FormatError::corrupt(
                Structure::MmpBlock,
                loc,
                Problem::TooShort {
                    len: block.len(),
                    need: MmpBlock::SIZE,
                },
            ));
        };
        // OK to unwrap: the checksum word is inside `covered`.
        let stored = crate::codec::le32(covered, CHECKSUM_OFFSET).unwrap();
        verify_checksum(
            Structure::MmpBlock,
            loc,
            stored,
            crc32c_raw(seed, &covered[..CHECKSUM_OFFSET]),
        )
    }

    fn seal(block: &mut [u8], seed: u32) {
        if block.len() < MmpBlock::SIZE {
            return;
        }
        let sum = crc32c_raw(seed, &block[..CHECKSUM_OFFSET]);
        block[CHECKSUM_OFFSET..CHECKSUM_OFFSET + 4].copy_from_slice(&sum.to_le_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LOC: Location = Location::Block(9);

    fn block_with(seq: u32) -> Vec<u8> {
        let mmp = MmpBlock {
            magic: MMP_MAGIC,
            seq,
            time: 0,
            nodename: [0; 64],
            bdevname: [0; 32],
            check_interval: 5,
            checksum: 0,
        };
        let mut raw = [0u8; MmpBlock::SIZE];
        mmp.encode(&mut raw);
        let mut block = vec![0u8; 4096];
        block[..MmpBlock::SIZE].copy_from_slice(&raw);
        block
    }

    #[test]
    fn sequence_states() {
        let state = |seq| {
            MmpBlock::decode_checked(&block_with(seq), LOC)
                .unwrap()
                .state()
        };
        assert_eq!(state(MMP_SEQ_CLEAN), MmpState::Clean);
        assert_eq!(state(MMP_SEQ_FSCK), MmpState::Fsck);
        assert_eq!(state(1), MmpState::InUse(1));
        assert_eq!(state(MMP_SEQ_MAX), MmpState::InUse(MMP_SEQ_MAX));
        assert_eq!(state(MMP_SEQ_MAX + 2), MmpState::Unknown(MMP_SEQ_MAX + 2));
    }

    #[test]
    fn magic_and_length_are_checked() {
        let mut block = block_with(MMP_SEQ_CLEAN);
        block[0] ^= 1;
        assert!(matches!(
            MmpBlock::decode_checked(&block, LOC),
            Err(FormatError::Corrupt {
                structure: Structure::MmpBlock,
                problem: Problem::BadMagic { .. },
                ..
            })
        ));
        let short = &block_with(MMP_SEQ_CLEAN)[..1000];
        assert!(MmpBlock::decode_checked(short, LOC).is_err());
        assert!(matches!(
            MmpBlock::verify(short, 1, LOC),
            Err(FormatError::Corrupt { .. })
        ));
    }

    #[test]
    fn checksum_covers_the_bytes_before_it_only() {
        let mut block = block_with(MMP_SEQ_CLEAN);
        MmpBlock::seal(&mut block, 7);
        MmpBlock::verify(&block, 7, LOC).unwrap();
        assert!(MmpBlock::verify(&block, 8, LOC).is_err());
        // Bytes past the structure are not covered.
        block[2000] ^= 1;
        MmpBlock::verify(&block, 7, LOC).unwrap();
        // The node name is.
        block[0x10] ^= 1;
        assert!(matches!(
            MmpBlock::verify(&block, 7, LOC),
            Err(FormatError::Checksum { .. })
        ));
    }
}

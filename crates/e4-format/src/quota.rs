//! Quota files (the quota feature): the kernel's quota tree format, v2 revision 1
//! (`fs/quota/quota_v2.c`, `quota_tree.c`; e2fsprogs `lib/support/quotaio_tree.c`). The
//! file is read in 1 KiB tree blocks, whatever the filesystem's block size: block 0 holds
//! the header (`struct v2_disk_dqheader`, then `struct v2_disk_dqinfo`), block 1 the root
//! of a radix tree of [`TREE_DEPTH`] levels keyed by the id's bytes, whose index blocks are
//! arrays of 32-bit block numbers (0: none) and whose last level names data blocks: a
//! 16-byte header (`struct qt_disk_dqdbheader`) then [`QuotaEntry`] records, all zeros
//! where unused.
//!
//! Quota files carry no checksum, so of the verifier contract only decoding applies:
//! [`QuotaHeader::decode_checked`] names a wrong magic or version as a typed
//! [`Problem`], and the tree and data blocks decode whatever their bytes.

use crate::codec::{on_disk_struct, prefix, Le};
use crate::error::{FormatError, Location, Result};
use crate::problem::{Problem, Structure};

/// The three quota types, in the kernel's order (`USRQUOTA`, `GRPQUOTA`, `PRJQUOTA`),
/// which is also the order of their `dqh_magic`s in [`QUOTA_MAGICS`].
pub const QUOTA_TYPES: usize = 3;
/// `dqh_magic` of each type's file (`V2_INITQMAGICS`).
pub const QUOTA_MAGICS: [u32; QUOTA_TYPES] = [0xD9C0_1F11, 0xD9C0_1927, 0xD9C0_3F14];
/// `dqh_version` of the v2r1 format.
pub const QUOTA_VERSION: u32 = 1;
/// The size of a tree block (`QT_BLKSIZE`).
pub const TREE_BLOCK_SIZE: usize = 1024;
/// The tree block of the root (`QT_TREEOFF`).
pub const TREE_ROOT: u32 = 1;
/// Index levels from the root to a data block (`QT_TREEDEPTH`).
pub const TREE_DEPTH: usize = 4;
/// Size of a data block's header (`struct qt_disk_dqdbheader`).
const DATA_HEADER_SIZE: usize = 16;

on_disk_struct! {
    /// `struct v2_disk_dqheader` followed by `struct v2_disk_dqinfo`, at the start of
    /// tree block 0.
    pub struct QuotaHeader(Le, 32) {
        /// `dqh_magic`: the quota type's magic.
        magic: u32 = 0x0,
        /// `dqh_version`: 1 for v2r1.
        version: u32 = 0x4,
        /// `dqi_bgrace`: grace time for space, in seconds.
        block_grace: u32 = 0x8,
        /// `dqi_igrace`: grace time for inodes, in seconds.
        inode_grace: u32 = 0xC,
        /// `dqi_flags`.
        flags: u32 = 0x10,
        /// `dqi_blocks`: tree blocks in the file; a reference at or past it is corrupt.
        blocks: u32 = 0x14,
        /// `dqi_free_blk`: the first free tree block.
        free_block: u32 = 0x18,
        /// `dqi_free_entry`: the first data block with a free entry.
        free_entry: u32 = 0x1C,
    }
}

on_disk_struct! {
    /// `struct v2r1_disk_dqblk`: one id's limits and usage.
    pub struct QuotaEntry(Le, 72) {
        /// `dqb_id`: the user, group or project id.
        id: u32 = 0x0,
        /// `dqb_ihardlimit`.
        inode_hard_limit: u64 = 0x8,
        /// `dqb_isoftlimit`.
        inode_soft_limit: u64 = 0x10,
        /// `dqb_curinodes`: inodes the id uses.
        inodes: u64 = 0x18,
        /// `dqb_bhardlimit`.
        space_hard_limit: u64 = 0x20,
        /// `dqb_bsoftlimit`.
        space_soft_limit: u64 = 0x28,
        /// `dqb_curspace`: bytes the id uses.
        space: u64 = 0x30,
        /// `dqb_btime`: when the space grace time ends.
        space_grace_end: u64 = 0x38,
        /// `dqb_itime`: when the inode grace time ends.
        inode_grace_end: u64 = 0x40,
    }
}

impl QuotaHeader {
    /// Decodes the header of a quota file of type `quota_type` (an index into
    /// [`QUOTA_MAGICS`]) from tree block 0, checking its magic and version.
    pub fn decode_checked(block: &[u8], quota_type: usize, loc: Location) -> Result<Self> {
        let bad = |problem| FormatError::corrupt(Structure::QuotaFile, loc, problem);
        let header =
            QuotaHeader::decode(prefix::<{ QuotaHeader::SIZE }>(block).ok_or_else(|| {
                bad(Problem::TooShort {
                    len: block.len(),
                    need: QuotaHeader::SIZE,
                })
            })?);
        let expected = QUOTA_MAGICS.get(quota_type).copied().unwrap_or_default();
        if header.magic != expected {
            return Err(bad(Problem::BadMagic {
                found: header.magic,
                expected,
            }));
        }
        if header.version != QUOTA_VERSION {
            return Err(bad(Problem::FieldMismatch {
                field: "dqh_version",
                found: header.version.into(),
                expected: QUOTA_VERSION.into(),
            }));
        }
        Ok(header)
    }
}

/// The references of a tree index block, in order, 0 for none.
pub fn tree_references(block: &[u8]) -> impl Iterator<Item = u32> + '_ {
    block
        .chunks_exact(4)
        .map(|w| u32::from_le_bytes([w[0], w[1], w[2], w[3]]))
}

/// The used entries of a data block (an unused one is all zeros), in order.
pub fn data_block_entries(block: &[u8]) -> impl Iterator<Item = QuotaEntry> + '_ {
    block
        .get(DATA_HEADER_SIZE..)
        .unwrap_or_default()
        .chunks_exact(QuotaEntry::SIZE)
        .filter(|raw| raw.iter().any(|&b| b != 0))
        .filter_map(|raw| prefix::<{ QuotaEntry::SIZE }>(raw).map(QuotaEntry::decode))
}

#[cfg(test)]
mod tests {
    use super::*;

    const LOC: Location = Location::Inode(3);

    fn header_block(magic: u32, version: u32) -> Vec<u8> {
        let mut block = vec![0u8; TREE_BLOCK_SIZE];
        let header = QuotaHeader {
            magic,
            version,
            block_grace: 604_800,
            inode_grace: 604_800,
            flags: 0,
            blocks: 6,
            free_block: 0,
            free_entry: 5,
        };
        let mut raw = [0u8; QuotaHeader::SIZE];
        header.encode(&mut raw);
        block[..QuotaHeader::SIZE].copy_from_slice(&raw);
        block
    }

    #[test]
    fn header_names_its_type_and_version() {
        let group = header_block(QUOTA_MAGICS[1], QUOTA_VERSION);
        let header = QuotaHeader::decode_checked(&group, 1, LOC).unwrap();
        assert_eq!(header.blocks, 6);
        // A group quota file is not a user quota file.
        assert!(matches!(
            QuotaHeader::decode_checked(&group, 0, LOC),
            Err(FormatError::Corrupt {
                structure: Structure::QuotaFile,
                problem: Problem::BadMagic { .. },
                ..
            })
        ));
        let v0 = header_block(QUOTA_MAGICS[0], 0);
        assert!(matches!(
            QuotaHeader::decode_checked(&v0, 0, LOC),
            Err(FormatError::Corrupt {
                problem: Problem::FieldMismatch {
                    field: "dqh_version",
                    ..
                },
                ..
            })
        ));
        assert!(QuotaHeader::decode_checked(&group[..20], 1, LOC).is_err());
        assert!(QuotaHeader::decode_checked(&group, 7, LOC).is_err());
    }

    #[test]
    fn data_block_yields_used_entries_only() {
        let mut block = vec![0u8; TREE_BLOCK_SIZE];
        let entry = QuotaEntry {
            id: 1000,
            inode_hard_limit: 0,
            inode_soft_limit: 0,
            inodes: 3,
            space_hard_limit: 0,
            space_soft_limit: 0,
            space: 12288,
            space_grace_end: 0,
            inode_grace_end: 0,
        };
        let mut raw = [0u8; QuotaEntry::SIZE];
        entry.encode(&mut raw);
        // The second slot: the first stays unused.
        let at = DATA_HEADER_SIZE + QuotaEntry::SIZE;
        block[at..at + QuotaEntry::SIZE].copy_from_slice(&raw);
        let entries: Vec<QuotaEntry> = data_block_entries(&block).collect();
        assert_eq!(entries, [entry]);
        assert_eq!(data_block_entries(&block[..8]).count(), 0);
    }

    #[test]
    fn tree_block_references_are_little_endian_words() {
        let mut block = vec![0u8; 12];
        block[4..8].copy_from_slice(&5u32.to_le_bytes());
        assert_eq!(tree_references(&block).collect::<Vec<_>>(), [0, 5, 0]);
    }
}

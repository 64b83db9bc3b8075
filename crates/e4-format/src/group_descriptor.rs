//! Block group descriptors (`struct ext4_group_desc`): 32 bytes, or 64 bytes (`s_desc_size`)
//! with the 64bit feature, where the second half holds the high halves of each field.
//! One struct serves both sizes: a 32-byte descriptor decodes with its high halves zero.

use crate::checksum::{crc16, crc32c_raw};
use crate::codec::le16;
use crate::codec::{on_disk_struct, Le};
use crate::error::{verify_checksum, FormatError, Location, Result};
use crate::features::RoCompatFeatures;
use crate::metadata_block::MetadataBlock;
use crate::problem::{Problem, Structure};
use crate::superblock::Superblock;

/// `bg_flags`: the inode table and bitmap are not initialized.
pub const BG_INODE_UNINIT: u16 = 0x1;
/// `bg_flags`: the block bitmap is not initialized; compute it from the geometry.
pub const BG_BLOCK_UNINIT: u16 = 0x2;
/// `bg_flags`: the inode table has been zeroed.
pub const BG_INODE_ZEROED: u16 = 0x4;

/// Offset of `bg_checksum`, which is excluded from its own checksum.
const CHECKSUM_OFFSET: usize = 0x1E;
/// Size of the descriptor without the 64bit half.
const SMALL_DESC_SIZE: usize = 32;

on_disk_struct! {
    /// `struct ext4_group_desc`.
    pub struct GroupDescriptor(Le, 64) {
        /// `bg_block_bitmap_lo`.
        block_bitmap_lo: u32 = 0x0,
        /// `bg_inode_bitmap_lo`.
        inode_bitmap_lo: u32 = 0x4,
        /// `bg_inode_table_lo`.
        inode_table_lo: u32 = 0x8,
        /// `bg_free_blocks_count_lo`.
        free_blocks_count_lo: u16 = 0xC,
        /// `bg_free_inodes_count_lo`.
        free_inodes_count_lo: u16 = 0xE,
        /// `bg_used_dirs_count_lo`.
        used_dirs_count_lo: u16 = 0x10,
        /// `bg_flags`: `BG_INODE_UNINIT`, `BG_BLOCK_UNINIT`, `BG_INODE_ZEROED`.
        flags: u16 = 0x12,
        /// `bg_exclude_bitmap_lo`.
        exclude_bitmap_lo: u32 = 0x14,
        /// `bg_block_bitmap_csum_lo`.
        block_bitmap_csum_lo: u16 = 0x18,
        /// `bg_inode_bitmap_csum_lo`.
        inode_bitmap_csum_lo: u16 = 0x1A,
        /// `bg_itable_unused_lo`: inodes at the end of the table never used.
        itable_unused_lo: u16 = 0x1C,
        /// `bg_checksum`.
        checksum: u16 = 0x1E,
        /// `bg_block_bitmap_hi`.
        block_bitmap_hi: u32 = 0x20,
        /// `bg_inode_bitmap_hi`.
        inode_bitmap_hi: u32 = 0x24,
        /// `bg_inode_table_hi`.
        inode_table_hi: u32 = 0x28,
        /// `bg_free_blocks_count_hi`.
        free_blocks_count_hi: u16 = 0x2C,
        /// `bg_free_inodes_count_hi`.
        free_inodes_count_hi: u16 = 0x2E,
        /// `bg_used_dirs_count_hi`.
        used_dirs_count_hi: u16 = 0x30,
        /// `bg_itable_unused_hi`.
        itable_unused_hi: u16 = 0x32,
        /// `bg_exclude_bitmap_hi`.
        exclude_bitmap_hi: u32 = 0x34,
        /// `bg_block_bitmap_csum_hi`.
        block_bitmap_csum_hi: u16 = 0x38,
        /// `bg_inode_bitmap_csum_hi`.
        inode_bitmap_csum_hi: u16 = 0x3A,
        /// `bg_reserved`.
        reserved: u32 = 0x3C,
    }
}

/// How group descriptors are checksummed, decided by the superblock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupChecksum {
    /// Neither metadata_csum nor gdt_csum: `bg_checksum` is unused.
    None,
    /// `gdt_csum` (uninit_bg): crc16 over the UUID, group number and descriptor.
    Crc16 { uuid: [u8; 16] },
    /// `metadata_csum`: the low 16 bits of crc32c over the group number and descriptor.
    Crc32c { seed: u32 },
}

impl GroupChecksum {
    pub fn for_superblock(sb: &Superblock) -> Self {
        if sb.has_metadata_csum() {
            GroupChecksum::Crc32c {
                seed: sb.csum_seed(),
            }
        } else if sb.ro_compat().contains(RoCompatFeatures::GDT_CSUM) {
            GroupChecksum::Crc16 { uuid: sb.uuid }
        } else {
            GroupChecksum::None
        }
    }

    /// Computes `bg_checksum` over the first `desc_size` bytes of an encoded descriptor.
    fn compute(&self, group: u32, raw: &[u8]) -> Option<u16> {
        let group_le = group.to_le_bytes();
        let (before, after) = (&raw[..CHECKSUM_OFFSET], &raw[CHECKSUM_OFFSET + 2..]);
        match self {
            GroupChecksum::None => None,
            GroupChecksum::Crc32c { seed } => {
                let sum = crc32c_raw(crc32c_raw(crc32c_raw(*seed, &group_le), before), &[0, 0]);
                Some(crc32c_raw(sum, after) as u16)
            }
            // crc16 skips the checksum field and, for 32-byte descriptors, stops there.
            GroupChecksum::Crc16 { uuid } => Some(crc16(&[uuid, &group_le, before, after])),
        }
    }
}

impl GroupDescriptor {
    /// Decodes descriptor `group` from its `desc_size` bytes (32 or more) and verifies its
    /// checksum.
    pub fn parse(bytes: &[u8], group: u32, checksum: &GroupChecksum) -> Result<Self> {
        let desc = Self::from_bytes(bytes, group)?;
        let seed = GroupSeed {
            checksum: *checksum,
            group,
        };
        Self::verify(bytes, seed, Location::Group(group))?;
        Ok(desc)
    }

    /// Decodes descriptor `group` from its `desc_size` bytes (32 or more), whatever its
    /// checksum says.
    pub fn from_bytes(bytes: &[u8], group: u32) -> Result<Self> {
        check_length(bytes, Location::Group(group))?;
        let mut raw = [0u8; 64];
        let n = bytes.len().min(64);
        raw[..n].copy_from_slice(&bytes[..n]);
        Ok(GroupDescriptor::decode(&raw))
    }

    /// Serializes to `desc_size` bytes, recomputing `bg_checksum`.
    pub fn to_bytes(&self, group: u32, desc_size: usize, checksum: &GroupChecksum) -> Vec<u8> {
        let mut raw = [0u8; 64];
        self.encode(&mut raw);
        let mut out = raw[..desc_size.min(64)].to_vec();
        out.resize(desc_size, 0);
        let seed = GroupSeed {
            checksum: *checksum,
            group,
        };
        Self::seal(&mut out, seed);
        out
    }

    pub fn block_bitmap(&self) -> u64 {
        u64::from(self.block_bitmap_lo) | (u64::from(self.block_bitmap_hi) << 32)
    }

    pub fn inode_bitmap(&self) -> u64 {
        u64::from(self.inode_bitmap_lo) | (u64::from(self.inode_bitmap_hi) << 32)
    }

    pub fn inode_table(&self) -> u64 {
        u64::from(self.inode_table_lo) | (u64::from(self.inode_table_hi) << 32)
    }

    pub fn free_blocks_count(&self) -> u32 {
        u32::from(self.free_blocks_count_lo) | (u32::from(self.free_blocks_count_hi) << 16)
    }

    pub fn free_inodes_count(&self) -> u32 {
        u32::from(self.free_inodes_count_lo) | (u32::from(self.free_inodes_count_hi) << 16)
    }

    pub fn used_dirs_count(&self) -> u32 {
        u32::from(self.used_dirs_count_lo) | (u32::from(self.used_dirs_count_hi) << 16)
    }

    pub fn itable_unused(&self) -> u32 {
        u32::from(self.itable_unused_lo) | (u32::from(self.itable_unused_hi) << 16)
    }

    pub fn set_free_blocks_count(&mut self, n: u32) {
        self.free_blocks_count_lo = n as u16;
        self.free_blocks_count_hi = (n >> 16) as u16;
    }

    pub fn set_free_inodes_count(&mut self, n: u32) {
        self.free_inodes_count_lo = n as u16;
        self.free_inodes_count_hi = (n >> 16) as u16;
    }

    pub fn set_used_dirs_count(&mut self, n: u32) {
        self.used_dirs_count_lo = n as u16;
        self.used_dirs_count_hi = (n >> 16) as u16;
    }

    pub fn set_itable_unused(&mut self, n: u32) {
        self.itable_unused_lo = n as u16;
        self.itable_unused_hi = (n >> 16) as u16;
    }
}

/// The seed of a group descriptor's checksum: how the filesystem checksums descriptors,
/// and the group's number (which the checksum covers).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GroupSeed {
    pub checksum: GroupChecksum,
    pub group: u32,
}

/// Refuses descriptor bytes shorter than the 32-byte descriptor.
fn check_length(bytes: &[u8], loc: Location) -> Result<()> {
    if bytes.len() < SMALL_DESC_SIZE {
        return Err(FormatError::corrupt(
            Structure::GroupDescriptor,
            loc,
            Problem::TooShort {
                len: bytes.len(),
                need: SMALL_DESC_SIZE,
            },
        ));
    }
    Ok(())
}

/// A group descriptor: `bg_checksum` is crc16 (gdt_csum) or the low half of crc32c
/// (metadata_csum) over the group number and the descriptor; without either it is unused.
impl MetadataBlock for GroupDescriptor {
    type Seed = GroupSeed;

    fn verify(bytes: &[u8], seed: GroupSeed, loc: Location) -> Result<()> {
        check_length(bytes, loc)?;
        let Some(computed) = seed.checksum.compute(seed.group, bytes) else {
            return Ok(());
        };
        // OK to unwrap: check_length saw the 32-byte descriptor, which holds bg_checksum.
        let stored = le16(bytes, CHECKSUM_OFFSET).unwrap();
        verify_checksum(
            Structure::GroupDescriptor,
            loc,
            stored.into(),
            computed.into(),
        )
    }

    fn seal(bytes: &mut [u8], seed: GroupSeed) {
        if bytes.len() < SMALL_DESC_SIZE {
            return;
        }
        if let Some(sum) = seed.checksum.compute(seed.group, bytes) {
            bytes[CHECKSUM_OFFSET..CHECKSUM_OFFSET + 2].copy_from_slice(&sum.to_le_bytes());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_both_sizes() {
        let mut raw = [0u8; 64];
        for (i, b) in raw.iter_mut().enumerate() {
            *b = i as u8;
        }
        for (size, csum) in [
            (32usize, GroupChecksum::Crc16 { uuid: [7; 16] }),
            (64, GroupChecksum::Crc32c { seed: 99 }),
            (64, GroupChecksum::None),
        ] {
            let mut d = GroupDescriptor::decode(&raw);
            if size == 32 {
                let mut half = [0u8; 64];
                half[..32].copy_from_slice(&raw[..32]);
                d = GroupDescriptor::decode(&half);
            }
            let bytes = d.to_bytes(5, size, &csum);
            let back = GroupDescriptor::parse(&bytes, 5, &csum).unwrap();
            assert_eq!(back.to_bytes(5, size, &csum), bytes);
            if csum != GroupChecksum::None {
                let mut bad = bytes.clone();
                bad[3] ^= 1;
                assert!(GroupDescriptor::parse(&bad, 5, &csum).is_err());
            }
        }
    }
}

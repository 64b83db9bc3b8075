//! Block and inode bitmaps: one block per group, one bit per cluster or per inode. Their
//! checksum (metadata_csum) does not live in the bitmap but in the group's descriptor
//! (`bg_block_bitmap_csum_lo/_hi`, `bg_inode_bitmap_csum_lo/_hi`), so a bitmap is verified
//! and sealed through a [`BitmapBlock`]: the bitmap's identity (group, kind) and the checksum
//! its descriptor stores. Its `verify` and `seal` are the verifier contract's two steps
//! (DESIGN.md, "Verifier contract"); the bits themselves need no decoding.
//!
//! The checksum is crc32c from the filesystem's seed over the first `inodes_per_group / 8`
//! bytes (inode bitmaps) or `clusters_per_group / 8` bytes (block bitmaps); the rest of the
//! block is padding. A 32-byte descriptor stores the low 16 bits only; one of 64 bytes or more
//! also the high 16 (`ext4_block_bitmap_csum_set`, `EXT4_BG_BLOCK_BITMAP_CSUM_HI_END`).

use crate::checksum::crc32c_raw;
use crate::error::{verify_checksum, FormatError, Location, Result};
use crate::group_descriptor::GroupDescriptor;
use crate::problem::{Problem, Structure};
use crate::superblock::Superblock;

/// Descriptors at least this long store the high halves of the bitmap checksums
/// (`EXT4_BG_BLOCK_BITMAP_CSUM_HI_END`, the end of `bg_inode_bitmap_csum_hi`).
const BITMAP_CSUM_HI_END: u32 = 0x3C;

/// Which bitmap of a group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BitmapKind {
    /// One bit per cluster of the group.
    Block,
    /// One bit per inode of the group.
    Inode,
}

impl BitmapKind {
    fn structure(self) -> Structure {
        match self {
            BitmapKind::Block => Structure::BlockBitmap,
            BitmapKind::Inode => Structure::InodeBitmap,
        }
    }
}

/// What a bitmap's checksum depends on besides its bytes; the same for every group of a
/// filesystem.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BitmapSeed {
    /// The filesystem's checksum seed.
    pub fs_seed: u32,
    /// How many bytes at the start of the block the checksum covers.
    pub covered: usize,
    /// Whether descriptors store the high 16 bits of the checksum.
    pub has_hi: bool,
}

impl BitmapSeed {
    /// The seed for `kind` bitmaps of the filesystem `sb` describes; `None` without
    /// metadata_csum, where bitmaps carry no checksum.
    pub fn for_superblock(sb: &Superblock, kind: BitmapKind) -> Option<Self> {
        if !sb.has_metadata_csum() {
            return None;
        }
        // Clusters per group as the kernel uses it: `s_blocks_per_group` clusters' worth,
        // which the superblock's validation ties to `s_clusters_per_group` under bigalloc.
        let bits = match kind {
            BitmapKind::Block => sb.blocks_per_group / sb.cluster_ratio(),
            BitmapKind::Inode => sb.inodes_per_group,
        };
        Some(BitmapSeed {
            fs_seed: sb.csum_seed(),
            covered: bits as usize / 8,
            has_hi: sb.desc_size() >= BITMAP_CSUM_HI_END,
        })
    }

    /// The checksum of `bitmap` as the descriptor stores it (the low 16 bits when it has
    /// no room for the high ones), or `None` when the block is shorter than what the
    /// checksum covers.
    fn checksum(&self, bitmap: &[u8]) -> Option<u32> {
        let sum = crc32c_raw(self.fs_seed, bitmap.get(..self.covered)?);
        Some(self.stored_part(sum))
    }

    /// The part of `sum` a descriptor holds.
    fn stored_part(&self, sum: u32) -> u32 {
        if self.has_hi {
            sum
        } else {
            sum & 0xFFFF
        }
    }
}

/// A group's block or inode bitmap as its descriptor sees it: which bitmap, and the checksum
/// stored for it. Read one from a descriptor with [`BitmapBlock::of`], check a bitmap block
/// against it with [`BitmapBlock::verify`]; to write, [`BitmapBlock::seal`] computes the
/// checksum of the new bitmap and [`BitmapBlock::store_in`] puts it in the descriptor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BitmapBlock {
    /// Block or inode bitmap.
    pub kind: BitmapKind,
    /// The group the bitmap belongs to.
    pub group: u32,
    /// The stored checksum: `_csum_lo`, with `_csum_hi` above it (zero in a 32-byte
    /// descriptor).
    pub stored: u32,
}

impl BitmapBlock {
    /// The `kind` bitmap of group `group`, with the checksum `desc` stores for it.
    pub fn of(desc: &GroupDescriptor, kind: BitmapKind, group: u32) -> Self {
        let (lo, hi) = match kind {
            BitmapKind::Block => (desc.block_bitmap_csum_lo, desc.block_bitmap_csum_hi),
            BitmapKind::Inode => (desc.inode_bitmap_csum_lo, desc.inode_bitmap_csum_hi),
        };
        BitmapBlock {
            kind,
            group,
            stored: u32::from(lo) | (u32::from(hi) << 16),
        }
    }

    /// Checks `bitmap` (the bitmap block) against the stored checksum. A block shorter than
    /// the checksum covers is [`FormatError::Corrupt`]; a mismatch is
    /// [`FormatError::Checksum`], both naming the bitmap and its group.
    pub fn verify(&self, bitmap: &[u8], seed: BitmapSeed) -> Result<()> {
        let structure = self.kind.structure();
        let loc = Location::Group(self.group);
        let computed = seed.checksum(bitmap).ok_or_else(|| {
            FormatError::corrupt(
                structure,
                loc,
                Problem::TooShort {
                    len: bitmap.len(),
                    need: seed.covered,
                },
            )
        })?;
        verify_checksum(structure, loc, seed.stored_part(self.stored), computed)
    }

    /// Computes the checksum of `bitmap` into `stored`. A block shorter than the checksum
    /// covers is left unsealed: e4 did not build it, and `verify` names it when it is read.
    pub fn seal(&mut self, bitmap: &[u8], seed: BitmapSeed) {
        if let Some(sum) = seed.checksum(bitmap) {
            self.stored = sum;
        }
    }

    /// Writes the stored checksum into `desc`'s fields for this bitmap. The high half goes
    /// in too; a 32-byte descriptor drops it when it is encoded.
    pub fn store_in(&self, desc: &mut GroupDescriptor) {
        let (lo, hi) = (self.stored as u16, (self.stored >> 16) as u16);
        match self.kind {
            BitmapKind::Block => {
                desc.block_bitmap_csum_lo = lo;
                desc.block_bitmap_csum_hi = hi;
            }
            BitmapKind::Inode => {
                desc.inode_bitmap_csum_lo = lo;
                desc.inode_bitmap_csum_hi = hi;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::features::{IncompatFeatures, RoCompatFeatures};
    use crate::group_descriptor::GroupChecksum;
    use crate::superblock::test_superblock;

    const GROUP: u32 = 5;

    #[test]
    fn the_seed_covers_the_group_s_bits_and_the_descriptor_s_halves() {
        let plain = test_superblock(RoCompatFeatures::empty());
        assert_eq!(BitmapSeed::for_superblock(&plain, BitmapKind::Inode), None);

        let mut sb = test_superblock(RoCompatFeatures::METADATA_CSUM);
        let seed = |sb: &Superblock, kind| BitmapSeed::for_superblock(sb, kind).unwrap();
        assert_eq!(seed(&sb, BitmapKind::Inode).covered, 8192 / 8);
        assert_eq!(seed(&sb, BitmapKind::Block).covered, 32768 / 8);
        assert!(!seed(&sb, BitmapKind::Block).has_hi);
        // bigalloc: one bit per cluster of 16 blocks, 8192 clusters per group.
        sb.feature_ro_compat |= RoCompatFeatures::BIGALLOC.bits();
        sb.log_cluster_size = sb.log_block_size + 4;
        sb.clusters_per_group = 8192;
        sb.blocks_per_group = 8192 * 16;
        assert_eq!(seed(&sb, BitmapKind::Block).covered, 8192 / 8);
        // 64-byte descriptors hold the high halves.
        sb.feature_incompat |= IncompatFeatures::BIT64.bits();
        sb.desc_size = 64;
        assert!(seed(&sb, BitmapKind::Inode).has_hi);
        sb.desc_size = 32;
        assert!(!seed(&sb, BitmapKind::Inode).has_hi);
    }

    /// `bitmap`'s view read back from `desc` encoded at `desc_size` bytes, as a reader of
    /// the image sees it.
    fn read_back(desc: &GroupDescriptor, kind: BitmapKind, desc_size: usize) -> BitmapBlock {
        let bytes = desc.to_bytes(GROUP, desc_size, &GroupChecksum::None);
        BitmapBlock::of(
            &GroupDescriptor::from_bytes(&bytes, GROUP).unwrap(),
            kind,
            GROUP,
        )
    }

    #[test]
    fn a_sealed_bitmap_verifies_through_its_descriptor_and_a_flip_is_named() {
        let mut bitmap = vec![0u8; 4096];
        bitmap[..300].fill(0xFF);
        bitmap[300] = 0x0F;
        for kind in [BitmapKind::Block, BitmapKind::Inode] {
            for (desc_size, has_hi) in [(32, false), (64, true)] {
                let seed = BitmapSeed {
                    fs_seed: 9,
                    covered: 1024,
                    has_hi,
                };
                let mut desc = GroupDescriptor::from_bytes(&[0; 64], GROUP).unwrap();
                let mut sealed = BitmapBlock::of(&desc, kind, GROUP);
                sealed.seal(&bitmap, seed);
                sealed.store_in(&mut desc);
                let view = read_back(&desc, kind, desc_size);
                assert_eq!(view, sealed, "{kind:?} {desc_size}");
                view.verify(&bitmap, seed).unwrap();

                let mut flipped = bitmap.clone();
                flipped[1023] ^= 1;
                let got = view.verify(&flipped, seed);
                assert!(
                    matches!(got, Err(FormatError::Checksum { structure, location, .. })
                        if structure == kind.structure() && location == Location::Group(GROUP)),
                    "{got:?}"
                );
                let message = got.unwrap_err().to_string();
                assert!(
                    message.starts_with(&format!(
                        "{} of group {GROUP} has an invalid checksum",
                        kind.structure()
                    )),
                    "{message}"
                );
                // Past the group's bits the block is padding, which the checksum skips.
                let mut padding = bitmap.clone();
                padding[1024] ^= 1;
                view.verify(&padding, seed).unwrap();
            }
        }
    }

    #[test]
    fn the_high_half_counts_where_the_descriptor_holds_it() {
        let bitmap = vec![0x3Cu8; 2048];
        let wide = BitmapSeed {
            fs_seed: 9,
            covered: 2048,
            has_hi: true,
        };
        let narrow = BitmapSeed {
            has_hi: false,
            ..wide
        };
        let mut sealed = BitmapBlock::of(
            &GroupDescriptor::from_bytes(&[0; 64], GROUP).unwrap(),
            BitmapKind::Inode,
            GROUP,
        );
        sealed.seal(&bitmap, wide);
        let wrong_hi = BitmapBlock {
            stored: sealed.stored ^ 0x0001_0000,
            ..sealed
        };
        assert!(matches!(
            wrong_hi.verify(&bitmap, wide),
            Err(FormatError::Checksum { .. })
        ));
        // A 32-byte descriptor has no high half to be wrong.
        wrong_hi.verify(&bitmap, narrow).unwrap();
        // Sealed for a 32-byte descriptor, the high half is zero.
        sealed.seal(&bitmap, narrow);
        assert_eq!(sealed.stored >> 16, 0);
    }

    #[test]
    fn a_block_shorter_than_the_checksum_covers_is_corrupt() {
        let seed = BitmapSeed {
            fs_seed: 9,
            covered: 1024,
            has_hi: true,
        };
        let view = BitmapBlock {
            kind: BitmapKind::Block,
            group: GROUP,
            stored: 0,
        };
        assert!(matches!(
            view.verify(&[0; 512], seed),
            Err(FormatError::Corrupt {
                problem: Problem::TooShort {
                    len: 512,
                    need: 1024
                },
                ..
            })
        ));
        let mut unsealed = view;
        unsealed.seal(&[0; 512], seed);
        assert_eq!(unsealed, view);
    }
}

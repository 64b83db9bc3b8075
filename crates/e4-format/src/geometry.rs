//! Layout arithmetic derived from the superblock: where each group starts, which blocks of a
//! group hold the superblock copy and group descriptors (classic and meta_bg layouts), where
//! an inode's record lives. It is computed once, here, so the engine and the checker cannot
//! disagree on it (e2fsprogs `ext2fs_super_and_bgd_loc2`, `ext2fs_descriptor_block_loc2`).
//!
//! ```
//! use e4_format::geometry::Geometry;
//! use e4_format::superblock::Superblock;
//! let mut raw = [0u8; 1024];
//! raw[0x4..0x8].copy_from_slice(&20000u32.to_le_bytes()); // blocks
//! raw[0x14..0x18].copy_from_slice(&1u32.to_le_bytes()); // first data block (1 KiB blocks)
//! raw[0x20..0x24].copy_from_slice(&8192u32.to_le_bytes()); // blocks per group
//! raw[0x28..0x2C].copy_from_slice(&2048u32.to_le_bytes()); // inodes per group
//! let geometry = Geometry::new(&Superblock::decode(&raw));
//! assert_eq!(geometry.group_count(), 3);
//! assert_eq!(geometry.group_of_block(8193), 1);
//! assert_eq!(geometry.group_block_count(2), 20000 - 1 - 2 * 8192);
//! ```

use crate::features::IncompatFeatures;
use crate::superblock::Superblock;

/// The blocks at the start of a group that are not bitmaps or inode tables: the superblock
/// copy, the group descriptor blocks and the reserved GDT blocks (empty for groups without
/// a backup).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GroupHeader {
    /// The superblock copy's block, if this group has one.
    pub superblock: Option<u64>,
    /// First descriptor (or meta_bg descriptor) block and how many follow, reserved GDT
    /// blocks included.
    pub descriptors: Option<(u64, u64)>,
}

impl GroupHeader {
    /// Every block of the header, in order.
    pub fn blocks(&self) -> impl Iterator<Item = u64> {
        let (start, count) = self.descriptors.unwrap_or((0, 0));
        self.superblock.into_iter().chain(start..start + count)
    }
}

/// The layout of one filesystem, from its superblock.
#[derive(Debug, Clone)]
pub struct Geometry {
    /// Bytes per block.
    pub block_size: u32,
    /// `s_blocks_count`.
    pub blocks_count: u64,
    /// `s_first_data_block`: 1 for 1 KiB blocks, else 0.
    pub first_data_block: u64,
    /// `s_blocks_per_group`.
    pub blocks_per_group: u32,
    /// `s_inodes_per_group`.
    pub inodes_per_group: u32,
    /// `s_inodes_count`.
    pub inodes_count: u32,
    /// Bytes per inode record.
    pub inode_size: u32,
    /// Number of block groups.
    groups: u32,
    /// Group descriptors per block.
    descs_per_block: u32,
    /// Blocks holding the classic (non-meta_bg) descriptor table.
    classic_desc_blocks: u64,
    /// `s_reserved_gdt_blocks`.
    reserved_gdt_blocks: u64,
    /// meta_bg with `s_first_meta_bg`, if enabled.
    first_meta_bg: Option<u32>,
    superblock: Superblock,
}

impl Geometry {
    /// The layout of a superblock that passed [`Superblock::parse`]'s validation (group count
    /// fits in `u32`, non-zero blocks and inodes per group).
    pub fn new(sb: &Superblock) -> Self {
        let block_size = sb.block_size();
        let groups = u32::try_from(
            (sb.blocks_count()
                .saturating_sub(u64::from(sb.first_data_block)))
            .div_ceil(u64::from(sb.blocks_per_group.max(1))),
        )
        .unwrap_or(u32::MAX);
        let descs_per_block = (block_size / sb.desc_size().max(1)).max(1);
        let meta_bg = sb.incompat().contains(IncompatFeatures::META_BG);
        let table_blocks = u64::from(groups.div_ceil(descs_per_block));
        Geometry {
            block_size,
            blocks_count: sb.blocks_count(),
            first_data_block: u64::from(sb.first_data_block),
            blocks_per_group: sb.blocks_per_group.max(1),
            inodes_per_group: sb.inodes_per_group,
            inodes_count: sb.inodes_count,
            inode_size: sb.inode_size(),
            groups,
            descs_per_block,
            classic_desc_blocks: if meta_bg {
                u64::from(sb.first_meta_bg).min(table_blocks)
            } else {
                table_blocks
            },
            reserved_gdt_blocks: u64::from(sb.reserved_gdt_blocks),
            first_meta_bg: meta_bg.then_some(sb.first_meta_bg),
            superblock: sb.clone(),
        }
    }

    /// Number of block groups.
    pub fn group_count(&self) -> u32 {
        self.groups
    }

    /// First block of `group`.
    pub fn group_first_block(&self, group: u32) -> u64 {
        self.first_data_block + u64::from(group) * u64::from(self.blocks_per_group)
    }

    /// Blocks in `group`: `blocks_per_group`, except in a shorter last group.
    pub fn group_block_count(&self, group: u32) -> u64 {
        let start = self.group_first_block(group);
        self.blocks_count
            .saturating_sub(start)
            .min(u64::from(self.blocks_per_group))
    }

    /// The group a block belongs to (block 0 of a 1 KiB filesystem counts as group 0).
    pub fn group_of_block(&self, block: u64) -> u32 {
        (block.saturating_sub(self.first_data_block) / u64::from(self.blocks_per_group)) as u32
    }

    /// Blocks holding each group's inode table.
    pub fn inode_table_blocks(&self) -> u64 {
        (u64::from(self.inodes_per_group) * u64::from(self.inode_size))
            .div_ceil(u64::from(self.block_size))
    }

    /// The group of inode `ino` (1-based) and its index within that group's table.
    pub fn inode_position(&self, ino: u32) -> (u32, u32) {
        let index = ino.saturating_sub(1);
        let per = self.inodes_per_group.max(1);
        (index / per, index % per)
    }

    /// Block holding the descriptors of `group`, per the classic and meta_bg layouts.
    pub fn descriptor_block(&self, group: u32) -> u64 {
        let meta_group = group / self.descs_per_block;
        match self.first_meta_bg {
            Some(first) if meta_group >= first => {
                let leader = meta_group * self.descs_per_block;
                let has_super = u64::from(self.superblock.group_has_superblock(leader));
                self.group_first_block(leader) + has_super
            }
            _ => self.first_data_block + 1 + u64::from(meta_group),
        }
    }

    /// Byte offset of `group`'s descriptor inside [`Geometry::descriptor_block`].
    pub fn descriptor_offset(&self, group: u32) -> usize {
        (group % self.descs_per_block) as usize * self.superblock.desc_size() as usize
    }

    /// The superblock copy and descriptor blocks at the start of `group`
    /// (`ext2fs_super_and_bgd_loc2`).
    pub fn group_header(&self, group: u32) -> GroupHeader {
        let has_super = self.superblock.group_has_superblock(group);
        // With 1 KiB blocks under bigalloc the first group starts at 0 but the superblock
        // is still block 1; e2fsprogs makes the same adjustment.
        let start = match self.group_first_block(group) {
            0 if self.block_size == 1024 => 1,
            other => other,
        };
        let superblock = has_super.then_some(start);
        let meta_group = group / self.descs_per_block;
        let descriptors = match self.first_meta_bg {
            Some(first) if meta_group >= first => {
                let index = group % self.descs_per_block;
                (index == 0 || index == 1 || index == self.descs_per_block - 1)
                    .then_some((start + u64::from(has_super), 1))
            }
            _ => {
                let count = if self.first_meta_bg.is_some() {
                    self.classic_desc_blocks
                } else {
                    self.classic_desc_blocks + self.reserved_gdt_blocks
                };
                (has_super && count > 0).then_some((start + 1, count))
            }
        };
        GroupHeader {
            superblock,
            descriptors,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::features::RoCompatFeatures;

    fn superblock(blocks: u32, log_block: u32, meta_bg: Option<u32>) -> Superblock {
        let mut raw = [0u8; 1024];
        raw[0x4..0x8].copy_from_slice(&blocks.to_le_bytes());
        raw[0x14..0x18].copy_from_slice(&u32::from(log_block == 0).to_le_bytes());
        raw[0x18..0x1C].copy_from_slice(&log_block.to_le_bytes());
        raw[0x20..0x24].copy_from_slice(&(8192u32 << log_block).to_le_bytes());
        raw[0x28..0x2C].copy_from_slice(&1024u32.to_le_bytes());
        raw[0x4C..0x50].copy_from_slice(&1u32.to_le_bytes());
        raw[0x58..0x5A].copy_from_slice(&256u16.to_le_bytes());
        raw[0x64..0x68].copy_from_slice(&RoCompatFeatures::SPARSE_SUPER.bits().to_le_bytes());
        raw[0xCE..0xD0].copy_from_slice(&7u16.to_le_bytes());
        if let Some(first) = meta_bg {
            raw[0x60..0x64].copy_from_slice(&IncompatFeatures::META_BG.bits().to_le_bytes());
            raw[0x104..0x108].copy_from_slice(&first.to_le_bytes());
            raw[0xCE..0xD0].copy_from_slice(&0u16.to_le_bytes());
        }
        Superblock::decode(&raw)
    }

    #[test]
    fn classic_layout_backups_carry_reserved_gdt() {
        let g = Geometry::new(&superblock(100_000, 0, None));
        assert_eq!(g.group_count(), 13);
        let header = g.group_header(0);
        assert_eq!(header.superblock, Some(1));
        // 13 descriptors fit one 1 KiB block, plus 7 reserved.
        assert_eq!(header.descriptors, Some((2, 8)));
        assert_eq!(
            g.group_header(3).blocks().next(),
            Some(g.group_first_block(3))
        );
        assert_eq!(g.group_header(2), GroupHeader::default_empty());
        assert_eq!(g.descriptor_block(12), 2);
    }

    #[test]
    fn meta_bg_descriptors_sit_in_first_second_and_last_group_of_each_meta_group() {
        // 1 KiB blocks hold 32 descriptors; 70 groups make 3 meta groups.
        let g = Geometry::new(&superblock(70 * 8192 + 1, 0, Some(0)));
        assert_eq!(g.group_count(), 70);
        assert_eq!(g.group_header(0).descriptors, Some((2, 1)));
        assert_eq!(g.group_header(1).descriptors, Some((8194, 1)));
        assert_eq!(
            g.group_header(31).descriptors,
            Some((g.group_first_block(31), 1))
        );
        assert_eq!(g.group_header(5).descriptors, None);
        assert_eq!(g.descriptor_block(33), g.group_first_block(32));
    }

    impl GroupHeader {
        fn default_empty() -> Self {
            GroupHeader {
                superblock: None,
                descriptors: None,
            }
        }
    }
}

//! Where things are: the layout arithmetic every reader and writer of an image needs, in one
//! place. Which groups hold a superblock backup, which block holds a group's descriptor
//! (classic and meta_bg layouts), which blocks of a group are fixed metadata, and where an
//! inode's record lives. Derived from the superblock alone; descriptor-given locations
//! (bitmaps, inode tables) are the descriptors' business.

use crate::features::IncompatFeatures;
use crate::superblock::{Superblock, SUPERBLOCK_OFFSET};

/// The layout of a filesystem, derived from its superblock.
#[derive(Debug, Clone)]
pub struct Geometry {
    superblock: Superblock,
    /// The block the descriptor table follows: the primary superblock's block, or the
    /// backup's a damaged filesystem was opened with.
    descriptors_after: u64,
}

/// A run of blocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct BlockRun {
    pub start: u64,
    pub len: u64,
}

/// Where an inode's record is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InodeLocation {
    pub group: u32,
    /// Index of the inode within its group.
    pub index: u32,
    /// Byte offset of the record from the start of the group's inode table.
    pub table_offset: u64,
}

impl Geometry {
    /// The layout of `superblock`, with the descriptor table after the primary superblock.
    pub fn new(superblock: &Superblock) -> Self {
        let descriptors_after = SUPERBLOCK_OFFSET / u64::from(superblock.block_size());
        Self::with_descriptors_after(superblock, descriptors_after)
    }

    /// The layout when the filesystem was found through the backup superblock in block
    /// `superblock_block` (its descriptor copy follows it).
    pub fn with_descriptors_after(superblock: &Superblock, superblock_block: u64) -> Self {
        Geometry {
            superblock: superblock.clone(),
            descriptors_after: superblock_block,
        }
    }

    pub fn block_size(&self) -> u32 {
        self.superblock.block_size()
    }

    pub fn blocks(&self) -> u64 {
        self.superblock.blocks_count()
    }

    /// The block holding the primary superblock: 1 with 1 KiB blocks (also under
    /// bigalloc, where the first data block is 0), else 0.
    pub fn primary_superblock_block(&self) -> u64 {
        SUPERBLOCK_OFFSET / u64::from(self.block_size())
    }

    pub fn first_data_block(&self) -> u64 {
        u64::from(self.superblock.first_data_block)
    }

    pub fn blocks_per_group(&self) -> u32 {
        self.superblock.blocks_per_group
    }

    pub fn inodes_per_group(&self) -> u32 {
        self.superblock.inodes_per_group
    }

    pub fn groups(&self) -> u32 {
        self.superblock.group_count() as u32
    }

    /// Descriptors per descriptor block.
    pub fn descriptors_per_block(&self) -> u32 {
        self.block_size() / self.superblock.desc_size()
    }

    /// Blocks of the classic (non-meta_bg) descriptor table.
    pub fn descriptor_table_blocks(&self) -> u64 {
        u64::from(self.groups()).div_ceil(u64::from(self.descriptors_per_block()))
    }

    fn meta_bg(&self) -> bool {
        self.superblock
            .incompat()
            .contains(IncompatFeatures::META_BG)
    }

    /// The first block of `group`.
    pub fn group_first_block(&self, group: u32) -> u64 {
        self.first_data_block() + u64::from(group) * u64::from(self.blocks_per_group())
    }

    /// Blocks in `group` (the last group may be short).
    pub fn group_blocks(&self, group: u32) -> u64 {
        let start = self.group_first_block(group);
        self.blocks()
            .saturating_sub(start)
            .min(u64::from(self.blocks_per_group()))
    }

    /// The group holding `block`, or `None` for blocks before the first group or past the end.
    pub fn group_of_block(&self, block: u64) -> Option<u32> {
        if block < self.first_data_block() || block >= self.blocks() {
            return None;
        }
        Some(((block - self.first_data_block()) / u64::from(self.blocks_per_group())) as u32)
    }

    /// Whether `group` holds a superblock (primary or backup).
    pub fn has_superblock(&self, group: u32) -> bool {
        self.superblock.group_has_superblock(group)
    }

    /// Block holding the descriptor of `group`, per the classic and meta_bg layouts.
    pub fn descriptor_block(&self, group: u32) -> u64 {
        let per_block = self.descriptors_per_block();
        let meta_group = group / per_block;
        if !self.meta_bg() || meta_group < self.superblock.first_meta_bg {
            return self.descriptors_after + 1 + u64::from(meta_group);
        }
        let leader = meta_group * per_block;
        let first = self.group_first_block(leader);
        // Under bigalloc with 1 KiB blocks group 0 starts at the boot block, before the
        // superblock (libext2fs's `group_zero_adjust`).
        let boot_block = u64::from(first == 0 && self.primary_superblock_block() == 1);
        first + u64::from(self.has_superblock(leader)) + boot_block
    }

    /// Byte offset of `group`'s descriptor inside its descriptor block.
    pub fn descriptor_offset(&self, group: u32) -> usize {
        (group % self.descriptors_per_block()) as usize * self.superblock.desc_size() as usize
    }

    /// Descriptor blocks stored in `group` itself (the kernel's `ext4_bg_num_gdb`): the
    /// classic table (and its reserved growth blocks) in groups with a superblock, or a
    /// meta_bg group's own descriptor block in the first, second and last group of each
    /// meta group.
    ///
    /// Under meta_bg the reserved growth blocks are not counted, as libext2fs's
    /// `ext2fs_reserve_super_and_bgd` counts `s_first_meta_bg` descriptor blocks alone
    /// there (the kernel's `ext4_num_base_meta_blocks` still adds them). mke2fs never
    /// makes meta_bg with resize_inode, so this decides nothing on the images it makes;
    /// on one where both are set (e2fsck's `PR_0_DISABLE_RESIZE_INODE`), e2fsck finds the
    /// reserved blocks marked in the bitmap but owned by no one, and e4 fsck must agree.
    fn descriptor_blocks_in(&self, group: u32) -> (u64, u64) {
        let per_block = self.descriptors_per_block();
        let classic = !self.meta_bg() || group / per_block < self.superblock.first_meta_bg;
        if classic {
            if !self.has_superblock(group) {
                return (0, 0);
            }
            if self.meta_bg() {
                return (u64::from(self.superblock.first_meta_bg), 0);
            }
            return (
                self.descriptor_table_blocks(),
                u64::from(self.superblock.reserved_gdt_blocks),
            );
        }
        let first = group / per_block * per_block;
        let own = group == first || group == first + 1 || group == first + per_block - 1;
        (u64::from(own), 0)
    }

    /// The fixed metadata at the start of `group`: the superblock copy, descriptor blocks
    /// and reserved descriptor blocks (the kernel's `ext4_num_base_meta_blocks`). Bitmaps and
    /// inode tables are where the descriptors say.
    pub fn base_metadata(&self, group: u32) -> BlockRun {
        let (table, reserved) = self.descriptor_blocks_in(group);
        let superblock = u64::from(self.has_superblock(group));
        let mut start = self.group_first_block(group);
        let mut len = superblock + table + reserved;
        // With 1 KiB blocks group 0 starts at block 1 and block 0 is the boot block, outside
        // every group; with larger blocks the superblock shares block 0 with it.
        if group == 0 && self.first_data_block() == 0 && superblock == 0 {
            start = 0;
            len = len.max(1);
        }
        // Under bigalloc with 1 KiB blocks group 0 starts at block 0, the boot block, and
        // the superblock follows in block 1 (libext2fs's `ext2fs_reserve_super_and_bgd`
        // marks both).
        if group == 0 && self.first_data_block() == 0 && self.primary_superblock_block() == 1 {
            len += 1;
        }
        BlockRun { start, len }
    }

    /// Inode table blocks per group.
    pub fn inode_table_blocks(&self) -> u64 {
        (u64::from(self.inodes_per_group()) * u64::from(self.superblock.inode_size()))
            .div_ceil(u64::from(self.block_size()))
    }

    /// Where inode `ino` lives; `None` for 0 and numbers past the last inode.
    pub fn inode_location(&self, ino: u32) -> Option<InodeLocation> {
        if ino == 0 || ino > self.superblock.inodes_count {
            return None;
        }
        let ipg = self.inodes_per_group();
        let index = (ino - 1) % ipg;
        Some(InodeLocation {
            group: (ino - 1) / ipg,
            index,
            table_offset: u64::from(index) * u64::from(self.superblock.inode_size()),
        })
    }

    /// Which inode-table block holds inode `ino`'s record: its group, and the block's
    /// place in that group's table. `None` where [`Self::inode_location`] is.
    pub fn inode_table_block(&self, ino: u32) -> Option<(u32, u64)> {
        let loc = self.inode_location(ino)?;
        Some((loc.group, loc.table_offset / u64::from(self.block_size())))
    }

    /// Whether `start..start+len` lies inside the filesystem's data area.
    pub fn contains_run(&self, start: u64, len: u64) -> bool {
        start >= self.first_data_block()
            && start
                .checked_add(len)
                .is_some_and(|end| end <= self.blocks())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn superblock(block_log: u32, blocks: u32, bpg: u32, features: &[(&str, u32)]) -> Superblock {
        let mut raw = [0u8; 1024];
        let sb_fields: [(usize, u32); 8] = [
            (0x0, 4096),                       // s_inodes_count
            (0x4, blocks),                     // s_blocks_count_lo
            (0x14, u32::from(block_log == 0)), // s_first_data_block
            (0x18, block_log),                 // s_log_block_size
            (0x1C, block_log),                 // s_log_cluster_size
            (0x20, bpg),                       // s_blocks_per_group
            (0x24, bpg),                       // s_clusters_per_group
            (0x28, 256),                       // s_inodes_per_group
        ];
        for (off, v) in sb_fields {
            raw[off..off + 4].copy_from_slice(&v.to_le_bytes());
        }
        raw[0x38..0x3A].copy_from_slice(&0xEF53u16.to_le_bytes());
        raw[0x4C..0x50].copy_from_slice(&1u32.to_le_bytes()); // rev 1
        raw[0x58..0x5A].copy_from_slice(&256u16.to_le_bytes()); // inode size
        for (name, v) in features {
            let off = match *name {
                "ro_compat" => 0x64,
                "incompat" => 0x60,
                "reserved_gdt" => 0xCE,
                "first_meta_bg" => 0x104,
                _ => unreachable!(),
            };
            if *name == "reserved_gdt" {
                raw[off..off + 2].copy_from_slice(&(*v as u16).to_le_bytes());
            } else {
                raw[off..off + 4].copy_from_slice(&v.to_le_bytes());
            }
        }
        Superblock::decode(&raw)
    }

    #[test]
    fn inodes_share_a_table_block_exactly_when_their_records_do() {
        // 1 KiB blocks, 256-byte inodes: 4 records a block, 256 inodes (64 blocks) a group.
        let g = Geometry::new(&superblock(0, 8193, 1024, &[]));
        let block = |ino| g.inode_table_block(ino).unwrap();
        assert_eq!(
            [block(1), block(4), block(5), block(256)],
            [(0, 0), (0, 0), (0, 1), (0, 63)]
        );
        assert_eq!(
            [block(257), block(261), block(4096)],
            [(1, 0), (1, 1), (15, 63)]
        );
        assert_eq!(g.inode_table_block(0), None);
        assert_eq!(g.inode_table_block(4097), None);
    }

    #[test]
    fn classic_layout_with_sparse_super() {
        // 1 KiB blocks, 8 groups of 1024 blocks, sparse_super, 3 reserved GDT blocks.
        let sb = superblock(0, 8193, 1024, &[("ro_compat", 1), ("reserved_gdt", 3)]);
        let g = Geometry::new(&sb);
        assert_eq!(g.groups(), 8);
        assert_eq!(g.descriptor_block(5), 2);
        assert_eq!(g.base_metadata(0), BlockRun { start: 1, len: 5 });
        assert_eq!(
            g.base_metadata(1),
            BlockRun {
                start: 1025,
                len: 5
            }
        );
        assert_eq!(
            g.base_metadata(2),
            BlockRun {
                start: 2049,
                len: 0
            }
        );
        assert_eq!(g.base_metadata(3).len, 5);
        assert_eq!(g.base_metadata(7).len, 5);
        assert_eq!(g.group_of_block(1025), Some(1));
        assert_eq!(g.group_of_block(0), None);
    }

    #[test]
    fn meta_bg_descriptors_live_in_their_meta_group() {
        // 1 KiB blocks, 32-byte descriptors: 32 per block; 64 groups = two meta groups.
        let sb = superblock(
            0,
            64 * 256 + 1,
            256,
            &[("incompat", 0x10), ("ro_compat", 1)],
        );
        let g = Geometry::new(&sb);
        assert_eq!(g.descriptor_block(0), 1 + 1);
        assert_eq!(g.descriptor_block(33), g.group_first_block(32));
        // Groups 32, 33 and 63 each hold a copy of meta group 1's descriptor block.
        assert_eq!(g.base_metadata(32).len, 1);
        assert_eq!(g.base_metadata(33).len, 1);
        // Group 1 has a superblock backup and its meta group's second descriptor copy.
        assert_eq!(g.base_metadata(1).len, 2);
        assert_eq!(g.base_metadata(63).len, 1);
        assert_eq!(g.base_metadata(34).len, 0);
    }

    #[test]
    fn meta_bg_does_not_count_reserved_descriptor_blocks() {
        // As above, with first_meta_bg 1 and 7 reserved blocks left from resize_inode:
        // group 0 holds its superblock and meta group 0's one classic descriptor block.
        let features = [
            ("incompat", 0x10),
            ("ro_compat", 1),
            ("first_meta_bg", 1),
            ("reserved_gdt", 7),
        ];
        let g = Geometry::new(&superblock(0, 64 * 256 + 1, 256, &features));
        assert_eq!(g.base_metadata(0), BlockRun { start: 1, len: 2 });
        assert_eq!(g.base_metadata(1).len, 2);
        assert_eq!(g.base_metadata(32).len, 1);
        assert_eq!(g.descriptor_block(5), 2);
        // Without meta_bg the reserved blocks follow the table.
        let g = Geometry::new(&superblock(0, 64 * 256 + 1, 256, &features[1..]));
        assert_eq!(
            g.base_metadata(0),
            BlockRun {
                start: 1,
                len: 1 + 2 + 7
            }
        );
    }

    #[test]
    fn inode_locations() {
        let sb = superblock(2, 32768, 32768, &[]);
        let g = Geometry::new(&sb);
        assert_eq!(g.inode_location(0), None);
        assert_eq!(g.inode_location(4097), None);
        let at = g.inode_location(258).unwrap();
        assert_eq!((at.group, at.index, at.table_offset), (1, 1, 256));
        assert_eq!(g.inode_table_blocks(), 16);
    }
}

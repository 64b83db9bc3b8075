//! The geometry, as libext2fs decides it for mke2fs: `ext2fs_initialize` (groups, inodes
//! per group, reserved GDT blocks, dropping a last group too small for its tables) and
//! `ext2fs_allocate_tables` (where each group's bitmaps and inode table go, packed per
//! flex group). The result is the superblock, the descriptors and the block bitmap before
//! any file exists.

use e4_format::features::{CompatFeatures, IncompatFeatures, RoCompatFeatures};
use e4_format::geometry::Geometry;
use e4_format::group_descriptor::{GroupDescriptor, BG_BLOCK_UNINIT, BG_INODE_UNINIT};
use e4_format::superblock::{Superblock, SUPERBLOCK_MAGIC};

use crate::block_map::BlockMap;
use crate::error::{MkfsError, Result};
use crate::params::Params;

/// `EXT2_GOOD_OLD_FIRST_INO`: inodes 1 to 10 are reserved, 11 is the first for files.
pub const FIRST_INO: u32 = 11;
/// `EXT2_FLAGS_SIGNED_HASH`: directory hashes of this filesystem use signed `char`, as on
/// x86 where mke2fs runs (it tests `(char) 255`).
const FLAGS_SIGNED_HASH: u32 = 0x1;
/// `EXT2_OS_LINUX`.
const CREATOR_OS_LINUX: u32 = 0;
/// `EXT2_DYNAMIC_REV`.
const DYNAMIC_REV: u32 = 1;
/// `sizeof(struct ext2_inode_large) - EXT2_GOOD_OLD_INODE_SIZE` in e2fsprogs 1.47.
pub const EXTRA_ISIZE: u16 = 32;

/// The filesystem laid out: superblock, descriptors and the blocks in use so far.
pub struct Layout {
    pub sb: Superblock,
    pub descriptors: Vec<GroupDescriptor>,
    pub map: BlockMap,
    pub desc_blocks: u64,
    pub inode_blocks_per_group: u64,
}

impl Layout {
    pub fn block_size(&self) -> u64 {
        u64::from(self.sb.block_size())
    }

    pub fn groups(&self) -> u32 {
        self.descriptors.len() as u32
    }

    pub fn group_first_block(&self, group: u32) -> u64 {
        u64::from(self.sb.first_data_block) + u64::from(group) * u64::from(self.sb.blocks_per_group)
    }

    /// `ext2fs_group_last_block2`.
    pub fn group_last_block(&self, group: u32) -> u64 {
        (self.group_first_block(group) + u64::from(self.sb.blocks_per_group) - 1)
            .min(self.sb.blocks_count() - 1)
    }

    pub fn group_of(&self, block: u64) -> u32 {
        ((block - u64::from(self.sb.first_data_block)) / u64::from(self.sb.blocks_per_group)) as u32
    }

    /// Free blocks of `group` in the bitmap (what the descriptor's count is kept equal to).
    pub fn group_free_blocks(&self, group: u32) -> u64 {
        self.map.free_in(
            self.group_first_block(group),
            self.group_last_block(group) + 1,
        )
    }

    fn desc_csum(&self) -> bool {
        self.sb.has_metadata_csum() || self.sb.ro_compat().contains(RoCompatFeatures::GDT_CSUM)
    }

    /// Marks `block` used by a file (`ext2fs_block_alloc_stats2`): its group's bitmap is
    /// now initialized.
    pub fn use_block(&mut self, block: u64) {
        self.map.mark(block);
        let group = self.group_of(block);
        self.descriptors[group as usize].flags &= !BG_BLOCK_UNINIT;
    }

    /// Allocates the first free block at or after `goal` (`ext2fs_new_block2` then
    /// `ext2fs_block_alloc_stats2`).
    pub fn allocate_block(&mut self, goal: u64) -> Result<u64> {
        let block = self.map.first_free_from(goal).ok_or_else(|| {
            MkfsError::Geometry("no free block left for the filesystem's own files".into())
        })?;
        self.use_block(block);
        Ok(block)
    }

    /// Marks inode `ino` used (`ext2fs_inode_alloc_stats2`): its group's inode bitmap is
    /// now initialized.
    pub fn use_inode_group(&mut self, ino: u32) {
        let group = self.group_of_inode(ino);
        self.descriptors[group as usize].flags &= !BG_INODE_UNINIT;
    }

    /// The group inode `ino` belongs to.
    pub fn group_of_inode(&self, ino: u32) -> u32 {
        (ino - 1) / self.sb.inodes_per_group
    }

    /// Counts `group`'s block bitmap as initialized (written, with its checksum) though no
    /// block of the group is used yet.
    pub fn initialize_block_bitmap(&mut self, group: u32) {
        self.descriptors[group as usize].flags &= !BG_BLOCK_UNINIT;
    }
}

/// `calc_reserved_gdt_blocks`: room for the descriptor table of a filesystem 1024 times
/// larger (or of 2^32 blocks), at most one block of pointers.
fn reserved_gdt_blocks(
    blocks: u64,
    first_data_block: u64,
    bpg: u64,
    per_block: u64,
    desc_blocks: u64,
    block_size: u64,
) -> u64 {
    let mut max_blocks: u64 = 0xFFFF_FFFF;
    if blocks < max_blocks / 1024 {
        max_blocks = blocks * 1024;
    }
    let rsv_groups = (max_blocks - first_data_block).div_ceil(bpg);
    let rsv = rsv_groups.div_ceil(per_block).saturating_sub(desc_blocks);
    rsv.min(block_size / 4)
}

/// Lays out the filesystem `p` describes.
pub fn lay_out(p: &Params) -> Result<Layout> {
    let bs = u64::from(p.block_size);
    let first_data_block = u64::from(bs == 1024);
    let mut sb = Superblock::decode(&[0; 1024]);
    sb.magic = SUPERBLOCK_MAGIC;
    sb.state = e4_format::superblock::STATE_VALID;
    sb.log_block_size = (p.block_size / 1024).trailing_zeros();
    sb.log_cluster_size = sb.log_block_size;
    sb.first_data_block = first_data_block as u32;
    sb.errors = p.errors;
    sb.feature_compat = p.features.compat;
    sb.feature_incompat = p.features.incompat;
    sb.feature_ro_compat = p.features.ro_compat;
    sb.default_mount_opts = p.default_mount_opts;
    sb.log_groups_per_flex = p.log_groups_per_flex;
    sb.rev_level = DYNAMIC_REV;
    sb.first_ino = FIRST_INO;
    sb.inode_size = p.inode_size as u16;
    if p.inode_size >= 128 + u32::from(EXTRA_ISIZE) {
        sb.min_extra_isize = EXTRA_ISIZE;
        sb.want_extra_isize = EXTRA_ISIZE;
    }
    sb.creator_os = CREATOR_OS_LINUX;
    let bit64 = p.features.has_incompat(IncompatFeatures::BIT64);
    sb.desc_size = if bit64 { 64 } else { 0 };
    // EXT2_MAX_BLOCKS_PER_GROUP: 2^16 - 8 blocks at most.
    let mut bpg = p.blocks_per_group.unwrap_or(8 * bs).min(65528);
    let mut blocks = p.blocks;
    let mut r_blocks = p.reserved_blocks;
    if r_blocks >= blocks {
        return Err(MkfsError::Geometry(
            "the reserved blocks leave no room".into(),
        ));
    }
    let inode_size = u64::from(p.inode_size);
    loop {
        let groups = (blocks.saturating_sub(first_data_block)).div_ceil(bpg);
        if groups == 0 {
            return Err(MkfsError::Geometry(format!(
                "{blocks} blocks are too few for a filesystem"
            )));
        }
        let desc_size = if bit64 { 64 } else { 32 };
        let per_block = bs / desc_size;
        let desc_blocks = groups.div_ceil(per_block);
        let divisor = if bs >= 4096 { 1 } else { 4096 / bs };
        let mut inodes = if p.inodes != 0 {
            p.inodes
        } else if bit64 && blocks / divisor >= 1 << 32 {
            u64::from(u32::MAX)
        } else {
            blocks / divisor
        };
        inodes = inodes.max(u64::from(FIRST_INO) + 1);
        let mut ipg = inodes.div_ceil(groups);
        if ipg > bs * 8 {
            if bpg >= 256 {
                bpg -= 8;
                blocks = p.blocks;
                continue;
            }
            return Err(MkfsError::Geometry(
                "too many inodes for the filesystem's groups".into(),
            ));
        }
        ipg = ipg.min((1 << 16) - bs / inode_size);
        let (ipg, ibpg) = loop {
            let ibpg = (ipg * inode_size).div_ceil(bs);
            let mut rounded = (ibpg * bs / inode_size).max(8);
            rounded &= !7;
            let ibpg = (rounded * inode_size).div_ceil(bs);
            if rounded * groups > u64::from(u32::MAX) {
                ipg -= 1;
                continue;
            }
            break (rounded, ibpg);
        };
        // Groups hold inodes in eights, so a tiny volume or `-N` can round below the
        // filesystem's own inodes, lost+found (11) the last of them; mke2fs fails there,
        // creating lost+found.
        if ipg * groups < u64::from(FIRST_INO) {
            return Err(MkfsError::Geometry(format!(
                "{} inodes leave none for lost+found (inode {FIRST_INO}): ask for more with -N, or give a larger SIZE",
                ipg * groups
            )));
        }
        let rsv = if p.features.has_compat(CompatFeatures::RESIZE_INODE) {
            reserved_gdt_blocks(blocks, first_data_block, bpg, per_block, desc_blocks, bs)
        } else {
            0
        };
        if rsv + desc_blocks > bpg * 3 / 4 {
            return Err(MkfsError::Unsupported(
                "meta_bg, which mke2fs turns on when the descriptors would fill most of a group (use a larger block size)".into(),
            ));
        }
        if 3 + ibpg + rsv + desc_blocks > bpg {
            return Err(MkfsError::Geometry(
                "too many inodes for the filesystem's groups".into(),
            ));
        }
        sb.blocks_per_group = bpg as u32;
        sb.clusters_per_group = bpg as u32;
        sb.inodes_per_group = ipg as u32;
        sb.reserved_gdt_blocks = rsv as u16;
        sb.blocks_count_lo = blocks as u32;
        sb.blocks_count_hi = (blocks >> 32) as u32;
        let mut overhead = 2 + ibpg;
        if sb.group_has_superblock((groups - 1) as u32) {
            overhead += 1 + desc_blocks + rsv;
        }
        let rem = (blocks - first_data_block) % bpg;
        if groups == 1 && rem != 0 && rem < overhead {
            return Err(MkfsError::Geometry(format!(
                "{blocks} blocks are too few for the filesystem's own structures"
            )));
        }
        if rem != 0 && rem < overhead + 50 {
            let ratio = 100.0 * p.reserved_blocks as f64 / p.blocks as f64;
            blocks -= rem;
            r_blocks = (ratio * blocks as f64 / 100.0) as u64;
            continue;
        }
        sb.inodes_count = (ipg * groups) as u32;
        sb.r_blocks_count_lo = r_blocks as u32;
        sb.r_blocks_count_hi = (r_blocks >> 32) as u32;
        sb.flags = FLAGS_SIGNED_HASH;
        let mut layout = Layout {
            sb,
            descriptors: vec![GroupDescriptor::decode(&[0; 64]); groups as usize],
            map: BlockMap::new(blocks, first_data_block),
            desc_blocks,
            inode_blocks_per_group: ibpg,
        };
        reserve_inodes_and_super(&mut layout);
        allocate_tables(&mut layout)?;
        return Ok(layout);
    }
}

/// The group flags and `bg_itable_unused` `ext2fs_initialize` starts from, and each
/// group's superblock and descriptor copies marked in use (`ext2fs_reserve_super_and_bgd`).
fn reserve_inodes_and_super(layout: &mut Layout) {
    let csum = layout.desc_csum();
    let geometry = Geometry::new(&layout.sb);
    let groups = layout.groups();
    let ipg = layout.sb.inodes_per_group;
    let mut reserved = FIRST_INO;
    for g in 0..groups {
        if csum {
            let desc = &mut layout.descriptors[g as usize];
            if g != groups - 1 {
                desc.flags |= BG_BLOCK_UNINIT;
            }
            desc.flags |= BG_INODE_UNINIT;
            let mut unused = ipg;
            if reserved > 0 {
                if unused > reserved {
                    unused -= reserved;
                    reserved = 0;
                } else {
                    reserved -= unused;
                    unused = 0;
                }
            }
            desc.set_itable_unused(unused);
        }
        let run = geometry.base_metadata(g);
        let end = (run.start + run.len).min(layout.sb.blocks_count());
        layout.map.mark_range(run.start, end - run.start);
    }
}

/// `ext2fs_allocate_tables`: each group's block bitmap, inode bitmap and inode table.
fn allocate_tables(layout: &mut Layout) -> Result<()> {
    for g in 0..layout.groups() {
        allocate_group_tables(layout, g)?;
    }
    Ok(())
}

fn no_room(group: u32, what: &str) -> MkfsError {
    MkfsError::Geometry(format!("no room for the {what} of group {group}"))
}

/// `flexbg_offset`: where the next table of a flex group goes, keeping the flex group's
/// tables of one kind contiguous.
fn flexbg_offset(layout: &Layout, group: u32, start: u64, rem_groups: u64, elem_size: u64) -> u64 {
    let flexbg_size = 1u32 << layout.sb.log_groups_per_flex;
    let flexbg = group / flexbg_size;
    let size = (rem_groups * elem_size).min(u64::from(layout.sb.blocks_per_group) / 4);
    if start != 0 && start < layout.sb.blocks_count() {
        if let Some(b) = layout.map.free_run(start, start + size, elem_size) {
            return b;
        }
    }
    let start = layout.group_first_block(flexbg_size * flexbg);
    let last_group = (group | (flexbg_size - 1)).min(layout.groups() - 1);
    let last = layout.group_last_block(last_group);
    layout
        .map
        .free_run(start, last, size)
        .or_else(|| layout.map.free_run(start, last, elem_size))
        .or_else(|| layout.map.free_run(0, last, elem_size))
        .unwrap_or(0)
}

/// `ext2fs_allocate_group_table`.
fn allocate_group_tables(layout: &mut Layout, group: u32) -> Result<()> {
    let group_first = layout.group_first_block(group);
    let mut last = layout.group_last_block(group);
    let flex = layout.sb.incompat().contains(IncompatFeatures::FLEX_BG)
        && layout.sb.log_groups_per_flex != 0;
    let flexbg_size = 1u32 << layout.sb.log_groups_per_flex;
    let (mut last_group, mut rem_groups) = (group, 0);
    if flex {
        last_group = (group | (flexbg_size - 1)).min(layout.groups() - 1);
        rem_groups = u64::from(last_group - group + 1);
    }
    let ibpg = layout.inode_blocks_per_group;
    let mut start = group_first;
    let mut table_offset = u64::from(flexbg_size);
    if flex {
        let mut prev = 0;
        if group % flexbg_size != 0 {
            prev = layout.descriptors[group as usize - 1].block_bitmap() + 1;
        } else if last_group == layout.groups() - 1 {
            // The last flex group keeps its tables contiguous.
            table_offset = u64::from(last_group & (flexbg_size - 1));
            table_offset = if table_offset == 0 {
                u64::from(flexbg_size)
            } else {
                table_offset + 1
            };
        }
        start = flexbg_offset(layout, group, prev, rem_groups, 1);
        last = layout.group_last_block(last_group);
    }
    let block_bitmap = place_bitmap(
        layout,
        (start, group_first, last),
        flex,
        group,
        "block bitmap",
    )?;
    let desc = &mut layout.descriptors[group as usize];
    desc.block_bitmap_lo = block_bitmap as u32;
    desc.block_bitmap_hi = (block_bitmap >> 32) as u32;

    if flex {
        let prev = if group % flexbg_size != 0 {
            layout.descriptors[group as usize - 1].inode_bitmap() + 1
        } else {
            block_bitmap + table_offset
        };
        start = flexbg_offset(layout, group, prev, rem_groups, 1);
        last = layout.group_last_block(last_group);
    }
    let inode_bitmap = place_bitmap(
        layout,
        (start, group_first, last),
        flex,
        group,
        "inode bitmap",
    )?;
    let desc = &mut layout.descriptors[group as usize];
    desc.inode_bitmap_lo = inode_bitmap as u32;
    desc.inode_bitmap_hi = (inode_bitmap >> 32) as u32;

    let mut table_start = group_first;
    if flex {
        let prev = if group % flexbg_size != 0 {
            layout.descriptors[group as usize - 1].inode_table() + ibpg
        } else {
            inode_bitmap + table_offset
        };
        table_start = flexbg_offset(layout, group, prev, rem_groups, ibpg);
        last = layout.group_last_block(last_group);
    }
    let inode_table = layout
        .map
        .free_run(table_start, last, ibpg)
        .ok_or_else(|| no_room(group, "inode table"))?;
    place_table(layout, inode_table, ibpg, flex);
    let desc = &mut layout.descriptors[group as usize];
    desc.inode_table_lo = inode_table as u32;
    desc.inode_table_hi = (inode_table >> 32) as u32;
    Ok(())
}

/// Places one bitmap block of `group`: the first free block from `start` to `last`, else
/// from the group's first block (`group_first`), as libext2fs's `ext2fs_allocate_group_table`
/// looks for each bitmap.
fn place_bitmap(
    layout: &mut Layout,
    (start, group_first, last): (u64, u64, u64),
    flex: bool,
    group: u32,
    what: &str,
) -> Result<u64> {
    let block = layout
        .map
        .free_run(start, last, 1)
        .or_else(|| layout.map.free_run(group_first, last, 1))
        .ok_or_else(|| no_room(group, what))?;
    place_table(layout, block, 1, flex);
    Ok(block)
}

/// Marks a table's blocks used; under flex_bg the groups they land in have initialized
/// bitmaps from now on (the tables are allocations there, not the group's own layout).
fn place_table(layout: &mut Layout, start: u64, len: u64, flex: bool) {
    for b in start..start + len {
        if flex {
            layout.use_block(b);
        } else {
            layout.map.mark(b);
        }
    }
}

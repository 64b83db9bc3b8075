//! The group descriptor table as it stands: read and checked at open, changed by commits
//! (free counts, flags, bitmap checksums), and encoded back into descriptor blocks as bytes
//! for write-back to write.

use e4_format::geometry::Geometry;
use e4_format::group_descriptor::{GroupChecksum, GroupDescriptor, GroupSeed, BG_INODE_UNINIT};
use e4_format::superblock::Superblock;
use e4_format::table::{try_table, try_table_from};
use e4_format::{FormatError, Location, MetadataBlock, Problem, Structure};
use parking_lot::{Mutex, MutexGuard};

use crate::buffer::store::BlockStore;
use crate::error::Result;

pub(crate) struct GroupDescriptors {
    table: Box<[Mutex<GroupDescriptor>]>,
    /// `s_desc_size`: 32 bytes, or 64 with the 64bit feature.
    desc_size: usize,
    /// How descriptors are checksummed when encoded.
    checksum: GroupChecksum,
    /// gdt_csum or metadata_csum: only then do the uninit flags and `bg_itable_unused` mean
    /// anything (e2fsck and the kernel ignore them otherwise).
    checksummed: bool,
}

impl GroupDescriptors {
    /// Reads and checks every group descriptor. A descriptor whose checksum is wrong is
    /// still used (its fields are checked as usual) and recorded in `warnings`: the kernel
    /// mounts such a filesystem read-only (`ext4_check_descriptors`), and so reading goes
    /// on. The blocks are read through the cache, unverified: a descriptor block has no
    /// checksum of its own.
    pub(crate) fn read(
        store: &BlockStore,
        sb: &Superblock,
        geometry: &Geometry,
        verify: bool,
        warnings: &mut Vec<String>,
    ) -> Result<Self> {
        let desc_size = sb.desc_size() as usize;
        let checksum = if verify {
            GroupChecksum::for_superblock(sb)
        } else {
            GroupChecksum::None
        };
        let count = sb.group_count() as u32;
        let blocks = sb.blocks_count();
        let mut table = try_table(
            u64::from(count),
            "the group descriptors",
            Location::Superblock,
        )
        .map_err(FormatError::from)?;
        for group in 0..count {
            let block = store.read(geometry.descriptor_block(group))?;
            let at = geometry.descriptor_offset(group);
            let bytes = &block.bytes()[at..at + desc_size];
            let desc = GroupDescriptor::from_bytes(bytes, group)?;
            let seed = GroupSeed { checksum, group };
            match GroupDescriptor::verify(bytes, seed, Location::Group(group)) {
                Err(e @ FormatError::Checksum { .. }) => warnings.push(e.to_string()),
                verified => verified?,
            }
            for (what, nr) in [
                (Structure::BlockBitmap, desc.block_bitmap()),
                (Structure::InodeBitmap, desc.inode_bitmap()),
                (Structure::InodeTable, desc.inode_table()),
            ] {
                if nr == 0 || nr >= blocks {
                    return Err(FormatError::corrupt(
                        what,
                        Location::Group(group),
                        Problem::OutsideFilesystem { block: nr },
                    )
                    .into());
                }
            }
            table.push(Mutex::new(desc));
        }
        Ok(GroupDescriptors {
            table: table.into(),
            desc_size,
            checksum: GroupChecksum::for_superblock(sb),
            checksummed: sb.has_metadata_csum()
                || sb
                    .ro_compat()
                    .contains(e4_format::features::RoCompatFeatures::GDT_CSUM),
        })
    }

    /// Whether the uninit flags and `bg_itable_unused` are in force.
    pub(crate) fn checksummed(&self) -> bool {
        self.checksummed
    }

    /// Group `group`'s descriptor, locked: commits change it under this lock.
    pub(crate) fn lock(&self, group: u32) -> MutexGuard<'_, GroupDescriptor> {
        self.table[group as usize].lock()
    }

    /// Every descriptor as it stands (copies).
    /// Every group's first inode-table block, in a table reserved fallibly (a group count
    /// is a claim of the superblock).
    pub(crate) fn inode_tables(&self) -> Result<Box<[u64]>> {
        let groups = self.table.len() as u64;
        try_table_from(
            groups,
            "the inode-table locations",
            Location::Superblock,
            |g| self.table[g as usize].lock().inode_table(),
        )
        .map_err(|e| FormatError::from(e).into())
    }

    pub(crate) fn snapshot(&self) -> Vec<GroupDescriptor> {
        self.table.iter().map(|d| d.lock().clone()).collect()
    }

    /// Whether inode `index` of group `group` lies in the part of its inode table that was
    /// never written (`BG_INODE_UNINIT`, or past `bg_itable_unused`): such inodes are not
    /// in use, and their records may hold anything.
    pub(crate) fn past_itable_used(&self, group: u32, index: u32, inodes_per_group: u32) -> bool {
        if !self.checksummed {
            return false;
        }
        let desc = self.lock(group);
        desc.flags & BG_INODE_UNINIT != 0
            || index >= inodes_per_group.saturating_sub(desc.itable_unused())
    }

    /// The free blocks and inodes of every group, summed (the superblock's counts).
    pub(crate) fn free_totals(&self) -> (u64, u64) {
        self.table.iter().fold((0, 0), |(blocks, inodes), d| {
            let d = d.lock();
            (
                blocks + u64::from(d.free_blocks_count()),
                inodes + u64::from(d.free_inodes_count()),
            )
        })
    }

    /// The primary table's blocks that hold the `changed` groups, encoded from the
    /// descriptors as they stand: (block number, contents). Only those blocks: at 16 TiB
    /// the table is 1,024 blocks, and a commit changes a few groups. Bytes past the last
    /// group's descriptor are zero, as mke2fs writes them. Backups are left as mke2fs and
    /// resize wrote them, as the kernel leaves them.
    pub(crate) fn encode_blocks(
        &self,
        geometry: &Geometry,
        block_size: usize,
        changed: impl IntoIterator<Item = u32>,
    ) -> Vec<(u64, Vec<u8>)> {
        let per_block = geometry.descriptors_per_block();
        let groups = geometry.groups();
        let firsts: std::collections::BTreeSet<u32> = changed
            .into_iter()
            .map(|g| g / per_block * per_block)
            .collect();
        firsts
            .into_iter()
            .map(|first| {
                let mut block = vec![0u8; block_size];
                for g in first..(first + per_block).min(groups) {
                    let at = geometry.descriptor_offset(g);
                    let bytes = self.lock(g).to_bytes(g, self.desc_size, &self.checksum);
                    block[at..at + self.desc_size].copy_from_slice(&bytes);
                }
                (geometry.descriptor_block(first), block)
            })
            .collect()
    }
}

//! A commit's bitmaps as bytes: the groups the allocators changed, each with its bitmap
//! sealed and its descriptor updated (free counts, uninit flags, bitmap checksums, unused
//! inode-table tail). Write-back writes the bytes; nothing here touches the device.

use e4_alloc::DirtyGroup;
use e4_format::bitmap::{BitmapBlock, BitmapKind, BitmapSeed};
use e4_format::group_descriptor::{BG_BLOCK_UNINIT, BG_INODE_UNINIT, BG_INODE_ZEROED};
use e4_format::superblock::Superblock;

use crate::space::descriptors::GroupDescriptors;
use crate::space::Space;

/// A bitmap block to write home.
pub(crate) struct BitmapWrite {
    pub block: u64,
    pub bytes: Vec<u8>,
}

/// Inode-table slots that a shrinking `bg_itable_unused` exposes to e2fsck in a table that
/// was never zeroed: the free ones among `from..to` must be zeroed in this commit, so no
/// stale record is read as an inode.
pub(crate) struct ExposedSlots {
    pub group: u32,
    pub from: u32,
    pub to: u32,
    /// The group's inode bitmap (one bit per inode): the set bits are inodes in use.
    pub bitmap: Vec<u8>,
}

/// What the inode allocator changed since the last commit.
pub(crate) struct InodeBitmaps {
    pub groups: Vec<u32>,
    pub writes: Vec<BitmapWrite>,
    pub exposed: Vec<ExposedSlots>,
}

impl Space {
    /// Takes the inode groups changed since the last commit and encodes their bitmaps,
    /// updating their descriptors. Runs with every operation stopped.
    pub(crate) fn encode_inode_bitmaps(
        &self,
        sb: &Superblock,
        descriptors: &GroupDescriptors,
        block_size: usize,
    ) -> InodeBitmaps {
        let ipg = sb.inodes_per_group;
        let seed = BitmapSeed::for_superblock(sb, BitmapKind::Inode);
        let checksummed = descriptors.checksummed();
        let dirty = self.inodes.take_dirty_groups();
        let mut out = InodeBitmaps {
            groups: dirty.iter().map(|(g, _)| *g).collect(),
            writes: Vec::with_capacity(dirty.len()),
            exposed: Vec::new(),
        };
        for (group, snapshot) in dirty {
            let mut desc = descriptors.lock(group);
            let mut block = vec![0xFFu8; block_size];
            block[..snapshot.bitmap.len()].copy_from_slice(&snapshot.bitmap);
            // Bits past the group's inodes are padding, set.
            for bit in ipg as usize..8 * snapshot.bitmap.len() {
                block[bit / 8] |= 1 << (bit % 8);
            }
            if checksummed {
                let exposed_to = ipg - snapshot.itable_unused.min(ipg);
                if desc.flags & BG_INODE_ZEROED == 0 || desc.flags & BG_INODE_UNINIT != 0 {
                    let from = if desc.flags & BG_INODE_UNINIT != 0 {
                        0
                    } else {
                        ipg - desc.itable_unused().min(ipg)
                    };
                    out.exposed.push(ExposedSlots {
                        group,
                        from,
                        to: exposed_to,
                        bitmap: snapshot.bitmap,
                    });
                }
                desc.flags &= !BG_INODE_UNINIT;
                desc.set_itable_unused(snapshot.itable_unused);
            }
            if let Some(seed) = seed {
                let mut sealed = BitmapBlock::of(&desc, BitmapKind::Inode, group);
                sealed.seal(&block, seed);
                sealed.store_in(&mut desc);
            }
            desc.set_free_inodes_count(snapshot.free_inodes);
            desc.set_used_dirs_count(snapshot.used_dirs);
            out.writes.push(BitmapWrite {
                block: desc.inode_bitmap(),
                bytes: block,
            });
        }
        out
    }

    /// Encodes the block groups a commit took (`groups`, with their bitmaps as they stood),
    /// updating their descriptors; returns the writes, in group order.
    pub(crate) fn encode_block_bitmaps(
        &self,
        sb: &Superblock,
        descriptors: &GroupDescriptors,
        groups: Vec<DirtyGroup>,
    ) -> Vec<(u32, BitmapWrite)> {
        let seed = BitmapSeed::for_superblock(sb, BitmapKind::Block);
        groups
            .into_iter()
            .map(|dirty| {
                let mut desc = descriptors.lock(dirty.group);
                desc.flags &= !BG_BLOCK_UNINIT;
                desc.set_free_blocks_count(dirty.free);
                if let Some(seed) = seed {
                    let mut sealed = BitmapBlock::of(&desc, BitmapKind::Block, dirty.group);
                    sealed.seal(&dirty.bitmap, seed);
                    sealed.store_in(&mut desc);
                }
                let write = BitmapWrite {
                    block: desc.block_bitmap(),
                    bytes: dirty.bitmap,
                };
                (dirty.group, write)
            })
            .collect()
    }
}

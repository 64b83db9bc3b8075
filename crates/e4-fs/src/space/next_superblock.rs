//! The superblock as the next commit will write it: marked "not clean" while the
//! filesystem is open for writing, with features the engine turned on, the orphan list's
//! head, and free counts summed from the descriptors when it is encoded.
//!
//! The free counts move by exactly what the descriptors' sums moved since the open: on a
//! healthy image (counts equal to the sums, as mke2fs, e2fsck, the kernel's unmount and e4
//! leave them) they are the sums. On a damaged one, the superblock keeps the disagreement
//! it had, neither more nor less: a group refused as corrupt keeps a descriptor count that
//! may be wrong (e4-alloc's `group_damage`), and summing it into a superblock that was
//! right would be new damage.

use e4_format::features::{CompatFeatures, IncompatFeatures, RoCompatFeatures};
use e4_format::group_descriptor::GroupDescriptor;
use e4_format::superblock::{Superblock, STATE_VALID};
use e4_format::MetadataBlock;
use parking_lot::Mutex;

use crate::space::descriptors::GroupDescriptors;

pub(crate) struct NextSuperblock {
    superblock: Mutex<Superblock>,
    /// What the superblock's free blocks and inodes were over the descriptors' sums at the
    /// open (0 and 0 on a healthy image).
    opened_over_sums: (i128, i128),
}

impl NextSuperblock {
    /// `sb` as a mount changes it: not clean, one more mount, the mount time; `descriptors`
    /// as they were read.
    pub(crate) fn mounted(sb: &Superblock, descriptors: &[GroupDescriptor]) -> Self {
        let (blocks, inodes) = descriptors.iter().fold((0i128, 0i128), |(b, i), d| {
            (
                b + i128::from(d.free_blocks_count()),
                i + i128::from(d.free_inodes_count()),
            )
        });
        let opened_over_sums = (
            i128::from(sb.free_blocks_count()) - blocks,
            i128::from(sb.free_inodes_count) - inodes,
        );
        let mut superblock = sb.clone();
        superblock.state &= !STATE_VALID;
        superblock.mnt_count = superblock.mnt_count.wrapping_add(1);
        superblock.set_mount_time(crate::time::now_seconds_coarse());
        NextSuperblock {
            superblock: Mutex::new(superblock),
            opened_over_sums,
        }
    }

    /// Turns on a compatible feature the filesystem now uses (ext_attr with the first
    /// extended attribute, as `ext4_xattr_update_super_block` does).
    pub(crate) fn add_compat(&self, feature: CompatFeatures) {
        self.superblock.lock().feature_compat |= feature.bits();
    }

    /// Turns on a read-only-compatible feature the filesystem now needs (large_file when a
    /// file reaches 2 GiB, as the kernel does).
    pub(crate) fn add_ro_compat(&self, feature: RoCompatFeatures) {
        self.superblock.lock().feature_ro_compat |= feature.bits();
    }

    /// Sets the head of the on-disk orphan list (`s_last_orphan`).
    pub(crate) fn set_last_orphan(&self, ino: u32) {
        self.superblock.lock().last_orphan = ino;
    }

    /// Marks the filesystem clean, for the unmount's last superblock: valid, and with no
    /// journal to recover (the unmount emptied it first).
    pub(crate) fn mark_clean(&self) {
        let mut sb = self.superblock.lock();
        sb.state |= STATE_VALID;
        sb.feature_incompat &= !IncompatFeatures::RECOVER.bits();
    }

    /// Says, in every superblock written from now on, that the journal may hold committed
    /// transactions (`needs_recovery`): set before the first commit goes to the log.
    pub(crate) fn set_needs_recovery(&self) {
        self.superblock.lock().feature_incompat |= IncompatFeatures::RECOVER.bits();
    }

    /// The superblock's bytes, sealed, with the free counts of the descriptors as they
    /// stand (less what they were off at the open) and this moment as the write time.
    pub(crate) fn encode(&self, descriptors: &GroupDescriptors) -> [u8; Superblock::SIZE] {
        let (free_blocks, free_inodes) = descriptors.free_totals();
        let (blocks_over, inodes_over) = self.opened_over_sums;
        let mut sb = self.superblock.lock();
        let clamp = |sum: u64, over: i128, most: u64| {
            // OK to cast: clamped to a u64 count.
            (i128::from(sum) + over).clamp(0, i128::from(most)) as u64
        };
        let blocks = clamp(free_blocks, blocks_over, sb.blocks_count());
        sb.set_free_blocks_count(blocks);
        // OK to cast: clamped to s_inodes_count, a u32.
        sb.free_inodes_count = clamp(free_inodes, inodes_over, u64::from(sb.inodes_count)) as u32;
        sb.set_write_time(crate::time::now_seconds_coarse());
        let mut bytes = [0u8; Superblock::SIZE];
        sb.encode(&mut bytes);
        Superblock::seal(&mut bytes, ());
        bytes
    }
}

//! The superblock as the next commit will write it: marked "not clean" while the
//! filesystem is open for writing, with features the engine turned on, the orphan list's
//! head, and free counts summed from the descriptors when it is encoded.

use e4_format::features::{CompatFeatures, RoCompatFeatures};
use e4_format::superblock::{Superblock, STATE_VALID};
use e4_format::MetadataBlock;
use parking_lot::Mutex;

use crate::space::descriptors::GroupDescriptors;

pub(crate) struct NextSuperblock {
    superblock: Mutex<Superblock>,
}

impl NextSuperblock {
    /// `sb` as a mount changes it: not clean, one more mount, the mount time.
    pub(crate) fn mounted(sb: &Superblock) -> Self {
        let mut superblock = sb.clone();
        superblock.state &= !STATE_VALID;
        superblock.mnt_count = superblock.mnt_count.wrapping_add(1);
        superblock.set_mount_time(crate::time::now().seconds);
        NextSuperblock {
            superblock: Mutex::new(superblock),
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

    /// Marks the filesystem clean, for the unmount's last superblock.
    pub(crate) fn mark_clean(&self) {
        self.superblock.lock().state |= STATE_VALID;
    }

    /// The superblock's bytes, sealed, with the free counts of the descriptors as they
    /// stand and this moment as the write time.
    pub(crate) fn encode(&self, descriptors: &GroupDescriptors) -> [u8; Superblock::SIZE] {
        let (free_blocks, free_inodes) = descriptors.free_totals();
        let mut sb = self.superblock.lock();
        sb.set_free_blocks_count(free_blocks);
        // OK to cast: the free inodes are at most s_inodes_count, a u32.
        sb.free_inodes_count = free_inodes as u32;
        sb.set_write_time(crate::time::now().seconds);
        let mut bytes = [0u8; Superblock::SIZE];
        sb.encode(&mut bytes);
        Superblock::seal(&mut bytes, ());
        bytes
    }
}

//! Per-flex-group sums of the inode groups' counts (free inodes, directories), so that Orlov
//! reads one flex group in O(1) instead of summing its groups on every directory creation.
//!
//! The holder of a group's lock changes the group's counts and its flex group's sums in the
//! same critical section; groups of one flex group have different locks, so the sums are
//! atomics changed by read-modify-write (never load-then-store, which would lose a concurrent
//! holder's change). With no creation or free in flight the sums equal the groups' counts.

use crate::sync::{AtomicU64, Ordering};

/// One flex group's inode sums, as read (without locks) by placement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlexInodeSummary {
    pub free_inodes: u64,
    pub used_dirs: u64,
}

pub(crate) struct FlexInodeCounts {
    free_inodes: AtomicU64,
    used_dirs: AtomicU64,
}

impl FlexInodeCounts {
    pub(crate) fn new(free_inodes: u64, used_dirs: u64) -> Self {
        FlexInodeCounts {
            free_inodes: AtomicU64::new(free_inodes),
            used_dirs: AtomicU64::new(used_dirs),
        }
    }

    pub(crate) fn summary(&self) -> FlexInodeSummary {
        FlexInodeSummary {
            free_inodes: self.free_inodes.load(Ordering::Relaxed),
            used_dirs: self.used_dirs.load(Ordering::Relaxed),
        }
    }

    /// One inode of the flex group was claimed (by a group-lock holder).
    pub(crate) fn claimed(&self, directory: bool) {
        self.free_inodes.fetch_sub(1, Ordering::Relaxed);
        if directory {
            self.used_dirs.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// A group of the flex group loaded its bitmap, which had `after` free inodes where its
    /// descriptor (and so this sum) counted `before` (by the group-lock holder).
    pub(crate) fn corrected(&self, before: u32, after: u32) {
        if after > before {
            self.free_inodes
                .fetch_add(u64::from(after - before), Ordering::Relaxed);
        } else {
            self.free_inodes
                .fetch_sub(u64::from(before - after), Ordering::Relaxed);
        }
    }

    /// One inode of the flex group was freed (by a group-lock holder).
    pub(crate) fn released(&self, directory: bool) {
        self.free_inodes.fetch_add(1, Ordering::Relaxed);
        if directory {
            self.used_dirs.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

//! Groups whose bitmaps are not trusted: what was wrong, which groups, and the one report
//! per group a caller shows.
//!
//! A bitmap is checked when its group is loaded ([`crate::group_loading`],
//! [`crate::inode_group_loading`]). One that disagrees with its descriptor's free count,
//! or (for blocks) marks free a block of the group's metadata, is damage the allocator
//! cannot repair: either the bitmap lost a bit of something in use (handing that block or
//! inode out would cross-link it) or the descriptor is wrong. The kernel then marks the
//! group corrupt (`EXT4_GROUP_INFO_BBITMAP_CORRUPT` and `_IBITMAP_CORRUPT`, from
//! `ext4_mb_generate_buddy`'s "block bitmap and bg descriptor inconsistent" and
//! `ext4_validate_block_bitmap`); so does e4: the group is never loaded, allocated from or
//! freed into for the rest of this open, nothing of it is written back, and its free
//! space is taken out of the counters and the index. What a free into it would have
//! returned stays in use on disk: a leak e2fsck reclaims, never a cross-link.

use std::fmt;

use crate::free_space_index::AtomicBitset;
use crate::sync::{AtomicU64, Mutex, Ordering};

/// What is wrong with a group's bitmap.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BitmapProblem {
    /// The block bitmap's free blocks and the descriptor's `bg_free_blocks_count` differ.
    BlockCount { bitmap: u32, descriptor: u32 },
    /// The block bitmap marks free a block of the system zone (a superblock or descriptor
    /// copy, reserved GDT, a bitmap, an inode table) that lies in the group.
    MetadataFree { block: u64 },
    /// The inode bitmap's free inodes and the descriptor's `bg_free_inodes_count` differ.
    InodeCount { bitmap: u32, descriptor: u32 },
}

/// A group found corrupt, and why.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GroupDamage {
    pub group: u32,
    pub problem: BitmapProblem,
}

impl GroupDamage {
    /// "block" or "inode": which of the group's bitmaps is not trusted.
    pub fn bitmap(&self) -> &'static str {
        match self.problem {
            BitmapProblem::BlockCount { .. } | BitmapProblem::MetadataFree { .. } => "block",
            BitmapProblem::InodeCount { .. } => "inode",
        }
    }

    /// What is wrong, without the group (for an error that names the group itself).
    pub fn reason(&self) -> String {
        match self.problem {
            BitmapProblem::BlockCount { bitmap, descriptor } => format!(
                "block bitmap and group descriptor inconsistent: {bitmap} vs {descriptor} free \
                 blocks"
            ),
            BitmapProblem::MetadataFree { block } => {
                format!("block bitmap marks metadata block {block} free")
            }
            BitmapProblem::InodeCount { bitmap, descriptor } => format!(
                "inode bitmap and group descriptor inconsistent: {bitmap} vs {descriptor} free \
                 inodes"
            ),
        }
    }
}

impl fmt::Display for GroupDamage {
    /// One line, as the kernel's `ext4_mb_generate_buddy` says it, and what follows.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "group {}: {}; nothing in the group is allocated or freed (run e2fsck)",
            self.group,
            self.reason()
        )
    }
}

/// The corrupt groups of one allocator (block or inode): a bit per group, set under the
/// group's lock when its bitmap is refused and never cleared, and the reports.
pub(crate) struct DamagedGroups {
    corrupt: AtomicBitset,
    /// Every damage found, in the order found, and how many have been taken.
    reports: Mutex<(Vec<GroupDamage>, usize)>,
}

impl DamagedGroups {
    pub(crate) fn new(groups: usize) -> Self {
        DamagedGroups {
            corrupt: AtomicBitset::new(groups),
            reports: Mutex::new((Vec::new(), 0)),
        }
    }

    /// Whether group `g` was found corrupt (read under its lock: set only under it).
    pub(crate) fn contains(&self, g: u32) -> bool {
        self.corrupt.contains(g as usize)
    }

    /// Records `damage` (the caller holds the group's lock and found it first).
    pub(crate) fn mark(&self, damage: GroupDamage) {
        self.corrupt.insert(damage.group as usize);
        self.reports.lock().0.push(damage);
    }

    /// The damage recorded for group `g`.
    pub(crate) fn of(&self, g: u32) -> Option<GroupDamage> {
        self.reports.lock().0.iter().find(|d| d.group == g).copied()
    }

    /// Every damage found.
    pub(crate) fn all(&self) -> Vec<GroupDamage> {
        self.reports.lock().0.clone()
    }

    /// The damage found since the last call.
    pub(crate) fn take_new(&self) -> Vec<GroupDamage> {
        let mut reports = self.reports.lock();
        let (found, taken) = &mut *reports;
        let new = found[*taken..].to_vec();
        *taken = found.len();
        new
    }

    pub(crate) fn memory_bytes(&self) -> usize {
        self.corrupt.memory_bytes() + std::mem::size_of::<Self>()
    }
}

/// Units a counter still counts that do not exist: a corrupt group's free count that was
/// already promised when the group was refused. The promise fails and gives its units
/// back; they, and the next units returned, pay this off before the counter sees them, so
/// the counter ends exact. Almost always 0: one read on the return path.
#[derive(Default)]
pub(crate) struct Unfounded(AtomicU64);

impl Unfounded {
    /// Notes `n` more units counted that do not exist.
    pub(crate) fn owe(&self, n: u64) {
        if n > 0 {
            self.0.fetch_add(n, Ordering::AcqRel);
        }
    }

    /// Pays off what it can from `n` returned units; returns the rest, for the counter.
    pub(crate) fn pay(&self, n: u64) -> u64 {
        let mut owed = self.0.load(Ordering::Acquire);
        loop {
            if owed == 0 {
                return n;
            }
            let paid = owed.min(n);
            match self.0.compare_exchange_weak(
                owed,
                owed - paid,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return n - paid,
                Err(seen) => owed = seen,
            }
        }
    }
}

//! Lazy inode groups: what the inode allocator holds before a group's bitmap is needed, how
//! the bitmap arrives, and what write-back takes away (the inode side of
//! [`crate::group_loading`]).
//!
//! A 16 TiB volume has 131,072 groups of 8,192 inodes: their bitmaps are 128 MiB, and reading
//! them all would cost a second of I/O before the first creation. So a group starts as its
//! descriptor's counts (`bg_free_inodes_count`, `bg_used_dirs_count`, `bg_itable_unused`,
//! `INODE_UNINIT`), 64 bytes in all; its bitmap is read through an [`InodeBitmapSource`]
//! (e4-fs reads and verifies the block) the first time the group's lock is taken to claim
//! or free there, or computed when the group was never initialised. Placement reads the
//! descriptor's counts until then. A bitmap whose free inodes differ from the descriptor's
//! `bg_free_inodes_count` is not believed: the group is corrupt ([`crate::group_damage`]),
//! never loaded, its free inodes taken out of its flex group's sums and the free-inode
//! counter, and the load answers [`InodeError::GroupCorrupt`] so the claim goes elsewhere.
//! Changed groups are remembered in a bitset, so write-back visits only them.

use crate::block_allocator::GroupLocking;
use crate::group_damage::{BitmapProblem, GroupDamage};
use crate::inode_allocator::{InodeAllocator, InodeError, InodeGeometry};
use crate::inode_group::{InodeBitmap, InodeGroup, InodeGroupSnapshot, LockedInodeGroup};
use crate::sync::MutexGuard;

/// What a group descriptor says of an inode group before its bitmap is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InodeGroupSummary {
    /// `bg_free_inodes_count`.
    pub free_inodes: u32,
    /// `bg_used_dirs_count`.
    pub used_dirs: u32,
    /// `bg_itable_unused`: inodes at the end of the group's table never handed out.
    pub itable_unused: u32,
    /// `INODE_UNINIT`: the bitmap was never written; every inode but the reserved ones is
    /// free.
    pub uninit: bool,
}

/// Where a group's on-disk inode bitmap comes from: e4-fs reads the block and verifies its
/// checksum. The error says what went wrong, for [`InodeError::BitmapUnreadable`].
pub trait InodeBitmapSource: Send + Sync {
    fn inode_bitmap(&self, group: u32) -> Result<Vec<u8>, String>;
}

impl<F: Fn(u32) -> Result<Vec<u8>, String> + Send + Sync> InodeBitmapSource for F {
    fn inode_bitmap(&self, group: u32) -> Result<Vec<u8>, String> {
        self(group)
    }
}

impl InodeAllocator {
    /// An allocator over a volume whose groups are described by `summary(group)` (from
    /// their descriptors) and whose inode bitmaps are read from `source` when first needed.
    /// Reads no bitmap. Inodes below `first_inode` are never handed out, whatever the
    /// bitmaps say; counts larger than a group can hold are taken as the most it can.
    pub fn open(
        geometry: InodeGeometry,
        locking: GroupLocking,
        counter_slots: usize,
        summary: impl Fn(u32) -> InodeGroupSummary,
        source: impl InodeBitmapSource + 'static,
    ) -> Self {
        let geometry = geometry.clamped();
        let groups = (0..geometry.groups)
            .map(|g| {
                let s = summary(g);
                let most = geometry
                    .numbered_in(g)
                    .saturating_sub(geometry.reserved_in(g));
                InodeGroup::unloaded(
                    s.free_inodes.min(most),
                    s.used_dirs.min(geometry.inodes_per_group),
                    s.itable_unused,
                    s.uninit,
                )
            })
            .collect();
        Self::from_groups(geometry, locking, counter_slots, groups, Box::new(source))
    }

    /// Locks group `g` through `guard` and loads its bitmap if it is not loaded yet, checked
    /// against the descriptor's free count; a group found corrupt now or before answers
    /// [`InodeError::GroupCorrupt`]. Counters are corrected through `slot`.
    pub(crate) fn loaded<'a>(
        &'a self,
        g: u32,
        mut guard: MutexGuard<'a, Option<Box<InodeBitmap>>>,
        slot: usize,
    ) -> Result<LockedInodeGroup<'a>, InodeError> {
        let group = &self.groups[g as usize];
        if guard.is_none() {
            if self.damaged.contains(g) {
                // OK to unwrap: a group is marked corrupt only with its report recorded.
                return Err(InodeError::GroupCorrupt(self.damaged.of(g).unwrap()));
            }
            let geo = &self.geometry;
            let bytes = if group.is_uninit() {
                vec![0u8; geo.inodes_per_group.div_ceil(8) as usize]
            } else {
                self.source
                    .inode_bitmap(g)
                    .map_err(|reason| InodeError::BitmapUnreadable { group: g, reason })?
            };
            let bitmap = InodeBitmap::from_bitmap(
                &bytes,
                geo.inodes_per_group,
                geo.reserved_in(g),
                geo.numbered_in(g),
                group.descriptor_itable_unused(),
            );
            let actual = bitmap.free();
            let counted = group.free();
            if actual != counted {
                // Its free inodes leave the flex sums, placement (a count of 0) and the
                // counter (as many as are not promised yet).
                let damage = GroupDamage {
                    group: g,
                    problem: BitmapProblem::InodeCount {
                        bitmap: actual,
                        descriptor: counted,
                    },
                };
                self.damaged.mark(damage);
                group.refuse();
                self.flexes.corrected(self.flex_of(g) as usize, counted, 0);
                let taken = self.free_inodes.take_up_to(slot, u64::from(counted));
                self.unfounded.owe(u64::from(counted) - taken);
                return Err(InodeError::GroupCorrupt(damage));
            }
            group.install(&mut guard, bitmap);
        }
        // OK to unwrap: loaded just above, or already.
        Ok(LockedInodeGroup::new(group, guard, g, &self.dirty).unwrap())
    }

    /// Groups whose inode bitmap changed since the last [`Self::take_dirty_groups`].
    pub fn dirty_group_count(&self) -> u64 {
        self.dirty.count()
    }

    /// Write-back: every group changed since the last call, with its bitmap and counts, each
    /// marked clean under its lock as it is read. A claim or free that lands after a group's
    /// snapshot marks it dirty again, so it is in the next call's result; one that lands
    /// before is in this snapshot. Visits only the changed groups (a bitset over groups,
    /// searched a word at a time).
    pub fn take_dirty_groups(&self) -> Vec<(u32, InodeGroupSnapshot)> {
        let mut out = Vec::new();
        let (mut at, mut words) = (0, 0);
        let groups = self.geometry.groups as usize;
        while let Some(g) = self.dirty.find_next(at, groups, &mut words) {
            at = g + 1;
            let guard = self.groups[g].lock(&self.stats.group_locks);
            // A group is marked dirty only by a change, and so only once loaded.
            let snapshot = LockedInodeGroup::new(&self.groups[g], guard, g as u32, &self.dirty)
                .and_then(|locked| locked.take_dirty_snapshot());
            if let Some(snapshot) = snapshot {
                out.push((g as u32, snapshot));
            }
        }
        out
    }

    /// Groups whose bitmaps are in memory.
    pub fn loaded_groups(&self) -> usize {
        self.groups
            .iter()
            .filter(|g| g.lock(&self.stats.group_locks).is_some())
            .count()
    }

    /// Bytes this allocator holds: fixed per-group and per-flex-group state, the dirty set,
    /// and each loaded group's bitmap (an accounting of its own structures, for the 16 TiB
    /// bound; allocator overhead of the heap is not included).
    pub fn memory_bytes(&self) -> usize {
        let loaded: usize = self
            .groups
            .iter()
            .map(|g| {
                g.lock(&self.stats.group_locks)
                    .as_ref()
                    .map_or(0, |b| b.memory_bytes())
            })
            .sum();
        std::mem::size_of::<Self>()
            + std::mem::size_of_val(&*self.groups)
            + self.flexes.memory_bytes()
            + self.dirty.memory_bytes()
            + self.damaged.memory_bytes()
            + loaded
    }
}

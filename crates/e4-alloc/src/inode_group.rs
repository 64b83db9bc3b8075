//! One group's inodes: the inode bitmap, the free-inode and used-directory counts, and the
//! claim of a free inode (requirement S3).
//!
//! A group is its descriptor's counts (a few dozen bytes) until its bitmap is first needed
//! (see [`crate::inode_group_loading`]); the bitmap then lives behind the group's lock. The
//! counts and a first-free hint are atomics that only the lock holder writes, so placement
//! and the scan read them without the lock to pick a group worth locking and a place to
//! start. The claim itself is a find-and-set under the lock: while the lock is held nothing
//! else changes the bitmap, so one search either takes a free bit or proves the group full.
//! There is no test-and-set outside the lock to lose and retry (the livelock ext4 had
//! before 4.14).

use crate::block_group::words_from_bitmap;
use crate::dirty_groups::DirtyGroups;
use crate::inode_flex_counts::FlexInodeCounts;
use crate::instrumented_lock::InstrumentedMutex;
use crate::stats::{Counter, LockStats};
use crate::sync::{AtomicBool, AtomicU32, MutexGuard, Ordering};

const BITS: u32 = 64;

/// What a group holds, for persisting to its descriptor and bitmap block. A group written
/// back has a real bitmap: the caller clears its `INODE_UNINIT` flag.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InodeGroupSnapshot {
    /// The inode bitmap, `inodes_per_group / 8` bytes (bit set = in use).
    pub bitmap: Vec<u8>,
    pub free_inodes: u32,
    pub used_dirs: u32,
    /// Inodes past the last one ever handed out (`bg_itable_unused`): lowered when a claim
    /// lands in the unused tail, never raised by a free (as ext4 keeps it, so e2fsck never
    /// finds an in-use inode in the unused area).
    pub itable_unused: u32,
}

/// A freed inode that was not in use, or a directory count that would go negative.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct NotInUse;

/// A loaded group's bitmap and the one count only it knows. Lives behind the group's lock.
pub(crate) struct InodeBitmap {
    /// One bit per inode, set when in use; bits past `inodes` set.
    words: Box<[u64]>,
    inodes: u32,
    itable_unused: u32,
}

impl InodeBitmap {
    /// A group of `inodes` inodes from its on-disk bitmap (bytes past the group ignored,
    /// missing bytes taken as in use), with `reserved` leading inodes forced in use (group
    /// 0's reserved inodes, which are never handed out even if a bitmap says they are free)
    /// and every inode from index `numbered` on (those whose number would not fit 32 bits).
    /// `itable_unused` is the descriptor's, lowered if an inode in the tail is in use.
    pub(crate) fn from_bitmap(
        bitmap: &[u8],
        inodes: u32,
        reserved: u32,
        numbered: u32,
        itable_unused: u32,
    ) -> Self {
        let mut words = words_from_bitmap(bitmap, inodes);
        let forced = (0..reserved.min(inodes)).chain(numbered.min(inodes)..inodes);
        for index in forced {
            words[(index / BITS) as usize] |= 1 << (index % BITS);
        }
        let mut loaded = InodeBitmap {
            words: words.into_boxed_slice(),
            inodes,
            itable_unused: 0,
        };
        let last_used = (0..inodes).rev().find(|&i| loaded.is_used(i));
        loaded.itable_unused = itable_unused.min(inodes - last_used.map_or(0, |i| i + 1));
        loaded
    }

    /// Free inodes in the bitmap.
    pub(crate) fn free(&self) -> u32 {
        let used: u32 = self.words.iter().map(|w| w.count_ones()).sum();
        let padding = self.words.len() as u32 * BITS - self.inodes;
        self.inodes - (used - padding)
    }

    /// The first clear bit at or after `from`, wrapping around to the start.
    pub(crate) fn find_free(&self, from: u32, words: &mut u64) -> Option<u32> {
        let n = self.words.len() as u32;
        if n == 0 {
            return None;
        }
        let from = from.min(self.inodes.saturating_sub(1));
        let first_word = from / BITS;
        for step in 0..=n {
            let w = (first_word + step) % n;
            *words += 1;
            let mut used = self.words[w as usize];
            if step == 0 {
                // Bits below `from` in the first word are looked at last, after wrapping.
                used |= (1u64 << (from % BITS)) - 1;
            } else if step == n {
                used |= !((1u64 << (from % BITS)) - 1);
            }
            if used != !0 {
                return Some(w * BITS + (!used).trailing_zeros());
            }
        }
        None
    }

    fn is_used(&self, index: u32) -> bool {
        self.words[(index / BITS) as usize] & (1 << (index % BITS)) != 0
    }

    /// How many of the inodes `from..to` are in use (indexes past the group count as in
    /// use, as their bits are set).
    pub(crate) fn used_between(&self, from: u32, to: u32) -> u32 {
        (from..to.min(self.inodes))
            .filter(|&i| self.is_used(i))
            .count() as u32
            + to.saturating_sub(self.inodes.max(from))
    }

    /// Bytes the loaded bitmap holds.
    pub(crate) fn memory_bytes(&self) -> usize {
        std::mem::size_of::<Self>() + self.words.len() * std::mem::size_of::<u64>()
    }

    /// Test support: marks every inode in use in the bitmap alone, leaving the counts as they
    /// were (a corrupt volume whose counts and bitmap disagree).
    #[cfg(all(test, not(loom)))]
    pub(crate) fn corrupt_all_used(&mut self) {
        self.words.fill(!0);
    }
}

/// One inode group. Until loaded, its counts are the descriptor's. Aligned to a cache line
/// so that creators in neighbouring groups do not share one; 64 bytes, not the 128 of
/// `CachePadded`, keeps 131,072 groups (16 TiB) at 8 MiB.
#[repr(align(64))]
pub(crate) struct InodeGroup {
    /// `None` until the bitmap is first needed.
    bitmap: InstrumentedMutex<Option<Box<InodeBitmap>>>,
    /// Written only under the lock; read without it by placement heuristics.
    free: AtomicU32,
    used_dirs: AtomicU32,
    /// No inode below this index is free. Written under the lock.
    first_free: AtomicU32,
    /// `bg_itable_unused` as the descriptor had it (the loaded bitmap keeps the live value).
    descriptor_itable_unused: u32,
    /// `INODE_UNINIT`: the on-disk bitmap was never written; it is computed, not read.
    uninit: bool,
    /// Whether `bitmap` holds the bitmap (set once, under the lock; a loaded inode bitmap
    /// is never dropped), for a check that needs no lock.
    has_bitmap: AtomicBool,
}

/// The group's lock, held, with its bitmap loaded: the only way to change the group.
pub(crate) struct LockedInodeGroup<'a> {
    group: &'a InodeGroup,
    guard: MutexGuard<'a, Option<Box<InodeBitmap>>>,
    /// The group's number, and the allocator's set of groups changed since write-back.
    number: u32,
    dirty: &'a DirtyGroups,
}

impl InodeGroup {
    /// A group known only by its descriptor's counts.
    pub(crate) fn unloaded(
        free: u32,
        used_dirs: u32,
        itable_unused: u32,
        uninit: bool,
    ) -> InodeGroup {
        InodeGroup {
            bitmap: InstrumentedMutex::new(None),
            free: AtomicU32::new(free),
            used_dirs: AtomicU32::new(used_dirs),
            first_free: AtomicU32::new(0),
            descriptor_itable_unused: itable_unused,
            uninit,
            has_bitmap: AtomicBool::new(false),
        }
    }

    /// A group whose bitmap is already loaded.
    pub(crate) fn loaded(bitmap: InodeBitmap, used_dirs: u32) -> InodeGroup {
        let group = InodeGroup::unloaded(bitmap.free(), used_dirs, bitmap.itable_unused, false);
        group.first_free.store(
            bitmap.find_free(0, &mut 0).unwrap_or(bitmap.inodes),
            Ordering::Relaxed,
        );
        *group.bitmap.lock(&LockStats::default()) = Some(Box::new(bitmap));
        group.has_bitmap.store(true, Ordering::Release);
        group
    }

    /// Whether the bitmap is loaded, without the lock.
    pub(crate) fn has_bitmap(&self) -> bool {
        self.has_bitmap.load(Ordering::Acquire)
    }

    /// Free inodes as of the last change (exact under the lock).
    pub(crate) fn free(&self) -> u32 {
        self.free.load(Ordering::Relaxed)
    }

    pub(crate) fn used_dirs(&self) -> u32 {
        self.used_dirs.load(Ordering::Relaxed)
    }

    pub(crate) fn is_uninit(&self) -> bool {
        self.uninit
    }

    pub(crate) fn descriptor_itable_unused(&self) -> u32 {
        self.descriptor_itable_unused
    }

    /// Where a claim should start searching, read without the lock: `None` if the group
    /// looks full. A hint that may be stale by the time the caller locks.
    pub(crate) fn hint(&self) -> Option<u32> {
        (self.free() > 0).then(|| self.first_free.load(Ordering::Relaxed))
    }

    pub(crate) fn lock(&self, stats: &LockStats) -> MutexGuard<'_, Option<Box<InodeBitmap>>> {
        self.bitmap.lock(stats)
    }

    pub(crate) fn try_lock(
        &self,
        stats: &LockStats,
    ) -> Option<MutexGuard<'_, Option<Box<InodeBitmap>>>> {
        self.bitmap.try_lock(stats)
    }

    /// Publishes a group whose bitmap was refused as holding no free inode (under the
    /// lock), so placement and the scan pass it over.
    pub(crate) fn refuse(&self) {
        self.free.store(0, Ordering::Relaxed);
    }

    /// Installs a freshly loaded bitmap (under the lock) and publishes its counts; returns
    /// the free count the group had published before (the descriptor's).
    pub(crate) fn install(
        &self,
        guard: &mut MutexGuard<'_, Option<Box<InodeBitmap>>>,
        bitmap: InodeBitmap,
    ) -> u32 {
        let first = bitmap.find_free(0, &mut 0).unwrap_or(bitmap.inodes);
        self.first_free.store(first, Ordering::Relaxed);
        let before = self.free.swap(bitmap.free(), Ordering::Relaxed);
        **guard = Some(Box::new(bitmap));
        self.has_bitmap.store(true, Ordering::Release);
        before
    }
}

impl<'a> LockedInodeGroup<'a> {
    /// The locked group `number`, whose bitmap `guard` holds (loaded). `None` if it is not
    /// loaded.
    pub(crate) fn new(
        group: &'a InodeGroup,
        guard: MutexGuard<'a, Option<Box<InodeBitmap>>>,
        number: u32,
        dirty: &'a DirtyGroups,
    ) -> Option<Self> {
        guard.is_some().then_some(LockedInodeGroup {
            group,
            guard,
            number,
            dirty,
        })
    }

    fn bitmap(&self) -> &InodeBitmap {
        // OK to unwrap: a LockedInodeGroup is only made with its bitmap loaded.
        self.guard.as_deref().unwrap()
    }

    fn bitmap_mut(&mut self) -> &mut InodeBitmap {
        // OK to unwrap: as in `bitmap`.
        self.guard.as_deref_mut().unwrap()
    }

    /// Test support: see [`InodeBitmap::corrupt_all_used`].
    #[cfg(all(test, not(loom)))]
    pub(crate) fn corrupt_all_used(&mut self) {
        self.bitmap_mut().corrupt_all_used();
    }

    /// Notes that the group changed since write-back. The bit is read first: it is shared
    /// with 63 other groups, and only the first change after a write-back needs to write it.
    /// It is set and cleared only under this group's lock, so a snapshot and the clearing
    /// of the bit are one step that no claim can fall between.
    fn mark_dirty(&self) {
        self.dirty.insert(self.number as usize);
    }

    /// Takes the first free inode at or after `hint` (wrapping), or reports the group full.
    /// One step: with the lock held, the search cannot be overtaken. The sums of `flex` (the
    /// group's flex group) change with the group, under the same lock.
    pub(crate) fn claim(
        &mut self,
        hint: u32,
        directory: bool,
        flexes: &FlexInodeCounts,
        flex: usize,
        words: &Counter,
    ) -> Option<u32> {
        let mut scanned = 0;
        let found = self.bitmap().find_free(hint, &mut scanned);
        words.add(scanned);
        let index = found?;
        let bitmap = self.bitmap_mut();
        bitmap.words[(index / BITS) as usize] |= 1 << (index % BITS);
        let inodes = bitmap.inodes;
        if index >= inodes - bitmap.itable_unused {
            bitmap.itable_unused = inodes - index - 1;
        }
        let g = self.group;
        g.free.store(g.free() - 1, Ordering::Relaxed);
        if directory {
            g.used_dirs.store(g.used_dirs() + 1, Ordering::Relaxed);
        }
        flexes.claimed(flex, directory);
        self.mark_dirty();
        if index == g.first_free.load(Ordering::Relaxed) {
            let next = self.bitmap().find_free(index, &mut 0).unwrap_or(inodes);
            g.first_free.store(next, Ordering::Relaxed);
        }
        Some(index)
    }

    /// Returns inode `index` to the group (and to the sums of `flex`, its flex group).
    pub(crate) fn release(
        &mut self,
        index: u32,
        directory: bool,
        flexes: &FlexInodeCounts,
        flex: usize,
    ) -> Result<(), NotInUse> {
        let g = self.group;
        let bitmap = self.bitmap_mut();
        if index >= bitmap.inodes || !bitmap.is_used(index) || (directory && g.used_dirs() == 0) {
            return Err(NotInUse);
        }
        bitmap.words[(index / BITS) as usize] &= !(1 << (index % BITS));
        g.free.store(g.free() + 1, Ordering::Relaxed);
        if directory {
            g.used_dirs.store(g.used_dirs() - 1, Ordering::Relaxed);
        }
        flexes.released(flex, directory);
        self.mark_dirty();
        if index < g.first_free.load(Ordering::Relaxed) {
            g.first_free.store(index, Ordering::Relaxed);
        }
        Ok(())
    }

    /// The group's state, for write-back.
    pub(crate) fn snapshot(&self) -> InodeGroupSnapshot {
        let bitmap = self.bitmap();
        let mut bytes: Vec<u8> = bitmap.words.iter().flat_map(|w| w.to_le_bytes()).collect();
        bytes.truncate(bitmap.inodes.div_ceil(8) as usize);
        InodeGroupSnapshot {
            bitmap: bytes,
            free_inodes: self.group.free(),
            used_dirs: self.group.used_dirs(),
            itable_unused: bitmap.itable_unused,
        }
    }

    /// The group's state if it changed since the last call, marking it clean in the same
    /// critical section.
    pub(crate) fn take_dirty_snapshot(&self) -> Option<InodeGroupSnapshot> {
        let n = self.number as usize;
        if !self.dirty.contains(n) {
            return None;
        }
        self.dirty.remove(n);
        Some(self.snapshot())
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn locked<'a>(
        group: &'a InodeGroup,
        dirty: &'a DirtyGroups,
        stats: &LockStats,
    ) -> LockedInodeGroup<'a> {
        LockedInodeGroup::new(group, group.lock(stats), 0, dirty).unwrap()
    }

    #[test]
    fn loads_counts_and_hands_back_the_bitmap() {
        // 100 inodes: 0..3 and 70 in use on disk, 2 more reserved.
        let mut bitmap = vec![0u8; 13];
        bitmap[0] = 0b0000_0111;
        bitmap[8] = 0b0100_0000;
        let g = InodeGroup::loaded(InodeBitmap::from_bitmap(&bitmap, 100, 5, 100, 100), 1);
        assert_eq!(g.free(), 100 - 6);
        let (stats, dirty) = (LockStats::default(), DirtyGroups::new(1));
        let snap = locked(&g, &dirty, &stats).snapshot();
        assert_eq!(snap.bitmap.len(), 13);
        assert_eq!(snap.bitmap[0], 0b0001_1111);
        assert_eq!(snap.bitmap[8], 0b0100_0000);
        assert_eq!(snap.itable_unused, 100 - 71);
        assert_eq!(snap.used_dirs, 1);
    }

    #[test]
    fn claims_every_free_inode_once_then_reports_full() {
        let g = InodeGroup::loaded(InodeBitmap::from_bitmap(&[0u8; 16], 128, 0, 128, 128), 0);
        let (stats, words, dirty) = (
            LockStats::default(),
            Counter::default(),
            DirtyGroups::new(1),
        );
        let flex = FlexInodeCounts::new([(128, 0)]);
        let mut seen = std::collections::BTreeSet::new();
        for i in 0..128u32 {
            let hint = (i * 37) % 128;
            let index = locked(&g, &dirty, &stats)
                .claim(hint, i % 2 == 0, &flex, 0, &words)
                .unwrap();
            assert!(seen.insert(index), "inode {index} handed out twice");
        }
        let mut held = locked(&g, &dirty, &stats);
        assert_eq!(held.claim(5, false, &flex, 0, &words), None);
        drop(held);
        assert_eq!((g.free(), g.used_dirs()), (0, 64));
        assert_eq!(
            (
                flex.summary(0).unwrap().free_inodes,
                flex.summary(0).unwrap().used_dirs
            ),
            (0, 64)
        );
        assert_eq!(locked(&g, &dirty, &stats).snapshot().itable_unused, 0);
        assert_eq!(
            locked(&g, &dirty, &stats).release(77, false, &flex, 0),
            Ok(())
        );
        assert_eq!(
            locked(&g, &dirty, &stats).release(77, false, &flex, 0),
            Err(NotInUse)
        );
        assert_eq!(g.hint(), Some(77));
        assert_eq!(
            locked(&g, &dirty, &stats).claim(0, false, &flex, 0, &words),
            Some(77)
        );
    }

    /// `bg_itable_unused` follows the kernel: a claim in the unused tail lowers it to just
    /// past the claimed inode, a free never raises it, and a loaded bitmap with an inode in
    /// use in the tail lowers the descriptor's value to cover it.
    #[test]
    fn itable_unused_is_lowered_by_claims_and_kept_by_frees() {
        // 64 inodes, the first 10 in use, the descriptor says the last 54 are unused.
        let mut bytes = vec![0u8; 8];
        bytes[0] = 0xFF;
        bytes[1] = 0b11;
        let g = InodeGroup::loaded(InodeBitmap::from_bitmap(&bytes, 64, 0, 64, 54), 0);
        let (stats, words, dirty) = (
            LockStats::default(),
            Counter::default(),
            DirtyGroups::new(1),
        );
        let flex = FlexInodeCounts::new([(54, 0)]);
        let mut held = locked(&g, &dirty, &stats);
        assert_eq!(held.snapshot().itable_unused, 54);
        assert_eq!(held.claim(40, false, &flex, 0, &words), Some(40));
        assert_eq!(held.snapshot().itable_unused, 23);
        held.release(40, false, &flex, 0).unwrap();
        assert_eq!(held.snapshot().itable_unused, 23);
        // A descriptor that hides an in-use inode in the tail is corrected at load.
        let mut bytes = vec![0u8; 8];
        bytes[6] = 1;
        let bitmap = InodeBitmap::from_bitmap(&bytes, 64, 0, 64, 60);
        assert_eq!(bitmap.itable_unused, 64 - 49);
    }
}

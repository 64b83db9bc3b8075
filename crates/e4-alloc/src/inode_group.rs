//! One group's inodes: the inode bitmap, the free-inode and used-directory counts, and the
//! claim of a free inode (requirement S3).
//!
//! The bitmap words are atomics that only the holder of the group lock writes, so anyone may
//! search them without the lock for a group worth locking and a place to start. The claim
//! itself is a find-and-set under the lock: while the lock is held nothing else changes the
//! bitmap, so one search either takes a free bit or proves the group full. There is no
//! test-and-set outside the lock to lose and retry (the livelock ext4 had before 4.14).

use crate::block_group::words_from_bitmap;
use crate::inode_flex_counts::FlexInodeCounts;
use crate::instrumented_lock::InstrumentedMutex;
use crate::stats::{Counter, LockStats};
use crate::sync::{AtomicBool, AtomicU32, AtomicU64, MutexGuard, Ordering};

const BITS: u32 = 64;

/// What a group holds, for persisting to its descriptor and bitmap block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InodeGroupSnapshot {
    /// The inode bitmap, `inodes_per_group / 8` bytes (bit set = in use).
    pub bitmap: Vec<u8>,
    pub free_inodes: u32,
    pub used_dirs: u32,
    /// Inodes past the last one in use (`bg_itable_unused`).
    pub itable_unused: u32,
}

/// A freed inode that was not in use, or a directory count that would go negative.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct NotInUse;

pub(crate) struct InodeGroup {
    lock: InstrumentedMutex<()>,
    /// One bit per inode, set when in use. Written only under `lock`.
    words: Box<[AtomicU64]>,
    inodes: u32,
    /// Written only under `lock`; read without it by placement heuristics.
    free: AtomicU32,
    used_dirs: AtomicU32,
    /// No inode below this index is free. Written under `lock`.
    first_free: AtomicU32,
    /// Changed since its last write-back snapshot. Set and cleared only under `lock`, so a
    /// snapshot and the clearing of the flag are one step that no claim can fall between.
    dirty: AtomicBool,
}

/// The group's lock, held: the only way to change the group.
pub(crate) struct LockedInodeGroup<'a> {
    group: &'a InodeGroup,
    _guard: MutexGuard<'a, ()>,
}

impl InodeGroup {
    /// A group of `inodes` inodes from its on-disk bitmap (bytes past the group ignored,
    /// missing bytes taken as in use), with `reserved` leading inodes forced in use (group
    /// 0's reserved inodes, which are never handed out even if a bitmap says they are free)
    /// and every inode from index `numbered` on (those whose number would not fit 32 bits).
    pub(crate) fn from_bitmap(
        bitmap: &[u8],
        inodes: u32,
        reserved: u32,
        numbered: u32,
        used_dirs: u32,
    ) -> Self {
        let mut words = words_from_bitmap(bitmap, inodes);
        let forced = (0..reserved.min(inodes)).chain(numbered.min(inodes)..inodes);
        for index in forced {
            words[(index / BITS) as usize] |= 1 << (index % BITS);
        }
        let used: u32 = words.iter().map(|w| w.count_ones()).sum();
        let padding = words.len() as u32 * BITS - inodes;
        let free = inodes - (used - padding);
        let group = InodeGroup {
            lock: InstrumentedMutex::new(()),
            words: words.into_iter().map(AtomicU64::new).collect(),
            inodes,
            free: AtomicU32::new(free),
            used_dirs: AtomicU32::new(used_dirs),
            first_free: AtomicU32::new(0),
            dirty: AtomicBool::new(false),
        };
        let first = group.find_free(0, &mut 0).unwrap_or(inodes);
        group.first_free.store(first, Ordering::Relaxed);
        group
    }

    /// Free inodes as of the last change (exact under the lock).
    pub(crate) fn free(&self) -> u32 {
        self.free.load(Ordering::Relaxed)
    }

    pub(crate) fn used_dirs(&self) -> u32 {
        self.used_dirs.load(Ordering::Relaxed)
    }

    pub(crate) fn lock(&self, stats: &LockStats) -> LockedInodeGroup<'_> {
        LockedInodeGroup {
            group: self,
            _guard: self.lock.lock(stats),
        }
    }

    pub(crate) fn try_lock(&self, stats: &LockStats) -> Option<LockedInodeGroup<'_>> {
        Some(LockedInodeGroup {
            group: self,
            _guard: self.lock.try_lock(stats)?,
        })
    }

    /// The first free inode index at or after the first-free hint, searching without the
    /// lock: a hint that may be stale by the time the caller locks. `words` counts the
    /// bitmap words read.
    pub(crate) fn find_free_unlocked(&self, words: &mut u64) -> Option<u32> {
        self.find_free(self.first_free.load(Ordering::Relaxed), words)
    }

    /// The first clear bit at or after `from`, wrapping around to the start.
    fn find_free(&self, from: u32, words: &mut u64) -> Option<u32> {
        let n = self.words.len() as u32;
        if n == 0 {
            return None;
        }
        let from = from.min(self.inodes.saturating_sub(1));
        let first_word = from / BITS;
        for step in 0..=n {
            let w = (first_word + step) % n;
            *words += 1;
            let mut used = self.words[w as usize].load(Ordering::Acquire);
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

    /// Test support: marks every inode in use in the bitmap alone, leaving the counts as they
    /// were (a corrupt volume whose counts and bitmap disagree).
    #[cfg(test)]
    pub(crate) fn corrupt_bitmap_all_used(&self) {
        for word in self.words.iter() {
            word.store(!0, Ordering::Release);
        }
    }

    fn is_used(&self, index: u32) -> bool {
        self.words[(index / BITS) as usize].load(Ordering::Acquire) & (1 << (index % BITS)) != 0
    }

    /// The group's state, consistent because it is read under the lock.
    pub(crate) fn snapshot(&self, stats: &LockStats) -> InodeGroupSnapshot {
        let _locked = self.lock(stats);
        self.snapshot_locked()
    }

    /// Whether the group changed since its last write-back snapshot (a hint without the
    /// lock: a change still in progress may not show yet).
    pub(crate) fn looks_dirty(&self) -> bool {
        self.dirty.load(Ordering::Relaxed)
    }

    /// The group's state if it changed since the last call, marking it clean in the same
    /// critical section.
    pub(crate) fn take_dirty_snapshot(&self, stats: &LockStats) -> Option<InodeGroupSnapshot> {
        let _locked = self.lock(stats);
        if !self.dirty.load(Ordering::Relaxed) {
            return None;
        }
        self.dirty.store(false, Ordering::Relaxed);
        Some(self.snapshot_locked())
    }

    fn snapshot_locked(&self) -> InodeGroupSnapshot {
        let mut bitmap = Vec::with_capacity(self.inodes.div_ceil(8) as usize);
        for word in self.words.iter() {
            bitmap.extend_from_slice(&word.load(Ordering::Acquire).to_le_bytes());
        }
        bitmap.truncate(self.inodes.div_ceil(8) as usize);
        let last_used = (0..self.inodes).rev().find(|&i| self.is_used(i));
        InodeGroupSnapshot {
            bitmap,
            free_inodes: self.free(),
            used_dirs: self.used_dirs(),
            itable_unused: self.inodes - last_used.map_or(0, |i| i + 1),
        }
    }
}

impl LockedInodeGroup<'_> {
    /// Takes the first free inode at or after `hint` (wrapping), or reports the group full.
    /// One step: with the lock held, the search cannot be overtaken. `flex` (the group's flex
    /// group sums) changes with the group, under the same lock.
    pub(crate) fn claim(
        &mut self,
        hint: u32,
        directory: bool,
        flex: &FlexInodeCounts,
        words: &Counter,
    ) -> Option<u32> {
        let g = self.group;
        let mut scanned = 0;
        let found = g.find_free(hint, &mut scanned);
        words.add(scanned);
        let index = found?;
        let word = &g.words[(index / BITS) as usize];
        word.store(
            word.load(Ordering::Relaxed) | 1 << (index % BITS),
            Ordering::Release,
        );
        g.free.store(g.free() - 1, Ordering::Relaxed);
        if directory {
            g.used_dirs.store(g.used_dirs() + 1, Ordering::Relaxed);
        }
        flex.claimed(directory);
        g.dirty.store(true, Ordering::Relaxed);
        if index == g.first_free.load(Ordering::Relaxed) {
            let next = g.find_free(index, &mut 0).unwrap_or(g.inodes);
            g.first_free.store(next, Ordering::Relaxed);
        }
        Some(index)
    }

    /// Returns inode `index` to the group (and to its flex group's sums, `flex`).
    pub(crate) fn release(
        &mut self,
        index: u32,
        directory: bool,
        flex: &FlexInodeCounts,
    ) -> Result<(), NotInUse> {
        let g = self.group;
        if index >= g.inodes || !g.is_used(index) || (directory && g.used_dirs() == 0) {
            return Err(NotInUse);
        }
        let word = &g.words[(index / BITS) as usize];
        word.store(
            word.load(Ordering::Relaxed) & !(1 << (index % BITS)),
            Ordering::Release,
        );
        g.free.store(g.free() + 1, Ordering::Relaxed);
        if directory {
            g.used_dirs.store(g.used_dirs() - 1, Ordering::Relaxed);
        }
        flex.released(directory);
        g.dirty.store(true, Ordering::Relaxed);
        if index < g.first_free.load(Ordering::Relaxed) {
            g.first_free.store(index, Ordering::Relaxed);
        }
        Ok(())
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn loads_counts_and_hands_back_the_bitmap() {
        // 100 inodes: 0..3 and 70 in use on disk, 2 more reserved.
        let mut bitmap = vec![0u8; 13];
        bitmap[0] = 0b0000_0111;
        bitmap[8] = 0b0100_0000;
        let g = InodeGroup::from_bitmap(&bitmap, 100, 5, 100, 1);
        assert_eq!(g.free(), 100 - 6);
        let stats = LockStats::default();
        let snap = g.snapshot(&stats);
        assert_eq!(snap.bitmap.len(), 13);
        assert_eq!(snap.bitmap[0], 0b0001_1111);
        assert_eq!(snap.bitmap[8], 0b0100_0000);
        assert_eq!(snap.itable_unused, 100 - 71);
        assert_eq!(snap.used_dirs, 1);
    }

    #[test]
    fn claims_every_free_inode_once_then_reports_full() {
        let g = InodeGroup::from_bitmap(&[0u8; 16], 128, 0, 128, 0);
        let (stats, words) = (LockStats::default(), Counter::default());
        let flex = FlexInodeCounts::new(128, 0);
        let mut seen = std::collections::BTreeSet::new();
        for i in 0..128u32 {
            let hint = (i * 37) % 128;
            let index = g
                .lock(&stats)
                .claim(hint, i % 2 == 0, &flex, &words)
                .unwrap();
            assert!(seen.insert(index), "inode {index} handed out twice");
        }
        assert_eq!(g.lock(&stats).claim(5, false, &flex, &words), None);
        assert_eq!((g.free(), g.used_dirs()), (0, 64));
        assert_eq!(
            (flex.summary().free_inodes, flex.summary().used_dirs),
            (0, 64)
        );
        assert_eq!(g.snapshot(&stats).itable_unused, 0);
        assert_eq!(g.lock(&stats).release(77, false, &flex), Ok(()));
        assert_eq!(g.lock(&stats).release(77, false, &flex), Err(NotInUse));
        assert_eq!(g.find_free_unlocked(&mut 0), Some(77));
        assert_eq!(g.lock(&stats).claim(0, false, &flex, &words), Some(77));
    }
}

//! The groups whose on-disk bitmap changed since the last write-back, and how many there
//! are. A journal's transaction must fit its log, and each changed group adds its bitmap
//! (and a share of a descriptor block) to the commit: operations read the count to decide
//! when to commit, with one load of a word written only on a group's first change after a
//! write-back.

use crate::free_space_index::AtomicBitset;
use crate::sync::{AtomicU64, Ordering};

pub struct DirtyGroups {
    set: AtomicBitset,
    count: AtomicU64,
}

impl DirtyGroups {
    pub fn new(groups: usize) -> Self {
        DirtyGroups {
            set: AtomicBitset::new(groups),
            count: AtomicU64::new(0),
        }
    }

    /// Marks group `g` changed. The bit is read first: it is shared with 63 other groups,
    /// and only the first change after a write-back needs to write it.
    pub fn insert(&self, g: usize) {
        if !self.set.contains(g) && self.set.insert(g) {
            self.count.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Marks group `g` written.
    pub fn remove(&self, g: usize) {
        if self.set.remove(g) {
            self.count.fetch_sub(1, Ordering::Relaxed);
        }
    }

    pub fn contains(&self, g: usize) -> bool {
        self.set.contains(g)
    }

    /// The first changed group in `from..to`, counting the words read.
    pub fn find_next(&self, from: usize, to: usize, words_read: &mut u64) -> Option<usize> {
        self.set.find_next(from, to, words_read)
    }

    /// How many groups changed since their last write-back (a snapshot).
    pub fn count(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }

    pub fn memory_bytes(&self) -> usize {
        self.set.memory_bytes() + std::mem::size_of::<AtomicU64>()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::DirtyGroups;

    #[test]
    fn the_count_follows_first_marks_and_removals() {
        let dirty = DirtyGroups::new(200);
        for g in [3, 3, 64, 150, 150, 3] {
            dirty.insert(g);
        }
        assert_eq!(dirty.count(), 3);
        dirty.remove(64);
        dirty.remove(64);
        dirty.remove(7);
        assert_eq!(dirty.count(), 2);
        assert!(dirty.contains(3) && dirty.contains(150) && !dirty.contains(64));
    }

    #[test]
    fn threads_marking_one_group_count_it_once() {
        let dirty = DirtyGroups::new(64);
        std::thread::scope(|s| {
            for _ in 0..8 {
                s.spawn(|| {
                    for g in 0..64 {
                        dirty.insert(g);
                    }
                });
            }
        });
        assert_eq!(dirty.count(), 64);
    }
}

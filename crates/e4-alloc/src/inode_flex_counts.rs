//! Per-flex-group sums of the inode groups' counts (free inodes, directories), and the
//! aggregate trees over them, so that Orlov reads one flex group in O(1) and searches all of
//! them in O(log flex groups) instead of summing groups or walking flex groups.
//!
//! The holder of a group's lock changes the group's counts and its flex group's sums in the
//! same critical section; groups of one flex group have different locks, so the sums are
//! atomics changed by read-modify-write (never load-then-store, which would lose a concurrent
//! holder's change). With no creation or free in flight the sums equal the groups' counts,
//! and the trees equal the sums ([`crate::flex_tree`]).

use crossbeam_utils::CachePadded;

use crate::flex_tree::{AggregateTree, Keep};
use crate::sync::{AtomicU64, Ordering};

/// One flex group's inode sums, as read (without locks) by placement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlexInodeSummary {
    pub free_inodes: u64,
    pub used_dirs: u64,
}

/// One flex group's sums, on a cache line of their own.
struct FlexSums {
    free_inodes: AtomicU64,
    used_dirs: AtomicU64,
}

pub(crate) struct FlexInodeCounts {
    sums: Box<[CachePadded<FlexSums>]>,
    /// The most free inodes of any flex group in each range.
    most_free_inodes: AggregateTree,
    /// The fewest directories of any flex group in each range.
    fewest_dirs: AggregateTree,
}

impl FlexInodeCounts {
    /// The sums of each flex group, `(free inodes, directories)`, in order.
    pub(crate) fn new(per_flex: impl IntoIterator<Item = (u64, u64)>) -> Self {
        let sums: Box<[_]> = per_flex
            .into_iter()
            .map(|(free_inodes, used_dirs)| {
                CachePadded::new(FlexSums {
                    free_inodes: AtomicU64::new(free_inodes),
                    used_dirs: AtomicU64::new(used_dirs),
                })
            })
            .collect();
        let free = |j: usize| sums[j].free_inodes.load(Ordering::Relaxed);
        let dirs = |j: usize| sums[j].used_dirs.load(Ordering::Relaxed);
        FlexInodeCounts {
            most_free_inodes: AggregateTree::new(Keep::Most, sums.len(), free),
            fewest_dirs: AggregateTree::new(Keep::Least, sums.len(), dirs),
            sums,
        }
    }

    /// Flex group `flex`'s sums; `None` past the last flex group.
    pub(crate) fn summary(&self, flex: usize) -> Option<FlexInodeSummary> {
        self.sums.get(flex).map(|s| FlexInodeSummary {
            free_inodes: s.free_inodes.load(Ordering::Relaxed),
            used_dirs: s.used_dirs.load(Ordering::Relaxed),
        })
    }

    fn free_of(&self, j: usize) -> u64 {
        self.sums[j].free_inodes.load(Ordering::Acquire)
    }

    fn dirs_of(&self, j: usize) -> u64 {
        self.sums[j].used_dirs.load(Ordering::Acquire)
    }

    /// Refreshes the trees above `flex` after its sums changed.
    fn refresh(&self, flex: usize, directory: bool) {
        self.most_free_inodes.refresh(flex, |j| self.free_of(j));
        if directory {
            self.fewest_dirs.refresh(flex, |j| self.dirs_of(j));
        }
    }

    /// One inode of flex group `flex` was claimed (by a group-lock holder).
    pub(crate) fn claimed(&self, flex: usize, directory: bool) {
        let sums = &self.sums[flex];
        sums.free_inodes.fetch_sub(1, Ordering::AcqRel);
        if directory {
            sums.used_dirs.fetch_add(1, Ordering::AcqRel);
        }
        self.refresh(flex, directory);
    }

    /// One inode of flex group `flex` was freed (by a group-lock holder).
    pub(crate) fn released(&self, flex: usize, directory: bool) {
        let sums = &self.sums[flex];
        sums.free_inodes.fetch_add(1, Ordering::AcqRel);
        if directory {
            sums.used_dirs.fetch_sub(1, Ordering::AcqRel);
        }
        self.refresh(flex, directory);
    }

    /// A group of flex group `flex` loaded its bitmap, which had `after` free inodes where
    /// its descriptor (and so this sum) counted `before` (by the group-lock holder).
    pub(crate) fn corrected(&self, flex: usize, before: u32, after: u32) {
        let free = &self.sums[flex].free_inodes;
        if after > before {
            free.fetch_add(u64::from(after - before), Ordering::AcqRel);
        } else {
            free.fetch_sub(u64::from(before - after), Ordering::AcqRel);
        }
        self.refresh(flex, false);
    }

    /// The shape of the trees (see [`AggregateTree::capacity`]).
    pub(crate) fn capacity(&self) -> usize {
        self.most_free_inodes.capacity()
    }

    /// Flex groups counted.
    pub(crate) fn len(&self) -> usize {
        self.sums.len()
    }

    /// The most free inodes of any flex group under tree node `n`.
    pub(crate) fn most_free_inodes(&self, n: usize) -> u64 {
        self.most_free_inodes.node(n, &|j| self.free_of(j))
    }

    /// The fewest directories of any flex group under tree node `n`.
    pub(crate) fn fewest_dirs(&self, n: usize) -> u64 {
        self.fewest_dirs.node(n, &|j| self.dirs_of(j))
    }

    /// Bytes held.
    pub(crate) fn memory_bytes(&self) -> usize {
        std::mem::size_of_val(&*self.sums)
            + self.most_free_inodes.memory_bytes()
            + self.fewest_dirs.memory_bytes()
    }
}

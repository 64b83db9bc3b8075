//! Which groups have free space of which size, readable without a lock (requirement S1b).
//!
//! For each buddy order there is an [`AtomicBitset`] over group numbers: bit `g` of order `o`
//! is set when group `g`'s largest free buddy chunk has order `o`. The holder of a group's
//! lock moves the group's bit when that largest order changes (one clear, one set); readers
//! scan without locks. A search visits groups in order from the goal to the end, then from
//! the start to the goal, looking at every eligible order at each step, so allocations
//! spread from their goal instead of bouncing between groups.
//!
//! A summary level (one bit per word, set when the word is non-zero) lets a search skip 64
//! empty words at a time. A concurrent update can leave a summary bit briefly clear while
//! its word is not; the updater re-checks, so the summary is exact whenever updates are
//! quiescent, and a search that misses a group in the window only moves on to the next
//! candidate (the allocator's last pass scans every group under its lock anyway).

use crate::stats::Counter;
use crate::sync::{AtomicU64, Ordering};

const BITS: usize = 64;

/// A fixed-size set of indices with lock-free insert, remove and ordered search.
pub struct AtomicBitset {
    words: Box<[AtomicU64]>,
    summary: Box<[AtomicU64]>,
    len: usize,
}

impl AtomicBitset {
    pub fn new(len: usize) -> Self {
        let words = len.div_ceil(BITS);
        AtomicBitset {
            words: (0..words).map(|_| AtomicU64::new(0)).collect(),
            summary: (0..words.div_ceil(BITS))
                .map(|_| AtomicU64::new(0))
                .collect(),
            len,
        }
    }

    /// Bytes of memory the set holds.
    pub fn memory_bytes(&self) -> usize {
        (self.words.len() + self.summary.len()) * std::mem::size_of::<AtomicU64>()
    }

    fn summary_bit(word: usize) -> (usize, u64) {
        (word / BITS, 1 << (word % BITS))
    }

    /// Adds `i`; true if it was not there.
    pub fn insert(&self, i: usize) -> bool {
        let (w, bit) = (i / BITS, 1u64 << (i % BITS));
        let before = self.words[w].fetch_or(bit, Ordering::AcqRel);
        if before == 0 {
            let (s, sbit) = Self::summary_bit(w);
            self.summary[s].fetch_or(sbit, Ordering::AcqRel);
        }
        before & bit == 0
    }

    /// Removes `i`; true if it was there.
    pub fn remove(&self, i: usize) -> bool {
        let (w, bit) = (i / BITS, 1u64 << (i % BITS));
        let before = self.words[w].fetch_and(!bit, Ordering::AcqRel);
        if before & !bit == 0 && before != 0 {
            let (s, sbit) = Self::summary_bit(w);
            self.summary[s].fetch_and(!sbit, Ordering::AcqRel);
            // A concurrent insert may have refilled the word after our clear: restore.
            if self.words[w].load(Ordering::Acquire) != 0 {
                self.summary[s].fetch_or(sbit, Ordering::AcqRel);
            }
        }
        before & bit != 0
    }

    pub fn contains(&self, i: usize) -> bool {
        self.words[i / BITS].load(Ordering::Acquire) & (1 << (i % BITS)) != 0
    }

    /// The first member in `from..to`, counting the words it had to read.
    pub fn find_next(&self, from: usize, to: usize, words_read: &mut u64) -> Option<usize> {
        let to = to.min(self.len);
        let mut i = from;
        while i < to {
            let w = i / BITS;
            // Skip runs of empty words using the summary.
            let (s, _) = Self::summary_bit(w);
            let summary = self.summary[s].load(Ordering::Acquire) >> (w % BITS);
            *words_read += 1;
            if summary == 0 {
                i = (s + 1) * BITS * BITS;
                continue;
            }
            let skip = summary.trailing_zeros() as usize;
            if skip > 0 {
                i = (w + skip) * BITS;
                continue;
            }
            let word = self.words[w].load(Ordering::Acquire) & (!0u64 << (i % BITS));
            *words_read += 1;
            if word != 0 {
                let found = w * BITS + word.trailing_zeros() as usize;
                return (found < to).then_some(found);
            }
            i = (w + 1) * BITS;
        }
        None
    }
}

/// Search statistics.
#[derive(Default)]
pub struct IndexStats {
    /// Candidate lookups.
    pub searches: Counter,
    /// Bitset words (summary and data) read by those lookups.
    pub words_read: Counter,
    /// Bit moves by group-lock holders.
    pub updates: Counter,
}

pub struct FreeSpaceIndex {
    orders: Box<[AtomicBitset]>,
    groups: usize,
    stats: IndexStats,
}

impl FreeSpaceIndex {
    /// An index over `groups` groups for buddy orders `0..orders`.
    pub fn new(groups: usize, orders: usize) -> Self {
        FreeSpaceIndex {
            orders: (0..orders).map(|_| AtomicBitset::new(groups)).collect(),
            groups,
            stats: IndexStats::default(),
        }
    }

    pub fn stats(&self) -> &IndexStats {
        &self.stats
    }

    /// Records that `group`'s largest free order went from `old` to `new` (`None`: full).
    /// Called by the holder of the group's lock.
    pub fn update(&self, group: usize, old: Option<u8>, new: Option<u8>) {
        if old == new {
            return;
        }
        self.stats.updates.add(1);
        if let Some(o) = new {
            self.orders[usize::from(o)].insert(group);
        }
        if let Some(o) = old {
            self.orders[usize::from(o)].remove(group);
        }
    }

    /// The first group in `from..to` whose largest free order is at least `min_order`.
    pub fn next_group(&self, from: usize, to: usize, min_order: u8) -> Option<usize> {
        self.stats.searches.add(1);
        let mut words = 0;
        let mut best: Option<usize> = None;
        for bitset in self.orders.iter().skip(usize::from(min_order)) {
            let limit = best.unwrap_or(to);
            if let Some(g) = bitset.find_next(from, limit, &mut words) {
                best = Some(g);
            }
        }
        self.stats.words_read.add(words);
        best
    }

    /// Groups with a free chunk of at least `min_order`, in the order a search visits them:
    /// from `goal` to the end, then from the start up to `goal`.
    pub fn candidates(&self, goal: usize, min_order: u8) -> impl Iterator<Item = usize> + '_ {
        let goal = goal.min(self.groups);
        let mut cursor = goal;
        let mut wrapped = false;
        std::iter::from_fn(move || loop {
            let end = if wrapped { goal } else { self.groups };
            match self.next_group(cursor, end, min_order) {
                Some(g) => {
                    cursor = g + 1;
                    return Some(g);
                }
                None if !wrapped => {
                    wrapped = true;
                    cursor = 0;
                }
                None => return None,
            }
        })
    }

    /// The order a group is filed under, if any (for consistency checks).
    /// Bytes of memory the index holds.
    pub fn memory_bytes(&self) -> usize {
        self.orders.iter().map(AtomicBitset::memory_bytes).sum()
    }

    /// Whether `group` is filed under `order` and under no other (`None`: under none). A
    /// group filed twice (two updates applied out of order) fails this while its lowest
    /// filing may still look right.
    pub fn is_filed_only_under(&self, group: usize, order: Option<u8>) -> bool {
        (0..self.orders.len()).all(|o| self.orders[o].contains(group) == (order == Some(o as u8)))
    }

    pub fn order_of(&self, group: usize) -> Option<u8> {
        (0..self.orders.len())
            .find(|&o| self.orders[o].contains(group))
            .map(|o| o as u8)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn ordered_search_wraps_at_the_goal() {
        let index = FreeSpaceIndex::new(10_000, 16);
        for (g, o) in [(3, 2), (500, 5), (4100, 1), (9000, 7)] {
            index.update(g, None, Some(o));
        }
        let from_600: Vec<_> = index.candidates(600, 0).collect();
        assert_eq!(from_600, vec![4100, 9000, 3, 500]);
        let big: Vec<_> = index.candidates(600, 5).collect();
        assert_eq!(big, vec![9000, 500]);
        index.update(9000, Some(7), Some(1));
        assert_eq!(index.candidates(600, 5).collect::<Vec<_>>(), vec![500]);
        assert_eq!(index.order_of(9000), Some(1));
    }

    proptest! {
        /// The bitset agrees with a plain set after any sequence of inserts and removes,
        /// and its summary stays exact.
        #[test]
        fn bitset_matches_a_set(ops in proptest::collection::vec((any::<bool>(), 0usize..9000), 0..400), from in 0usize..9000) {
            let bits = AtomicBitset::new(9000);
            let mut model = std::collections::BTreeSet::new();
            for (insert, i) in ops {
                if insert { bits.insert(i); model.insert(i); } else { bits.remove(i); model.remove(&i); }
            }
            let mut words = 0;
            prop_assert_eq!(bits.find_next(from, 9000, &mut words), model.range(from..).next().copied());
            for (w, word) in bits.words.iter().enumerate() {
                let (s, sbit) = AtomicBitset::summary_bit(w);
                let summary_set = bits.summary[s].load(Ordering::Relaxed) & sbit != 0;
                prop_assert_eq!(summary_set, word.load(Ordering::Relaxed) != 0);
            }
        }
    }
}

//! A fixed-size bitmap of atomic words shared by every thread: one map for the whole
//! filesystem, so nothing is merged at the end. Setting a bit is one `fetch_or`, whose
//! result says whether the bit was already set: that is how a block claimed twice is seen
//! at the moment of the second claim, whichever threads make them.

use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};

use rayon::prelude::*;

use e4_format::table::TableTooLarge;

use crate::state::lazy_slots::LazySlots;

/// Words in one lazily allocated chunk: 2 KiB, 16 Ki bits. What an empty filesystem uses
/// is spread over the whole device (each flex group's bitmaps and inode tables, the backup
/// superblocks), so a chunk must be small for most of the map to stay unallocated, and
/// not so small that the chunk table (16 bytes a chunk) outweighs it. An empty 16 TiB
/// image from mke2fs (8,192 flex groups, each with 8,224 blocks of tables at its start)
/// measured: 4 KiB chunks 35 MB a block map, 2 KiB 20 MB (16 of chunks, 4 of table),
/// 1 KiB 24 MB (its tables straddle two chunks); a flat map 512 MiB.
const WORDS_PER_CHUNK: usize = 256;

/// Bits `0..len`, all clear at first; memory is taken a chunk at a time, on the first bit
/// set in it, so a map costs what the filesystem uses, not what it claims.
#[derive(Debug)]
pub struct AtomicBitmap {
    words: LazySlots<AtomicU64, WORDS_PER_CHUNK>,
    len: u64,
}

impl AtomicBitmap {
    /// A bitmap of `len` clear bits (`table` names it if even its chunk table cannot be
    /// reserved).
    pub fn new(len: u64, table: &'static str) -> Result<Self, TableTooLarge> {
        let words = LazySlots::new(
            usize::try_from(len.div_ceil(64)).unwrap_or(usize::MAX),
            table,
        )?;
        Ok(AtomicBitmap { words, len })
    }

    /// Word `k` to write (its chunk allocated on the way), or None past the end.
    fn word_mut(&self, k: u64) -> Option<&AtomicU64> {
        self.words.get_or_alloc(usize::try_from(k).ok()?)
    }

    /// Word `k` as it is now: zero past the end or in a chunk never written.
    fn word(&self, k: u64) -> u64 {
        usize::try_from(k)
            .ok()
            .and_then(|k| self.words.get(k))
            .map_or(0, |w| w.load(Ordering::Relaxed))
    }

    /// Sets bit `bit` and returns whether it was already set. Bits past the end are
    /// ignored (reported as not set): callers check bounds first and report them.
    pub fn set(&self, bit: u64) -> bool {
        if bit >= self.len {
            return false;
        }
        let Some(word) = self.word_mut(bit / 64) else {
            return false;
        };
        let mask = 1u64 << (bit % 64);
        // Relaxed is enough: the only question asked is "was it set before", and fetch_or
        // is atomic on the word; passes are separated by joins, which order everything.
        word.fetch_or(mask, Ordering::Relaxed) & mask != 0
    }

    /// Sets bits `start..start + count`; calls `already_set` for each bit that was set.
    pub fn set_range(&self, start: u64, count: u64, mut already_set: impl FnMut(u64)) {
        let end = start.saturating_add(count).min(self.len);
        let mut bit = start;
        while bit < end {
            let in_word = bit % 64;
            let take = (64 - in_word).min(end - bit);
            let mask = if take == 64 {
                u64::MAX
            } else {
                ((1u64 << take) - 1) << in_word
            };
            let Some(word) = self.word_mut(bit / 64) else {
                return;
            };
            let old = match take {
                // One bit is `lock bts` and a whole word `xchg`, one locked instruction
                // each; a general `fetch_or` whose old value is used is a load, then a
                // `lock cmpxchg` loop.
                1 => word.fetch_or(1 << in_word, Ordering::Relaxed) & (1 << in_word),
                64 => word.swap(u64::MAX, Ordering::Relaxed),
                _ => word.fetch_or(mask, Ordering::Relaxed) & mask,
            };
            let mut dup = old;
            while dup != 0 {
                let at = dup.trailing_zeros();
                already_set(bit - in_word + u64::from(at));
                dup &= dup - 1;
            }
            bit += take;
        }
    }

    /// Whether bit `bit` is set (false past the end).
    pub fn get(&self, bit: u64) -> bool {
        bit < self.len && self.word(bit / 64) & (1u64 << (bit % 64)) != 0
    }

    /// The 64 bits starting at bit `bit`, bit `bit` lowest (any alignment); bits past the
    /// end read as clear. Pass 5 compares whole words of a group's bitmap with this.
    pub fn bits_at(&self, bit: u64) -> u64 {
        if bit >= self.len {
            return 0;
        }
        let shift = bit % 64;
        let low = self.word(bit / 64) >> shift;
        let bits = if shift == 0 {
            low
        } else {
            low | self.word(bit / 64 + 1) << (64 - shift)
        };
        let remaining = self.len - bit;
        if remaining < 64 {
            bits & ((1u64 << remaining) - 1)
        } else {
            bits
        }
    }

    /// Whether any bit is set, looked for in parallel among the allocated chunks (pass 1B
    /// asks it of a map that is all clear on a clean filesystem: then none is).
    pub fn any(&self) -> bool {
        self.words
            .par_allocated()
            .any(|chunk| chunk.iter().any(|w| w.load(Ordering::Relaxed) != 0))
    }

    /// Number of set bits, counted in parallel over the allocated chunks.
    pub fn count_ones(&self) -> u64 {
        self.words
            .par_allocated()
            .map(|chunk| {
                chunk
                    .iter()
                    .map(|w| u64::from(w.load(Ordering::Relaxed).count_ones()))
                    .sum::<u64>()
            })
            .sum()
    }

    /// Calls `visit` with each set bit in `bits`, in order, a word at a time (a clear word
    /// costs one load, a chunk never written one lookup).
    pub fn for_each_set(&self, bits: Range<u64>, mut visit: impl FnMut(u64)) {
        let end = bits.end.min(self.len);
        let mut at = bits.start;
        while at < end {
            let word_index = at / 64;
            let Some(word) = usize::try_from(word_index)
                .ok()
                .and_then(|k| self.words.get(k))
            else {
                // Nothing was ever set in this chunk: go on at the next one.
                let chunk_bits = (WORDS_PER_CHUNK * 64) as u64;
                at = (at / chunk_bits + 1) * chunk_bits;
                continue;
            };
            let first = at % 64;
            let mut set = word.load(Ordering::Relaxed) >> first << first;
            set &= low_bits(end - word_index * 64);
            while set != 0 {
                visit(word_index * 64 + u64::from(set.trailing_zeros()));
                set &= set - 1;
            }
            at = (word_index + 1) * 64;
        }
    }

    /// Bytes of memory held.
    pub fn memory_bytes(&self) -> usize {
        self.words.memory_bytes()
    }
}

/// A mask of the lowest `n` bits (all 64 from 64 on).
pub fn low_bits(n: u64) -> u64 {
    if n >= 64 {
        u64::MAX
    } else {
        (1u64 << n) - 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn second_claim_is_seen_whatever_the_threads() {
        let map = AtomicBitmap::new(10_000, "test map").unwrap();
        // Every bit claimed by two tasks: exactly one of each pair sees it already set.
        let seen: usize = (0..20_000u64)
            .into_par_iter()
            .filter(|i| map.set(i % 10_000))
            .count();
        assert_eq!(seen, 10_000);
    }

    #[test]
    fn range_set_reports_each_overlapping_bit() {
        let map = AtomicBitmap::new(300, "test map").unwrap();
        map.set_range(10, 100, |_| panic!("fresh bits"));
        let mut dups = Vec::new();
        map.set_range(100, 150, |b| dups.push(b));
        assert_eq!(dups, (100..110).collect::<Vec<_>>());
        assert_eq!(map.count_ones(), 240);
        assert!(!map.set(299));
        assert!(!map.set(1000));
        assert!(!map.get(1000));
    }

    #[test]
    fn second_claims_by_bit_by_word_and_by_part_word_report_every_bit() {
        let map = AtomicBitmap::new(256, "test map").unwrap();
        map.set_range(64, 128, |_| panic!("fresh words"));
        map.set_range(5, 1, |_| panic!("fresh bit"));
        // Four whole words (xchg), one bit (bts), part of a word (cmpxchg).
        let mut dups = Vec::new();
        map.set_range(0, 256, |b| dups.push(b));
        let want: Vec<u64> = std::iter::once(5).chain(64..192).collect();
        assert_eq!(dups, want);
        dups.clear();
        map.set_range(70, 1, |b| dups.push(b));
        map.set_range(250, 6, |b| dups.push(b));
        assert_eq!(dups, [70, 250, 251, 252, 253, 254, 255]);
        assert_eq!(map.count_ones(), 256);
    }

    #[test]
    fn bits_at_reads_any_alignment_and_stops_at_the_end() {
        let map = AtomicBitmap::new(200, "test map").unwrap();
        for bit in [0, 5, 63, 64, 70, 127, 128, 199] {
            map.set(bit);
        }
        for start in 0..200u64 {
            let want = (0..64)
                .filter(|&k| map.get(start + k))
                .fold(0u64, |w, k| w | 1 << k);
            assert_eq!(map.bits_at(start), want, "bits from {start}");
        }
        assert_eq!(map.bits_at(200), 0);
        assert_eq!(map.bits_at(5000), 0);
    }

    #[test]
    fn for_each_set_visits_the_set_bits_of_a_range_in_order() {
        let map = AtomicBitmap::new(300, "test map").unwrap();
        let set = [0, 1, 63, 64, 100, 191, 192, 250, 299];
        for bit in set {
            map.set(bit);
        }
        for (start, end) in [(0, 300), (1, 64), (64, 65), (65, 299), (100, 1000), (5, 5)] {
            let mut seen = Vec::new();
            map.for_each_set(start..end, |b| seen.push(b));
            let want: Vec<u64> = set
                .into_iter()
                .filter(|b| (start..end).contains(b))
                .collect();
            assert_eq!(seen, want, "bits {start}..{end}");
        }
        assert_eq!(map.count_ones(), set.len() as u64);
    }

    #[test]
    fn a_large_map_holds_only_the_chunks_written_and_reads_across_them() {
        let chunk = (WORDS_PER_CHUNK * 64) as u64;
        // 2^34 bits: 64 TiB of 4 KiB blocks, a 2 GiB map were it flat.
        let map = AtomicBitmap::new(1 << 34, "test map").unwrap();
        assert!(!map.any());
        assert!(map.memory_bytes() <= 16 << 20, "only the chunk table");
        let set = [3, chunk - 1, chunk, 7 * chunk + 100, (1 << 34) - 1];
        for bit in set {
            assert!(!map.set(bit));
        }
        let mut dups = Vec::new();
        map.set_range(chunk - 2, 4, |b| dups.push(b));
        assert_eq!(dups, [chunk - 1, chunk]);
        assert_eq!(map.count_ones(), set.len() as u64 + 2);
        assert!(map.any());
        assert_eq!(map.bits_at(chunk - 2), 0b1111);
        let mut seen = Vec::new();
        map.for_each_set(0..1 << 34, |b| seen.push(b));
        let mut want: Vec<u64> = set.into_iter().chain([chunk - 2, chunk + 1]).collect();
        want.sort_unstable();
        assert_eq!(seen, want);
        let chunks_written = 4;
        assert!(map.memory_bytes() <= (16 << 20) + chunks_written * WORDS_PER_CHUNK * 8);
    }
}

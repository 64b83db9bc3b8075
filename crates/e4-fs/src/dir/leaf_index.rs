//! An index of one cached directory leaf: where its records start, where each live name
//! is (by a hash of the name), and where the first record with room is.
//!
//! A leaf's records form a chain that can only be walked from its start. The kernel walks
//! it whole for every lookup of an absent name (`search_dirblock`), again to place a new
//! entry (`ext4_find_dest_de`), and to the entry before one it deletes
//! (`ext4_generic_delete_entry`): a create in a large directory read a few hundred records,
//! each load waiting for the one before (a quarter of e4's create, with its two walks made
//! one). The index is built from a verified leaf by the first create that looks at it (a
//! lookup alone walks: a build costs more than the walk it saves once) and kept beside the
//! cached block (`io/derived.rs`); the directory edits keep it up to date ([`LeafEdit`](crate::dir::leaf::LeafEdit)) and
//! any other change of the block's bytes drops it (`buffer/cache.rs`). A lookup then reads
//! one slot run of a small hash table and the records it names; a create starts its search
//! for room where room begins; a removal finds the record before from the map of record
//! starts. The answers are the walk's exactly: the same record for a name (the first in
//! the chain, should a damaged leaf hold it twice) and the same slot (first fit), so blocks
//! look as the kernel's would whichever way e4 read them. Builds with debug assertions
//! check every answer and every edit against a fresh walk.
//!
//! A removal only clears the record's start: its name stays in the table, stale, until the
//! table is rebuilt (when it fills). A stale entry is harmless because an entry counts
//! only where a record starts and holds that very name: an offset the chain no longer
//! starts a record at (one inside another record's name, say, which could hold bytes that
//! read as a record) is never read as one. So removing costs one bit, not a hash and a
//! table probe.

use std::hash::BuildHasher;

/// The smallest table: a leaf of a few names needs no more. (The largest: a 4 KiB leaf's
/// 341 records at most take 1,024 slots, 4 KiB, and its map of starts 128 bytes: an index
/// costs at most about its block again.)
const MIN_SLOTS: usize = 32;
/// Bits of a name's hash an entry keeps: enough to find its home slot in the largest
/// table (2^14 slots: a 64 KiB block holds at most 5,461 records, and the table is at
/// most half full), and three more to tell apart most names that share a home.
const TAG_BITS: u32 = 17;
/// An entry: `tag << 15 | offset >> 1 | 1` (a record's offset is a multiple of 4 below
/// 64 KiB, so it takes bits 1-14, and bit 0 marks the slot used).
const OFFSET_MASK: u32 = 0x7ffe;
/// Records start on 4-byte boundaries: one bit of [`LeafIndex::starts`] per boundary.
const ALIGN: usize = 4;

/// A cached leaf's record starts, its live names by a hash of each, and its first room.
#[derive(Debug, Clone)]
pub(crate) struct LeafIndex {
    /// Open addressing with linear probing, at most half full (stale entries counted): 0
    /// is an empty slot.
    slots: Box<[u32]>,
    /// Slots in use, stale ones included.
    used: usize,
    /// A bit per 4-byte boundary of the chain, set where a record (live or free) starts.
    starts: Box<[u64]>,
    /// Offset of the first record with room for the smallest entry (one with a 1-byte
    /// name): no record before it has room for any entry. The chain's end if none has.
    first_room: usize,
}

/// The hash an entry keeps of a name.
fn tag_of(name: &[u8]) -> u32 {
    let hash = foldhash::fast::FixedState::with_seed(0x6534_6c65_6166).hash_one(name);
    (hash as u32) & ((1 << TAG_BITS) - 1)
}

fn entry(tag: u32, offset: usize) -> u32 {
    debug_assert!(offset % ALIGN == 0 && offset < 1 << 16);
    tag << 15 | (offset as u32 >> 1) | 1
}

fn offset_of(entry: u32) -> usize {
    ((entry & OFFSET_MASK) << 1) as usize
}

fn tag_in(entry: u32) -> u32 {
    entry >> 15
}

/// One record as [`LeafIndex::new`] takes it: its offset, and its name if it is live.
pub(crate) type IndexedRecord<'a> = (usize, Option<&'a [u8]>);

impl LeafIndex {
    /// An index of a leaf whose chain ends at `end`, whose records are `records` (in
    /// chain order) and whose first record with room is at `first_room`.
    pub(crate) fn new<'a>(
        records: impl Iterator<Item = IndexedRecord<'a>> + Clone,
        end: usize,
        first_room: usize,
    ) -> Self {
        let live = records.clone().filter(|(_, name)| name.is_some()).count();
        let boundaries = end.div_ceil(ALIGN);
        let mut index = LeafIndex {
            slots: vec![0; (2 * live + 1).next_power_of_two().max(MIN_SLOTS)].into_boxed_slice(),
            used: 0,
            starts: vec![0; boundaries.div_ceil(64)].into_boxed_slice(),
            first_room,
        };
        for (offset, name) in records {
            index.set_start(offset);
            if let Some(name) = name {
                index.enter(entry(tag_of(name), offset));
            }
        }
        index
    }

    fn mask(&self) -> usize {
        self.slots.len() - 1
    }

    /// Puts `entry` in the first empty slot from its home.
    fn enter(&mut self, entry: u32) {
        let mask = self.mask();
        let mut at = tag_in(entry) as usize & mask;
        while self.slots[at] != 0 {
            at = (at + 1) & mask;
        }
        self.slots[at] = entry;
        self.used += 1;
    }

    fn set_start(&mut self, offset: usize) {
        let bit = offset / ALIGN;
        self.starts[bit / 64] |= 1 << (bit % 64);
    }

    fn clear_start(&mut self, offset: usize) {
        let bit = offset / ALIGN;
        self.starts[bit / 64] &= !(1 << (bit % 64));
    }

    fn starts_at(&self, offset: usize) -> bool {
        let bit = offset / ALIGN;
        offset % ALIGN == 0
            && self
                .starts
                .get(bit / 64)
                .is_some_and(|w| w >> (bit % 64) & 1 == 1)
    }

    /// Offsets of the records that may hold `name`, in no order: records start there, and
    /// the names entered there hash as `name` does.
    pub(crate) fn holding(&self, name: &[u8]) -> impl Iterator<Item = usize> + '_ {
        let tag = tag_of(name);
        let mask = self.mask();
        let mut at = tag as usize & mask;
        std::iter::from_fn(move || loop {
            let entry = self.slots[at];
            if entry == 0 {
                return None;
            }
            at = (at + 1) & mask;
            if tag_in(entry) == tag && self.starts_at(offset_of(entry)) {
                return Some(offset_of(entry));
            }
        })
    }

    /// Where the record before the one at `offset` starts; `None` for the first.
    pub(crate) fn record_before(&self, offset: usize) -> Option<usize> {
        let bit = offset / ALIGN;
        let (mut word, shift) = (bit / 64, bit % 64);
        // The bits below `bit` in its own word, then whole words going down.
        let mut bits = self.starts.get(word)? & ((1u64 << shift) - 1);
        loop {
            if bits != 0 {
                return Some((word * 64 + 63 - bits.leading_zeros() as usize) * ALIGN);
            }
            word = word.checked_sub(1)?;
            bits = self.starts[word];
        }
    }

    pub(crate) fn first_room(&self) -> usize {
        self.first_room
    }

    pub(crate) fn set_first_room(&mut self, offset: usize) {
        self.first_room = offset;
    }

    /// Records a new live record `name` at `offset` (where a record may have started
    /// already: a free one now holding it); false, recording nothing, if the table is full
    /// (the caller builds the index afresh from the leaf, which drops the stale entries).
    #[must_use]
    pub(crate) fn add(&mut self, offset: usize, name: &[u8]) -> bool {
        if 2 * (self.used + 1) > self.slots.len() {
            return false;
        }
        self.enter(entry(tag_of(name), offset));
        self.set_start(offset);
        true
    }

    /// Records that the record at `offset` is gone, absorbed by the one before it. (The
    /// first record, made free instead, still starts where it did.)
    pub(crate) fn absorbed(&mut self, offset: usize) {
        self.clear_start(offset);
    }

    /// What two indexes of one leaf agree on whatever happened to them: the record starts,
    /// the first room, and which of the live records' entries each holds (`live` gives,
    /// for an offset, the name of the live record starting there). Stale entries, left by
    /// removals, do not count.
    pub(crate) fn contents<'a>(
        &self,
        live: impl Fn(usize) -> Option<&'a [u8]>,
    ) -> (Vec<u64>, usize, Vec<(u32, usize)>) {
        let mut entries: Vec<_> = self
            .slots
            .iter()
            .filter(|&&e| e != 0)
            .map(|&e| (tag_in(e), offset_of(e)))
            .filter(|&(tag, offset)| {
                self.starts_at(offset) && live(offset).is_some_and(|name| tag_of(name) == tag)
            })
            .collect();
        entries.sort_unstable();
        entries.dedup();
        (self.starts.to_vec(), self.first_room, entries)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sorted(it: impl Iterator<Item = usize>) -> Vec<usize> {
        let mut v: Vec<_> = it.collect();
        v.sort_unstable();
        v
    }

    #[test]
    fn holding_offers_every_record_of_the_name_and_only_where_records_start() {
        // 40 records of 12 bytes, then one of the names again (a damaged leaf).
        let names: Vec<Vec<u8>> = (0..40).map(|i| format!("f{i}").into_bytes()).collect();
        let mut records: Vec<IndexedRecord> = names
            .iter()
            .enumerate()
            .map(|(i, n)| (i * 12, Some(&n[..])))
            .collect();
        records.push((480, Some(b"f3")));
        let mut index = LeafIndex::new(records.clone().into_iter(), 492, 492);
        for wanted in [&b"f3"[..], b"f39", b"nope"] {
            let same_tag = records
                .iter()
                .filter(|(_, n)| tag_of(n.unwrap()) == tag_of(wanted));
            let expected = sorted(same_tag.map(|(o, _)| *o));
            assert_eq!(sorted(index.holding(wanted)), expected);
        }
        assert!(sorted(index.holding(b"f3")).ends_with(&[36, 480]));
        // Absorbed into the record before: no longer offered, though its entry stays.
        index.absorbed(36);
        assert_eq!(sorted(index.holding(b"f3")), vec![480]);
        assert_eq!(index.record_before(48), Some(24));
    }

    #[test]
    fn the_record_before_is_found_across_words() {
        // Records at 0, 1000 and 1996 of a 2 KiB chain: far apart in the map of starts.
        let records: Vec<IndexedRecord> = vec![(0, None), (1000, Some(b"a")), (1996, Some(b"b"))];
        let index = LeafIndex::new(records.into_iter(), 2048, 2048);
        assert_eq!(index.record_before(1996), Some(1000));
        assert_eq!(index.record_before(1000), Some(0));
        assert_eq!(index.record_before(0), None);
    }

    /// Adds and removes in a small table, so that runs wrap around its end: every live
    /// name stays findable, none removed is, and a full table asks to be rebuilt.
    #[test]
    fn entries_stay_reachable_through_adds_removals_and_rebuilds() {
        let names: Vec<Vec<u8>> = (0..2000).map(|i| format!("f{i}").into_bytes()).collect();
        let end = names.len() * ALIGN;
        let mut index = LeafIndex::new(std::iter::empty(), end, end);
        let mut live = std::collections::BTreeSet::new();
        let mut seed = 7u64;
        for step in 0..20_000usize {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let i = (seed >> 33) as usize % names.len();
            if live.remove(&i) {
                index.absorbed(i * ALIGN);
            } else if index.add(i * ALIGN, &names[i]) {
                live.insert(i);
            } else {
                let records: Vec<IndexedRecord> = live
                    .iter()
                    .map(|&j| (j * ALIGN, Some(&names[j][..])))
                    .collect();
                index = LeafIndex::new(records.into_iter(), end, end);
            }
            if step % 97 == 0 {
                for (i, name) in names.iter().enumerate() {
                    assert_eq!(
                        index.holding(name).any(|o| o == i * ALIGN),
                        live.contains(&i),
                        "step {step}, name {i}"
                    );
                }
            }
        }
    }
}

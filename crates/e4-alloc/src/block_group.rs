//! One block group's free space: the block bitmap, and a buddy summary of it (how many
//! maximal aligned power-of-two free chunks of each order it has, as mballoc's buddy
//! keeps), the free count, the number of free extents and the first free block.
//!
//! The summary is maintained incrementally: an allocation or free only re-decomposes the free
//! extents it touches. Finding where those extents begin and end is quick too: a second
//! level of bits says which bitmap words hold any used and any free block, so a search
//! skips 64 words (4,096 blocks) per step, and a 32,768-block group is crossed in 8 steps.

/// Buddy orders 0..ORDERS: chunks up to 2^15 blocks, the largest group a 4 KiB-block
/// filesystem has (32,768 blocks).
pub const ORDERS: usize = 16;

const BITS: u32 = 64;

/// A run of blocks within a group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GroupExtent {
    pub start: u32,
    pub len: u32,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupSpace {
    /// One bit per block, set when in use.
    words: Vec<u64>,
    /// One bit per word of `words`: set when it has a used block.
    words_with_used: Vec<u64>,
    /// One bit per word of `words`: set when it has a free block.
    words_with_free: Vec<u64>,
    blocks: u32,
    free: u32,
    /// Free chunks of each order in the buddy decomposition of the free extents.
    buddy: [u32; ORDERS],
    /// Free extents.
    fragments: u32,
}

/// An error from marking blocks that are not in the state the caller claims.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpaceError {
    /// Part of the range is already in use.
    AlreadyUsed(GroupExtent),
    /// Part of the range is already free (a double free).
    AlreadyFree(GroupExtent),
    /// The range runs past the end of the group.
    OutOfRange(GroupExtent),
}

/// Adds (`sign` = 1) or removes (`sign` = -1) the buddy decomposition of the free extent
/// `[start, end)`: greedily the largest aligned power-of-two chunk that fits.
fn decompose(buddy: &mut [u32; ORDERS], mut start: u32, end: u32, add: bool) {
    while start < end {
        let fits = 31 - (end - start).leading_zeros();
        let aligned = if start == 0 {
            31
        } else {
            start.trailing_zeros()
        };
        let order = fits.min(aligned).min(ORDERS as u32 - 1);
        if add {
            buddy[order as usize] += 1;
        } else {
            buddy[order as usize] -= 1;
        }
        start += 1 << order;
    }
}

/// An on-disk bitmap (bit set = in use) of `bits` bits as 64-bit words: missing bytes read
/// as in use, and so do the bits past `bits` in the last word, so a search never finds them.
pub(crate) fn words_from_bitmap(bitmap: &[u8], bits: u32) -> Vec<u64> {
    let mut words = vec![!0u64; bits.div_ceil(BITS) as usize];
    for (i, word) in words.iter_mut().enumerate() {
        let mut bytes = [0xFFu8; 8];
        for (j, b) in bytes.iter_mut().enumerate() {
            if let Some(&v) = bitmap.get(8 * i + j) {
                *b = v;
            }
        }
        *word = u64::from_le_bytes(bytes);
    }
    if bits % BITS != 0 {
        let last = words.len() - 1;
        words[last] |= !0u64 << (bits % BITS);
    }
    words
}

impl GroupSpace {
    /// Builds the state from an on-disk block bitmap (bit set = in use) covering `blocks`
    /// blocks; bytes past the group are ignored.
    pub fn from_bitmap(bitmap: &[u8], blocks: u32) -> Self {
        let words = words_from_bitmap(bitmap, blocks);
        let summary_len = words.len().div_ceil(BITS as usize);
        let mut space = GroupSpace {
            words,
            words_with_used: vec![0; summary_len],
            words_with_free: vec![0; summary_len],
            blocks,
            free: 0,
            buddy: [0; ORDERS],
            fragments: 0,
        };
        for w in 0..space.words.len() {
            space.refresh_summary(w);
        }
        let mut at = space.next_free(0);
        while at < blocks {
            let end = space.next_used(at);
            space.free += end - at;
            space.fragments += 1;
            decompose(&mut space.buddy, at, end, true);
            at = space.next_free(end);
        }
        space
    }

    /// A group with every block free.
    pub fn all_free(blocks: u32) -> Self {
        Self::from_bitmap(&vec![0u8; blocks.div_ceil(8) as usize], blocks)
    }

    /// The on-disk bitmap, `len` bytes, padding past the group with ones (as mke2fs does).
    pub fn to_bitmap(&self, len: usize) -> Vec<u8> {
        let mut out: Vec<u8> = self.words.iter().flat_map(|w| w.to_le_bytes()).collect();
        out.resize(len, 0xFF);
        out.truncate(len);
        out
    }

    pub fn free(&self) -> u32 {
        self.free
    }

    /// Blocks in the group.
    pub fn blocks(&self) -> u32 {
        self.blocks
    }

    /// Bytes of heap the bitmaps hold.
    pub fn memory_bytes(&self) -> usize {
        (self.words.len() + self.words_with_used.len() + self.words_with_free.len()) * 8
    }

    pub fn fragments(&self) -> u32 {
        self.fragments
    }

    pub fn buddy(&self) -> &[u32; ORDERS] {
        &self.buddy
    }

    /// The largest order with a free chunk; `None` when the group is full.
    pub fn largest_order(&self) -> Option<u8> {
        (0..ORDERS)
            .rev()
            .find(|&o| self.buddy[o] > 0)
            .map(|o| o as u8)
    }

    pub fn is_used(&self, block: u32) -> bool {
        self.words[(block / BITS) as usize] & (1 << (block % BITS)) != 0
    }

    /// Brings word `w`'s summary bits up to date after it changed.
    fn refresh_summary(&mut self, w: usize) {
        let (s, bit) = (w / BITS as usize, 1u64 << (w % BITS as usize));
        let word = self.words[w];
        let set = |summary: &mut Vec<u64>, on: bool| {
            if on {
                summary[s] |= bit;
            } else {
                summary[s] &= !bit;
            }
        };
        set(&mut self.words_with_used, word != 0);
        set(&mut self.words_with_free, word != !0);
    }

    /// The first block at or after `from` whose bit equals `used`, or `blocks`.
    fn next_with(&self, from: u32, used: bool) -> u32 {
        if from >= self.blocks {
            return self.blocks;
        }
        let bits = |w: usize| if used { self.words[w] } else { !self.words[w] };
        let w = (from / BITS) as usize;
        let masked = bits(w) & (!0u64 << (from % BITS));
        if masked != 0 {
            return (w as u32 * BITS + masked.trailing_zeros()).min(self.blocks);
        }
        // The next word with a matching bit, from the summary.
        let summary = if used {
            &self.words_with_used
        } else {
            &self.words_with_free
        };
        let next = w + 1;
        let mut s = next / BITS as usize;
        let mut mask = if next % BITS as usize == 0 {
            !0
        } else {
            !0u64 << (next % BITS as usize)
        };
        while s < summary.len() {
            let m = summary[s] & mask;
            if m != 0 {
                let w = s * BITS as usize + m.trailing_zeros() as usize;
                return (w as u32 * BITS + bits(w).trailing_zeros()).min(self.blocks);
            }
            s += 1;
            mask = !0;
        }
        self.blocks
    }

    pub fn next_free(&self, from: u32) -> u32 {
        self.next_with(from, false)
    }

    pub fn next_used(&self, from: u32) -> u32 {
        self.next_with(from, true)
    }

    /// The start of the free extent that ends just before `end` (`end` itself if the block
    /// before it is in use).
    fn free_run_start(&self, end: u32) -> u32 {
        if end == 0 {
            return 0;
        }
        let after_last_used = |w: usize, used: u64| w as u32 * BITS + (BITS - used.leading_zeros());
        let w = ((end - 1) / BITS) as usize;
        // Used bits at or below `end - 1` in its word.
        let used = self.words[w] & (!0u64 >> (BITS - 1 - (end - 1) % BITS));
        if used != 0 {
            return after_last_used(w, used);
        }
        if w == 0 {
            return 0;
        }
        // The previous word with a used block, from the summary.
        let prev = w - 1;
        let mut s = prev / BITS as usize;
        let mut mask = !0u64 >> (BITS as usize - 1 - prev % BITS as usize);
        loop {
            let m = self.words_with_used[s] & mask;
            if m != 0 {
                let w = s * BITS as usize + (BITS - 1 - m.leading_zeros()) as usize;
                return after_last_used(w, self.words[w]);
            }
            if s == 0 {
                return 0;
            }
            s -= 1;
            mask = !0;
        }
    }

    fn set_range(&mut self, start: u32, end: u32, used: bool) {
        let mut at = start;
        while at < end {
            let w = (at / BITS) as usize;
            let lo = at % BITS;
            let hi = (end - w as u32 * BITS).min(BITS);
            let upto = if hi == BITS { !0 } else { (1u64 << hi) - 1 };
            let mask = upto & (!0u64 << lo);
            if used {
                self.words[w] |= mask;
            } else {
                self.words[w] &= !mask;
            }
            self.refresh_summary(w);
            at = w as u32 * BITS + hi;
        }
    }

    fn check_range(&self, e: GroupExtent) -> Result<u32, SpaceError> {
        match e.start.checked_add(e.len) {
            Some(end) if end <= self.blocks && e.len > 0 => Ok(end),
            _ => Err(SpaceError::OutOfRange(e)),
        }
    }

    /// Marks a free range in use.
    pub fn mark_used(&mut self, e: GroupExtent) -> Result<(), SpaceError> {
        let end = self.check_range(e)?;
        if self.next_used(e.start) < end {
            return Err(SpaceError::AlreadyUsed(e));
        }
        let run_start = self.free_run_start(e.start);
        let run_end = self.next_used(end);
        decompose(&mut self.buddy, run_start, run_end, false);
        decompose(&mut self.buddy, run_start, e.start, true);
        decompose(&mut self.buddy, end, run_end, true);
        self.fragments =
            self.fragments - 1 + u32::from(run_start < e.start) + u32::from(end < run_end);
        self.set_range(e.start, end, true);
        self.free -= e.len;
        Ok(())
    }

    /// Marks a used range free.
    pub fn mark_free(&mut self, e: GroupExtent) -> Result<(), SpaceError> {
        let end = self.check_range(e)?;
        if self.next_free(e.start) < end {
            return Err(SpaceError::AlreadyFree(e));
        }
        let left = self.free_run_start(e.start);
        let right = self.next_used(end);
        decompose(&mut self.buddy, left, e.start, false);
        decompose(&mut self.buddy, end, right, false);
        decompose(&mut self.buddy, left, right, true);
        self.fragments = self.fragments + 1 - u32::from(left < e.start) - u32::from(end < right);
        self.set_range(e.start, end, false);
        self.free += e.len;
        Ok(())
    }

    /// The first free extent at or after `from` at least `min_len` long, cut to `max_len`.
    pub fn find_free(&self, from: u32, min_len: u32, max_len: u32) -> Option<GroupExtent> {
        let mut at = self.next_free(from);
        while at < self.blocks {
            let end = self.next_used(at);
            if end - at >= min_len {
                return Some(GroupExtent {
                    start: at,
                    len: (end - at).min(max_len),
                });
            }
            at = self.next_free(end);
        }
        None
    }

    /// The first free chunk of 2^order blocks aligned to its size.
    pub fn find_aligned(&self, order: u8) -> Option<u32> {
        let size = 1u32 << order;
        let mut at = self.next_free(0);
        while at < self.blocks {
            let aligned = at.next_multiple_of(size);
            let end = self.next_used(at);
            if aligned + size <= end {
                return Some(aligned);
            }
            at = self.next_free(end);
        }
        None
    }

    /// The longest free extent, cut to `max_len` (the first of equals).
    pub fn longest_free(&self, max_len: u32) -> Option<GroupExtent> {
        let mut best: Option<GroupExtent> = None;
        let mut at = self.next_free(0);
        while at < self.blocks {
            let end = self.next_used(at);
            if best.is_none_or(|b| end - at > b.len) {
                best = Some(GroupExtent {
                    start: at,
                    len: end - at,
                });
            }
            at = self.next_free(end);
        }
        best.map(|b| GroupExtent {
            start: b.start,
            len: b.len.min(max_len),
        })
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The reference model: a vector of booleans, summarised from scratch.
    fn summarise(model: &[bool]) -> (u32, [u32; ORDERS], u32) {
        let mut buddy = [0; ORDERS];
        let (mut free, mut fragments, mut i) = (0, 0, 0usize);
        while i < model.len() {
            if model[i] {
                i += 1;
                continue;
            }
            let start = i;
            while i < model.len() && !model[i] {
                i += 1;
            }
            free += (i - start) as u32;
            fragments += 1;
            decompose(&mut buddy, start as u32, i as u32, true);
        }
        (free, buddy, fragments)
    }

    #[test]
    fn bitmap_round_trip_pads_with_ones() {
        let mut bitmap = vec![0u8; 128];
        bitmap[0] = 0b1010_0001;
        let space = GroupSpace::from_bitmap(&bitmap, 1000);
        assert_eq!(space.free(), 997);
        assert_eq!(space.to_bitmap(128)[0], 0b1010_0001);
        assert_eq!(
            space.to_bitmap(128)[125],
            0xFF,
            "blocks past 1000 read as used"
        );
        // 256..512 is the largest aligned free chunk (512..1024 runs past the group).
        assert_eq!(space.largest_order(), Some(8));
    }

    fn check_against_model(blocks: u32, ops: Vec<(bool, u32, u32)>) -> Result<(), TestCaseError> {
        let mut space = GroupSpace::all_free(blocks);
        let mut model = vec![false; blocks as usize];
        for (alloc, start, len) in ops {
            let e = GroupExtent { start, len };
            let range = start as usize..(start as usize + len as usize).min(blocks as usize);
            let in_range = start.checked_add(len).is_some_and(|end| end <= blocks);
            let result = if alloc {
                space.mark_used(e)
            } else {
                space.mark_free(e)
            };
            let legal = in_range && model[range.clone()].iter().all(|&u| u != alloc);
            prop_assert_eq!(result.is_ok(), legal);
            if legal {
                model[range].iter_mut().for_each(|u| *u = alloc);
            }
            let (free, buddy, fragments) = summarise(&model);
            prop_assert_eq!(space.free(), free);
            prop_assert_eq!(space.buddy(), &buddy);
            prop_assert_eq!(space.fragments(), fragments);
        }
        let rebuilt =
            GroupSpace::from_bitmap(&space.to_bitmap(blocks.div_ceil(8) as usize), blocks);
        prop_assert_eq!(rebuilt, space);
        Ok(())
    }

    proptest! {
        /// Any sequence of allocations and frees keeps the free count, buddy summary and
        /// fragment count equal to a recomputation from the bitmap, and rejects double use.
        #[test]
        fn summary_matches_model(
            blocks in 1u32..3000,
            ops in proptest::collection::vec((any::<bool>(), 0u32..3000, 1u32..300), 1..200),
        ) {
            check_against_model(blocks, ops)?;
        }

        /// The same in groups large enough for the word summary to span several words,
        /// with extents long enough to cross many words.
        #[test]
        fn summary_matches_model_in_large_groups(
            blocks in 4000u32..33000,
            ops in proptest::collection::vec((any::<bool>(), 0u32..33000, 1u32..9000), 1..40),
        ) {
            check_against_model(blocks, ops)?;
        }


        #[test]
        fn searches_return_free_space(used in proptest::collection::vec(0u32..2048, 0..1500), order in 0u8..8, min in 1u32..64) {
            let mut space = GroupSpace::all_free(2048);
            for b in used {
                let _ = space.mark_used(GroupExtent { start: b, len: 1 });
            }
            if let Some(e) = space.find_free(100, min, 1000) {
                prop_assert!(e.start >= 100 && e.len >= min.min(1000));
                prop_assert!((e.start..e.start + e.len).all(|b| !space.is_used(b)));
            }
            if let Some(a) = space.find_aligned(order) {
                prop_assert_eq!(a % (1 << order), 0);
                prop_assert!((a..a + (1 << order)).all(|b| !space.is_used(b)));
            } else {
                prop_assert!(space.largest_order().is_none_or(|o| o < order));
            }
        }
    }
}

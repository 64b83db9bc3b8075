//! One block group's free space: the block bitmap, and a buddy summary of it (how many
//! maximal aligned power-of-two free chunks of each order it has, as mballoc's buddy
//! keeps), the free count, the number of free extents and the first free block.
//!
//! The summary is maintained incrementally: an allocation or free only re-decomposes the free
//! extents it touches, so its cost is proportional to those extents, not to the group.

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

impl GroupSpace {
    /// Builds the state from an on-disk block bitmap (bit set = in use) covering `blocks`
    /// blocks; bytes past the group are ignored.
    pub fn from_bitmap(bitmap: &[u8], blocks: u32) -> Self {
        let mut words = vec![!0u64; blocks.div_ceil(BITS) as usize];
        for (i, word) in words.iter_mut().enumerate() {
            let mut bytes = [0xFFu8; 8];
            for (j, b) in bytes.iter_mut().enumerate() {
                if let Some(&v) = bitmap.get(8 * i + j) {
                    *b = v;
                }
            }
            *word = u64::from_le_bytes(bytes);
        }
        // Blocks past the end of the group are never free.
        if blocks % BITS != 0 {
            let last = words.len() - 1;
            words[last] |= !0u64 << (blocks % BITS);
        }
        let mut space = GroupSpace {
            words,
            blocks,
            free: 0,
            buddy: [0; ORDERS],
            fragments: 0,
        };
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

    /// The first block at or after `from` whose bit equals `used`, or `blocks`.
    fn next_with(&self, from: u32, used: bool) -> u32 {
        let mut at = from;
        while at < self.blocks {
            let w = (at / BITS) as usize;
            let word = if used { self.words[w] } else { !self.words[w] };
            let masked = word & (!0u64 << (at % BITS));
            if masked != 0 {
                return (w as u32 * BITS + masked.trailing_zeros()).min(self.blocks);
            }
            at = (w as u32 + 1) * BITS;
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
        let mut at = end;
        while at > 0 {
            let w = ((at - 1) / BITS) as usize;
            let bit = (at - 1) % BITS;
            // Used bits at or below `bit` in this word.
            let used = self.words[w] & (!0u64 >> (BITS - 1 - bit));
            if used != 0 {
                return w as u32 * BITS + (BITS - used.leading_zeros());
            }
            at = w as u32 * BITS;
        }
        0
    }

    fn set_range(&mut self, start: u32, end: u32, used: bool) {
        for block in start..end {
            let (w, bit) = ((block / BITS) as usize, 1u64 << (block % BITS));
            if used {
                self.words[w] |= bit;
            } else {
                self.words[w] &= !bit;
            }
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

    proptest! {
        /// Any sequence of allocations and frees keeps the free count, buddy summary and
        /// fragment count equal to a recomputation from the bitmap, and rejects double use.
        #[test]
        fn summary_matches_model(
            blocks in 1u32..3000,
            ops in proptest::collection::vec((any::<bool>(), 0u32..3000, 1u32..300), 1..200),
        ) {
            let mut space = GroupSpace::all_free(blocks);
            let mut model = vec![false; blocks as usize];
            for (alloc, start, len) in ops {
                let e = GroupExtent { start, len };
                let range = start as usize..(start as usize + len as usize).min(blocks as usize);
                let in_range = start.checked_add(len).is_some_and(|end| end <= blocks);
                let result = if alloc { space.mark_used(e) } else { space.mark_free(e) };
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
            let rebuilt = GroupSpace::from_bitmap(&space.to_bitmap(blocks.div_ceil(8) as usize), blocks);
            prop_assert_eq!(rebuilt, space);
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

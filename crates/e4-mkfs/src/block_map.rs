//! The in-memory block bitmap of the filesystem being made, with the two searches
//! libext2fs allocates by, so every block lands where mke2fs puts it:
//! [`BlockMap::free_run`] (`ext2fs_get_free_blocks2`, for group tables) and
//! [`BlockMap::first_free_from`] (`ext2fs_new_block2`, for everything else).

/// One bit per block, set when used.
#[derive(Debug, Clone)]
pub struct BlockMap {
    bits: Vec<u64>,
    blocks: u64,
    first_data_block: u64,
}

impl BlockMap {
    pub fn new(blocks: u64, first_data_block: u64) -> Self {
        BlockMap {
            bits: vec![0; blocks.div_ceil(64) as usize],
            blocks,
            first_data_block,
        }
    }

    pub fn is_used(&self, block: u64) -> bool {
        self.bits[(block / 64) as usize] & (1 << (block % 64)) != 0
    }

    pub fn mark(&mut self, block: u64) {
        self.bits[(block / 64) as usize] |= 1 << (block % 64);
    }

    pub fn mark_range(&mut self, start: u64, len: u64) {
        for b in start..start + len {
            self.mark(b);
        }
    }

    fn run_free(&self, start: u64, len: u64) -> bool {
        (start..start + len).all(|b| !self.is_used(b))
    }

    /// The first block `b` from `start` (wrapping to the first data block when `finish`
    /// is not past `start`) with `len` free blocks at `b`, stopping at `finish`, as
    /// `ext2fs_get_free_blocks2` searches. `start` 0 means the first data block, `finish`
    /// 0 means `start`.
    pub fn free_run(&self, start: u64, finish: u64, len: u64) -> Option<u64> {
        let mut b = if start == 0 {
            self.first_data_block
        } else {
            start
        };
        let finish = if finish == 0 { start } else { finish };
        let len = len.max(1);
        loop {
            if b + len > self.blocks {
                if finish > start {
                    return None;
                }
                b = self.first_data_block;
            }
            if self.run_free(b, len) {
                return Some(b);
            }
            b += 1;
            if b == finish {
                return None;
            }
        }
    }

    /// The first free block at or after `goal`, else the first from the start
    /// (`ext2fs_new_block2`).
    pub fn first_free_from(&self, goal: u64) -> Option<u64> {
        let goal = if goal == 0 || goal >= self.blocks {
            self.first_data_block
        } else {
            goal
        };
        (goal..self.blocks)
            .chain(self.first_data_block..goal)
            .find(|&b| !self.is_used(b))
    }

    /// Free blocks in `start..end`.
    pub fn free_in(&self, start: u64, end: u64) -> u64 {
        (start..end).filter(|&b| !self.is_used(b)).count() as u64
    }

    /// The bits of `start..start+len` as bitmap bytes (bit i of the result is block
    /// start+i), for a group's block bitmap.
    pub fn bitmap_bytes(&self, start: u64, len: u64, out: &mut [u8]) {
        for i in 0..len.min(self.blocks.saturating_sub(start)) {
            if self.is_used(start + i) {
                out[(i / 8) as usize] |= 1 << (i % 8);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn searches_skip_used_blocks_and_wrap() {
        let mut m = BlockMap::new(100, 1);
        m.mark_range(1, 10);
        m.mark(13);
        assert_eq!(m.first_free_from(0), Some(11));
        assert_eq!(m.free_run(1, 100, 3), Some(14));
        assert_eq!(m.free_run(1, 100, 2), Some(11));
        m.mark_range(11, 89);
        assert_eq!(m.first_free_from(50), None);
        assert_eq!(m.free_run(1, 100, 1), None);
    }
}

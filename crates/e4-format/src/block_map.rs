//! Indirect block maps (ext2/ext3): `i_block` holds 12 direct pointers, then one single,
//! one double and one triple indirect pointer. Indirect blocks are arrays of little-endian
//! 32-bit block numbers; 0 is a hole.

/// Direct pointers in `i_block`.
pub const DIRECT_BLOCKS: u64 = 12;
/// Index in `i_block` of the single, double and triple indirect pointers.
pub const SINGLE_INDIRECT_SLOT: usize = 12;

/// Where a logical block's pointer is: the slot in `i_block`, then one index per level of
/// indirect block to follow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockMapPath {
    /// Index into the 15 `i_block` words.
    pub slot: usize,
    /// Indexes into each indirect block on the way down (0 to 3 of them).
    pub indexes: [u32; 3],
    /// How many of `indexes` are used.
    pub depth: usize,
}

/// Computes the path to `logical`'s pointer, or `None` past the triple-indirect range.
pub fn block_map_path(logical: u64, block_size: u32) -> Option<BlockMapPath> {
    let per = u64::from(block_size / 4);
    let mut rest = logical;
    if rest < DIRECT_BLOCKS {
        return Some(BlockMapPath {
            slot: rest as usize,
            indexes: [0; 3],
            depth: 0,
        });
    }
    rest -= DIRECT_BLOCKS;
    let mut span = per;
    for depth in 1..=3usize {
        if rest < span {
            let mut indexes = [0u32; 3];
            for (level, index) in indexes.iter_mut().enumerate().take(depth) {
                let below = per.pow((depth - 1 - level) as u32);
                *index = ((rest / below) % per) as u32;
            }
            return Some(BlockMapPath {
                slot: SINGLE_INDIRECT_SLOT + depth - 1,
                indexes,
                depth,
            });
        }
        rest -= span;
        span *= per;
    }
    None
}

/// Reads pointer `index` of an indirect block.
pub fn indirect_pointer(block: &[u8], index: u32) -> Option<u32> {
    crate::codec::le32(block, 4 * index as usize)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_at_each_boundary() {
        let p = |l| block_map_path(l, 1024).unwrap();
        assert_eq!((p(11).slot, p(11).depth), (11, 0));
        assert_eq!((p(12).slot, p(12).depth, p(12).indexes[0]), (12, 1, 0));
        assert_eq!((p(12 + 255).slot, p(12 + 255).indexes[0]), (12, 255));
        let d = p(12 + 256);
        assert_eq!((d.slot, d.depth, d.indexes[0], d.indexes[1]), (13, 2, 0, 0));
        let d = p(12 + 256 + 256 * 3 + 7);
        assert_eq!((d.indexes[0], d.indexes[1]), (3, 7));
        let t = p(12 + 256 + 65536);
        assert_eq!((t.slot, t.depth), (14, 3));
        assert!(block_map_path(12 + 256 + 65536 + 256 * 65536, 1024).is_none());
    }
}

//! What walking one inode's blocks finds: how many blocks it owns (data, extent tree
//! nodes, indirect blocks) and the last logical block mapped, the inputs to e2fsck's
//! `i_size` and `i_blocks` checks; and, for a directory, where each of its blocks is.
//! Subtrees walked on different threads give tallies that are combined in logical order.

use crate::state::extent_levels::ExtentLevels;

/// Where one inode's walk stands for bigalloc's rules, which look at the block mapped just
/// before (e2fsck's `previous_block` and `last_block` in `process_block_struct`). Only a
/// walk made in logical order on one tally keeps it, so under bigalloc nothing of one
/// inode is walked in parallel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClusterCursor {
    /// The physical block mapped last, data or indirect; 0 before the first.
    pub previous_block: u64,
    /// The logical block mapped last; all ones before the first (e2fsck's `~0`).
    pub last_block: u64,
}

impl Default for ClusterCursor {
    fn default() -> Self {
        ClusterCursor {
            previous_block: 0,
            last_block: u64::MAX,
        }
    }
}

/// The blocks found for one inode (or one subtree of its extent tree).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BlockTally {
    /// Allocation units owned, counting tree and indirect blocks and the xattr block:
    /// blocks, or clusters under bigalloc (e2fsck's `num_blocks`; the resize inode's
    /// blocks are counted one by one even there, as e2fsck counts them).
    pub blocks: u64,
    /// Blocks owned that are also claimed elsewhere (pass 1B counts these).
    pub shared: u64,
    /// Highest logical block mapped.
    pub last_block: Option<u64>,
    /// Highest logical block mapped by an initialized extent.
    pub last_init_block: Option<u64>,
    /// For directories: (logical, physical) of each block, in logical order.
    pub dir_blocks: Vec<(u32, u64)>,
    /// An extent node on the path to logical block 0 failed its header or checksum
    /// check, so libext2fs's `ext2fs_bmap2` of block 0 fails (e2fsck's `handle_htree`
    /// then finds the htree root invalid).
    pub block_zero_unmappable: bool,
    /// A block map names an indirect block outside the filesystem, which
    /// `ext2fs_block_iterate3` cannot follow: its walk ends in an error.
    pub indirect_unfollowed: bool,
    /// Under bigalloc, the walk's place for the cluster rules.
    pub cursor: ClusterCursor,
    /// How full each level of an extent tree is, for pass 1E's notes: only for trees
    /// with nodes below the root (a root alone is never noted), and boxed, as the
    /// tally of every inode is moved about and most have no such tree.
    pub extent_levels: Option<Box<ExtentLevels>>,
}

impl BlockTally {
    /// Adds a subtree's tally found after this one in logical order (its cursor is not
    /// carried: subtrees are only walked apart without bigalloc).
    pub fn append(&mut self, later: BlockTally) {
        self.blocks += later.blocks;
        self.shared += later.shared;
        self.last_block = self.last_block.max(later.last_block);
        self.last_init_block = self.last_init_block.max(later.last_init_block);
        self.dir_blocks.extend(later.dir_blocks);
        self.block_zero_unmappable |= later.block_zero_unmappable;
        self.indirect_unfollowed |= later.indirect_unfollowed;
        match (&mut self.extent_levels, later.extent_levels) {
            (Some(levels), Some(later)) => levels.append(&later),
            (levels, later) => *levels = levels.take().or(later),
        }
    }

    /// Records `len` data blocks mapped from `logical` at `physical` (what they add to
    /// [`Self::blocks`] is counted where they are claimed).
    pub fn add_data(
        &mut self,
        logical: u64,
        physical: u64,
        len: u64,
        initialized: bool,
        dir: bool,
    ) {
        let last = logical + len - 1;
        self.last_block = self.last_block.max(Some(last));
        if initialized {
            self.last_init_block = self.last_init_block.max(Some(last));
        }
        if dir {
            self.dir_blocks.extend(
                (0..len).filter_map(|i| u32::try_from(logical + i).ok().map(|l| (l, physical + i))),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn append_keeps_order_and_maxima() {
        let mut a = BlockTally::default();
        a.add_data(0, 100, 2, true, true);
        let mut b = BlockTally::default();
        b.add_data(5, 300, 1, false, true);
        b.blocks += 1;
        a.append(b);
        assert_eq!(a.blocks, 1);
        assert_eq!(a.last_block, Some(5));
        assert_eq!(a.last_init_block, Some(1));
        assert_eq!(a.dir_blocks, vec![(0, 100), (1, 101), (5, 300)]);
    }
}

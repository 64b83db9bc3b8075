//! How full each level of one inode's extent tree is, for pass 1E's notes
//! (`e2fsck_should_rebuild_extents`): a sound tree whose entries would fit fewer nodes
//! ("could be narrower") or fewer levels ("could be shorter"). `e2fsck -n` prints the
//! note in pass 1 and declines; the problems are `PR_NO_OK`, so the exit status stays.

use crate::report::problem::ProblemCode;

/// Levels e2fsck keeps counts for (`MAX_EXTENT_DEPTH_COUNT`); deeper ones are not counted.
const COUNTED_LEVELS: usize = 5;
/// Bytes of an extent header and of one entry.
const HEADER_SIZE: u64 = 12;
const ENTRY_SIZE: u64 = 12;

/// Entries in use and room for entries, summed over the nodes of each level (0 is the
/// root in `i_block`), as `scan_extent_node` sums them for every node it walks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ExtentLevels {
    entries: [u64; COUNTED_LEVELS],
    room: [u64; COUNTED_LEVELS],
}

impl ExtentLevels {
    /// Counts a node at `level` whose header says `entries` of `max`. A node below the
    /// root that is not full counts one entry less of room: the kernel's append leaves a
    /// split node one entry short, and e2fsck does not want to rebuild such trees again
    /// and again.
    pub fn add_node(&mut self, level: usize, entries: u16, max: u16) {
        if level >= COUNTED_LEVELS {
            return;
        }
        self.entries[level] += u64::from(entries);
        self.room[level] += u64::from(max);
        if level > 0 && entries < max {
            self.room[level] -= 1;
        }
    }

    /// Adds the counts of a subtree walked apart.
    pub fn append(&mut self, other: &ExtentLevels) {
        for level in 0..COUNTED_LEVELS {
            self.entries[level] += other.entries[level];
            self.room[level] += other.room[level];
        }
    }

    /// e2fsck's verdict on a tree of `depth` levels below the root in blocks of
    /// `block_size` bytes: the first level, from the root down, with more free room than
    /// a whole node holds (narrower), or whose entries would fit the room of a level
    /// above it (shorter); with that level.
    pub fn optimization(&self, depth: u16, block_size: u32) -> Option<(ProblemCode, usize)> {
        let per_block = (u64::from(block_size) - HEADER_SIZE) / ENTRY_SIZE;
        let levels = (usize::from(depth) + 1).min(COUNTED_LEVELS);
        for level in 0..levels {
            if self.room[level].saturating_sub(self.entries[level]) > per_block {
                return Some((ProblemCode::PR_1E_CAN_NARROW_EXTENT_TREE, level));
            }
            if (0..level).any(|above| self.entries[level] < self.room[above]) {
                return Some((ProblemCode::PR_1E_CAN_COLLAPSE_EXTENT_TREE, level));
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_leaf_of_few_extents_could_be_shorter() {
        let mut levels = ExtentLevels::default();
        levels.add_node(0, 1, 4);
        levels.add_node(1, 3, 340);
        assert_eq!(
            levels.optimization(1, 4096),
            Some((ProblemCode::PR_1E_CAN_COLLAPSE_EXTENT_TREE, 1))
        );
        // Five extents do not fit the root's four slots.
        let mut full = ExtentLevels::default();
        full.add_node(0, 1, 4);
        full.add_node(1, 5, 340);
        assert_eq!(full.optimization(1, 4096), None);
    }

    #[test]
    fn half_empty_leaves_could_be_narrower() {
        let mut levels = ExtentLevels::default();
        levels.add_node(0, 2, 4);
        levels.add_node(1, 84, 84);
        levels.add_node(1, 20, 84);
        // 1 KiB blocks: 84 entries a node; 167 of room (the node not full loses one),
        // 104 used: 63 free, under a node's worth.
        assert_eq!(levels.optimization(1, 1024), None);
        levels.add_node(1, 2, 84);
        assert_eq!(
            levels.optimization(1, 1024),
            Some((ProblemCode::PR_1E_CAN_NARROW_EXTENT_TREE, 1))
        );
    }

    /// Two leaves not full lose a slot each: 83 entries in 168 slots leave 85 free, but
    /// 83 counted.
    #[test]
    fn leaves_not_full_count_one_slot_less() {
        let mut levels = ExtentLevels::default();
        levels.add_node(0, 2, 4);
        levels.add_node(1, 42, 84);
        levels.add_node(1, 41, 84);
        assert_eq!(levels.optimization(1, 1024), None);
    }

    #[test]
    fn a_root_alone_is_never_noted() {
        let mut levels = ExtentLevels::default();
        levels.add_node(0, 0, 4);
        assert_eq!(levels.optimization(0, 4096), None);
    }
}

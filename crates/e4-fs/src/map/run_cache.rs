//! A directory's recently used runs of blocks, so that finding the block behind a logical
//! block does not walk the extent tree each time: an unlink or a create looks up the
//! directory's root and one leaf, and each walk (the inode's `i_block`, then a tree block
//! through the buffer cache) was 8 % of an unlink's instructions. The kernel keeps every
//! inode's mapping in its extent status tree for the same reason.
//!
//! The cache is kept beside the inode's in-memory state, under its lock, and holds
//! answers for one state of the mapping only: the inode's size and `i_block` as they were
//! when its runs were found. A directory's mapping changes only by growing (a block
//! appended past its size: e4 never frees or moves a live directory's blocks), every
//! growth changes its size, and every growth empties the cache (`append_block`); an undone
//! growth puts the size back, and with it a mapping whose blocks below the size are the
//! ones cached before it. Any other size or root empties it, so an answer can be stale only
//! if a directory's blocks below its size were remapped with its size and root unchanged
//! (an orphan directory freed in steps is, but nothing edits a directory without links).
//! Debug builds check every answer against a walk.

use e4_format::inode::{Inode, I_BLOCK_SIZE};

/// Runs kept at most: a directory grown in reservation windows has one run per window
/// (19 for 2,300 blocks made by turns with another), and a full cache starts again.
const MAX_RUNS: usize = 32;

/// `len` blocks from `logical` mapped at `physical` on.
#[derive(Debug, Clone, Copy)]
struct CachedRun {
    logical: u64,
    len: u64,
    physical: u64,
}

/// The state of the mapping the runs were found in.
#[derive(Debug)]
struct Runs {
    size: u64,
    root: [u8; I_BLOCK_SIZE],
    /// Sorted by `logical`; none overlap.
    runs: Vec<CachedRun>,
}

impl Runs {
    /// None yet, for `inode`'s mapping as it is now.
    fn of(inode: &Inode) -> Self {
        Runs {
            size: inode.size(),
            root: inode.record.block,
            runs: Vec::new(),
        }
    }

    /// Whether the runs were found in `inode`'s mapping as it is now.
    fn are_of(&self, inode: &Inode) -> bool {
        self.size == inode.size() && self.root == inode.record.block
    }
}

/// Runs found in one inode's mapping; empty (and no allocation) until the first is kept.
#[derive(Debug, Default)]
pub(crate) struct RunCache(Option<Box<Runs>>);

impl RunCache {
    /// The block behind `logical`, if a kept run holds it and the runs were found in
    /// `inode`'s mapping as it is now; a cache found for another state is emptied.
    pub(crate) fn physical(&mut self, inode: &Inode, logical: u64) -> Option<u64> {
        let runs = self.0.as_mut()?;
        if !runs.are_of(inode) {
            self.0 = None;
            return None;
        }
        let after = runs.runs.partition_point(|r| r.logical <= logical);
        let run = runs.runs[..after].last()?;
        (logical < run.logical + run.len).then(|| run.physical + (logical - run.logical))
    }

    /// Forgets every run: the mapping grew. Its size changed too, which the next look
    /// would find; forgetting at once also covers a growth undone and then made again to
    /// the same size and `i_block` (a depth-1 tree, whose root does not show a leaf's
    /// change) with no look in between, when runs found after the first growth would
    /// otherwise pass for the second's.
    pub(crate) fn clear(&mut self) {
        self.0 = None;
    }

    /// Keeps the run of `len` blocks from `logical` at `physical`, found in `inode`'s
    /// mapping as it is now.
    pub(crate) fn keep(&mut self, inode: &Inode, logical: u64, len: u64, physical: u64) {
        let runs = match &mut self.0 {
            Some(runs) if runs.are_of(inode) && runs.runs.len() < MAX_RUNS => runs,
            slot => slot.insert(Box::new(Runs::of(inode))),
        };
        let at = runs.runs.partition_point(|r| r.logical < logical);
        // A run found from a later block of a run kept already, or the other way round:
        // the mapping is one, so the two agree where they overlap; keep the one found last
        // and drop whatever it overlaps.
        let end = logical + len;
        let from = if at > 0 && runs.runs[at - 1].logical + runs.runs[at - 1].len > logical {
            at - 1
        } else {
            at
        };
        let to = runs.runs[at..].partition_point(|r| r.logical < end) + at;
        runs.runs.splice(
            from..to,
            [CachedRun {
                logical,
                len,
                physical,
            }],
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inode(size: u64, root_byte: u8) -> Inode {
        let mut inode = Inode::new(12, 256, 0o040755, 0);
        inode.record.block[0] = root_byte;
        inode.set_size(size);
        inode
    }

    #[test]
    fn a_kept_run_answers_for_its_blocks_only() {
        let dir = inode(40960, 1);
        let mut cache = RunCache::default();
        assert_eq!(cache.physical(&dir, 0), None);
        cache.keep(&dir, 2, 3, 100);
        assert_eq!(cache.physical(&dir, 1), None);
        assert_eq!(cache.physical(&dir, 2), Some(100));
        assert_eq!(cache.physical(&dir, 4), Some(102));
        assert_eq!(cache.physical(&dir, 5), None);
        cache.keep(&dir, 0, 2, 50);
        assert_eq!(cache.physical(&dir, 1), Some(51));
        assert_eq!(cache.physical(&dir, 3), Some(101));
    }

    /// A growth changes the size, a new root the `i_block`: either empties the cache.
    #[test]
    fn another_size_or_root_empties_it() {
        let dir = inode(40960, 1);
        let mut cache = RunCache::default();
        cache.keep(&dir, 0, 10, 100);
        assert_eq!(cache.physical(&inode(45056, 1), 3), None);
        assert_eq!(cache.physical(&dir, 3), None, "emptied");
        cache.keep(&dir, 0, 10, 100);
        assert_eq!(cache.physical(&inode(40960, 2), 3), None);
        assert_eq!(cache.physical(&dir, 3), None, "emptied");
        cache.keep(&dir, 0, 10, 100);
        cache.keep(&inode(45056, 1), 10, 1, 500);
        assert_eq!(cache.physical(&dir, 3), None, "kept for another state");
    }

    #[test]
    fn overlapping_runs_keep_the_last_found() {
        let dir = inode(40960, 1);
        let mut cache = RunCache::default();
        cache.keep(&dir, 4, 6, 104);
        cache.keep(&dir, 0, 10, 100);
        cache.keep(&dir, 12, 2, 300);
        cache.keep(&dir, 7, 3, 107);
        assert_eq!(cache.physical(&dir, 7), Some(107));
        assert_eq!(
            cache.physical(&dir, 2),
            None,
            "dropped: the run found last overlapped it"
        );
        assert_eq!(cache.physical(&dir, 13), Some(301));
    }

    #[test]
    fn a_cleared_cache_answers_nothing() {
        let dir = inode(40960, 1);
        let mut cache = RunCache::default();
        cache.keep(&dir, 0, 10, 100);
        cache.clear();
        assert_eq!(cache.physical(&dir, 3), None);
    }

    #[test]
    fn a_full_cache_starts_again() {
        let dir = inode(1 << 30, 1);
        let mut cache = RunCache::default();
        for i in 0..MAX_RUNS as u64 {
            cache.keep(&dir, 2 * i, 1, 1000 + i);
        }
        assert_eq!(cache.physical(&dir, 0), Some(1000));
        cache.keep(&dir, 1000, 1, 7);
        assert_eq!(cache.physical(&dir, 0), None);
        assert_eq!(cache.physical(&dir, 1000), Some(7));
    }
}

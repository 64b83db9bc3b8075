//! The inodes the running transaction changed, with an exact count of the inode-table
//! blocks their records lie in: what the next commit writes for them, and so what a
//! journal's transaction must have room for.
//!
//! Counting dirty inodes and dividing by the records a block holds is exact only when the
//! changed inodes are packed (a burst of creates). Inodes changed one per table block (a
//! `chmod -R` of an aged tree, a directory per group) made a transaction counted at an
//! eighth of its size on 128-byte inodes: it outgrew the log and was written around it,
//! not crash-safe (`tests/bounded_transactions.rs`). Here a table block is counted when the
//! first of its inodes turns dirty, by a bit set with one atomic `fetch_or` in a word of
//! its group's marks (the block's other inodes only load it); the handles go to shards by
//! inode number, as before. (Shards by table block made two threads whose inodes share
//! table blocks take the same lock for every create: twenty times the contention.)

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::OnceLock;

use crossbeam_utils::CachePadded;
use e4_alloc::stats::{Counter, LockStats};
use e4_format::geometry::Geometry;
use parking_lot::{Mutex, MutexGuard};

/// Shards of the handle lists, by inode number ([`e4_alloc::shard::shard_of`]).
const SHARDS: usize = 256;

/// One shard's dirty handles, each with its inode number.
type Handles<T> = Vec<(u32, T)>;

/// The dirty inodes' handles (`T`: the inode cache's). Its shard locks are counted with
/// the inode cache's (`locks` in each call): marking an inode dirty took a cache shard's
/// lock before the set had its own.
pub(crate) struct DirtySet<T> {
    geometry: Geometry,
    shards: Box<[CachePadded<Mutex<Handles<T>>>]>,
    /// Per group, a bit per table block holding a dirty inode; a group's words are made
    /// when its first inode turns dirty, so memory follows the groups in use, not the
    /// inode count the superblock claims.
    marks: Box<[OnceLock<Box<[AtomicU64]>>]>,
    /// Table blocks holding a dirty inode (an inode number past the table counts as a
    /// block of its own). Written when a block turns dirty (once per block per
    /// transaction, not once per inode) and at the commit.
    table_blocks: CachePadded<AtomicUsize>,
    /// Operations' writes to `marks` and `table_blocks`, for the lock report's shared
    /// atomic writes (a group's words are shared by the threads working in it).
    shared_writes: Counter,
}

impl<T> DirtySet<T> {
    pub fn new(geometry: &Geometry) -> Self {
        DirtySet {
            geometry: geometry.clone(),
            shards: (0..SHARDS)
                .map(|_| CachePadded::new(Mutex::default()))
                .collect(),
            marks: (0..geometry.groups()).map(|_| OnceLock::new()).collect(),
            table_blocks: CachePadded::new(AtomicUsize::new(0)),
            shared_writes: Counter::default(),
        }
    }

    fn shard<'a>(&'a self, i: usize, locks: &LockStats) -> MutexGuard<'a, Handles<T>> {
        let shard = &self.shards[i];
        locks.take(|| shard.try_lock(), || shard.lock())
    }

    /// The word and bit marking the table block of inode `ino`; `None` for a number past
    /// the table.
    fn mark_of(&self, ino: u32) -> Option<(&AtomicU64, u64)> {
        let (group, block) = self.geometry.inode_table_block(ino)?;
        let words = self.marks.get(group as usize)?.get_or_init(|| {
            (0..self.geometry.inode_table_blocks().div_ceil(64))
                .map(|_| AtomicU64::new(0))
                .collect()
        });
        Some((words.get((block / 64) as usize)?, 1 << (block % 64)))
    }

    /// Adds the handle of inode `ino`, which has just turned dirty.
    pub fn add(&self, ino: u32, handle: T, locks: &LockStats) {
        // Loaded first: the block's other inodes (15 of 16 creates) find it marked and
        // write nothing; of threads that both find it unmarked, one sets the bit.
        let new_block = match self.mark_of(ino) {
            Some((word, bit)) => {
                word.load(Ordering::Relaxed) & bit == 0 && {
                    self.shared_writes.add(1);
                    word.fetch_or(bit, Ordering::Relaxed) & bit == 0
                }
            }
            None => true,
        };
        if new_block {
            self.table_blocks.fetch_add(1, Ordering::Relaxed);
            self.shared_writes.add(1);
        }
        self.shard(e4_alloc::shard::shard_of(u64::from(ino), SHARDS), locks)
            .push((ino, handle));
    }

    /// Inode-table blocks holding a dirty inode (a load: no lock).
    pub fn table_blocks(&self) -> usize {
        self.table_blocks.load(Ordering::Relaxed)
    }

    /// Operations' writes to the set's shared words so far.
    pub fn shared_writes(&self) -> u64 {
        self.shared_writes.get()
    }

    /// Whether any inode is dirty (takes every shard's lock: not for hot paths).
    pub fn is_empty(&self, locks: &LockStats) -> bool {
        (0..SHARDS).all(|i| self.shard(i, locks).is_empty())
    }

    /// Every dirty handle with its inode number, the set left empty; the caller marks
    /// them clean. With every operation stopped (a commit's gather).
    pub fn take(&self, locks: &LockStats) -> Handles<T> {
        let mut shards: Vec<_> = (0..SHARDS).map(|i| self.shard(i, locks)).collect();
        let mut out = Vec::with_capacity(shards.iter().map(|s| s.len()).sum());
        for shard in &mut shards {
            out.append(shard);
        }
        drop(shards);
        // Every marked block holds one of `out`'s inodes: the first of them seen swaps its
        // word to zero, counting the blocks it marked, and the rest find it zero (a load,
        // where a read-modify-write per inode was a tenth of the take).
        let cleared: u32 = out
            .iter()
            .map(|(ino, _)| match self.mark_of(*ino) {
                Some((word, _)) if word.load(Ordering::Relaxed) != 0 => {
                    word.swap(0, Ordering::Relaxed).count_ones()
                }
                Some(_) => 0,
                None => 1,
            })
            .sum();
        self.table_blocks
            .fetch_sub(cleared as usize, Ordering::Relaxed);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use e4_format::superblock::Superblock;

    /// 1 KiB blocks, 256-byte inodes (4 records a block), 64 inodes a group, 4 groups.
    fn geometry() -> Geometry {
        let mut raw = [0u8; 1024];
        for (at, value) in [
            (0x0, 256u32), // s_inodes_count
            (0x4, 4096),   // s_blocks_count_lo
            (0x14, 1),     // s_first_data_block
            (0x20, 1024),  // s_blocks_per_group
            (0x24, 1024),  // s_clusters_per_group
            (0x28, 64),    // s_inodes_per_group
            (0x4C, 1),     // s_rev_level
        ] {
            raw[at..at + 4].copy_from_slice(&value.to_le_bytes());
        }
        raw[0x38..0x3A].copy_from_slice(&0xEF53u16.to_le_bytes());
        raw[0x58..0x5A].copy_from_slice(&256u16.to_le_bytes());
        Geometry::new(&Superblock::decode(&raw))
    }

    #[test]
    fn a_table_block_counts_once_however_many_of_its_inodes_are_dirty() {
        let set = DirtySet::new(&geometry());
        let locks = LockStats::default();
        for ino in [1, 2, 4, 3, 5, 64, 65, 129, 300] {
            set.add(ino, ino, &locks);
        }
        // Blocks: 1-4, 5, 61-64, 65 (group 1's first), 129 (group 2's first), and 300,
        // past the table, one of its own.
        assert_eq!(set.table_blocks(), 6);
        assert!(!set.is_empty(&locks));
        let mut taken: Vec<u32> = set.take(&locks).into_iter().map(|(_, h)| h).collect();
        taken.sort_unstable();
        assert_eq!(taken, [1, 2, 3, 4, 5, 64, 65, 129, 300]);
        assert_eq!(set.table_blocks(), 0);
        assert!(set.is_empty(&locks));
        set.add(6, 6, &locks);
        assert_eq!(
            set.table_blocks(),
            1,
            "a block counted again in the next transaction"
        );
    }

    #[test]
    fn threads_marking_the_same_blocks_count_each_block_once() {
        // 256 inodes, 4 to a block: 64 blocks. Each of 8 threads (more than cores) adds
        // every eighth inode, all starting together, so neighbours in a block are added
        // by different threads at about the same time.
        for _ in 0..200 {
            let set = DirtySet::new(&geometry());
            let locks = LockStats::default();
            let start = std::sync::Barrier::new(8);
            std::thread::scope(|s| {
                for t in 0..8u32 {
                    let (set, locks, start) = (&set, &locks, &start);
                    s.spawn(move || {
                        start.wait();
                        for ino in (1..=256u32).filter(|i| i % 8 == t) {
                            set.add(ino, ino, locks);
                        }
                    });
                }
            });
            assert_eq!(set.table_blocks(), 64);
            assert_eq!(set.take(&locks).len(), 256);
            assert_eq!(set.table_blocks(), 0);
        }
    }
}

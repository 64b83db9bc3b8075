//! Lock traffic of the engine, readable from the handle ([`Filesystem::lock_stats`]), so a
//! benchmark can print acquisitions and contended acquisitions per operation beside its
//! throughput (DESIGN.md, concurrency rule 5). Every lock is taken through e4-alloc's
//! [`LockStats::take`](e4_alloc::stats::LockStats::take), whose counting is striped
//! ([`Counter`](e4_alloc::stats::Counter)), so it does not itself become a shared hot line.

use e4_alloc::stats::LockSnapshot;

use crate::filesystem::Filesystem;

/// Every lock kind on the engine's hot paths, with its counts so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LockReport {
    /// Per-inode locks (files and directories).
    pub inode: LockSnapshot,
    /// Shards of the inode cache (finding or inserting a handle).
    pub inode_cache_shards: LockSnapshot,
    /// Shards of the buffer cache.
    pub buffer_cache_shards: LockSnapshot,
    /// Shards of the dentry cache (a probe per path component, a fill per miss, a forget
    /// per removed or replaced name).
    pub dentry_cache_shards: LockSnapshot,
    /// The commit gate, taken for reading by every operation (one slot per thread).
    pub commit_gate: LockSnapshot,
    /// Block groups' locks in the block allocator.
    pub block_groups: LockSnapshot,
    /// Small-file packing windows' locks.
    pub packing_windows: LockSnapshot,
    /// Inode groups' locks in the inode allocator (claims and frees).
    pub inode_groups: LockSnapshot,
    /// Writes to shared atomics so far: free-space index bit moves, the free-block and
    /// free-inode counters' shared-pool operations (refills, direct pool use, drains), and
    /// operations' changes of the buffer cache's dirty count and of the dirty inodes'
    /// table-block marks and count, and the log room's shared pool. The rest of the
    /// counters' traffic stays in per-slot lines and is not counted.
    pub shared_atomic_writes: u64,
    /// Commits so far.
    pub commits: u64,
    /// Nanoseconds callers spent committing or waiting for a commit so far: fsync, sync,
    /// and operations twice past the commit threshold (the commit thread makes the others,
    /// and its time is not counted).
    pub commit_wait_nanos: u64,
    /// Nanoseconds operations spent held at the commit gate while a commit gathered (the
    /// part of any commit every operation waits for).
    pub gate_wait_nanos: u64,
    /// Nanoseconds operations spent waiting for log room before they joined a transaction
    /// (`txn/log_room.rs`: the operations in flight held all of it).
    pub room_wait_nanos: u64,
    /// Journal blocks written so far (descriptors, copies, revokes, commit blocks; 0
    /// without a journal).
    pub log_blocks: u64,
    /// Commits so far too large for the log, written home around it (not crash-safe;
    /// [`crate::JournalStats::unjournaled`]): a bound on transactions failed.
    pub unjournaled: u64,
}

impl Filesystem {
    /// Lock acquisitions and contention so far, per lock kind (all zeros for the
    /// allocators and the gate when the filesystem is read-only).
    pub fn lock_stats(&self) -> LockReport {
        let mut report = LockReport {
            inode: self.inodes.lock_stats().snapshot(),
            inode_cache_shards: self.inodes.shard_stats().snapshot(),
            buffer_cache_shards: self.store.cache().shard_stats().snapshot(),
            dentry_cache_shards: self.dentries.shard_stats().snapshot(),
            ..LockReport::default()
        };
        if let Some(w) = &self.writer {
            report.commit_gate = w.txns.gate_stats().snapshot();
            report.commits = w.txns.commits();
            report.commit_wait_nanos = w.txns.commit_wait_nanos();
            report.gate_wait_nanos = w.txns.gate_wait_nanos();
            report.room_wait_nanos = w.txns.room_wait_nanos();
            let journal = w.journal.as_ref().map(|j| j.stats()).unwrap_or_default();
            report.log_blocks = journal.log_blocks;
            report.unjournaled = journal.unjournaled;
            let blocks = w.space.blocks.stats();
            report.block_groups = blocks.group_locks.snapshot();
            report.packing_windows = blocks.packing_locks.snapshot();
            let pool_writes = |c: &e4_alloc::limit_counter::LimitCounterStats| {
                c.refills.get() + c.pool_direct.get() + c.drains.get()
            };
            report.shared_atomic_writes = w.space.blocks.index().stats().updates.get()
                + pool_writes(w.space.blocks.counter_stats())
                + pool_writes(w.space.inodes.counter_stats())
                + self.store.cache().shared_writes()
                + self.inodes.dirty_shared_writes()
                + w.txns.room_shared_writes();
            let inodes = w.space.inodes.stats();
            let (claims, frees) = (inodes.group_locks.snapshot(), inodes.free_locks.snapshot());
            report.inode_groups = LockSnapshot {
                acquisitions: claims.acquisitions + frees.acquisitions,
                contended: claims.contended + frees.contended,
                try_skips: claims.try_skips + frees.try_skips,
            };
        }
        report
    }
}

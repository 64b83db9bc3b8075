//! What a filesystem open for writing has besides its reader: the allocators (e4-alloc), the
//! running transaction and its commit.
//!
//! Every operation runs inside a [`TxnHandle`]: it joins the running transaction by taking
//! one slot of the commit gate for reading (slots are per thread, so operations on different
//! threads share no lock word). Transactions are numbered. A commit closes every slot, so it
//! waits for the handles that are running, and while the gate is closed it switches to the
//! next transaction and gathers what it will write: dirty inodes into their inode-table
//! blocks, the inodes the transaction freed given back to the inode allocator (so a number
//! is never reused in the transaction that freed it), inode bitmaps (and newly exposed
//! inode-table slots, zeroed), the list of dirty
//! metadata blocks and the changed block groups' bitmaps ([`Writer::gather`]). It then
//! reopens the gate, and writes while the next transaction runs, as jbd2 commits one
//! transaction while the next one runs: every gathered block sealed by its role, block
//! bitmaps, group descriptors and the superblock; it flushes the device; and only then
//! releases the blocks the transaction freed (pending frees), so no block is reused before
//! the change that freed it is on disk. One commit runs at a time. File data is written to
//! its final place during the operation itself, before any commit that makes it reachable.
//!
//! Until the journal lands, metadata goes to its home location directly: a commit that is
//! interrupted (a crash, a failed write) can leave the image inconsistent, and after a failed
//! commit the filesystem refuses further changes. Between commits the image is consistent:
//! a gathered block that the next transaction changes is written as the commit froze it
//! (see [`Writer::write_out`]), which is also what the journal will log.

use std::sync::atomic::{AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crossbeam_utils::CachePadded;
use e4_alloc::{
    AllocatorConfig, BlockAllocator, DirtyGroup, Geometry as AllocGeometry, GroupLocking,
    GroupSummary, InodeAllocator, InodeGeometry, InodeGroupSummary, Reserve, TransactionFrees,
};
use e4_format::bitmap::{BitmapBlock, BitmapKind, BitmapSeed};
use e4_format::features::{CompatFeatures, RoCompatFeatures};
use e4_format::group_descriptor::{
    GroupChecksum, BG_BLOCK_UNINIT, BG_INODE_UNINIT, BG_INODE_ZEROED,
};
use e4_format::superblock::{Superblock, STATE_VALID, SUPERBLOCK_OFFSET};
use e4_format::MetadataBlock;
use parking_lot::{Condvar, Mutex, MutexGuard, RwLock, RwLockReadGuard};

use e4_alloc::stats::{Counter, LockStats};

use crate::error::{Error, Result};
use crate::filesystem::Filesystem;
use crate::io::lock_counting::counted_read;
use crate::space::caller::Caller;
use crate::txn::write_back;

/// Limit-counter slots, commit-gate slots and pending-free lists: one per thread up to this.
const SLOTS: usize = 64;

/// How long an fsync waits for another thread's commit before sleeping on the commit lock.
const COMMIT_SPIN: Duration = Duration::from_micros(200);

/// Stripes of the xattr block reference-count locks.
const XATTR_BLOCK_LOCKS: usize = 64;

/// Dirty metadata blocks that make an operation commit once it is done; at most the buffer
/// cache's capacity. Dirty blocks are never evicted: past the capacity a shard grows beyond
/// its share until the commit (`Shard::evict_one` in the buffer cache), and the clean
/// blocks an operation needs are read again. Half the capacity, the limit before, made two
/// threads' 200,000 unlinks (13,500 dirty blocks against 8,192) commit inside the
/// benchmark's timed phase where one thread's 100,000 did not.
const DIRTY_LIMIT: usize = 16 * 1024;

thread_local! {
    static THREAD_SLOT: usize = {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        NEXT.fetch_add(1, Ordering::Relaxed) % SLOTS
    };
}

/// This thread's slot.
pub(crate) fn thread_slot() -> usize {
    THREAD_SLOT.with(|s| *s)
}

/// An operation's membership in the running transaction. Hold it across every change the
/// operation makes; drop it before waiting for a commit.
pub(crate) struct TxnHandle<'a> {
    _gate: RwLockReadGuard<'a, ()>,
    pub slot: usize,
}

pub(crate) struct Writer {
    pub blocks: BlockAllocator,
    pub inodes: InodeAllocator,
    gate: Box<[CachePadded<RwLock<()>>]>,
    /// Each slot's frees in the running transaction.
    frees: Box<[CachePadded<Mutex<TransactionFrees>>]>,
    /// Each slot's inodes freed in the running transaction: given to the inode allocator
    /// when the commit gathers its inode bitmaps, all at once, with every operation
    /// stopped. An unlink then touches no lock or bitmap line another thread uses (the
    /// inodes of two threads' files share groups, and their frees met on the group's lock),
    /// and a number is never handed out again in the transaction that freed it.
    inode_frees: Box<[CachePadded<Mutex<Vec<FreedInode>>>]>,
    /// The running transaction's number: operations that start now join it.
    running: AtomicU64,
    /// The last transaction written back (0: none yet). Advanced only under `commit_lock`.
    committed: AtomicU64,
    commit_lock: Mutex<()>,
    /// Whether a commit is running: set and cleared by [`CommitTurn`] under this lock, which
    /// fsyncs sleep on ([`Self::wait_for_commit_end`]) until `commit_ended` wakes them all.
    committing: Mutex<bool>,
    commit_ended: Condvar,
    /// Serialises renames that move something to another directory (as the kernel's
    /// `s_vfs_rename_mutex` does), so two of them cannot make a directory its own ancestor.
    pub rename_lock: Mutex<()>,
    /// Locks for xattr blocks' reference counts, striped by block number: a shared block
    /// has no owning inode whose lock would cover it (the kernel locks its buffer).
    xattr_block_locks: Box<[CachePadded<Mutex<()>>]>,
    /// The superblock as it will be written next.
    superblock: Mutex<Superblock>,
    /// Inodes without links that are still open: the on-disk orphan list (`s_last_orphan`,
    /// chained through `i_dtime`) is rebuilt from this at each commit, so e2fsck frees them
    /// if the filesystem is not unmounted cleanly. Touched only when the last link of an open
    /// file goes and at its last close.
    pub orphans: Mutex<std::collections::BTreeSet<u32>>,
    gate_locks: LockStats,
    commits: Counter,
    /// Blocks freed since the last commit: they are free again only after it.
    pending_blocks: AtomicU64,
    /// Pending frees that make an operation commit: a sixteenth of the volume.
    pending_limit: u64,
    /// [`OPEN`], [`FAILED`] (a commit failed part-way: the image may be inconsistent, so
    /// further changes are refused) or [`UNMOUNTED`].
    state: AtomicU8,
    /// Commit once this long has passed since the last commit; `None`: no interval.
    commit_interval: Option<Duration>,
    /// The origin of `last_commit`.
    epoch: Instant,
    /// Nanoseconds from `epoch` to the end of the last commit (to the start, before the
    /// first). Written once per commit; operations only load it, and it has its own cache
    /// line, so the end-of-operation check adds no shared write and no line bouncing.
    last_commit: CachePadded<AtomicU64>,
    /// The set-aside blocks this handle's writers may fall back to: [`Reserve::Root`] when
    /// [`OpenOptions::caller`](crate::OpenOptions::caller) may use the superuser's blocks,
    /// otherwise [`Reserve::None`].
    pub reserve: Reserve,
}

/// An inode freed in the running transaction, waiting for its commit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct FreedInode {
    ino: u32,
    directory: bool,
}

/// What a commit gathered with every operation stopped, to write while the next
/// transaction runs.
struct CommitBatch {
    /// Groups whose inode bitmaps were written (their descriptors are written with the rest).
    inode_groups: Vec<u32>,
    /// Dirty blocks, sorted by number.
    buffers: Vec<std::sync::Arc<crate::buffer::cache::Buffer>>,
    /// Changed block groups with the bitmaps to write.
    block_groups: Vec<DirtyGroup>,
}

/// A running commit: the commit lock, and [`Writer::committing`] set. Dropping it, on
/// every path out of a commit (failed ones and panics included), clears the flag and wakes
/// the fsyncs sleeping in [`Writer::wait_for_commit_end`], so none sleeps past the commit
/// it waits for.
struct CommitTurn<'a> {
    _one: MutexGuard<'a, ()>,
    writer: &'a Writer,
}

impl<'a> CommitTurn<'a> {
    fn new(writer: &'a Writer, one: MutexGuard<'a, ()>) -> Self {
        *writer.committing.lock() = true;
        CommitTurn { _one: one, writer }
    }
}

impl Drop for CommitTurn<'_> {
    fn drop(&mut self) {
        *self.writer.committing.lock() = false;
        self.writer.commit_ended.notify_all();
    }
}

const OPEN: u8 = 0;
const FAILED: u8 = 1;
const UNMOUNTED: u8 = 2;

impl Writer {
    /// Builds the allocators from the descriptors (bitmaps load lazily per group) and marks
    /// the filesystem as being written.
    pub fn start(fs: &Filesystem, commit_interval: Duration, caller: &Caller) -> Result<Self> {
        let sb = fs.superblock();
        if sb.cluster_ratio() > 1 {
            return Err(Error::NotSupported(
                "writing bigalloc filesystems (clusters larger than a block)".into(),
            ));
        }
        if sb.last_orphan != 0 || sb.ro_compat().contains(RoCompatFeatures::ORPHAN_PRESENT) {
            return Err(Error::ReadOnly(
                "the filesystem has orphan inodes to clean up; run e2fsck first".into(),
            ));
        }
        let geometry = &fs.geometry;
        let descriptors = fs.group_descriptors();
        let csum = sb.has_metadata_csum() || sb.ro_compat().contains(RoCompatFeatures::GDT_CSUM);
        let mut system_zone = Vec::new();
        for (g, desc) in descriptors.iter().enumerate() {
            let base = geometry.base_metadata(g as u32);
            for (start, len) in [
                (base.start, base.len),
                (desc.block_bitmap(), 1),
                (desc.inode_bitmap(), 1),
                (desc.inode_table(), geometry.inode_table_blocks()),
            ] {
                if len > 0 {
                    system_zone.push(e4_alloc::Extent {
                        start,
                        len: len as u32,
                    });
                }
            }
        }
        let alloc_geometry = AllocGeometry {
            first_data_block: geometry.first_data_block(),
            blocks_per_group: geometry.blocks_per_group(),
            blocks: geometry.blocks(),
        };
        let device = fs.store.device();
        let block_size = fs.block_size() as usize;
        let block_seed = BitmapSeed::for_superblock(sb, BitmapKind::Block);
        let bitmap_descs = descriptors.clone();
        let source = move |g: u32| -> std::result::Result<Vec<u8>, String> {
            let desc = &bitmap_descs[g as usize];
            let mut bitmap = vec![0u8; block_size];
            device
                .read_exact_at(&mut bitmap, desc.block_bitmap() * block_size as u64)
                .map_err(|e| format!("read of block {}: {e}", desc.block_bitmap()))?;
            if let Some(seed) = block_seed {
                BitmapBlock::of(desc, BitmapKind::Block, g)
                    .verify(&bitmap, seed)
                    .map_err(|e| e.to_string())?;
            }
            Ok(bitmap)
        };
        let config = AllocatorConfig {
            counter_slots: SLOTS,
            ..AllocatorConfig::default()
        };
        let summary = |g: u32| {
            let d = &descriptors[g as usize];
            GroupSummary {
                free: d.free_blocks_count(),
                uninit: csum && d.flags & BG_BLOCK_UNINIT != 0,
            }
        };
        let blocks = BlockAllocator::open(alloc_geometry, config, summary, &system_zone, source)
            .map_err(Error::from_block_allocation)?
            .with_root_reserve(sb.reserved_blocks_count())
            .with_metadata_reserve(crate::ops::stat::metadata_reserve(sb))
            .with_flex_groups(sb.groups_per_flex());
        let inode_geometry = InodeGeometry {
            groups: geometry.groups(),
            inodes_per_group: geometry.inodes_per_group(),
            groups_per_flex: sb.groups_per_flex(),
            first_inode: sb.first_ino(),
        };
        let inode_device = fs.store.device();
        let inode_descs = descriptors.clone();
        let ipg = geometry.inodes_per_group();
        let inode_seed = BitmapSeed::for_superblock(sb, BitmapKind::Inode);
        let inode_source = move |g: u32| -> std::result::Result<Vec<u8>, String> {
            let desc = &inode_descs[g as usize];
            let mut bitmap = vec![0u8; block_size];
            inode_device
                .read_exact_at(&mut bitmap, desc.inode_bitmap() * block_size as u64)
                .map_err(|e| format!("read of block {}: {e}", desc.inode_bitmap()))?;
            if let Some(seed) = inode_seed {
                BitmapBlock::of(desc, BitmapKind::Inode, g)
                    .verify(&bitmap, seed)
                    .map_err(|e| e.to_string())?;
            }
            bitmap.truncate(ipg.div_ceil(8) as usize);
            Ok(bitmap)
        };
        let inodes = InodeAllocator::open(
            inode_geometry,
            GroupLocking::TrySkip,
            SLOTS,
            |g| {
                let d = &descriptors[g as usize];
                // The uninit flags and itable_unused mean something only with checksums.
                InodeGroupSummary {
                    free_inodes: d.free_inodes_count(),
                    used_dirs: d.used_dirs_count(),
                    itable_unused: if csum { d.itable_unused() } else { 0 },
                    uninit: csum && d.flags & BG_INODE_UNINIT != 0,
                }
            },
            inode_source,
        );
        let mut superblock = sb.clone();
        superblock.state &= !STATE_VALID;
        superblock.mnt_count = superblock.mnt_count.wrapping_add(1);
        superblock.set_mount_time(crate::time::now().seconds);
        let writer = Writer {
            blocks,
            inodes,
            gate: (0..SLOTS)
                .map(|_| CachePadded::new(RwLock::new(())))
                .collect(),
            frees: (0..SLOTS)
                .map(|_| CachePadded::new(Mutex::new(TransactionFrees::new(1))))
                .collect(),
            inode_frees: (0..SLOTS)
                .map(|_| CachePadded::new(Mutex::new(Vec::new())))
                .collect(),
            running: AtomicU64::new(1),
            committed: AtomicU64::new(0),
            commit_lock: Mutex::new(()),
            committing: Mutex::new(false),
            commit_ended: Condvar::new(),
            rename_lock: Mutex::new(()),
            xattr_block_locks: (0..XATTR_BLOCK_LOCKS)
                .map(|_| CachePadded::new(Mutex::new(())))
                .collect(),
            superblock: Mutex::new(superblock),
            orphans: Mutex::default(),
            gate_locks: LockStats::default(),
            commits: Counter::default(),
            pending_blocks: AtomicU64::new(0),
            pending_limit: (fs.geometry.blocks() / 16).max(256),
            state: AtomicU8::new(OPEN),
            commit_interval: (!commit_interval.is_zero()).then_some(commit_interval),
            epoch: Instant::now(),
            last_commit: CachePadded::new(AtomicU64::new(0)),
            reserve: if caller.may_use_reserved_blocks(sb) {
                Reserve::Root
            } else {
                Reserve::None
            },
        };
        // The image says "being written" before anything else changes.
        writer.write_superblock(fs)?;
        fs.store.flush("after marking the filesystem in use")?;
        Ok(writer)
    }

    pub fn check_open(&self) -> Result<()> {
        match self.state.load(Ordering::Acquire) {
            OPEN => Ok(()),
            FAILED => Err(Error::ReadOnly(
                "an earlier write-back failed; the image needs e2fsck".into(),
            )),
            _ => Err(Error::ReadOnly("the filesystem was unmounted".into())),
        }
    }

    /// Whether the writer still accepts changes (not unmounted, no failed commit).
    pub fn is_open(&self) -> bool {
        self.state.load(Ordering::Acquire) == OPEN
    }

    pub fn gate_stats(&self) -> &LockStats {
        &self.gate_locks
    }

    pub fn commits(&self) -> u64 {
        self.commits.get()
    }

    /// Joins the running transaction.
    pub fn begin(&self) -> Result<TxnHandle<'_>> {
        self.check_open()?;
        let slot = thread_slot();
        Ok(TxnHandle {
            _gate: counted_read(&self.gate[slot], &self.gate_locks),
            slot,
        })
    }

    /// Whether this handle's writes may use the superuser's reserve (e4-alloc's
    /// `allocate_append_as` and `allocate_small_file_as` take it as a flag).
    pub fn may_use_root_reserve(&self) -> bool {
        self.reserve >= Reserve::Root
    }

    /// Frees inode `ino` when the running transaction commits (see `inode_frees`).
    pub fn free_inode(&self, ino: u32, directory: bool, slot: usize) {
        self.inode_frees[slot]
            .lock()
            .push(FreedInode { ino, directory });
    }

    /// Inodes freed in the running transaction, free once it commits.
    pub fn pending_inodes(&self) -> u64 {
        self.inode_frees.iter().map(|f| f.lock().len() as u64).sum()
    }

    /// Gives the running transaction's freed inodes to the inode allocator, in number
    /// order (a group's frees together). Called with every operation stopped, before the
    /// inode bitmaps are gathered, so the bitmaps this commit writes show them free.
    fn release_freed_inodes(&self) -> Result<()> {
        let mut freed: Vec<FreedInode> = Vec::new();
        for frees in self.inode_frees.iter() {
            freed.append(&mut frees.lock());
        }
        freed.sort_unstable();
        for FreedInode { ino, directory } in freed {
            self.inodes
                .free(ino, directory, 0)
                .map_err(|e| Error::Internal(format!("freeing inode {ino} at commit: {e}")))?;
        }
        Ok(())
    }

    /// Frees `len` blocks from `start` when the running transaction commits. The caller
    /// holds a handle, so the transaction cannot commit in between.
    pub fn free_blocks(&self, start: u64, len: u64, slot: usize) -> Result<()> {
        let mut frees = self.frees[slot].lock();
        self.pending_blocks.fetch_add(len, Ordering::Relaxed);
        let mut at = start;
        while at < start + len {
            let piece = (start + len - at).min(u64::from(u32::MAX)) as u32;
            self.blocks
                .free_in_transaction(
                    e4_alloc::Extent {
                        start: at,
                        len: piece,
                    },
                    &mut frees,
                )
                .map_err(|_| {
                    Error::Format(e4_format::FormatError::corrupt(
                        e4_format::Structure::BlockMapping,
                        e4_format::Location::Block(at),
                        e4_format::Problem::UnfreeableBlocks {
                            len: u64::from(piece),
                        },
                    ))
                })?;
            at += u64::from(piece);
        }
        Ok(())
    }

    /// Whether the operation that just finished should commit: many dirty blocks, many
    /// freed blocks that only a commit makes reusable, or the commit interval has passed.
    /// Loads and one clock read (`Instant::now`, a vDSO call of about 20 ns): no lock and
    /// no shared write.
    pub fn wants_commit(&self, fs: &Filesystem) -> bool {
        fs.store.cache().dirty_count() > DIRTY_LIMIT.min(fs.store.cache().capacity())
            || self.pending_blocks.load(Ordering::Relaxed) > self.pending_limit
            || self
                .commit_interval
                .is_some_and(|interval| self.since_last_commit() >= interval)
    }

    /// The commit interval (`None` when interval commits are off).
    pub fn commit_interval(&self) -> Option<Duration> {
        self.commit_interval
    }

    /// Time since the last commit ended (since the writer started, before the first).
    pub fn since_last_commit(&self) -> Duration {
        let last = Duration::from_nanos(self.last_commit.load(Ordering::Relaxed));
        self.epoch.elapsed().saturating_sub(last)
    }

    /// Whether the running transaction holds changes a commit would write: dirty blocks or
    /// inodes, or pending frees. Takes the inode cache's shard locks: for the interval
    /// thread, not for operations.
    pub fn has_changes(&self, fs: &Filesystem) -> bool {
        fs.store.cache().dirty_count() > 0
            || self.pending_blocks.load(Ordering::Relaxed) > 0
            || fs.inodes.any_dirty()
    }

    /// The running transaction's number. Every operation that finished before this call
    /// belongs to it or to an earlier one.
    pub fn running_txn(&self) -> u64 {
        self.running.load(Ordering::Acquire)
    }

    /// Makes sure transaction `txn` and every earlier one are written back, committing the
    /// running transaction only if they are not (jbd2's `jbd2_log_wait_commit`). This is
    /// how fsyncs share commits: callers that find another thread committing wait for its
    /// end ([`Self::wait_for_commit_end`]) and return if it wrote their transaction; of the
    /// others, the first to take the commit lock commits for all of them, so one commit
    /// answers every fsync that was waiting for it.
    pub fn commit_through(&self, fs: &Filesystem, txn: u64) -> Result<()> {
        loop {
            if self.committed.load(Ordering::Acquire) >= txn {
                return self.check_open();
            }
            if let Some(one) = self.commit_lock.try_lock() {
                if self.committed.load(Ordering::Acquire) >= txn {
                    return self.check_open();
                }
                return self.commit_locked(fs, CommitTurn::new(self, one));
            }
            self.wait_for_commit_end(txn);
        }
    }

    /// While another thread commits, waits until it ends or `txn` is written. First
    /// without sleeping, for up to [`COMMIT_SPIN`]: an fsync-driven commit takes tens of
    /// microseconds, and a sleeping thread takes about as long again to be woken on another
    /// CPU, so the waiter checks and yields its CPU to any other runnable thread instead.
    /// Then asleep on [`Self::commit_ended`], which the commit's end wakes all at once: the
    /// waiters it covered return, and of the rest one takes the commit lock and commits for
    /// all of them. (Sleeping on the commit lock itself would hand it from waiter to waiter,
    /// one wake-up after another, each finding its transaction written and passing the lock
    /// on, while no commit could start: at 64 fsyncing threads that chain was most of the
    /// time.)
    fn wait_for_commit_end(&self, txn: u64) {
        let written = || self.committed.load(Ordering::Acquire) >= txn;
        let started = Instant::now();
        while self.commit_lock.is_locked() && started.elapsed() < COMMIT_SPIN {
            if written() {
                return;
            }
            std::thread::yield_now();
        }
        let mut committing = self.committing.lock();
        // The flag changes only under its lock, so a commit that ends after this check
        // wakes this thread.
        while *committing && !written() {
            self.commit_ended.wait(&mut committing);
        }
    }

    /// Writes the running transaction back (see the module docs for the order).
    pub fn commit(&self, fs: &Filesystem) -> Result<()> {
        self.commit_locked(fs, CommitTurn::new(self, self.commit_lock.lock()))
    }

    fn commit_locked(&self, fs: &Filesystem, _turn: CommitTurn<'_>) -> Result<()> {
        let closed: Vec<_> = self.gate.iter().map(|g| g.write()).collect();
        self.check_open()?;
        // The switch: operations from here on join the next transaction, and its frees
        // and dirty marks are its own.
        let txn = self.running.fetch_add(1, Ordering::AcqRel);
        let frees: Vec<TransactionFrees> = self
            .frees
            .iter()
            .map(|f| std::mem::replace(&mut *f.lock(), TransactionFrees::new(txn + 1)))
            .collect();
        self.pending_blocks.store(0, Ordering::Relaxed);
        let gathered = self.gather(fs);
        drop(closed);
        let result = gathered.and_then(|batch| self.write_out(fs, batch));
        if result.is_err() {
            self.state.store(FAILED, Ordering::Release);
            return result;
        }
        for f in frees {
            self.blocks.commit_frees(f, 0);
        }
        self.committed.store(txn, Ordering::Release);
        self.commits.add(1);
        // OK to cast: u64 nanoseconds cover 584 years of one writer.
        let now = self.epoch.elapsed().as_nanos() as u64;
        self.last_commit.store(now, Ordering::Relaxed);
        Ok(())
    }

    /// The part of a commit that needs every operation stopped: the orphan chain, dirty
    /// inodes into their table blocks, inode bitmaps (and the table slots they expose),
    /// and the lists of dirty blocks and changed block groups, with the groups' bitmaps as
    /// they stand. Nothing here waits for the device but the few inode bitmap writes.
    fn gather(&self, fs: &Filesystem) -> Result<CommitBatch> {
        self.chain_orphans(fs)?;
        write_back::write_inode_records(fs, &fs.inodes.take_dirty())?;
        self.release_freed_inodes()?;
        let inode_groups = self.write_inode_bitmaps(fs)?;
        let buffers = fs.store.cache().take_dirty();
        let block_groups = self
            .blocks
            .take_dirty_groups(fs.block_size() as usize)
            .map_err(Error::from_block_allocation)?;
        Ok(CommitBatch {
            inode_groups,
            buffers,
            block_groups,
        })
    }

    /// The rest of a commit, while the next transaction runs: the gathered blocks, block
    /// bitmaps, descriptors, superblock, flush. An operation that changes a gathered block
    /// meanwhile first freezes a copy of it for this commit ([`crate::buffer::cache::Buffer`]),
    /// and the next commit, which starts only after this one, writes the change. No block
    /// freed by either transaction can be reused before its own commit ends, so none of the
    /// blocks written here can belong to something else by now.
    fn write_out(&self, fs: &Filesystem, batch: CommitBatch) -> Result<()> {
        let CommitBatch {
            mut inode_groups,
            buffers,
            block_groups,
        } = batch;
        write_back::write_buffers(fs, &buffers)?;
        drop(buffers);
        inode_groups.extend(self.write_block_bitmaps(fs, block_groups)?);
        self.write_descriptors(fs, inode_groups)?;
        self.write_superblock(fs)?;
        fs.store.flush("at commit")
    }

    /// Writes the changed groups' inode bitmaps; returns those groups.
    fn write_inode_bitmaps(&self, fs: &Filesystem) -> Result<Vec<u32>> {
        let sb = fs.superblock();
        let bs = fs.block_size() as usize;
        let ipg = sb.inodes_per_group;
        let seed = BitmapSeed::for_superblock(sb, BitmapKind::Inode);
        let checksummed =
            sb.has_metadata_csum() || sb.ro_compat().contains(RoCompatFeatures::GDT_CSUM);
        let dirty = self.inodes.take_dirty_groups();
        let changed: Vec<u32> = dirty.iter().map(|(g, _)| *g).collect();
        for (g, snapshot) in dirty {
            if checksummed {
                let (flags, unused) = {
                    let desc = fs.descriptors[g as usize].lock();
                    (desc.flags, desc.itable_unused())
                };
                let exposed_to = ipg - snapshot.itable_unused.min(ipg);
                if flags & BG_INODE_ZEROED == 0 || flags & BG_INODE_UNINIT != 0 {
                    // Slots e2fsck now reads must hold no stale records.
                    let from = if flags & BG_INODE_UNINIT != 0 {
                        0
                    } else {
                        ipg - unused.min(ipg)
                    };
                    fs.zero_inode_slots(g, from, exposed_to, &snapshot.bitmap)?;
                }
            }
            let mut desc = fs.descriptors[g as usize].lock();
            if checksummed {
                desc.flags &= !BG_INODE_UNINIT;
                desc.set_itable_unused(snapshot.itable_unused);
            }
            let mut block = vec![0xFFu8; bs];
            block[..snapshot.bitmap.len()].copy_from_slice(&snapshot.bitmap);
            // Bits past the group's inodes are padding, set.
            for bit in ipg as usize..8 * snapshot.bitmap.len() {
                block[bit / 8] |= 1 << (bit % 8);
            }
            if let Some(seed) = seed {
                let mut sealed = BitmapBlock::of(&desc, BitmapKind::Inode, g);
                sealed.seal(&block, seed);
                sealed.store_in(&mut desc);
            }
            desc.set_free_inodes_count(snapshot.free_inodes);
            desc.set_used_dirs_count(snapshot.used_dirs);
            let nr = desc.inode_bitmap();
            drop(desc);
            fs.store.write_uncached_home(nr, &block)?;
        }
        Ok(changed)
    }

    /// Writes the changed groups' block bitmaps; returns those groups.
    fn write_block_bitmaps(&self, fs: &Filesystem, groups: Vec<DirtyGroup>) -> Result<Vec<u32>> {
        let sb = fs.superblock();
        let seed = BitmapSeed::for_superblock(sb, BitmapKind::Block);
        let changed: Vec<u32> = groups.iter().map(|d| d.group).collect();
        for dirty in groups {
            let mut desc = fs.descriptors[dirty.group as usize].lock();
            desc.flags &= !BG_BLOCK_UNINIT;
            desc.set_free_blocks_count(dirty.free);
            if let Some(seed) = seed {
                let mut sealed = BitmapBlock::of(&desc, BitmapKind::Block, dirty.group);
                sealed.seal(&dirty.bitmap, seed);
                sealed.store_in(&mut desc);
            }
            let nr = desc.block_bitmap();
            drop(desc);
            fs.store.write_uncached_home(nr, &dirty.bitmap)?;
        }
        Ok(changed)
    }

    /// Rewrites the descriptor blocks holding the `changed` groups (the primary table;
    /// backups are left as mke2fs and resize wrote them, as the kernel leaves them). Only
    /// those: at 16 TiB the table is 1,024 blocks, and a commit changes a few groups.
    fn write_descriptors(&self, fs: &Filesystem, changed: Vec<u32>) -> Result<()> {
        let sb = fs.superblock();
        let geometry = &fs.geometry;
        let desc_size = sb.desc_size() as usize;
        let checksum = GroupChecksum::for_superblock(sb);
        let per_block = geometry.descriptors_per_block();
        let groups = geometry.groups();
        let bs = fs.block_size() as usize;
        let firsts: std::collections::BTreeSet<u32> = changed
            .into_iter()
            .map(|g| g / per_block * per_block)
            .collect();
        for first in firsts {
            let nr = geometry.descriptor_block(first);
            let mut block = vec![0u8; bs];
            fs.store.read_data(&mut block, nr * bs as u64)?;
            for g in first..(first + per_block).min(groups) {
                let at = geometry.descriptor_offset(g);
                let bytes = fs.descriptors[g as usize]
                    .lock()
                    .to_bytes(g, desc_size, &checksum);
                block[at..at + desc_size].copy_from_slice(&bytes);
            }
            fs.store.write_uncached_home(nr, &block)?;
        }
        Ok(())
    }

    /// Writes the primary superblock with the free counts of the descriptors as they stand.
    fn write_superblock(&self, fs: &Filesystem) -> Result<()> {
        let mut sb = self.superblock.lock();
        let (mut free_blocks, mut free_inodes) = (0u64, 0u64);
        for d in fs.descriptors.iter() {
            let d = d.lock();
            free_blocks += u64::from(d.free_blocks_count());
            free_inodes += u64::from(d.free_inodes_count());
        }
        sb.set_free_blocks_count(free_blocks);
        sb.free_inodes_count = free_inodes as u32;
        sb.set_write_time(crate::time::now().seconds);
        let mut bytes = [0u8; Superblock::SIZE];
        sb.encode(&mut bytes);
        Superblock::seal(&mut bytes, ());
        fs.store
            .write_home(SUPERBLOCK_OFFSET, &bytes, "the superblock")
    }

    /// Writes the orphan list: the superblock's head and each orphan's `i_dtime` pointing
    /// at the next (no operation runs during a commit, so their locks are free).
    fn chain_orphans(&self, fs: &Filesystem) -> Result<()> {
        let orphans: Vec<u32> = self.orphans.lock().iter().copied().collect();
        for (i, &ino) in orphans.iter().enumerate() {
            let handle = fs.inode_handle(ino)?;
            handle.lock(&fs.inodes).inode.record.dtime = orphans.get(i + 1).copied().unwrap_or(0);
            fs.inodes.mark_dirty(&handle);
        }
        self.superblock.lock().last_orphan = orphans.first().copied().unwrap_or(0);
        Ok(())
    }

    /// Commits, frees the orphans nobody can close any more, gives back every reservation,
    /// commits what that changed, and marks the filesystem clean.
    pub fn unmount(&self, fs: &Filesystem) -> Result<()> {
        self.commit(fs)?;
        let orphans: Vec<u32> = self.orphans.lock().iter().copied().collect();
        for ino in orphans {
            // Whoever had it open can no longer close it.
            fs.inode_handle(ino)?.lock(&fs.inodes).open_count = 0;
            fs.close_orphan(ino)?;
        }
        {
            let _closed: Vec<_> = self.gate.iter().map(|g| g.write()).collect();
            for handle in fs.inodes.all() {
                let mut state = handle.lock(&fs.inodes);
                self.blocks.release_window(&mut state.window, 0);
            }
            self.blocks.release_small_file_windows();
        }
        self.commit(fs)?;
        let _closed: Vec<_> = self.gate.iter().map(|g| g.write()).collect();
        self.superblock.lock().state |= STATE_VALID;
        self.write_superblock(fs)?;
        self.state.store(UNMOUNTED, Ordering::Release);
        fs.store.flush("at unmount")
    }

    /// The lock that covers xattr block `nr`'s reference count. Taken after the inode's
    /// lock and held only while the count is read and written (and the block freed).
    pub fn xattr_block_lock(&self, nr: u64) -> &Mutex<()> {
        &self.xattr_block_locks[(nr % self.xattr_block_locks.len() as u64) as usize]
    }

    /// Turns on a compatible feature the filesystem now uses (ext_attr with the first
    /// extended attribute, as `ext4_xattr_update_super_block` does); written with the next
    /// superblock.
    pub fn add_compat(&self, feature: CompatFeatures) {
        let mut sb = self.superblock.lock();
        sb.feature_compat |= feature.bits();
    }

    /// Turns on a read-only-compatible feature the filesystem now needs (large_file when a
    /// file reaches 2 GiB, as the kernel does); written with the next superblock.
    pub fn add_ro_compat(&self, feature: RoCompatFeatures) {
        let mut sb = self.superblock.lock();
        sb.feature_ro_compat |= feature.bits();
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{mpsc, Arc};
    use std::time::Duration;

    use super::CommitTurn;
    use crate::{Creator, Filesystem, OpenOptions};

    /// An fsync that finds a commit running, and sleeps behind it, commits its own
    /// transaction when that commit ends without it (the commit was of an earlier one).
    #[test]
    fn an_fsync_asleep_behind_a_commit_commits_its_transaction_when_that_commit_ends() {
        let img = e4_testkit::make_empty_image(&["-t", "ext4"], 16);
        let options = OpenOptions {
            commit_interval: Duration::ZERO,
            ..OpenOptions::writable()
        };
        let fs = Arc::new(Filesystem::open(&img.path, options).unwrap());
        let creator = Creator {
            permissions: 0o644,
            uid: 0,
            gid: 0,
        };
        fs.create(2, b"f", creator).unwrap();
        let writer = fs.writer.as_ref().unwrap();
        let txn = writer.running_txn();
        // A commit in progress, of nothing: the test holds its turn.
        let turn = CommitTurn::new(writer, writer.commit_lock.lock());
        let (done, finished) = mpsc::channel();
        let fsync = {
            let fs = Arc::clone(&fs);
            std::thread::spawn(move || {
                let result = fs.writer.as_ref().unwrap().commit_through(&fs, txn);
                done.send(result.is_ok()).unwrap();
            })
        };
        assert!(
            finished.recv_timeout(Duration::from_millis(50)).is_err(),
            "the fsync returned while a commit held the lock"
        );
        drop(turn);
        let ok = finished
            .recv_timeout(Duration::from_secs(30))
            .expect("the fsync slept on after the commit it waited behind had ended");
        assert!(ok);
        fsync.join().unwrap();
        assert!(writer.committed.load(std::sync::atomic::Ordering::Acquire) >= txn);
        assert_eq!(writer.commits(), 1);
        Arc::into_inner(fs).unwrap().unmount().unwrap();
        e4_testkit::e2fsck_clean(&img.path).unwrap();
    }
}

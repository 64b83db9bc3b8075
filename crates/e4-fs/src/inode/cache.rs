//! The inode cache: one shared handle per inode in use, so every thread that works on an
//! inode works on the same state under the same lock (DESIGN.md, "Inode handles"). A caller
//! never holds a private copy that can go stale; it takes the handle's lock, reads or changes
//! the decoded inode, and marks the handle dirty so the next commit writes it back.
//!
//! Handles are spread over shards by inode number; a shard's lock is held only to find or
//! insert a handle, never while an inode is read from disk by another thread (two threads
//! missing on one inode may both read it; the first to insert wins and both use its handle).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crossbeam_utils::CachePadded;
use e4_alloc::stats::LockStats;
use e4_alloc::ReservationWindow;
use e4_format::geometry::Geometry;
use e4_format::inode::{FileType, Inode, Timestamp};
use foldhash::HashMap;
use parking_lot::{Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};

use crate::error::Result;
use crate::inode::dirty_set::DirtySet;
use crate::map::run_cache::RunCache;

/// Shards: as the buffer cache's, many more than threads (an operation takes two or three
/// shard locks, and two threads meeting in one showed as contention with 64).
const SHARDS: usize = 256;
/// Clean, unused handles a shard keeps before it drops some (64k handles in all).
const CLEAN_PER_SHARD: usize = 256;

/// What the engine knows of an inode besides its record.
pub(crate) struct InodeState {
    pub inode: Inode,
    /// The file's reservation window: where its appends go next (e4-alloc).
    pub window: ReservationWindow,
    /// A directory's recently used runs of blocks (`map/run_cache.rs`).
    pub runs: RunCache,
    /// Opens through the API (a FUSE mount's file handles); an inode whose last link is
    /// removed while open lives on until the last close.
    pub open_count: u32,
    /// Freed: the number may be reused, and this handle is no longer in the cache.
    pub deleted: bool,
    /// An operation in steps owns the file ([`InodeHandle::own_steps`]): between its
    /// transactions nothing else may change the file's blocks, size or flags.
    pub stepping: bool,
    /// Someone read the inode's times since its last change (set under the shared lock):
    /// the next change stamps the fine clock (`time::change_time`).
    times_shown: AtomicBool,
}

impl InodeState {
    /// State for an inode no handle holds yet (one being built, or being torn down after a
    /// failed creation).
    pub fn detached(inode: Inode) -> Self {
        let window = if inode.file_type() == Some(FileType::Directory) {
            crate::space::placement::directory_window()
        } else {
            ReservationWindow::new()
        };
        InodeState {
            inode,
            window,
            runs: RunCache::default(),
            open_count: 0,
            deleted: false,
            stepping: false,
            times_shown: AtomicBool::new(false),
        }
    }

    /// Records that a caller read the inode's times (under its lock, shared or not).
    pub fn show_times(&self) {
        if !self.times_shown.load(Ordering::Relaxed) {
            self.times_shown.store(true, Ordering::Relaxed);
        }
    }

    /// The time a change stamps now (`time::change_time`); the times count as unread
    /// again after it.
    pub fn change_time(&mut self) -> Timestamp {
        let shown = std::mem::take(self.times_shown.get_mut());
        crate::time::change_time(self.inode.ctime(), shown)
    }
}

/// The inode lock held for a change.
pub(crate) type InodeGuard<'a> = RwLockWriteGuard<'a, InodeState>;

/// One inode's shared handle. Its lock is a reader-writer lock: reads of a file's data or a
/// directory's entries share it, so they never follow a mapping a writer is changing, and
/// never wait for one another.
pub(crate) struct InodeHandle {
    pub ino: u32,
    state: RwLock<InodeState>,
    dirty: AtomicBool,
    /// Held across all its transactions by the operation in steps that owns the inode;
    /// a change that finds the inode owned waits on it. Untouched by every other
    /// operation: they read [`InodeState::stepping`] under the inode lock they take anyway.
    steps: Mutex<()>,
}

impl InodeHandle {
    /// The inode's lock, for a change (counted in the cache's inode-lock statistics).
    pub fn lock<'a>(&'a self, cache: &InodeCache) -> InodeGuard<'a> {
        cache
            .inode_locks
            .take(|| self.state.try_write(), || self.state.write())
    }

    /// Marks the handle clean once a commit's gather has written its record (`guard`, its
    /// lock, shows the record was read under it): only [`InodeCache::take_dirty`]'s
    /// handles, with every operation stopped, so no change can come between the write and
    /// this.
    pub fn mark_clean(&self, _guard: &InodeGuard<'_>) {
        self.dirty.store(false, Ordering::Release);
    }

    /// The inode's lock if it is free now; `None` (counted as a skip) if another thread
    /// holds it.
    pub fn try_lock<'a>(&'a self, cache: &InodeCache) -> Option<InodeGuard<'a>> {
        cache.inode_locks.take_if_free(self.state.try_write())
    }

    /// The inode's lock, shared with other readers.
    pub fn read<'a>(&'a self, cache: &InodeCache) -> RwLockReadGuard<'a, InodeState> {
        cache
            .inode_locks
            .take(|| self.state.try_read(), || self.state.read())
    }

    /// The inode's lock, shared, if no writer holds it now; `None` (counted as a skip)
    /// otherwise.
    pub fn try_read<'a>(&'a self, cache: &InodeCache) -> Option<RwLockReadGuard<'a, InodeState>> {
        cache.inode_locks.take_if_free(self.state.try_read())
    }

    /// Makes the caller the owner of the inode until the guard drops, as the kernel's
    /// truncate holds `i_rwsem` across the handles it restarts: an operation too large
    /// for one transaction runs in steps (`ops/steps.rs`), and a write, a truncate or a
    /// flag change slipping in between two of them would meet a half-done state (blocks
    /// past the new size still mapped, a range half punched) or be undone by the next
    /// step. Waits for another owner first. Take it outside any transaction and without
    /// the inode lock.
    pub fn own_steps<'a>(&'a self, cache: &'a InodeCache) -> StepsOwner<'a> {
        let turn = self.steps.lock();
        self.lock(cache).stepping = true;
        StepsOwner {
            handle: self,
            cache,
            _turn: turn,
        }
    }

    /// Returns once no operation in steps owns the inode.
    pub fn wait_for_steps(&self) {
        drop(self.steps.lock());
    }
}

/// Ownership of an inode by an operation in steps ([`InodeHandle::own_steps`]).
pub(crate) struct StepsOwner<'a> {
    handle: &'a InodeHandle,
    cache: &'a InodeCache,
    _turn: MutexGuard<'a, ()>,
}

impl StepsOwner<'_> {
    /// Whether this is the ownership of `handle`'s inode.
    pub fn owns(&self, handle: &InodeHandle) -> bool {
        std::ptr::eq(self.handle, handle)
    }
}

impl Drop for StepsOwner<'_> {
    /// Gives the inode back (the flag first, then the turn others wait on). Dropped
    /// outside the inode lock, as it was taken.
    fn drop(&mut self) {
        self.handle.lock(self.cache).stepping = false;
    }
}

struct Shard {
    handles: HashMap<u32, Arc<InodeHandle>>,
    /// How many handles make the next insert trim the shard: twice what the last trim left
    /// (at least [`CLEAN_PER_SHARD`]), so a shard whose handles are all held or dirty (a
    /// burst of creates before a commit) is not scanned again on every insert.
    trim_at: usize,
}

impl Default for Shard {
    fn default() -> Self {
        Shard {
            handles: HashMap::default(),
            trim_at: CLEAN_PER_SHARD,
        }
    }
}

pub(crate) struct InodeCache {
    shards: Box<[CachePadded<Mutex<Shard>>]>,
    shard_locks: LockStats,
    inode_locks: LockStats,
    dirty: DirtySet<Arc<InodeHandle>>,
}

impl InodeCache {
    pub fn new(geometry: &Geometry) -> Self {
        InodeCache {
            shards: (0..SHARDS)
                .map(|_| CachePadded::new(Mutex::default()))
                .collect(),
            shard_locks: LockStats::default(),
            inode_locks: LockStats::default(),
            dirty: DirtySet::new(geometry),
        }
    }

    /// Inode-table blocks holding a dirty inode: what the next commit writes for the
    /// dirty inodes (a load: no lock).
    pub fn dirty_table_blocks(&self) -> usize {
        self.dirty.table_blocks()
    }

    fn shard(&self, ino: u32) -> MutexGuard<'_, Shard> {
        let shard = &self.shards[e4_alloc::shard::shard_of(u64::from(ino), SHARDS)];
        self.shard_locks.take(|| shard.try_lock(), || shard.lock())
    }

    pub fn shard_stats(&self) -> &LockStats {
        &self.shard_locks
    }

    pub fn lock_stats(&self) -> &LockStats {
        &self.inode_locks
    }

    fn handle_for(inode: Inode) -> Arc<InodeHandle> {
        Arc::new(InodeHandle {
            ino: inode.ino,
            state: RwLock::new(InodeState::detached(inode)),
            dirty: AtomicBool::new(false),
            steps: Mutex::new(()),
        })
    }

    /// The handle of inode `ino`, loading the inode with `load` on a miss.
    pub fn get_or_load(
        &self,
        ino: u32,
        load: impl FnOnce() -> Result<Inode>,
    ) -> Result<Arc<InodeHandle>> {
        if let Some(h) = self.shard(ino).handles.get(&ino) {
            return Ok(Arc::clone(h));
        }
        let handle = Self::handle_for(load()?);
        let mut shard = self.shard(ino);
        if let Some(h) = shard.handles.get(&ino) {
            return Ok(Arc::clone(h));
        }
        Self::trim(&mut shard);
        shard.handles.insert(ino, Arc::clone(&handle));
        Ok(handle)
    }

    /// Installs the handle of a newly created inode (its number was just claimed, so no
    /// handle for it can exist but a deleted one's, which is replaced).
    pub fn insert_new(&self, inode: Inode) -> Arc<InodeHandle> {
        let handle = Self::handle_for(inode);
        let mut shard = self.shard(handle.ino);
        Self::trim(&mut shard);
        shard.handles.insert(handle.ino, Arc::clone(&handle));
        handle
    }

    /// Drops clean handles nobody holds once a shard has many.
    fn trim(shard: &mut Shard) {
        if shard.handles.len() < shard.trim_at {
            return;
        }
        shard.handles.retain(|_, h| {
            // Held only by the cache and clean: keep it if it is open or has a window. The
            // state is only tried: a holder of an inode lock may be waiting for this shard.
            Arc::strong_count(h) > 1
                || h.dirty.load(Ordering::Acquire)
                || h.state
                    .try_read()
                    .is_none_or(|s| s.open_count > 0 || s.window.unused().is_some())
        });
        shard.trim_at = (2 * shard.handles.len()).max(CLEAN_PER_SHARD);
    }

    /// Marks `handle` changed; the next commit writes its inode back.
    pub fn mark_dirty(&self, handle: &Arc<InodeHandle>) {
        if !handle.dirty.swap(true, Ordering::AcqRel) {
            self.dirty
                .add(handle.ino, Arc::clone(handle), &self.shard_locks);
        }
    }

    /// Whether inode `ino` has changes that no commit has taken yet. An inode without a
    /// handle here has none: dirty handles are never dropped.
    pub fn is_dirty(&self, ino: u32) -> bool {
        self.shard(ino)
            .handles
            .get(&ino)
            .is_some_and(|h| h.dirty.load(Ordering::Acquire))
    }

    /// Operations' writes to the dirty inodes' shared words so far.
    pub fn dirty_shared_writes(&self) -> u64 {
        self.dirty.shared_writes()
    }

    /// Whether some inode is dirty (takes every shard's lock: not for hot paths).
    pub fn any_dirty(&self) -> bool {
        !self.dirty.is_empty(&self.shard_locks)
    }

    /// Every dirty handle, by inode number, the dirty set left empty. Each stays marked
    /// dirty until the caller, with every operation still stopped, writes its record and
    /// marks it clean ([`InodeHandle::mark_clean`]): a pass over them here to clear the
    /// marks was a cache miss per handle, which the record's write makes anyway.
    pub fn take_dirty(&self) -> Vec<Arc<InodeHandle>> {
        // Sorted by a copy of the number beside each handle: sorting by `h.ino` would chase
        // a pointer per comparison (7 % of a two-thread create run went to that sort).
        let mut out = self.dirty.take(&self.shard_locks);
        out.sort_unstable_by_key(|(ino, _)| *ino);
        out.into_iter().map(|(_, h)| h).collect()
    }

    /// Forgets inode `ino` (it was freed).
    pub fn remove(&self, ino: u32) {
        self.shard(ino).handles.remove(&ino);
    }

    /// Every handle (for releasing windows at unmount).
    pub fn all(&self) -> Vec<Arc<InodeHandle>> {
        self.shards
            .iter()
            .flat_map(|s| s.lock().handles.values().cloned().collect::<Vec<_>>())
            .collect()
    }
}

//! The metadata buffer cache shared by all threads.
//!
//! One copy of each block while anyone uses it: a hit takes its shard's lock shared (threads
//! reading the same inode-table or bitmap block do not queue behind one another); a miss
//! takes it exclusively and inserts the buffer (still loading) before reading, so a second reader waits for that read instead of
//! making a copy of its own, and a buffer that someone holds (an `Arc` beside the cache's) or
//! that is dirty is never evicted. A shard's lock is never held during I/O; a buffer's own
//! lock is held only to copy bytes in or out.
//!
//! Each buffer remembers what it was verified as (its kind and owning inode): a block
//! verified as one inode's extent node is verified again before it is trusted as anything
//! else. Dirty buffers are listed per shard so a commit finds them without scanning the cache.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use crossbeam_utils::CachePadded;
use e4_alloc::stats::{Counter, LockStats};
use foldhash::HashMap;
use parking_lot::{
    MappedRwLockReadGuard, MappedRwLockWriteGuard, Mutex, RwLock, RwLockReadGuard, RwLockWriteGuard,
};

use crate::io::derived::Derived;
use crate::io::meta_io::{BlockKind, Owner};

/// Shards: a power of two comfortably above the thread counts the engine targets (an
/// operation takes about eight shard locks, so two threads meet in a shard often with few).
const SHARDS: usize = 256;

/// What a buffer was last verified as, or written as: decides whether a read must verify it
/// again, and how write-back seals it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BufferRole {
    pub kind: BlockKind,
    pub owner: Option<Owner>,
}

/// A cached metadata block.
pub struct Buffer {
    nr: u64,
    /// The bytes, under the lock every reader and writer of them takes.
    bytes: RwLock<Contents>,
    /// Set once the bytes came from the device (a failed load leaves it clear, and readers
    /// that waited for the load go back to the cache).
    loaded: AtomicBool,
    dirty: AtomicBool,
    role: Mutex<Option<BufferRole>>,
    /// Set from when a commit takes the buffer ([`BufferCache::take_dirty`]) until it has
    /// written it: operations of the next transaction run meanwhile, and the first one to
    /// change the bytes keeps a copy of them in `claim` for the commit (jbd2's
    /// `b_frozen_data`), so a commit writes exactly its own transaction's contents.
    committing: AtomicBool,
    claim: Mutex<CommitClaim>,
}

/// A buffer's bytes, and what was derived from them while they stay as they are.
pub struct Contents {
    pub bytes: Box<[u8]>,
    /// What a mechanism derived from the bytes (a directory leaf's index). Every change of
    /// the bytes drops it ([`Buffer::bytes_mut`]) but the edits that keep it true
    /// ([`Buffer::contents_mut`]); sealing a checksum into a tail keeps it (what the tail
    /// guards stays as it was).
    pub derived: Derived,
}

impl Contents {
    fn new(bytes: Box<[u8]>) -> Self {
        Contents {
            bytes,
            derived: Derived::default(),
        }
    }
}

/// What the commit that took a buffer writes, kept apart from what the next transaction
/// does to the buffer meanwhile.
#[derive(Default)]
struct CommitClaim {
    /// The role the buffer had when the commit took it, which the commit seals by: the
    /// next transaction may give the block another (a directory's full leaf becomes its
    /// htree root), and a leaf sealed as a root went out with no checksum.
    role: Option<BufferRole>,
    /// The bytes as they were when the next transaction first changed them.
    frozen: Option<Box<[u8]>>,
}

impl Buffer {
    fn new(nr: u64, bytes: Box<[u8]>, loaded: bool) -> Self {
        Buffer {
            nr,
            bytes: RwLock::new(Contents::new(bytes)),
            loaded: AtomicBool::new(loaded),
            dirty: AtomicBool::new(false),
            role: Mutex::new(None),
            committing: AtomicBool::new(false),
            claim: Mutex::default(),
        }
    }

    pub fn nr(&self) -> u64 {
        self.nr
    }

    /// The bytes, shared with other readers.
    pub fn bytes(&self) -> MappedRwLockReadGuard<'_, Box<[u8]>> {
        RwLockReadGuard::map(self.bytes.read(), |c| &c.bytes)
    }

    /// The bytes and what was derived from them, shared with other readers.
    pub(crate) fn contents(&self) -> RwLockReadGuard<'_, Contents> {
        self.bytes.read()
    }

    /// The bytes, for changing them; the caller holds the lock of the object that owns the
    /// block, and marks the buffer dirty through [`BufferCache::mark_dirty`]. What was
    /// derived from them is dropped.
    pub fn bytes_mut(&self) -> MappedRwLockWriteGuard<'_, Box<[u8]>> {
        let mut contents = self.contents_mut();
        contents.derived.clear();
        RwLockWriteGuard::map(contents, |c| &mut c.bytes)
    }

    /// The bytes and what was derived from them, for a change that keeps the derived
    /// structures true of the bytes it leaves (a directory edit and the leaf's index);
    /// otherwise as [`Self::bytes_mut`].
    pub(crate) fn contents_mut(&self) -> RwLockWriteGuard<'_, Contents> {
        let contents = self.bytes.write();
        if self.committing.load(Ordering::Acquire) {
            let mut claim = self.claim.lock();
            if claim.frozen.is_none() {
                claim.frozen = Some(contents.bytes.clone());
            }
        }
        contents
    }

    /// Hands `write` the contents the commit that took this buffer must write, with the
    /// role they were written in: the copy frozen when the next transaction first changed
    /// them, or else the bytes themselves, locked meanwhile. Then the commit's claim on the
    /// buffer ends.
    pub fn with_committed_bytes<T>(
        &self,
        write: impl FnOnce(&mut [u8], Option<BufferRole>) -> T,
    ) -> T {
        let mut contents = self.bytes.write();
        let CommitClaim { role, frozen } = std::mem::take(&mut *self.claim.lock());
        let written = match frozen {
            Some(mut copy) => write(&mut copy, role),
            // Sealing writes a checksum only: what was derived stays true.
            None => write(&mut contents.bytes, role),
        };
        self.committing.store(false, Ordering::Release);
        written
    }

    pub fn is_dirty(&self) -> bool {
        self.dirty.load(Ordering::Acquire)
    }

    /// What the buffer was last verified or written as.
    pub fn role(&self) -> Option<BufferRole> {
        *self.role.lock()
    }

    /// Runs `verify` on the bytes unless the buffer was already verified (or written) in
    /// this `role`; remembers the role on success.
    pub fn verify_as<E>(
        &self,
        role: BufferRole,
        verify: impl FnOnce(&[u8]) -> Result<(), E>,
    ) -> Result<(), E> {
        if *self.role.lock() == Some(role) {
            return Ok(());
        }
        verify(&self.bytes())?;
        *self.role.lock() = Some(role);
        Ok(())
    }

    /// Records the role the bytes were written in (they are sealed accordingly).
    pub fn set_role(&self, role: BufferRole) {
        *self.role.lock() = Some(role);
    }

    /// Puts back the role the buffer had before an operation that is being undone (with
    /// the contents it had then).
    pub fn restore_role(&self, role: Option<BufferRole>) {
        *self.role.lock() = role;
    }
}

struct Slot {
    buffer: Arc<Buffer>,
    /// CLOCK's reference bit: set by hits under the shared lock, cleared by the hand.
    referenced: AtomicBool,
}

#[derive(Default)]
struct Shard {
    slots: HashMap<u64, Slot>,
    /// CLOCK hand order: block numbers in insertion order.
    clock: VecDeque<u64>,
    /// Buffers dirtied since the last [`BufferCache::take_dirty`].
    dirty: Vec<Arc<Buffer>>,
    /// Below this many slots no eviction is tried: after a turn of the clock found nothing
    /// to evict (every buffer dirty or held), the next try waits until the shard has grown
    /// by a quarter, so a shard full of dirty buffers is not scanned on every insert. A
    /// commit, which cleans buffers, resets it.
    evict_from: usize,
}

impl Shard {
    /// Evicts one buffer nobody holds and nobody changed, if there is one within a turn of
    /// the clock; otherwise the shard grows past its share (dirty buffers wait for a commit).
    fn evict_one(&mut self) -> bool {
        for _ in 0..self.clock.len() {
            let Some(nr) = self.clock.pop_front() else {
                return false;
            };
            let Some(slot) = self.slots.get_mut(&nr) else {
                continue;
            };
            let busy = slot.buffer.is_dirty() || Arc::strong_count(&slot.buffer) > 1;
            if *slot.referenced.get_mut() || busy {
                *slot.referenced.get_mut() = false;
                self.clock.push_back(nr);
                continue;
            }
            self.slots.remove(&nr);
            return true;
        }
        false
    }
}

pub struct BufferCache {
    shards: Box<[CachePadded<RwLock<Shard>>]>,
    shard_locks: LockStats,
    /// Buffers dirtied since the last [`BufferCache::take_dirty`] (written on a buffer's
    /// first change in a transaction only; read by every operation to decide on a commit).
    /// A line of its own: every thread writes it, and every lookup reads the fields above.
    dirty_buffers: CachePadded<AtomicUsize>,
    /// Operations' writes to `dirty_buffers`, for the lock report's shared atomic writes.
    shared_writes: Counter,
    per_shard: usize,
    block_size: usize,
}

impl BufferCache {
    /// A cache holding about `capacity` clean blocks of `block_size` bytes.
    pub fn new(capacity: usize, block_size: usize) -> Self {
        BufferCache {
            shards: (0..SHARDS)
                .map(|_| CachePadded::new(RwLock::default()))
                .collect(),
            per_shard: capacity.div_ceil(SHARDS).max(1),
            block_size,
            shard_locks: LockStats::default(),
            dirty_buffers: CachePadded::new(AtomicUsize::new(0)),
            shared_writes: Counter::default(),
        }
    }

    fn shard_of(&self, nr: u64) -> &RwLock<Shard> {
        &self.shards[e4_alloc::shard::shard_of(nr, SHARDS)]
    }

    /// Block `nr`'s shard, for a change.
    fn shard(&self, nr: u64) -> RwLockWriteGuard<'_, Shard> {
        self.shard_locks.take(
            || self.shard_of(nr).try_write(),
            || self.shard_of(nr).write(),
        )
    }

    /// The buffer of block `nr` if it is cached, found under the shard's shared lock.
    fn cached(&self, nr: u64) -> Option<Arc<Buffer>> {
        let shard = self
            .shard_locks
            .take(|| self.shard_of(nr).try_read(), || self.shard_of(nr).read());
        let slot = shard.slots.get(&nr)?;
        // Written only when clear: a hit on a hot block leaves its line unwritten.
        if !slot.referenced.load(Ordering::Relaxed) {
            slot.referenced.store(true, Ordering::Relaxed);
        }
        Some(Arc::clone(&slot.buffer))
    }

    /// Block `nr` if the cache holds it loaded; never reads.
    pub fn peek(&self, nr: u64) -> Option<Arc<Buffer>> {
        self.cached(nr)
            .filter(|buffer| buffer.loaded.load(Ordering::Acquire))
    }

    /// Lock counts of the shards.
    pub fn shard_stats(&self) -> &LockStats {
        &self.shard_locks
    }

    fn insert_locked(&self, shard: &mut Shard, buffer: &Arc<Buffer>) {
        let len = shard.slots.len();
        if len >= self.per_shard.max(shard.evict_from) && !shard.evict_one() {
            shard.evict_from = len + len / 4 + 1;
        }
        shard.slots.insert(
            buffer.nr,
            Slot {
                buffer: Arc::clone(buffer),
                referenced: AtomicBool::new(false),
            },
        );
        shard.clock.push_back(buffer.nr);
    }

    /// Returns block `nr`, reading it with `read` on a miss. Concurrent misses on one block
    /// read it once.
    pub fn get_or_read<E>(
        &self,
        nr: u64,
        mut read: impl FnMut(&mut [u8]) -> Result<(), E>,
    ) -> Result<Arc<Buffer>, E> {
        loop {
            if let Some(found) = self.cached(nr) {
                if found.loaded.load(Ordering::Acquire) {
                    return Ok(found);
                }
                // Wait for the load in progress; a failed one sends us round again.
                drop(found.bytes.read());
                if found.loaded.load(Ordering::Acquire) {
                    return Ok(found);
                }
                continue;
            }
            let buffer;
            let mut loading = {
                let mut shard = self.shard(nr);
                // Another thread may have inserted it since the shared look.
                if let Some(slot) = shard.slots.get(&nr) {
                    slot.referenced.store(true, Ordering::Relaxed);
                    let found = Arc::clone(&slot.buffer);
                    drop(shard);
                    if found.loaded.load(Ordering::Acquire) {
                        return Ok(found);
                    }
                    // Wait for the load in progress; a failed one sends us round again.
                    drop(found.bytes.read());
                    if found.loaded.load(Ordering::Acquire) {
                        return Ok(found);
                    }
                    continue;
                }
                // A miss: the buffer is made (and locked before it is visible, so others
                // wait for the read below) only now, not on every lookup.
                buffer = Arc::new(Buffer::new(
                    nr,
                    vec![0; self.block_size].into_boxed_slice(),
                    false,
                ));
                let guard = buffer.bytes.write();
                self.insert_locked(&mut shard, &buffer);
                guard
            };
            match read(&mut loading.bytes) {
                Ok(()) => {
                    buffer.loaded.store(true, Ordering::Release);
                    drop(loading);
                    return Ok(buffer);
                }
                Err(e) => {
                    let mut shard = self.shard(nr);
                    if shard
                        .slots
                        .get(&nr)
                        .is_some_and(|s| Arc::ptr_eq(&s.buffer, &buffer))
                    {
                        shard.slots.remove(&nr);
                    }
                    drop(loading);
                    return Err(e);
                }
            }
        }
    }

    /// Returns block `nr` with its contents replaced by `fill` (a block the caller owns and
    /// rewrites whole, such as a newly allocated one): no read from the device.
    pub fn get_new(&self, nr: u64, fill: &[u8]) -> Arc<Buffer> {
        let mut shard = self.shard(nr);
        if let Some(slot) = shard.slots.get(&nr) {
            let buffer = Arc::clone(&slot.buffer);
            drop(shard);
            buffer.bytes_mut().copy_from_slice(fill);
            buffer.loaded.store(true, Ordering::Release);
            return buffer;
        }
        let buffer = Arc::new(Buffer::new(nr, fill.into(), true));
        self.insert_locked(&mut shard, &buffer);
        buffer
    }

    /// Marks `buffer` changed: it stays cached until [`BufferCache::take_dirty`] hands it to
    /// a commit.
    pub fn mark_dirty(&self, buffer: &Arc<Buffer>) {
        if !buffer.dirty.swap(true, Ordering::AcqRel) {
            self.shard(buffer.nr).dirty.push(Arc::clone(buffer));
            self.dirty_buffers.fetch_add(1, Ordering::Relaxed);
            self.shared_writes.add(1);
        }
    }

    /// Every dirty buffer, marked clean and claimed by the commit that takes them, which
    /// writes each through [`Buffer::with_committed_bytes`]. A buffer dirtied again
    /// afterwards is listed again. Call it with no operation running (the commit gate
    /// closed), so that every change made before is in the bytes and every change made
    /// after freezes a copy first.
    pub fn take_dirty(&self) -> Vec<Arc<Buffer>> {
        let mut out = Vec::new();
        self.dirty_buffers.store(0, Ordering::Relaxed);
        for shard in self.shards.iter() {
            let mut shard = shard.write();
            shard.evict_from = 0;
            let taken = std::mem::take(&mut shard.dirty);
            drop(shard);
            for buffer in taken {
                buffer.claim.lock().role = buffer.role();
                buffer.committing.store(true, Ordering::Release);
                buffer.dirty.store(false, Ordering::Release);
                out.push((buffer.nr, buffer));
            }
        }
        // Sorted by a copy of the number, not through the pointer (as the inode cache's).
        out.sort_unstable_by_key(|(nr, _)| *nr);
        out.into_iter().map(|(_, buffer)| buffer).collect()
    }

    /// Forgets block `nr` (it was freed): a later use reads or fills it afresh.
    pub fn forget(&self, nr: u64) {
        let mut shard = self.shard(nr);
        if let Some(slot) = shard.slots.remove(&nr) {
            if slot.buffer.dirty.swap(false, Ordering::AcqRel) {
                shard.dirty.retain(|b| b.nr != nr);
                self.dirty_buffers.fetch_sub(1, Ordering::Relaxed);
                self.shared_writes.add(1);
            }
        }
    }

    /// Operations' writes to the cache's shared dirty count so far.
    pub fn shared_writes(&self) -> u64 {
        self.shared_writes.get()
    }

    /// How many blocks the cache holds before it evicts (the shards' shares together).
    pub fn capacity(&self) -> usize {
        self.per_shard * self.shards.len()
    }

    /// Dirty buffers waiting for a commit (a snapshot, for deciding when to commit).
    pub fn dirty_count(&self) -> usize {
        self.dirty_buffers.load(Ordering::Relaxed)
    }

    /// Buffers held now (clean and dirty).
    #[cfg(test)]
    fn len(&self) -> usize {
        self.shards.iter().map(|s| s.read().slots.len()).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read_ok(nr: u64) -> impl FnMut(&mut [u8]) -> Result<(), ()> {
        move |b| {
            b.fill(nr as u8);
            Ok(())
        }
    }

    #[test]
    fn hit_miss_and_eviction() {
        let cache = BufferCache::new(SHARDS, 8); // one block per shard
        for _ in 0..2 {
            for nr in 0..(4 * SHARDS as u64) {
                let b = cache.get_or_read(nr, read_ok(nr)).unwrap();
                assert_eq!(b.bytes()[0], nr as u8);
            }
        }
        assert!(cache.len() <= SHARDS);
    }

    #[test]
    fn held_and_dirty_buffers_are_never_evicted() {
        let cache = BufferCache::new(SHARDS, 8);
        let held = cache.get_or_read(0, read_ok(0)).unwrap();
        let dirty = cache.get_or_read(1, read_ok(1)).unwrap();
        dirty.bytes_mut()[0] = 99;
        cache.mark_dirty(&dirty);
        drop(dirty);
        for nr in 2..(20 * SHARDS as u64) {
            cache.get_or_read(nr, read_ok(nr)).unwrap();
        }
        // Same buffer, not a second copy; the change survived.
        assert!(Arc::ptr_eq(
            &held,
            &cache.get_or_read(0, read_ok(0)).unwrap()
        ));
        let mut reads = 0;
        let again = cache
            .get_or_read(1, |_| {
                reads += 1;
                Ok::<(), ()>(())
            })
            .unwrap();
        assert_eq!((again.bytes()[0], reads), (99, 0));
        let taken = cache.take_dirty();
        assert_eq!(taken.len(), 1);
        assert!(!again.is_dirty());
        assert!(cache.take_dirty().is_empty());
    }

    #[test]
    fn a_failed_load_is_not_cached() {
        let cache = BufferCache::new(64, 8);
        assert!(cache.get_or_read(5, |_| Err("eio")).is_err());
        let b = cache.get_or_read(5, read_ok(5)).unwrap();
        assert_eq!(b.bytes()[0], 5);
    }

    /// A thread that finds a block still loading waits for the load; when that load fails,
    /// it reads the block itself rather than returning the failed (zeroed) buffer.
    #[test]
    fn a_hit_on_a_load_that_fails_reads_the_block_again() {
        let cache = &BufferCache::new(64, 8);
        let (started, wait_started) = std::sync::mpsc::channel();
        let (go, wait_go) = std::sync::mpsc::channel::<()>();
        std::thread::scope(|s| {
            let first = s.spawn(move || {
                cache.get_or_read(5, |_| {
                    started.send(()).unwrap();
                    wait_go.recv().unwrap();
                    Err("eio")
                })
            });
            wait_started.recv().unwrap();
            let second = s.spawn(move || cache.get_or_read(5, read_ok(9)));
            // The second thread is now waiting on the loading buffer.
            std::thread::sleep(std::time::Duration::from_millis(50));
            go.send(()).unwrap();
            assert!(first.join().unwrap().is_err());
            let buffer = second.join().unwrap().unwrap();
            assert_eq!(buffer.bytes()[0], 9);
        });
    }

    #[test]
    fn concurrent_misses_read_once() {
        let cache = BufferCache::new(64, 8);
        let reads = std::sync::atomic::AtomicU32::new(0);
        std::thread::scope(|s| {
            for _ in 0..8 {
                s.spawn(|| {
                    let b = cache
                        .get_or_read(7, |bytes| {
                            reads.fetch_add(1, Ordering::Relaxed);
                            std::thread::sleep(std::time::Duration::from_millis(20));
                            bytes.fill(7);
                            Ok::<(), ()>(())
                        })
                        .unwrap();
                    assert_eq!(b.bytes()[0], 7);
                });
            }
        });
        assert_eq!(reads.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn verification_is_per_role() {
        let cache = BufferCache::new(16, 4);
        let block = cache.get_or_read(1, read_ok(1)).unwrap();
        let owner = |ino| Some(Owner { ino, generation: 0 });
        let extent = |ino| BufferRole {
            kind: BlockKind::ExtentNode,
            owner: owner(ino),
        };
        let mut runs = 0;
        for role in [extent(12), extent(12), extent(13), extent(13)] {
            block
                .verify_as::<()>(role, |_| {
                    runs += 1;
                    Ok(())
                })
                .unwrap();
        }
        assert_eq!(runs, 2);
    }
}

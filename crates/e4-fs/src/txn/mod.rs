//! Transactions: the handles operations hold ([`TxnHandle`]), the block access they make
//! through them ([`txn_io`]), commits ([`commit`]) and write-back ([`write_back`]), the
//! one place metadata goes home.
//!
//! Every operation runs inside a [`TxnHandle`]: it joins the running transaction by taking
//! one slot of the commit gate for reading (slots are per thread, so operations on different
//! threads share no lock word). Transactions are numbered. A commit closes every slot, so it
//! waits for the handles that are running, and while the gate is closed it switches to the
//! next transaction and gathers what it will write; it then reopens the gate and writes
//! while the next transaction runs, as jbd2 commits one transaction while the next one
//! runs ([`commit`] has the order). One commit runs at a time.

pub(crate) mod commit;
pub(crate) mod committer;
pub(crate) mod credit_ledger;
pub(crate) mod log_room;
pub(crate) mod txn_io;
pub(crate) mod undo;
pub(crate) mod write_back;

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_utils::CachePadded;
use e4_alloc::dirty_groups::DirtyGroups;
use e4_alloc::stats::{Counter, LockStats};
use e4_alloc::{BlockAllocator, TransactionFrees};
use e4_format::geometry::Geometry;
use e4_format::superblock::Superblock;
use parking_lot::{Condvar, Mutex, RwLock, RwLockReadGuard};

use crate::buffer::store::BlockStore;
use crate::error::{Error, Result};
use crate::inode::cache::InodeCache;
use crate::inode::table::InodeTable;
use crate::io::credits::GROUP;
use crate::journal::log::JournalLog;
use crate::space::descriptors::GroupDescriptors;
use crate::space::Space;
use crate::txn::committer::CommitRequests;
use crate::txn::credit_ledger::CreditLedger;
use crate::txn::log_room::{Held, LogRoom};

/// Log room a handle reserves beyond the credits it declares at its start, for what it
/// declares as it runs (an extent or index split, a directory block, a few groups' frees):
/// an operation whose later credits may be larger reserves them when it begins
/// ([`crate::filesystem::Writer::begin_with_room`]), or stops and goes on in a new handle
/// when the room refuses them ([`TxnHandle::extend_or_stop`]).
const EXTEND_ALLOWANCE: u64 = 16;

/// Limit-counter slots, commit-gate slots and pending-free lists: one per thread up to this.
pub(crate) const SLOTS: usize = 64;

thread_local! {
    static THREAD_SLOT: usize = {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        NEXT.fetch_add(1, Ordering::Relaxed) % SLOTS
    };
}

/// This thread's slot.
fn thread_slot() -> usize {
    THREAD_SLOT.with(|s| *s)
}

/// The parts of a filesystem a commit reads and writes, borrowed from it: a commit never
/// sees the `Filesystem` itself.
pub(crate) struct CommitParts<'a> {
    pub store: &'a BlockStore,
    /// The superblock as opened (geometry and feature facts; the one written is in
    /// [`Space::superblock`]).
    pub superblock: &'a Superblock,
    pub geometry: &'a Geometry,
    pub descriptors: &'a GroupDescriptors,
    pub inode_table: &'a InodeTable,
    pub inodes: &'a InodeCache,
    pub space: &'a Space,
    /// The log, when the filesystem has a journal.
    pub journal: Option<&'a JournalLog>,
}

/// An operation's membership in the running transaction, with the credits it declared
/// ([`crate::io::credits`]) and, with a journal, the log room it reserved for them
/// ([`log_room`]). Hold it across every change the operation makes; drop it before waiting
/// for a commit.
pub(crate) struct TxnHandle<'a> {
    gate: RwLockReadGuard<'a, ()>,
    txns: &'a Transactions,
    pub slot: usize,
    /// The credits [`Transactions::begin`] declared, declared again by
    /// [`TxnHandle::wait_outside`] in the transaction it joins.
    begun_with: u32,
    /// The log room it holds, given back when it ends.
    held: Cell<Held>,
}

impl TxnHandle<'_> {
    /// Leaves the transaction while `wait` runs, then joins the one running by then, as
    /// [`Transactions::begin`] joins (admitted again, its room reserved again), and
    /// declares the handle's first credits in it again. Only for a handle that has changed
    /// nothing yet and holds no lock a commit or another operation needs: a wait inside a
    /// handle would keep every commit (and every operation after the next one closes the
    /// gate) waiting for it, and room held while waiting could be the room the awaited
    /// operation needs.
    pub(crate) fn wait_outside<T>(
        &mut self,
        parts: &CommitParts<'_>,
        wait: impl FnOnce() -> T,
    ) -> Result<T> {
        let txns = self.txns;
        let (slot, held) = (self.slot, self.held.take());
        if let Some(room) = &txns.room {
            room.release(slot, held.reserved);
        }
        let (waited, admitted) = RwLockReadGuard::unlocked(&mut self.gate, || {
            let waited = wait();
            (waited, txns.admit(parts, slot, held.reserved))
        });
        self.held.set(Held {
            reserved: admitted?,
            declared: 0,
        });
        self.extend(self.begun_with);
        Ok(waited)
    }

    /// The log room the handle holds (0 without a journal).
    pub(crate) fn room_held(&self) -> u64 {
        self.held.get().reserved
    }

    /// Declares `credits` before the next step of an operation that, once it has done
    /// something (`may_stop`), can stop here and go on in a new handle (a write's or a
    /// fallocate's next run of blocks): then only if the log room covers them and
    /// [`EXTEND_ALLOWANCE`] more, for what the step declares next (the run's mapping edit);
    /// else it declares nothing and returns false (jbd2's `jbd2_journal_extend` failing,
    /// after which ext4 restarts its handle). With 0 credits, a probe: whether the room
    /// covers the allowance. Before anything is done the step must go ahead, and this is
    /// [`Self::extend`].
    pub(crate) fn extend_or_stop(&self, credits: u32, may_stop: bool) -> bool {
        if !may_stop {
            self.extend(credits);
            return true;
        }
        if let Some(room) = &self.txns.room {
            let mut held = self.held.get();
            held.declared += u64::from(credits) + EXTEND_ALLOWANCE;
            if !room.try_cover(self.slot, &mut held) {
                return false;
            }
            held.declared -= EXTEND_ALLOWANCE;
            self.held.set(held);
        }
        self.txns.credits.declare(self.slot, credits);
        true
    }

    /// Declares `credits` more blocks this operation may dirty, before the step that may
    /// dirty them (jbd2's `jbd2_journal_extend`), covering them with log room.
    pub(crate) fn extend(&self, credits: u32) {
        self.txns.credits.declare(self.slot, credits);
        if let Some(room) = &self.txns.room {
            let mut held = self.held.get();
            held.declared += u64::from(credits);
            room.top_up(self.slot, &mut held);
            self.held.set(held);
        }
    }
}

impl Drop for TxnHandle<'_> {
    fn drop(&mut self) {
        if let Some(room) = &self.txns.room {
            room.release(self.slot, self.held.get().reserved);
        }
    }
}

/// The transactions of a filesystem open for writing.
pub(crate) struct Transactions {
    gate: Box<[CachePadded<RwLock<()>>]>,
    /// Each slot's block frees in the running transaction.
    frees: Box<[CachePadded<Mutex<TransactionFrees>>]>,
    /// Each slot's inodes freed in the running transaction: given to the inode allocator
    /// when the commit gathers its inode bitmaps, all at once, with every operation
    /// stopped. An unlink then touches no lock or bitmap line another thread uses (the
    /// inodes of two threads' files share groups, and their frees met on the group's lock),
    /// and a number is never handed out again in the transaction that freed it.
    inode_frees: Box<[CachePadded<Mutex<Vec<FreedInode>>>]>,
    /// The groups of `inode_frees`: their inode bitmaps and descriptors change only at the
    /// commit, but count toward the running transaction's size now (an unlink of an empty
    /// file in each of many groups changed one inode bitmap each, uncounted, and its
    /// transaction came out a quarter larger than counted). Emptied as the commit frees them.
    inode_free_groups: DirtyGroups,
    inodes_per_group: u32,
    /// The running transaction's number: operations that start now join it.
    running: AtomicU64,
    /// The last transaction written back (0: none yet). Advanced only under `commit_lock`.
    committed: AtomicU64,
    commit_lock: Mutex<()>,
    /// Whether a commit is running: set and cleared by [`commit::CommitTurn`] under this
    /// lock, which fsyncs sleep on until `commit_ended` wakes them all.
    committing: Mutex<bool>,
    commit_ended: Condvar,
    gate_locks: LockStats,
    commits: Counter,
    /// Nanoseconds callers spent in commits or waiting for one (operations far past the
    /// commit threshold, fsync, sync, unmount); not the commit thread's own commits.
    commit_wait: Counter,
    /// Nanoseconds operations spent held at the gate while a commit gathered: timed on
    /// the contended path only, so an operation that finds its slot open reads no clock.
    gate_wait: Counter,
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
    /// What the running transaction's handles declared they may dirty.
    credits: CreditLedger,
    /// With a journal, the dirty blocks (the inode-table blocks of dirty inodes counted
    /// in) that make an operation commit once it is done, so that a transaction fits the
    /// log.
    log_limit: Option<usize>,
    /// With a journal, what the operations in flight may still add to the running
    /// transaction ([`log_room`]).
    room: Option<LogRoom>,
    /// How operations ask the commit thread for a commit ([`committer`]).
    requests: Arc<CommitRequests>,
    /// Why the commit thread's commit failed, for the next caller to report as it would
    /// have reported its own commit's failure (an I/O error, say, which a mount's
    /// `errors=` policy acts on); taken once, then the filesystem is read-only as after any
    /// failed commit.
    thread_failure: Mutex<Option<Error>>,
}

/// An inode freed in the running transaction, waiting for its commit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct FreedInode {
    pub ino: u32,
    pub directory: bool,
}

const OPEN: u8 = 0;
const FAILED: u8 = 1;
const UNMOUNTED: u8 = 2;

impl Transactions {
    /// Transactions for a volume of `geometry`, committing every `commit_interval` (zero: no
    /// interval commits); with a journal, once an operation leaves more than `log_limit`
    /// dirty metadata blocks, with `log_room` blocks for the operations in flight.
    pub(crate) fn new(
        geometry: &Geometry,
        commit_interval: Duration,
        log_limit: Option<usize>,
        log_room: Option<u64>,
    ) -> Self {
        let blocks = geometry.blocks();
        Transactions {
            gate: (0..SLOTS)
                .map(|_| CachePadded::new(RwLock::new(())))
                .collect(),
            frees: (0..SLOTS)
                .map(|_| CachePadded::new(Mutex::new(TransactionFrees::new(1))))
                .collect(),
            inode_frees: (0..SLOTS)
                .map(|_| CachePadded::new(Mutex::new(Vec::new())))
                .collect(),
            inode_free_groups: DirtyGroups::new(geometry.groups() as usize),
            inodes_per_group: geometry.inodes_per_group().max(1),
            running: AtomicU64::new(1),
            committed: AtomicU64::new(0),
            commit_lock: Mutex::new(()),
            committing: Mutex::new(false),
            commit_ended: Condvar::new(),
            gate_locks: LockStats::default(),
            commits: Counter::default(),
            commit_wait: Counter::default(),
            gate_wait: Counter::default(),
            pending_blocks: AtomicU64::new(0),
            pending_limit: (blocks / 16).max(256),
            state: AtomicU8::new(OPEN),
            commit_interval: (!commit_interval.is_zero()).then_some(commit_interval),
            epoch: Instant::now(),
            last_commit: CachePadded::new(AtomicU64::new(0)),
            credits: CreditLedger::new(SLOTS),
            log_limit,
            room: log_room.map(|total| LogRoom::new(total, SLOTS)),
            requests: Arc::default(),
            thread_failure: Mutex::new(None),
        }
    }

    /// How operations reach the commit thread, for the thread's start.
    pub(crate) fn commit_requests(&self) -> &Arc<CommitRequests> {
        &self.requests
    }

    /// The dirty metadata blocks past which an operation commits, with a journal (a share
    /// of what one transaction may log).
    pub(crate) fn log_limit(&self) -> Option<usize> {
        self.log_limit
    }

    pub(crate) fn check_open(&self) -> Result<()> {
        match self.state.load(Ordering::Acquire) {
            OPEN => Ok(()),
            FAILED => Err(self.thread_failure.lock().take().unwrap_or_else(|| {
                Error::ReadOnly(
                    "an earlier write-back failed, or a failed operation could not be undone; the image needs e2fsck".into(),
                )
            })),
            _ => Err(Error::ReadOnly("the filesystem was unmounted".into())),
        }
    }

    /// Keeps why the commit thread's commit failed (the filesystem is already failed), for
    /// the next caller.
    pub(crate) fn keep_thread_failure(&self, error: Error) {
        self.thread_failure.lock().get_or_insert(error);
    }

    /// Stops the filesystem taking changes: an operation that failed could not be undone,
    /// so the image as the next commit would write it may be inconsistent. Returns
    /// `error`, for the caller to report.
    pub(crate) fn fail(&self, error: Error) -> Error {
        self.state.store(FAILED, Ordering::Release);
        error
    }

    /// Whether the filesystem still accepts changes (not unmounted, no failed commit).
    pub(crate) fn is_open(&self) -> bool {
        self.state.load(Ordering::Acquire) == OPEN
    }

    /// Records that the filesystem was unmounted: no more changes.
    pub(crate) fn close(&self) {
        self.state.store(UNMOUNTED, Ordering::Release);
    }

    pub(crate) fn gate_stats(&self) -> &LockStats {
        &self.gate_locks
    }

    pub(crate) fn commits(&self) -> u64 {
        self.commits.get()
    }

    /// Nanoseconds threads spent committing or waiting for a commit.
    pub(crate) fn commit_wait_nanos(&self) -> u64 {
        self.commit_wait.get()
    }

    /// Nanoseconds operations spent held at the gate while commits gathered.
    pub(crate) fn gate_wait_nanos(&self) -> u64 {
        self.gate_wait.get()
    }

    /// Joins the running transaction, declaring that the operation may dirty up to
    /// `credits` metadata blocks ([`crate::io::credits`]), with log room for at least
    /// `prepaid` (an operation in steps: a whole step, which it declares as it goes).
    /// With a journal it is first admitted ([`Self::admit`]); the caller holds no lock an
    /// operation or a commit needs.
    pub(crate) fn begin(
        &self,
        parts: &CommitParts<'_>,
        credits: u32,
        prepaid: u64,
    ) -> Result<TxnHandle<'_>> {
        self.check_open()?;
        let slot = thread_slot();
        let room = u64::from(credits) + EXTEND_ALLOWANCE + prepaid;
        let reserved = self.admit(parts, slot, room)?;
        let handle = TxnHandle {
            gate: self.gate_locks.take(
                || self.gate[slot].try_read(),
                || {
                    let started = Instant::now();
                    let gate = self.gate[slot].read();
                    add_nanos_since(&self.gate_wait, started);
                    gate
                },
            ),
            txns: self,
            slot,
            begun_with: credits,
            held: Cell::new(Held {
                reserved,
                declared: u64::from(credits),
            }),
        };
        self.credits.declare(slot, credits);
        Ok(handle)
    }

    /// With a journal, reserves `room` units of log room and makes sure the running
    /// transaction is not past the most it may log; past it, the operation commits, or
    /// waits for the commit, before it joins (jbd2's `start_this_handle` waits the same
    /// way), so only operations admitted before it got there add to it, each within what
    /// it reserved. The room is reserved first and the transaction's size read after it:
    /// an operation that read a size under the bound held its room from before that read.
    /// (The reservation is a read-modify-write, a full barrier on x86-64, so the size is
    /// read after it; where the memory model is weaker the argument holds up to the
    /// reordering of a few instructions, which the log's last eighth covers many times.)
    /// Returns the units reserved (0 without a journal).
    fn admit(&self, parts: &CommitParts<'_>, slot: usize, room: u64) -> Result<u64> {
        let Some(log_room) = &self.room else {
            return Ok(0);
        };
        loop {
            let reserved = log_room.reserve(slot, room);
            if !self.log_full(parts.store, parts.inodes, parts.space) {
                return Ok(reserved);
            }
            log_room.release(slot, reserved);
            self.commit_when_full(parts)?;
            self.check_open()?;
        }
    }

    /// Nanoseconds operations spent waiting for log room (0 without a journal).
    pub(crate) fn room_wait_nanos(&self) -> u64 {
        self.room.as_ref().map_or(0, LogRoom::wait_nanos)
    }

    /// Writes to the log room's shared pool (0 without a journal).
    pub(crate) fn room_shared_writes(&self) -> u64 {
        self.room.as_ref().map_or(0, LogRoom::shared_writes)
    }

    /// Reservations that waited for log room, and credits declared inside handles when
    /// the room had none left (both 0 without a journal).
    pub(crate) fn room_stats(&self) -> (u64, u64) {
        self.room
            .as_ref()
            .map_or((0, 0), |r| (r.waits(), r.overdrafts()))
    }

    /// Commits that wrote more blocks than their transactions declared (none, unless a
    /// handle under-declares).
    #[cfg(feature = "testing")]
    pub(crate) fn credit_overruns(&self) -> Vec<credit_ledger::CreditOverrun> {
        self.credits.overruns()
    }

    /// Stops every operation until the returned guards are dropped: the gate closed, as a
    /// commit closes it.
    pub(crate) fn close_gate(&self) -> Vec<parking_lot::RwLockWriteGuard<'_, ()>> {
        self.gate.iter().map(|g| g.write()).collect()
    }

    /// Frees inode `ino` when the running transaction commits (see `inode_frees`); the
    /// commit writes its group's inode bitmap and descriptor, declared here.
    pub(crate) fn free_inode(&self, txn: &TxnHandle<'_>, ino: u32, directory: bool) {
        txn.extend(GROUP);
        let slot = txn.slot;
        if self.log_limit.is_some() {
            self.inode_free_groups.insert(self.group_of_inode(ino));
        }
        self.inode_frees[slot]
            .lock()
            .push(FreedInode { ino, directory });
    }

    /// The group of inode `ino` (for `inode_free_groups`).
    fn group_of_inode(&self, ino: u32) -> usize {
        (ino.saturating_sub(1) / self.inodes_per_group) as usize
    }

    /// Inodes freed in the running transaction, free once it commits.
    pub(crate) fn pending_inodes(&self) -> u64 {
        self.inode_frees.iter().map(|f| f.lock().len() as u64).sum()
    }

    /// Frees `len` blocks from `start` of `blocks` when the running transaction commits.
    /// The caller holds a handle, so the transaction cannot commit in between. The commit
    /// writes the bitmaps showing them free (they are reusable only once it is on disk),
    /// so a free declares its groups' bitmaps and descriptors.
    pub(crate) fn free_blocks(
        &self,
        txn: &TxnHandle<'_>,
        blocks: &BlockAllocator,
        start: u64,
        len: u64,
    ) -> Result<()> {
        let slot = txn.slot;
        let geometry = blocks.geometry();
        let per_group = u64::from(geometry.blocks_per_group);
        let first = start.saturating_sub(geometry.first_data_block);
        let groups = (first + len).div_ceil(per_group) - first / per_group;
        txn.extend(GROUP.saturating_mul(u32::try_from(groups).unwrap_or(u32::MAX)));
        let mut frees = self.frees[slot].lock();
        self.pending_blocks.fetch_add(len, Ordering::Relaxed);
        for piece in pieces(start, len) {
            blocks
                .free_in_transaction(piece, &mut frees)
                .map_err(|e| match e {
                    e4_alloc::AllocError::BadFree { .. } => {
                        Error::Format(e4_format::FormatError::corrupt(
                            e4_format::Structure::BlockMapping,
                            e4_format::Location::Block(piece.start),
                            e4_format::Problem::UnfreeableBlocks {
                                len: u64::from(piece.len),
                            },
                        ))
                    }
                    // A bitmap that cannot be read or trusted says so.
                    other => Error::from_block_allocation(other),
                })?;
        }
        Ok(())
    }

    /// Takes `len` blocks from `start`, freed by this slot's operation in the running
    /// transaction, back out of its pending frees (the operation failed part-way).
    pub(crate) fn cancel_free(
        &self,
        blocks: &BlockAllocator,
        start: u64,
        len: u64,
        slot: usize,
    ) -> Result<()> {
        let frees = self.frees[slot].lock();
        for piece in pieces(start, len) {
            blocks
                .cancel_free_in_transaction(piece, &frees)
                .map_err(Error::from_block_allocation)?;
        }
        self.pending_blocks.fetch_sub(len, Ordering::Relaxed);
        Ok(())
    }

    /// Whether many blocks were freed since the last commit (only a commit makes them
    /// reusable), or, when no commit thread serves (it wakes for the interval itself), the
    /// commit interval has passed. Loads, and without the thread one clock read
    /// (`Instant::now`, a vDSO call of about 20 ns: 7 % of a fallocate2 run, which also
    /// reads the time of day for the file's times): no lock and no shared write.
    pub(crate) fn wants_commit(&self) -> bool {
        self.pending_blocks.load(Ordering::Relaxed) > self.pending_limit
            || (!self.requests.is_served() && self.interval_passed())
    }

    /// Whether the commit interval has passed since the last commit.
    pub(crate) fn interval_passed(&self) -> bool {
        self.commit_interval
            .is_some_and(|interval| self.since_last_commit() >= interval)
    }

    /// Whether blocks were freed since the last commit.
    pub(crate) fn has_pending_frees(&self) -> bool {
        self.pending_blocks.load(Ordering::Relaxed) > 0
    }

    /// The commit interval (`None` when interval commits are off).
    pub(crate) fn commit_interval(&self) -> Option<Duration> {
        self.commit_interval
    }

    /// Time since the last commit ended (since the start, before the first).
    pub(crate) fn since_last_commit(&self) -> Duration {
        let last = Duration::from_nanos(self.last_commit.load(Ordering::Relaxed));
        self.epoch.elapsed().saturating_sub(last)
    }

    /// The running transaction's number. Every operation that finished before this call
    /// belongs to it or to an earlier one.
    pub(crate) fn running_txn(&self) -> u64 {
        self.running.load(Ordering::Acquire)
    }
}

/// Adds the nanoseconds since `started` to `counter` (a wait's length).
fn add_nanos_since(counter: &Counter, started: Instant) {
    // OK to cast: u64 nanoseconds cover 584 years.
    counter.add(started.elapsed().as_nanos() as u64);
}

/// `len` blocks from `start` as extents the allocator takes (at most 2^32 - 1 blocks each).
fn pieces(start: u64, len: u64) -> impl Iterator<Item = e4_alloc::Extent> {
    let end = start + len;
    let mut at = start;
    std::iter::from_fn(move || {
        (at < end).then(|| {
            // OK to cast: at most u32::MAX.
            let piece = (end - at).min(u64::from(u32::MAX)) as u32;
            let extent = e4_alloc::Extent {
                start: at,
                len: piece,
            };
            at += u64::from(piece);
            extent
        })
    })
}

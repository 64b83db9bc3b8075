//! Commits: the running transaction written back, in the order that keeps the image
//! consistent between commits.
//!
//! With every operation stopped (the gate closed), a commit switches to the next
//! transaction and gathers what it will write ([`Transactions::gather`]): the orphan chain,
//! dirty inodes into their inode-table blocks, the inodes the transaction freed given back
//! to the inode allocator (so a number is never reused in the transaction that freed it),
//! inode bitmaps (and newly exposed inode-table slots, zeroed), the list of dirty metadata
//! blocks and the changed block groups' bitmaps. It then reopens the gate, and writes while
//! the next transaction runs: every gathered block sealed by its role, block bitmaps, group
//! descriptors and the superblock; it flushes the device; and only then releases the blocks
//! the transaction freed (pending frees), so no block is reused before the change that
//! freed it is on disk. File data is written to its final place during the operation
//! itself, before any commit that makes it reachable.
//!
//! Until the journal lands, metadata goes to its home location directly: a commit that is
//! interrupted (a crash, a failed write) can leave the image inconsistent, and after a
//! failed commit the filesystem refuses further changes. Between commits the image is
//! consistent: a gathered block that the next transaction changes is written as the commit
//! froze it (see [`Transactions::write_out`]), which is also what the journal will log.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use e4_alloc::{DirtyGroup, TransactionFrees};
use parking_lot::MutexGuard;

use crate::buffer::cache::Buffer;
use crate::buffer::store::BlockStore;
use crate::error::{Error, Result};
use crate::inode::cache::{InodeCache, InodeHandle};
use crate::io::credits::GROUP;
use crate::space::bitmaps::BitmapWrite;
use crate::space::Space;
use crate::txn::write_back;
use crate::txn::{CommitParts, FreedInode, Transactions, FAILED};

/// How long an fsync waits for another thread's commit before sleeping.
const COMMIT_SPIN: Duration = Duration::from_micros(200);

/// Dirty metadata blocks that make an operation commit once it is done; at most the buffer
/// cache's capacity. Dirty blocks are never evicted: past the capacity a shard grows beyond
/// its share until the commit (`Shard::evict_one` in the buffer cache), and the clean
/// blocks an operation needs are read again. Half the capacity, the limit before, made two
/// threads' 200,000 unlinks (13,500 dirty blocks against 8,192) commit inside the
/// benchmark's timed phase where one thread's 100,000 did not.
const DIRTY_LIMIT: usize = 16 * 1024;

/// What a commit gathered with every operation stopped, to write while the next
/// transaction runs.
struct CommitBatch {
    /// Groups whose descriptors changed (inode and block bitmaps).
    changed_groups: Vec<u32>,
    /// Inode bitmaps, encoded.
    inode_bitmaps: Vec<BitmapWrite>,
    /// Dirty blocks, sorted by number.
    buffers: Vec<Arc<Buffer>>,
    /// Changed block groups with the bitmaps to write.
    block_groups: Vec<DirtyGroup>,
    /// The handles of the inodes whose records were written: let go once the gate has
    /// reopened (dropping tens of thousands of handles, a cache miss each, was a
    /// millisecond of a create commit's stop).
    inodes: Vec<Arc<InodeHandle>>,
}

/// A running commit: the commit lock, and [`Transactions::committing`] set. Dropping it, on
/// every path out of a commit (failed ones and panics included), clears the flag and wakes
/// the fsyncs sleeping in [`Transactions::wait_for_commit_end`], so none sleeps past the
/// commit it waits for.
pub(crate) struct CommitTurn<'a> {
    _one: MutexGuard<'a, ()>,
    txns: &'a Transactions,
}

impl<'a> CommitTurn<'a> {
    fn new(txns: &'a Transactions, one: MutexGuard<'a, ()>) -> Self {
        *txns.committing.lock() = true;
        CommitTurn { _one: one, txns }
    }
}

impl Drop for CommitTurn<'_> {
    fn drop(&mut self) {
        *self.txns.committing.lock() = false;
        self.txns.commit_ended.notify_all();
    }
}

impl Transactions {
    /// Whether the operation that just finished should commit: many dirty blocks (with a
    /// journal, near what one transaction may log), or what [`Transactions::wants_commit`]
    /// says. Loads and a clock read, no lock.
    pub(crate) fn wants_commit_with(
        &self,
        store: &BlockStore,
        inodes: &InodeCache,
        space: &Space,
    ) -> bool {
        let cache = store.cache();
        cache.dirty_count() > DIRTY_LIMIT.min(cache.capacity())
            || self
                .log_limit
                .is_some_and(|limit| self.log_blocks_pending(store, inodes, space) > limit)
            || self.wants_commit()
    }

    /// The blocks the running transaction would log if it committed now, counted from
    /// loads of words written on a block's, inode-table block's or group's first change
    /// only: dirty buffers, the table blocks holding dirty inodes, and for each group
    /// whose bitmap changed the bitmap and a descriptor block. Before the groups were
    /// counted, operations that each changed another group's bitmap (a 1 KiB-block image
    /// has a group every 8 MiB) made transactions larger than the log; before the table
    /// blocks were, inodes changed one per table block did (counted as if packed).
    fn log_blocks_pending(&self, store: &BlockStore, inodes: &InodeCache, space: &Space) -> usize {
        let groups = space.blocks.dirty_group_count()
            + space.inodes.dirty_group_count()
            + self.inode_free_groups.count();
        store.cache().dirty_count()
            + inodes.dirty_table_blocks()
            + space.orphans.pending_changes()
            + usize::try_from(groups)
                .unwrap_or(usize::MAX)
                .saturating_mul(GROUP as usize)
    }

    /// Whether the running transaction holds changes a commit would write: dirty blocks or
    /// inodes, or pending frees. Takes the inode cache's shard locks: for the commit
    /// thread, not for operations.
    pub(crate) fn has_changes(&self, parts: &CommitParts<'_>) -> bool {
        parts.store.cache().dirty_count() > 0
            || self.has_pending_frees()
            || parts.inodes.any_dirty()
    }

    /// Writes the running transaction back.
    pub(crate) fn commit(&self, parts: &CommitParts<'_>) -> Result<()> {
        let started = Instant::now();
        let result = self.commit_locked(parts, CommitTurn::new(self, self.commit_lock.lock()));
        self.add_commit_wait(started);
        result
    }

    /// A commit by the commit thread: nobody waits for it, so its time is not counted as
    /// time spent waiting for commits.
    pub(crate) fn commit_unwaited(&self, parts: &CommitParts<'_>) -> Result<()> {
        self.commit_locked(parts, CommitTurn::new(self, self.commit_lock.lock()))
    }

    /// The commit an operation asks for when it leaves the transaction past a threshold
    /// ([`Self::wants_commit_with`]): the commit thread makes it ([`super::committer`]).
    /// Without that thread the operation commits itself, unless another thread is
    /// committing: then it does not queue behind it, as that commit is already relieving
    /// the pressure, and a second one right after it would write a transaction of a few
    /// blocks (at 64 threads, each crossing the threshold at once, the queue was most of
    /// the time spent committing). Far past the threshold ([`Self::far_past_threshold`]) an
    /// operation commits, or waits its turn, itself, thread or not, so a transaction stays
    /// bounded however long a commit takes.
    pub(crate) fn commit_for_pressure(
        &self,
        parts: &CommitParts<'_>,
        inodes: &InodeCache,
    ) -> Result<()> {
        let far_past = self.far_past_threshold(parts.store, inodes, parts.space);
        if !far_past && self.requests.request() {
            return Ok(());
        }
        let started = Instant::now();
        let result = match self.commit_lock.try_lock() {
            Some(one) => self.commit_locked(parts, CommitTurn::new(self, one)),
            None if far_past => {
                let one = self.commit_lock.lock();
                // The commit waited for may have taken this operation's changes; queued
                // behind it, each waiter would otherwise commit again, one after another.
                if self.wants_commit_with(parts.store, inodes, parts.space) {
                    self.commit_locked(parts, CommitTurn::new(self, one))
                } else {
                    Ok(())
                }
            }
            None => return Ok(()),
        };
        self.add_commit_wait(started);
        result
    }

    /// Whether the running transaction holds twice the dirty blocks that make an operation
    /// commit, or, with a journal, all a transaction may log ([`Self::log_full`]).
    fn far_past_threshold(&self, store: &BlockStore, inodes: &InodeCache, space: &Space) -> bool {
        let cache = store.cache();
        cache.dirty_count() > 2 * DIRTY_LIMIT.min(cache.capacity())
            || self.log_full(store, inodes, space)
    }

    /// With a journal, whether the running transaction holds all a transaction may log
    /// (half the log; the limit at which operations ask for a commit is three quarters of
    /// it: `filesystem.rs`). Operations past it commit, and none joins it
    /// ([`Self::begin`]).
    pub(crate) fn log_full(&self, store: &BlockStore, inodes: &InodeCache, space: &Space) -> bool {
        self.log_limit
            .is_some_and(|limit| self.log_blocks_pending(store, inodes, space) > limit + limit / 3)
    }

    /// For an operation the running transaction did not admit ([`Self::log_full`]): commits
    /// it, or waits for the commit that is committing it.
    pub(crate) fn commit_when_full(&self, parts: &CommitParts<'_>) -> Result<()> {
        let started = Instant::now();
        let one = self.commit_lock.lock();
        let result = if self.log_full(parts.store, parts.inodes, parts.space) {
            self.commit_locked(parts, CommitTurn::new(self, one))
        } else {
            Ok(())
        };
        self.add_commit_wait(started);
        result
    }

    fn add_commit_wait(&self, started: Instant) {
        super::add_nanos_since(&self.commit_wait, started);
    }

    /// Makes sure transaction `txn` and every earlier one are written back, committing the
    /// running transaction only if they are not (jbd2's `jbd2_log_wait_commit`). This is
    /// how fsyncs share commits: callers that find another thread committing wait for its
    /// end ([`Self::wait_for_commit_end`]) and return if it wrote their transaction; of the
    /// others, the first to take the commit lock commits for all of them, so one commit
    /// answers every fsync that was waiting for it.
    pub(crate) fn commit_through(&self, parts: &CommitParts<'_>, txn: u64) -> Result<()> {
        let started = Instant::now();
        let result = self.commit_through_timed(parts, txn);
        self.add_commit_wait(started);
        result
    }

    fn commit_through_timed(&self, parts: &CommitParts<'_>, txn: u64) -> Result<()> {
        loop {
            if self.committed.load(Ordering::Acquire) >= txn {
                return self.check_open();
            }
            if let Some(one) = self.commit_lock.try_lock() {
                if self.committed.load(Ordering::Acquire) >= txn {
                    return self.check_open();
                }
                return self.commit_locked(parts, CommitTurn::new(self, one));
            }
            self.wait_for_commit_end(txn);
        }
    }

    /// While another thread commits, waits until it ends or `txn` is written. First
    /// without sleeping, for up to [`COMMIT_SPIN`]: an fsync-driven commit takes tens of
    /// microseconds, and a sleeping thread takes about as long again to be woken on another
    /// CPU, so the waiter checks and yields its CPU to any other runnable thread instead.
    /// Then asleep on `commit_ended`, which the commit's end wakes all at once: the
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

    fn commit_locked(&self, parts: &CommitParts<'_>, _turn: CommitTurn<'_>) -> Result<()> {
        let closed = self.close_gate();
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
        let budget = self.credits.close(txn);
        let gathered = self.gather(parts);
        drop(closed);
        // The runs the transaction frees: a journal revokes those it holds copies of.
        let freed: Vec<e4_alloc::Extent> = match parts.journal {
            Some(_) => {
                let mut runs: Vec<_> = frees
                    .iter()
                    .flat_map(|f| parts.space.blocks.pending_runs(f))
                    .collect();
                runs.sort_unstable();
                runs
            }
            None => Vec::new(),
        };
        let written = match gathered.and_then(|batch| self.write_out(parts, batch, &freed)) {
            Ok(written) => written,
            Err(e) => {
                self.state.store(FAILED, Ordering::Release);
                return Err(e);
            }
        };
        self.credits.settle(budget, written);
        for f in frees {
            parts.space.blocks.commit_frees(f, 0);
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
    /// they stand. Nothing here waits for the device.
    fn gather(&self, parts: &CommitParts<'_>) -> Result<CommitBatch> {
        chain_orphans(parts)?;
        let inodes = parts.inodes.take_dirty();
        write_back::write_inode_records(
            parts.store,
            parts.descriptors,
            &parts.space.inodes,
            parts.inode_table,
            parts.inodes,
            &inodes,
        )?;
        self.release_freed_inodes(parts.space)?;
        let block_size = parts.store.block_size() as usize;
        let inode_bitmaps =
            parts
                .space
                .encode_inode_bitmaps(parts.superblock, parts.descriptors, block_size);
        for exposed in &inode_bitmaps.exposed {
            parts.inode_table.zero_free_slots(
                parts.store,
                exposed.group,
                exposed.from,
                exposed.to,
                &exposed.bitmap,
            )?;
        }
        let buffers = parts.store.cache().take_dirty();
        let block_groups = parts
            .space
            .blocks
            .take_dirty_groups(block_size)
            .map_err(Error::from_block_allocation)?;
        Ok(CommitBatch {
            changed_groups: inode_bitmaps.groups,
            inode_bitmaps: inode_bitmaps.writes,
            buffers,
            block_groups,
            inodes,
        })
    }

    /// Gives the running transaction's freed inodes to the inode allocator, in number
    /// order (a group's frees together). Called with every operation stopped, before the
    /// inode bitmaps are gathered, so the bitmaps this commit writes show them free.
    fn release_freed_inodes(&self, space: &Space) -> Result<()> {
        let mut freed: Vec<FreedInode> = Vec::new();
        for frees in self.inode_frees.iter() {
            freed.append(&mut frees.lock());
        }
        freed.sort_unstable();
        for FreedInode { ino, directory } in freed {
            self.inode_free_groups.remove(self.group_of_inode(ino));
            space
                .inodes
                .free(ino, directory, 0)
                .map_err(|e| Error::Internal(format!("freeing inode {ino} at commit: {e}")))?;
        }
        Ok(())
    }

    /// The rest of a commit, while the next transaction runs: the gathered blocks, the
    /// bitmaps, descriptors and superblock, through the journal's log when there is one
    /// ([`crate::journal::log::JournalLog::commit`]: durable in the log before anything
    /// goes home, so the home writes need no flush of their own), else home and flushed. An operation that
    /// changes a gathered block meanwhile first freezes a copy of it for this commit
    /// ([`Buffer`]), and the next commit, which starts only after this one, writes the
    /// change. No block freed by either transaction can be reused before its own commit
    /// ends, so none of the blocks written here can belong to something else by now.
    /// `freed` are the runs this transaction frees. Returns how many blocks it wrote home.
    fn write_out(
        &self,
        parts: &CommitParts<'_>,
        batch: CommitBatch,
        freed: &[e4_alloc::Extent],
    ) -> Result<u64> {
        let CommitBatch {
            mut changed_groups,
            inode_bitmaps,
            buffers,
            block_groups,
            inodes,
        } = batch;
        // The gate is open again: let the written handles go (see `CommitBatch::inodes`).
        drop(inodes);
        let block_bitmaps =
            parts
                .space
                .encode_block_bitmaps(parts.superblock, parts.descriptors, block_groups);
        changed_groups.extend(block_bitmaps.iter().map(|(g, _)| *g));
        let descriptor_blocks = parts.descriptors.encode_blocks(
            parts.geometry,
            parts.store.block_size() as usize,
            changed_groups,
        );
        let superblock = parts.space.superblock.encode(parts.descriptors);
        let uncached: Vec<(u64, Vec<u8>)> = inode_bitmaps
            .into_iter()
            .map(|w| (w.block, w.bytes))
            .chain(block_bitmaps.into_iter().map(|(_, w)| (w.block, w.bytes)))
            .chain(descriptor_blocks)
            .collect();
        let written = (buffers.len() + uncached.len() + 1) as u64;
        let Some(journal) = parts.journal else {
            write_back::write_buffers(parts.store, &buffers)?;
            drop(buffers);
            write_back::write_uncached(parts.store, uncached)?;
            write_back::write_superblock(parts.store, &superblock)?;
            parts.store.flush("at commit")?;
            return Ok(written);
        };
        // The sealed copies go into one buffer the log keeps from commit to commit: a
        // vector per block, fresh each commit, made a create run spend a tenth of its time
        // in malloc and page faults.
        let mut room = journal.take_room();
        write_back::seal_into(parts.store, &buffers, &mut room);
        let block_size = parts.store.block_size() as usize;
        let sealed: Vec<(u64, &[u8])> = buffers
            .iter()
            .zip(room.chunks_exact(block_size))
            .map(|(buffer, bytes)| (buffer.nr(), bytes))
            .collect();
        let superblock_block = journal.superblock_block(&superblock);
        let logged: Vec<(u64, &[u8])> = sealed
            .iter()
            .copied()
            .chain(
                uncached
                    .iter()
                    .chain(std::iter::once(&superblock_block))
                    .map(|(nr, bytes)| (*nr, bytes.as_slice())),
            )
            .collect();
        let in_log = journal.commit(parts.store, &logged, freed)?;
        drop(logged);
        write_back::write_copies(parts.store, &sealed)?;
        // Only now may the cache let the buffers go: until their home writes are done the
        // device holds their old contents, and a buffer evicted and read back before then
        // would bring those back, for the next commit to write over this one's changes
        // (entries of large directories were lost so, once the cache was full).
        drop(buffers);
        drop(sealed);
        journal.give_back_room(room);
        write_back::write_uncached(parts.store, uncached)?;
        write_back::write_superblock(parts.store, &superblock)?;
        if !in_log {
            parts.store.flush("at a commit too large for the journal")?;
        }
        Ok(written)
    }

    /// Closes the gate for the unmount's last write: the superblock marked clean. No
    /// operation can start after it.
    pub(crate) fn write_clean_superblock(&self, parts: &CommitParts<'_>) -> Result<()> {
        let _closed = self.close_gate();
        if let Some(journal) = parts.journal {
            journal.close(parts.store)?;
        }
        parts.space.superblock.mark_clean();
        write_back::write_superblock(
            parts.store,
            &parts.space.superblock.encode(parts.descriptors),
        )?;
        self.close();
        parts.store.flush("at unmount")
    }
}

/// Writes the orphan list: the superblock's head and each orphan's `i_dtime` pointing at
/// the next (no operation runs during a commit, so their locks are free). Only an orphan
/// whose link changed is written: the operation that put it on the list, or took its
/// neighbour off, declared it.
///
/// An orphan's handle is usually cached (it is open, or an operation in steps holds it),
/// but one whose steps failed part-way stays on the list with no holder, and the cache
/// may have dropped it since: its record is read again (its slot is in use, so it is not
/// in the table's never-written part).
fn chain_orphans(parts: &CommitParts<'_>) -> Result<()> {
    let orphans = parts.space.orphans.chain_for_commit();
    for (i, &ino) in orphans.iter().enumerate() {
        let handle = parts.inodes.get_or_load(ino, || {
            parts.inode_table.read_record(parts.store, ino, false)
        })?;
        let next = orphans.get(i + 1).copied().unwrap_or(0);
        let dtime = &mut handle.lock(parts.inodes).inode.record.dtime;
        if *dtime != next {
            *dtime = next;
            parts.inodes.mark_dirty(&handle);
        }
    }
    parts
        .space
        .superblock
        .set_last_orphan(orphans.first().copied().unwrap_or(0));
    Ok(())
}
#[cfg(test)]
mod tests {
    use std::sync::{mpsc, Arc};
    use std::time::Duration;

    use super::CommitTurn;
    use crate::{Creator, Filesystem, OpenOptions};

    const CREATOR: Creator = Creator {
        permissions: 0o644,
        uid: 0,
        gid: 0,
        umask: 0,
    };

    /// The image at `path`, open for writing, committing only when asked or pressed.
    fn open_without_interval(path: &std::path::Path) -> Arc<Filesystem> {
        let options = OpenOptions {
            commit_interval: Duration::ZERO,
            ..OpenOptions::writable()
        };
        Arc::new(Filesystem::open(path, options).unwrap())
    }

    /// An operation past the commit threshold that finds another thread committing goes
    /// on without queueing behind it; far past it it waits its turn.
    #[test]
    fn an_operation_past_the_threshold_does_not_queue_behind_a_running_commit() {
        // A small journal (4,096 1 KiB blocks), and inodes enough to pass far past its
        // threshold.
        let img = e4_testkit::make_empty_image(&["-t", "ext4", "-N", "20000"], 32);
        let fs = open_without_interval(&img.path);
        let txns = &fs.writer.as_ref().unwrap().txns;
        // A commit in progress: the test holds its turn.
        let turn = CommitTurn::new(txns, txns.commit_lock.lock());
        let (done, finished) = mpsc::channel();
        let creates = {
            let fs = Arc::clone(&fs);
            std::thread::spawn(move || {
                let w = fs.writer.as_ref().unwrap();
                let mut n = 0u32;
                while !w.txns.wants_commit_with(&fs.store, &fs.inodes, &w.space) {
                    fs.create(2, format!("f{n}").as_bytes(), CREATOR).unwrap();
                    n += 1;
                }
                // Past the threshold, not far past it: this create must not wait.
                fs.create(2, b"one-more", CREATOR).unwrap();
                done.send(()).unwrap();
                // On until the commit: the create that passes far past the threshold waits
                // for the running commit's end, and commits.
                while w.txns.commits() == 0 {
                    fs.create(2, format!("g{n}").as_bytes(), CREATOR).unwrap();
                    n += 1;
                }
                done.send(()).unwrap();
            })
        };
        finished
            .recv_timeout(Duration::from_secs(30))
            .expect("an operation past the threshold queued behind the running commit");
        assert!(
            matches!(
                finished.recv_timeout(Duration::from_millis(200)),
                Err(mpsc::RecvTimeoutError::Timeout)
            ),
            "an operation far past the threshold did not wait for the commit"
        );
        drop(turn);
        finished.recv_timeout(Duration::from_secs(30)).unwrap();
        creates.join().unwrap();
        assert!(txns.commits() >= 1);
        Arc::into_inner(fs).unwrap().unmount().unwrap();
        e4_testkit::e2fsck_clean(&img.path).unwrap();
    }

    /// The operation that leaves the transaction past its threshold asks the commit thread
    /// and goes on: the thread makes the commit, and no operation spends time in it.
    #[test]
    fn the_commit_thread_makes_the_commit_an_operation_asks_for() {
        let img = e4_testkit::make_empty_image(&["-t", "ext4", "-N", "20000"], 32);
        let fs = Arc::new(
            Filesystem::open(
                &img.path,
                OpenOptions {
                    commit_interval: Duration::ZERO,
                    transaction_limit: Some(64),
                    ..OpenOptions::writable()
                },
            )
            .unwrap(),
        );
        let w = fs.writer.as_ref().unwrap();
        let mut n = 0u32;
        while !w.txns.wants_commit_with(&fs.store, &fs.inodes, &w.space) {
            assert!(
                n < 10_000,
                "no create left its transaction past the threshold: each committed itself"
            );
            fs.create(2, format!("f{n}").as_bytes(), CREATOR).unwrap();
            n += 1;
        }
        // The create that crossed the threshold asked; nothing runs from here on.
        let started = std::time::Instant::now();
        while w.txns.commits() == 0 || w.txns.wants_commit_with(&fs.store, &fs.inodes, &w.space) {
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "the commit thread did not commit within 30 s of the request"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(
            w.txns.commit_wait_nanos(),
            0,
            "an operation made the commit, or waited for it"
        );
        Arc::into_inner(fs).unwrap().unmount().unwrap();
        e4_testkit::e2fsck_clean(&img.path).unwrap();
    }

    /// A commit the thread makes that fails (the device refuses writes) is reported to the
    /// next caller as the failure it was, an I/O error a mount's `errors=` policy acts on;
    /// the callers after it find the filesystem read-only.
    #[test]
    fn a_commit_the_thread_fails_is_reported_to_the_next_caller() {
        use crate::device::{Fault, FaultyDevice, MemoryDevice};
        let img = e4_testkit::make_empty_image(&["-t", "ext4", "-N", "20000"], 32);
        let bytes = std::fs::read(&img.path).unwrap();
        let device = Arc::new(FaultyDevice::new(MemoryDevice::new(bytes), Fault::Never));
        let options = OpenOptions {
            commit_interval: Duration::ZERO,
            transaction_limit: Some(64),
            ..OpenOptions::writable()
        };
        let fs = Filesystem::open_device(device.clone(), options).unwrap();
        let w = fs.writer.as_ref().unwrap();
        // Empty files: nothing reaches the device before a commit.
        device.set_fault(Fault::WritesFrom(0));
        // Creates until one asks for a commit; the thread's commit may fail before this
        // loop sees the request, and then the next create is the caller that reports it.
        let mut n = 0u32;
        let first = loop {
            if let Err(e) = fs.create(2, format!("f{n}").as_bytes(), CREATOR) {
                break e;
            }
            n += 1;
            if w.txns.wants_commit_with(&fs.store, &fs.inodes, &w.space) {
                let started = std::time::Instant::now();
                while w.txns.is_open() {
                    assert!(
                        started.elapsed() < Duration::from_secs(30),
                        "the commit thread's commit did not fail within 30 s"
                    );
                    std::thread::sleep(Duration::from_millis(1));
                }
                break fs.create(2, b"after", CREATOR).unwrap_err();
            }
        };
        assert_eq!(
            first.errno(),
            rustix::io::Errno::IO.raw_os_error(),
            "{first}"
        );
        let next = fs.create(2, b"after", CREATOR).unwrap_err();
        assert!(matches!(next, crate::Error::ReadOnly(_)), "{next}");
    }

    /// An fsync that finds a commit running, and sleeps behind it, commits its own
    /// transaction when that commit ends without it (the commit was of an earlier one).
    #[test]
    fn an_fsync_asleep_behind_a_commit_commits_its_transaction_when_that_commit_ends() {
        let img = e4_testkit::make_empty_image(&["-t", "ext4"], 16);
        let fs = open_without_interval(&img.path);
        fs.create(2, b"f", CREATOR).unwrap();
        let txns = &fs.writer.as_ref().unwrap().txns;
        let txn = txns.running_txn();
        // A commit in progress, of nothing: the test holds its turn.
        let turn = CommitTurn::new(txns, txns.commit_lock.lock());
        let (done, finished) = mpsc::channel();
        let fsync = {
            let fs = Arc::clone(&fs);
            std::thread::spawn(move || {
                let w = fs.writer.as_ref().unwrap();
                let result = w.txns.commit_through(&fs.commit_parts(w), txn);
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
        assert!(txns.committed.load(std::sync::atomic::Ordering::Acquire) >= txn);
        assert_eq!(txns.commits(), 1);
        Arc::into_inner(fs).unwrap().unmount().unwrap();
        e4_testkit::e2fsck_clean(&img.path).unwrap();
    }
}

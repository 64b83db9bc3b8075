//! Commits through the log. A commit hands [`JournalLog::commit`] every block it will
//! write home; they go to the log as one jbd2 transaction, in the order that makes a crash
//! at any write recoverable:
//!
//! 1. if the log lacks room, a checkpoint first: a flush makes every earlier home write
//!    durable, then the journal superblock moves the tail to the head, flushed before any
//!    of that space is written again;
//! 2. revoke records for freed blocks that have a copy in the live log (or in this
//!    transaction), then descriptors and copies; a flush (so the file data the operations
//!    wrote, which reached the device before the commit, is durable too);
//! 3. the commit block, and a flush: the transaction is durable;
//! 4. then, and only then, the caller writes the blocks home, with no flush: they become
//!    durable at the next commit's flush, and the tail never passes a transaction before
//!    a flush has made its home writes durable (1).
//!
//! With `async_commit` and block checksums, step 2's flush is skipped (the commit block is
//! sent with the rest and one flush follows), as jbd2 does: recovery finds a torn
//! transaction by its checksums. A transaction too large for the whole log is not logged:
//! the caller writes it home directly and flushes, as e4 did before the journal, and the
//! count of such commits is reported ([`JournalLog::stats`]).

use std::sync::atomic::{AtomicU64, Ordering};

use e4_alloc::Extent;
use e4_format::features::IncompatFeatures;
use e4_format::superblock::{Superblock, SUPERBLOCK_OFFSET};
use e4_journal::{FilesystemFeatures, Journal, LogWrite, LogWriter};
use parking_lot::Mutex;

use crate::buffer::store::BlockStore;
use crate::error::Result;

/// The most blocks gathered into one device write of the log.
const RUN_BLOCKS: usize = 256;

/// What the journal did, for reports beside throughput.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct JournalStats {
    /// Transactions committed through the log.
    pub commits: u64,
    /// Log blocks written (descriptors, copies, revokes, commit blocks).
    pub log_blocks: u64,
    /// Revoke records written.
    pub revokes: u64,
    /// Checkpoints: the tail moved because the log was full.
    pub checkpoints: u64,
    /// Commits too large for the log, written home directly (not crash-safe).
    pub unjournaled: u64,
    /// The most log blocks one transaction needed (descriptors, copies, revokes and its
    /// commit block), logged or not: how close the largest came to the log's size.
    pub largest_transaction: u64,
    /// Operations that waited for log room before joining a transaction
    /// (`txn/log_room.rs`): the operations in flight held all of it.
    pub room_waits: u64,
    /// Credits declared inside operations when the log room had none left, covered by the
    /// log's margin instead.
    pub room_overdrafts: u64,
}

#[derive(Default)]
struct Counters {
    commits: AtomicU64,
    log_blocks: AtomicU64,
    revokes: AtomicU64,
    checkpoints: AtomicU64,
    unjournaled: AtomicU64,
    largest_transaction: AtomicU64,
}

/// The log of a filesystem open for writing.
pub(crate) struct JournalLog {
    /// Used by one commit at a time (commits are serial): the lock is never contended.
    writer: Mutex<LogWriter>,
    /// The filesystem block holding the primary superblock, and its bytes as read at open:
    /// a commit logs the whole block with the superblock it writes in place.
    superblock_block: (u64, Vec<u8>),
    async_commit: bool,
    counters: Counters,
    /// Where a commit puts its sealed copies, kept from one commit to the next.
    room: Mutex<Vec<u8>>,
}

impl JournalLog {
    /// Starts logging into `journal` (empty): its superblock, pointing at the log's first
    /// block and the first transaction, is written now; the caller's flush at open (before
    /// any commit) makes it durable with the superblock that says `needs_recovery`.
    pub(crate) fn start(store: &BlockStore, journal: &Journal, sb: &Superblock) -> Result<Self> {
        let features = FilesystemFeatures {
            bit64: sb.incompat().contains(IncompatFeatures::BIT64),
            metadata_csum: sb.has_metadata_csum(),
        };
        let (writer, (at, block0)) = LogWriter::start(journal, features)?;
        let block_size = u64::from(store.block_size());
        store.write_home(at * block_size, &block0, "the journal superblock")?;
        let nr = SUPERBLOCK_OFFSET / block_size;
        let mut bytes = vec![0u8; block_size as usize];
        store.read_data(&mut bytes, nr * block_size)?;
        let f = *writer.journal().features();
        Ok(JournalLog {
            async_commit: f.async_commit
                && (f.has_block_checksums() || writer.journal().has_v1_checksum()),
            writer: Mutex::new(writer),
            superblock_block: (nr, bytes),
            counters: Counters::default(),
            room: Mutex::new(Vec::new()),
        })
    }

    /// The buffer a commit gathers its sealed copies in (commits are serial).
    pub(crate) fn take_room(&self) -> Vec<u8> {
        std::mem::take(&mut *self.room.lock())
    }

    /// Keeps the commit's buffer for the next one.
    pub(crate) fn give_back_room(&self, room: Vec<u8>) {
        *self.room.lock() = room;
    }

    /// The most log blocks one transaction should take (half the log).
    pub(crate) fn max_transaction(&self) -> u64 {
        self.writer.lock().max_transaction()
    }

    /// The filesystem block holding the primary superblock, with `sb` (encoded) in place.
    pub(crate) fn superblock_block(&self, sb: &[u8; Superblock::SIZE]) -> (u64, Vec<u8>) {
        let (nr, mut bytes) = self.superblock_block.clone();
        let at = (SUPERBLOCK_OFFSET - nr * bytes.len() as u64) as usize;
        bytes[at..at + Superblock::SIZE].copy_from_slice(sb);
        (nr, bytes)
    }

    /// Logs one transaction, `blocks` (home block, contents as they go home), durably;
    /// `freed` are the runs the transaction freed. Returns false, having written nothing,
    /// when the transaction cannot fit the log even empty: the caller writes it home and
    /// flushes.
    pub(crate) fn commit(
        &self,
        store: &BlockStore,
        blocks: &[(u64, &[u8])],
        freed: &[Extent],
    ) -> Result<bool> {
        let mut writer = self.writer.lock();
        let revokes = revokes(&writer, blocks, freed);
        let needed = writer.blocks_needed(blocks.len(), revokes.len());
        self.counters
            .largest_transaction
            .fetch_max(needed, Ordering::Relaxed);
        if needed > writer.free() {
            self.checkpoint(store, &mut writer)?;
            if needed > writer.free() {
                self.counters.unjournaled.fetch_add(1, Ordering::Relaxed);
                return Ok(false);
            }
        }
        let encoded = writer.encode(blocks, &revokes, now())?;
        drop(writer);
        write_log(store, &encoded.writes, blocks)?;
        if !self.async_commit {
            store.flush("before the journal commit block")?;
        }
        let (at, commit) = &encoded.commit;
        store.write_home(
            at * u64::from(store.block_size()),
            commit,
            &format!("the commit block of journal transaction {}", encoded.tid),
        )?;
        store.flush("after the journal commit block")?;
        let c = &self.counters;
        c.commits.fetch_add(1, Ordering::Relaxed);
        c.log_blocks
            .fetch_add(encoded.log_blocks, Ordering::Relaxed);
        c.revokes.fetch_add(revokes.len() as u64, Ordering::Relaxed);
        Ok(true)
    }

    /// Makes every home write so far durable and moves the tail to the head: the whole log
    /// is free again.
    fn checkpoint(&self, store: &BlockStore, writer: &mut LogWriter) -> Result<()> {
        store.flush("before a journal checkpoint")?;
        let (at, block0) = writer.checkpoint();
        store.write_home(
            at * u64::from(store.block_size()),
            &block0,
            "the journal superblock",
        )?;
        store.flush("after a journal checkpoint")?;
        self.counters.checkpoints.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// The clean close, after the last commit's home writes: they are flushed, and the
    /// journal superblock says the log is empty (flushed), so the superblock may then drop
    /// `needs_recovery`.
    pub(crate) fn close(&self, store: &BlockStore) -> Result<()> {
        store.flush("before emptying the journal")?;
        let (at, block0) = self.writer.lock().close();
        store.write_home(
            at * u64::from(store.block_size()),
            &block0,
            "the journal superblock",
        )?;
        store.flush("after emptying the journal")
    }

    pub(crate) fn stats(&self) -> JournalStats {
        let c = &self.counters;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        JournalStats {
            commits: get(&c.commits),
            log_blocks: get(&c.log_blocks),
            revokes: get(&c.revokes),
            checkpoints: get(&c.checkpoints),
            unjournaled: get(&c.unjournaled),
            largest_transaction: get(&c.largest_transaction),
            room_waits: 0,
            room_overdrafts: 0,
        }
    }
}

/// The freed blocks whose old copies a replay must not write: those with a copy in the
/// live log or in this transaction (`blocks`). Whichever side is smaller is walked.
fn revokes(writer: &LogWriter, blocks: &[(u64, &[u8])], freed: &[Extent]) -> Vec<u64> {
    if freed.is_empty() {
        return Vec::new();
    }
    let mut now: Vec<u64> = blocks.iter().map(|(nr, _)| *nr).collect();
    now.sort_unstable();
    let freed_blocks: u64 = freed.iter().map(|e| u64::from(e.len)).sum();
    let mut revoked: Vec<u64> = if freed_blocks <= (now.len() + writer.logged_count()) as u64 {
        freed
            .iter()
            .flat_map(|e| e.start..e.start + u64::from(e.len))
            .filter(|nr| writer.is_logged(*nr) || now.binary_search(nr).is_ok())
            .collect()
    } else {
        // `freed` is sorted and its runs are disjoint.
        let in_freed = |nr: &u64| {
            let i = freed.partition_point(|e| e.start + u64::from(e.len) <= *nr);
            freed.get(i).is_some_and(|e| e.start <= *nr)
        };
        writer
            .logged_blocks()
            .chain(now.iter().copied())
            .filter(in_freed)
            .collect()
    };
    revoked.sort_unstable();
    revoked.dedup();
    revoked
}

/// Writes a transaction's log blocks, consecutive ones gathered into one device write.
fn write_log(store: &BlockStore, writes: &[LogWrite], blocks: &[(u64, &[u8])]) -> Result<()> {
    let block_size = u64::from(store.block_size());
    // Escaped copies are the only ones that differ from the block: made once, here.
    let escaped: Vec<Vec<u8>> = writes
        .iter()
        .filter_map(|w| match w {
            LogWrite::Copy {
                index,
                escaped: true,
                ..
            } => {
                let mut copy = blocks[*index].1.to_vec();
                copy[..4].fill(0);
                Some(copy)
            }
            _ => None,
        })
        .collect();
    let mut escaped = escaped.iter();
    let mut run: Vec<&[u8]> = Vec::new();
    let mut run_start = 0u64;
    let write_run = |run: &mut Vec<&[u8]>, start: u64| -> Result<()> {
        if run.is_empty() {
            return Ok(());
        }
        let last = start + run.len() as u64 - 1;
        store.write_home_gathered(
            start * block_size,
            run,
            &format!("journal blocks {start}-{last}"),
        )?;
        run.clear();
        Ok(())
    };
    for write in writes {
        let (at, bytes): (u64, &[u8]) = match write {
            LogWrite::Block { at, bytes } => (*at, bytes),
            LogWrite::Copy {
                at, escaped: true, ..
            } => (*at, escaped.next().map_or(&[][..], Vec::as_slice)),
            LogWrite::Copy { at, index, .. } => (*at, blocks[*index].1),
        };
        if run_start + run.len() as u64 != at || run.len() >= RUN_BLOCKS {
            write_run(&mut run, run_start)?;
            run_start = at;
        }
        run.push(bytes);
    }
    write_run(&mut run, run_start)
}

/// Seconds and nanoseconds since the epoch, for the commit block (the engine's clock, so a
/// stopped clock stops it too).
fn now() -> (u64, u32) {
    let t = crate::time::now();
    (t.seconds.max(0) as u64, t.nanoseconds)
}

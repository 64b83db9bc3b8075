//! Recovery: the log read back after a crash, as jbd2's `recovery.c` reads it (and e2fsck,
//! which builds the same file). Three passes from `s_start`, expecting `s_sequence`:
//!
//! - **scan** finds where the log ends: at a block without the magic, of another
//!   transaction than the one expected, or of an unknown type; at a commit whose checksum
//!   fails (unless the journal commits asynchronously, or the commit is older than the one
//!   before it: a stale block, the clean end of the log). Each good commit ends one
//!   transaction;
//! - **revoke** loads every revoke record of those transactions;
//! - **replay** lists, for each filesystem block, its last logged copy that is neither
//!   revoked nor damaged (a tag checksum that fails skips that copy and makes the recovery
//!   unclean, as in jbd2).
//!
//! Nothing is written here: [`Recovery::replay`] says which log block holds each home
//! block's new contents ([`Journal::replayed`] reads it back, unescaped), so a writer copies
//! them home and a read-only reader overlays them in memory. Memory is a map entry per
//! distinct home block, never the logged bytes.

use std::collections::BTreeMap;

use e4_format::checksum::crc32_be;
use e4_format::journal::{
    logged_block_checksum, CommitBlock, DescriptorBlock, JournalBlockType, JournalHeader,
    JournalTag, RevokeBlock, JOURNAL_MAGIC,
};
use e4_format::{Location, MetadataBlock};

use crate::revoke_table::RevokeTable;
use crate::{BlockReader, Journal, JournalError, Result};

/// Where a home block's replayed contents are in the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogCopy {
    /// The log block holding the copy.
    pub log_block: u32,
    /// The copy's first word was the journal magic, logged as zero.
    pub escaped: bool,
    /// The transaction that logged it.
    pub tid: u32,
}

/// What a recovery found in the log.
#[derive(Debug, Clone, Default)]
pub struct Recovery {
    /// The first transaction in the log (`s_sequence`).
    pub start_tid: u32,
    /// The first transaction not replayed: the log's end.
    pub end_tid: u32,
    /// Each filesystem block's replayed contents, by block number.
    pub replay: BTreeMap<u64, LogCopy>,
    /// Log blocks the committed transactions take (descriptors, copies, revokes, commits).
    pub log_blocks: u64,
    /// Revoke records read, and logged copies they suppressed.
    pub revoke_records: u64,
    pub revoke_hits: u64,
    /// A transaction whose commit checksum failed (not an asynchronous commit): the log
    /// ends before it, and the filesystem needs a full check (e2fsck's "Journal transaction
    /// N was corrupt, replay was aborted").
    pub failed_commit: Option<u32>,
    /// Logged copies not replayed because their tag checksum failed, or whose home is
    /// outside the filesystem: each makes the recovery unclean.
    pub damaged_copies: Vec<String>,
}

impl Recovery {
    /// Committed transactions found.
    pub fn transactions(&self) -> u32 {
        self.end_tid.wrapping_sub(self.start_tid)
    }

    /// Whether every committed transaction replays whole: otherwise the filesystem needs a
    /// full check after the replay, as e2fsck marks it.
    pub fn is_clean(&self) -> bool {
        self.failed_commit.is_none() && self.damaged_copies.is_empty()
    }

    /// The `s_sequence` a journal emptied after this recovery gets: past every tid the log
    /// may still hold, skipping one as jbd2 does (`++info.end_transaction`), so a stale
    /// block of the transaction that did not commit never matches.
    pub fn next_sequence(&self) -> u32 {
        self.end_tid.wrapping_add(1)
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Pass {
    Scan,
    Revoke,
    Replay,
}

/// The state one pass carries through the log.
struct Passes<'a> {
    journal: &'a Journal,
    reader: &'a dyn BlockReader,
    fs_blocks: u64,
    info: Recovery,
    /// The scan found the end (`info->end_transaction` set).
    end_known: bool,
    revokes: RevokeTable,
}

impl Journal {
    /// Reads the log back (nothing is written): where it ends, what to replay. `fs_blocks`
    /// is the filesystem's size in blocks, past which no copy is replayed. An empty journal
    /// (`s_start` 0) gives an empty recovery. A fast-commit area to replay is refused.
    pub fn recover(&self, reader: &dyn BlockReader, fs_blocks: u64) -> Result<Recovery> {
        let sb = self.superblock();
        let mut passes = Passes {
            journal: self,
            reader,
            fs_blocks,
            info: Recovery {
                start_tid: sb.sequence,
                end_tid: sb.sequence,
                ..Recovery::default()
            },
            end_known: false,
            revokes: RevokeTable::default(),
        };
        if !self.needs_recovery() {
            return Ok(passes.info);
        }
        if self.features().fast_commit {
            return Err(JournalError::Unsupported(
                "the journal holds fast commits to replay, which e4 does not replay; run e2fsck (or mount with the kernel) first".into(),
            ));
        }
        for pass in [Pass::Scan, Pass::Revoke, Pass::Replay] {
            passes.run(pass)?;
        }
        Ok(passes.info)
    }

    /// The contents log copy `copy` puts home: the logged block with the magic restored if
    /// it was escaped.
    pub fn replayed(&self, reader: &dyn BlockReader, copy: &LogCopy) -> Result<Vec<u8>> {
        let mut block = vec![0u8; self.block_size()];
        self.read(reader, copy.log_block, &mut block)?;
        if copy.escaped {
            block[..4].copy_from_slice(&JOURNAL_MAGIC.to_be_bytes());
        }
        Ok(block)
    }
}

impl Passes<'_> {
    /// One pass over the log (`do_one_pass`).
    fn run(&mut self, pass: Pass) -> Result<()> {
        let journal = self.journal;
        let f = *journal.features();
        let sb = journal.superblock();
        let (first, last) = journal.log_bounds();
        let mut tid = sb.sequence;
        let mut at = sb.start;
        let mut block = vec![0u8; journal.block_size()];
        let mut crc32_sum: u32 = !0;
        // A descriptor or revoke checksum that failed in the scan: the next commit's time
        // decides whether it is damage (an error) or a stale block (the end).
        let mut need_check_commit_time: Option<e4_format::FormatError> = None;
        let mut last_commit_time = 0u64;
        // No pass reads more blocks than the log holds: a damaged log whose descriptors of
        // one transaction skip round it would otherwise never end.
        let mut budget = u64::from(last - first);
        let read = |at: u32, into: &mut Vec<u8>, budget: &mut u64| -> Result<bool> {
            if *budget == 0 {
                return Ok(false);
            }
            *budget -= 1;
            journal.read(self.reader, at, into).map(|()| true)
        };
        if at < first || at >= last {
            return Err(e4_format::FormatError::corrupt(
                e4_format::Structure::JournalSuperblock,
                Location::JournalBlock(0),
                e4_format::Problem::FieldOutOfRange {
                    field: "s_start",
                    value: at.into(),
                },
            )
            .into());
        }
        loop {
            if pass != Pass::Scan && !crate::tid_gt(self.info.end_tid, tid) {
                break;
            }
            let here = at;
            if !read(here, &mut block, &mut budget)? {
                break;
            }
            at = journal.next(at);
            let Some(header) = JournalHeader::parse(&block) else {
                break;
            };
            if header.sequence != tid {
                break;
            }
            let loc = Location::JournalBlock(here.into());
            let Ok(kind) = header.block_type(loc) else {
                break;
            };
            match kind {
                JournalBlockType::Descriptor => {
                    if f.has_block_checksums() {
                        if let Err(e) = DescriptorBlock::verify(&block, journal.seed(), loc) {
                            if pass != Pass::Scan {
                                return Err(e.into());
                            }
                            need_check_commit_time = Some(e);
                        }
                    }
                    let tags = DescriptorBlock::decode(&block, &f, loc)?;
                    match pass {
                        Pass::Scan
                            if journal.has_v1_checksum()
                                && need_check_commit_time.is_none()
                                && !self.end_known =>
                        {
                            crc32_sum = crc32_be(crc32_sum, &block);
                            let mut data = vec![0u8; block.len()];
                            for _ in &tags {
                                if !read(at, &mut data, &mut budget)? {
                                    break;
                                }
                                crc32_sum = crc32_be(crc32_sum, &data);
                                at = journal.next(at);
                            }
                        }
                        Pass::Scan | Pass::Revoke => {
                            // Skipped copies count against the budget as the replay's
                            // reads do, so every pass stops at the same block.
                            for _ in &tags {
                                if budget == 0 {
                                    break;
                                }
                                budget -= 1;
                                at = journal.next(at);
                            }
                        }
                        Pass::Replay => {
                            at = self.replay_tags(&tags, at, tid, &mut budget)?;
                        }
                    }
                }
                JournalBlockType::Commit => {
                    if pass == Pass::Scan {
                        let commit = CommitBlock::decode_checked(&block, loc)?;
                        let mut checksum_failed = false;
                        if journal.has_v1_checksum() {
                            if self.end_known {
                                self.info.failed_commit = Some(self.info.end_tid);
                                break;
                            }
                            checksum_failed = !commit.v1_checksum_matches(crc32_sum);
                            crc32_sum = !0;
                        }
                        if !checksum_failed
                            && f.has_block_checksums()
                            && CommitBlock::verify(&block, journal.seed(), loc).is_err()
                        {
                            checksum_failed = true;
                        }
                        let commit_time = commit.commit_sec;
                        if checksum_failed {
                            if commit_time < last_commit_time {
                                // A stale commit of an older use of the log: the clean end.
                                break;
                            }
                            self.info.end_tid = tid;
                            self.end_known = true;
                            if !f.async_commit {
                                self.info.failed_commit = Some(tid);
                                break;
                            }
                        }
                        if let Some(damage) = need_check_commit_time.take() {
                            if commit_time >= last_commit_time {
                                return Err(damage.into());
                            }
                            // Likely a stale block of an older use of the log: end here.
                            break;
                        }
                        last_commit_time = commit_time;
                        if !self.end_known {
                            // The log blocks up to this commit, its own included.
                            self.info.log_blocks = u64::from(last - first) - budget;
                        }
                    }
                    tid = tid.wrapping_add(1);
                }
                JournalBlockType::Revoke => {
                    if pass == Pass::Scan && f.has_block_checksums() {
                        if let Err(e) = RevokeBlock::verify(&block, journal.seed(), loc) {
                            need_check_commit_time = Some(e);
                        }
                    }
                    if pass == Pass::Revoke {
                        for nr in RevokeBlock::decode(&block, &f, loc)? {
                            self.revokes.set(nr, tid);
                            self.info.revoke_records += 1;
                        }
                    }
                }
                JournalBlockType::SuperblockV1 | JournalBlockType::SuperblockV2 => break,
            }
        }
        if pass == Pass::Scan {
            if !self.end_known {
                self.info.end_tid = tid;
            }
        } else if self.info.end_tid != tid {
            return Err(JournalError::Unsupported(format!(
                "journal recovery pass ended at transaction {tid}, the scan at {} (a journal block changed or could not be read)",
                self.info.end_tid
            )));
        }
        Ok(())
    }

    /// Records the copies a descriptor lists (from log block `at`), unless revoked or
    /// damaged; returns the log block after them.
    fn replay_tags(
        &mut self,
        tags: &[JournalTag],
        mut at: u32,
        tid: u32,
        budget: &mut u64,
    ) -> Result<u32> {
        let journal = self.journal;
        let f = journal.features();
        let mut data = vec![0u8; journal.block_size()];
        for tag in tags {
            let log_block = at;
            at = journal.next(at);
            if *budget == 0 {
                break;
            }
            *budget -= 1;
            if self.revokes.revokes(tag.block, tid) {
                self.info.revoke_hits += 1;
                continue;
            }
            if f.has_block_checksums() {
                journal.read(self.reader, log_block, &mut data)?;
                let sum = logged_block_checksum(journal.seed(), tid, &data);
                let stored_ok = if f.csum_v3 {
                    sum == tag.checksum
                } else {
                    sum & 0xFFFF == tag.checksum & 0xFFFF
                };
                if !stored_ok {
                    self.info.damaged_copies.push(format!(
                        "journal block {log_block} (block {} in transaction {tid}) has a bad checksum",
                        tag.block
                    ));
                    continue;
                }
            }
            if tag.block >= self.fs_blocks {
                self.info.damaged_copies.push(format!(
                    "journal block {log_block} logs block {}, outside the filesystem",
                    tag.block
                ));
                continue;
            }
            self.info.replay.insert(
                tag.block,
                LogCopy {
                    log_block,
                    escaped: tag.escaped,
                    tid,
                },
            );
        }
        Ok(at)
    }
}

//! Writing the log. [`LogWriter`] keeps where the log's live part begins (the tail, as the
//! journal superblock records it) and where the next transaction goes (the head), and
//! encodes each transaction as jbd2 writes one: revoke blocks, then descriptor blocks each
//! followed by the copies it lists (a copy that starts with the journal magic is escaped),
//! then the commit block. It does no I/O: the caller writes what [`LogWriter::encode`]
//! returns in the order that makes it safe (every copy and descriptor durable before the
//! commit block; the commit block durable before any block goes home), and tells the
//! writer when home writes are durable ([`LogWriter::checkpoint`]), which is the only
//! thing that lets the tail move and log space be reused.

use std::collections::HashMap;

use e4_format::checksum::crc32_be;
use e4_format::journal::{
    logged_block_checksum, CommitBlock, DescriptorBlock, JournalSuperblock, JournalTag,
    RevokeBlock, JOURNAL_MAGIC,
};

use crate::{Journal, JournalError, Result};

/// `JBD2_FEATURE_INCOMPAT_*` bits the writer sets.
const INCOMPAT_REVOKE: u32 = 0x1;
const INCOMPAT_64BIT: u32 = 0x2;
const INCOMPAT_CSUM_V2: u32 = 0x8;
const INCOMPAT_CSUM_V3: u32 = 0x10;
const COMPAT_CHECKSUM: u32 = 0x1;

/// What the filesystem decides about its journal's format.
#[derive(Debug, Clone, Copy)]
pub struct FilesystemFeatures {
    /// 64-bit block numbers (ext4's `64bit`): tags carry a high half.
    pub bit64: bool,
    /// ext4's `metadata_csum`: the journal is written with checksums v3.
    pub metadata_csum: bool,
}

/// One write of an encoded transaction, before its commit block.
#[derive(Debug)]
pub enum LogWrite {
    /// A descriptor or revoke block, encoded here.
    Block { at: u64, bytes: Vec<u8> },
    /// The copy of the caller's block number `index`, its first four bytes zeroed when
    /// `escaped` (they were the journal magic).
    Copy {
        at: u64,
        index: usize,
        escaped: bool,
    },
}

/// A transaction as it goes into the log.
#[derive(Debug)]
pub struct EncodedTransaction {
    pub tid: u32,
    /// Every write before the commit block, in log order.
    pub writes: Vec<LogWrite>,
    /// The commit block: its filesystem block and bytes.
    pub commit: (u64, Vec<u8>),
    /// Log blocks the transaction takes, commit block included.
    pub log_blocks: u64,
}

/// The log's writer: one per open filesystem, used by one commit at a time.
pub struct LogWriter {
    journal: Journal,
    superblock: JournalSuperblock,
    /// The next log block to write.
    head: u32,
    /// The oldest log block still needed after a crash (`s_start` on disk).
    tail: u32,
    next_tid: u32,
    /// Home blocks with a copy in the live log (after the tail), each with the last tid
    /// that logged it: freeing one needs a revoke record, or a crash would replay the old
    /// copy over whatever the block holds next.
    logged: HashMap<u64, u32>,
}

impl LogWriter {
    /// Starts writing into `journal`, which must be empty (recovered first). Sets the
    /// journal's features as ext4 does at mount (`set_journal_csum_feature_set`): revoke
    /// records, 64-bit tags for a 64bit filesystem, checksums v3 under `metadata_csum`
    /// (v2 and v1 cleared), else checksum v1 only if the journal already asked for it.
    /// Returns the writer and the journal superblock block to write, and make durable,
    /// before the first commit: its `s_start` points at the log's first block and its
    /// `s_sequence` at the first transaction, a tid past every one the log held.
    pub fn start(journal: &Journal, fs: FilesystemFeatures) -> Result<(LogWriter, (u64, Vec<u8>))> {
        if journal.needs_recovery() {
            return Err(JournalError::Unsupported(
                "the journal needs recovery before it is written".into(),
            ));
        }
        let mut superblock = journal.superblock().clone();
        if !superblock.is_v2() {
            return Err(JournalError::Unsupported(
                "a version 1 journal superblock (no revoke records); upgrade it with tune2fs -O ^has_journal,has_journal".into(),
            ));
        }
        superblock.feature_incompat |= INCOMPAT_REVOKE;
        if fs.bit64 {
            superblock.feature_incompat |= INCOMPAT_64BIT;
        }
        if fs.metadata_csum {
            superblock.feature_incompat =
                (superblock.feature_incompat & !INCOMPAT_CSUM_V2) | INCOMPAT_CSUM_V3;
            superblock.feature_compat &= !COMPAT_CHECKSUM;
            superblock.checksum_type = 4;
        } else {
            superblock.feature_incompat &= !(INCOMPAT_CSUM_V2 | INCOMPAT_CSUM_V3);
        }
        let (first, _) = journal.log_bounds();
        let next_tid = superblock.sequence.wrapping_add(1);
        superblock.start = first;
        superblock.sequence = next_tid;
        let journal = journal.with_superblock(superblock.clone());
        let block0 = (
            journal.superblock_block(),
            journal.encode_superblock(&superblock),
        );
        Ok((
            LogWriter {
                journal,
                superblock,
                head: first,
                tail: first,
                next_tid,
                logged: HashMap::new(),
            },
            block0,
        ))
    }

    pub fn journal(&self) -> &Journal {
        &self.journal
    }

    /// Blocks in the log proper.
    fn log_len(&self) -> u64 {
        let (first, last) = self.journal.log_bounds();
        u64::from(last - first)
    }

    /// The most log blocks one transaction may take: half the log. jbd2 bounds a
    /// transaction (`j_max_transaction_buffers`) by a quarter of its log, by a third since
    /// Linux 6.11 ("jbd2: Increase maximum transaction size": descriptor and revoke
    /// blocks are now counted, and half "should work fine in principle"), because it
    /// writes a transaction home only when it needs the space back. e4 writes each
    /// transaction home as soon as it is logged, so a checkpoint is a flush and the other
    /// half always takes the next transaction; every commit logs again the blocks the
    /// last one logged (a directory's leaves, the bitmaps), so fewer, larger transactions
    /// log less: a quarter made the journal cost e4 35-42 % of a two-thread create and
    /// unlink run, half 16-22 %.
    pub fn max_transaction(&self) -> u64 {
        self.log_len() / 2
    }

    /// Log blocks free for transactions: all but the live part, less one block so a full
    /// log is never mistaken for an empty one.
    pub fn free(&self) -> u64 {
        let used = (u64::from(self.head) + self.log_len() - u64::from(self.tail)) % self.log_len();
        self.log_len() - used - 1
    }

    /// The log blocks a transaction of `blocks` copies and `revokes` records takes.
    pub fn blocks_needed(&self, blocks: usize, revokes: usize) -> u64 {
        let f = self.journal.features();
        let size = self.journal.block_size();
        let descriptors = blocks.div_ceil(DescriptorBlock::capacity(f, size));
        let revoke_blocks = revokes.div_ceil(RevokeBlock::capacity(f, size));
        (revoke_blocks + descriptors + blocks + 1) as u64
    }

    /// Whether home block `block` has a copy in the live log, so freeing it needs a
    /// revoke record.
    pub fn is_logged(&self, block: u64) -> bool {
        self.logged.contains_key(&block)
    }

    /// How many home blocks have a copy in the live log.
    pub fn logged_count(&self) -> usize {
        self.logged.len()
    }

    /// Home blocks with a copy in the live log.
    pub fn logged_blocks(&self) -> impl Iterator<Item = u64> + '_ {
        self.logged.keys().copied()
    }

    /// The tid the next transaction gets.
    pub fn next_tid(&self) -> u32 {
        self.next_tid
    }

    /// Encodes the next transaction: `revokes` (home blocks freed whose old copies must not
    /// be replayed), then a copy of each of `blocks` (home block, contents), committed at
    /// `time` (seconds, nanoseconds). The caller made room first: it needs
    /// [`Self::blocks_needed`] blocks of [`Self::free`].
    pub fn encode(
        &mut self,
        blocks: &[(u64, &[u8])],
        revokes: &[u64],
        time: (u64, u32),
    ) -> Result<EncodedTransaction> {
        let needed = self.blocks_needed(blocks.len(), revokes.len());
        if needed > self.free() {
            return Err(JournalError::Unsupported(format!(
                "a transaction of {needed} log blocks does not fit the {} free",
                self.free()
            )));
        }
        let f = *self.journal.features();
        let size = self.journal.block_size();
        let seed = self.journal.seed();
        let tid = self.next_tid;
        let mut writes = Vec::with_capacity(needed as usize);
        let mut at = self.head;
        // The filesystem block of the next log block, and the log moved past it.
        let mut take = || -> Result<u64> {
            let physical = self.journal.physical(at)?;
            at = self.journal.next(at);
            Ok(physical)
        };
        for chunk in revokes.chunks(RevokeBlock::capacity(&f, size).max(1)) {
            let bytes = RevokeBlock::encode(chunk, &f, size, tid, seed);
            writes.push(LogWrite::Block { at: take()?, bytes });
        }
        let v1 = self.journal.has_v1_checksum();
        let mut crc32_sum = !0u32;
        let uuid = self.superblock.uuid;
        let per_descriptor = DescriptorBlock::capacity(&f, size).max(1);
        for (c, chunk) in blocks.chunks(per_descriptor).enumerate() {
            let tags: Vec<JournalTag> = chunk
                .iter()
                .map(|(home, bytes)| {
                    let escaped = bytes[..4] == JOURNAL_MAGIC.to_be_bytes();
                    let checksum = if f.has_block_checksums() {
                        logged_copy_checksum(seed, tid, bytes, escaped)
                    } else {
                        0
                    };
                    JournalTag {
                        block: *home,
                        escaped,
                        checksum,
                    }
                })
                .collect();
            let descriptor = DescriptorBlock::encode(&tags, &f, size, tid, &uuid, seed);
            if v1 {
                crc32_sum = crc32_be(crc32_sum, &descriptor);
            }
            writes.push(LogWrite::Block {
                at: take()?,
                bytes: descriptor,
            });
            for (i, ((home, bytes), tag)) in chunk.iter().zip(&tags).enumerate() {
                if v1 {
                    crc32_sum = if tag.escaped {
                        crc32_be(crc32_be(crc32_sum, &[0; 4]), &bytes[4..])
                    } else {
                        crc32_be(crc32_sum, bytes)
                    };
                }
                writes.push(LogWrite::Copy {
                    at: take()?,
                    index: c * per_descriptor + i,
                    escaped: tag.escaped,
                });
                self.logged.insert(*home, tid);
            }
        }
        let commit_bytes =
            CommitBlock::encode_block(tid, &f, size, time, v1.then_some(crc32_sum), seed);
        let commit = (take()?, commit_bytes);
        self.head = at;
        self.next_tid = tid.wrapping_add(1);
        Ok(EncodedTransaction {
            tid,
            writes,
            commit,
            log_blocks: needed,
        })
    }

    /// Every home write of every committed transaction is durable (the caller flushed the
    /// device after them): the log's live part is empty. Returns the journal superblock
    /// block to write, with `s_start` at the head and `s_sequence` the next tid; the log
    /// space is reused only after the caller has made that durable.
    pub fn checkpoint(&mut self) -> (u64, Vec<u8>) {
        self.tail = self.head;
        self.logged.clear();
        self.superblock.start = self.head;
        self.superblock.sequence = self.next_tid;
        self.encoded_superblock()
    }

    /// A clean close, after a checkpoint: the superblock block saying the journal is empty
    /// (`s_start` 0) and which tid comes next, so none is ever reused.
    pub fn close(&mut self) -> (u64, Vec<u8>) {
        self.checkpoint();
        self.superblock.start = 0;
        self.encoded_superblock()
    }

    fn encoded_superblock(&self) -> (u64, Vec<u8>) {
        (
            self.journal.superblock_block(),
            self.journal.encode_superblock(&self.superblock),
        )
    }
}

/// A tag's checksum: over the copy as logged (escaped: its first word zero).
fn logged_copy_checksum(seed: u32, tid: u32, bytes: &[u8], escaped: bool) -> u32 {
    if escaped {
        let mut copy = bytes.to_vec();
        copy[..4].fill(0);
        logged_block_checksum(seed, tid, &copy)
    } else {
        logged_block_checksum(seed, tid, bytes)
    }
}

//! The internal journal: where its blocks are ([`JournalLayout`]) and what its superblock
//! says ([`Journal`]), checked as jbd2's `journal_load` and e2fsck's `e2fsck_journal_load`
//! check it before they trust the log.

use e4_format::journal::{JournalFeatures, JournalSuperblock};
use e4_format::{FormatError, Location, MetadataBlock, Problem, Structure};

use crate::{BlockReader, JournalError, Result};

/// The smallest journal jbd2 accepts, in blocks (`JBD2_MIN_JOURNAL_BLOCKS`).
const MIN_JOURNAL_BLOCKS: u32 = 1024;
/// Fast-commit blocks when `s_num_fc_blks` is 0 (`JBD2_DEFAULT_FAST_COMMIT_BLOCKS`).
const DEFAULT_FAST_COMMIT_BLOCKS: u32 = 256;
/// `JBD2_FEATURE_COMPAT_CHECKSUM`: checksum v1, a crc32 of each transaction in its commit.
const COMPAT_CHECKSUM: u32 = 0x1;

/// `len` blocks of the journal file from its block `logical`, at filesystem block `physical`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PhysicalRun {
    pub logical: u64,
    pub physical: u64,
    pub len: u64,
}

/// Where the journal's blocks are: its inode's mapping, with no hole from block 0 on.
#[derive(Debug, Clone)]
pub struct JournalLayout {
    runs: Vec<PhysicalRun>,
    blocks: u64,
}

impl JournalLayout {
    /// The layout of a journal file mapped by `runs`. A hole before the end of the mapped
    /// blocks is damage (a journal is allocated whole by mke2fs and tune2fs).
    pub fn new(mut runs: Vec<PhysicalRun>) -> Result<Self> {
        runs.retain(|r| r.len > 0);
        runs.sort_unstable_by_key(|r| r.logical);
        let mut next = 0;
        for run in &runs {
            if run.logical != next {
                return Err(FormatError::corrupt(
                    Structure::JournalSuperblock,
                    Location::JournalBlock(next),
                    Problem::JournalHole,
                )
                .into());
            }
            next = run.logical + run.len;
        }
        Ok(JournalLayout { runs, blocks: next })
    }

    /// Blocks the journal file maps.
    pub fn blocks(&self) -> u64 {
        self.blocks
    }

    /// The filesystem block of journal block `logical`.
    pub fn physical(&self, logical: u64) -> Option<u64> {
        let i = self.runs.partition_point(|r| r.logical + r.len <= logical);
        let run = self.runs.get(i)?;
        (logical >= run.logical).then(|| run.physical + (logical - run.logical))
    }

    /// The runs, in journal order.
    pub fn runs(&self) -> &[PhysicalRun] {
        &self.runs
    }
}

/// An internal journal whose superblock has been read and checked.
#[derive(Debug, Clone)]
pub struct Journal {
    superblock: JournalSuperblock,
    /// Journal block 0 as read: the superblock in its first 1024 bytes, the rest kept as it
    /// is when the superblock is written back.
    block0: Vec<u8>,
    layout: JournalLayout,
    features: JournalFeatures,
    v1_checksum: bool,
    /// The log proper: journal blocks `first..last` (fast-commit blocks excluded).
    first: u32,
    last: u32,
    seed: u32,
}

impl Journal {
    /// Reads and checks the superblock of the journal laid out as `layout`, on a filesystem
    /// of `block_size` bytes per block: the magic and type, the checksum (v2/v3), the block
    /// size, the log's bounds against the blocks the inode maps, one user, and no feature
    /// jbd2 does not know (those are refused, one line each).
    pub fn load(reader: &dyn BlockReader, layout: JournalLayout, block_size: u32) -> Result<Self> {
        let mut block0 = vec![0u8; block_size as usize];
        let at = layout.physical(0).ok_or_else(|| {
            FormatError::corrupt(
                Structure::JournalSuperblock,
                Location::JournalBlock(0),
                Problem::JournalHole,
            )
        })?;
        reader
            .read_block(at, &mut block0)
            .map_err(|source| JournalError::Io {
                what: format!("cannot read the journal superblock (block {at})"),
                source,
            })?;
        let superblock = JournalSuperblock::decode_checked(&block0)?;
        JournalSuperblock::verify(&block0, (), Location::JournalBlock(0))?;
        let bad = |field: &'static str, value: u64| -> JournalError {
            FormatError::corrupt(
                Structure::JournalSuperblock,
                Location::JournalBlock(0),
                Problem::FieldOutOfRange { field, value },
            )
            .into()
        };
        if superblock.blocksize != block_size {
            return Err(bad("s_blocksize", superblock.blocksize.into()));
        }
        if u64::from(superblock.maxlen) > layout.blocks() {
            return Err(bad("s_maxlen", superblock.maxlen.into()));
        }
        if superblock.maxlen < MIN_JOURNAL_BLOCKS {
            return Err(bad("s_maxlen", superblock.maxlen.into()));
        }
        if superblock.is_v2() && superblock.nr_users > 1 {
            return Err(JournalError::Unsupported(format!(
                "the journal is shared by {} filesystems (an external journal device); e4 writes only internal journals",
                superblock.nr_users
            )));
        }
        let journal = Journal::from_parts(superblock, block0, layout);
        if journal.first >= journal.last || journal.last - journal.first < 2 {
            return Err(bad("s_first", journal.first.into()));
        }
        Ok(journal)
    }

    /// A journal with `superblock` (in `block0`) over `layout`, and what follows from the
    /// superblock: the features its blocks are written with (none in a v1 superblock), the
    /// checksum seed, and the log's bounds (the fast-commit area is not the log's).
    fn from_parts(superblock: JournalSuperblock, block0: Vec<u8>, layout: JournalLayout) -> Self {
        let v2 = superblock.is_v2();
        let features = if v2 {
            superblock.features()
        } else {
            JournalFeatures::default()
        };
        let last = if features.fast_commit {
            let fc = match superblock.num_fc_blks {
                0 => DEFAULT_FAST_COMMIT_BLOCKS,
                n => n,
            };
            superblock.maxlen.saturating_sub(fc)
        } else {
            superblock.maxlen
        };
        Journal {
            v1_checksum: v2 && superblock.feature_compat & COMPAT_CHECKSUM != 0,
            seed: superblock.csum_seed(),
            first: superblock.first,
            last,
            superblock,
            block0,
            layout,
            features,
        }
    }

    pub fn superblock(&self) -> &JournalSuperblock {
        &self.superblock
    }

    /// The features the log's blocks are written with (all off in a v1 superblock).
    pub fn features(&self) -> &JournalFeatures {
        &self.features
    }

    /// Whether transactions carry checksum v1 (a crc32 in the commit block).
    pub fn has_v1_checksum(&self) -> bool {
        self.v1_checksum
    }

    /// The seed of checksums v2/v3.
    pub fn seed(&self) -> u32 {
        self.seed
    }

    pub fn block_size(&self) -> usize {
        self.block0.len()
    }

    /// The log proper, journal blocks `first..last`.
    pub fn log_bounds(&self) -> (u32, u32) {
        (self.first, self.last)
    }

    pub fn layout(&self) -> &JournalLayout {
        &self.layout
    }

    /// Whether the log holds transactions to replay (`s_start` is not 0).
    pub fn needs_recovery(&self) -> bool {
        self.superblock.needs_recovery()
    }

    /// The log block after `block`, wrapping from the end of the log to its first block
    /// (jbd2's `wrap`).
    pub fn next(&self, block: u32) -> u32 {
        if block + 1 >= self.last {
            self.first
        } else {
            block + 1
        }
    }

    /// The filesystem block of log block `block`.
    pub fn physical(&self, block: u32) -> Result<u64> {
        self.layout.physical(block.into()).ok_or_else(|| {
            FormatError::corrupt(
                Structure::JournalSuperblock,
                Location::JournalBlock(block.into()),
                Problem::JournalHole,
            )
            .into()
        })
    }

    /// Reads log block `block` into `buf`.
    pub fn read(&self, reader: &dyn BlockReader, block: u32, buf: &mut [u8]) -> Result<()> {
        let at = self.physical(block)?;
        reader
            .read_block(at, buf)
            .map_err(|source| JournalError::Io {
                what: format!("cannot read journal block {block} (block {at})"),
                source,
            })
    }

    /// Journal block 0 with `superblock` in place of the one read, sealed: what to write to
    /// change the journal's superblock.
    pub fn encode_superblock(&self, superblock: &JournalSuperblock) -> Vec<u8> {
        let mut block = self.block0.clone();
        let mut raw = [0u8; JournalSuperblock::SIZE];
        superblock.encode(&mut raw);
        block[..JournalSuperblock::SIZE].copy_from_slice(&raw);
        JournalSuperblock::seal(&mut block, ());
        block
    }

    /// Where journal block 0 lives, for writing its superblock.
    pub fn superblock_block(&self) -> u64 {
        // OK to unwrap: `load` read block 0 through the layout.
        self.layout.physical(0).unwrap()
    }

    /// This journal once `recovery` has been replayed (or the log dropped): empty
    /// (`s_start` 0), its next transaction past every tid the log may still hold, and
    /// `s_errno` set when a commit was corrupt, as e2fsck leaves it. An error the journal
    /// had recorded before (`s_errno` of an aborted journal: a kernel shutdown, an I/O
    /// error) is cleared: the caller records it in the filesystem's superblock instead
    /// (ERROR_FS), as e2fsck's journal check and the kernel's mount
    /// (`ext4_clear_journal_err`) do.
    pub fn emptied(&self, recovery: &crate::Recovery) -> Journal {
        let mut superblock = self.superblock.clone();
        superblock.start = 0;
        superblock.sequence = recovery.next_sequence();
        superblock.errno = match recovery.failed_commit {
            // -EINVAL, as e2fsck records a corrupt transaction.
            Some(_) => (-22i32) as u32,
            None => 0,
        };
        self.with_superblock(superblock)
    }

    /// The error an aborted journal recorded (`s_errno`, a negative errno), if any: the
    /// filesystem needs a full check.
    pub fn recorded_error(&self) -> Option<i32> {
        // OK to cast: s_errno holds a negative errno.
        (self.superblock.errno != 0).then_some(self.superblock.errno as i32)
    }

    /// This journal after its superblock was rewritten as `superblock` (by the writer).
    pub(crate) fn with_superblock(&self, superblock: JournalSuperblock) -> Journal {
        let block0 = self.encode_superblock(&superblock);
        Journal::from_parts(superblock, block0, self.layout.clone())
    }
}

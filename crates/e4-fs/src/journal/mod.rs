//! The filesystem's jbd2 journal (the mechanism is e4-journal's): found through the journal
//! inode at open ([`locate`]), recovered before anything else is read ([`recovery`]), and
//! written by every commit ([`log`]).
//!
//! With a journal, a commit's metadata goes to the log first and home only once its commit
//! block is durable, so a crash at any write leaves an image that recovery (e4's, the
//! kernel's or e2fsck's) brings to the last committed transaction. docs/WRITE-PATH.md,
//! "The journal", has the order and why it is safe.

pub(crate) mod device_blocks;
pub(crate) mod log;
pub(crate) mod recovery;
pub(crate) mod replayed_device;

use e4_format::features::CompatFeatures;
use e4_format::inode::Inode;
use e4_format::inode::I_BLOCK_SIZE;
use e4_format::superblock::Superblock;
use e4_format::{FormatError, Location, Problem, Structure};
use e4_journal::{Journal, JournalError, JournalLayout, PhysicalRun, Recovery};

use crate::buffer::read_io::ReadIo;
use crate::buffer::store::BlockStore;
use crate::error::{Error, Result};
use crate::journal::device_blocks::DeviceBlocks;
use crate::map::file_mapping::FileMapping;

impl From<JournalError> for Error {
    fn from(e: JournalError) -> Self {
        match e {
            JournalError::Format(e) => Error::Format(e),
            JournalError::Io { what, source } => Error::io(what, source),
            JournalError::Unsupported(why) => Error::NotSupported(why),
        }
    }
}

/// The journal as an open found it on disk, before any recovery
/// ([`crate::Filesystem::journal_on_disk`]).
#[derive(Debug, Clone)]
pub struct JournalOnDisk {
    /// The journal, with its superblock as read (`s_start` still set if the log held
    /// transactions).
    pub journal: Journal,
    /// What its log holds: the transactions a recovery replays (none when `s_start` is 0).
    pub recovery: Recovery,
    /// Whether the filesystem asked for that recovery (`needs_recovery` in its superblock);
    /// a log it does not ask for is dropped, not replayed.
    pub recovery_wanted: bool,
}

/// Whether the superblock names an internal journal (`has_journal`, an inode, no device).
pub(crate) fn has_internal_journal(sb: &Superblock) -> bool {
    sb.compat().contains(CompatFeatures::HAS_JOURNAL) && sb.journal_inum != 0 && sb.journal_dev == 0
}

/// Whether the superblock names a journal at all, and if so whether e4 can use it: an
/// external journal is refused with one line (e4 handles only internal journals; reading
/// around one is the caller's choice).
pub(crate) fn journal_inode(sb: &Superblock) -> Result<Option<u32>> {
    if !sb.compat().contains(CompatFeatures::HAS_JOURNAL) {
        return Ok(None);
    }
    if !has_internal_journal(sb) {
        return Err(Error::NotSupported(
            "an external journal (on another device); e4 handles only internal journals".into(),
        ));
    }
    Ok(Some(sb.journal_inum))
}

/// The journal held by `inode` (the journal inode, read by the caller): its blocks mapped
/// and its superblock checked.
pub(crate) fn locate(store: &BlockStore, sb: &Superblock, inode: &Inode) -> Result<Journal> {
    let ino = inode.ino;
    let block_size = u64::from(store.block_size());
    // The log is at most 2^32 blocks, whatever the inode claims.
    let blocks = (inode.size() / block_size).min(u64::from(u32::MAX));
    let mut root = [0u8; I_BLOCK_SIZE];
    let io = ReadIo::new(store);
    let mapping = FileMapping::reading(inode, &mut root, &io);
    let mut runs = Vec::new();
    let mut logical = 0;
    while logical < blocks {
        // A hole ends the layout; the superblock's s_maxlen is checked against it.
        let Some(run) = mapping.lookup(logical)? else {
            break;
        };
        let len = run.len.min(blocks - logical);
        let first = u64::from(sb.first_data_block);
        if run.physical < first || run.physical.saturating_add(len) > sb.blocks_count() {
            return Err(FormatError::corrupt(
                Structure::BlockMapping,
                Location::Inode(ino),
                Problem::RunOutsideFilesystem {
                    start: run.physical,
                    len,
                },
            )
            .into());
        }
        runs.push(PhysicalRun {
            logical,
            physical: run.physical,
            len,
        });
        logical += len;
    }
    let layout = JournalLayout::new(runs)?;
    let device = store.device();
    let reader = DeviceBlocks {
        device: device.as_ref(),
        block_size,
    };
    Ok(Journal::load(&reader, layout, store.block_size())?)
}

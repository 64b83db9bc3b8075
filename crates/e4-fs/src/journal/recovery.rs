//! Recovery at open, in place: every block the log replays written home, flushed, then the
//! journal's superblock emptied and flushed, as jbd2 and e2fsck do it. A crash during it
//! leaves the log as it was (only the last write empties it), so the next open recovers
//! again to the same image. A recovery that found damage (a corrupt commit, a copy whose
//! checksum fails), or a journal that had recorded an error (`s_errno`), still replays what
//! it can, and marks the filesystem as having errors, for e2fsck.

use e4_format::superblock::{Superblock, STATE_ERROR, STATE_VALID, SUPERBLOCK_OFFSET};
use e4_format::MetadataBlock;
use e4_journal::{Journal, Recovery};

use crate::error::{Error, Result};
use crate::io::device::Device;
use crate::journal::device_blocks::DeviceBlocks;

/// Replays `recovery` onto `device` and empties the journal. Returns a line describing
/// the damage found, if any.
pub(crate) fn replay_in_place(
    device: &dyn Device,
    journal: &Journal,
    recovery: &Recovery,
) -> Result<Option<String>> {
    let block_size = journal.block_size() as u64;
    let reader = DeviceBlocks { device, block_size };
    for (&home, copy) in &recovery.replay {
        let bytes = journal.replayed(&reader, copy)?;
        device
            .write_all_at(&bytes, home * block_size)
            .map_err(|e| Error::io(format!("replay of block {home} from the journal"), e))?;
    }
    device
        .flush()
        .map_err(|e| Error::io("flush after replaying the journal", e))?;
    let damage = damage_line(journal, recovery);
    if damage.is_some() {
        mark_errors(device)?;
    }
    empty_journal(device, journal, recovery)?;
    Ok(damage)
}

/// What a recovery that was not clean found, or the error the journal had recorded, in
/// one line.
pub(crate) fn damage_line(journal: &Journal, recovery: &Recovery) -> Option<String> {
    if let Some(errno) = journal.recorded_error() {
        return Some(format!(
            "the journal had recorded error {errno} (it was aborted: a shutdown or an I/O error)"
        ));
    }
    if let Some(tid) = recovery.failed_commit {
        return Some(format!(
            "journal transaction {tid} was corrupt, replay stopped before it"
        ));
    }
    recovery.damaged_copies.first().map(|first| {
        format!(
            "{} logged blocks were not replayed ({first})",
            recovery.damaged_copies.len()
        )
    })
}

/// Marks the primary superblock "errors detected, not clean", as e2fsck does after a
/// recovery that hit damage, so the next check is a full one.
fn mark_errors(device: &dyn Device) -> Result<()> {
    let mut raw = [0u8; Superblock::SIZE];
    device
        .read_exact_at(&mut raw, SUPERBLOCK_OFFSET)
        .map_err(|e| Error::io("read of the superblock after the replay", e))?;
    let mut sb = Superblock::decode(&raw);
    sb.state = (sb.state & !STATE_VALID) | STATE_ERROR;
    sb.encode(&mut raw);
    Superblock::seal(&mut raw, ());
    device
        .write_all_at(&raw, SUPERBLOCK_OFFSET)
        .map_err(|e| Error::io("write of the superblock after the replay", e))
}

/// Empties a journal whose log is not to be replayed (the superblock does not ask for
/// recovery: the kernel's mount drops such a log), with its next transaction past every
/// tid the log holds, so no stale block is ever taken for a new one.
pub(crate) fn empty_journal(
    device: &dyn Device,
    journal: &Journal,
    recovery: &Recovery,
) -> Result<()> {
    let emptied = journal.emptied(recovery);
    device
        .write_all_at(
            &emptied.encode_superblock(emptied.superblock()),
            journal.superblock_block() * journal.block_size() as u64,
        )
        .map_err(|e| Error::io("write of the emptied journal superblock", e))?;
    device
        .flush()
        .map_err(|e| Error::io("flush after emptying the journal", e))
}

/// A journal whose log is empty but which recorded an error (`s_errno`: the kernel aborted
/// it, after an I/O error or a shutdown): the error moves to the filesystem's superblock
/// (errors detected, not clean) and the journal's is cleared, as the kernel's mount
/// (`ext4_clear_journal_err`) and e2fsck do. Returns the line saying so.
pub(crate) fn record_journal_error(device: &dyn Device, journal: &Journal) -> Result<String> {
    let block_size = journal.block_size() as u64;
    let reader = DeviceBlocks { device, block_size };
    // Of an empty log: where its next tid starts, so none is reused.
    let recovery = journal.recover(&reader, u64::MAX)?;
    let line = damage_line(journal, &recovery).unwrap_or_default();
    mark_errors(device)?;
    empty_journal(device, journal, &recovery)?;
    Ok(line)
}

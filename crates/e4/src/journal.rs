//! `e4 journal`: the journal's state, as a `debugfs logdump` summary would give it, read
//! without changing the image; with `--recover`, its replay in place, as
//! `e2fsck -E journal_only` does it.

use e4_format::journal::JournalSuperblock;
use e4_fs::{Filesystem, JournalOnDisk, OpenOptions};
use e4_journal::Journal;

use crate::outln;
use crate::output::{CliError, Output};

/// Prints the journal of `image` as it is on disk and what a recovery would replay.
pub fn show(image: &str) -> Result<(), CliError> {
    let fs = open_read_only(image)?;
    let mut out = Output::new();
    let Some(found) = on_disk(&fs, image)? else {
        outln!(out, "{:<26}none", "Journal:")?;
        return out.finish();
    };
    for (label, value) in rows(fs.superblock().journal_inum, found) {
        outln!(out, "{:<26}{value}", format!("{label}:"))?;
    }
    out.finish()
}

/// Replays the journal of `image` in place (open for writing, which recovers, then
/// unmount). An image whose journal is empty and that does not ask for recovery is left
/// as it is. Fails, with one line, when the journal cannot be used or when the replay hit
/// damage (the image then needs e2fsck, as after `e2fsck -E journal_only`).
pub fn recover(image: &str) -> Result<(), CliError> {
    let fs = open_read_only(image)?;
    let Some(found) = on_disk(&fs, image)? else {
        println!("{image}: no journal; nothing to recover");
        return Ok(());
    };
    if !found.journal.needs_recovery() && !found.recovery_wanted {
        println!("{image}: the journal is empty; nothing to recover");
        return Ok(());
    }
    drop(fs);
    let options = OpenOptions {
        caller: e4_fs::Caller::of_this_process(),
        ..OpenOptions::writable()
    };
    let fs =
        Filesystem::open(image, options).map_err(|e| CliError::Message(format!("{image}: {e}")))?;
    let note = fs
        .journal_note()
        .unwrap_or("the journal was empty; the filesystem no longer needs recovery")
        .to_string();
    fs.unmount()
        .map_err(|e| CliError::Message(format!("{image}: writing the image back failed: {e}")))?;
    println!("{image}: {note}");
    Ok(())
}

fn open_read_only(image: &str) -> Result<Filesystem, CliError> {
    Filesystem::open(image, OpenOptions::default())
        .map_err(|e| CliError::Message(format!("{image}: {e}")))
}

/// The journal as found on disk; a journal that cannot be used is this command's failure.
fn on_disk<'a>(fs: &'a Filesystem, image: &str) -> Result<Option<&'a JournalOnDisk>, CliError> {
    fs.journal_on_disk()
        .map_err(|e| CliError::Message(format!("{image}: the journal cannot be used: {e}")))
}

/// The summary's rows: the format, the superblock's place in the log, and (when the log is
/// not empty) what a recovery finds in it.
fn rows(inode: u32, found: &JournalOnDisk) -> Vec<(&'static str, String)> {
    let journal = &found.journal;
    let sb = journal.superblock();
    let (first, last) = journal.log_bounds();
    let mut rows = vec![
        ("Journal inode", inode.to_string()),
        ("Journal superblock", format!("v{}", version(sb))),
        ("Journal features", features(journal)),
        ("Journal block size", sb.blocksize.to_string()),
        (
            "Journal size",
            format!(
                "{} blocks (s_maxlen); log blocks {first}..{last} (s_first {})",
                sb.maxlen, sb.first
            ),
        ),
        ("Journal sequence", format!("{} (s_sequence)", sb.sequence)),
        (
            "Journal start",
            match sb.start {
                0 => "0 (s_start: the log is empty)".to_string(),
                start => format!("{start} (s_start)"),
            },
        ),
    ];
    if sb.errno != 0 {
        // OK to cast: s_errno holds a negative errno.
        rows.push(("Journal errno", (sb.errno as i32).to_string()));
    }
    rows.push(("Recovery needed", recovery_state(found).to_string()));
    if !journal.needs_recovery() {
        return rows;
    }
    let r = &found.recovery;
    rows.extend([
        (
            "Transactions",
            match r.transactions() {
                0 => format!("none committed (the log ends at transaction {})", r.end_tid),
                n => format!(
                    "{n} committed, {}..{} (ending before {})",
                    r.start_tid,
                    r.end_tid.wrapping_sub(1),
                    r.end_tid
                ),
            },
        ),
        ("Log blocks", r.log_blocks.to_string()),
        ("Blocks to replay", r.replay.len().to_string()),
        (
            "Revoke records",
            format!(
                "{} ({} logged copies revoked)",
                r.revoke_records, r.revoke_hits
            ),
        ),
    ]);
    if let Some(tid) = r.failed_commit {
        rows.push((
            "Failed commit",
            format!("transaction {tid}: its commit block's checksum fails; replay stops before it, and the filesystem then needs e2fsck"),
        ));
    }
    if let Some(first) = r.damaged_copies.first() {
        rows.push((
            "Damaged copies",
            format!(
                "{} not replayed; the first: {first}",
                r.damaged_copies.len()
            ),
        ));
    }
    rows
}

/// 1 or 2, from the superblock's block type.
fn version(sb: &JournalSuperblock) -> u32 {
    if sb.is_v2() {
        2
    } else {
        1
    }
}

/// The log's features, named as in the summary's help: revoke, 64bit, async_commit,
/// csum_v1/v2/v3, fast_commit.
fn features(journal: &Journal) -> String {
    let f = journal.features();
    let names: Vec<&str> = [
        (f.revoke, "revoke"),
        (f.bit64, "64bit"),
        (f.async_commit, "async_commit"),
        (journal.has_v1_checksum(), "csum_v1"),
        (f.csum_v2, "csum_v2"),
        (f.csum_v3, "csum_v3"),
        (f.fast_commit, "fast_commit"),
    ]
    .into_iter()
    .filter_map(|(on, name)| on.then_some(name))
    .collect();
    if names.is_empty() {
        "(none)".into()
    } else {
        names.join(" ")
    }
}

/// Whether a recovery is due, in one phrase.
pub fn recovery_state(found: &JournalOnDisk) -> &'static str {
    match (found.recovery_wanted, found.journal.needs_recovery()) {
        (true, true) => "yes (needs_recovery is set and the log is not empty)",
        (true, false) => "no transactions to replay, but needs_recovery is set",
        (false, true) => "no: the log holds transactions but needs_recovery is clear, so they are dropped, as the kernel drops them",
        (false, false) => "no",
    }
}

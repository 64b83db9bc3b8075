//! The writer against the recovery: transactions written by [`LogWriter`] into an in-memory
//! journal, in every format it writes (no checksums, v1, v3; 32- and 64-bit tags), read back
//! by [`Journal::recover`]. What is committed replays, last copy winning; a revoke hides
//! older copies; escaped blocks come back whole; the log wraps; and a crash at any write
//! replays exactly the transactions whose commit block was written.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::io;

use e4_format::journal::{JournalSuperblock, JOURNAL_MAGIC};
use e4_format::MetadataBlock;
use e4_journal::{
    BlockReader, FilesystemFeatures, Journal, JournalLayout, LogWrite, LogWriter, PhysicalRun,
};
use proptest::prelude::*;

/// One transaction: its blocks as (home, version), and its revokes.
type Txn = (Vec<(u64, u32)>, Vec<u64>);
/// Writes in order: (filesystem block, bytes).
type Writes = Vec<(u64, Vec<u8>)>;

const BLOCK: usize = 1024;
const JOURNAL_AT: u64 = 5000;
const JOURNAL_BLOCKS: u32 = 1024;
const FS_BLOCKS: u64 = 8192;

/// A device of `FS_BLOCKS` 1 KiB blocks, blocks never written reading as zero.
#[derive(Default)]
struct Disk(RefCell<BTreeMap<u64, Vec<u8>>>);

impl BlockReader for Disk {
    fn read_block(&self, nr: u64, buf: &mut [u8]) -> io::Result<()> {
        match self.0.borrow().get(&nr) {
            Some(bytes) => buf.copy_from_slice(bytes),
            None => buf.fill(0),
        }
        Ok(())
    }
}

impl Disk {
    fn write(&self, nr: u64, bytes: Vec<u8>) {
        self.0.borrow_mut().insert(nr, bytes);
    }
}

/// The journal's layout: two runs, so the log crosses a discontinuity.
fn layout() -> JournalLayout {
    JournalLayout::new(vec![
        PhysicalRun {
            logical: 0,
            physical: JOURNAL_AT,
            len: 600,
        },
        PhysicalRun {
            logical: 600,
            physical: JOURNAL_AT + 1000,
            len: u64::from(JOURNAL_BLOCKS) - 600,
        },
    ])
    .unwrap()
}

/// A fresh, empty journal superblock as mke2fs writes one, with `compat` set.
fn empty_journal(disk: &Disk, compat: u32) -> Journal {
    let mut raw = [0u8; JournalSuperblock::SIZE];
    raw[..4].copy_from_slice(&JOURNAL_MAGIC.to_be_bytes());
    raw[4..8].copy_from_slice(&4u32.to_be_bytes());
    let mut sb = JournalSuperblock::decode(&raw);
    sb.blocksize = BLOCK as u32;
    sb.maxlen = JOURNAL_BLOCKS;
    sb.first = 1;
    sb.sequence = 1;
    sb.nr_users = 1;
    sb.feature_compat = compat;
    sb.uuid = *b"e4-journal-test!";
    let mut block = vec![0u8; BLOCK];
    let mut bytes = [0u8; JournalSuperblock::SIZE];
    sb.encode(&mut bytes);
    block[..JournalSuperblock::SIZE].copy_from_slice(&bytes);
    JournalSuperblock::seal(&mut block, ());
    disk.write(JOURNAL_AT, block);
    Journal::load(disk, layout(), BLOCK as u32).unwrap()
}

fn content(home: u64, version: u32) -> Vec<u8> {
    let mut bytes: Vec<u8> = (0..BLOCK)
        .map(|i| (home as usize * 31 + i * 7 + version as usize * 13) as u8)
        .collect();
    if home % 5 == 0 {
        // Every fifth block starts with the journal magic and must be escaped.
        bytes[..4].copy_from_slice(&JOURNAL_MAGIC.to_be_bytes());
    }
    bytes
}

/// Every write of one transaction, in order, ending with its commit block.
fn transaction_writes(
    writer: &mut LogWriter,
    blocks: &[(u64, Vec<u8>)],
    revokes: &[u64],
) -> Vec<(u64, Vec<u8>)> {
    let refs: Vec<(u64, &[u8])> = blocks.iter().map(|(h, b)| (*h, b.as_slice())).collect();
    let encoded = writer.encode(&refs, revokes, (1_700_000_000, 5)).unwrap();
    let mut out: Vec<(u64, Vec<u8>)> = encoded
        .writes
        .into_iter()
        .map(|w| match w {
            LogWrite::Block { at, bytes } => (at, bytes),
            LogWrite::Copy { at, index, escaped } => {
                let mut bytes = blocks[index].1.clone();
                if escaped {
                    bytes[..4].fill(0);
                }
                (at, bytes)
            }
        })
        .collect();
    out.push(encoded.commit);
    out
}

fn formats() -> [(FilesystemFeatures, u32); 4] {
    let f = |bit64, metadata_csum| FilesystemFeatures {
        bit64,
        metadata_csum,
    };
    [
        (f(false, false), 0),
        (f(true, false), 0),
        (f(false, false), 1),
        (f(true, true), 0),
    ]
}

/// Writes `txns` (each: blocks as (home, version), revokes), returning every write in
/// order and, after each transaction's commit block, the home contents it makes current.
fn run(
    disk: &Disk,
    journal: &Journal,
    fs: FilesystemFeatures,
    txns: &[Txn],
) -> (Writes, Vec<usize>, LogWriter) {
    let (mut writer, (at, block0)) = LogWriter::start(journal, fs).unwrap();
    disk.write(at, block0);
    let mut writes = Vec::new();
    let mut commit_ends = Vec::new();
    for (blocks, revokes) in txns {
        let blocks: Vec<(u64, Vec<u8>)> = blocks.iter().map(|&(h, v)| (h, content(h, v))).collect();
        writes.extend(transaction_writes(&mut writer, &blocks, revokes));
        commit_ends.push(writes.len());
    }
    (writes, commit_ends, writer)
}

/// What recovery should put home after the first `n` transactions.
fn expected(txns: &[Txn], n: usize) -> BTreeMap<u64, Vec<u8>> {
    let mut latest: BTreeMap<u64, (usize, u32)> = BTreeMap::new();
    let mut revoked: BTreeMap<u64, usize> = BTreeMap::new();
    for (t, (blocks, revokes)) in txns[..n].iter().enumerate() {
        for &r in revokes {
            revoked.insert(r, t);
        }
        for &(h, v) in blocks {
            latest.insert(h, (t, v));
        }
    }
    latest
        .into_iter()
        .filter(|(h, (t, _))| revoked.get(h).is_none_or(|r| r < t))
        .map(|(h, (_, v))| (h, content(h, v)))
        .collect()
}

fn replayed(disk: &Disk) -> (e4_journal::Recovery, BTreeMap<u64, Vec<u8>>) {
    let journal = Journal::load(disk, layout(), BLOCK as u32).unwrap();
    let recovery = journal.recover(disk, FS_BLOCKS).unwrap();
    let homes = recovery
        .replay
        .iter()
        .map(|(&home, copy)| (home, journal.replayed(disk, copy).unwrap()))
        .collect();
    (recovery, homes)
}

#[test]
fn committed_transactions_replay_in_every_format_with_revokes_and_escapes() {
    let txns = vec![
        (vec![(10, 1), (11, 1), (15, 1), (20, 1)], vec![]),
        (vec![(11, 2), (30, 2)], vec![20]),
        (vec![(20, 3)], vec![10]),
        ((100..400).map(|h| (h, 4)).collect(), vec![]),
    ];
    for (fs, compat) in formats() {
        let disk = Disk::default();
        let journal = empty_journal(&disk, compat);
        let (writes, _, _) = run(&disk, &journal, fs, &txns);
        for (at, bytes) in writes {
            disk.write(at, bytes);
        }
        let (recovery, homes) = replayed(&disk);
        assert!(recovery.is_clean(), "{fs:?} {compat}: {recovery:?}");
        assert_eq!(recovery.transactions(), 4, "{fs:?} {compat}");
        assert!(recovery.revoke_hits >= 2, "{fs:?} {compat}");
        assert_eq!(homes, expected(&txns, 4), "{fs:?} {compat}");
    }
}

#[test]
fn the_log_wraps_after_checkpoints_and_tids_keep_rising() {
    for (fs, compat) in formats() {
        let disk = Disk::default();
        let journal = empty_journal(&disk, compat);
        let (mut writer, (at, block0)) = LogWriter::start(&journal, fs).unwrap();
        disk.write(at, block0);
        let mut tids = Vec::new();
        // 40 transactions of 100 blocks: four trips round a 1023-block log.
        let mut last = Vec::new();
        for t in 0..40u32 {
            let blocks: Vec<(u64, Vec<u8>)> = (0..100)
                .map(|i| (1000 + u64::from(t) * 3 + i, content(i, t)))
                .collect();
            if writer.free() < writer.blocks_needed(blocks.len(), 0) {
                // Home writes durable: the tail moves.
                let (at, block0) = writer.checkpoint();
                disk.write(at, block0);
            }
            tids.push(writer.next_tid());
            let writes = transaction_writes(&mut writer, &blocks, &[]);
            for (at, bytes) in writes {
                disk.write(at, bytes);
            }
            last = blocks;
        }
        assert!(tids.windows(2).all(|w| w[1] == w[0] + 1));
        let (recovery, homes) = replayed(&disk);
        assert!(recovery.is_clean());
        // The last transaction replays whatever the tail left before it.
        for (home, bytes) in &last {
            assert_eq!(homes.get(home), Some(bytes), "{fs:?} {compat} block {home}");
        }
        let (at, block0) = writer.close();
        disk.write(at, block0);
        let (recovery, homes) = replayed(&disk);
        assert_eq!(recovery.transactions(), 0);
        assert!(homes.is_empty());
        let reopened = Journal::load(&disk, layout(), BLOCK as u32).unwrap();
        let (again, _) = LogWriter::start(&reopened, fs).unwrap();
        assert!(
            again.next_tid() > *tids.last().unwrap(),
            "a tid is never reused"
        );
    }
}

/// Cases per run: `E4_JOURNAL_CASES` for a long run.
fn cases() -> u32 {
    std::env::var("E4_JOURNAL_CASES")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(256)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases()))]

    /// A crash after any prefix of the writes (one torn: half old, half new) replays the
    /// transactions whose commit block is complete, and nothing of the rest.
    #[test]
    fn a_crash_at_any_write_replays_exactly_the_committed_prefix(
        seed in 0u64..1000,
        cut_fraction in 0.0f64..1.0,
        format in 0usize..4,
        torn in any::<bool>(),
    ) {
        let (fs, compat) = formats()[format];
        let txns: Vec<Txn> = (0..6u32)
            .map(|t| {
                let n = 1 + (seed as u32 * 7 + t * 13) % 90;
                let blocks = (0..n).map(|i| (u64::from((seed as u32 + i * 17 + t) % 400) + 10, t)).collect();
                let revokes = if t % 2 == 1 { vec![u64::from((seed as u32 + t) % 400) + 10] } else { vec![] };
                (blocks, revokes)
            })
            .collect();
        let disk = Disk::default();
        let journal = empty_journal(&disk, compat);
        let (writes, commit_ends, _) = run(&disk, &journal, fs, &txns);
        let cut = (writes.len() as f64 * cut_fraction) as usize;
        for (at, bytes) in &writes[..cut] {
            disk.write(*at, bytes.clone());
        }
        if torn && cut < writes.len() {
            let (at, bytes) = &writes[cut];
            let mut half = vec![0u8; BLOCK];
            disk.read_block(*at, &mut half).unwrap();
            half[..BLOCK / 2].copy_from_slice(&bytes[..BLOCK / 2]);
            disk.write(*at, half);
        }
        let committed = commit_ends.iter().filter(|&&end| end <= cut).count();
        // A torn commit block (its header written, the rest not) commits without
        // checksums, as in jbd2; with them it fails its checksum and does not.
        let torn_commit = torn && commit_ends.contains(&(cut + 1));
        let (recovery, homes) = replayed(&disk);
        let found = recovery.transactions() as usize;
        prop_assert!(
            found == committed || (torn_commit && found == committed + 1),
            "{} transactions replayed, {} committed", found, committed
        );
        prop_assert_eq!(homes, expected(&txns, found));
    }
}

/// A commit block whose checksum fails ends the log. It is damage (`failed_commit`, the
/// filesystem needs a check) when the next transaction follows it, and a commit a crash
/// tore in its own write (the clean end, as in the kernel since 2024) when nothing does.
#[test]
fn a_bad_commit_is_damage_only_when_the_log_goes_on_after_it() {
    let (fs, compat) = formats()[3];
    let txns: Vec<Txn> = (0..3u32)
        .map(|t| (vec![(10 + u64::from(t), t)], vec![]))
        .collect();
    for damaged in [1usize, 2] {
        let disk = Disk::default();
        let journal = empty_journal(&disk, compat);
        let (writes, commit_ends, _) = run(&disk, &journal, fs, &txns);
        for (i, (at, bytes)) in writes.into_iter().enumerate() {
            let mut bytes = bytes;
            if i + 1 == commit_ends[damaged] {
                // The commit block's second half never reached the disk.
                bytes[BLOCK / 2..].fill(0xEE);
            }
            disk.write(at, bytes);
        }
        let (recovery, homes) = replayed(&disk);
        assert_eq!(
            recovery.transactions() as usize,
            damaged,
            "commit {damaged} bad"
        );
        assert_eq!(homes, expected(&txns, damaged));
        let tid = recovery.start_tid.wrapping_add(damaged as u32);
        match damaged {
            1 => assert_eq!(
                recovery.failed_commit,
                Some(tid),
                "the log went on after it"
            ),
            _ => assert!(recovery.is_clean(), "the last commit, torn: {recovery:?}"),
        }
    }
}

//! Every crash state of a workload's log, recovered by e4 and checked: enumerated by flush
//! epoch, deduplicated by image, checked by e2fsck once per distinct recovered image and by
//! the model once per distinct (image, promises) pair; a sample recovered again after a
//! crash inside recovery, and a sample recovered by the kernel.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::ops::Range;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use e4_format::checksum::crc32c_raw;
use e4_fs::device::{Device, Fault, FaultyDevice};
use e4_fs::recording_device::{CrashImage, CrashPoint, LoggedWrite, WriteLog};
use e4_fs::{Filesystem, Mapping, OpenOptions};
use e4_testkit::{e2fsck_clean, kernel_comparison_skipped, LoopDevice};
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

use super::model::{options, read_tree, Model, BLOCK};

/// Up to this many writes since a flush, every subset of them is a state.
const EXHAUSTIVE: usize = 10;
/// Where the primary superblock starts.
const SUPERBLOCK_OFFSET: u64 = 1024;
/// jbd2's block magic and its commit block type (`h_magic`, `h_blocktype`).
const JBD2_MAGIC: u32 = 0xC03B_3998;
const JBD2_COMMIT: u32 = 2;
/// The superblock's bytes a mount or unmount sets to the time or a count: s_mtime, s_wtime,
/// s_mnt_count, s_kbytes_written, s_wtime_hi and s_mtime_hi, and s_checksum over them
/// (offsets in the superblock, which starts at byte 1024).
const SUPERBLOCK_CLOCKS: [Range<u64>; 4] = [
    1024 + 0x2C..1024 + 0x36,
    1024 + 0x178..1024 + 0x180,
    1024 + 0x274..1024 + 0x276,
    1024 + 0x3FC..1024 + 0x400,
];
/// States whose recovery is crashed at several of its writes and then run again.
const INTERRUPTED: usize = 6;
/// Crash images the kernel recovers, where loop mounts work.
const KERNEL: usize = 4;
/// Failures shown in full.
const SHOWN: usize = 4;

/// How many states to sample per flush epoch past [`EXHAUSTIVE`] writes, and the seed:
/// `E4_CRASH_SAMPLES` (default 32) and `E4_CRASH_SEED` (default 1).
pub fn sampling() -> (usize, u64) {
    let var = |name, default| {
        std::env::var(name)
            .ok()
            .map(|v| {
                v.parse()
                    .unwrap_or_else(|_| panic!("{name}={v} is no number"))
            })
            .unwrap_or(default)
    };
    (
        var("E4_CRASH_SAMPLES", 32) as usize,
        var("E4_CRASH_SEED", 1),
    )
}

/// A crash state to check, and whether a correct device could leave it at all.
struct State {
    point: CrashPoint,
    /// A commit block on the device without all of its log blocks, which only a device
    /// that ignores flushes leaves.
    reordered: Option<Reordered>,
}

/// A commit block without all of its log blocks. Recovery may refuse it (as the kernel
/// does); if it recovers it, the image must be consistent, and where the commit cannot
/// be found (its descriptor, or whatever the log holds before it, missing) it must be
/// what recovering a state on one side of that commit gives: the transaction whole or
/// not at all. A missing copy alone can go unseen: jbd2's tag checksum is a crc32c of the
/// block, and every version of a block that ends in its own crc32c from a fixed seed (the
/// superblock; directory leaves, inodes' blocks of one owner) has the same one.
struct Reordered {
    /// The states without the transaction and with it, where the commit cannot be found.
    sides: Option<[CrashPoint; 2]>,
}

/// What the sweep of one workload found.
#[derive(Default)]
pub struct Summary {
    workload: String,
    /// Where failing crash images go (`E4_CRASH_KEEP`), with the log to describe them.
    keep: Option<(PathBuf, WriteLog)>,
    pub states: usize,
    pub failed_states: usize,
    pub crash_images: usize,
    pub recovered_images: usize,
    pub refused_reordered: usize,
    /// States whose torn write is the primary superblock that e4 refused: on an image of
    /// one group (no backup) neither e2fsck nor the kernel opens such an image either.
    pub refused_torn_superblock: usize,
    pub interrupted: usize,
    pub read_only: usize,
    pub kernel: usize,
    /// Failures by kind (the first line of the problem, numbers left out): how many
    /// distinct images, and the first few in full.
    failures: BTreeMap<String, (usize, Vec<String>)>,
}

impl Summary {
    fn fail(&mut self, point: &CrashPoint, context: &str, problem: &str, image: &CrashImage) {
        self.failed_states += 1;
        let kind: String = problem
            .lines()
            .next()
            .unwrap_or_default()
            .split(' ')
            .map(
                |word| match word.starts_with(|c: char| c.is_ascii_digit()) {
                    true => "#",
                    false => word,
                },
            )
            .collect::<Vec<_>>()
            .join(" ");
        let (count, shown) = self.failures.entry(kind).or_default();
        *count += 1;
        if let Some((dir, log)) = &self.keep {
            let name = format!("{}-{}", self.workload.replace(' ', "-"), self.failed_states);
            std::fs::write(dir.join(format!("{name}.img")), image.to_vec()).unwrap();
            let writes: Vec<String> = log
                .writes_since(point.flushes)
                .iter()
                .enumerate()
                .map(|(i, w)| format!("{i}: block {} {}", w.offset / BLOCK as u64, kind_of(w)))
                .collect();
            std::fs::write(
                dir.join(format!("{name}.txt")),
                format!(
                    "{point:?}{context}: {problem}\n\nwrites since flush {}:\n{}\n",
                    point.flushes,
                    writes.join("\n")
                ),
            )
            .unwrap();
        }
        if shown.len() < SHOWN {
            shown.push(format!("{point:?}{context}: {problem}"));
        }
    }

    fn failures(&self) -> String {
        self.failures
            .iter()
            .map(|(kind, (count, shown))| format!("{count} x {kind}\n  {}", shown.join("\n  ")))
            .collect::<Vec<_>>()
            .join("\n")
    }
}

/// Runs every crash state of `log` against `model`; panics with a summary and the first
/// failures of each kind if any state fails, or if fewer than `at_least` states were run
/// (the workloads' floors add up to the 10,000 states CI must check; with the default
/// sampling they run about twice that).
pub fn sweep(workload: &str, log: &WriteLog, model: &Model, at_least: usize) -> Summary {
    let started = Instant::now();
    let (samples, seed) = sampling();
    let journal = journal(log);
    let mut rng = StdRng::seed_from_u64(seed);
    let scratch = scratch_dir();
    let mut summary = Summary {
        workload: workload.into(),
        keep: std::env::var_os("E4_CRASH_KEEP").map(|dir| (dir.into(), log.clone())),
        ..Summary::default()
    };
    // (crash image, promises in force) → (failed, recovered image); recovered image →
    // e2fsck's verdict; (recovered image, promises in force) → the model's problems.
    let mut seen: HashMap<(u64, usize), (bool, Option<u64>)> = HashMap::new();
    let mut crash_images = HashSet::new();
    let mut fsck: HashMap<u64, Result<(), String>> = HashMap::new();
    let mut checked: HashMap<(u64, usize), Vec<String>> = HashMap::new();
    let mut sampled: Vec<(CrashPoint, CrashImage, bool)> = Vec::new();
    // What each ordinary state recovered to, and the reordered states e4 recovered.
    let mut legal: HashMap<CrashPoint, u64> = HashMap::new();
    let mut reordered = Vec::new();
    let durable = log.image_at_flush(0);
    for k in 0..=log.flushes() {
        let floors = model.floors(k);
        let since = log.writes_since(k);
        for state in states(log, k, samples, &journal, &durable, &mut rng) {
            summary.states += 1;
            let image = durable.clone();
            image.apply_after(since, &state.point);
            let crashed = image.digest(&[]);
            let remember = |legal: &mut HashMap<_, _>, reordered: &mut Vec<_>, digest| match (
                &state.reordered,
                digest,
            ) {
                (None, Some(digest)) => {
                    legal.insert(state.point.clone(), digest);
                }
                (Some(Reordered { sides: Some(sides) }), Some(digest)) => {
                    reordered.push((state.point.clone(), sides.clone(), digest, image.clone()))
                }
                _ => {}
            };
            if let Some(&(failed, digest)) = seen.get(&(crashed, floors.in_force)) {
                summary.failed_states += usize::from(failed);
                remember(&mut legal, &mut reordered, digest);
                continue;
            }
            let first = crash_images.insert(crashed);
            if first && crash_images.len() % 40 == 1 {
                let reordered = state.reordered.is_some();
                sampled.push((state.point.clone(), image.clone(), reordered));
            }
            let recovered = Arc::new(image.clone());
            let mut digest = None;
            let problems = match recover(&recovered) {
                Err(_) if state.reordered.is_some() => {
                    summary.refused_reordered += 1;
                    Vec::new()
                }
                Err(_) if tears_superblock(since, &state.point) => {
                    summary.refused_torn_superblock += 1;
                    Vec::new()
                }
                Err(e) => vec![format!("e4 did not recover it: {e}")],
                Ok(()) => {
                    let digest = *digest.insert(recovered.digest(&journal.ignored));
                    let mut problems = Vec::new();
                    let verdict = fsck.entry(digest).or_insert_with(|| {
                        let path = scratch.path().join("state.img");
                        std::fs::write(&path, recovered.to_vec()).unwrap();
                        e2fsck_clean(&path)
                    });
                    if let Err(out) = verdict {
                        problems.push(out.clone());
                    }
                    problems.extend(
                        checked
                            .entry((digest, floors.in_force))
                            .or_insert_with(|| {
                                match Filesystem::open_device(
                                    recovered.clone(),
                                    OpenOptions::default(),
                                ) {
                                    Ok(fs) => model.problems(&fs, &floors),
                                    Err(e) => {
                                        vec![format!("the recovered image will not open: {e}")]
                                    }
                                }
                            })
                            .iter()
                            .cloned(),
                    );
                    problems
                }
            };
            let failed = !problems.is_empty();
            seen.insert((crashed, floors.in_force), (failed, digest));
            remember(&mut legal, &mut reordered, digest);
            if failed {
                summary.fail(&state.point, "", &problems.join("\n  "), &image);
            }
        }
        for write in log.epoch(k) {
            durable.apply(write);
        }
    }
    for (point, sides, digest, image) in &reordered {
        let outcomes: Vec<u64> = sides.iter().filter_map(|s| legal.get(s).copied()).collect();
        if outcomes.len() == 2 && !outcomes.contains(digest) {
            let problem = "e4 recovered a commit it should not have found (its descriptor \
                           or the log before it never written) into an image neither with nor \
                           without that transaction";
            summary.fail(point, "", problem, image);
        }
    }
    summary.crash_images = crash_images.len();
    summary.recovered_images = fsck.len();
    read_only_views(&sampled, &mut summary);
    interrupt_recoveries(&sampled, &journal.ignored, &mut summary);
    kernel_recoveries(workload, &sampled, &scratch, &mut summary);
    eprintln!(
        "{workload}: {} crash states ({} flushes, {} writes), {} distinct crash images, \
         {} distinct recovered images (e2fsck runs), {} reordered and {} torn-superblock \
         states refused, \
         {} read-only views, {} recoveries interrupted, {} kernel recoveries; {} states \
         failed; {:.1} s",
        summary.states,
        log.flushes(),
        log.writes_since(0).len(),
        summary.crash_images,
        summary.recovered_images,
        summary.refused_reordered,
        summary.refused_torn_superblock,
        summary.read_only,
        summary.interrupted,
        summary.kernel,
        summary.failed_states,
        started.elapsed().as_secs_f64()
    );
    assert!(
        summary.states >= at_least,
        "{workload}: {} crash states, fewer than the {at_least} this workload must give",
        summary.states
    );
    assert!(
        summary.failed_states == 0,
        "{workload}: {} of {} crash states failed; by kind (distinct images):\n{}",
        summary.failed_states,
        summary.states,
        summary.failures()
    );
    summary
}

/// Opens `image` for writing (which recovers its journal) and unmounts it.
fn recover(image: &Arc<CrashImage>) -> Result<(), String> {
    let fs = Filesystem::open_device(image.clone(), options()).map_err(|e| e.to_string())?;
    fs.unmount().map_err(|e| e.to_string())
}

/// The journal (inode 8) of the image the log starts from.
struct Journal {
    /// Its blocks.
    blocks: HashSet<u64>,
    /// What two recovered images may differ in and still be the same filesystem:
    /// [`SUPERBLOCK_CLOCKS`], the journal superblock's s_sequence (the next tid, which
    /// each mount moves on) and s_checksum over it, and the log's blocks (an unmount leaves
    /// the log empty, and its commit blocks hold their times).
    ignored: Vec<Range<u64>>,
}

/// jbd2's s_sequence and s_checksum, in the journal superblock.
const JBD2_SEQUENCE: Range<u64> = 0x18..0x1C;
const JBD2_CHECKSUM: Range<u64> = 0xFC..0x100;

fn journal(log: &WriteLog) -> Journal {
    let image = Arc::new(log.image_at_flush(0));
    let fs = Filesystem::open_device(image, OpenOptions::default()).unwrap();
    let inode = fs.read_inode(8).unwrap();
    let blocks = inode.size() / BLOCK as u64;
    let mut journal = Journal {
        blocks: HashSet::new(),
        ignored: SUPERBLOCK_CLOCKS.to_vec(),
    };
    let mut logical = 0;
    while logical < blocks {
        match fs.map_block(&inode, logical, blocks - logical).unwrap() {
            Mapping::Data { physical, len, .. } => {
                journal.blocks.extend(physical..physical + len);
                let at = |block: u64| block * BLOCK as u64;
                if logical == 0 {
                    let jsb = at(physical);
                    for r in [JBD2_SEQUENCE, JBD2_CHECKSUM] {
                        journal.ignored.push(jsb + r.start..jsb + r.end);
                    }
                    journal.ignored.push(at(physical + 1)..at(physical + len));
                } else {
                    journal.ignored.push(at(physical)..at(physical + len));
                }
                logical += len;
            }
            Mapping::Hole { len } => logical += len.max(1),
        }
    }
    journal
}

/// The states after flush `k`: the flush itself; every subset (in issue order) of up to
/// [`EXHAUSTIVE`] writes since, or `samples` subsets in random orders; a torn last write
/// for a quarter as many; and where the next epoch holds a jbd2 commit block, that commit
/// on the device without the log blocks before it.
fn states(
    log: &WriteLog,
    k: usize,
    samples: usize,
    journal: &Journal,
    durable: &CrashImage,
    rng: &mut StdRng,
) -> Vec<State> {
    let epoch = log.epoch(k).len();
    let last = k == log.flushes();
    let ordinary = |reached: Vec<usize>, torn| State {
        point: CrashPoint {
            flushes: k,
            reached,
            torn,
        },
        reordered: None,
    };
    let mut out = vec![ordinary(Vec::new(), false)];
    // A commit block alone after its flush: the far side of a reordered state.
    let epoch_writes = log.epoch(k);
    if let Some(c) = epoch_writes.iter().position(|w| is_commit_block(&w.bytes)) {
        out.push(ordinary(vec![c], false));
    }
    if epoch <= EXHAUSTIVE {
        // The full set is the next flush's state, unless no flush follows.
        let subsets = (1u32 << epoch) - if last { 0 } else { 1 };
        for mask in 1..subsets.max(1) {
            let reached = (0..epoch).filter(|i| mask & (1 << i) != 0).collect();
            out.push(ordinary(reached, false));
        }
    } else {
        for _ in 0..samples {
            out.push(ordinary(subset(epoch, rng), false));
        }
    }
    for _ in 0..(samples / 4).min(epoch) {
        out.push(ordinary(subset(epoch, rng), true));
    }
    if epoch > 0 {
        out.push(ordinary(vec![0], true));
    }
    if k < log.flushes() {
        out.extend(commit_without_log(log, k, journal, durable));
    }
    out
}

/// A random non-empty subset of `0..n`, in random order.
fn subset(n: usize, rng: &mut StdRng) -> Vec<usize> {
    let mut all: Vec<usize> = (0..n).collect();
    all.shuffle(rng);
    all.truncate(rng.gen_range(1..=n));
    all
}

/// Where the epoch after flush `k + 1` starts with a jbd2 commit block: that block on the
/// device with none, all but the first, and all but the last of epoch `k`'s journal
/// writes (the log blocks it commits). `durable` is the device as of flush `k`.
///
/// All but the last is left out when what the log held at the last block's place has the
/// same crc32c as the block: no jbd2 checksum can tell them apart (a crc32c register
/// that reads two equal-length blocks with equal crc32c ends equal from any seed, the tag
/// checksum's sequence number included), so a recovery, the kernel's as well, replays the
/// stale block. That is the case when both are the block holding the superblock, which
/// ends in its own crc32c and is the last block e4 logs: a log position reused by
/// transactions of one size (the steps of a large delete) held an older copy of it.
fn commit_without_log(
    log: &WriteLog,
    k: usize,
    journal: &Journal,
    durable: &CrashImage,
) -> Vec<State> {
    let epoch = log.epoch(k);
    let next = log.epoch(k + 1);
    let Some(commit) = next.iter().position(|w| is_commit_block(&w.bytes)) else {
        return Vec::new();
    };
    let commit = epoch.len() + commit;
    let logged: Vec<usize> = (0..epoch.len())
        .filter(|&i| journal.blocks.contains(&(epoch[i].offset / BLOCK as u64)))
        .collect();
    let others: Vec<usize> = (0..epoch.len()).filter(|i| !logged.contains(i)).collect();
    let point = |flushes, reached| CrashPoint {
        flushes,
        reached,
        torn: false,
    };
    // Without the transaction, and with it (its commit block alone after the next flush).
    let sides = [
        point(k, others.clone()),
        point(k + 1, vec![commit - epoch.len()]),
    ];
    // Kept log blocks, and whether the commit can still be found.
    let mut variants = vec![(Vec::new(), false)];
    if logged.len() > 1 {
        variants.push((logged[1..].to_vec(), false));
        let last = &epoch[logged[logged.len() - 1]];
        let mut held = vec![0u8; last.bytes.len()];
        // OK to unwrap: the write was inside the device.
        durable.read_exact_at(&mut held, last.offset).unwrap();
        if crc32c_raw(0, &held) != crc32c_raw(0, &last.bytes) {
            variants.push((logged[..logged.len() - 1].to_vec(), true));
        }
    }
    let mut out = vec![State {
        point: sides[0].clone(),
        reordered: None,
    }];
    out.extend(variants.into_iter().map(|(kept, found)| {
        let mut reached: Vec<usize> = others.iter().chain(&kept).copied().collect();
        reached.push(commit);
        State {
            point: point(k, reached),
            reordered: Some(Reordered {
                sides: (!found).then(|| sides.clone()),
            }),
        }
    }));
    out
}

/// Whether `point` tears a write of the primary superblock (its last write).
fn tears_superblock(since: &[LoggedWrite], point: &CrashPoint) -> bool {
    point.torn
        && point
            .reached
            .last()
            .is_some_and(|&last| since[last].offset == SUPERBLOCK_OFFSET)
}

fn is_commit_block(bytes: &[u8]) -> bool {
    bytes.len() == BLOCK && jbd2_block_type(bytes) == Some(JBD2_COMMIT)
}

/// `h_blocktype` of a jbd2 block (1 descriptor, 2 commit, 3 and 4 superblock, 5 revoke).
fn jbd2_block_type(bytes: &[u8]) -> Option<u32> {
    let word = |i: usize| u32::from_be_bytes(bytes[i..i + 4].try_into().unwrap());
    (bytes.len() >= 8 && word(0) == JBD2_MAGIC).then(|| word(4))
}

/// What a logged write is, for a person reading a failure.
fn kind_of(write: &LoggedWrite) -> String {
    let len = write.bytes.len();
    match jbd2_block_type(&write.bytes) {
        Some(1) => "jbd2 descriptor".into(),
        Some(2) => "jbd2 commit".into(),
        Some(3 | 4) => "jbd2 superblock".into(),
        Some(5) => "jbd2 revoke".into(),
        _ if write.offset == SUPERBLOCK_OFFSET => "superblock".into(),
        _ => format!("{len} bytes at {}", write.offset),
    }
}

/// A directory for the images e2fsck and the kernel read: in memory where /dev/shm is.
fn scratch_dir() -> tempfile::TempDir {
    tempfile::tempdir_in("/dev/shm")
        .or_else(|_| tempfile::tempdir())
        .unwrap()
}

/// A read-only open replays the log in memory: of the sampled states that e4 recovers, it
/// shows the tree and contents the recovery leaves, and leaves the image as it was.
fn read_only_views(sampled: &[(CrashPoint, CrashImage, bool)], summary: &mut Summary) {
    for (point, image, _) in sampled {
        let recovered = Arc::new(image.clone());
        let Ok(after) = recover(&recovered).and_then(|()| {
            let fs = Filesystem::open_device(recovered, OpenOptions::default())
                .map_err(|e| e.to_string())?;
            read_tree(&fs)
        }) else {
            // The sweep judged a refusal.
            continue;
        };
        summary.read_only += 1;
        let untouched = Arc::new(image.clone());
        let view = Filesystem::open_device(untouched.clone(), OpenOptions::default())
            .map_err(|e| e.to_string())
            .and_then(|fs| read_tree(&fs));
        let problem = match view {
            Err(e) => Some(format!("a read-only open failed: {e}")),
            Ok(view) if view != after => Some(
                "a read-only open shows other names or contents than the recovery leaves".into(),
            ),
            Ok(_) if untouched.digest(&[]) != image.digest(&[]) => {
                Some("a read-only open changed the image".into())
            }
            Ok(_) => None,
        };
        if let Some(problem) = problem {
            summary.fail(point, ", opened read-only", &problem, image);
        }
    }
}

/// `n` of `items`, spread evenly over them.
fn spread<T>(items: &[T], n: usize) -> impl Iterator<Item = &T> {
    items.iter().step_by((items.len() / n).max(1)).take(n)
}

/// Crash inside recovery, then recover again: the same image as one recovery. Of the
/// sampled states whose recovery writes (the writes of the writable open, before any
/// operation), a spread few have it fail at its first write, a third and two thirds of the
/// way, and at its last, and are then recovered again.
fn interrupt_recoveries(
    sampled: &[(CrashPoint, CrashImage, bool)],
    ignored: &[Range<u64>],
    summary: &mut Summary,
) {
    let recovering: Vec<_> = sampled
        .iter()
        .filter_map(|(point, image, _)| {
            let clean = Arc::new(image.clone());
            let counted = Arc::new(FaultyDevice::new(clean.clone(), Fault::Never));
            let fs = Filesystem::open_device(counted.clone(), options()).ok()?;
            let writes = counted.counts().1;
            // A failed recovery is the sweep's to report.
            fs.unmount().ok()?;
            (writes > 0).then_some((point, image, writes, clean))
        })
        .collect();
    for &(point, image, writes, ref clean) in spread(&recovering, INTERRUPTED) {
        let mut at: Vec<u64> = vec![0, writes / 3, 2 * writes / 3, writes - 1];
        at.dedup();
        for n in at {
            let crashed = Arc::new(image.clone());
            let failing = Arc::new(FaultyDevice::new(crashed.clone(), Fault::WritesFrom(n)));
            // The open fails, or drops what it could not write when it is dropped.
            drop(Filesystem::open_device(failing, options()));
            summary.interrupted += 1;
            let again = recover(&crashed).and_then(|()| {
                if crashed.digest(ignored) == clean.digest(ignored) {
                    return Ok(());
                }
                let (mut want, mut got) = (clean.to_vec(), crashed.to_vec());
                for r in ignored {
                    let r = r.start as usize..r.end as usize;
                    want[r.clone()].fill(0);
                    got[r].fill(0);
                }
                let differ: Vec<usize> = (0..want.len() / BLOCK)
                    .filter(|&b| {
                        want[b * BLOCK..(b + 1) * BLOCK] != got[b * BLOCK..(b + 1) * BLOCK]
                    })
                    .take(8)
                    .collect();
                Err(format!(
                    "differs from one uninterrupted recovery in blocks {differ:?}"
                ))
            });
            if let Err(e) = again {
                let context = format!(
                    ", recovery crashed at its write {n} of {writes}, then recovered again"
                );
                summary.fail(point, &context, &e, image);
            }
        }
    }
}

/// The kernel mounts a sample of the crash images (recovering their journals), unmounts,
/// and e2fsck finds them clean. Skipped, with the reason, where loop mounts do not work.
fn kernel_recoveries(
    workload: &str,
    sampled: &[(CrashPoint, CrashImage, bool)],
    scratch: &tempfile::TempDir,
    summary: &mut Summary,
) {
    let path = scratch.path().join("kernel.img");
    for (i, (point, image, reordered)) in spread(sampled, KERNEL).enumerate() {
        std::fs::write(&path, image.to_vec()).unwrap();
        let loop_device = match LoopDevice::attach(&path) {
            Ok(device) => device,
            Err(reason) => {
                assert_eq!(i, 0, "loop devices went away: {reason}");
                kernel_comparison_skipped(workload, &reason);
                return;
            }
        };
        // A read-write mount replays the journal; the unmount leaves the image clean. A
        // state only a device ignoring flushes leaves may be refused.
        let mounted = loop_device.mount("rw").map(drop);
        drop(loop_device);
        if *reordered && mounted.is_err() {
            continue;
        }
        let result = mounted;
        summary.kernel += 1;
        if let Err(e) = result.and_then(|()| e2fsck_clean(&path)) {
            summary.fail(point, ", recovered by the kernel", &e, image);
        }
    }
}

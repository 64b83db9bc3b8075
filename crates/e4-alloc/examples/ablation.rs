//! Ablation benchmark of e4-alloc (a benchmark, not a test).
//!
//! `cargo run --release -p e4-alloc --example ablation -- [seconds per run] [repeats] [workloads]`
//!
//! `workloads` is a comma-separated subset of
//! `fallocate2,append,small,create,create-shared,create-full` (default: all).
//!
//! Workloads, each thread on its own file or directory, at 1 to 64 threads:
//! - fallocate2: allocate 8 KiB at a time up to 1 MiB, free everything, repeat (timed).
//! - append: append 4 KiB at a time up to 64 MiB per file (sized), reporting the layout;
//!   and the headline case, 8 threads appending 256 MiB each.
//! - small files: files of 1 to 4 blocks, 1,024 at a time, then all freed (timed).
//! - create: make a directory, then files in it, 1,024 at a time, then remove them (the
//!   inode allocator; timed). create-shared: every thread in one directory, so creators
//!   share groups. create-full: a nearly full 8-group volume, 16 files per batch.
//!
//! Configurations: one global lock; ext4 before 6.17 (blocking group locks, one goal under
//! a lock, no ordered index, no reservation windows); e4; and e4 with each mechanism
//! switched off in turn. Lock counts are per operation, summed over the repeats; ops/s is
//! the mean and standard deviation over the repeats.

use std::time::{Duration, Instant};

use e4_alloc::limit_counter::LimitCounterStats;
use e4_alloc::stats::LockSnapshot;
use e4_alloc::{
    AllocatorConfig, BlockAllocator, Extent, Geometry, GoalPolicy, GroupLocking, InodeAllocator,
    InodeGeometry, InodeKind, InodeRequest, ReservationWindow,
};

const BLOCK: u64 = 4096;
const THREADS: [usize; 7] = [1, 2, 4, 8, 16, 32, 64];

fn geometry() -> Geometry {
    // 512 groups of 32,768 4 KiB blocks: a 64 GiB volume.
    Geometry {
        first_data_block: 0,
        blocks_per_group: 32768,
        blocks: 512 * 32768,
    }
}

fn inode_geometry() -> InodeGeometry {
    // The same volume as mke2fs makes it: 8,192 inodes per group, flex groups of 16.
    InodeGeometry {
        groups: 512,
        inodes_per_group: 8192,
        groups_per_flex: 16,
        first_inode: 11,
    }
}

fn configs() -> Vec<(&'static str, AllocatorConfig)> {
    let e4 = AllocatorConfig::default();
    vec![
        (
            "global lock",
            AllocatorConfig {
                locking: GroupLocking::Global,
                ..e4
            },
        ),
        (
            "ext4 < 6.17",
            AllocatorConfig {
                locking: GroupLocking::Blocking,
                goals: GoalPolicy::SharedLocked,
                use_index: false,
                window_cap: 0,
                ..e4
            },
        ),
        ("e4", e4),
        (
            "e4 - try-lock skip",
            AllocatorConfig {
                locking: GroupLocking::Blocking,
                ..e4
            },
        ),
        (
            "e4 - hashed goals",
            AllocatorConfig {
                goals: GoalPolicy::SharedLocked,
                ..e4
            },
        ),
        (
            "e4 - free-space index",
            AllocatorConfig {
                use_index: false,
                ..e4
            },
        ),
        (
            "e4 - reservation windows",
            AllocatorConfig {
                window_cap: 0,
                ..e4
            },
        ),
        (
            "e4 - small-file packing",
            AllocatorConfig {
                pack_small_files: false,
                ..e4
            },
        ),
    ]
}

/// One run of one workload: operations, time, and lock traffic.
#[derive(Default, Clone, Copy)]
struct Run {
    ops: u64,
    secs: f64,
    /// Per-group locks (block or inode groups).
    group: LockSnapshot,
    /// The per-slot small-file packing windows' locks.
    packing: LockSnapshot,
    /// The global lock and the shared stream-goal lock.
    shared: LockSnapshot,
    /// Writes to shared atomics: free-space index bit moves, and the limit counter's
    /// shared-pool operations (refills, direct takes, drains).
    shared_atomics: u64,
    /// Free-space index searches, and the bitset words they read.
    index_searches: u64,
    index_words: u64,
    /// Inode group locks taken to free inodes.
    inode_free_locks: LockSnapshot,
    /// Inode groups looked at without their lock, and inode-bitmap words read.
    inode_groups_examined: u64,
    inode_bitmap_words: u64,
}

fn counter_writes(c: &LimitCounterStats) -> u64 {
    c.refills.get() + c.pool_direct.get() + c.drains.get()
}

fn block_run(alloc: &BlockAllocator, ops: u64, secs: f64) -> Run {
    let s = alloc.stats();
    let (g, p, gl, gg) = (
        s.group_locks.snapshot(),
        s.packing_locks.snapshot(),
        s.global_lock.snapshot(),
        s.goal_lock.snapshot(),
    );
    let index = alloc.index().stats();
    Run {
        ops,
        secs,
        group: g,
        packing: p,
        shared: add(gl, gg),
        shared_atomics: index.updates.get() + counter_writes(alloc.counter_stats()),
        index_searches: index.searches.get(),
        index_words: index.words_read.get(),
        ..Run::default()
    }
}

fn sub(a: LockSnapshot, b: LockSnapshot) -> LockSnapshot {
    LockSnapshot {
        acquisitions: a.acquisitions - b.acquisitions,
        contended: a.contended - b.contended,
        try_skips: a.try_skips - b.try_skips,
    }
}

fn add(a: LockSnapshot, b: LockSnapshot) -> LockSnapshot {
    LockSnapshot {
        acquisitions: a.acquisitions + b.acquisitions,
        contended: a.contended + b.contended,
        try_skips: a.try_skips + b.try_skips,
    }
}

/// Runs `work(thread, deadline) -> ops` on `threads` threads until `duration` has passed.
fn timed(
    threads: usize,
    duration: Duration,
    work: impl Fn(usize, Instant) -> u64 + Sync,
) -> (u64, f64) {
    let start = Instant::now();
    let deadline = start + duration;
    let ops = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let work = &work;
                s.spawn(move || work(t, deadline))
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).sum()
    });
    (ops, start.elapsed().as_secs_f64())
}

/// Appends `e` to a file's extent list, merging with the last extent when contiguous (up
/// to ext4's 32,768-block extent limit).
fn push_extent(extents: &mut Vec<Extent>, e: Extent) {
    match extents.last_mut() {
        Some(last) if last.end() == e.start && last.len + e.len <= 32768 => last.len += e.len,
        _ => extents.push(e),
    }
}

/// fallocate2: per thread, 8 KiB allocations up to 1 MiB, then free all; repeat.
fn fallocate2(config: AllocatorConfig, threads: usize, duration: Duration) -> Run {
    let alloc = BlockAllocator::empty(geometry(), config);
    let (ops, secs) = timed(threads, duration, |t, deadline| {
        let mut ops = 0u64;
        let mut window = ReservationWindow::new();
        let mut extents: Vec<Extent> = Vec::new();
        while Instant::now() < deadline {
            let mut end: Option<u64> = None;
            for _ in 0..128 {
                let mut want = 2;
                while want > 0 {
                    let e = alloc
                        .allocate_append(&mut window, end, want, t, t as u64 + 1)
                        .expect("volume is large enough");
                    want -= e.len;
                    end = Some(e.end());
                    push_extent(&mut extents, e);
                }
                ops += 1;
            }
            for e in extents.drain(..) {
                alloc.free(e, t).unwrap();
            }
            alloc.release_window(&mut window, t);
        }
        ops
    });
    block_run(&alloc, ops, secs)
}

/// append: per thread, 4 KiB appends up to `bytes`; the run and extents per file.
fn append(config: AllocatorConfig, threads: usize, bytes: u64) -> (Run, Vec<usize>) {
    let alloc = BlockAllocator::empty(geometry(), config);
    let blocks = bytes / BLOCK;
    let start = Instant::now();
    let files: Vec<Vec<Extent>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let alloc = &alloc;
                s.spawn(move || {
                    let mut window = ReservationWindow::new();
                    let mut extents: Vec<Extent> = Vec::new();
                    for _ in 0..blocks {
                        let goal = extents.last().map(|e| e.end());
                        let e = alloc
                            .allocate_append(&mut window, goal, 1, t, t as u64 + 1)
                            .expect("volume is large enough");
                        push_extent(&mut extents, e);
                    }
                    extents
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let secs = start.elapsed().as_secs_f64();
    (
        block_run(&alloc, blocks * threads as u64, secs),
        files.iter().map(Vec::len).collect(),
    )
}

/// Small files: per thread, 1,024 files of 1 to 4 blocks, then all freed; repeat. Also
/// returns the mean number of contiguous runs one batch of 1,024 files occupies.
fn small_files(config: AllocatorConfig, threads: usize, duration: Duration) -> (Run, f64) {
    let alloc = BlockAllocator::empty(geometry(), config);
    let runs = std::sync::Mutex::new((0u64, 0u64));
    let (ops, secs) = timed(threads, duration, |t, deadline| {
        let mut ops = 0u64;
        let mut files: Vec<Extent> = Vec::with_capacity(1024);
        let (mut batches, mut batch_runs) = (0u64, 0u64);
        while Instant::now() < deadline {
            for i in 0..1024u32 {
                let len = 1 + (i * 7 + t as u32) % 4;
                // Each file is its own stream (its inode number).
                let file = ((t as u64) << 32) | (ops + u64::from(i));
                files.push(
                    alloc
                        .allocate_small_file(len, t, file)
                        .expect("volume is large enough"),
                );
            }
            ops += 1024;
            batches += 1;
            batch_runs += 1 + files
                .windows(2)
                .filter(|w| w[0].end() != w[1].start)
                .count() as u64;
            for e in files.drain(..) {
                alloc.free(e, t).unwrap();
            }
        }
        let mut r = runs.lock().unwrap();
        r.0 += batches;
        r.1 += batch_runs;
        ops
    });
    let (batches, batch_runs) = runs.into_inner().unwrap();
    (
        block_run(&alloc, ops, secs),
        batch_runs as f64 / batches.max(1) as f64,
    )
}

/// Where the creators of the create workloads meet.
#[derive(Clone, Copy)]
enum Creators {
    /// Each thread in its own directory (all under one top-level directory, so in one flex
    /// group), 1,024 files per batch.
    OwnDirectories,
    /// Every thread in the same directory, 1,024 files per batch.
    OneSharedDirectory,
    /// A volume of 8 groups of 1,024 inodes filled but for 16 inodes per thread and 64
    /// more; each thread in its own directory, 16 files per batch.
    NearlyFull,
}

/// Creates: a directory under one shared top-level directory (per thread, or one for all),
/// a batch of files in it, then all removed; repeat.
fn creates(creators: Creators, locking: GroupLocking, threads: usize, duration: Duration) -> Run {
    // Free blocks kept per flex group, as e4 keeps them for Orlov.
    let blocks = BlockAllocator::empty(geometry(), AllocatorConfig::default())
        .with_flex_groups(inode_geometry().groups_per_flex);
    let (geometry, batch) = match creators {
        Creators::NearlyFull => (
            InodeGeometry {
                groups: 8,
                inodes_per_group: 1024,
                groups_per_flex: 4,
                first_inode: 11,
            },
            16,
        ),
        _ => (inode_geometry(), 1024),
    };
    let inodes = InodeAllocator::empty(geometry, locking, 64);
    let top = inodes
        .allocate(
            &InodeRequest {
                parent: 2,
                parent_hint: None,
                kind: InodeKind::TopDirectory { name_hash: 12345 },
                slot: 0,
            },
            &blocks,
        )
        .unwrap();
    let shared_dir = inodes
        .allocate(
            &InodeRequest {
                parent: top.ino,
                parent_hint: Some(top.group),
                kind: InodeKind::Directory,
                slot: 0,
            },
            &blocks,
        )
        .unwrap();
    if let Creators::NearlyFull = creators {
        let keep_free = (threads * batch + 64) as u64;
        while inodes.free_inodes() > keep_free {
            inodes
                .allocate(
                    &InodeRequest {
                        parent: shared_dir.ino,
                        parent_hint: None,
                        kind: InodeKind::Other,
                        slot: 0,
                    },
                    &blocks,
                )
                .unwrap();
        }
    }
    // Counts from the timed part only.
    let s = inodes.stats();
    let (group_before, global_before) = (s.group_locks.snapshot(), s.global_lock.snapshot());
    let counter_before = counter_writes(inodes.counter_stats());
    let (examined_before, words_before) = (s.groups_examined.get(), s.words_scanned.get());
    let (ops, secs) = timed(threads, duration, |t, deadline| {
        let mut ops = 0u64;
        let request = |parent: u32, hint: Option<u32>, kind: InodeKind| InodeRequest {
            parent,
            parent_hint: hint,
            kind,
            slot: t,
        };
        let dir = match creators {
            Creators::OneSharedDirectory => shared_dir,
            _ => inodes
                .allocate(
                    &request(top.ino, Some(top.group), InodeKind::Directory),
                    &blocks,
                )
                .unwrap(),
        };
        let mut files = Vec::with_capacity(batch);
        let mut hint = None;
        while Instant::now() < deadline {
            for _ in 0..batch {
                let new = inodes
                    .allocate(&request(dir.ino, hint, InodeKind::Other), &blocks)
                    .expect("enough inodes");
                hint = Some(new.group);
                files.push(new.ino);
            }
            for ino in files.drain(..) {
                inodes.free(ino, false, t).unwrap();
            }
            ops += 2 * batch as u64;
        }
        ops
    });
    let s = inodes.stats();
    Run {
        ops,
        secs,
        group: sub(s.group_locks.snapshot(), group_before),
        shared: sub(s.global_lock.snapshot(), global_before),
        shared_atomics: counter_writes(inodes.counter_stats()) - counter_before,
        inode_free_locks: s.free_locks.snapshot(),
        inode_groups_examined: s.groups_examined.get() - examined_before,
        inode_bitmap_words: s.words_scanned.get() - words_before,
        ..Run::default()
    }
}

/// Repeats a run and summarizes: mean and standard deviation of ops/s, and the lock
/// counts summed over all repeats.
struct Summary {
    mean: f64,
    sd: f64,
    total: Run,
}

fn repeat(n: usize, mut run: impl FnMut() -> Run) -> Summary {
    let runs: Vec<Run> = (0..n).map(|_| run()).collect();
    let rates: Vec<f64> = runs.iter().map(|r| r.ops as f64 / r.secs).collect();
    let mean = rates.iter().sum::<f64>() / n as f64;
    let var = rates.iter().map(|r| (r - mean).powi(2)).sum::<f64>() / (n.max(2) - 1) as f64;
    let mut total = Run::default();
    for r in &runs {
        total.ops += r.ops;
        total.secs += r.secs;
        total.group = add(total.group, r.group);
        total.packing = add(total.packing, r.packing);
        total.shared_atomics += r.shared_atomics;
        total.index_searches += r.index_searches;
        total.index_words += r.index_words;
        total.inode_free_locks = add(total.inode_free_locks, r.inode_free_locks);
        total.inode_groups_examined += r.inode_groups_examined;
        total.inode_bitmap_words += r.inode_bitmap_words;
        total.shared = add(total.shared, r.shared);
    }
    Summary {
        mean,
        sd: var.sqrt(),
        total,
    }
}

/// The append pattern's table cells: lock columns, extents per file, mean extent size.
fn append_cell(config: AllocatorConfig, threads: usize, bytes: u64, repeats: usize) -> String {
    let mut extents = Vec::new();
    let s = repeat(repeats, || {
        let (run, e) = append(config, threads, bytes);
        extents.extend(e);
        run
    });
    let mean_extents = extents.iter().sum::<usize>() as f64 / extents.len() as f64;
    format!(
        "{} | {mean_extents:.1} | {:.2} MiB",
        lock_columns(&s),
        bytes as f64 / mean_extents / (1 << 20) as f64
    )
}

fn per_op(n: u64, ops: u64) -> f64 {
    n as f64 / ops.max(1) as f64
}

/// The columns every table shares: ops/s ± sd, then lock traffic per operation.
fn lock_columns(s: &Summary) -> String {
    let t = &s.total;
    format!(
        "{:.0} ± {:.0} | {:.3} | {:.4} | {:.4} | {:.3} | {:.4} | {:.4} | {:.4} | {:.3}",
        s.mean,
        s.sd,
        per_op(t.group.acquisitions, t.ops),
        per_op(t.group.contended, t.ops),
        per_op(t.group.try_skips, t.ops),
        per_op(t.shared.acquisitions, t.ops),
        per_op(t.shared.contended, t.ops),
        per_op(t.shared_atomics, t.ops),
        per_op(t.index_searches, t.ops),
        per_op(t.index_words, t.ops),
    )
}

const LOCK_HEADER: &str = "ops/s (mean ± sd) | group locks/op | contended/op | try-skips/op | shared locks/op | shared contended/op | shared atomic writes/op | index searches/op | index words/op";
/// The alignment row for LOCK_HEADER and `extra` more numeric columns.
fn align_row(leading: usize, extra: usize) -> String {
    format!("|{}{}", "---|".repeat(leading), "---:|".repeat(9 + extra))
}

fn main() {
    let mut args = std::env::args().skip(1);
    let seconds: f64 = args.next().and_then(|s| s.parse().ok()).unwrap_or(1.0);
    let repeats: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(3).max(1);
    // Optionally only some workloads: a comma-separated list of section names.
    let only: Option<String> = args.next();
    let wanted = |section: &str| {
        only.as_ref()
            .is_none_or(|o| o.split(',').any(|s| s == section))
    };
    let duration = Duration::from_secs_f64(seconds);
    let block_configs: Vec<_> = configs()
        .into_iter()
        .filter(|(name, _)| *name != "e4 - small-file packing")
        .collect();

    if wanted("fallocate2") {
        println!("## fallocate2 ({seconds} s per run, {repeats} runs per cell)\n");
        println!("| config | threads | {LOCK_HEADER} |");
        println!("{}", align_row(1, 1));
        for (name, config) in &block_configs {
            for threads in THREADS {
                let s = repeat(repeats, || fallocate2(*config, threads, duration));
                println!("| {name} | {threads} | {} |", lock_columns(&s));
            }
        }
    }
    if wanted("append") {
        println!("\n## append: 4 KiB appends, 64 MiB per thread ({repeats} runs per cell)\n");
        println!("| config | threads | {LOCK_HEADER} | extents per file | mean extent |");
        println!("{}", align_row(1, 3));
        for (name, config) in &block_configs {
            for threads in THREADS {
                let cell = append_cell(*config, threads, 64 << 20, repeats);
                println!("| {name} | {threads} | {cell} |");
            }
        }

        println!("\n## append: 8 threads x 256 MiB, 4 KiB appends\n");
        println!("| config | {LOCK_HEADER} | extents per file | mean extent |");
        println!("{}", align_row(1, 2));
        for (name, config) in &block_configs {
            println!("| {name} | {} |", append_cell(*config, 8, 256 << 20, 1));
        }
    }
    if wanted("small") {
        println!("\n## small files: 1 to 4 blocks, 1,024 per batch ({seconds} s per run, {repeats} runs per cell)\n");
        println!("| config | threads | {LOCK_HEADER} | packing locks/op | packing contended/op | runs per batch |");
        println!("{}", align_row(1, 4));
        for (name, config) in configs().into_iter().filter(|(name, _)| {
            [
                "global lock",
                "ext4 < 6.17",
                "e4",
                "e4 - small-file packing",
            ]
            .contains(name)
        }) {
            for threads in THREADS {
                let mut runs = 0.0;
                let s = repeat(repeats, || {
                    let (run, r) = small_files(config, threads, duration);
                    runs += r / repeats as f64;
                    run
                });
                let p = s.total.packing;
                println!(
                    "| {name} | {threads} | {} | {:.3} | {:.4} | {runs:.1} |",
                    lock_columns(&s),
                    per_op(p.acquisitions, s.total.ops),
                    per_op(p.contended, s.total.ops),
                );
            }
        }
    }
    for (section, creators, title) in [
        ("create", Creators::OwnDirectories, "create: 1,024 files per directory (one per thread), then removed"),
        ("create-shared", Creators::OneSharedDirectory, "create in one shared directory: 1,024 files per thread, then removed"),
        ("create-full", Creators::NearlyFull, "create on a nearly full volume (8 groups of 1,024 inodes): 16 files per thread, then removed"),
    ] {
        if !wanted(section) {
            continue;
        }
        println!("\n## {title} ({seconds} s per run, {repeats} runs per cell)\n");
        println!(
        "| inode group locking | threads | {LOCK_HEADER} | free locks/op | free contended/op | groups examined/op | bitmap words/op |"
    );
        println!("{}", align_row(1, 5));
        for (name, locking) in [
            ("global lock", GroupLocking::Global),
            ("blocking (ext4)", GroupLocking::Blocking),
            ("try-lock skip (e4)", GroupLocking::TrySkip),
        ] {
            for threads in THREADS {
                let s = repeat(repeats, || creates(creators, locking, threads, duration));
                let t = &s.total;
                println!(
                    "| {name} | {threads} | {} | {:.3} | {:.4} | {:.3} | {:.2} |",
                    lock_columns(&s),
                    per_op(t.inode_free_locks.acquisitions, t.ops),
                    per_op(t.inode_free_locks.contended, t.ops),
                    per_op(t.inode_groups_examined, t.ops),
                    per_op(t.inode_bitmap_words, t.ops),
                );
            }
        }
    }
}

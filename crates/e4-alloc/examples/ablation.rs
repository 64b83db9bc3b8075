//! Ablation benchmark of the block allocator (a benchmark, not a test).
//!
//! `cargo run --release -p e4-alloc --example ablation -- [seconds per cell]`
//!
//! Workloads, each thread on its own file:
//! - fallocate2: allocate 8 KiB at a time up to 1 MiB, free everything, repeat (timed).
//! - append: append 4 KiB at a time up to 256 MiB per file (sized), reporting the layout.
//!
//! Configurations: one global lock; ext4 before 6.17 (blocking group locks, one goal under
//! a lock, no ordered index, no reservation windows); e4; and e4 with each mechanism
//! switched off in turn. Lock counts are per operation.

use std::time::{Duration, Instant};

use e4_alloc::{
    AllocatorConfig, BlockAllocator, Extent, Geometry, GoalPolicy, GroupLocking, ReservationWindow,
};

const BLOCK: u64 = 4096;

fn geometry() -> Geometry {
    // 512 groups of 32,768 4 KiB blocks: a 64 GiB volume.
    Geometry {
        first_data_block: 0,
        blocks_per_group: 32768,
        blocks: 512 * 32768,
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
    ]
}

struct Cell {
    ops: u64,
    secs: f64,
    group_acq: u64,
    group_contended: u64,
    try_skips: u64,
    shared_acq: u64,
    shared_contended: u64,
}

fn measure(alloc: &BlockAllocator, ops: u64, secs: f64) -> Cell {
    let s = alloc.stats();
    let (g, gl, gg) = (
        s.group_locks.snapshot(),
        s.global_lock.snapshot(),
        s.goal_lock.snapshot(),
    );
    Cell {
        ops,
        secs,
        group_acq: g.acquisitions,
        group_contended: g.contended,
        try_skips: g.try_skips,
        shared_acq: gl.acquisitions + gg.acquisitions,
        shared_contended: gl.contended + gg.contended,
    }
}

/// fallocate2: per thread, 8 KiB allocations up to 1 MiB, then free all; repeat.
fn fallocate2(config: AllocatorConfig, threads: usize, duration: Duration) -> Cell {
    let alloc = BlockAllocator::empty(geometry(), config);
    let start = Instant::now();
    let ops: u64 = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let alloc = &alloc;
                s.spawn(move || {
                    let mut ops = 0u64;
                    let mut window = ReservationWindow::new();
                    let mut extents: Vec<Extent> = Vec::new();
                    while start.elapsed() < duration {
                        let mut end: Option<u64> = None;
                        for _ in 0..128 {
                            let mut want = 2;
                            while want > 0 {
                                let e = alloc
                                    .allocate_append(&mut window, end, want, t, t as u64 + 1)
                                    .expect("volume is large enough");
                                want -= e.len;
                                end = Some(e.end());
                                match extents.last_mut() {
                                    Some(last) if last.end() == e.start => last.len += e.len,
                                    _ => extents.push(e),
                                }
                            }
                            ops += 1;
                        }
                        for e in extents.drain(..) {
                            alloc.free(e, t).unwrap();
                        }
                        alloc.release_window(&mut window, t).unwrap();
                    }
                    ops
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).sum()
    });
    measure(&alloc, ops, start.elapsed().as_secs_f64())
}

/// append: per thread, 4 KiB appends up to `bytes`; returns the cell and extents per file.
fn append(config: AllocatorConfig, threads: usize, bytes: u64) -> (Cell, Vec<usize>) {
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
                        match extents.last_mut() {
                            Some(last) if last.end() == e.start && last.len < 32768 => {
                                last.len += e.len
                            }
                            _ => extents.push(e),
                        }
                    }
                    extents
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let secs = start.elapsed().as_secs_f64();
    (
        measure(&alloc, blocks * threads as u64, secs),
        files.iter().map(Vec::len).collect(),
    )
}

fn per_op(n: u64, ops: u64) -> f64 {
    n as f64 / ops.max(1) as f64
}

fn main() {
    let seconds: f64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(1.0);
    let duration = Duration::from_secs_f64(seconds);
    let thread_counts = [1usize, 2, 4, 8, 16, 32, 64];
    println!("## fallocate2 ({seconds} s per cell)\n");
    println!("| config | threads | ops/s | group locks/op | contended/op | try-skips/op | shared locks/op | shared contended/op |");
    println!("|---|---:|---:|---:|---:|---:|---:|---:|");
    for (name, config) in configs() {
        for &threads in &thread_counts {
            let c = fallocate2(config, threads, duration);
            println!(
                "| {name} | {threads} | {:.0} | {:.3} | {:.4} | {:.4} | {:.3} | {:.4} |",
                c.ops as f64 / c.secs,
                per_op(c.group_acq, c.ops),
                per_op(c.group_contended, c.ops),
                per_op(c.try_skips, c.ops),
                per_op(c.shared_acq, c.ops),
                per_op(c.shared_contended, c.ops),
            );
        }
    }
    println!("\n## append: 8 threads x 256 MiB, 4 KiB appends\n");
    println!("| config | appends/s | extents per file (mean) | mean extent | group locks/op | contended/op | shared locks/op |");
    println!("|---|---:|---:|---:|---:|---:|---:|");
    for (name, config) in configs() {
        let bytes = 256u64 << 20;
        let (c, extents) = append(config, 8, bytes);
        let mean_extents = extents.iter().sum::<usize>() as f64 / extents.len() as f64;
        let mean_extent_mib = bytes as f64 / mean_extents / (1 << 20) as f64;
        println!(
            "| {name} | {:.0} | {:.1} | {:.2} MiB | {:.4} | {:.5} | {:.4} |",
            c.ops as f64 / c.secs,
            mean_extents,
            mean_extent_mib,
            per_op(c.group_acq, c.ops),
            per_op(c.group_contended, c.ops),
            per_op(c.shared_acq, c.ops),
        );
    }
}

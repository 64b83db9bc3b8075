//! The block allocator against a reference model, under stress from many more threads than
//! cores, and racing for the last free blocks.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use e4_alloc::{
    AllocError, AllocRequest, AllocatorConfig, BlockAllocator, Extent, Geometry, GoalPolicy,
    GroupLocking, ReservationWindow, TransactionFrees,
};
use proptest::prelude::*;
use rand::{Rng, SeedableRng};

fn geometry(groups: u32, blocks_per_group: u32) -> Geometry {
    Geometry {
        first_data_block: 1,
        blocks_per_group,
        blocks: 1 + u64::from(groups) * u64::from(blocks_per_group) - 37,
    }
}

fn configs() -> Vec<AllocatorConfig> {
    let e4 = AllocatorConfig::default();
    vec![
        e4,
        AllocatorConfig {
            locking: GroupLocking::Blocking,
            goals: GoalPolicy::SharedLocked,
            use_index: false,
            ..e4
        },
        AllocatorConfig {
            locking: GroupLocking::Global,
            window_cap: 0,
            ..e4
        },
    ]
}

/// Marks an extent's blocks in a set, failing if any was already there.
fn claim(set: &mut BTreeSet<u64>, e: Extent) -> Result<(), String> {
    for b in e.start..e.end() {
        if !set.insert(b) {
            return Err(format!("block {b} of {e:?} handed out twice"));
        }
    }
    Ok(())
}

#[derive(Debug, Clone)]
enum Op {
    Allocate {
        goal: Option<u64>,
        len: u32,
        min_len: u32,
    },
    Append {
        file: usize,
        len: u32,
    },
    Free {
        pick: usize,
    },
    FreeInTxn {
        pick: usize,
    },
    Commit,
    Close {
        file: usize,
    },
    SmallFile {
        len: u32,
        slot: usize,
    },
    ReleasePacking,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (1u32..20, 0usize..3).prop_map(|(len, slot)| Op::SmallFile { len, slot }),
        Just(Op::ReleasePacking),
        (proptest::option::of(0u64..8000), 1u32..300, 1u32..300).prop_map(|(goal, len, min)| {
            Op::Allocate {
                goal,
                len,
                min_len: min.min(len),
            }
        }),
        (0usize..3, 1u32..40).prop_map(|(file, len)| Op::Append { file, len }),
        any::<usize>().prop_map(|pick| Op::Free { pick }),
        any::<usize>().prop_map(|pick| Op::FreeInTxn { pick }),
        Just(Op::Commit),
        (0usize..3).prop_map(|file| Op::Close { file }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]
    /// No block is ever handed out twice; free + used + in windows + pending = total at
    /// every step; the index always agrees with the groups.
    #[test]
    fn matches_reference_model(ops in proptest::collection::vec(op(), 1..120), config in 0usize..3) {
        let geo = geometry(8, 1024);
        let alloc = BlockAllocator::empty(geo, configs()[config]);
        let total = alloc.free_blocks();
        let mut used = BTreeSet::new();
        let mut held: Vec<Extent> = Vec::new();
        let mut windows: [ReservationWindow; 3] = Default::default();
        let mut txn = TransactionFrees::new(1);
        let mut pending = 0u64;
        let mut txn_id = 1;
        for op in ops {
            match op {
                Op::Allocate { goal, len, min_len } => {
                    match alloc.allocate(AllocRequest { goal: goal.map(|g| g + 1), len, min_len, slot: 0, stream: 7 }) {
                        Ok(e) => {
                            prop_assert!(e.len >= min_len && e.len <= len);
                            claim(&mut used, e).map_err(TestCaseError::fail)?;
                            held.push(e);
                        }
                        Err(err) => prop_assert_eq!(err, AllocError::NoSpace),
                    }
                }
                Op::Append { file, len } => {
                    if let Ok(e) = alloc.allocate_append(&mut windows[file], None, len, 0, file as u64) {
                        claim(&mut used, e).map_err(TestCaseError::fail)?;
                        held.push(e);
                    }
                }
                Op::Free { pick } if !held.is_empty() => {
                    let e = held.swap_remove(pick % held.len());
                    alloc.free(e, 0).unwrap();
                    (e.start..e.end()).for_each(|b| { used.remove(&b); });
                }
                Op::FreeInTxn { pick } if !held.is_empty() => {
                    let e = held.swap_remove(pick % held.len());
                    alloc.free_in_transaction(e, &mut txn).unwrap();
                    pending += u64::from(e.len);
                    // Pending blocks stay "used" until the commit.
                }
                Op::Commit => {
                    let done = std::mem::replace(&mut txn, { txn_id += 1; TransactionFrees::new(txn_id) });
                    alloc.commit_frees(done, 0).unwrap();
                    pending = 0;
                    used = held.iter().flat_map(|e| e.start..e.end()).collect();
                }
                Op::Close { file } => alloc.release_window(&mut windows[file], 0).unwrap(),
                Op::SmallFile { len, slot } => {
                    match alloc.allocate_small_file(len, slot, 9) {
                        Ok(e) => {
                            prop_assert!(e.len <= len);
                            claim(&mut used, e).map_err(TestCaseError::fail)?;
                            held.push(e);
                        }
                        Err(err) => prop_assert_eq!(err, AllocError::NoSpace),
                    }
                }
                Op::ReleasePacking => alloc.release_small_file_windows().unwrap(),
                _ => {}
            }
            let in_windows: u64 = windows.iter().map(|w| u64::from(w.remaining())).sum::<u64>()
                + alloc.small_file_window_blocks();
            let live: u64 = held.iter().map(|e| u64::from(e.len)).sum();
            prop_assert_eq!(alloc.free_blocks() + live + in_windows + pending, total);
            prop_assert_eq!(alloc.pending_blocks(), pending);
            prop_assert_eq!(alloc.free_blocks_for_statfs(), alloc.free_blocks() + in_windows);
            prop_assert!(alloc.index_is_consistent());
        }
    }
}

/// 64 threads on 2 cores: mixed allocations, appends through windows, packed small files,
/// frees and transactional frees. Afterwards nothing overlaps and every block is accounted for.
#[test]
fn stress_many_more_threads_than_cores() {
    for config in configs() {
        let geo = geometry(32, 2048);
        let alloc = BlockAllocator::empty(geo, config);
        let total = alloc.free_blocks();
        let survivors = Mutex::new(Vec::new());
        let in_windows = AtomicU64::new(0);
        std::thread::scope(|s| {
            for t in 0..64usize {
                let (alloc, survivors, in_windows) = (&alloc, &survivors, &in_windows);
                s.spawn(move || {
                    let mut rng = rand::rngs::StdRng::seed_from_u64(t as u64);
                    let mut mine: Vec<Extent> = Vec::new();
                    let mut window = ReservationWindow::new();
                    let mut txn = TransactionFrees::new(t as u64 * 1000);
                    for i in 0..400 {
                        match rng.gen_range(0..10) {
                            0..=3 => {
                                let len = rng.gen_range(1..64);
                                let req = AllocRequest {
                                    goal: None,
                                    len,
                                    min_len: 1,
                                    slot: t,
                                    stream: t as u64,
                                };
                                if let Ok(e) = alloc.allocate(req) {
                                    mine.push(e);
                                }
                            }
                            4..=5 => {
                                if let Ok(e) = alloc.allocate_append(
                                    &mut window,
                                    None,
                                    rng.gen_range(1..8),
                                    t,
                                    t as u64,
                                ) {
                                    mine.push(e);
                                }
                            }
                            6..=7 if !mine.is_empty() => {
                                let e = mine.swap_remove(rng.gen_range(0..mine.len()));
                                alloc.free(e, t).unwrap();
                            }
                            8 if !mine.is_empty() => {
                                let e = mine.swap_remove(rng.gen_range(0..mine.len()));
                                alloc.free_in_transaction(e, &mut txn).unwrap();
                            }
                            9 if i % 2 == 0 => {
                                // Slots shared by four threads each: a busy packing window
                                // sends the file down the normal path.
                                if let Ok(e) = alloc.allocate_small_file(
                                    rng.gen_range(1..=16),
                                    t / 4,
                                    t as u64,
                                ) {
                                    mine.push(e);
                                }
                            }
                            _ if i % 50 == 0 => {
                                let done = std::mem::replace(
                                    &mut txn,
                                    TransactionFrees::new(t as u64 * 1000 + i),
                                );
                                alloc.commit_frees(done, t).unwrap();
                            }
                            _ => {}
                        }
                    }
                    // Half the threads close their file; the others keep the window open,
                    // and its blocks must still be accounted for.
                    if rng.gen_bool(0.5) {
                        alloc.release_window(&mut window, t).unwrap();
                    } else {
                        in_windows.fetch_add(u64::from(window.remaining()), Ordering::Relaxed);
                    }
                    alloc.commit_frees(txn, t).unwrap();
                    survivors.lock().unwrap().extend(mine);
                });
            }
        });
        let survivors = survivors.into_inner().unwrap();
        let mut used = BTreeSet::new();
        for e in &survivors {
            claim(&mut used, *e).unwrap();
        }
        let live: u64 = survivors.iter().map(|e| u64::from(e.len)).sum();
        assert_eq!(
            alloc.free_blocks()
                + live
                + in_windows.load(Ordering::Relaxed)
                + alloc.small_file_window_blocks(),
            total,
            "{config:?}"
        );
        assert_eq!(alloc.pending_blocks(), 0);
        assert!(alloc.index_is_consistent(), "{config:?}");
    }
}

/// N threads race for the last K free blocks in small requests: exactly K are handed out.
#[test]
fn enospc_race_hands_out_exactly_what_is_free() {
    for config in configs() {
        let geo = geometry(4, 1024);
        let alloc = BlockAllocator::empty(geo, config);
        // Fill all but K blocks.
        let total = alloc.free_blocks();
        let k = 777u64;
        let mut filler = total - k;
        while filler > 0 {
            let len = filler.min(500) as u32;
            let e = alloc
                .allocate(AllocRequest {
                    goal: None,
                    len,
                    min_len: 1,
                    slot: 0,
                    stream: 1,
                })
                .unwrap();
            filler -= u64::from(e.len);
        }
        assert_eq!(alloc.free_blocks(), k);
        let handed = AtomicU64::new(0);
        std::thread::scope(|s| {
            for t in 0..16usize {
                let (alloc, handed) = (&alloc, &handed);
                s.spawn(move || loop {
                    let req = AllocRequest {
                        goal: None,
                        len: 1 + (t as u32 % 3),
                        min_len: 1,
                        slot: t,
                        stream: t as u64,
                    };
                    match alloc.allocate(req) {
                        Ok(e) => {
                            handed.fetch_add(u64::from(e.len), Ordering::Relaxed);
                        }
                        Err(AllocError::NoSpace) => break,
                        Err(other) => panic!("{other}"),
                    }
                });
            }
        });
        assert_eq!(handed.load(Ordering::Relaxed), k, "{config:?}");
        assert_eq!(alloc.free_blocks(), 0);
    }
}

#[test]
fn bad_frees_are_errors() {
    let alloc = BlockAllocator::empty(geometry(2, 1024), AllocatorConfig::default());
    let e = alloc
        .allocate(AllocRequest {
            goal: None,
            len: 10,
            min_len: 10,
            slot: 0,
            stream: 0,
        })
        .unwrap();
    alloc.free(e, 0).unwrap();
    assert_eq!(alloc.free(e, 0), Err(AllocError::BadFree(e)));
    let outside = Extent {
        start: 1 << 40,
        len: 1,
    };
    assert_eq!(alloc.free(outside, 0), Err(AllocError::BadFree(outside)));
    let mut txn = TransactionFrees::new(9);
    assert!(alloc
        .free_in_transaction(Extent { start: 0, len: 1 }, &mut txn)
        .is_err());
}

/// Small files from one slot are packed one after another, apart from another slot's, and
/// cost a group lock only once per packing window.
#[test]
fn small_files_are_packed_per_slot() {
    let alloc = BlockAllocator::empty(geometry(8, 4096), AllocatorConfig::default());
    let mut files: [Vec<Extent>; 2] = Default::default();
    for i in 0..400u32 {
        for (slot, list) in files.iter_mut().enumerate() {
            let e = alloc
                .allocate_small_file(1 + (i + slot as u32) % 4, slot, 1 + slot as u64)
                .unwrap();
            list.push(e);
        }
    }
    for list in &files {
        let runs = 1 + list.windows(2).filter(|w| w[0].end() != w[1].start).count();
        // About 1,000 blocks each: contiguous within each 512-block window.
        assert!(runs <= 3, "one slot's 400 small files lie in {runs} runs");
    }
    let locks = alloc.stats().group_locks.snapshot().acquisitions;
    assert!(locks <= 10, "{locks} group locks for 800 small files");
    // Requests over the small-file size are not packed.
    let big = alloc.allocate_small_file(100, 0, 1).unwrap();
    assert_ne!(big.start, files[0].last().unwrap().end());
    // Packing windows are free space for statfs, and are given back on request.
    let in_windows = alloc.small_file_window_blocks();
    assert!(in_windows > 0);
    assert_eq!(
        alloc.free_blocks_for_statfs(),
        alloc.free_blocks() + in_windows
    );
    alloc.release_small_file_windows().unwrap();
    assert_eq!(alloc.small_file_window_blocks(), 0);
    assert_eq!(alloc.free_blocks_for_statfs(), alloc.free_blocks());
}

/// Blocks parked in packing windows never cause a false "no space".
#[test]
fn packing_windows_are_reclaimed_before_no_space() {
    let alloc = BlockAllocator::empty(geometry(2, 1024), AllocatorConfig::default());
    let total = alloc.free_blocks();
    for slot in 0..3 {
        alloc.allocate_small_file(1, slot, 1).unwrap();
    }
    assert!(alloc.small_file_window_blocks() >= 3 * 500);
    // Everything else, one block at a time through the normal path.
    let mut taken = 3;
    while alloc
        .allocate(AllocRequest {
            goal: None,
            len: 1,
            min_len: 1,
            slot: 5,
            stream: 2,
        })
        .is_ok()
    {
        taken += 1;
    }
    assert_eq!(taken, total);
    assert_eq!(alloc.small_file_window_blocks(), 0);
}

/// A file reopened for appending gets a first window the size of what it holds, and a
/// request is rounded up to a power of two (mballoc's normalization).
#[test]
fn windows_are_normalized_to_the_file_size() {
    let alloc = BlockAllocator::empty(geometry(8, 4096), AllocatorConfig::default());
    let mut reopened = ReservationWindow::for_file(300);
    alloc.allocate_append(&mut reopened, None, 1, 0, 1).unwrap();
    assert_eq!(reopened.remaining(), 511);
    let mut fresh = ReservationWindow::new();
    alloc.allocate_append(&mut fresh, None, 100, 0, 2).unwrap();
    assert_eq!(fresh.remaining(), 28);
}

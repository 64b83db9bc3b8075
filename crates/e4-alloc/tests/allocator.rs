//! The block allocator against a reference model, under stress from many more threads than
//! cores, and racing for the last free blocks.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use e4_alloc::{
    AllocError, AllocRequest, AllocatorConfig, BadFree, BlockAllocator, Extent, Geometry,
    GoalPolicy, GroupLocking, ReservationWindow, Reserve, TransactionFrees,
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

/// The blocks the on-disk bitmaps (as the allocator would persist them) mark in use.
fn disk_blocks(alloc: &BlockAllocator, geo: &Geometry) -> BTreeSet<u64> {
    let mut out = BTreeSet::new();
    for g in 0..geo.groups() {
        let blocks = geo.group_blocks(g);
        let (bitmap, free) = alloc
            .group_bitmap_for_disk(g, geo.blocks_per_group.div_ceil(8) as usize)
            .unwrap();
        let mut used = 0;
        for b in 0..blocks {
            if bitmap[(b / 8) as usize] & (1 << (b % 8)) != 0 {
                out.insert(geo.block_at(g, b));
                used += 1;
            }
        }
        assert_eq!(
            free,
            blocks - used,
            "group {g}: free count disagrees with its bitmap"
        );
    }
    out
}

/// The longest run of blocks inside one group that is free in the allocator's view: not on
/// disk as used, not in a window (reservation or packing) and not pending.
fn longest_free_run(
    alloc: &BlockAllocator,
    geo: &Geometry,
    windows: &[ReservationWindow],
    pending: &[Extent],
) -> u32 {
    let mut taken = disk_blocks(alloc, geo);
    let reserved = windows.iter().filter_map(|w| w.unused());
    for e in reserved.chain(pending.iter().copied()) {
        taken.extend(e.start..e.end());
    }
    let mut longest = 0;
    for g in 0..geo.groups() {
        let mut run = 0;
        for b in 0..geo.group_blocks(g) {
            if taken.contains(&geo.block_at(g, b)) {
                run = 0;
            } else {
                run += 1;
                longest = longest.max(run);
            }
        }
    }
    // Packing windows are taken back before "no space", so they do not count as taken.
    assert_eq!(
        alloc.small_file_window_blocks(),
        0,
        "an idle packing window survived no space"
    );
    longest
}

/// Every block of some extents.
fn blocks_of(extents: &[Extent]) -> BTreeSet<u64> {
    extents.iter().flat_map(|e| e.start..e.end()).collect()
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
        let mut pending_runs: Vec<Extent> = Vec::new();
        let mut txn_id = 1;
        for op in ops {
            match op {
                Op::Allocate { goal, len, min_len } => {
                    match alloc.allocate(AllocRequest { goal: goal.map(|g| g + 1), len, min_len, slot: 0, stream: 7, reserve: Reserve::None }) {
                        Ok(e) => {
                            prop_assert!(e.len >= min_len && e.len <= len);
                            claim(&mut used, e).map_err(TestCaseError::fail)?;
                            held.push(e);
                        }
                        Err(err) => {
                            prop_assert_eq!(err, AllocError::NoSpace);
                            // "No space" must be true: no run of `min_len` blocks is free
                            // in any group, counting what files and transactions hold.
                            let longest = longest_free_run(&alloc, &geo, &windows, &pending_runs);
                            prop_assert!(longest < min_len, "no space for {} blocks, but a free run of {} exists", min_len, longest);
                        }
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
                    pending_runs.push(e);
                    // Pending blocks stay "used" until the commit.
                }
                Op::Commit => {
                    prop_assert_eq!(blocks_of(&alloc.pending_runs(&txn)), blocks_of(&pending_runs));
                    let done = std::mem::replace(&mut txn, { txn_id += 1; TransactionFrees::new(txn_id) });
                    alloc.commit_frees(done, 0);
                    pending_runs.clear();
                    used = held.iter().flat_map(|e| e.start..e.end()).collect();
                }
                Op::Close { file } => alloc.release_window(&mut windows[file], 0),
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
                Op::ReleasePacking => alloc.release_small_file_windows(),
                _ => {}
            }
            let in_windows: u64 = windows.iter().map(|w| u64::from(w.remaining())).sum::<u64>()
                + alloc.small_file_window_blocks();
            let live: u64 = held.iter().map(|e| u64::from(e.len)).sum();
            let pending: u64 = pending_runs.iter().map(|e| u64::from(e.len)).sum();
            prop_assert_eq!(alloc.free_blocks() + live + in_windows + pending, total);
            prop_assert_eq!(alloc.pending_blocks(), pending);
            prop_assert_eq!(alloc.free_blocks_for_statfs(), alloc.free_blocks() + in_windows);
            prop_assert!(alloc.index_is_consistent());
            // What may be written to disk is exactly the blocks files hold: no window, no
            // packing reservation, no block whose free waits for a commit.
            let on_disk = disk_blocks(&alloc, &geo);
            let held_blocks: BTreeSet<u64> = held.iter().flat_map(|e| e.start..e.end()).collect();
            prop_assert_eq!(on_disk, held_blocks);
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
        let open_windows = Mutex::new(Vec::new());
        std::thread::scope(|s| {
            for t in 0..64usize {
                let (alloc, survivors, in_windows, open_windows) =
                    (&alloc, &survivors, &in_windows, &open_windows);
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
                                    reserve: Reserve::None,
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
                                alloc.commit_frees(done, t);
                            }
                            _ => {}
                        }
                    }
                    // Half the threads close their file; the others keep the window open
                    // (handed to the main thread) and its blocks must still be accounted
                    // for; the main thread drops them unreleased.
                    if rng.gen_bool(0.5) {
                        alloc.release_window(&mut window, t);
                    } else {
                        in_windows.fetch_add(u64::from(window.remaining()), Ordering::Relaxed);
                        open_windows.lock().unwrap().push(window);
                    }
                    alloc.commit_frees(txn, t);
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
        let open = in_windows.load(Ordering::Relaxed);
        assert_eq!(
            alloc.free_blocks() + live + open + alloc.small_file_window_blocks(),
            total,
            "{config:?}"
        );
        // Dropped unreleased, the open windows' blocks come back to the free count once
        // their groups are visited (here, by counting what reservations still hold).
        drop(open_windows.into_inner().unwrap());
        let still_reserved = alloc.reserved_blocks();
        assert_eq!(
            still_reserved,
            alloc.small_file_window_blocks(),
            "{config:?}"
        );
        assert_eq!(
            alloc.free_blocks() + live + still_reserved,
            total,
            "{config:?}"
        );
        assert_eq!(alloc.pending_blocks(), 0);
        assert!(alloc.index_is_consistent(), "{config:?}");
    }
}

/// N threads race for the last K free blocks in small requests: exactly K are handed out.
/// K = 777 is below the limit counter's refill threshold (slots x batch = 4,096), where
/// every reservation goes to the shared pool; K = 20,000 is above it, where slots refill
/// in batches and must be drained exactly as the pool runs dry.
#[test]
fn enospc_race_hands_out_exactly_what_is_free() {
    for (config, k) in configs()
        .into_iter()
        .flat_map(|c| [(c, 777u64), (c, 20_000)])
    {
        let geo = geometry(8, 4096);
        let alloc = BlockAllocator::empty(geo, config);
        // Fill all but K blocks.
        let total = alloc.free_blocks();
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
                    reserve: Reserve::None,
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
                        reserve: Reserve::None,
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
        assert_eq!(handed.load(Ordering::Relaxed), k, "{config:?}, {k} free");
        assert_eq!(alloc.free_blocks(), 0);
    }
}

fn one(alloc: &BlockAllocator, goal: u64, len: u32) -> Extent {
    alloc
        .allocate(AllocRequest {
            goal: Some(goal),
            len,
            min_len: len,
            slot: 0,
            stream: 0,
            reserve: Reserve::None,
        })
        .unwrap()
}

fn refused(extent: Extent, reason: BadFree) -> Result<(), AllocError> {
    Err(AllocError::BadFree { extent, reason })
}

/// A request that cannot have `len` blocks is still served with at least `min_len` (the
/// admission falls back to reserving `min_len`), never refused while they exist.
#[test]
fn short_requests_are_admitted_down_to_min_len() {
    let geo = geometry(1, 1024);
    let alloc = BlockAllocator::empty(geo, AllocatorConfig::default());
    let total = alloc.free_blocks() as u32;
    one(&alloc, 1, total - 5);
    let got = alloc
        .allocate(AllocRequest {
            goal: None,
            len: 10,
            min_len: 3,
            slot: 0,
            stream: 0,
            reserve: Reserve::None,
        })
        .unwrap();
    assert!((3..=5).contains(&got.len), "{got:?}");
    assert_eq!(alloc.free_blocks(), 5 - u64::from(got.len));
}

/// Every kind of bad free is refused with its reason, and changes nothing (findings 2-4).
#[test]
fn bad_frees_are_refused_and_change_nothing() {
    let geo = geometry(2, 1024);
    let alloc = BlockAllocator::empty(geo, AllocatorConfig::default());
    let e = one(&alloc, 100, 10);
    alloc.free(e, 0).unwrap();
    assert_eq!(alloc.free(e, 0), refused(e, BadFree::NotInUse));
    let outside = Extent {
        start: 1 << 40,
        len: 1,
    };
    assert_eq!(
        alloc.free(outside, 0),
        refused(outside, BadFree::OutsideVolume)
    );
    let mut txn = TransactionFrees::new(9);
    let zero = Extent { start: 0, len: 1 };
    assert_eq!(
        alloc.free_in_transaction(zero, &mut txn),
        refused(zero, BadFree::OutsideVolume)
    );
    // A free that touches the unused part of an open window: someone's future blocks.
    let mut window = ReservationWindow::new();
    let first = alloc
        .allocate_append(&mut window, Some(300), 1, 0, 5)
        .unwrap();
    let future = window.unused().unwrap();
    let before = alloc.free_blocks();
    let straddle = Extent {
        start: first.start,
        len: 2,
    };
    assert_eq!(
        alloc.free(straddle, 0),
        refused(straddle, BadFree::Reserved)
    );
    assert_eq!(
        alloc.free_in_transaction(straddle, &mut txn),
        refused(straddle, BadFree::Reserved)
    );
    assert_eq!(alloc.free_blocks(), before);
    assert_eq!(window.unused(), Some(future));
    // The used part of the window is the file's own, and frees normally.
    alloc.free(first, 0).unwrap();
    // A block already waiting in a transaction's frees cannot be freed again.
    let p = one(&alloc, 500, 4);
    alloc.free_in_transaction(p, &mut txn).unwrap();
    assert_eq!(alloc.free(p, 0), refused(p, BadFree::Pending));
    assert_eq!(
        alloc.free_in_transaction(p, &mut txn),
        refused(p, BadFree::Pending)
    );
    alloc.commit_frees(txn, 0);
    assert_eq!(alloc.pending_blocks(), 0);
    alloc.release_window(&mut window, 0);
}

/// A free across two groups whose second part is not in use frees nothing (finding 4).
#[test]
fn a_free_across_groups_is_checked_whole_before_anything_changes() {
    let geo = geometry(2, 1024);
    let alloc = BlockAllocator::empty(geo, AllocatorConfig::default());
    let boundary = geo.block_at(1, 0);
    let tail = one(&alloc, boundary - 8, 8);
    assert_eq!(tail.end(), boundary);
    let both = Extent {
        start: tail.start,
        len: 16,
    };
    let before = alloc.free_blocks();
    assert_eq!(alloc.free(both, 0), refused(both, BadFree::NotInUse));
    let mut txn = TransactionFrees::new(1);
    assert_eq!(
        alloc.free_in_transaction(both, &mut txn),
        refused(both, BadFree::NotInUse)
    );
    assert_eq!(alloc.free_blocks(), before);
    assert_eq!(alloc.pending_blocks(), 0);
    // The first part is still allocated: freeing it alone works, once.
    alloc.free(tail, 0).unwrap();
    assert_eq!(alloc.free(tail, 0), refused(tail, BadFree::NotInUse));
    // Allocated across the boundary, the whole extent frees.
    let left = one(&alloc, boundary - 8, 8);
    let right = one(&alloc, boundary, 8);
    alloc
        .free(
            Extent {
                start: left.start,
                len: left.len + right.len,
            },
            0,
        )
        .unwrap();
    assert_eq!(alloc.free_blocks(), before + 8);
}

/// The system zone (finding 5): a bitmap that shows metadata free is refused as corrupt;
/// metadata is never handed out, even when everything else is taken, and never freed.
#[test]
fn the_system_zone_is_never_handed_out_or_freed() {
    let geo = geometry(3, 1024);
    let zone = [
        Extent { start: 1, len: 40 },
        Extent {
            start: geo.block_at(1, 0),
            len: 3,
        },
        Extent {
            start: geo.block_at(2, 500),
            len: 20,
        },
    ];
    fn bitmap_with(geo: Geometry, marked: &[Extent]) -> impl Fn(u32) -> Vec<u8> + Send + Sync {
        let marked = marked.to_vec();
        move |g: u32| {
            let mut bytes = vec![0u8; 128];
            for e in &marked {
                for b in e.start..e.end() {
                    let (bg, off) = geo.group_of(b);
                    if bg == g {
                        bytes[(off / 8) as usize] |= 1 << (off % 8);
                    }
                }
            }
            bytes
        }
    }
    let corrupt = BlockAllocator::new(
        geo,
        AllocatorConfig::default(),
        bitmap_with(geo, &zone[..2]),
        &zone,
    );
    assert_eq!(
        corrupt.err(),
        Some(AllocError::GroupCorrupt(e4_alloc::GroupDamage {
            group: 2,
            problem: e4_alloc::BitmapProblem::MetadataFree {
                block: geo.block_at(2, 500)
            }
        }))
    );
    let alloc = BlockAllocator::new(
        geo,
        AllocatorConfig::default(),
        bitmap_with(geo, &zone),
        &zone,
    )
    .unwrap();
    let mut taken = BTreeSet::new();
    while let Ok(e) = alloc.allocate(AllocRequest {
        goal: None,
        len: 7,
        min_len: 1,
        slot: 0,
        stream: 3,
        reserve: Reserve::None,
    }) {
        claim(&mut taken, e).unwrap();
    }
    let zone_blocks: BTreeSet<u64> = zone.iter().flat_map(|e| e.start..e.end()).collect();
    assert!(taken.is_disjoint(&zone_blocks));
    let data = geo.blocks - geo.first_data_block;
    assert_eq!(taken.len() as u64 + zone_blocks.len() as u64, data);
    for e in zone {
        assert_eq!(alloc.free(e, 0), refused(e, BadFree::SystemZone));
    }
    // Asked about a run, it names the run's first block in the zone, across groups too.
    let (g1, g2) = (geo.block_at(1, 0), geo.block_at(2, 500));
    assert_eq!(alloc.system_zone_block(0, 1), None);
    assert_eq!(alloc.system_zone_block(0, 2), Some(1));
    assert_eq!(alloc.system_zone_block(41, g1 - 41), None);
    assert_eq!(alloc.system_zone_block(41, 2000), Some(g1));
    assert_eq!(alloc.system_zone_block(g1 + 2, 5), Some(g1 + 2));
    assert_eq!(alloc.system_zone_block(g1 + 3, g2 - g1 - 3), None);
    assert_eq!(alloc.system_zone_block(g2 + 19, 1), Some(g2 + 19));
    assert_eq!(alloc.system_zone_block(g2 + 20, u64::MAX), None);
    // Still on disk as used.
    assert!(zone_blocks.is_subset(&disk_blocks(&alloc, &geo)));
}

/// A window dropped without being released leaks nothing (finding 2): its blocks are never
/// on disk, statfs counts them free, and allocations get them back before "no space".
#[test]
fn dropped_windows_leak_nothing() {
    let geo = geometry(2, 1024);
    let alloc = BlockAllocator::empty(geo, AllocatorConfig::default());
    let total = alloc.free_blocks();
    let mut kept = Vec::new();
    for file in 0..4u64 {
        let mut window = ReservationWindow::for_file(200);
        kept.push(
            alloc
                .allocate_append(&mut window, None, 1, 0, file)
                .unwrap(),
        );
        assert!(window.remaining() > 100);
        // Dropped here, still holding most of its blocks.
    }
    let on_disk = disk_blocks(&alloc, &geo);
    assert_eq!(on_disk, blocks_of(&kept));
    assert_eq!(alloc.free_blocks_for_statfs(), total - 4);
    let mut taken = 0u64;
    while let Ok(e) = alloc.allocate(AllocRequest {
        goal: None,
        len: 64,
        min_len: 1,
        slot: 1,
        stream: 9,
        reserve: Reserve::None,
    }) {
        taken += u64::from(e.len);
    }
    assert_eq!(taken, total - 4);
    assert_eq!(alloc.reserved_blocks(), 0);
}

/// statfs never reports more free blocks than the volume has (finding 10), sampled while
/// threads reserve, carve and release windows.
#[test]
fn statfs_never_exceeds_the_volume_under_churn() {
    let geo = geometry(4, 1024);
    let alloc = BlockAllocator::empty(geo, AllocatorConfig::default());
    let capacity = geo.blocks - geo.first_data_block;
    let stop = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        for t in 0..6usize {
            let (alloc, stop) = (&alloc, &stop);
            s.spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    // A large window, one block used and freed first: when the window is
                    // released nothing else is held, so counting its blocks twice (once
                    // as free, once as in a window) would exceed the volume.
                    let mut window = ReservationWindow::for_file(512);
                    if let Ok(e) = alloc.allocate_append(&mut window, None, 1, t, t as u64) {
                        alloc.free(e, t).unwrap();
                    }
                    alloc.release_window(&mut window, t);
                }
            });
        }
        // Stop the churn however the sampling ends (a failed assertion included), or the
        // scope would wait for it forever.
        struct StopOnDrop<'a>(&'a std::sync::atomic::AtomicBool);
        impl Drop for StopOnDrop<'_> {
            fn drop(&mut self) {
                self.0.store(true, Ordering::Relaxed);
            }
        }
        let _stop = StopOnDrop(&stop);
        for _ in 0..2_000_000 {
            let free = alloc.free_blocks_for_statfs();
            assert!(free <= capacity, "statfs says {free} free of {capacity}");
        }
    });
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
    alloc.release_small_file_windows();
    assert_eq!(alloc.small_file_window_blocks(), 0);
    assert_eq!(alloc.free_blocks_for_statfs(), alloc.free_blocks());
}

/// A packed small file that grows takes over the rest of the packing window it ends in,
/// whichever slot asks, so it stays one run; the slot's next small file is packed after
/// what was handed over, and a file that does not end where a packing window goes on gets
/// nothing from it.
#[test]
fn a_growing_small_file_takes_over_the_packing_window_it_ends_in() {
    let alloc = BlockAllocator::empty(geometry(8, 4096), AllocatorConfig::default());
    let before = alloc.free_blocks_for_statfs();
    let small = alloc.allocate_small_file(3, 0, 1).unwrap();
    let mut window = ReservationWindow::new();
    assert!(!alloc.adopt_pack_window(&mut window, small.end() + 1, 0));
    // Another thread's write of the file's next piece finds the window too.
    assert!(alloc.adopt_pack_window(&mut window, small.end(), 1));
    assert_eq!(window.unused().map(|e| e.start), Some(small.end()));
    let grown = alloc
        .allocate_append(&mut window, Some(small.end()), 40, 0, 1)
        .unwrap();
    assert_eq!((grown.start, grown.len), (small.end(), 40));
    // The next small file of slot 0 comes after the handed-over window, not inside it.
    let next = alloc.allocate_small_file(2, 0, 2).unwrap();
    let held = window.unused().unwrap();
    assert!(
        next.start >= held.end(),
        "{next:?} inside the file's window {held:?}"
    );
    // Every block handed out is in use on disk, and nothing was lost or counted twice
    // (windows are free space for statfs).
    let geo = *alloc.geometry();
    for extent in [small, grown, next] {
        for block in extent.start..extent.end() {
            let (group, offset) = geo.group_of(block);
            let (bitmap, _) = alloc
                .group_bitmap_for_disk(group, geo.blocks_per_group.div_ceil(8) as usize)
                .unwrap();
            let offset = offset as usize;
            assert!(
                bitmap[offset / 8] & (1 << (offset % 8)) != 0,
                "block {block} free on disk"
            );
        }
    }
    assert_eq!(alloc.free_blocks_for_statfs(), before - 3 - 40 - 2);
    alloc.release_window(&mut window, 0);
    alloc.release_small_file_windows();
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
            reserve: Reserve::None,
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

/// A capped window (a directory's) doubles from the first size up to its cap and no
/// further, and two owners growing by turns still get runs, not interleaved blocks.
#[test]
fn capped_windows_stop_growing_at_their_cap() {
    let alloc = BlockAllocator::empty(geometry(8, 4096), AllocatorConfig::default());
    let mut windows = [ReservationWindow::capped(64), ReservationWindow::capped(64)];
    let mut sizes = Vec::new();
    let mut blocks: [Vec<u64>; 2] = [Vec::new(), Vec::new()];
    for _ in 0..300 {
        for (owner, window) in windows.iter_mut().enumerate() {
            let before = window.remaining();
            let got = alloc
                .allocate_append(window, None, 1, 0, owner as u64)
                .unwrap();
            assert_eq!(got.len, 1);
            if before == 0 && owner == 0 {
                sizes.push(window.remaining() + 1);
            }
            blocks[owner].push(got.start);
        }
    }
    assert_eq!(sizes[..4], [16, 32, 64, 64]);
    assert!(sizes.iter().all(|&s| s <= 64), "{sizes:?}");
    for owned in &blocks {
        let runs = 1 + owned.windows(2).filter(|w| w[1] != w[0] + 1).count();
        assert!(runs <= 300 / 64 + 3, "{runs} runs for 300 blocks");
    }
}

/// A raised cap lets a capped window grow further; a lower one changes nothing, and an
/// uncapped window stays uncapped.
#[test]
fn raising_a_cap_lets_windows_grow_and_never_shrinks_them() {
    let alloc = BlockAllocator::empty(geometry(8, 4096), AllocatorConfig::default());
    let window_sizes = |window: &mut ReservationWindow, raise_to: u32, windows: usize| {
        let mut sizes = Vec::new();
        while sizes.len() < windows {
            window.raise_cap(raise_to);
            let before = window.remaining();
            alloc.allocate_append(window, None, 1, 0, 3).unwrap();
            if before == 0 {
                sizes.push(window.remaining() + 1);
            }
        }
        sizes
    };
    let mut raised = ReservationWindow::capped(64);
    assert_eq!(
        window_sizes(&mut raised, 256, 6),
        [16, 32, 64, 128, 256, 256]
    );
    let mut lowered = ReservationWindow::capped(64);
    assert_eq!(window_sizes(&mut lowered, 8, 5), [16, 32, 64, 64, 64]);
    let mut uncapped = ReservationWindow::new();
    assert_eq!(window_sizes(&mut uncapped, 32, 5), [16, 32, 64, 128, 256]);
}

/// Root-reserved blocks: unprivileged requests stop at the reserve, privileged ones get
/// it, and freed blocks refill the reserve before anyone unprivileged can have them.
#[test]
fn the_root_reserve_is_for_privileged_requests_only() {
    let geo = geometry(2, 1024);
    let alloc = BlockAllocator::empty(geo, AllocatorConfig::default()).with_root_reserve(100);
    let total = alloc.free_blocks();
    assert_eq!(alloc.available_blocks(), total - 100);
    let ask = |privileged: bool| {
        alloc.allocate(AllocRequest {
            goal: None,
            len: 10,
            min_len: 1,
            slot: 0,
            stream: 4,
            reserve: if privileged {
                Reserve::Root
            } else {
                Reserve::None
            },
        })
    };
    let mut user = Vec::new();
    while let Ok(e) = ask(false) {
        user.push(e);
    }
    let taken: u64 = user.iter().map(|e| u64::from(e.len)).sum();
    assert_eq!(taken, total - 100);
    assert_eq!(alloc.free_blocks(), 100);
    let mut root = Vec::new();
    while let Ok(e) = ask(true) {
        root.push(e);
    }
    assert_eq!(root.iter().map(|e| u64::from(e.len)).sum::<u64>(), 100);
    // Freed blocks go back to the reserve first: still nothing for the unprivileged.
    for e in user.drain(..5) {
        alloc.free(e, 0).unwrap();
    }
    assert_eq!(alloc.free_blocks(), 50);
    assert_eq!(ask(false), Err(AllocError::NoSpace));
    assert!(ask(true).is_ok());
    // Past the reserve's target, frees are for everyone again.
    for e in root.drain(..) {
        alloc.free(e, 0).unwrap();
    }
    assert_eq!(alloc.available_blocks(), 40);
    assert!(ask(false).is_ok());
}

/// The metadata reserve is used only by requests that may use it (after the root reserve),
/// and freed blocks refill it first, then the root reserve, then everyone's count.
#[test]
fn the_metadata_reserve_is_the_last_used_and_the_first_refilled() {
    let geo = geometry(2, 1024);
    let alloc = BlockAllocator::empty(geo, AllocatorConfig::default())
        .with_root_reserve(100)
        .with_metadata_reserve(40);
    let total = alloc.free_blocks();
    assert_eq!(alloc.available_blocks(), total - 140);
    let ask = |reserve: Reserve| {
        alloc.allocate(AllocRequest {
            goal: None,
            len: 10,
            min_len: 1,
            slot: 0,
            stream: 4,
            reserve,
        })
    };
    let take_all = |reserve: Reserve| {
        let mut got = Vec::new();
        while let Ok(e) = ask(reserve) {
            got.push(e);
        }
        got
    };
    let sum = |v: &[Extent]| v.iter().map(|e| u64::from(e.len)).sum::<u64>();
    let user = take_all(Reserve::None);
    assert_eq!(sum(&user), total - 140);
    let root = take_all(Reserve::Root);
    assert_eq!(
        sum(&root),
        100,
        "root gets its reserve, not the metadata reserve"
    );
    assert_eq!(alloc.free_blocks(), 40);
    let metadata = take_all(Reserve::Metadata);
    assert_eq!(sum(&metadata), 40);
    assert_eq!(alloc.free_blocks(), 0);
    // 30 blocks freed: all to the metadata reserve, nothing for root or anyone else.
    for e in &metadata[..3] {
        alloc.free(*e, 0).unwrap();
    }
    assert_eq!(alloc.free_blocks(), 30);
    assert_eq!(ask(Reserve::Root), Err(AllocError::NoSpace));
    // 20 more: 10 fill the metadata reserve, 10 go to the root reserve.
    for e in &user[..2] {
        alloc.free(*e, 0).unwrap();
    }
    assert_eq!(ask(Reserve::None), Err(AllocError::NoSpace));
    assert!(ask(Reserve::Root).is_ok());
    assert_eq!(ask(Reserve::Root), Err(AllocError::NoSpace));
    assert!(ask(Reserve::Metadata).is_ok());
}

/// Appends and small files can use the root reserve when the caller is privileged, as plain
/// requests can; the unprivileged cannot; and reserve blocks are handed out exactly, never
/// parked in a window or packing window an unprivileged writer could then use.
#[test]
fn privileged_appends_and_small_files_use_the_root_reserve() {
    let geo = geometry(2, 1024);
    let alloc = BlockAllocator::empty(geo, AllocatorConfig::default()).with_root_reserve(100);
    let fill = |privileged: bool| {
        alloc.allocate(AllocRequest {
            goal: None,
            len: 64,
            min_len: 1,
            slot: 0,
            stream: 1,
            reserve: if privileged {
                Reserve::Root
            } else {
                Reserve::None
            },
        })
    };
    while fill(false).is_ok() {}
    assert_eq!(alloc.free_blocks(), 100);
    let mut window = ReservationWindow::new();
    assert_eq!(
        alloc.allocate_append_as(&mut window, None, 3, 0, 7, false),
        Err(AllocError::NoSpace)
    );
    assert_eq!(
        alloc.allocate_small_file_as(2, 0, 8, false),
        Err(AllocError::NoSpace)
    );
    let appended = alloc
        .allocate_append_as(&mut window, None, 3, 0, 7, true)
        .unwrap();
    assert_eq!(appended.len, 3);
    assert_eq!(window.remaining(), 0, "reserve blocks went into a window");
    let small = alloc.allocate_small_file_as(2, 0, 8, true).unwrap();
    assert_eq!(small.len, 2);
    assert_eq!(alloc.small_file_window_blocks(), 0);
    // Exactly what was handed out left the reserve.
    assert_eq!(alloc.free_blocks(), 95);
    // The file's next append continues right after its last block.
    let next = alloc
        .allocate_append_as(&mut window, None, 4, 0, 7, true)
        .unwrap();
    assert_eq!(next.start, appended.end());
    assert_eq!(alloc.free_blocks(), 91);
    assert_eq!(
        alloc.allocate_append_as(&mut window, None, 4, 0, 7, false),
        Err(AllocError::NoSpace)
    );
}

/// A bigalloc volume (clusters of several blocks) is refused by every constructor that
/// reads a volume, by name, before anything is read.
#[test]
fn bigalloc_is_refused_by_name() {
    let geo = geometry(2, 1024);
    let bigalloc = AllocatorConfig {
        blocks_per_cluster: 16,
        ..AllocatorConfig::default()
    };
    let refused = AllocError::Bigalloc {
        blocks_per_cluster: 16,
    };
    let opened = BlockAllocator::open(
        geo,
        bigalloc,
        |_| e4_alloc::GroupSummary {
            free: 0,
            uninit: false,
        },
        &[],
        |_: u32| Err::<Vec<u8>, String>("must not be read".into()),
    );
    assert_eq!(opened.err(), Some(refused.clone()));
    let built = BlockAllocator::new(geo, bigalloc, |_| vec![0u8; 128], &[]);
    assert_eq!(built.err(), Some(refused.clone()));
    assert!(refused.to_string().contains("bigalloc"));
    assert!(BlockAllocator::new(geo, AllocatorConfig::default(), |_| vec![0u8; 128], &[]).is_ok());
}

/// 16 threads (8 per core) allocating and freeing small extents in one 4,096-block group, so
/// that every allocation moves the group in the free-space index while others wait for its
/// lock, and four checkers that keep taking the group's lock: whenever one holds the lock,
/// the group is filed under exactly its largest free order. An index update made after the
/// lock is dropped is seen by a checker that takes the lock in between (and a later update
/// can heal the filing, so a check at the end alone almost never sees it).
#[test]
fn index_stays_exact_under_same_group_churn() {
    let alloc = BlockAllocator::empty(
        Geometry {
            first_data_block: 0,
            blocks_per_group: 4096,
            blocks: 4096,
        },
        AllocatorConfig {
            counter_slots: 16,
            window_cap: 0,
            pack_small_files: false,
            ..AllocatorConfig::default()
        },
    );
    let done = std::sync::atomic::AtomicUsize::new(0);
    std::thread::scope(|s| {
        for _ in 0..4 {
            let (alloc, done) = (&alloc, &done);
            s.spawn(move || {
                while done.load(Ordering::Acquire) < 16 {
                    assert!(alloc.index_is_consistent());
                }
            });
        }
        for t in 0..16usize {
            let (alloc, done) = (&alloc, &done);
            s.spawn(move || {
                let mut rng = rand::rngs::StdRng::seed_from_u64(t as u64);
                let mut mine: Vec<Extent> = Vec::new();
                for _ in 0..150_000 {
                    if mine.len() < 8 && rng.gen_bool(0.6) {
                        let len = rng.gen_range(1..48);
                        if let Ok(e) = alloc.allocate(AllocRequest {
                            goal: None,
                            len,
                            min_len: 1,
                            slot: t,
                            stream: t as u64,
                            reserve: Reserve::None,
                        }) {
                            mine.push(e);
                        }
                    } else if !mine.is_empty() {
                        let e = mine.swap_remove(rng.gen_range(0..mine.len()));
                        alloc.free(e, t).unwrap();
                    }
                }
                done.fetch_add(1, Ordering::Release);
            });
        }
    });
    assert!(alloc.index_is_consistent());
}

//! The inode allocator against a reference model, its placement policy (Orlov), under stress
//! from many more threads than cores, and racing for the last free inodes.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use e4_alloc::{
    AllocatorConfig, BlockAllocator, Geometry, GroupLocking, InodeAllocator, InodeError,
    InodeGeometry, InodeKind, InodeRequest,
};
use proptest::prelude::*;
use rand::{Rng, SeedableRng};

const ROOT: u32 = 2;

fn inode_geometry(groups: u32, inodes_per_group: u32, groups_per_flex: u32) -> InodeGeometry {
    InodeGeometry {
        groups,
        inodes_per_group,
        groups_per_flex,
        first_inode: 11,
    }
}

/// Block groups to match, all free: placement then depends on inodes alone.
fn blocks_for(geometry: &InodeGeometry) -> BlockAllocator {
    BlockAllocator::empty(
        Geometry {
            first_data_block: 0,
            blocks_per_group: 1024,
            blocks: u64::from(geometry.groups) * 1024,
        },
        AllocatorConfig::default(),
    )
}

fn request(parent: u32, kind: InodeKind, slot: usize) -> InodeRequest {
    InodeRequest {
        parent,
        parent_hint: None,
        kind,
        slot,
    }
}

/// Checks what the allocator would persist against the inodes the caller holds: each
/// group's bitmap has exactly the held (and reserved) inodes, and the counts agree.
fn check_against(alloc: &InodeAllocator, held: &BTreeMap<u32, bool>) -> Result<(), String> {
    let geo = *alloc.geometry();
    let mut free_total = 0;
    let mut flex_sums: BTreeMap<u32, (u64, u64)> = BTreeMap::new();
    for g in 0..geo.groups {
        let snap = alloc.group_snapshot(g).unwrap();
        let sums = flex_sums.entry(g / geo.groups_per_flex).or_default();
        sums.0 += u64::from(snap.free_inodes);
        sums.1 += u64::from(snap.used_dirs);
        let mut free = 0;
        let mut dirs = 0;
        for index in 0..geo.inodes_per_group {
            let ino = geo.inode_at(g, index).unwrap();
            let used = snap.bitmap[(index / 8) as usize] & (1 << (index % 8)) != 0;
            let expected = ino < geo.first_inode || held.contains_key(&ino);
            if used != expected {
                return Err(format!("inode {ino}: bitmap says used={used}"));
            }
            free += u32::from(!used);
            dirs += u32::from(held.get(&ino) == Some(&true));
        }
        if (snap.free_inodes, snap.used_dirs) != (free, dirs) {
            return Err(format!(
                "group {g}: counts {}/{} but bitmap has {free} free, {dirs} dirs",
                snap.free_inodes, snap.used_dirs
            ));
        }
        free_total += u64::from(free);
    }
    // The per-flex-group sums Orlov reads, against a from-scratch sum of the groups.
    for (&flex, &(free, dirs)) in &flex_sums {
        let summary = alloc.flex_summary(flex).ok_or("missing flex group")?;
        if (summary.free_inodes, summary.used_dirs) != (free, dirs) {
            return Err(format!(
                "flex group {flex}: sums {summary:?} but its groups have {free} free, {dirs} dirs"
            ));
        }
    }
    if alloc
        .flex_summary(geo.groups.div_ceil(geo.groups_per_flex))
        .is_some()
    {
        return Err("a flex group past the last group".into());
    }
    if alloc.free_inodes() != free_total {
        return Err(format!("counter {} != {free_total}", alloc.free_inodes()));
    }
    let dirs = held.values().filter(|&&d| d).count() as u64;
    if alloc.directories() != dirs {
        return Err(format!(
            "{} directories counted, {dirs} held",
            alloc.directories()
        ));
    }
    Ok(())
}

#[derive(Debug, Clone)]
enum Op {
    Create {
        parent_pick: usize,
        kind: u8,
        hash: u32,
    },
    Remove {
        pick: usize,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (any::<usize>(), 0u8..3, any::<u32>()).prop_map(|(parent_pick, kind, hash)| {
            Op::Create { parent_pick, kind, hash }
        }),
        1 => any::<usize>().prop_map(|pick| Op::Remove { pick }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// No inode is handed out twice, free + used = total after every step, the persisted
    /// bitmaps and counts match, and "no space" comes only when every inode is used.
    #[test]
    fn matches_reference_model(
        ops in proptest::collection::vec(op(), 1..200),
        locking in 0usize..3,
        flex in 0u32..3,
    ) {
        let locking = [GroupLocking::TrySkip, GroupLocking::Blocking, GroupLocking::Global][locking];
        let geo = inode_geometry(6, 24, 1 << flex);
        let alloc = InodeAllocator::new(geo, locking, 4, |_| vec![0; 3], |_| 0);
        let blocks = blocks_for(&geo);
        let total = u64::from(geo.groups * geo.inodes_per_group - (geo.first_inode - 1));
        let mut held: BTreeMap<u32, bool> = BTreeMap::new();
        for (step, op) in ops.into_iter().enumerate() {
            match op {
                Op::Create { parent_pick, kind, hash } => {
                    let dirs: Vec<u32> = held.iter().filter(|(_, &d)| d).map(|(&i, _)| i).collect();
                    let parent = if dirs.is_empty() { ROOT } else { dirs[parent_pick % dirs.len()] };
                    let kind = match kind {
                        0 => InodeKind::TopDirectory { name_hash: hash },
                        1 => InodeKind::Directory,
                        _ => InodeKind::Other,
                    };
                    match alloc.allocate(&request(parent, kind, step % 4), &blocks) {
                        Ok(new) => {
                            prop_assert!(new.ino >= geo.first_inode);
                            prop_assert_eq!(geo.group_of(new.ino).unwrap().0, new.group);
                            prop_assert!(held.insert(new.ino, kind != InodeKind::Other).is_none(),
                                "inode {} handed out twice", new.ino);
                        }
                        Err(e) => {
                            prop_assert_eq!(e, InodeError::NoSpace);
                            prop_assert_eq!(held.len() as u64, total);
                        }
                    }
                }
                Op::Remove { pick } => {
                    if held.is_empty() {
                        continue;
                    }
                    let (&ino, &dir) = held.iter().nth(pick % held.len()).unwrap();
                    alloc.free(ino, dir, step % 4).unwrap();
                    held.remove(&ino);
                }
            }
            prop_assert_eq!(alloc.free_inodes() + held.len() as u64, total);
        }
        check_against(&alloc, &held).map_err(TestCaseError::fail)?;
    }
}

/// Directories made in the root go to different flex groups, each to the one with the fewest
/// directories; their files stay in their flex group; a subdirectory stays near its parent
/// until that flex group holds more than its share of directories.
#[test]
fn orlov_spreads_directories_and_keeps_files_near_their_parent() {
    // Five flex groups; flex group 0 has the reserved inodes, so fewer free than average,
    // and no top-level directory goes there (as in ext4).
    let geo = inode_geometry(80, 256, 16);
    let alloc = InodeAllocator::empty(geo, GroupLocking::TrySkip, 4);
    let blocks = blocks_for(&geo);
    let flex_of = |ino: u32| geo.group_of(ino).unwrap().0 / geo.groups_per_flex;
    let mut top = Vec::new();
    for hash in [0u32, 1, 2, 3] {
        let dir = alloc
            .allocate(
                &request(
                    ROOT,
                    InodeKind::TopDirectory {
                        name_hash: hash * 7,
                    },
                    0,
                ),
                &blocks,
            )
            .unwrap();
        top.push(dir.ino);
    }
    let flexes: BTreeSet<u32> = top.iter().map(|&d| flex_of(d)).collect();
    assert_eq!(
        flexes.len(),
        4,
        "top-level directories share flex groups: {top:?}"
    );
    assert!(!flexes.contains(&0));
    for &dir in &top {
        for _ in 0..300 {
            let file = alloc
                .allocate(&request(dir, InodeKind::Other, 1), &blocks)
                .unwrap();
            assert_eq!(
                flex_of(file.ino),
                flex_of(dir),
                "file {} of dir {dir}",
                file.ino
            );
        }
    }
    // Files are packed at the start of the flex group: 301 inodes fill group 16k and spill
    // into the next one.
    let first = flex_of(top[1]) * 16;
    assert_eq!(alloc.group_snapshot(first).unwrap().free_inodes, 0);
    assert_eq!(
        alloc.group_snapshot(first + 1).unwrap().free_inodes,
        256 - 45
    );
    // Subdirectories stay in the parent's flex group while it has room for its share
    // (inodes_per_flex / 16 = 256 beyond the average, about 320 here) ...
    let parent = top[2];
    let mut per_flex = [0u32; 5];
    for _ in 0..600 {
        let sub = alloc
            .allocate(&request(parent, InodeKind::Directory, 2), &blocks)
            .unwrap();
        per_flex[flex_of(sub.ino) as usize] += 1;
    }
    assert!(per_flex[flex_of(parent) as usize] >= 256, "{per_flex:?}");
    // ... and then spread to the other flex groups.
    assert!(
        per_flex.iter().filter(|&&n| n > 0).count() >= 2,
        "{per_flex:?}"
    );
}

/// Without flex groups, files stay in their parent's group and spill by a quadratic hash.
#[test]
fn without_flex_groups_files_follow_their_parent_group() {
    let geo = inode_geometry(8, 32, 1);
    let alloc = InodeAllocator::empty(geo, GroupLocking::TrySkip, 1);
    let blocks = blocks_for(&geo);
    let parent = geo.inode_at(5, 3).unwrap();
    let groups: Vec<u32> = (0..40)
        .map(|_| {
            alloc
                .allocate(&request(parent, InodeKind::Other, 0), &blocks)
                .unwrap()
                .group
        })
        .collect();
    assert!(groups[..32].iter().all(|&g| g == 5), "{groups:?}");
    // Group 5 is full: the next files go to (5 + parent + 1) % 8, as ext4's hash puts them.
    assert_eq!(groups[32], (5 + parent + 1) % 8);
}

/// A full group is never chosen, and the last inode is found wherever it is.
#[test]
fn finds_the_last_free_inode_anywhere() {
    let geo = inode_geometry(16, 64, 4);
    // Every inode used but one, in group 13.
    let alloc = InodeAllocator::new(
        geo,
        GroupLocking::TrySkip,
        8,
        |g| {
            if g == 13 {
                vec![0xFF, 0xFF, 0xFF, 0xEF, 0xFF, 0xFF, 0xFF, 0xFF]
            } else {
                vec![0xFF; 8]
            }
        },
        |_| 1,
    );
    assert_eq!(alloc.free_inodes(), 1);
    assert_eq!(alloc.directories(), 16);
    let blocks = blocks_for(&geo);
    let new = alloc
        .allocate(&request(ROOT, InodeKind::Directory, 3), &blocks)
        .unwrap();
    assert_eq!(new.ino, geo.inode_at(13, 28).unwrap());
    assert_eq!(
        alloc.allocate(&request(ROOT, InodeKind::Other, 3), &blocks),
        Err(InodeError::NoSpace)
    );
    assert_eq!(alloc.group_snapshot(13).unwrap().used_dirs, 2);
    assert_eq!(alloc.group_snapshot(13).unwrap().itable_unused, 0);
}

#[test]
fn bad_frees_are_errors() {
    let geo = inode_geometry(4, 64, 2);
    let alloc = InodeAllocator::empty(geo, GroupLocking::TrySkip, 2);
    let blocks = blocks_for(&geo);
    let file = alloc
        .allocate(&request(ROOT, InodeKind::Other, 0), &blocks)
        .unwrap();
    assert_eq!(file.ino, 11, "the first inode after the reserved ones");
    for (ino, dir) in [
        (0, false),
        (2, false),
        (10, false),
        (257, false),
        (12, false),
        (11, true),
    ] {
        assert_eq!(
            alloc.free(ino, dir, 0),
            Err(InodeError::BadFree(ino)),
            "inode {ino}"
        );
    }
    alloc.free(11, false, 0).unwrap();
    assert_eq!(alloc.free(11, false, 0), Err(InodeError::BadFree(11)));
    assert_eq!(
        InodeError::BadFree(11).to_string(),
        "inode 11 is not allocated"
    );
    assert_eq!(alloc.free_inodes(), 4 * 64 - 10);
}

/// 64 threads on 2 cores create and remove files and directories in their own and shared
/// directories: every inode is held by exactly one thread, and the counts stay exact.
#[test]
fn stress_many_more_threads_than_cores() {
    for locking in [GroupLocking::TrySkip, GroupLocking::Blocking] {
        let geo = inode_geometry(32, 512, 16);
        let alloc = InodeAllocator::empty(geo, locking, 64);
        let blocks = blocks_for(&geo);
        let owners = Mutex::new(BTreeMap::new());
        std::thread::scope(|s| {
            for t in 0..64usize {
                let (alloc, blocks, owners) = (&alloc, &blocks, &owners);
                s.spawn(move || {
                    let mut rng = rand::rngs::StdRng::seed_from_u64(t as u64);
                    let mut mine: Vec<(u32, bool)> = Vec::new();
                    let mut home = ROOT;
                    for i in 0..1500 {
                        if rng.gen_bool(0.65) {
                            let kind = match rng.gen_range(0..10) {
                                0 => InodeKind::TopDirectory {
                                    name_hash: rng.gen(),
                                },
                                1 => InodeKind::Directory,
                                _ => InodeKind::Other,
                            };
                            let parent = if i % 2 == 0 { home } else { ROOT };
                            match alloc.allocate(&request(parent, kind, t), blocks) {
                                Ok(new) => {
                                    let dir = kind != InodeKind::Other;
                                    if dir {
                                        home = new.ino;
                                    }
                                    mine.push((new.ino, dir));
                                }
                                Err(e) => assert_eq!(e, InodeError::NoSpace),
                            }
                        } else if !mine.is_empty() {
                            let (ino, dir) = mine.swap_remove(rng.gen_range(0..mine.len()));
                            if ino == home {
                                home = ROOT;
                            }
                            alloc.free(ino, dir, t).unwrap();
                        }
                    }
                    let mut owners = owners.lock().unwrap();
                    for (ino, dir) in mine {
                        assert!(owners.insert(ino, dir).is_none(), "inode {ino} held twice");
                    }
                });
            }
        });
        check_against(&alloc, &owners.into_inner().unwrap()).unwrap();
    }
}

/// N threads race for the last K free inodes: exactly K are handed out, and then creation
/// fails with "no space" for everyone.
#[test]
fn enospc_race_hands_out_exactly_what_is_free() {
    let geo = inode_geometry(16, 64, 4);
    let blocks = blocks_for(&geo);
    for keep_free in [1u32, 7, 100] {
        // Free inodes scattered over the groups.
        let free_at: BTreeSet<u32> = (0..keep_free)
            .map(|i| 11 + (i * 97) % (16 * 64 - 11))
            .collect();
        let alloc = InodeAllocator::new(
            geo,
            GroupLocking::TrySkip,
            16,
            |g| {
                let mut bitmap = vec![0xFFu8; 8];
                for &ino in &free_at {
                    let (group, index) = geo.group_of(ino).unwrap();
                    if group == g {
                        bitmap[(index / 8) as usize] &= !(1 << (index % 8));
                    }
                }
                bitmap
            },
            |_| 0,
        );
        assert_eq!(alloc.free_inodes(), free_at.len() as u64);
        let handed = AtomicU64::new(0);
        let got = Mutex::new(BTreeSet::new());
        std::thread::scope(|s| {
            for t in 0..16usize {
                let (alloc, blocks, handed, got) = (&alloc, &blocks, &handed, &got);
                s.spawn(move || {
                    while let Ok(new) = alloc.allocate(&request(ROOT, InodeKind::Other, t), blocks)
                    {
                        handed.fetch_add(1, Ordering::Relaxed);
                        assert!(got.lock().unwrap().insert(new.ino));
                    }
                });
            }
        });
        assert_eq!(handed.load(Ordering::Relaxed), free_at.len() as u64);
        assert_eq!(got.into_inner().unwrap(), free_at);
        assert_eq!(alloc.free_inodes(), 0);
    }
}

/// Degenerate geometries (as a corrupt superblock could describe) give "no space", not a
/// panic.
#[test]
fn degenerate_geometries_are_not_a_panic() {
    for (groups, inodes_per_group, groups_per_flex, first_inode) in
        [(0, 64, 4, 11), (3, 0, 0, 11), (2, 8, 1, 0), (2, 8, 1, 1000)]
    {
        let geo = InodeGeometry {
            groups,
            inodes_per_group,
            groups_per_flex,
            first_inode,
        };
        let alloc = InodeAllocator::empty(geo, GroupLocking::TrySkip, 2);
        let blocks = blocks_for(&InodeGeometry {
            groups: groups.max(1),
            ..geo
        });
        let result = alloc.allocate(&request(ROOT, InodeKind::Directory, 0), &blocks);
        if groups * inodes_per_group == 0 || first_inode > groups * inodes_per_group {
            assert_eq!(result, Err(InodeError::NoSpace), "{geo:?}");
        } else {
            assert!(result.is_ok(), "{geo:?}");
        }
        assert_eq!(alloc.free(5, false, 0), Err(InodeError::BadFree(5)));
    }
}

/// 2^31 groups per flex group (accepted by e4-format) is one flex group holding every group:
/// the same placements as a flex group of exactly the volume, no overflow (which in a release
/// build wraps silently and changes Orlov's limits).
#[test]
fn huge_flex_group_places_like_one_flex_group_of_every_group() {
    let place_all = |groups_per_flex: u32| {
        let geo = inode_geometry(8, 64, groups_per_flex);
        let alloc = InodeAllocator::empty(geo, GroupLocking::TrySkip, 1);
        let blocks = blocks_for(&geo);
        let mut placed = Vec::new();
        let mut parent = ROOT;
        for i in 0..300u32 {
            let kind = match i % 5 {
                0 => InodeKind::TopDirectory {
                    name_hash: i * 7919,
                },
                1 => InodeKind::Directory,
                _ => InodeKind::Other,
            };
            let new = alloc.allocate(&request(parent, kind, 0), &blocks).unwrap();
            if kind != InodeKind::Other {
                parent = new.ino;
            }
            placed.push(new.ino);
        }
        assert_eq!(alloc.flex_summary(0).unwrap().used_dirs, 120);
        assert_eq!(alloc.flex_summary(1), None);
        placed
    };
    assert_eq!(place_all(1 << 31), place_all(8));
}

/// Inode numbers and groups convert only inside the geometry and the 32-bit inode numbers.
#[test]
fn inode_numbers_convert_only_inside_the_geometry() {
    let geo = inode_geometry(4, 64, 2);
    assert_eq!(geo.inode_at(0, 0), Some(1));
    assert_eq!(geo.inode_at(3, 63), Some(256));
    assert_eq!(geo.inode_at(4, 0), None);
    assert_eq!(geo.inode_at(0, 64), None);
    assert_eq!(geo.group_of(1), Some((0, 0)));
    assert_eq!(geo.group_of(256), Some((3, 63)));
    assert_eq!(geo.group_of(0), None);
    assert_eq!(geo.group_of(257), None);
    assert_eq!(geo.group_of(u32::MAX), None);
    // 2^20 groups of 8,192 inodes: numbers past 2^32 - 1 do not exist.
    let big = inode_geometry(1 << 20, 8192, 16);
    assert_eq!(big.inode_at((1 << 19) - 1, 8190), Some(u32::MAX));
    assert_eq!(big.inode_at((1 << 19) - 1, 8191), None);
    assert_eq!(big.inode_at(1 << 19, 0), None);
    assert_eq!(big.group_of(u32::MAX), Some(((1 << 19) - 1, 8190)));
    assert_eq!(inode_geometry(4, 0, 1).group_of(1), None);
}

/// 16 threads (8 per core) creating and removing in different groups of one flex group
/// change that flex group's sums at once: after the churn the sums equal a from-scratch sum of the groups
/// (a sum updated by load-then-store instead of one atomic step loses updates here).
#[test]
fn flex_sums_stay_exact_under_concurrent_churn_in_one_flex_group() {
    let geo = inode_geometry(256, 8192, 256);
    let alloc = InodeAllocator::empty(geo, GroupLocking::TrySkip, 16);
    let blocks = blocks_for(&geo);
    let held = Mutex::new(BTreeMap::new());
    let start = std::sync::Barrier::new(16);
    std::thread::scope(|s| {
        for t in 0..16usize {
            let (alloc, blocks, held, start) = (&alloc, &blocks, &held, &start);
            s.spawn(move || {
                let mut mine = Vec::new();
                start.wait();
                for i in 0..120_000 {
                    let kind = if i % 3 == 0 {
                        InodeKind::Directory
                    } else {
                        InodeKind::Other
                    };
                    let new = alloc.allocate(&request(ROOT, kind, t), blocks).unwrap();
                    mine.push((new.ino, kind == InodeKind::Directory));
                    if i % 2 == 1 {
                        let (ino, dir) = mine.swap_remove(i % mine.len());
                        alloc.free(ino, dir, t).unwrap();
                    }
                }
                held.lock().unwrap().extend(mine);
            });
        }
    });
    check_against(&alloc, &held.into_inner().unwrap()).unwrap();
}

/// Write-back sees exactly the groups that changed since the last write-back, and nothing
/// when nothing changed.
#[test]
fn dirty_groups_are_exactly_the_changed_ones() {
    let geo = inode_geometry(8, 64, 2);
    let alloc = InodeAllocator::empty(geo, GroupLocking::TrySkip, 1);
    let blocks = blocks_for(&geo);
    assert!(alloc.take_dirty_groups().is_empty());
    let a = alloc
        .allocate(&request(ROOT, InodeKind::Other, 0), &blocks)
        .unwrap();
    let b = alloc
        .allocate(
            &request(ROOT, InodeKind::TopDirectory { name_hash: 5 }, 0),
            &blocks,
        )
        .unwrap();
    let mut expected: Vec<u32> = vec![a.group, b.group];
    expected.dedup();
    expected.sort();
    let dirty = alloc.take_dirty_groups();
    assert_eq!(dirty.iter().map(|(g, _)| *g).collect::<Vec<_>>(), expected);
    for (g, snap) in &dirty {
        assert_eq!(*snap, alloc.group_snapshot(*g).unwrap());
    }
    assert!(alloc.take_dirty_groups().is_empty());
    alloc.free(a.ino, false, 0).unwrap();
    let dirty = alloc.take_dirty_groups();
    assert_eq!(dirty.len(), 1);
    assert_eq!(dirty[0].0, a.group);
    assert!(alloc.take_dirty_groups().is_empty());
}

/// Write-back racing creators and removers: applying every taken snapshot in order, then a
/// last take after the threads stop, reproduces every group's final state (no change is
/// lost between a snapshot and the clean mark).
#[test]
fn dirty_groups_taken_during_churn_lose_no_change() {
    let geo = inode_geometry(8, 256, 4);
    let alloc = InodeAllocator::empty(geo, GroupLocking::TrySkip, 4);
    let blocks = blocks_for(&geo);
    let mut persisted: BTreeMap<u32, e4_alloc::InodeGroupSnapshot> = (0..geo.groups)
        .map(|g| (g, alloc.group_snapshot(g).unwrap()))
        .collect();
    let stop = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        for t in 0..4usize {
            let (alloc, blocks, stop) = (&alloc, &blocks, &stop);
            s.spawn(move || {
                let mut rng = rand::rngs::StdRng::seed_from_u64(t as u64);
                let mut mine = Vec::new();
                for _ in 0..20_000 {
                    if rng.gen_bool(0.5) || mine.is_empty() {
                        if let Ok(new) = alloc.allocate(&request(ROOT, InodeKind::Other, t), blocks)
                        {
                            mine.push(new.ino);
                        }
                    } else {
                        let ino = mine.swap_remove(rng.gen_range(0..mine.len()));
                        alloc.free(ino, false, t).unwrap();
                    }
                }
                stop.store(true, Ordering::Relaxed);
            });
        }
        while !stop.load(Ordering::Relaxed) {
            for (g, snap) in alloc.take_dirty_groups() {
                persisted.insert(g, snap);
            }
        }
    });
    for (g, snap) in alloc.take_dirty_groups() {
        persisted.insert(g, snap);
    }
    for g in 0..geo.groups {
        assert_eq!(persisted[&g], alloc.group_snapshot(g).unwrap(), "group {g}");
    }
}

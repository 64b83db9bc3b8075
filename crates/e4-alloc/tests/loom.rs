//! Model checks of the lock-free pieces under every interleaving loom can find.
//! Run with: `RUSTFLAGS="--cfg loom" cargo test -p e4-alloc --release --test loom`
#![cfg(loom)]

use e4_alloc::LimitCounter;
use loom::sync::Arc;

/// Explores interleavings with up to three preemptions: enough for these races (each needs
/// at most two), and it keeps every model under a few seconds.
fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(3);
    builder.check(f);
}

/// Two threads race for five units through different slots (so slots refill, then the pool
/// runs dry): never more than five handed
/// out, and when both have given up, every unit has been handed out.
#[test]
fn limit_counter_never_overcommits_and_never_strands() {
    model(|| {
        let c = Arc::new(LimitCounter::new(5, 2, 1));
        let handles: Vec<_> = (0..2)
            .map(|slot| {
                let c = Arc::clone(&c);
                loom::thread::spawn(move || {
                    let mut got = 0;
                    while c.try_reserve(slot, 1) {
                        got += 1;
                    }
                    got
                })
            })
            .collect();
        let total: u64 = handles.into_iter().map(|h| h.join().unwrap()).sum();
        assert_eq!(total, 5);
        assert_eq!(c.sum(), 0);
    });
}

/// A release racing a reservation: units are conserved.
#[test]
fn limit_counter_release_races_reserve() {
    model(|| {
        let c = Arc::new(LimitCounter::new(2, 2, 1));
        assert!(c.try_reserve(0, 2));
        let c2 = Arc::clone(&c);
        let releaser = loom::thread::spawn(move || c2.release(1, 2));
        let got = c.try_reserve(0, 1);
        releaser.join().unwrap();
        let left = c.sum();
        assert_eq!(left + u64::from(got), 2);
    });
}

/// A reservation needing units that are in transit between the pool and another slot (a
/// refill in flight) must wait for them, not report "no space": of four units, one is taken
/// through a refilling slot, so three must remain for the other thread.
#[test]
fn limit_counter_failure_is_exact_during_a_refill() {
    model(|| {
        let c = Arc::new(LimitCounter::new(4, 2, 1));
        let c2 = Arc::clone(&c);
        let refiller = loom::thread::spawn(move || assert!(c2.try_reserve(1, 1)));
        assert!(c.try_reserve(0, 3), "three of four units were free");
        refiller.join().unwrap();
        assert_eq!(c.sum(), 0);
    });
}

/// Two threads insert and remove bits that share a word (and so a summary bit): once they
/// are done, the summary is exact and a search finds what is there.
#[test]
fn bitset_summary_is_exact_after_racing_updates() {
    model(|| {
        let bits = Arc::new(e4_alloc::AtomicBitset::new(128));
        bits.insert(1);
        let b2 = Arc::clone(&bits);
        let t = loom::thread::spawn(move || b2.insert(2));
        bits.remove(1);
        t.join().unwrap();
        let mut words = 0;
        assert_eq!(bits.find_next(0, 128, &mut words), Some(2));
        assert_eq!(bits.find_next(3, 128, &mut words), None);
    });
}

/// Inode allocators over two groups of 64 inodes with `free` inodes free in each, beside an
/// all-free block allocator for placement.
fn inode_volume(free: [u32; 2]) -> (e4_alloc::InodeAllocator, e4_alloc::BlockAllocator) {
    use e4_alloc::{AllocatorConfig, BlockAllocator, Geometry, GroupLocking, InodeGeometry};
    let geometry = InodeGeometry {
        groups: 2,
        inodes_per_group: 64,
        groups_per_flex: 2,
        first_inode: 1,
    };
    let inodes = e4_alloc::InodeAllocator::new(
        geometry,
        GroupLocking::TrySkip,
        2,
        |g| (!0u64 << free[g as usize]).to_le_bytes().to_vec(),
        |_| 0,
    );
    let blocks = BlockAllocator::empty(
        Geometry {
            first_data_block: 0,
            blocks_per_group: 64,
            blocks: 128,
        },
        AllocatorConfig {
            counter_slots: 2,
            ..AllocatorConfig::default()
        },
    );
    (inodes, blocks)
}

fn file_request(slot: usize) -> e4_alloc::InodeRequest {
    e4_alloc::InodeRequest {
        parent: 1,
        parent_hint: None,
        kind: e4_alloc::InodeKind::Other,
        slot,
    }
}

/// Two creators race for the last three inodes, two in the first group and one in the
/// second, each possibly finding the other's lock held (and skipping that group) or its own
/// lock-free hint stale: they get different inodes, the third inode is still found, and
/// then there is none.
#[test]
fn inode_claims_never_collide_and_find_the_last_inodes() {
    model(|| {
        let volume = Arc::new(inode_volume([2, 1]));
        let v2 = Arc::clone(&volume);
        let other = loom::thread::spawn(move || v2.0.allocate(&file_request(1), &v2.1).unwrap());
        let mine = volume.0.allocate(&file_request(0), &volume.1).unwrap();
        let theirs = other.join().unwrap();
        assert_ne!(mine.ino, theirs.ino);
        let last = volume.0.allocate(&file_request(0), &volume.1).unwrap();
        assert!(last.ino != mine.ino && last.ino != theirs.ino);
        assert_eq!(
            volume.0.allocate(&file_request(1), &volume.1),
            Err(e4_alloc::InodeError::NoSpace)
        );
        assert_eq!(volume.0.flex_summary(0).unwrap().free_inodes, 0);
    });
}

/// A creation racing the free of the only inode in use: the creator gets an inode whatever
/// the order (the other free one, or the freed one), and the counts (the flex group's sums
/// among them) end exact.
#[test]
fn inode_claim_races_a_free() {
    model(|| {
        let volume = Arc::new(inode_volume([1, 0]));
        let v2 = Arc::clone(&volume);
        let freer = loom::thread::spawn(move || v2.0.free(64 + 1, false, 1).unwrap());
        let new = volume.0.allocate(&file_request(0), &volume.1).unwrap();
        freer.join().unwrap();
        assert!(new.ino == 1 || new.ino == 65, "inode {}", new.ino);
        assert_eq!(volume.0.free_inodes(), 1);
        let (a, b) = (
            volume.0.group_snapshot(0).unwrap(),
            volume.0.group_snapshot(1).unwrap(),
        );
        assert_eq!(a.free_inodes + b.free_inodes, 1);
        // The flex group's sum, changed by both under different group locks, lost neither.
        assert_eq!(volume.0.flex_summary(0).unwrap().free_inodes, 1);
    });
}

/// Write-back racing creations: whatever the order, the snapshots taken during the race
/// and one taken after it end at the group's final state (the creation is never marked clean
/// without being in a snapshot).
#[test]
fn inode_write_back_races_claims() {
    model(|| {
        let volume = Arc::new(inode_volume([2, 0]));
        let v2 = Arc::clone(&volume);
        // Two creations, so that one can land between a snapshot and its clean mark.
        let creator = loom::thread::spawn(move || {
            for _ in 0..2 {
                v2.0.allocate(&file_request(1), &v2.1).unwrap();
            }
        });
        let mut persisted = volume.0.group_snapshot(0).unwrap();
        for (g, snapshot) in volume.0.take_dirty_groups() {
            assert_eq!(g, 0);
            persisted = snapshot;
        }
        creator.join().unwrap();
        for (g, snapshot) in volume.0.take_dirty_groups() {
            assert_eq!(g, 0);
            persisted = snapshot;
        }
        assert_eq!(persisted, volume.0.group_snapshot(0).unwrap());
    });
}

/// Two allocations in the one group of a 64-block volume, each lowering its largest free
/// order (32 blocks, then 16): whatever the order, the free-space index ends filing the group
/// under exactly its final largest order. Catches an index update made after the group lock
/// is dropped (two updates applied out of order leave the group filed twice).
#[test]
fn block_index_updates_stay_in_lock_order() {
    use e4_alloc::{AllocRequest, AllocatorConfig, BlockAllocator, Geometry, Reserve};
    model(|| {
        let alloc = Arc::new(BlockAllocator::empty(
            Geometry {
                first_data_block: 0,
                blocks_per_group: 64,
                blocks: 64,
            },
            AllocatorConfig {
                counter_slots: 2,
                ..AllocatorConfig::default()
            },
        ));
        let request = |len, slot| AllocRequest {
            goal: None,
            len,
            min_len: len,
            slot,
            stream: slot as u64,
            reserve: Reserve::None,
        };
        let a2 = Arc::clone(&alloc);
        let other = loom::thread::spawn(move || a2.allocate(request(16, 1)).unwrap());
        let mine = alloc.allocate(request(32, 0)).unwrap();
        let theirs = other.join().unwrap();
        assert!(mine.end() <= theirs.start || theirs.end() <= mine.start);
        assert!(alloc.index_is_consistent());
        // 16 blocks are left in one aligned piece, whatever the order: the group must not
        // still be filed under a larger order.
        assert_eq!(alloc.index().next_group(0, 1, 5), None);
    });
}

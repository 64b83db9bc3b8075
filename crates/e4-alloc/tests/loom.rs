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

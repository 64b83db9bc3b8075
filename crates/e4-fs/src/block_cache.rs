//! A metadata block cache shared by all threads.
//!
//! Blocks are spread over independent shards by block number, so readers of different blocks
//! rarely take the same lock, and a shard's lock is never held during I/O: a miss reads the
//! block unlocked, then inserts it (two threads missing on the same block may both read it;
//! both copies are identical and one wins). Each shard evicts with the CLOCK algorithm.
//! A block's checksum is verified once, the first time a reader asks for it, and the result
//! is remembered beside the bytes.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crossbeam_utils::CachePadded;
use parking_lot::Mutex;

/// Shards: a power of two comfortably above the thread counts the engine targets.
const SHARDS: usize = 64;

/// A cached block.
pub struct CachedBlock {
    bytes: Box<[u8]>,
    verified: AtomicBool,
}

impl CachedBlock {
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// Runs `verify` on the bytes unless an earlier call succeeded.
    pub fn verify_once<E>(&self, verify: impl FnOnce(&[u8]) -> Result<(), E>) -> Result<(), E> {
        if self.verified.load(Ordering::Acquire) {
            return Ok(());
        }
        verify(&self.bytes)?;
        self.verified.store(true, Ordering::Release);
        Ok(())
    }
}

struct Slot {
    block: Arc<CachedBlock>,
    referenced: bool,
}

#[derive(Default)]
struct Shard {
    slots: HashMap<u64, Slot>,
    /// CLOCK hand order: block numbers in insertion order.
    clock: VecDeque<u64>,
}

impl Shard {
    fn evict_one(&mut self) {
        while let Some(nr) = self.clock.pop_front() {
            match self.slots.get_mut(&nr) {
                Some(slot) if slot.referenced => {
                    slot.referenced = false;
                    self.clock.push_back(nr);
                }
                Some(_) => {
                    self.slots.remove(&nr);
                    return;
                }
                None => {}
            }
        }
    }
}

pub struct BlockCache {
    shards: Box<[CachePadded<Mutex<Shard>>]>,
    per_shard: usize,
}

impl BlockCache {
    /// A cache holding about `capacity` blocks.
    pub fn new(capacity: usize) -> Self {
        BlockCache {
            shards: (0..SHARDS)
                .map(|_| CachePadded::new(Mutex::default()))
                .collect(),
            per_shard: capacity.div_ceil(SHARDS).max(1),
        }
    }

    fn shard(&self, nr: u64) -> &Mutex<Shard> {
        // Fibonacci hashing spreads neighbouring blocks over different shards.
        let h = nr.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - SHARDS.trailing_zeros());
        &self.shards[h as usize]
    }

    /// Returns block `nr`, reading it with `read` on a miss.
    pub fn get_or_read<E>(
        &self,
        nr: u64,
        read: impl FnOnce() -> Result<Box<[u8]>, E>,
    ) -> Result<Arc<CachedBlock>, E> {
        if let Some(slot) = self.shard(nr).lock().slots.get_mut(&nr) {
            slot.referenced = true;
            return Ok(Arc::clone(&slot.block));
        }
        let block = Arc::new(CachedBlock {
            bytes: read()?,
            verified: AtomicBool::new(false),
        });
        let mut shard = self.shard(nr).lock();
        if let Some(slot) = shard.slots.get(&nr) {
            return Ok(Arc::clone(&slot.block));
        }
        if shard.slots.len() >= self.per_shard {
            shard.evict_one();
        }
        shard.slots.insert(
            nr,
            Slot {
                block: Arc::clone(&block),
                referenced: false,
            },
        );
        shard.clock.push_back(nr);
        Ok(block)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hit_miss_and_eviction() {
        let cache = BlockCache::new(SHARDS); // one block per shard
        let mut reads = 0;
        for round in 0..2 {
            for nr in 0..(4 * SHARDS as u64) {
                let b = cache
                    .get_or_read::<()>(nr, || {
                        reads += 1;
                        Ok(vec![nr as u8; 8].into_boxed_slice())
                    })
                    .unwrap();
                assert_eq!(b.bytes()[0], nr as u8);
            }
            if round == 0 {
                assert_eq!(reads, 4 * SHARDS);
            }
        }
        let total: usize = cache.shards.iter().map(|s| s.lock().slots.len()).sum();
        assert!(total <= SHARDS);
    }

    #[test]
    fn verification_runs_once() {
        let cache = BlockCache::new(16);
        let block = cache
            .get_or_read::<()>(1, || Ok(vec![0u8; 4].into()))
            .unwrap();
        let mut runs = 0;
        for _ in 0..3 {
            block
                .verify_once::<()>(|_| {
                    runs += 1;
                    Ok(())
                })
                .unwrap();
        }
        assert_eq!(runs, 1);
    }
}

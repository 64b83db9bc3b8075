//! A map split into independently locked shards, for the mount's tables keyed by node
//! (`shown_directories`), which requests on every thread touch: two requests meet on a
//! lock only when their keys fall in the same shard (DESIGN.md, rule 1: no global lock on
//! a hot path).

use std::collections::HashMap;

use crossbeam_utils::CachePadded;
use parking_lot::{Mutex, MutexGuard};

/// Enough shards that the worker threads of one mount (a few per CPU) rarely meet.
const SHARDS: usize = 64;

/// One shard, on its own cache line, so a lock taken in one is no write to another's.
type Shard<V> = CachePadded<Mutex<HashMap<u64, V>>>;

pub(crate) struct Shards<V> {
    shards: Box<[Shard<V>]>,
}

impl<V> Shards<V> {
    pub(crate) fn new() -> Self {
        Shards {
            shards: (0..SHARDS).map(|_| CachePadded::default()).collect(),
        }
    }

    /// The locked shard that holds `key`.
    pub(crate) fn shard(&self, key: u64) -> MutexGuard<'_, HashMap<u64, V>> {
        self.shards[key as usize % SHARDS].lock()
    }
}

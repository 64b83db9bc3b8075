//! The dentry cache: (directory inode, name) → the inode the name leads to and its file
//! type, so that a path resolved before is resolved again with one shard read lock and one
//! hash probe per component, without the directory's inode handle, its lock or its blocks
//! (a path walk through the directories themselves took 52 lock acquisitions for 10
//! components; see docs/WRITE-PATH.md, "Path lookups").
//!
//! Only names that exist are cached (no negative entries), and never "." or "..".
//!
//! # Why a hit is never stale
//!
//! The cache holds, for each directory `D`, a subset of `D`'s entries, and keeps it so by
//! two rules:
//!
//! 1. **Fills read `D` under `D`'s inode lock, shared, and insert before releasing it**
//!    ([`Filesystem::lookup_child`]). So a fill never inserts an answer that a change to
//!    `D` has already replaced: such a change holds `D`'s lock exclusively, so it either
//!    finished before the fill read `D` (the fill reads the new entry) or starts after the
//!    fill has inserted (and then rule 2 removes what was inserted).
//! 2. **Every change that removes a name or points it elsewhere forgets the name while it
//!    holds `D`'s inode lock exclusively**: unlink and rmdir, the source name of every
//!    rename, the target of a rename over an existing name, and both names of an exchange
//!    (`namespace.rs`). The forget is done before the directory is edited, so an edit that
//!    fails half-way leaves no entry behind. Adding a name needs no forget: absent names
//!    are never cached.
//!
//! So whenever no change to `D` is in progress, every cached entry of `D` is one of `D`'s
//! entries. A lookup that starts after a change has returned (its lock released, which
//! happened after its forget under this cache's shard lock) finds the entry gone or
//! refilled from the new state; a lookup that overlaps the change may get the old or the new
//! answer, either of which the change's caller can observe (it is ordered before or after
//! the change). A hit needs no lock but the shard's: the shard lock orders it after the
//! forget.
//!
//! The file type is the child's inode's, read under the child's lock while the name still
//! names it (a file's type never changes while it has a name). Inode numbers are reused only
//! after the inode's last name is gone, and each of those removals forgot its entry, so a
//! cached child number is never a later inode's. A directory is removed only when empty, so
//! no entry outlives the directory that holds it either.
//!
//! Shard locks are leaves: held for one probe or one insert, never while waiting for
//! another lock, so they may be taken under any inode lock. Eviction (a shard that fills is
//! emptied) is always safe: a miss reads the directory.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use crossbeam_utils::CachePadded;
use e4_alloc::stats::LockStats;
use e4_format::inode::FileType;
use parking_lot::RwLock;

/// Shards, each on its own cache line: two threads walking different trees rarely meet on
/// one (the walk of a 10-component path touches 10 shards).
const SHARDS: usize = 256;
/// Entries a shard holds before it is emptied: 256 Ki entries in all, a few tens of MiB at
/// most, and only as many as names looked up.
const ENTRIES_PER_SHARD: usize = 1024;

/// Where a name leads: the child's inode number and, when its mode has a valid one, its file
/// type (so a walk can tell directories and symlinks without the child's inode).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Child {
    pub ino: u32,
    pub file_type: Option<FileType>,
}

/// One cached name.
struct Dentry {
    parent: u32,
    name: Box<[u8]>,
    child: Child,
}

/// A shard's map, keyed by the 64-bit hash of (directory, name) that [`dentry_hash`] has
/// already computed: two names with one hash share a slot, the later replacing the earlier
/// (a lookup compares the full key, so a shared slot is only a miss).
type Shard = HashMap<u64, Dentry, BuildHasherDefault<Prehashed>>;

/// Passes a [`dentry_hash`] through to the map unchanged.
#[derive(Default)]
struct Prehashed(u64);

impl Hasher for Prehashed {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        // Keys are u64s, which arrive through `write_u64`; fold anything else in anyway.
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(MIX);
        }
    }

    fn write_u64(&mut self, key: u64) {
        self.0 = key;
    }
}

/// An odd constant with well-spread bits (FxHash's), for multiplicative mixing.
const MIX: u64 = 0x51_7c_c1_b7_27_22_0a_95;

/// Hash of (directory, name): eight name bytes per multiply, then a final avalanche so that
/// both the shard (high bits) and the map's bucket (low bits) are spread.
fn dentry_hash(parent: u32, name: &[u8]) -> u64 {
    let mut h = (u64::from(parent) ^ ((name.len() as u64) << 32)).wrapping_mul(MIX);
    for chunk in name.chunks(8) {
        let mut word = [0u8; 8];
        word[..chunk.len()].copy_from_slice(chunk);
        h = (h.rotate_left(5) ^ u64::from_le_bytes(word)).wrapping_mul(MIX);
    }
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^ (h >> 33)
}

pub(crate) struct DentryCache {
    shards: Box<[CachePadded<RwLock<Shard>>]>,
    shard_locks: LockStats,
}

impl DentryCache {
    pub fn new() -> Self {
        DentryCache {
            shards: (0..SHARDS)
                .map(|_| CachePadded::new(RwLock::default()))
                .collect(),
            shard_locks: LockStats::default(),
        }
    }

    pub fn shard_stats(&self) -> &LockStats {
        &self.shard_locks
    }

    fn shard(&self, hash: u64) -> &RwLock<Shard> {
        &self.shards[(hash >> 56) as usize % SHARDS]
    }

    /// Where `name` in directory `parent` leads, if cached.
    pub fn get(&self, parent: u32, name: &[u8]) -> Option<Child> {
        let hash = dentry_hash(parent, name);
        let shard = self
            .shard_locks
            .take(|| self.shard(hash).try_read(), || self.shard(hash).read());
        shard
            .get(&hash)
            .filter(|d| d.parent == parent && *d.name == *name)
            .map(|d| d.child)
    }

    /// Caches `name` in `parent` → `child`. The caller holds `parent`'s inode lock (shared
    /// at least) and read the entry under it (rule 1 of the module docs).
    pub fn insert(&self, parent: u32, name: &[u8], child: Child) {
        if name == b"." || name == b".." {
            return;
        }
        let hash = dentry_hash(parent, name);
        let mut shard = self
            .shard_locks
            .take(|| self.shard(hash).try_write(), || self.shard(hash).write());
        if shard.len() >= ENTRIES_PER_SHARD {
            shard.clear();
        }
        shard.insert(
            hash,
            Dentry {
                parent,
                name: name.into(),
                child,
            },
        );
    }

    /// Forgets `name` in `parent`. The caller holds `parent`'s inode lock exclusively and is
    /// about to remove the name or point it elsewhere (rule 2 of the module docs).
    pub fn forget(&self, parent: u32, name: &[u8]) {
        let hash = dentry_hash(parent, name);
        let mut shard = self
            .shard_locks
            .take(|| self.shard(hash).try_write(), || self.shard(hash).write());
        if shard
            .get(&hash)
            .is_some_and(|d| d.parent == parent && *d.name == *name)
        {
            shard.remove(&hash);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(ino: u32) -> Child {
        Child {
            ino,
            file_type: Some(FileType::Regular),
        }
    }

    #[test]
    fn a_name_is_found_only_in_its_own_directory_until_forgotten() {
        let cache = DentryCache::new();
        cache.insert(12, b"a", file(20));
        assert_eq!(cache.get(12, b"a"), Some(file(20)));
        assert_eq!(cache.get(13, b"a"), None);
        assert_eq!(cache.get(12, b"b"), None);
        cache.forget(13, b"a");
        assert_eq!(
            cache.get(12, b"a"),
            Some(file(20)),
            "another directory's forget"
        );
        cache.forget(12, b"a");
        assert_eq!(cache.get(12, b"a"), None);
    }

    #[test]
    fn dot_and_dot_dot_are_never_cached() {
        let cache = DentryCache::new();
        cache.insert(12, b".", file(12));
        cache.insert(12, b"..", file(2));
        assert_eq!(cache.get(12, b"."), None);
        assert_eq!(cache.get(12, b".."), None);
    }

    #[test]
    fn a_full_shard_is_emptied_and_keeps_working() {
        let cache = DentryCache::new();
        let names: Vec<String> = (0..SHARDS * ENTRIES_PER_SHARD * 2)
            .map(|n| format!("f{n}"))
            .collect();
        for (n, name) in names.iter().enumerate() {
            cache.insert(12, name.as_bytes(), file(n as u32));
        }
        let total: usize = cache.shards.iter().map(|s| s.read().len()).sum();
        assert!(total <= SHARDS * ENTRIES_PER_SHARD);
        let last = names.len() - 1;
        assert_eq!(
            cache.get(12, names[last].as_bytes()),
            Some(file(last as u32))
        );
    }

    #[test]
    fn names_differing_past_eight_bytes_or_in_length_hash_apart() {
        assert_ne!(dentry_hash(2, b"abcdefgh1"), dentry_hash(2, b"abcdefgh2"));
        assert_ne!(dentry_hash(2, b"a"), dentry_hash(2, b"a\0"));
        assert_ne!(dentry_hash(2, b"a"), dentry_hash(3, b"a"));
    }
}

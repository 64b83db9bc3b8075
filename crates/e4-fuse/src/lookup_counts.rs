//! The kernel's lookup counts (FUSE's `nlookup`): how many times a node was handed to the
//! kernel in an entry reply, less what `forget` gave back.
//!
//! While the kernel knows a node, the inode stays open in the engine
//! ([`Filesystem::open_inode`]): a file whose last name is removed while the kernel still
//! holds it (a process has it as its working directory, or `fstat`s a descriptor whose
//! file handle is gone) lives on the orphan list until the last forget, as the protocol
//! asks, instead of being freed under the kernel. The engine frees it then; any still
//! known at unmount are freed by the engine's unmount (the kernel sends no forgets then).

use e4_fs::{Filesystem, Result};

use crate::shards::Shards;

pub(crate) struct LookupCounts {
    counts: Shards<u64>,
}

impl LookupCounts {
    pub(crate) fn new() -> Self {
        LookupCounts {
            counts: Shards::new(),
        }
    }

    /// Counts one more lookup of `ino`, before the reply that hands it to the kernel is
    /// sent (a forget can follow the reply at once, on another thread). The first one opens
    /// the inode in the engine, which fails if it has meanwhile lost its last link.
    pub(crate) fn remember(&self, fs: &Filesystem, ino: u32) -> Result<()> {
        let mut shard = self.counts.shard(u64::from(ino));
        let count = shard.entry(u64::from(ino)).or_insert(0);
        if *count == 0 {
            if let Err(e) = fs.open_inode(ino) {
                shard.remove(&u64::from(ino));
                return Err(e);
            }
        }
        *count += 1;
        Ok(())
    }

    /// Takes back `n` lookups of `ino` (a forget, or a reply that was never sent); the last
    /// closes the inode in the engine, which frees it if it has no links and no open file
    /// handle. The shard stays locked across that close, so a lookup of the same inode
    /// cannot open it in between.
    pub(crate) fn forget(&self, fs: &Filesystem, ino: u32, n: u64) {
        let mut shard = self.counts.shard(u64::from(ino));
        let Some(count) = shard.get_mut(&u64::from(ino)) else {
            // The kernel forgets only what it was given; the root it was never given.
            return;
        };
        *count = count.saturating_sub(n);
        if *count == 0 {
            shard.remove(&u64::from(ino));
            // A forget has no reply: an error here shows at the next e2fsck, as the
            // kernel's own failures in eviction do.
            let _ = fs.release_inode(ino);
        }
    }

    /// Closes every inode the kernel still knows (at unmount, which sends no forgets).
    pub(crate) fn forget_all(&self, fs: &Filesystem) {
        for (ino, _) in self.counts.drain() {
            let _ = fs.release_inode(ino as u32);
        }
    }
}

//! Inodes without links that are still open. The on-disk orphan list (`s_last_orphan`,
//! chained through each orphan's `i_dtime`) is rebuilt from this set at each commit, so
//! e2fsck frees them if the filesystem is not unmounted cleanly. Touched only when the last
//! link of an open file goes and at its last close.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicUsize, Ordering};

use parking_lot::Mutex;

#[derive(Default)]
pub(crate) struct Orphans {
    inodes: Mutex<BTreeSet<u32>>,
    /// Orphans added or removed since the last commit chained them: each changes the
    /// `i_dtime` of the orphan before it in the chain, whose record the commit writes,
    /// though no operation marked it dirty. Counted toward the running transaction's
    /// size (`log_blocks_pending`) from the change on: 1,200 unlinks of open files in as
    /// many table blocks made transactions of 551 blocks counted as 384.
    changes: AtomicUsize,
}

impl Orphans {
    /// Adds `ino`, whose last link went while it is open.
    pub(crate) fn add(&self, ino: u32) {
        if self.inodes.lock().insert(ino) {
            self.changes.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Removes `ino` (its last close); whether it was an orphan.
    pub(crate) fn remove(&self, ino: u32) -> bool {
        let removed = self.inodes.lock().remove(&ino);
        if removed {
            self.changes.fetch_add(1, Ordering::Relaxed);
        }
        removed
    }

    /// Inode-table blocks the changes since the last [`Self::chain`] may make the commit
    /// write beyond those operations marked dirty: one per change, at most.
    pub(crate) fn pending_changes(&self) -> usize {
        self.changes.load(Ordering::Relaxed)
    }

    /// The orphans in inode order: the chain's order on disk, each `i_dtime` naming the
    /// next, the superblock naming the first.
    pub(crate) fn chain(&self) -> Vec<u32> {
        self.inodes.lock().iter().copied().collect()
    }

    /// [`Self::chain`] for the commit that writes it, with every operation stopped: the
    /// changes counted so far are in the transaction it gathers.
    pub(crate) fn chain_for_commit(&self) -> Vec<u32> {
        let inodes = self.inodes.lock();
        self.changes.store(0, Ordering::Relaxed);
        inodes.iter().copied().collect()
    }
}

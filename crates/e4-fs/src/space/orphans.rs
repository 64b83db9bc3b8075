//! Inodes without links that are still open. The on-disk orphan list (`s_last_orphan`,
//! chained through each orphan's `i_dtime`) is rebuilt from this set at each commit, so
//! e2fsck frees them if the filesystem is not unmounted cleanly. Touched only when the last
//! link of an open file goes and at its last close.

use std::collections::BTreeSet;

use parking_lot::Mutex;

#[derive(Default)]
pub(crate) struct Orphans {
    inodes: Mutex<BTreeSet<u32>>,
}

impl Orphans {
    /// Adds `ino`, whose last link went while it is open.
    pub(crate) fn add(&self, ino: u32) {
        self.inodes.lock().insert(ino);
    }

    /// Removes `ino` (its last close); whether it was an orphan.
    pub(crate) fn remove(&self, ino: u32) -> bool {
        self.inodes.lock().remove(&ino)
    }

    /// The orphans in inode order: the chain's order on disk, each `i_dtime` naming the
    /// next, the superblock naming the first.
    pub(crate) fn chain(&self) -> Vec<u32> {
        self.inodes.lock().iter().copied().collect()
    }
}

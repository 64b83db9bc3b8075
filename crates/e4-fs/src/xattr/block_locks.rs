//! Locks for xattr blocks' reference counts.

use crossbeam_utils::CachePadded;
use parking_lot::Mutex;

/// Stripes of the xattr block reference-count locks.
const XATTR_BLOCK_LOCKS: usize = 64;

/// Locks for xattr blocks' reference counts, striped by block number: a shared block has no
/// owning inode whose lock would cover it (the kernel locks its buffer).
pub(crate) struct XattrBlockLocks {
    stripes: Box<[CachePadded<Mutex<()>>]>,
}

impl Default for XattrBlockLocks {
    fn default() -> Self {
        XattrBlockLocks {
            stripes: (0..XATTR_BLOCK_LOCKS)
                .map(|_| CachePadded::new(Mutex::new(())))
                .collect(),
        }
    }
}

impl XattrBlockLocks {
    /// The lock that covers xattr block `nr`'s reference count. Taken after the inode's
    /// lock and held only while the count is read and written (and the block freed).
    pub(crate) fn of(&self, nr: u64) -> &Mutex<()> {
        &self.stripes[(nr % self.stripes.len() as u64) as usize]
    }
}

//! Quota usage as pass 1 adds it up (the quota feature): per user, group and project,
//! the space and inodes of every inode e2fsck charges (`quota_data_add`,
//! `quota_data_inodes`), for the comparison with the quota files after pass 5.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};

use e4_format::inode::Inode;
use e4_format::quota::QUOTA_TYPES;

/// What one id uses: bytes and inodes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    pub space: u64,
    pub inodes: u64,
}

/// Usage per id of each quota type; pass 1 fills one per piece of inode table and adds
/// it to the shared total once, so the scan takes no lock per inode.
#[derive(Debug, Default)]
pub struct QuotaUsage {
    per_type: [HashMap<u32, Usage>; QUOTA_TYPES],
}

impl QuotaUsage {
    /// Charges `inode` with `space` bytes and `inodes` inodes to its user, group and
    /// project (the project only where `i_projid` is within the inode's extra fields;
    /// e4-format reads it as 0 otherwise, as `get_qid` does).
    pub fn charge(&mut self, inode: &Inode, space: u64, inodes: u64) {
        let ids = [inode.uid(), inode.gid(), inode.record.projid];
        for (map, id) in self.per_type.iter_mut().zip(ids) {
            let usage = map.entry(id).or_default();
            usage.space += space;
            usage.inodes += inodes;
        }
    }

    /// The usage per id of quota type `qtype` (user, group, project).
    pub fn of_type(&self, qtype: usize) -> &HashMap<u32, Usage> {
        &self.per_type[qtype]
    }

    fn add(&mut self, other: QuotaUsage) {
        for (map, other) in self.per_type.iter_mut().zip(other.per_type) {
            for (id, usage) in other {
                let total = map.entry(id).or_default();
                total.space += usage.space;
                total.inodes += usage.inodes;
            }
        }
    }
}

/// The sums of all pieces.
#[derive(Debug, Default)]
pub struct QuotaTotals {
    usage: Mutex<QuotaUsage>,
}

impl QuotaTotals {
    /// The sums, once pass 1 is done.
    pub fn lock(&self) -> MutexGuard<'_, QuotaUsage> {
        self.usage.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Adds one piece's usage.
    pub fn add(&self, piece: QuotaUsage) {
        self.usage
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .add(piece);
    }
}

//! What pass 1 learns of xattr values held in inodes (the ea_inode feature), for pass 4:
//! the inodes flagged `EXT4_EA_INODE_FL`, with the count each stores, and how many
//! entries name each (`inc_ea_inode_refs`).

use std::collections::HashMap;
use std::sync::Mutex;

use e4_format::inode::Inode;

/// An inode flagged as an xattr value, as pass 1 found it.
#[derive(Debug, Clone, Copy)]
struct ValueInode {
    /// The references it stores (`ext2fs_get_ea_inode_ref`).
    stored_refs: u64,
    /// Old Lustre-style value inodes store no count: their `i_ctime` equals `i_atime`.
    lustre: bool,
}

/// What pass 1 learns of value inodes, for pass 4. Only inodes with xattrs in inodes touch
/// it, so one lock each is enough.
#[derive(Debug, Default)]
pub struct EaInodes {
    /// Entries naming each inode.
    refs: Mutex<HashMap<u32, u64>>,
    /// Inodes flagged as values.
    found: Mutex<HashMap<u32, ValueInode>>,
}

impl EaInodes {
    /// Counts one entry naming each of `inodes` (one number per entry).
    pub fn add_refs(&self, inodes: &[u32]) {
        let mut refs = self.refs.lock().unwrap_or_else(|e| e.into_inner());
        for &inode in inodes {
            *refs.entry(inode).or_default() += 1;
        }
    }

    /// Records inode `inode`, flagged `EXT4_EA_INODE_FL`, whatever its mode: e2fsck
    /// 1.47.0 asks nothing more of it (`PR_1_EA_INODE_NONREG` came later).
    pub fn record(&self, inode: &Inode) {
        let ino = inode.ino;
        let record = &inode.record;
        let value = ValueInode {
            stored_refs: (u64::from(record.ctime) << 32) | u64::from(record.version_lo),
            lustre: record.ctime == record.atime,
        };
        let mut found = self.found.lock().unwrap_or_else(|e| e.into_inner());
        found.insert(ino, value);
    }

    /// Every inode flagged as a value, with the entries found naming it, taken once
    /// after pass 1 so that pass 4's threads read it without a lock.
    pub fn values(&self) -> HashMap<u32, ValueInodeRefs> {
        let found = self.found.lock().unwrap_or_else(|e| e.into_inner());
        let refs = self.refs.lock().unwrap_or_else(|e| e.into_inner());
        found
            .iter()
            .map(|(&ino, value)| {
                let refs = ValueInodeRefs {
                    stored_refs: value.stored_refs,
                    lustre: value.lustre,
                    from_xattrs: refs.get(&ino).copied().unwrap_or(0),
                };
                (ino, refs)
            })
            .collect()
    }
}

/// A value inode as pass 4 compares it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ValueInodeRefs {
    /// The references it stores (`ext2fs_get_ea_inode_ref`).
    pub stored_refs: u64,
    /// Old Lustre-style value inodes store no count: their `i_ctime` equals `i_atime`.
    pub lustre: bool,
    /// Entries naming it.
    pub from_xattrs: u64,
}

//! The encryption policy of every encrypted inode, found by pass 1 for pass 2 (e2fsck's
//! `encrypted_file_info`): each entry of an encrypted directory must name a file of the
//! directory's policy.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

/// An inode's encryption policy: its fscrypt context (the `c` attribute) without the
/// per-file nonce.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EncryptionPolicy {
    /// A version-1 or version-2 policy: version, modes, flags and the key's descriptor
    /// or identifier, as stored.
    Known(Vec<u8>),
    /// A context of a version e2fsck does not know: possibly valid, and all such
    /// policies count as one (`UNRECOGNIZED_ENCRYPTION_POLICY`).
    Unrecognized,
}

/// Policies by inode, for the encrypted inodes only.
#[derive(Debug, Default)]
pub struct EncryptionPolicies {
    /// Whether any policy was recorded: pass 2 asks for every directory block, and on a
    /// filesystem without encryption the answer takes no lock.
    any: AtomicBool,
    by_inode: Mutex<HashMap<u32, EncryptionPolicy>>,
}

impl EncryptionPolicies {
    /// Records inode `ino`'s policy (pass 1).
    pub fn record(&self, ino: u32, policy: EncryptionPolicy) {
        self.by_inode
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(ino, policy);
        self.any.store(true, Ordering::Relaxed);
    }

    /// Inode `ino`'s policy; `None` when it is not encrypted, or its flag has no
    /// context or a corrupt one (e2fsck's `NO_ENCRYPTION_POLICY`).
    pub fn of(&self, ino: u32) -> Option<EncryptionPolicy> {
        if !self.any.load(Ordering::Relaxed) {
            return None;
        }
        self.by_inode
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&ino)
            .cloned()
    }
}

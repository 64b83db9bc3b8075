//! Open directories and the listings their `readdir` requests are served from.
//!
//! A listing is read whole with [`Filesystem::read_dir`] when a directory handle reads
//! from offset 0 (at `opendir`'s first read, and at every `rewinddir`), and kept with the
//! handle until `releasedir`. Each entry's offset is its place in that listing plus one,
//! so the offsets a handle hands out stay valid for as long as it is open however the
//! directory changes: nothing is listed twice or skipped, and the kernel never loops
//! (fuser #267). The price is a copy of the directory per open handle, and changes made
//! after the listing was read are not seen until the next rewind.
//!
//! The engine's resumable readdir cursor (coming with the layout work) will replace the
//! copy: offsets become ext4's hash positions (as `ext4_readdir` gives them, `hash2pos`),
//! which stay valid while the directory changes without holding a listing per handle.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use e4_fs::FileType;

use crate::shards::Shards;

/// One entry of a listing.
pub(crate) struct Listed {
    pub name: Vec<u8>,
    pub ino: u32,
    pub file_type: FileType,
}

impl Listed {
    /// "." or "..", which carry no lookup count in a readdirplus reply.
    pub(crate) fn is_dot(&self) -> bool {
        self.name == b"." || self.name == b".."
    }
}

pub(crate) struct DirHandles {
    next: AtomicU64,
    /// The listing of each open handle, once read.
    listings: Shards<Option<Arc<[Listed]>>>,
}

impl DirHandles {
    pub(crate) fn new() -> Self {
        DirHandles {
            next: AtomicU64::new(1),
            listings: Shards::new(),
        }
    }

    /// A new handle, with no listing yet.
    pub(crate) fn open(&self) -> u64 {
        // Relaxed: the number only has to be unique.
        let fh = self.next.fetch_add(1, Ordering::Relaxed);
        self.listings.shard(fh).insert(fh, None);
        fh
    }

    /// The listing handle `fh` serves `offset` from: read afresh with `read` at offset 0,
    /// else the one it already has (read now if the kernel skipped offset 0).
    pub(crate) fn listing<E>(
        &self,
        fh: u64,
        offset: u64,
        read: impl FnOnce() -> Result<Vec<Listed>, E>,
    ) -> Result<Arc<[Listed]>, E> {
        if offset != 0 {
            if let Some(Some(listing)) = self.listings.shard(fh).get(&fh) {
                return Ok(listing.clone());
            }
        }
        // Read without the shard's lock: a large directory takes a while.
        let listing: Arc<[Listed]> = read()?.into();
        self.listings.shard(fh).insert(fh, Some(listing.clone()));
        Ok(listing)
    }

    pub(crate) fn release(&self, fh: u64) {
        self.listings.shard(fh).remove(&fh);
    }
}

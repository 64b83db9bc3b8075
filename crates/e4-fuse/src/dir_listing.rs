//! Directory listings for `readdir` and `readdirplus`, read from the engine in batches with
//! [`Filesystem::read_dir_from`], whose cookies stay valid while the directory changes (the
//! kernel's own readdir positions: byte positions in linear directories, hash positions in
//! indexed ones). Nothing is kept per open directory: a handle's offset is all the state,
//! so a directory of any size costs one batch of memory, and changes made while a program
//! lists it are seen as the kernel's ext4 shows them.
//!
//! FUSE offsets: 0 is the start, 1 follows ".", 2 follows ".."; any larger offset is an
//! engine cookie plus 2. Engine cookies are at most 2^63 - 2^32 (ext4 caps the major hash
//! below its end-of-directory value), so the sum stays below 2^63, as the kernel's signed
//! offsets require.
//!
//! A batch is read whole before the reply is filled: filling it may count lookups, which
//! takes the entries' inode locks, and the engine holds the directory's lock while it
//! lists (a rename that locks an entry before the directory would wait on the listing
//! while the listing waited on it).

use e4_fs::{Error, FileType, Filesystem};

/// Offsets taken by "." and "..".
const DOTS: u64 = 2;

/// Entries read from the engine per batch: a reply holds a few dozen to a few hundred.
const BATCH: usize = 128;

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

/// The next batch of directory `dir`'s listing from FUSE offset `offset`, each entry with
/// the offset that follows it; empty at the end.
pub(crate) fn batch(fs: &Filesystem, dir: u32, offset: u64) -> Result<Vec<(Listed, u64)>, Error> {
    let mut out = Vec::with_capacity(BATCH);
    let dot = |name: &[u8], ino| Listed {
        name: name.to_vec(),
        ino,
        file_type: FileType::Directory,
    };
    if offset == 0 {
        out.push((dot(b".", dir), 1));
    }
    if offset <= 1 {
        out.push((dot(b"..", fs.parent(dir)?), DOTS));
    }
    let mut found = Vec::new();
    fs.read_dir_from(dir, offset.saturating_sub(DOTS), |entry, next| {
        found.push((entry, next + DOTS));
        found.len() < BATCH
    })?;
    for (entry, next) in found {
        let file_type = match entry.file_type {
            Some(t) => t,
            // No `filetype` feature: the type is in the inode.
            None => fs.metadata(entry.ino)?.file_type,
        };
        let listed = Listed {
            name: entry.name,
            ino: entry.ino,
            file_type,
        };
        out.push((listed, next));
    }
    Ok(out)
}

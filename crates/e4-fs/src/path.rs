//! Resolving slash-separated paths from the root, following symlinks like the kernel does
//! (at most 40 of them per resolution).

use std::collections::VecDeque;

use e4_format::inode::{FileType, ROOT_INO};

use crate::error::{Error, Result};
use crate::filesystem::Filesystem;

/// The kernel's limit on symlinks followed in one lookup (`MAXSYMLINKS`).
const MAX_SYMLINKS: usize = 40;

impl Filesystem {
    /// Resolves `path` (absolute or relative to the root) to an inode number. Symlinks in
    /// the middle are always followed; the last component is followed when `follow_last`.
    pub fn resolve(&self, path: &str, follow_last: bool) -> Result<u32> {
        self.resolve_bytes(path.as_bytes(), follow_last)
    }

    /// [`Filesystem::resolve`] for paths that are not UTF-8.
    pub fn resolve_bytes(&self, path: &[u8], follow_last: bool) -> Result<u32> {
        let shown = || String::from_utf8_lossy(path).into_owned();
        let mut pending: VecDeque<Vec<u8>> = components(path).collect();
        let mut current = ROOT_INO;
        let mut followed = 0;
        while let Some(name) = pending.pop_front() {
            let dir = self.read_inode(current)?;
            if dir.file_type() != Some(FileType::Directory) {
                return Err(Error::NotADirectory(shown()));
            }
            let ino = self
                .lookup_in(&dir, &name)?
                .ok_or_else(|| Error::NotFound(shown()))?;
            let inode = self.read_inode(ino)?;
            let is_last = pending.is_empty();
            if inode.file_type() == Some(FileType::Symlink) && (!is_last || follow_last) {
                followed += 1;
                if followed > MAX_SYMLINKS {
                    return Err(Error::SymlinkLoop(shown()));
                }
                let target = self.read_link_of(&inode)?;
                if target.first() == Some(&b'/') {
                    current = ROOT_INO;
                }
                for part in components(&target).collect::<Vec<_>>().into_iter().rev() {
                    pending.push_front(part);
                }
                continue;
            }
            current = ino;
        }
        Ok(current)
    }
}

fn components(path: &[u8]) -> impl Iterator<Item = Vec<u8>> + '_ {
    path.split(|&b| b == b'/')
        .filter(|c| !c.is_empty() && *c != b".")
        .map(<[u8]>::to_vec)
}

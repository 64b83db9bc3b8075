//! Resolving slash-separated paths from the root, following symlinks like the kernel does
//! (at most 40 of them per resolution).
//!
//! Each component goes through the dentry cache ([`Filesystem::lookup_child`]), which also
//! gives the child's file type: a walk over cached names touches no inode handle, no inode
//! lock and no directory block, and allocates nothing unless it follows a symlink.

use std::borrow::Cow;

use e4_format::inode::{FileType, ROOT_INO};

use crate::error::{Error, Result};
use crate::filesystem::{refuse_ea_inode, Filesystem};
use crate::names::dentry_cache::Child;

/// The kernel's limit on symlinks followed in one lookup (`MAXSYMLINKS`).
const MAX_SYMLINKS: usize = 40;

/// A path still to walk: the caller's, or a symlink's target spliced in front of what is
/// left of the path that reached it.
struct PathText<'a> {
    text: Cow<'a, [u8]>,
    /// Start of the next component; separators and "." components before it are skipped.
    at: usize,
}

impl<'a> PathText<'a> {
    fn new(text: Cow<'a, [u8]>) -> Self {
        let mut path = PathText { text, at: 0 };
        path.skip_empty();
        path
    }

    /// Moves past separators and "." components.
    fn skip_empty(&mut self) {
        loop {
            let rest = &self.text[self.at..];
            if rest.first() == Some(&b'/') || rest == b"." || rest.starts_with(b"./") {
                self.at += 1;
            } else {
                return;
            }
        }
    }

    fn is_done(&self) -> bool {
        self.at == self.text.len()
    }

    /// The byte range of the next component, which the walk then passes.
    fn take_component(&mut self) -> std::ops::Range<usize> {
        let start = self.at;
        let end = self.text[start..]
            .iter()
            .position(|&b| b == b'/')
            .map_or(self.text.len(), |len| start + len);
        self.at = end;
        self.skip_empty();
        start..end
    }
}

impl Filesystem {
    /// Resolves `path` (absolute or relative to the root) to an inode number. Symlinks in
    /// the middle are always followed; the last component is followed when `follow_last`.
    pub fn resolve(&self, path: &str, follow_last: bool) -> Result<u32> {
        self.resolve_bytes(path.as_bytes(), follow_last)
    }

    /// [`Filesystem::resolve`] for paths that are not UTF-8.
    pub fn resolve_bytes(&self, path: &[u8], follow_last: bool) -> Result<u32> {
        let shown = || String::from_utf8_lossy(path).into_owned();
        // Innermost (the latest symlink's target) last.
        let mut pending = vec![PathText::new(Cow::Borrowed(path))];
        let mut current = ROOT_INO;
        // The root's type is checked by the lookup in it (`lookup_in` refuses a
        // non-directory); every later directory's comes with the name that led to it.
        let mut current_type = Some(FileType::Directory);
        let mut followed = 0;
        while let Some(top) = pending.last_mut() {
            if top.is_done() {
                pending.pop();
                continue;
            }
            let range = top.take_component();
            let is_last = pending.iter().all(PathText::is_done);
            if current_type != Some(FileType::Directory) {
                return Err(Error::NotADirectory(shown()));
            }
            let name = &pending.last().expect("taken from it").text[range];
            let child = self
                .lookup_child(current, name)?
                .ok_or_else(|| Error::NotFound(shown()))?;
            if child.file_type == Some(FileType::Symlink) && (!is_last || follow_last) {
                followed += 1;
                if followed > MAX_SYMLINKS {
                    return Err(Error::SymlinkLoop(shown()));
                }
                let target = self.read_caller_inode(child.ino, |link| self.read_link_of(link))?;
                if target.first() == Some(&b'/') {
                    current = ROOT_INO;
                    current_type = Some(FileType::Directory);
                }
                pending.push(PathText::new(Cow::Owned(target)));
                continue;
            }
            current = child.ino;
            current_type = child.file_type;
        }
        Ok(current)
    }
}

impl Filesystem {
    /// Where `name` in directory `dir` leads: from the dentry cache, or read from the
    /// directory under its lock (shared) and cached before the lock is released (rule 1 of
    /// the module docs). `None` when the directory has no such name.
    pub(crate) fn lookup_child(&self, dir: u32, name: &[u8]) -> Result<Option<Child>> {
        if let Some(child) = self.dentries.get(dir, name) {
            return Ok(Some(child));
        }
        let dir_handle = self.inode_handle(dir)?;
        let dir_state = dir_handle.read(&self.inodes);
        refuse_ea_inode(&dir_state.inode)?;
        let Some(ino) = self.lookup_in(&dir_state.inode, name)? else {
            return Ok(None);
        };
        let handle = self.inode_handle(ino)?;
        let child_of = |inode: &e4_format::inode::Inode| -> Result<Child> {
            refuse_ea_inode(inode)?;
            Ok(Child {
                ino,
                file_type: inode.file_type(),
            })
        };
        // The child's lock is only tried while the directory's is held: a rename holding
        // the child's lock may be waiting for the directory's (lock order is by number).
        if let Some(state) = handle.try_read(&self.inodes) {
            let child = child_of(&state.inode)?;
            self.dentries.insert(dir, name, child);
            return Ok(Some(child));
        }
        drop(dir_state);
        let state = handle.read(&self.inodes);
        child_of(&state.inode).map(Some)
    }
}

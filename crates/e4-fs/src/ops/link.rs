//! Hard links: another name for an existing inode.

use e4_format::inode::FileType;

use crate::dir::editor::ADD_ENTRY_CREDITS;
use crate::dir::entry::check_name;
use crate::error::{Error, Result};
use crate::filesystem::Filesystem;
use crate::inode::user_flags::{refuse_if_immutable, refuse_if_protected};
use crate::io::credits::INODE;
use crate::ops::namespace::{known_type, lock_in_order, shown, two_states, MAX_LINKS};

impl Filesystem {
    /// Adds a hard link `name` in `parent` to inode `ino` (not a directory).
    pub fn link(&self, ino: u32, parent: u32, name: &[u8]) -> Result<()> {
        check_name(name)?;
        self.check_caller_ino(ino)?;
        self.check_caller_ino(parent)?;
        let writer = self.writer()?;
        {
            // The inode's link count, the directory, and the entry.
            let txn = writer.begin(self, 2 * INODE + ADD_ENTRY_CREDITS)?;
            let io = writer.io(self, &txn);
            let format = self.dir_format();
            let handles = [self.inode_handle(parent)?, self.inode_handle(ino)?];
            let mut locked = lock_in_order(&self.inodes, &handles);
            if parent == ino {
                return Err(Error::Invalid("a directory cannot be hard-linked".into()));
            }
            let (dir, target) = two_states(&mut locked, parent, ino);
            self.require_live_directory(&dir.inode)?;
            let file_type = known_type(&target.inode)?;
            if file_type == FileType::Directory {
                return Err(Error::Invalid("a directory cannot be hard-linked".into()));
            }
            if target.inode.links_count() == 0 {
                return Err(Error::NotFound(format!("inode {ino}")));
            }
            if target.inode.links_count() >= MAX_LINKS {
                return Err(Error::TooManyLinks(shown(name)));
            }
            if self.lookup_locked(&io, &format, dir, name)?.is_some() {
                return Err(Error::Exists(shown(name)));
            }
            // `vfs_link`: no name in an immutable directory, none to a protected inode.
            refuse_if_immutable(&dir.inode, "add a name to it")?;
            refuse_if_protected(&target.inode, "link to it")?;
            // Adding the entry may grow the directory before it fails (a full one-block
            // directory takes block 1 before its index can be made): all or nothing.
            io.all_or_nothing(dir, |dir| {
                self.edit_dir(&io, &format, dir, |e| e.add_entry(name, ino, file_type))
            })?;
            target.inode.record.links_count += 1;
            Self::touch(target, false);
            Self::touch(dir, true);
            drop(locked);
            for h in &handles {
                self.inodes.mark_dirty(h);
            }
        }
        self.commit_if_needed()
    }
}

//! The orphan list a crash left behind, cleaned up when the filesystem is opened for
//! writing, as the kernel's mount does (`ext4_orphan_cleanup`): an inode without links
//! (unlinked while open) is freed; one with links (a truncate that did not finish) is cut
//! to its size and taken off the list. With a journal this runs after the replay, on the
//! committed state.

use std::collections::HashSet;

use e4_format::inode::FileType;
use e4_format::{FormatError, Location, Problem, Structure};

use crate::error::Result;
use crate::filesystem::Filesystem;
use crate::io::credits::INODE;

impl Filesystem {
    /// Cleans up the on-disk orphan list starting at inode `head` (`s_last_orphan`). The
    /// chain is read whole first, through each orphan's `i_dtime`: a number outside the
    /// inode table or a loop is damage, reported before anything changes.
    pub(crate) fn clean_up_orphans(&self, head: u32) -> Result<()> {
        let writer = self.writer()?;
        let mut chain = Vec::new();
        let mut seen = HashSet::new();
        let mut ino = head;
        while ino != 0 {
            let bad = |problem| {
                FormatError::corrupt(Structure::Superblock, Location::Inode(ino), problem)
            };
            if self.geometry.inode_location(ino).is_none() {
                return Err(bad(Problem::OrphanOutOfRange).into());
            }
            if !seen.insert(ino) {
                return Err(bad(Problem::OrphanLoop).into());
            }
            chain.push(ino);
            ino = self.read_inode_record(ino)?.record.dtime;
        }
        for ino in chain {
            let handle = self.inode_handle(ino)?;
            let (links, file_type, size) = {
                let state = handle.read(&self.inodes);
                let inode = &state.inode;
                (inode.links_count(), inode.file_type(), inode.size())
            };
            if links == 0 {
                // On the list until it is freed: the next commit writes the chain without it.
                writer.space.orphans.add(ino);
                self.close_orphan(ino)?;
                continue;
            }
            {
                let _txn = writer.begin(INODE)?;
                handle.lock(&self.inodes).inode.record.dtime = 0;
                self.inodes.mark_dirty(&handle);
            }
            if file_type == Some(FileType::Regular) {
                self.truncate(ino, size)?;
            }
        }
        Ok(())
    }
}

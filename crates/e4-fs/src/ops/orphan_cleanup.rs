//! The orphan list a crash left behind, cleaned up when the filesystem is opened for
//! writing, as the kernel's mount does (`ext4_orphan_cleanup`): an inode without links
//! (unlinked while open) is freed; one with links (a truncate that did not finish) is cut
//! to its size and then taken off the list. With a journal this runs after the replay, on the
//! committed state.

use std::collections::HashSet;

use e4_format::inode::FileType;
use e4_format::{FormatError, Location, Problem, Structure};

use crate::error::Result;
use crate::filesystem::Filesystem;
use crate::io::credits::{INODE, ORPHAN};

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
            // On the list until it is done with: the next commit writes the chain.
            writer.space.orphans.add(ino);
            self.finish_orphan(ino)?;
        }
        Ok(())
    }

    /// Finishes what orphan `ino` stands for, nobody having it open: frees an inode
    /// without links, finishes the truncate of one with links. At open for what a crash
    /// left, and at unmount.
    pub(crate) fn finish_orphan(&self, ino: u32) -> Result<()> {
        let links = self
            .inode_handle(ino)?
            .read(&self.inodes)
            .inode
            .links_count();
        if links == 0 {
            self.close_orphan(ino)
        } else {
            self.finish_truncate(ino)
        }
    }

    /// Finishes the truncate that orphan `ino`, which has links, stands for: frees what
    /// it holds past its size, then takes it off the orphan list, in that order, so a
    /// crash meanwhile leaves it on the list for the next recovery (`ext4_orphan_cleanup`
    /// truncates, then `ext4_orphan_del`). At open for a truncate a crash cut short, and
    /// at unmount for one that failed part-way.
    fn finish_truncate(&self, ino: u32) -> Result<()> {
        let writer = self.writer()?;
        let handle = self.inode_handle(ino)?;
        let (file_type, size) = {
            let state = handle.read(&self.inodes);
            (state.inode.file_type(), state.inode.size())
        };
        if file_type == Some(FileType::Regular) {
            self.truncate(ino, size)?;
        }
        // The inode and its neighbour on the list. A truncate in steps took it off itself.
        let _txn = writer.begin(self, INODE + ORPHAN)?;
        let mut state = handle.lock(&self.inodes);
        if self.take_truncated_off_orphans(&mut state) {
            drop(state);
            self.inodes.mark_dirty(&handle);
        }
        Ok(())
    }
}

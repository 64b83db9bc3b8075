//! Changing an inode's attributes: permissions, owner, times and size (`setattr`), and
//! opening and closing files (an inode unlinked while open lives until its last close).

use e4_format::inode::{FileType, Inode, Timestamp};

use crate::error::{Error, Result};
use crate::filesystem::Filesystem;
use crate::inode::cache::InodeHandle;
use crate::inode::user_flags::{refuse_if_immutable, refuse_if_protected};
use crate::io::credits::{INODE, ORPHAN};
use crate::ops::stat::Metadata;
use crate::txn::TxnHandle;

/// The attributes [`Filesystem::setattr`] changes; `None` leaves one as it is. The change
/// time is always set to now, as the kernel does.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SetAttributes {
    /// Permission bits including setuid, setgid and sticky (the file type stays).
    pub permissions: Option<u16>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    /// A new size (regular files only): a truncate or an extension with a hole.
    pub size: Option<u64>,
    pub atime: Option<Timestamp>,
    pub mtime: Option<Timestamp>,
    /// `atime` and `mtime` are "now" because the caller named no time (`utimes` with
    /// NULL, the kernel's ATTR_TOUCH): an append-only inode takes that, unlike times a
    /// caller names.
    pub times_are_touch: bool,
}

/// What [`Filesystem::drop_open_count`] did.
enum Released {
    /// The count dropped; `last`: that was the last close of an inode without links.
    Done { last: bool },
    /// The last close must give back a reservation window, in a transaction.
    NeedsTransaction,
}

/// `S_ISUID`, `S_ISGID` and `S_IXGRP`.
const SET_USER_ID: u16 = 0o4000;
const SET_GROUP_ID: u16 = 0o2000;
const GROUP_EXECUTE: u16 = 0o0010;

/// The mode of a non-directory after a change of owner or group with no new mode: setuid
/// goes, and setgid with group execute (a setgid without it marks mandatory locking and
/// stays), even for root and even when the ids do not change (`chown_common` asks
/// `notify_change` to kill them: `ATTR_KILL_SUID`, `setattr_should_drop_sgid`). A
/// directory keeps both. (The kernel also drops a setgid without group execute when the
/// caller is neither in the file's group nor holds `CAP_FSETID`; that check on the caller is
/// the caller's to make, as the other permission checks are.)
fn mode_after_chown(mode: u16, is_dir: bool) -> u16 {
    if is_dir {
        return mode;
    }
    let mut mode = mode & !SET_USER_ID;
    if mode & GROUP_EXECUTE != 0 {
        mode &= !SET_GROUP_ID;
    }
    mode
}

impl Filesystem {
    /// Records that inode `ino` is open (a file handle of a FUSE mount, say): if its last
    /// link is removed, it lives on (on the orphan list) until [`Filesystem::release_inode`].
    pub fn open_inode(&self, ino: u32) -> Result<()> {
        self.check_caller_ino(ino)?;
        let handle = self.inode_handle(ino)?;
        let mut state = handle.lock(&self.inodes);
        if state.inode.links_count() == 0 && state.open_count == 0 {
            return Err(Error::NotFound(format!("inode {ino}")));
        }
        state.open_count += 1;
        Ok(())
    }

    /// Ends one [`Filesystem::open_inode`] of inode `ino`; the last close of an inode without
    /// links frees it.
    pub fn release_inode(&self, ino: u32) -> Result<()> {
        self.release_inode_times(ino, 1)
    }

    /// Ends `times` [`Filesystem::open_inode`]s of inode `ino` at once, as
    /// [`Filesystem::release_inode`] `times` over: a FUSE forget gives back every lookup
    /// the kernel counted, and a mount that opens the inode once per lookup (the engine's
    /// count is then the only one kept) gives them back here. Refused, changing nothing,
    /// when the inode is open fewer times.
    pub fn release_inode_times(&self, ino: u32, times: u32) -> Result<()> {
        self.check_caller_ino(ino)?;
        let handle = self.inode_handle(ino)?;
        // Most releases give back no reservation (an unlinked file's forget through a
        // mount never does), and drop the count under the inode's lock alone; a
        // transaction joined for nothing was a fifth of such a forget's engine work.
        let mut txn = None;
        let last = loop {
            match self.drop_open_count(&handle, times, txn.as_ref())? {
                Released::Done { last } => break last,
                // Giving back a reservation window changes no block.
                Released::NeedsTransaction => txn = Some(self.writer()?.begin(self, 0)?),
            }
        };
        // Out of the transaction before the orphan's own.
        drop(txn);
        if last && self.writer.is_some() {
            self.close_orphan(ino)?;
            self.commit_if_needed()?;
        }
        Ok(())
    }

    /// Takes `times` off the inode's open count, under its lock. The last close gives back
    /// the blocks reserved for the file's next appends, as the kernel discards its
    /// preallocation then; a window that holds a run needs `txn` for that, and without
    /// one the count is left as it was. Refused, changing nothing, when the inode is open
    /// fewer times.
    fn drop_open_count(
        &self,
        handle: &InodeHandle,
        times: u32,
        txn: Option<&TxnHandle<'_>>,
    ) -> Result<Released> {
        let mut state = handle.lock(&self.inodes);
        if state.open_count < times || times == 0 {
            return Err(Error::Invalid(format!(
                "inode {} is open {} times, not {times}",
                handle.ino, state.open_count
            )));
        }
        if let (true, Some(w)) = (state.open_count == times, &self.writer) {
            match txn {
                Some(txn) => w.space.blocks.release_window(&mut state.window, txn.slot),
                None if !state.window.reset_if_unreserved() => {
                    return Ok(Released::NeedsTransaction)
                }
                None => {}
            }
        }
        state.open_count -= times;
        Ok(Released::Done {
            last: state.open_count == 0 && state.inode.links_count() == 0,
        })
    }

    /// Frees orphan `ino` if nobody has it open any more and it has no links: its blocks
    /// first in steps when they are in more groups than one transaction may change
    /// (`steps.rs`), then the rest and the inode together.
    pub(crate) fn close_orphan(&self, ino: u32) -> Result<()> {
        // The room the last transaction may need to free what is left: an orphan nobody
        // has open only shrinks, so what it holds now bounds it (and a step bounds what
        // the steps before it leave). A whole step's room for every last close of an
        // unlinked file let two such closes hold all of the log room.
        let (cuts, room) = {
            let handle = self.inode_handle(ino)?;
            let state = handle.read(&self.inodes);
            if state.deleted || state.open_count > 0 || state.inode.links_count() > 0 {
                return Ok(());
            }
            (
                self.step_cuts(&state.inode, 0, u64::MAX)?,
                self.room_to_free(&state.inode),
            )
        };
        for cut in cuts.into_iter().rev() {
            if !self.free_orphan_from(ino, cut)? {
                return Ok(());
            }
            self.commit_if_needed()?;
        }
        let writer = self.writer()?;
        // The inode, its neighbour on the orphan list, and its xattr block's reference
        // count (its blocks' and inode's frees declare their own).
        let txn = writer.begin_with_room(self, INODE + ORPHAN + 1, room)?;
        let io = writer.io(self, &txn);
        let handle = self.inode_handle(ino)?;
        let mut state = handle.lock(&self.inodes);
        if state.deleted || state.open_count > 0 || state.inode.links_count() > 0 {
            return Ok(());
        }
        state.open_count = 0;
        // All or nothing: a failure leaves the inode whole on the orphan list.
        io.all_or_nothing(&mut state, |state| self.delete_inode(&io, state))?;
        writer.space.orphans.remove(ino);
        Ok(())
    }

    /// What immutable and append-only refuse of `attrs` (`ext4_setattr`: an immutable
    /// inode takes no change at all; `notify_change`: an append-only one no new mode,
    /// owner or named times). A new size is refused by `truncate` itself.
    fn refuse_protected_setattr(inode: &Inode, attrs: &SetAttributes) -> Result<()> {
        refuse_if_immutable(inode, "change its attributes")?;
        let named_times =
            (attrs.atime.is_some() || attrs.mtime.is_some()) && !attrs.times_are_touch;
        if attrs.permissions.is_some() || attrs.uid.is_some() || attrs.gid.is_some() || named_times
        {
            refuse_if_protected(inode, "change its mode, owner or times")?;
        }
        Ok(())
    }

    /// Changes the attributes of inode `ino`; returns them as they now are. A new owner or
    /// group without new permissions clears setuid and setgid as chown(2) does (see
    /// `mode_after_chown`); permissions given with them are taken as they are.
    pub fn setattr(&self, ino: u32, attrs: &SetAttributes) -> Result<Metadata> {
        self.check_caller_ino(ino)?;
        if let Some(size) = attrs.size {
            self.truncate(ino, size)?;
        }
        let writer = self.writer()?;
        {
            // The inode; an access ACL rewritten with a new mode declares its own.
            let txn = writer.begin(self, INODE)?;
            let io = writer.io(self, &txn);
            let handle = self.inode_handle(ino)?;
            let mut state = handle.lock(&self.inodes);
            if state.inode.links_count() == 0 && state.inode.file_type() != Some(FileType::Regular)
            {
                return Err(Error::NotFound(format!("inode {ino}")));
            }
            Self::refuse_protected_setattr(&state.inode, attrs)?;
            if let Some(p) = attrs.permissions {
                // `posix_acl_chmod`; all or nothing, so a failure leaves the mode too.
                io.all_or_nothing(&mut state, |state| {
                    let inode = &mut state.inode;
                    inode.record.mode = (inode.record.mode & !0o7777) | (p & 0o7777);
                    self.chmod_access_acl(&io, inode)
                })?;
            }
            let inode = &mut state.inode;
            if attrs.permissions.is_none() && (attrs.uid.is_some() || attrs.gid.is_some()) {
                let is_dir = inode.file_type() == Some(FileType::Directory);
                inode.record.mode = mode_after_chown(inode.record.mode, is_dir);
            }
            if let Some(uid) = attrs.uid {
                inode.set_uid(uid);
            }
            if let Some(gid) = attrs.gid {
                inode.set_gid(gid);
            }
            if let Some(t) = attrs.atime {
                inode.set_atime(t);
            }
            if let Some(t) = attrs.mtime {
                inode.set_mtime(t);
            }
            Self::touch(&mut state, false);
            drop(state);
            self.inodes.mark_dirty(&handle);
        }
        self.commit_if_needed()?;
        self.metadata(ino)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use crate::{Creator, Filesystem, OpenOptions};

    const CREATOR: Creator = Creator {
        permissions: 0o644,
        uid: 0,
        gid: 0,
        umask: 0,
    };

    /// The last close of a file gives back the blocks its window holds for its next
    /// appends, in a transaction; a close that is not the last, and a last close with
    /// nothing reserved (a FUSE forget of an unlinked empty file), join none.
    #[test]
    fn only_a_last_close_with_a_window_joins_a_transaction_and_it_gives_the_window_back() {
        let img = e4_testkit::make_empty_image(&["-t", "ext4"], 32);
        let options = OpenOptions {
            commit_interval: Duration::ZERO,
            ..OpenOptions::writable()
        };
        let fs = Filesystem::open(&img.path, options).unwrap();
        let blocks = &fs.writer.as_ref().unwrap().space.blocks;
        let joined = || fs.lock_stats().commit_gate.acquisitions;

        let appended = fs.create(2, b"appended", CREATOR).unwrap();
        fs.open_inode(appended).unwrap();
        fs.open_inode(appended).unwrap();
        fs.write_at(appended, 0, &[1u8; 8192]).unwrap();
        let held = blocks.in_windows();
        assert!(held > 0, "the append reserved no window");
        let before = joined();
        fs.release_inode(appended).unwrap();
        assert_eq!(
            joined(),
            before,
            "a close that is not the last joined a transaction"
        );
        assert_eq!(blocks.in_windows(), held);
        fs.release_inode(appended).unwrap();
        assert_eq!(blocks.in_windows(), 0, "the last close kept the window");
        assert_eq!(joined(), before + 1);

        let empty = fs.create(2, b"empty", CREATOR).unwrap();
        fs.open_inode(empty).unwrap();
        fs.unlink(2, b"empty").unwrap();
        let before = joined();
        fs.release_inode(empty).unwrap();
        assert_eq!(
            joined(),
            before + 1,
            "the last close of an unlinked empty file joined more than the orphan's freeing"
        );
        fs.unmount().unwrap();
        e4_testkit::e2fsck_clean(&img.path).unwrap();
    }
}

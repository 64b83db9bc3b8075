//! The flags `lsattr` shows and `chattr` sets (`FS_IOC_GETFLAGS`/`FS_IOC_SETFLAGS`), and the
//! check an open makes against immutable and append-only. The rules are in
//! `inode/user_flags.rs`; every other operation that a flag forbids asks there itself.

use crate::error::{Error, Result};
use crate::filesystem::Filesystem;
use crate::inode::user_flags::{after_set, refuse_open, visible, OpenIntent};
use crate::io::credits::INODE;

impl Filesystem {
    /// The flags of inode `ino` as `FS_IOC_GETFLAGS` shows them.
    pub fn user_flags(&self, ino: u32) -> Result<u32> {
        Ok(visible(&self.caller_inode(ino)?))
    }

    /// Sets the flags of inode `ino` as `FS_IOC_SETFLAGS` does and returns them as
    /// [`Filesystem::user_flags`] now shows them; the change time moves. `may_protect` is
    /// whether the caller holds CAP_LINUX_IMMUTABLE (without it, immutable and append-only
    /// are EPERM to change). Visible flags that are not the user's to change are kept;
    /// flags ext4 would act on beyond the record (extents, data journaling, casefold, DAX)
    /// are not changed (EOPNOTSUPP).
    pub fn set_user_flags(&self, ino: u32, flags: u32, may_protect: bool) -> Result<u32> {
        self.check_caller_ino(ino)?;
        let writer = self.writer()?;
        let shown = {
            let mut txn = writer.begin(self, INODE)?;
            let handle = self.inode_handle(ino)?;
            // A flag change waits for a truncate in steps, as for a write: immutable set
            // between two steps would stop it half-done.
            let mut state = self.lock_for_change(&mut txn, &handle, None)?;
            if state.inode.links_count() == 0 && state.open_count == 0 {
                return Err(Error::NotFound(format!("inode {ino}")));
            }
            let new = after_set(&state.inode, flags, may_protect)?;
            state.inode.record.flags = new;
            Self::touch(&mut state, false);
            let shown = visible(&state.inode);
            drop(state);
            self.inodes.mark_dirty(&handle);
            shown
        };
        self.commit_if_needed()?;
        Ok(shown)
    }

    /// Whether inode `ino` may be opened as `intent` says, as the kernel's `may_open`
    /// decides from its flags: an immutable inode not for writing or truncation, an
    /// append-only one for writing only with O_APPEND and never with O_TRUNC (EPERM).
    pub fn check_open(&self, ino: u32, intent: OpenIntent) -> Result<()> {
        refuse_open(&self.caller_inode(ino)?, intent)
    }
}

//! `errors=`: what the mount does once it meets a damaged structure, as ext4's `errors=`
//! mount option (and the superblock's `s_errors`, its default) says: go on, refuse every
//! change from then on (`remount-ro`), or stop (`panic`; the kernel panics the machine,
//! the mount's daemon exits at once, leaving the image for its journal to replay, as a
//! crash would). The first such error is said on standard error in one line.

use std::sync::atomic::{AtomicBool, Ordering};

use fuser::Errno;

/// `errors=continue|remount-ro|panic`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorPolicy {
    Continue,
    RemountReadOnly,
    Panic,
}

impl ErrorPolicy {
    /// The option's value, or `None` for an unknown one.
    pub fn parse(value: &str) -> Option<Self> {
        match value {
            "continue" => Some(ErrorPolicy::Continue),
            "remount-ro" => Some(ErrorPolicy::RemountReadOnly),
            "panic" => Some(ErrorPolicy::Panic),
            _ => None,
        }
    }

    /// The superblock's `s_errors` (1 continue, 2 remount-ro, 3 panic); anything else is
    /// ext4's default, continue.
    pub fn of_superblock(s_errors: u16) -> Self {
        match s_errors {
            2 => ErrorPolicy::RemountReadOnly,
            3 => ErrorPolicy::Panic,
            _ => ErrorPolicy::Continue,
        }
    }
}

/// The exit status of a daemon stopped by `errors=panic` (fuse2fs's for a failed mount).
const PANIC_EXIT: i32 = 32;

/// A mount's policy and what it has met.
pub(crate) struct OnError {
    policy: ErrorPolicy,
    image: String,
    /// `remount-ro` has taken effect: every change is refused.
    read_only: AtomicBool,
    /// The first damage has been said.
    said: AtomicBool,
}

impl OnError {
    pub(crate) fn new(policy: ErrorPolicy, image: &str) -> Self {
        OnError {
            policy,
            image: image.to_string(),
            read_only: AtomicBool::new(false),
            said: AtomicBool::new(false),
        }
    }

    /// The errno for an engine error a request met, after the policy has seen it: damage
    /// (a corrupt structure, EUCLEAN; a bad checksum, EBADMSG; EIO) sets it off, anything
    /// else (ENOENT, ENOSPC...) is the caller's.
    pub(crate) fn errno(&self, error: &e4_fs::Error) -> Errno {
        let errno = error.errno();
        if matches!(errno, libc::EUCLEAN | libc::EBADMSG | libc::EIO) {
            self.damaged(error);
        }
        Errno::from_i32(errno)
    }

    fn damaged(&self, error: &e4_fs::Error) {
        let then = match self.policy {
            ErrorPolicy::Continue => "going on (errors=continue)",
            ErrorPolicy::RemountReadOnly => {
                self.read_only.store(true, Ordering::Release);
                "refusing every change from now on (errors=remount-ro)"
            }
            ErrorPolicy::Panic => {
                eprintln!(
                    "e4: error: {}: {error}; stopping (errors=panic)",
                    self.image
                );
                std::process::exit(PANIC_EXIT);
            }
        };
        if !self.said.swap(true, Ordering::AcqRel) {
            eprintln!("e4: error: {}: {error}; {then}", self.image);
        }
    }

    /// EROFS once `remount-ro` has taken effect.
    pub(crate) fn may_change(&self) -> Result<(), Errno> {
        match self.read_only.load(Ordering::Acquire) {
            true => Err(Errno::EROFS),
            false => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_and_the_superblock_name_the_same_policies() {
        assert_eq!(ErrorPolicy::parse("continue"), Some(ErrorPolicy::Continue));
        assert_eq!(
            ErrorPolicy::parse("remount-ro"),
            Some(ErrorPolicy::RemountReadOnly)
        );
        assert_eq!(ErrorPolicy::parse("panic"), Some(ErrorPolicy::Panic));
        assert_eq!(ErrorPolicy::parse("ro"), None);
        assert_eq!(ErrorPolicy::of_superblock(1), ErrorPolicy::Continue);
        assert_eq!(ErrorPolicy::of_superblock(2), ErrorPolicy::RemountReadOnly);
        assert_eq!(ErrorPolicy::of_superblock(3), ErrorPolicy::Panic);
        assert_eq!(ErrorPolicy::of_superblock(0), ErrorPolicy::Continue);
    }

    #[test]
    fn remount_ro_refuses_changes_after_damage_and_continue_does_not() {
        let damage = e4_fs::Error::Internal("a structure that cannot be".into());
        let ro = OnError::new(ErrorPolicy::RemountReadOnly, "img");
        assert_eq!(ro.errno(&e4_fs::Error::NotFound("f".into())), Errno::ENOENT);
        assert!(ro.may_change().is_ok());
        assert_eq!(ro.errno(&damage), Errno::EIO);
        assert_eq!(ro.may_change(), Err(Errno::EROFS));
        let go_on = OnError::new(ErrorPolicy::Continue, "img");
        go_on.errno(&damage);
        assert!(go_on.may_change().is_ok());
    }
}

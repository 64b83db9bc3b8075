//! The `-o` options of `e4 mount`: the ones fuse2fs users expect, parsed into
//! [`MountOptions`]; anything else is refused with one line naming it.

use std::time::Duration;

use crate::error_policy::ErrorPolicy;

/// How to mount an image. `Default` is what `e4 mount IMG DIR` does with no `-o`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MountOptions {
    /// Mount read-write (`rw`, the default, as fuse2fs) or read-only (`ro`).
    pub writable: bool,
    /// `fakeroot`: files are created as owned by root (0:0), whoever creates them, as in
    /// a build that makes a root filesystem without being root.
    pub fakeroot: bool,
    /// `allow_other`: users other than the one who mounted may use the mount. It turns on
    /// `default_permissions` too: e4 does not check permissions itself, so a mount shared
    /// with others lets the kernel check them.
    pub allow_other: bool,
    /// `default_permissions`: the kernel checks permissions from the mode and owner bits.
    /// Off (and without `allow_other`), only the user who mounted (and root) may use the
    /// mount, and may do anything in it: the image is theirs.
    pub default_permissions: bool,
    /// `uid=N`: files the image says belong to N are shown as the mounting user's, and
    /// files that user creates or chowns to themselves are stored as N (rootless use of an
    /// image made for another user, such as a root filesystem).
    pub uid: Option<u32>,
    /// `gid=N`: as `uid=`, for groups.
    pub gid: Option<u32>,
    /// `threads=N`: FUSE worker threads, each reading requests from its own clone of the
    /// device (default: the CPUs this process may use).
    pub threads: usize,
    /// `commit=SECS`: commit changes at least this often (ext4's `commit=`, default 5 s;
    /// 0 commits only on fsync, memory pressure and unmount).
    pub commit_interval: Duration,
    /// Replay a journal that needs recovery (the default). `norecovery` (or `noload`)
    /// mounts read-only without replaying, showing the image as it is on disk, as the
    /// kernel and fuse2fs do; it implies `ro`, and `rw` with it is refused.
    pub replay_journal: bool,
    /// `errors=continue|remount-ro|panic`: what to do on meeting a damaged structure
    /// (`error_policy`); `None` takes the superblock's `s_errors`, as ext4 does.
    pub errors: Option<ErrorPolicy>,
    /// `acl`: the kernel enforces POSIX ACLs (FUSE_POSIX_ACL, which makes it check
    /// permissions as `default_permissions` does, ACLs included) and leaves the umask to
    /// e4 (FUSE_DONT_MASK), which ignores it in a directory with a default ACL, as ext4
    /// does. `noacl` (the default, as fuse2fs): ACLs are still stored, inherited and kept
    /// in step with chmod by the engine, but the kernel applies the umask before e4 sees a
    /// new inode's mode, and checks permissions without ACLs, if at all.
    pub posix_acl: bool,
}

impl Default for MountOptions {
    fn default() -> Self {
        MountOptions {
            writable: true,
            fakeroot: false,
            allow_other: false,
            default_permissions: false,
            uid: None,
            gid: None,
            threads: std::thread::available_parallelism().map_or(1, |n| n.get()),
            commit_interval: Duration::from_secs(5),
            replay_journal: true,
            errors: None,
            posix_acl: false,
        }
    }
}

/// The options `-o` accepts, for the message that refuses another.
const KNOWN: &str = "ro, rw, fakeroot, allow_other, default_permissions, uid=N, gid=N, \
                     threads=N, commit=SECS, norecovery, noload, \
                     errors=continue|remount-ro|panic, acl, noacl";

/// A `-o` option that is unknown or has a bad value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OptionError {
    #[error("unknown mount option {0:?} (known: {KNOWN})")]
    Unknown(String),
    #[error("mount option {option:?} needs {wants}")]
    BadValue { option: String, wants: &'static str },
    #[error("norecovery mounts read-only (writing over a journal that was not replayed would lose it): drop rw")]
    WritableWithoutRecovery,
}

impl MountOptions {
    /// Parses a comma-separated `-o` list over the defaults; later options win, as with
    /// mount(8).
    pub fn parse(list: &str) -> Result<Self, OptionError> {
        let mut options = MountOptions::default();
        let mut rw_given = false;
        for option in list.split(',').filter(|o| !o.is_empty()) {
            options.apply(option)?;
            rw_given |= option == "rw";
        }
        if !options.replay_journal {
            if rw_given && options.writable {
                return Err(OptionError::WritableWithoutRecovery);
            }
            options.writable = false;
        }
        Ok(options)
    }

    fn apply(&mut self, option: &str) -> Result<(), OptionError> {
        let (key, value) = match option.split_once('=') {
            Some((k, v)) => (k, Some(v)),
            None => (option, None),
        };
        let number = |wants: &'static str| -> Result<u64, OptionError> {
            value
                .and_then(|v| v.parse::<u64>().ok())
                .ok_or_else(|| OptionError::BadValue {
                    option: option.to_string(),
                    wants,
                })
        };
        let id = || -> Result<u32, OptionError> {
            number("a number")?
                .try_into()
                .map_err(|_| OptionError::BadValue {
                    option: option.to_string(),
                    wants: "a 32-bit id",
                })
        };
        match (key, value) {
            ("ro", None) => self.writable = false,
            ("rw", None) => self.writable = true,
            ("fakeroot", None) => self.fakeroot = true,
            ("allow_other", None) => self.allow_other = true,
            ("default_permissions", None) => self.default_permissions = true,
            ("acl", None) => self.posix_acl = true,
            ("noacl", None) => self.posix_acl = false,
            ("uid", Some(_)) => self.uid = Some(id()?),
            ("gid", Some(_)) => self.gid = Some(id()?),
            ("threads", Some(_)) => {
                self.threads = match number("a thread count from 1")? {
                    0 => {
                        return Err(OptionError::BadValue {
                            option: option.to_string(),
                            wants: "a thread count from 1",
                        })
                    }
                    n => n as usize,
                }
            }
            ("norecovery" | "noload", None) => self.replay_journal = false,
            ("errors", Some(v)) => {
                self.errors = Some(ErrorPolicy::parse(v).ok_or_else(|| OptionError::BadValue {
                    option: option.to_string(),
                    wants: "continue, remount-ro or panic",
                })?)
            }
            ("commit", Some(_)) => {
                self.commit_interval = Duration::from_secs(number("a number of seconds")?)
            }
            _ => return Err(OptionError::Unknown(option.to_string())),
        }
        Ok(())
    }

    /// Whether the kernel checks permissions (see [`MountOptions::allow_other`] and
    /// [`MountOptions::posix_acl`]).
    pub fn kernel_checks_permissions(&self) -> bool {
        self.default_permissions || self.allow_other || self.posix_acl
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_read_write_with_a_five_second_commit() {
        let o = MountOptions::parse("").unwrap();
        assert!(o.writable && !o.fakeroot && !o.kernel_checks_permissions());
        assert_eq!(o.commit_interval, Duration::from_secs(5));
        assert!(o.threads >= 1);
    }

    #[test]
    fn every_known_option_is_taken() {
        let o = MountOptions::parse(
            "ro,fakeroot,allow_other,uid=1000,gid=100,threads=3,commit=0,default_permissions",
        )
        .unwrap();
        assert!(!o.writable && o.fakeroot && o.allow_other && o.default_permissions);
        assert_eq!((o.uid, o.gid, o.threads), (Some(1000), Some(100), 3));
        assert_eq!(o.commit_interval, Duration::ZERO);
        assert!(MountOptions::parse("ro,rw").unwrap().writable);
    }

    #[test]
    fn norecovery_mounts_read_only_and_refuses_rw() {
        for list in ["norecovery", "noload", "ro,norecovery", "rw,ro,noload"] {
            let o = MountOptions::parse(list).unwrap();
            assert!(!o.replay_journal && !o.writable, "{list}");
        }
        for list in ["rw,norecovery", "norecovery,rw"] {
            assert_eq!(
                MountOptions::parse(list),
                Err(OptionError::WritableWithoutRecovery),
                "{list}"
            );
        }
    }

    #[test]
    fn unknown_options_and_bad_values_are_refused_by_name() {
        let e = MountOptions::parse("ro,journal_async_commit").unwrap_err();
        assert_eq!(e, OptionError::Unknown("journal_async_commit".into()));
        assert!(e.to_string().contains("known: ro, rw"));
        for bad in [
            "threads=0",
            "threads=x",
            "uid=-1",
            "uid=4294967296",
            "commit",
        ] {
            assert!(MountOptions::parse(bad).is_err(), "{bad} was taken");
        }
        assert!(MountOptions::parse("ro=1").is_err());
        assert!(MountOptions::parse("errors=ro").is_err());
        assert_eq!(
            MountOptions::parse("errors=remount-ro").unwrap().errors,
            Some(ErrorPolicy::RemountReadOnly)
        );
    }
}

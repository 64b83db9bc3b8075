//! Who writes through a handle, for the one rule inside the engine that depends on it: the
//! blocks the superblock keeps back for the superuser (`s_r_blocks_count`, mke2fs `-m`).
//!
//! The kernel lets a writer use them when its fsuid is the reserved uid, when the reserved
//! gid is not 0 and the writer is in that group, or when it holds `CAP_SYS_RESOURCE`
//! (`ext4_has_free_clusters` in fs/ext4/balloc.c; the reserved uid and gid are
//! `s_def_resuid` and `s_def_resgid` unless the mount overrides them). Everyone else gets
//! "no space" while the reserve is still free, and `statfs` shows it as free but not
//! available. Other checks on the caller (permissions) belong to whoever serves the caller
//! (a FUSE mount's `default_permissions`, or the caller itself): the engine does not make
//! them.

use e4_format::superblock::Superblock;

/// The credentials a handle's writes are made with ([`crate::OpenOptions::caller`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    /// The filesystem user id (the effective one, for a process).
    pub uid: u32,
    /// The filesystem group id.
    pub gid: u32,
    /// Supplementary groups.
    pub groups: Vec<u32>,
    /// Holds `CAP_SYS_RESOURCE`, which lets root (and whoever it is granted to) use the
    /// reserve whatever the reserved uid and gid are.
    pub sys_resource: bool,
}

/// The overflow ids the kernel shows for an unmapped user (`nobody`, `nogroup`).
const OVERFLOW_ID: u32 = 65_534;

impl Default for Caller {
    /// An ordinary user: no reserved blocks.
    fn default() -> Self {
        Caller::ordinary()
    }
}

impl Caller {
    /// A user who may not use the reserve (unless an image names `nobody` as its reserved
    /// user or group).
    pub fn ordinary() -> Self {
        Caller {
            uid: OVERFLOW_ID,
            gid: OVERFLOW_ID,
            groups: Vec::new(),
            sys_resource: false,
        }
    }

    /// Root with its usual capabilities: may use the reserve.
    pub fn superuser() -> Self {
        Caller {
            uid: 0,
            gid: 0,
            groups: Vec::new(),
            sys_resource: true,
        }
    }

    /// The calling process: its effective uid and gid, its supplementary groups, and
    /// whether `CAP_SYS_RESOURCE` is in its effective set (what the kernel would use if the
    /// process wrote to a mounted ext4). A capability that cannot be read counts as absent.
    pub fn of_this_process() -> Self {
        use rustix::process::{getegid, geteuid, getgroups};
        use rustix::thread::{capabilities, CapabilitySet};
        Caller {
            uid: geteuid().as_raw(),
            gid: getegid().as_raw(),
            groups: getgroups()
                .map(|groups| groups.iter().map(|g| g.as_raw()).collect())
                .unwrap_or_default(),
            sys_resource: capabilities(None)
                .is_ok_and(|sets| sets.effective.contains(CapabilitySet::SYS_RESOURCE)),
        }
    }

    /// Whether this caller may use the blocks `sb` reserves, as the kernel decides it.
    pub fn may_use_reserved_blocks(&self, sb: &Superblock) -> bool {
        let reserved_uid = u32::from(sb.def_resuid);
        let reserved_gid = u32::from(sb.def_resgid);
        let in_group = |gid: u32| self.gid == gid || self.groups.contains(&gid);
        self.sys_resource
            || self.uid == reserved_uid
            || (reserved_gid != 0 && in_group(reserved_gid))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn superblock(resuid: u16, resgid: u16) -> Superblock {
        let mut sb = Superblock::decode(&[0; 1024]);
        sb.def_resuid = resuid;
        sb.def_resgid = resgid;
        sb
    }

    fn user(uid: u32, gid: u32, groups: &[u32]) -> Caller {
        Caller {
            uid,
            gid,
            groups: groups.to_vec(),
            sys_resource: false,
        }
    }

    #[test]
    fn the_reserved_uid_may_use_the_reserve() {
        let sb = superblock(1000, 0);
        assert!(user(1000, 1000, &[]).may_use_reserved_blocks(&sb));
        assert!(!user(1001, 1000, &[]).may_use_reserved_blocks(&sb));
        // Root is not the reserved uid here; only its capability lets it in.
        assert!(!user(0, 0, &[]).may_use_reserved_blocks(&sb));
        assert!(Caller::superuser().may_use_reserved_blocks(&sb));
    }

    #[test]
    fn the_reserved_gid_counts_only_when_it_is_not_root_group() {
        let sb = superblock(0, 50);
        assert!(user(1000, 50, &[]).may_use_reserved_blocks(&sb));
        assert!(user(1000, 100, &[7, 50]).may_use_reserved_blocks(&sb));
        assert!(!user(1000, 100, &[7]).may_use_reserved_blocks(&sb));
        // The default reserved gid (0) lets no one in by group.
        let sb = superblock(0, 0);
        assert!(!user(1000, 0, &[0]).may_use_reserved_blocks(&sb));
        // The default reserved uid (0) is root's.
        assert!(user(0, 1000, &[]).may_use_reserved_blocks(&sb));
    }

    #[test]
    fn an_ordinary_caller_may_not() {
        assert!(!Caller::ordinary().may_use_reserved_blocks(&superblock(0, 0)));
        assert!(!Caller::default().may_use_reserved_blocks(&superblock(0, 0)));
    }
}

//! Which directories' attributes went to the kernel since it was last told they changed:
//! the mount tells it of a change of names in a directory only when one of those replies
//! could be cached stale.
//!
//! The kernel drops a directory's cached attributes when a create, unlink, rename (...)
//! in it returns, but a reply carrying the directory's attributes (GETATTR, SETATTR, an
//! entry naming it) that was read before the change and reaches the kernel after it is
//! cached anyway, for the whole attribute timeout: nothing marks it stale. The mount's
//! notification (an attributes-only FUSE_NOTIFY_INVAL_INODE) raises the inode's attribute
//! version, which throws such a reply away. It costs a `write` to `/dev/fuse` and the
//! kernel's inode lookup, about 8 % of the daemon's time per unlink, and it is needed
//! only where a reply read before the change may still be on its way: so each reply that
//! carries a directory's attributes records the directory first ([`ShownDirectories::showing`],
//! then the attributes are read), and a change notifies only when it takes such a record
//! ([`ShownDirectories::take`], after the change). Either the record is taken by the
//! change (it notifies, which covers every reply read before), or it was made after the
//! change was taken into account and the attributes read after it are the new ones. A
//! program that only creates and removes names (no `stat` of the directory) costs no
//! notification; one that stats it between changes costs one per change, as before.
//! A record stays until the directory's next change: dropping it at the kernel's FORGET
//! of the directory would race an entry reply naming it that is on its way. So the table
//! holds at most one entry per directory ever shown and not changed since.

use fuser::INodeNo;

use crate::shards::Shards;

pub(crate) struct ShownDirectories {
    shown: Shards<()>,
}

impl ShownDirectories {
    pub(crate) fn new() -> Self {
        ShownDirectories {
            shown: Shards::new(),
        }
    }

    /// Records that directory `node`'s attributes are about to be read for a reply: call
    /// before reading them. The shard's lock orders this against [`ShownDirectories::take`].
    pub(crate) fn showing(&self, node: INodeNo) {
        self.shown.shard(node.0).insert(node.0, ());
    }

    /// Whether the kernel must be told that directory `node` changed (a change just made,
    /// whose reply is still to come): whether its attributes were shown since the last
    /// time this answered yes.
    pub(crate) fn take(&self, node: INodeNo) -> bool {
        self.shown.shard(node.0).remove(&node.0).is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_change_notifies_once_per_showing() {
        let dirs = ShownDirectories::new();
        let (d, other) = (INodeNo(12), INodeNo(76));
        assert!(!dirs.take(d), "never shown");
        dirs.showing(d);
        dirs.showing(d);
        assert!(!dirs.take(other), "another directory, in the same shard");
        assert!(dirs.take(d), "shown before the change");
        assert!(!dirs.take(d), "not shown since the last notification");
    }
}

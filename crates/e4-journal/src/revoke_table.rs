//! The revoke table of a recovery (`fs/jbd2/revoke.c`): for each revoked block, the latest
//! transaction that revoked it. A logged copy of that block is not replayed if its
//! transaction is that one or earlier.

use std::collections::HashMap;

use crate::tid_gt;

#[derive(Default)]
pub(crate) struct RevokeTable {
    latest: HashMap<u64, u32>,
}

impl RevokeTable {
    /// Records that transaction `tid` revoked `block`, keeping the latest tid
    /// (`jbd2_journal_set_revoke`).
    pub fn set(&mut self, block: u64, tid: u32) {
        self.latest
            .entry(block)
            .and_modify(|r| {
                if tid_gt(tid, *r) {
                    *r = tid;
                }
            })
            .or_insert(tid);
    }

    /// Whether a copy of `block` logged in transaction `tid` is revoked
    /// (`jbd2_journal_test_revoke`): a revoke by `tid` itself or a later one.
    pub fn revokes(&self, block: u64, tid: u32) -> bool {
        self.latest.get(&block).is_some_and(|&r| !tid_gt(tid, r))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_revoke_covers_its_own_and_earlier_transactions_across_the_wrap() {
        let mut table = RevokeTable::default();
        table.set(7, 5);
        table.set(7, 3);
        assert!(table.revokes(7, 5) && table.revokes(7, 1));
        assert!(!table.revokes(7, 6), "a later copy replays");
        assert!(!table.revokes(8, 1));
        table.set(9, 2);
        assert!(
            table.revokes(9, u32::MAX),
            "u32::MAX precedes 2 across the wrap"
        );
        assert!(!table.revokes(9, 3));
    }
}

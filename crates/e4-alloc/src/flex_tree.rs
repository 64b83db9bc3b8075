//! An aggregate tree over flex groups: the least or the most of a per-flex-group value over
//! every aligned range of flex groups, kept incrementally and read without locks, so that
//! Orlov's searches over flex groups cost O(log flex groups) instead of a walk over all.
//!
//! The values themselves (free inodes, directories, free blocks of each flex group) stay
//! where they are kept exactly (padded atomics changed by group-lock holders); the tree
//! holds only the internal nodes, in heap order: node 1 covers every flex group, node `n`'s
//! children are `2n` and `2n + 1`, and flex group `j` is the virtual node `capacity + j`.
//! After a value changes, its holder refreshes the nodes above it, stopping at the first
//! that does not change (most changes stop at once: a flex group is rarely the unique
//! extreme of its pair).
//!
//! Two holders refreshing the same node can each compute it from a different mix of old and
//! new child values, and the later store may be the stale one. So each refresh re-reads the
//! children after its store and recomputes until they agree. Every store to a node is a
//! swap (acquire-release), so the holder whose swap comes last in the node's order has
//! acquired every earlier swapper's release: its re-read sees every child value those
//! holders wrote before their swaps. When changes stop, every node is exact. A node whose
//! children keep changing under it is given up after a bounded number of tries (a hint for
//! placement, corrected by the next refresh below it).

use crate::sync::{AtomicU64, Ordering};

/// Tries per node before a refresh leaves a node to the next change below it.
const REFRESH_TRIES: usize = 8;

/// Which extreme a tree keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Keep {
    Least,
    Most,
}

impl Keep {
    /// The value of a position past the last flex group: never the extreme.
    fn identity(self) -> u64 {
        match self {
            Keep::Least => u64::MAX,
            Keep::Most => 0,
        }
    }

    fn combine(self, a: u64, b: u64) -> u64 {
        match self {
            Keep::Least => a.min(b),
            Keep::Most => a.max(b),
        }
    }
}

pub(crate) struct AggregateTree {
    keep: Keep,
    /// Flex groups covered.
    leaves: usize,
    /// Internal nodes in heap order; index 0 is unused. Its length is the capacity (a
    /// power of two at least `leaves`).
    nodes: Box<[AtomicU64]>,
}

impl AggregateTree {
    /// A tree over `leaves` values, read through `leaf`.
    pub(crate) fn new(keep: Keep, leaves: usize, leaf: impl Fn(usize) -> u64) -> Self {
        let capacity = leaves.next_power_of_two().max(2);
        let tree = AggregateTree {
            keep,
            leaves,
            nodes: (0..capacity)
                .map(|_| AtomicU64::new(keep.identity()))
                .collect(),
        };
        for n in (1..capacity).rev() {
            let v = keep.combine(tree.node(2 * n, &leaf), tree.node(2 * n + 1, &leaf));
            tree.nodes[n].store(v, Ordering::Relaxed);
        }
        tree
    }

    /// The power of two the tree's shape is built on.
    pub(crate) fn capacity(&self) -> usize {
        self.nodes.len()
    }

    /// Node `n`'s value: an internal node's aggregate, or a leaf's value through `leaf`.
    pub(crate) fn node(&self, n: usize, leaf: &impl Fn(usize) -> u64) -> u64 {
        match n.checked_sub(self.capacity()) {
            Some(j) if j < self.leaves => leaf(j),
            Some(_) => self.keep.identity(),
            None => self.nodes[n].load(Ordering::Acquire),
        }
    }

    /// After flex group `j`'s value changed (read through `leaf`): refreshes the nodes
    /// above it until one is unchanged.
    pub(crate) fn refresh(&self, j: usize, leaf: impl Fn(usize) -> u64) {
        let mut n = (self.capacity() + j) / 2;
        while n >= 1 {
            let children = || {
                self.keep
                    .combine(self.node(2 * n, &leaf), self.node(2 * n + 1, &leaf))
            };
            let first = children();
            let before = self.nodes[n].swap(first, Ordering::AcqRel);
            let mut value = first;
            for _ in 1..REFRESH_TRIES {
                let again = children();
                if again == value {
                    break;
                }
                value = again;
                self.nodes[n].swap(value, Ordering::AcqRel);
            }
            // Unchanged, and never showed another value: the nodes above are still right.
            // (A value stored and then corrected may have been read by a refresh above.)
            if before == first && first == value {
                return;
            }
            n /= 2;
        }
    }

    /// Bytes the tree holds.
    pub(crate) fn memory_bytes(&self) -> usize {
        self.nodes.len() * std::mem::size_of::<AtomicU64>()
    }
}

/// A search over flex groups `[from, to)` in order, descending only into subtrees that
/// `worth(node)` says may hold what is sought, and calling `visit(flex)` at each flex group
/// reached until it returns true. Nodes are numbered as in [`AggregateTree`] with
/// `capacity` leaves. Visits at most `budget` nodes. Returns whether the search stopped
/// early: `visit` returned true, or the budget ran out (then `budget` is 0).
pub(crate) fn search_in_order(
    capacity: usize,
    from: usize,
    to: usize,
    worth: &mut dyn FnMut(usize) -> bool,
    visit: &mut dyn FnMut(usize) -> bool,
    budget: &mut usize,
) -> bool {
    struct Search<'a> {
        capacity: usize,
        range: (usize, usize),
        worth: &'a mut dyn FnMut(usize) -> bool,
        visit: &'a mut dyn FnMut(usize) -> bool,
        budget: &'a mut usize,
    }
    impl Search<'_> {
        /// Node `n`, covering flex groups `[lo, hi)`. The recursion is as deep as the tree
        /// (at most 32 levels).
        fn walk(&mut self, n: usize, lo: usize, hi: usize) -> bool {
            if hi <= self.range.0 || lo >= self.range.1 {
                return false;
            }
            if *self.budget == 0 {
                return true;
            }
            *self.budget -= 1;
            if !(self.worth)(n) {
                return false;
            }
            if n >= self.capacity {
                return (self.visit)(n - self.capacity);
            }
            let mid = (lo + hi) / 2;
            self.walk(2 * n, lo, mid) || self.walk(2 * n + 1, mid, hi)
        }
    }
    Search {
        capacity,
        range: (from, to),
        worth,
        visit,
        budget,
    }
    .walk(1, 0, capacity)
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn exact(tree: &AggregateTree, values: &[u64]) -> bool {
        let leaf = |j: usize| values[j];
        (1..tree.capacity()).all(|n| {
            let (mut lo, mut hi) = (n, n + 1);
            while lo < tree.capacity() {
                (lo, hi) = (2 * lo, 2 * hi);
            }
            let covered = (lo - tree.capacity())..(hi - tree.capacity()).min(values.len());
            let want = covered
                .map(leaf)
                .fold(tree.keep.identity(), |a, b| tree.keep.combine(a, b));
            tree.node(n, &leaf) == want
        })
    }

    proptest! {
        /// After any sequence of changes, each refreshed, every node is the extreme of the
        /// values below it.
        #[test]
        fn nodes_stay_exact_under_changes(
            leaves in 1usize..40,
            changes in proptest::collection::vec((any::<usize>(), 0u64..50), 0..100),
            most in any::<bool>(),
        ) {
            let keep = if most { Keep::Most } else { Keep::Least };
            let mut values: Vec<u64> = (0..leaves as u64).map(|v| v * 7 % 13).collect();
            let tree = AggregateTree::new(keep, leaves, |j| values[j]);
            prop_assert!(exact(&tree, &values));
            for (j, v) in changes {
                values[j % leaves] = v;
                tree.refresh(j % leaves, |i| values[i]);
                prop_assert!(exact(&tree, &values));
            }
        }

        /// The pruned in-order search finds the first flex group in a range with a value at
        /// least a threshold, as a linear walk does.
        #[test]
        fn search_finds_what_a_walk_finds(
            values in proptest::collection::vec(0u64..20, 1..60),
            from in 0usize..60,
            to in 0usize..60,
            threshold in 0u64..25,
        ) {
            let tree = AggregateTree::new(Keep::Most, values.len(), |j| values[j]);
            let leaf = |j: usize| values[j];
            let mut found = None;
            let mut budget = usize::MAX;
            let stopped = search_in_order(
                tree.capacity(),
                from,
                to.min(values.len()),
                &mut |n| tree.node(n, &leaf) >= threshold,
                &mut |j| { found = Some(j); true },
                &mut budget,
            );
            prop_assert_eq!(stopped, found.is_some());
            let walked = (from..to.min(values.len())).find(|&j| values[j] >= threshold);
            prop_assert_eq!(found, walked);
        }
    }

    /// A search out of budget says so.
    #[test]
    fn a_search_out_of_budget_is_incomplete() {
        let values = [0u64; 64];
        let tree = AggregateTree::new(Keep::Most, 64, |j| values[j]);
        let mut budget = 5;
        let stopped = search_in_order(
            tree.capacity(),
            0,
            64,
            &mut |_| true,
            &mut |_| false,
            &mut budget,
        );
        assert!(stopped);
        assert_eq!(budget, 0);
    }
}

#[cfg(all(test, loom))]
mod loom_tests {
    use super::*;
    use loom::sync::Arc;

    /// Three threads change three of four flex groups' values at once and refresh: two
    /// share a parent, the third shares the root. Whatever the interleaving, every node
    /// ends exact (a refresh that stores once without re-reading its children can leave a
    /// stale value, computed from a child's old value, as the last store).
    #[test]
    fn racing_refreshes_leave_every_node_exact() {
        let mut builder = loom::model::Builder::new();
        builder.preemption_bound = Some(2);
        builder.check(|| {
            let leaves: Arc<[AtomicU64; 4]> = Arc::new([5, 3, 4, 0].map(AtomicU64::new));
            let read = |leaves: &[AtomicU64; 4]| {
                let values: [u64; 4] = std::array::from_fn(|j| leaves[j].load(Ordering::Acquire));
                values
            };
            let tree = {
                let values = read(&leaves);
                Arc::new(AggregateTree::new(Keep::Most, 4, |j| values[j]))
            };
            let changes = [(0usize, 1u64), (1, 2), (2, 0)];
            let threads: Vec<_> = changes
                .iter()
                .map(|&(j, v)| {
                    let (leaves, tree) = (Arc::clone(&leaves), Arc::clone(&tree));
                    loom::thread::spawn(move || {
                        leaves[j].swap(v, Ordering::AcqRel);
                        tree.refresh(j, |i| leaves[i].load(Ordering::Acquire));
                    })
                })
                .collect();
            for t in threads {
                t.join().unwrap();
            }
            let values = read(&leaves);
            let leaf = |j: usize| values[j];
            assert_eq!(tree.node(2, &leaf), 2);
            assert_eq!(tree.node(3, &leaf), 0);
            assert_eq!(tree.node(1, &leaf), 2);
        });
    }
}

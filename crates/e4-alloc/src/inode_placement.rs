//! Where a new inode goes (ext4's `find_group_orlov` and `find_group_other`), so that the
//! images e4 writes are laid out as the kernel would lay them out.
//!
//! Directories are spread across flex groups: one created in the root goes to the flex group
//! with the fewest directories among those with at least average free inodes and blocks,
//! from a hash of its name; a deeper one goes to the first flex group from its parent's that
//! is not crowded with directories nor short of inodes or blocks. Everything else goes into
//! its parent's flex group. All of it reads per-flex-group sums published by the group-lock
//! holders, never a lock.
//!
//! ext4 walks every flex group for each of these decisions. Here both searches run over
//! aggregate trees of the sums ([`crate::flex_tree`]: the most free inodes, the fewest
//! directories, and the most free blocks over every aligned range of flex groups), visiting
//! flex groups in the kernel's order but skipping every range in which no flex group could
//! qualify (or, for a top-level directory, beat the best found so far). The answer is the
//! walk's answer; the cost is O(log flex groups) nodes when the sums make the choice clear,
//! and never more than [`SEARCH_NODES_PER_LEVEL`] per level of the tree: a search out of
//! budget settles for the best flex group it has found (a top-level directory) or the
//! fallback.

use std::cell::Cell;

use crate::block_allocator::BlockAllocator;
use crate::flex_tree::search_in_order;
use crate::inode_allocator::{InodeAllocator, InodeRequest};

/// Tree nodes a placement search may visit per level of the flex-group tree: 224 for the
/// 8,192 flex groups of a 16 TiB volume, where the walk it replaces reads all 8,192.
pub(crate) const SEARCH_NODES_PER_LEVEL: usize = 16;

/// One flex group's sums, read without locks.
#[derive(Debug, Clone, Copy)]
struct FlexCounts {
    free_inodes: u64,
    used_dirs: u64,
    free_blocks: u64,
}

/// What a flex group must have to qualify: fewer than `dirs_below` directories, at least
/// `min_inodes` free inodes and at least `min_blocks` free blocks.
#[derive(Debug, Clone, Copy)]
struct Wanted {
    dirs_below: u64,
    min_inodes: u64,
    min_blocks: u64,
}

impl Wanted {
    fn met_by(&self, c: &FlexCounts) -> bool {
        c.used_dirs < self.dirs_below
            && c.free_inodes >= self.min_inodes
            && c.free_blocks >= self.min_blocks
    }
}

impl InodeAllocator {
    fn flex_counts(&self, flex: u32, blocks: &BlockAllocator) -> FlexCounts {
        // OK to unwrap: callers pass flex groups below the count.
        let inodes = self.flexes.summary(flex as usize).unwrap();
        FlexCounts {
            free_inodes: inodes.free_inodes,
            used_dirs: inodes.used_dirs,
            free_blocks: blocks.flex_free_blocks(flex, self.geometry.groups_per_flex),
        }
    }

    /// Visits flex groups in order from `start`, wrapping, skipping every range of them in
    /// which none can meet `wanted()` (re-read at each node, so a search for the best can
    /// tighten it), until `visit` returns true or the budget runs out.
    fn search_flexes(
        &self,
        blocks: &BlockAllocator,
        start: u32,
        wanted: &dyn Fn() -> Wanted,
        visit: &mut dyn FnMut(u32) -> bool,
    ) {
        let flexes = self.flexes.len();
        let capacity = self.flexes.capacity();
        let groups_per_flex = self.geometry.groups_per_flex;
        let mut worth = |n: usize| {
            self.stats.placement_nodes.add(1);
            let w = wanted();
            self.flexes.fewest_dirs(n) < w.dirs_below
                && self.flexes.most_free_inodes(n) >= w.min_inodes
                && blocks
                    .most_flex_free_blocks(n, groups_per_flex, flexes)
                    .is_none_or(|most| most >= w.min_blocks)
        };
        let mut visit = |j: usize| visit(j as u32);
        let mut budget = SEARCH_NODES_PER_LEVEL * (capacity.trailing_zeros() as usize + 1);
        let start = start as usize;
        let stopped = search_in_order(capacity, start, flexes, &mut worth, &mut visit, &mut budget);
        if !stopped {
            search_in_order(capacity, 0, start, &mut worth, &mut visit, &mut budget);
        }
    }

    /// The first group of `flex` with a free inode (inodes are packed at the start of a flex
    /// group's tables, as ext4 packs them).
    pub(crate) fn first_with_free_inode(&self, flex: u32) -> Option<u32> {
        self.geometry
            .flex_groups(flex)
            .find(|&g| self.groups[g as usize].free() > 0)
    }

    /// Free inodes and blocks per flex group on average (from the counters' cheap lower
    /// bounds, as ext4 reads its per-CPU counters approximately).
    fn averages(&self, blocks: &BlockAllocator) -> (u64, u64) {
        let flexes = u64::from(self.geometry.flexes());
        (
            self.free_inodes.estimate() / flexes,
            blocks.free_blocks_estimate() / flexes,
        )
    }

    /// A top-level directory: of the flex groups with at least average free inodes and
    /// blocks, the one with the fewest directories, the first of those from the name's hash.
    pub(crate) fn orlov_top(&self, name_hash: u32, blocks: &BlockAllocator) -> Option<u32> {
        let flexes = self.geometry.flexes();
        let (avg_inodes, avg_blocks) = self.averages(blocks);
        let best: Cell<Option<(u64, u32)>> = Cell::new(None);
        let wanted = || Wanted {
            // Only a flex group with fewer directories than the best so far can replace it.
            dirs_below: best.get().map_or(u64::MAX, |(dirs, _)| dirs),
            min_inodes: avg_inodes.max(1),
            min_blocks: avg_blocks,
        };
        self.search_flexes(blocks, name_hash % flexes, &wanted, &mut |flex| {
            let c = self.flex_counts(flex, blocks);
            if wanted().met_by(&c) {
                best.set(Some((c.used_dirs, flex)));
            }
            false
        });
        match best.get() {
            Some((_, flex)) => self.first_with_free_inode(flex),
            None => self.fallback(name_hash % self.geometry.groups),
        }
    }

    /// A directory below the top: the first flex group from `start_group`'s that does not
    /// hold more than its share of directories and is not short of inodes or blocks.
    pub(crate) fn orlov(&self, start_group: u32, blocks: &BlockAllocator) -> Option<u32> {
        let geo = &self.geometry;
        let flexes = geo.flexes();
        let (avg_inodes, avg_blocks) = self.averages(blocks);
        let inodes_per_flex = u64::from(geo.inodes_per_group) * u64::from(geo.groups_per_flex);
        let blocks_per_flex =
            u64::from(blocks.geometry().blocks_per_group) * u64::from(geo.groups_per_flex);
        let wanted = Wanted {
            dirs_below: self.directories.get() / u64::from(flexes) + inodes_per_flex / 16,
            min_inodes: avg_inodes.saturating_sub(inodes_per_flex / 4).max(1),
            min_blocks: avg_blocks.saturating_sub(blocks_per_flex / 4),
        };
        let start = (start_group % geo.groups) / geo.groups_per_flex;
        let found = Cell::new(None);
        self.search_flexes(blocks, start, &|| wanted, &mut |flex| {
            let met = wanted.met_by(&self.flex_counts(flex, blocks));
            if met {
                found.set(Some(flex));
            }
            met
        });
        found
            .get()
            .and_then(|flex| self.first_with_free_inode(flex))
            .or_else(|| self.fallback(start_group))
    }

    /// Orlov's last resort: a group with at least average free inodes, else any free inode.
    fn fallback(&self, start_group: u32) -> Option<u32> {
        let groups = self.geometry.groups;
        let avg = self.free_inodes.estimate() / u64::from(groups);
        let order = || (0..groups).map(|i| (start_group % groups + i) % groups);
        order()
            .find(|&g| {
                let free = u64::from(self.groups[g as usize].free());
                free > 0 && free >= avg
            })
            .or_else(|| order().find(|&g| self.groups[g as usize].free() > 0))
    }

    /// A file, symlink or special file: in its parent's flex group, else where the parent's
    /// last child went, else a fresh flex group (ext4's `find_group_other`). Without flex
    /// groups: the parent's group, else a quadratic hash from it, so that files of one
    /// directory stay together and different directories' files spread.
    pub(crate) fn near_parent(
        &self,
        req: &InodeRequest,
        parent_group: u32,
        blocks: &BlockAllocator,
    ) -> Option<u32> {
        let geo = &self.geometry;
        let has_space =
            |g: u32| self.groups[g as usize].free() > 0 && blocks.group_free_blocks(g) > 0;
        if geo.groups_per_flex > 1 {
            let parent_flex = parent_group / geo.groups_per_flex;
            return self
                .first_with_free_inode(parent_flex)
                .or_else(|| {
                    req.parent_hint.and_then(|hint| {
                        self.first_with_free_inode((hint % geo.groups) / geo.groups_per_flex)
                    })
                })
                .or_else(|| {
                    let next = parent_group.saturating_add(geo.groups_per_flex);
                    self.orlov(if next >= geo.groups { 0 } else { next }, blocks)
                });
        }
        if has_space(parent_group) {
            return Some(parent_group);
        }
        let mut g = (parent_group + req.parent) % geo.groups;
        let mut step = 1;
        while step < geo.groups {
            g = (g + step) % geo.groups;
            if has_space(g) {
                return Some(g);
            }
            step <<= 1;
        }
        self.fallback(parent_group)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::block_allocator::{AllocRequest, AllocatorConfig, Geometry, GroupLocking};
    use crate::inode_allocator::{InodeGeometry, InodeKind};
    use proptest::prelude::*;

    /// ext4's walks, as e4 did them before the trees: every flex group in order from the
    /// start, summing each flex group's groups' free blocks.
    fn walked_counts(alloc: &InodeAllocator, flex: u32, blocks: &BlockAllocator) -> FlexCounts {
        let inodes = alloc.flexes.summary(flex as usize).unwrap();
        FlexCounts {
            free_inodes: inodes.free_inodes,
            used_dirs: inodes.used_dirs,
            free_blocks: alloc
                .geometry
                .flex_groups(flex)
                .map(|g| u64::from(blocks.group_free_blocks(g)))
                .sum(),
        }
    }

    fn walked_top(alloc: &InodeAllocator, name_hash: u32, blocks: &BlockAllocator) -> Option<u32> {
        let flexes = alloc.geometry.flexes();
        let (avg_inodes, avg_blocks) = alloc.averages(blocks);
        let start = name_hash % flexes;
        let mut best: Option<(u64, u32)> = None;
        for flex in (0..flexes).map(|i| (start + i) % flexes) {
            let c = walked_counts(alloc, flex, blocks);
            if c.free_inodes == 0 || c.free_inodes < avg_inodes || c.free_blocks < avg_blocks {
                continue;
            }
            if best.is_none_or(|(dirs, _)| c.used_dirs < dirs) {
                best = Some((c.used_dirs, flex));
            }
        }
        match best {
            Some((_, flex)) => alloc.first_with_free_inode(flex),
            None => alloc.fallback(name_hash % alloc.geometry.groups),
        }
    }

    fn walked_sub(
        alloc: &InodeAllocator,
        start_group: u32,
        blocks: &BlockAllocator,
    ) -> Option<u32> {
        let geo = &alloc.geometry;
        let flexes = geo.flexes();
        let (avg_inodes, avg_blocks) = alloc.averages(blocks);
        let inodes_per_flex = u64::from(geo.inodes_per_group) * u64::from(geo.groups_per_flex);
        let blocks_per_flex =
            u64::from(blocks.geometry().blocks_per_group) * u64::from(geo.groups_per_flex);
        let max_dirs = alloc.directories.get() / u64::from(flexes) + inodes_per_flex / 16;
        let min_inodes = avg_inodes.saturating_sub(inodes_per_flex / 4).max(1);
        let min_blocks = avg_blocks.saturating_sub(blocks_per_flex / 4);
        let start = (start_group % geo.groups) / geo.groups_per_flex;
        (0..flexes)
            .map(|i| (start + i) % flexes)
            .find(|&flex| {
                let c = walked_counts(alloc, flex, blocks);
                c.used_dirs < max_dirs && c.free_inodes >= min_inodes && c.free_blocks >= min_blocks
            })
            .and_then(|flex| alloc.first_with_free_inode(flex))
            .or_else(|| alloc.fallback(start_group))
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(150))]

        /// On volumes of up to 16 flex groups with random inode and block usage, changed
        /// by creations and frees after the trees were built, both Orlov searches choose
        /// what the walk over every flex group chooses, whether or not the block allocator
        /// keeps per-flex-group sums.
        #[test]
        fn tree_searches_choose_what_the_walk_chooses(
            flexes in 1u32..=16,
            gpf_log in 0u32..4,
            used in proptest::collection::vec(0u32..64, 64),
            block_use in proptest::collection::vec(0u32..1024, 64),
            churn in proptest::collection::vec((any::<u32>(), any::<bool>()), 0..60),
            hashes in proptest::collection::vec(any::<u32>(), 8),
            keep_sums in any::<bool>(),
            lazy in any::<bool>(),
        ) {
            let gpf = 1 << gpf_log;
            let groups = (flexes * gpf).min(64);
            let geo = InodeGeometry { groups, inodes_per_group: 64, groups_per_flex: gpf, first_inode: 11 };
            let on_disk = used.clone();
            let bitmap = move |g: u32| (!0u64).checked_shl(on_disk[g as usize]).map_or(!0u64, |f| !f).to_le_bytes().to_vec();
            let alloc = if lazy {
                // Descriptors that are wrong by a few inodes: loading corrects the sums.
                InodeAllocator::open(
                    geo,
                    GroupLocking::TrySkip,
                    1,
                    |g| crate::InodeGroupSummary {
                        free_inodes: (64 - used[g as usize]) ^ (g % 4),
                        used_dirs: used[g as usize] / 4,
                        itable_unused: 0,
                        uninit: false,
                    },
                    move |g: u32| Ok(bitmap(g)),
                )
            } else {
                InodeAllocator::new(geo, GroupLocking::TrySkip, 1, bitmap, |g| used[g as usize] / 4)
            };
            let mut blocks = BlockAllocator::empty(
                Geometry { first_data_block: 0, blocks_per_group: 1024, blocks: u64::from(groups) * 1024 },
                AllocatorConfig::default(),
            );
            if keep_sums {
                blocks = blocks.with_flex_groups(gpf);
            }
            for g in 0..groups {
                let len = block_use[g as usize];
                if len > 0 {
                    blocks.allocate(AllocRequest {
                        goal: Some(u64::from(g) * 1024), len, min_len: len, slot: 0,
                        stream: 0, reserve: crate::Reserve::None,
                    }).unwrap();
                }
            }
            let mut held = Vec::new();
            for (pick, create) in churn {
                if create || held.is_empty() {
                    let kind = if pick % 3 == 0 { InodeKind::TopDirectory { name_hash: pick } } else if pick % 3 == 1 { InodeKind::Directory } else { InodeKind::Other };
                    let req = crate::inode_allocator::InodeRequest { parent: 2, parent_hint: None, kind, slot: 0 };
                    if let Ok(new) = alloc.allocate(&req, &blocks) {
                        held.push((new.ino, kind != InodeKind::Other));
                    }
                } else {
                    let (ino, dir) = held.swap_remove(pick as usize % held.len());
                    alloc.free(ino, dir, 0).unwrap();
                }
            }
            for &hash in &hashes {
                prop_assert_eq!(alloc.orlov_top(hash, &blocks), walked_top(&alloc, hash, &blocks));
                let start = hash % groups;
                prop_assert_eq!(alloc.orlov(start, &blocks), walked_sub(&alloc, start, &blocks));
            }
        }
    }

    /// 2,048 flex groups: 2,400 top-level directories, so that after the first round every
    /// flex group holds one and the search must find where the fewest now are. Each visits
    /// a few dozen tree nodes (never more than the budget), where the walk read 2,048 flex
    /// groups, and the first round puts one in each flex group but the first (which holds
    /// the reserved inodes, so fewer free than average).
    #[test]
    fn top_level_placement_visits_log_many_nodes() {
        let geo = InodeGeometry {
            groups: 2048 * 16,
            inodes_per_group: 64,
            groups_per_flex: 16,
            first_inode: 11,
        };
        let alloc = InodeAllocator::empty(geo, GroupLocking::TrySkip, 1);
        let blocks = BlockAllocator::empty(
            Geometry {
                first_data_block: 0,
                blocks_per_group: 256,
                blocks: 2048 * 16 * 256,
            },
            AllocatorConfig::default(),
        )
        .with_flex_groups(16);
        let budget = SEARCH_NODES_PER_LEVEL * 12;
        let mut first_round = std::collections::BTreeSet::new();
        let mut most = 0;
        for i in 0..2400u32 {
            let before = alloc.stats.placement_nodes.get();
            let req = crate::inode_allocator::InodeRequest {
                parent: 2,
                parent_hint: None,
                kind: InodeKind::TopDirectory {
                    name_hash: i.wrapping_mul(0x9E37_79B9),
                },
                slot: 0,
            };
            let dir = alloc.allocate(&req, &blocks).unwrap();
            if i < 2047 {
                first_round.insert(dir.group / 16);
            }
            most = most.max(alloc.stats.placement_nodes.get() - before);
        }
        assert_eq!(
            first_round.len(),
            2047,
            "top-level directories shared flex groups"
        );
        assert!(!first_round.contains(&0));
        assert!(most <= budget as u64, "{most} nodes");
        assert!(most <= 80, "{most} nodes for one top-level directory");
    }

    /// A bitmap load that finds fewer free inodes than the descriptor said (here through a
    /// snapshot, with no claim after it) refuses the group, and that shows in placement at
    /// once: the flex group it emptied is passed over as the walk passes it over.
    #[test]
    fn a_load_that_refuses_a_group_refreshes_placement() {
        let geo = InodeGeometry {
            groups: 8,
            inodes_per_group: 64,
            groups_per_flex: 2,
            first_inode: 11,
        };
        // Flex group 2 (groups 4 and 5) holds the fewest directories, but its bitmaps are
        // full where the descriptors say empty; every other bitmap agrees with its
        // descriptor (group 0's first 10 inodes are reserved).
        let alloc = InodeAllocator::open(
            geo,
            GroupLocking::TrySkip,
            1,
            |g| crate::InodeGroupSummary {
                free_inodes: if g == 0 { 54 } else { 64 },
                used_dirs: if g / 2 == 2 { 0 } else { 1 },
                itable_unused: 0,
                uninit: false,
            },
            |g: u32| Ok(vec![if g / 2 == 2 { 0xFF } else { 0 }; 8]),
        );
        let blocks = BlockAllocator::empty(
            Geometry {
                first_data_block: 0,
                blocks_per_group: 256,
                blocks: 8 * 256,
            },
            AllocatorConfig::default(),
        );
        assert_eq!(alloc.orlov_top(0, &blocks), Some(4));
        assert!(alloc.group_snapshot(4).is_err());
        assert!(alloc.group_snapshot(5).is_err());
        assert_eq!(alloc.flexes.summary(2).unwrap().free_inodes, 0);
        assert_eq!(alloc.orlov_top(0, &blocks), walked_top(&alloc, 0, &blocks));
        assert!(!matches!(alloc.orlov_top(0, &blocks), Some(4 | 5)));
    }
}

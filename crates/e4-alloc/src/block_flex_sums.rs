//! Free blocks per flex group, kept incrementally, and the most of them over each range of
//! flex groups ([`crate::flex_tree`]): what Orlov reads to place a directory where blocks
//! are plentiful, in O(1) per flex group and O(log flex groups) per search, instead of
//! summing every group of every flex group it considers.
//!
//! Every change of a group's published free count (under the group's lock) moves its flex
//! group's sum by the difference, with one atomic add; the sums are exact when no change is
//! in flight. The block allocator keeps them only when told the flex-group size
//! ([`BlockAllocator::with_flex_groups`]); otherwise readers sum the groups.

use crossbeam_utils::CachePadded;

use crate::block_allocator::BlockAllocator;
use crate::flex_tree::{AggregateTree, Keep};
use crate::sync::{AtomicU64, Ordering};

pub(crate) struct FlexFreeBlocks {
    groups_per_flex: u32,
    sums: Box<[CachePadded<AtomicU64>]>,
    most: AggregateTree,
}

impl FlexFreeBlocks {
    fn sum(&self, flex: usize) -> u64 {
        self.sums[flex].load(Ordering::Acquire)
    }

    /// Group `group`'s free count went from `before` to `after` (by its lock holder).
    pub(crate) fn changed(&self, group: u32, before: u32, after: u32) {
        if before == after {
            return;
        }
        let flex = (group / self.groups_per_flex) as usize;
        if after > before {
            self.sums[flex].fetch_add(u64::from(after - before), Ordering::AcqRel);
        } else {
            self.sums[flex].fetch_sub(u64::from(before - after), Ordering::AcqRel);
        }
        self.most.refresh(flex, |j| self.sum(j));
    }

    /// Bytes held.
    pub(crate) fn memory_bytes(&self) -> usize {
        std::mem::size_of_val(&*self.sums) + self.most.memory_bytes()
    }
}

impl BlockAllocator {
    /// Keeps free blocks per flex group of `groups_per_flex` groups (clamped to the volume),
    /// for the inode allocator's Orlov placement. Call it before the allocator is shared.
    pub fn with_flex_groups(self, groups_per_flex: u32) -> Self {
        let groups = self.geometry.groups();
        let groups_per_flex = groups_per_flex.clamp(1, groups.max(1));
        let sums: Box<[_]> = (0..groups.div_ceil(groups_per_flex))
            .map(|flex| {
                let first = flex * groups_per_flex;
                let end = first.saturating_add(groups_per_flex).min(groups);
                let free: u64 = (first..end)
                    .map(|g| u64::from(self.group_free_blocks(g)))
                    .sum();
                CachePadded::new(AtomicU64::new(free))
            })
            .collect();
        let most = AggregateTree::new(Keep::Most, sums.len(), |j| sums[j].load(Ordering::Relaxed));
        BlockAllocator {
            flex_free: Some(FlexFreeBlocks {
                groups_per_flex,
                sums,
                most,
            }),
            ..self
        }
    }

    /// The sums kept for flex groups of `groups_per_flex` groups (`flexes` of them), if
    /// those are the ones kept.
    fn flex_sums_for(&self, groups_per_flex: u32, flexes: usize) -> Option<&FlexFreeBlocks> {
        self.flex_free
            .as_ref()
            .filter(|f| f.groups_per_flex == groups_per_flex && f.sums.len() == flexes)
    }

    /// Free blocks in flex group `flex` of `groups_per_flex` groups, without locks: O(1)
    /// when the allocator keeps that flex-group size, else a sum over its groups.
    pub fn flex_free_blocks(&self, flex: u32, groups_per_flex: u32) -> u64 {
        let groups = self.geometry.groups();
        let flexes = groups.div_ceil(groups_per_flex.max(1)) as usize;
        match self.flex_sums_for(groups_per_flex, flexes) {
            Some(kept) => kept
                .sums
                .get(flex as usize)
                .map_or(0, |s| s.load(Ordering::Relaxed)),
            None => {
                let first = u64::from(flex) * u64::from(groups_per_flex);
                let end = (first + u64::from(groups_per_flex)).min(u64::from(groups));
                (first.min(end)..end)
                    .map(|g| u64::from(self.group_free_blocks(g as u32)))
                    .sum()
            }
        }
    }

    /// The most free blocks of any flex group under node `n` of the flex-group tree (see
    /// [`crate::flex_tree`]) of `flexes` flex groups of `groups_per_flex` groups; `None`
    /// when the allocator does not keep that size.
    pub(crate) fn most_flex_free_blocks(
        &self,
        n: usize,
        groups_per_flex: u32,
        flexes: usize,
    ) -> Option<u64> {
        let kept = self.flex_sums_for(groups_per_flex, flexes)?;
        Some(kept.most.node(n, &|j| kept.sum(j)))
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use crate::block_allocator::{AllocRequest, AllocatorConfig, BlockAllocator, Geometry};
    use crate::group_loading::GroupSummary;
    use crate::reservation_window::ReservationWindow;
    use rand::{Rng, SeedableRng};

    /// Allocations, frees, windows and bitmap loads that correct wrong descriptors: after
    /// each step every kept flex-group sum equals the sum of its groups' free counts.
    #[test]
    fn flex_sums_follow_every_change() {
        let geometry = Geometry {
            first_data_block: 0,
            blocks_per_group: 256,
            blocks: 23 * 256 - 40,
        };
        // Descriptors that say 200 free; the bitmaps have the first 10 * (g % 5) blocks used.
        let alloc = BlockAllocator::open(
            geometry,
            AllocatorConfig::default(),
            |_| GroupSummary {
                free: 200,
                uninit: false,
            },
            &[],
            |g: u32| {
                let mut bitmap = vec![0u8; 32];
                for b in 0..(10 * (g % 5)) as usize {
                    bitmap[b / 8] |= 1 << (b % 8);
                }
                Ok(bitmap)
            },
        )
        .unwrap()
        .with_flex_groups(4);
        let check = |alloc: &BlockAllocator| {
            for flex in 0..6u32 {
                let summed: u64 = (flex * 4..(flex * 4 + 4).min(23))
                    .map(|g| u64::from(alloc.group_free_blocks(g)))
                    .sum();
                assert_eq!(alloc.flex_free_blocks(flex, 4), summed, "flex group {flex}");
            }
        };
        check(&alloc);
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let mut held = Vec::new();
        let mut window = ReservationWindow::new();
        for step in 0..400 {
            match rng.gen_range(0..4) {
                0 | 1 => {
                    let len = rng.gen_range(1..40);
                    if let Ok(e) = alloc.allocate(AllocRequest {
                        goal: Some(rng.gen_range(0..geometry.blocks)),
                        len,
                        min_len: 1,
                        slot: 0,
                        stream: step,
                        reserve: crate::Reserve::None,
                    }) {
                        held.push(e);
                    }
                }
                2 if !held.is_empty() => {
                    let e = held.swap_remove(rng.gen_range(0..held.len()));
                    alloc.free(e, 0).unwrap();
                }
                _ => {
                    if let Ok(e) = alloc.allocate_append(&mut window, None, 5, 0, 99) {
                        held.push(e);
                    }
                    if step % 50 == 0 {
                        alloc.release_window(&mut window, 0);
                    }
                }
            }
            check(&alloc);
        }
    }
}

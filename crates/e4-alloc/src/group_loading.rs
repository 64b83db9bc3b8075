//! Lazy groups: what the allocator holds before a group's bitmap is needed, how the bitmap
//! arrives, and what write-back takes away.
//!
//! A volume of 16 TiB has 131,072 groups of 32,768 blocks. Holding every bitmap and buddy
//! summary would cost over half a GiB and seconds of reading before the first allocation.
//! Instead a group starts as its descriptor's summary (free count, BLOCK_UNINIT) and a few
//! dozen bytes of state; its bitmap is read through a [`BlockBitmapSource`] (e4-fs reads
//! and verifies the on-disk block) the first time the group's lock is taken for real work,
//! or computed when the group was never initialised. Clean groups can be dropped again
//! ([`BlockAllocator::evict_clean_groups`]); changed ones are remembered in a bitset so
//! write-back visits only them ([`BlockAllocator::take_dirty_groups`]).
//!
//! Until a group is loaded, the free-space index files it by the largest order its free
//! count allows (an upper bound): a search may pick it and find less, and loading re-files
//! it with the truth. The free-block counter starts from the descriptors' counts.
//!
//! A bitmap is checked before it is used: one whose free blocks differ from its
//! descriptor's count, or that marks free a block of the system zone lying in the group
//! (superblock and descriptor copies, reserved GDT blocks, bitmaps and inode tables, this
//! group's or, with flex_bg, other groups' placed here), makes the group corrupt
//! ([`crate::group_damage`]): it is never loaded, its free space leaves the index and the
//! counter, and the load answers [`AllocError::GroupCorrupt`] so the search goes on
//! elsewhere. Nothing of the group is written back.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use crossbeam_utils::CachePadded;

use crate::block_allocator::{
    AllocError, AllocatorConfig, BadFree, BlockAllocator, BlockGroup, Extent, Geometry,
};
use crate::block_group::{GroupExtent, GroupSpace, ORDERS};
use crate::dirty_groups::DirtyGroups;
use crate::free_space_index::FreeSpaceIndex;
use crate::group_damage::{BitmapProblem, DamagedGroups, GroupDamage};
use crate::group_state::GroupState;
use crate::instrumented_lock::InstrumentedMutex;
use crate::limit_counter::LimitCounter;
use crate::reserve_pool::ReservePool;
use crate::small_file_packing::PackingWindows;

/// What a group descriptor says of a group before its bitmap is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GroupSummary {
    /// `bg_free_blocks_count`.
    pub free: u32,
    /// `BLOCK_UNINIT`: the bitmap was never written; everything but the group's metadata is
    /// free.
    pub uninit: bool,
}

/// Where a group's on-disk block bitmap comes from: e4-fs reads the block and verifies its
/// checksum. The error says what went wrong, for [`AllocError::BitmapUnreadable`].
pub trait BlockBitmapSource: Send + Sync {
    fn block_bitmap(&self, group: u32) -> Result<Vec<u8>, String>;
}

impl<F: Fn(u32) -> Result<Vec<u8>, String> + Send + Sync> BlockBitmapSource for F {
    fn block_bitmap(&self, group: u32) -> Result<Vec<u8>, String> {
        self(group)
    }
}

/// A group changed since write-back: the bitmap to write and its free count.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirtyGroup {
    pub group: u32,
    pub bitmap: Vec<u8>,
    pub free: u32,
}

/// The largest buddy order a group with `free` free blocks could hold.
fn order_bound(free: u32) -> Option<u8> {
    (free > 0).then(|| (31 - free.leading_zeros()).min(ORDERS as u32 - 1) as u8)
}

impl BlockAllocator {
    /// An allocator over a volume whose groups are described by `summary(group)` (from
    /// their descriptors) and whose bitmaps are read from `source` when first needed, with
    /// `system_zone` (superblocks and backups, descriptors, reserved GDT blocks, bitmaps,
    /// inode tables, the journal) never handed out or freed. Reads no bitmap. Refuses
    /// bigalloc ([`AllocatorConfig::blocks_per_cluster`] above 1).
    pub fn open(
        geometry: Geometry,
        config: AllocatorConfig,
        summary: impl Fn(u32) -> GroupSummary,
        system_zone: &[Extent],
        source: impl BlockBitmapSource + 'static,
    ) -> Result<Self, AllocError> {
        if config.blocks_per_cluster > 1 {
            return Err(AllocError::Bigalloc {
                blocks_per_cluster: config.blocks_per_cluster,
            });
        }
        let groups = geometry.groups() as usize;
        let mut system: Vec<Vec<GroupExtent>> = vec![Vec::new(); groups];
        for &extent in system_zone {
            let pieces = crate::block_allocator::pieces_of(&geometry, extent).ok_or(
                AllocError::BadFree {
                    extent,
                    reason: BadFree::OutsideVolume,
                },
            )?;
            for (g, range) in pieces {
                system[g as usize].push(range);
            }
        }
        let index = FreeSpaceIndex::new(groups, ORDERS);
        let mut free = 0u64;
        let groups: Box<[_]> = system
            .into_iter()
            .enumerate()
            .map(|(g, mut zone)| {
                zone.sort_by_key(|r| r.start);
                let s = summary(g as u32);
                let free_blocks = s.free.min(geometry.group_blocks(g as u32));
                free += u64::from(free_blocks);
                index.update(g, None, order_bound(free_blocks));
                BlockGroup {
                    state: InstrumentedMutex::new(None),
                    system: zone.into_boxed_slice(),
                    uninit: s.uninit,
                    has_released: Default::default(),
                    free_published: AtomicU32::new(free_blocks),
                }
            })
            .collect();
        let count = groups.len();
        Ok(BlockAllocator {
            geometry,
            config,
            groups,
            index,
            free_blocks: LimitCounter::new(free, config.counter_slots, 64),
            stream_goals: (0..crate::block_allocator::GOAL_SLOTS)
                .map(|_| CachePadded::new(AtomicU64::new(0)))
                .collect(),
            global: InstrumentedMutex::new(()),
            shared_goal: InstrumentedMutex::new(0),
            packing: PackingWindows::new(config.counter_slots),
            stats: Default::default(),
            source: Box::new(source),
            dirty: DirtyGroups::new(count),
            root_reserve: ReservePool::new(0, 0),
            metadata_reserve: ReservePool::new(0, 0),
            flex_free: None,
            damaged: DamagedGroups::new(count),
            unfounded: Default::default(),
        })
    }

    /// Reads (or, for BLOCK_UNINIT, computes) group `g`'s bitmap, checks it against the
    /// system zone and the descriptor's free count, and re-files the group in the index.
    /// A bitmap that fails a check makes the group corrupt (see [`Self::refuse_group`]).
    /// Called with the group's lock held.
    pub(crate) fn load_group(&self, g: u32, slot: usize) -> Result<GroupState, AllocError> {
        let group = &self.groups[g as usize];
        let blocks = self.geometry.group_blocks(g);
        let bitmap = if group.uninit {
            let mut bitmap = vec![0u8; blocks.div_ceil(8) as usize];
            for range in group.system.iter() {
                for b in range.start..range.start + range.len {
                    bitmap[(b / 8) as usize] |= 1 << (b % 8);
                }
            }
            bitmap
        } else {
            self.source
                .block_bitmap(g)
                .map_err(|reason| AllocError::BitmapUnreadable { group: g, reason })?
        };
        let space = GroupSpace::from_bitmap(&bitmap, blocks);
        // What the descriptor said (or, after an eviction, what was last written back).
        let counted = group.free_published.load(Ordering::Relaxed);
        let metadata_free = group
            .system
            .iter()
            .find_map(|range| (range.start..range.start + range.len).find(|&b| !space.is_used(b)));
        let problem = match metadata_free {
            Some(free) => Some(BitmapProblem::MetadataFree {
                block: self.geometry.block_at(g, free),
            }),
            None if space.free() != counted => Some(BitmapProblem::BlockCount {
                bitmap: space.free(),
                descriptor: counted,
            }),
            None => None,
        };
        if let Some(problem) = problem {
            return Err(self.refuse_group(GroupDamage { group: g, problem }, counted, slot));
        }
        let state = GroupState::new(space, group.system.to_vec());
        self.index.update(
            g as usize,
            order_bound(counted.min(blocks)),
            state.space.largest_order(),
        );
        self.set_published_free(g, state.space.free());
        Ok(state)
    }

    /// Marks a group whose bitmap failed its check corrupt, under its lock: its `counted`
    /// free blocks leave the index, the flex sums and the free-block counter (those already
    /// promised when their promise comes back: a promise that counted on them finds no
    /// room), and the damage is recorded for one report. Returns the error the load answers.
    fn refuse_group(&self, damage: GroupDamage, counted: u32, slot: usize) -> AllocError {
        let g = damage.group;
        self.damaged.mark(damage);
        self.index.update(
            g as usize,
            order_bound(counted.min(self.geometry.group_blocks(g))),
            None,
        );
        self.set_published_free(g, 0);
        let taken = self.free_blocks.take_up_to(slot, u64::from(counted));
        self.unfounded.owe(u64::from(counted) - taken);
        AllocError::GroupCorrupt(damage)
    }

    /// Groups whose on-disk bitmap changed since the last [`Self::take_dirty_groups`]: the
    /// bitmaps the next commit writes.
    pub fn dirty_group_count(&self) -> u64 {
        self.dirty.count()
    }

    /// The groups changed since the last call, each with the bitmap to write and its free
    /// count ([`BlockAllocator::group_bitmap_for_disk`]), marked clean. A carve from a
    /// window (without the group's lock) marks its group again. Call it with the
    /// transaction quiescent.
    pub fn take_dirty_groups(&self, bytes: usize) -> Result<Vec<DirtyGroup>, AllocError> {
        let mut out = Vec::new();
        let mut words = 0;
        let mut at = 0;
        let groups = self.geometry.groups() as usize;
        while let Some(g) = self.dirty.find_next(at, groups, &mut words) {
            at = g + 1;
            let state = self.lock_group(g as u32, 0)?;
            self.dirty.remove(g);
            let (bitmap, free) = state.disk_bitmap(bytes);
            out.push(DirtyGroup {
                group: g as u32,
                bitmap,
                free,
            });
        }
        Ok(out)
    }

    /// Drops the bitmaps of loaded groups that hold nothing unwritten (not dirty, no
    /// reservation, no pending free); they load again when needed. Returns how many.
    pub fn evict_clean_groups(&self) -> usize {
        let mut evicted = 0;
        for (g, group) in self.groups.iter().enumerate() {
            let mut guard = group.state.lock(&self.stats.group_locks);
            let clean = guard.as_ref().is_some_and(|s| {
                s.reserved.is_empty() && s.pending.is_empty() && !self.dirty.contains(g)
            });
            if clean {
                *guard = None;
                evicted += 1;
            }
        }
        evicted
    }

    /// Groups whose bitmaps are in memory.
    pub fn loaded_groups(&self) -> usize {
        self.groups
            .iter()
            .filter(|g| g.state.lock(&self.stats.group_locks).is_some())
            .count()
    }

    /// Bytes this allocator holds: fixed per-group state, the index, and each loaded
    /// group's bitmaps and lists (an accounting of its own structures, for the 16 TiB
    /// bound; allocator overhead of the heap is not included).
    pub fn memory_bytes(&self) -> usize {
        let fixed = std::mem::size_of::<Self>()
            + self.groups.len() * std::mem::size_of::<BlockGroup>()
            // Each group's shared "a run was given up" flag: the flag and two counts.
            + self.groups.len() * (1 + 2 * std::mem::size_of::<usize>())
            + self.index.memory_bytes()
            + self.dirty.memory_bytes()
            + self.stream_goals.len() * std::mem::size_of::<CachePadded<AtomicU64>>()
            + self.flex_free.as_ref().map_or(0, |f| f.memory_bytes())
            + self.damaged.memory_bytes();
        let per_group: usize = self
            .groups
            .iter()
            .map(|g| {
                g.system.len() * std::mem::size_of::<GroupExtent>()
                    + g.state
                        .lock(&self.stats.group_locks)
                        .as_ref()
                        .map_or(0, |s| s.memory_bytes())
            })
            .sum();
        fixed + per_group
    }
}

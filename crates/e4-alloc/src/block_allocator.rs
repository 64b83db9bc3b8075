//! The block allocator: goal selection, a criteria ladder over the free-space index, group
//! locks that are skipped when busy on every pass but the last (S1), stream goals in hashed
//! slots written with relaxed atomics instead of under a global lock (S2), and a limit
//! counter that admits a request only if its blocks exist (S4). Reservation windows for
//! appending files (S1c) are in [`crate::reservation_window`].
//!
//! Every mechanism can be switched to the design it replaces ([`AllocatorConfig`]), so the
//! ablation benchmark measures each one's effect in the same binary.

use crossbeam_utils::CachePadded;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use crate::block_group::{GroupExtent, GroupSpace, ORDERS};
use crate::free_space_index::FreeSpaceIndex;
use crate::instrumented_lock::InstrumentedMutex;
use crate::limit_counter::{LimitCounter, LimitCounterStats};
use crate::small_file_packing::PackingWindows;
use crate::stats::{Counter, LockStats};

/// Where the groups are on the volume.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Geometry {
    /// Block number of group 0's first block (1 for 1 KiB blocks, else 0).
    pub first_data_block: u64,
    pub blocks_per_group: u32,
    /// Total blocks, including `first_data_block`.
    pub blocks: u64,
}

impl Geometry {
    pub fn groups(&self) -> u32 {
        (self.blocks - self.first_data_block).div_ceil(u64::from(self.blocks_per_group)) as u32
    }

    pub fn group_blocks(&self, group: u32) -> u32 {
        let start = u64::from(group) * u64::from(self.blocks_per_group);
        (self.blocks - self.first_data_block - start).min(u64::from(self.blocks_per_group)) as u32
    }

    pub fn group_of(&self, block: u64) -> (u32, u32) {
        let rel = block - self.first_data_block;
        let bpg = u64::from(self.blocks_per_group);
        ((rel / bpg) as u32, (rel % bpg) as u32)
    }

    pub fn block_at(&self, group: u32, offset: u32) -> u64 {
        self.first_data_block
            + u64::from(group) * u64::from(self.blocks_per_group)
            + u64::from(offset)
    }
}

/// How group locks are taken while scanning.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupLocking {
    /// e4: try-lock and skip busy groups on every pass but the last.
    TrySkip,
    /// ext4 before 6.17: wait for every group lock.
    Blocking,
    /// One lock around the whole allocator.
    Global,
}

/// Where the next allocation without a file goal starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GoalPolicy {
    /// e4: one of many slots, picked by the request's stream key, relaxed atomics.
    HashedSlots,
    /// ext4's `s_mb_last_group` under `s_md_lock`: one goal, one lock.
    SharedLocked,
}

/// The allocator's mechanisms, each switchable for ablation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AllocatorConfig {
    pub locking: GroupLocking,
    pub goals: GoalPolicy,
    /// Search the free-space index (true) or walk groups linearly from the goal (false).
    pub use_index: bool,
    /// Slots of the free-block limit counter (one per thread is typical).
    pub counter_slots: usize,
    /// Largest reservation window, in blocks; 0 turns windows off (each append allocates
    /// exactly what it writes).
    pub window_cap: u32,
    /// Pack small files into per-slot windows ([`crate::small_file_packing`]).
    pub pack_small_files: bool,
}

impl Default for AllocatorConfig {
    /// e4's design.
    fn default() -> Self {
        AllocatorConfig {
            locking: GroupLocking::TrySkip,
            goals: GoalPolicy::HashedSlots,
            use_index: true,
            counter_slots: 64,
            window_cap: crate::reservation_window::DEFAULT_WINDOW_CAP,
            pack_small_files: true,
        }
    }
}

/// A run of physical blocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Extent {
    pub start: u64,
    pub len: u32,
}

impl Extent {
    pub fn end(&self) -> u64 {
        self.start + u64::from(self.len)
    }
}

/// A request for blocks.
#[derive(Debug, Clone, Copy)]
pub struct AllocRequest {
    /// Preferred first block (the block after the file's last one), if any.
    pub goal: Option<u64>,
    /// Blocks wanted.
    pub len: u32,
    /// Fewest blocks acceptable (1 for data that can be split over extents).
    pub min_len: u32,
    /// Limit-counter slot of the caller (its thread or CPU).
    pub slot: usize,
    /// Key of the caller's stream (e.g. its inode number), picking its stream-goal slot.
    pub stream: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AllocError {
    /// Fewer than `min_len` blocks are free (or free in one piece, for `min_len` > 1).
    NoSpace,
    /// A free named blocks outside the volume or not in use (a double free).
    BadFree(Extent),
}

impl std::fmt::Display for AllocError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AllocError::NoSpace => write!(f, "no space left on the filesystem"),
            AllocError::BadFree(e) => write!(f, "blocks {}+{} are not allocated", e.start, e.len),
        }
    }
}

impl std::error::Error for AllocError {}

/// Counters for reports.
#[derive(Default)]
pub struct AllocatorStats {
    pub group_locks: LockStats,
    pub global_lock: LockStats,
    pub goal_lock: LockStats,
    /// The per-slot small-file packing windows' locks.
    pub packing_locks: LockStats,
    pub allocations: Counter,
    pub frees: Counter,
    pub windows: WindowStats,
    /// Allocations satisfied by each rung of the ladder: goal, aligned, goal length, best.
    pub by_criterion: [Counter; 5],
}

/// Blocks moved into reservation windows, and out of them (used by an append, or
/// released). The difference is what windows hold.
#[derive(Default)]
pub struct WindowStats {
    pub reserved: Counter,
    pub consumed: Counter,
}

/// One group: its free space and its pending frees, behind its own cache-line-aligned lock.
pub struct BlockGroup {
    space: InstrumentedMutex<GroupSpace>,
    /// Blocks freed by transactions that have not committed: still marked in use, so they
    /// cannot be handed out before the free is durable. Per group, never a global list.
    pub(crate) pending: InstrumentedMutex<Vec<(u64, GroupExtent)>>,
    /// The group's free count as of its last change, published under the lock for readers
    /// that must not take it (the inode allocator's Orlov heuristic).
    free_published: AtomicU32,
}

/// Stream-goal slots: enough that concurrent streams rarely share one.
const GOAL_SLOTS: usize = 256;

pub struct BlockAllocator {
    geometry: Geometry,
    config: AllocatorConfig,
    groups: Box<[CachePadded<BlockGroup>]>,
    index: FreeSpaceIndex,
    free_blocks: LimitCounter,
    stream_goals: Box<[CachePadded<AtomicU64>]>,
    global: InstrumentedMutex<()>,
    shared_goal: InstrumentedMutex<u64>,
    packing: PackingWindows,
    stats: AllocatorStats,
}

/// The rungs of the criteria ladder, as mballoc names them (CR_POWER2_ALIGNED and so on).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Criterion {
    /// A power-of-two request in a chunk aligned to its size.
    Aligned,
    /// Any extent of the requested length.
    GoalLength,
    /// The longest extent of at least `min_len`.
    BestAvailable,
    /// Anything of at least `min_len`, every group, waiting for locks.
    AnyFree,
}

impl BlockAllocator {
    /// An allocator over groups built from their on-disk bitmaps (`bitmap(group)`).
    pub fn new(
        geometry: Geometry,
        config: AllocatorConfig,
        bitmap: impl Fn(u32) -> Vec<u8>,
    ) -> Self {
        let groups: Vec<_> = (0..geometry.groups())
            .map(|g| {
                let space = GroupSpace::from_bitmap(&bitmap(g), geometry.group_blocks(g));
                CachePadded::new(BlockGroup {
                    free_published: AtomicU32::new(space.free()),
                    space: InstrumentedMutex::new(space),
                    pending: InstrumentedMutex::new(Vec::new()),
                })
            })
            .collect();
        let index = FreeSpaceIndex::new(groups.len(), ORDERS);
        let mut free = 0u64;
        let mut groups = groups;
        for (g, group) in groups.iter_mut().enumerate() {
            let space = group.space.get_mut();
            free += u64::from(space.free());
            index.update(g, None, space.largest_order());
        }
        BlockAllocator {
            geometry,
            config,
            groups: groups.into_boxed_slice(),
            index,
            free_blocks: LimitCounter::new(free, config.counter_slots, 64),
            stream_goals: (0..GOAL_SLOTS)
                .map(|_| CachePadded::new(AtomicU64::new(0)))
                .collect(),
            global: InstrumentedMutex::new(()),
            shared_goal: InstrumentedMutex::new(0),
            packing: PackingWindows::new(config.counter_slots),
            stats: AllocatorStats::default(),
        }
    }

    /// An allocator over an empty volume.
    pub fn empty(geometry: Geometry, config: AllocatorConfig) -> Self {
        Self::new(geometry, config, |g| {
            vec![0u8; geometry.group_blocks(g).div_ceil(8) as usize]
        })
    }

    pub fn geometry(&self) -> &Geometry {
        &self.geometry
    }

    pub fn stats(&self) -> &AllocatorStats {
        &self.stats
    }

    pub fn index(&self) -> &FreeSpaceIndex {
        &self.index
    }

    /// The free-block counter's statistics (its shared-pool operations among them).
    pub fn counter_stats(&self) -> &LimitCounterStats {
        self.free_blocks.stats()
    }

    /// Free blocks not promised to anyone (exact when quiescent).
    pub fn free_blocks(&self) -> u64 {
        self.free_blocks.sum()
    }

    /// A lower bound on the free blocks (see [`LimitCounter::estimate`]); O(1).
    pub fn free_blocks_estimate(&self) -> u64 {
        self.free_blocks.estimate()
    }

    /// Free blocks in `group` as of its last change, read without its lock (for placement
    /// heuristics; the allocator itself decides under the lock).
    pub fn group_free_blocks(&self, group: u32) -> u32 {
        self.groups[group as usize]
            .free_published
            .load(Ordering::Relaxed)
    }

    /// A group's bitmap and free count, for persisting.
    pub fn group_bitmap(&self, group: u32, bytes: usize) -> (Vec<u8>, u32) {
        let space = self.groups[group as usize]
            .space
            .lock(&self.stats.group_locks);
        (space.to_bitmap(bytes), space.free())
    }

    /// Whether every group's filing in the index matches its largest free order.
    pub fn index_is_consistent(&self) -> bool {
        self.groups.iter().enumerate().all(|(g, group)| {
            let space = group.space.lock(&self.stats.group_locks);
            self.index.order_of(g) == space.largest_order()
        })
    }

    /// The stream-goal slot of a stream key (Fibonacci hashing spreads nearby keys).
    fn goal_slot(&self, stream: u64) -> &AtomicU64 {
        &self.stream_goals[(stream.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 56) as usize % GOAL_SLOTS]
    }

    fn start_goal(&self, req: &AllocRequest) -> u64 {
        if let Some(goal) = req.goal {
            return goal;
        }
        match self.config.goals {
            GoalPolicy::HashedSlots => {
                let goal = self.goal_slot(req.stream).load(Ordering::Relaxed);
                if goal == 0 {
                    // A new stream starts in a group of its own, spread by its key.
                    let group = (req.stream % u64::from(self.geometry.groups())) as u32;
                    self.geometry.block_at(group, 0)
                } else {
                    goal
                }
            }
            GoalPolicy::SharedLocked => *self.shared_goal.lock(&self.stats.goal_lock),
        }
    }

    fn remember_goal(&self, req: &AllocRequest, end: u64) {
        if req.goal.is_some() {
            return;
        }
        match self.config.goals {
            GoalPolicy::HashedSlots => {
                self.goal_slot(req.stream).store(end, Ordering::Relaxed);
            }
            GoalPolicy::SharedLocked => *self.shared_goal.lock(&self.stats.goal_lock) = end,
        }
    }

    /// Allocates between `min_len` and `len` contiguous blocks. Before reporting no space,
    /// it takes back what small-file packing windows hold and tries once more.
    pub fn allocate(&self, req: AllocRequest) -> Result<Extent, AllocError> {
        match self.allocate_once(req) {
            Err(AllocError::NoSpace) if self.reclaim_small_file_windows() > 0 => {
                self.allocate_once(req)
            }
            result => result,
        }
    }

    fn allocate_once(&self, req: AllocRequest) -> Result<Extent, AllocError> {
        let min_len = req.min_len.clamp(1, req.len.max(1));
        let len = req.len.max(min_len);
        // Admission: promise only blocks that exist.
        let reserved = if self.free_blocks.try_reserve(req.slot, u64::from(len)) {
            len
        } else if min_len < len && self.free_blocks.try_reserve(req.slot, u64::from(min_len)) {
            min_len
        } else {
            return Err(AllocError::NoSpace);
        };
        let _global = (self.config.locking == GroupLocking::Global)
            .then(|| self.global.lock(&self.stats.global_lock));
        let goal = self.start_goal(&req);
        let result = self.search(goal, reserved, min_len);
        match result {
            Some(extent) => {
                let unused = reserved - extent.len;
                if unused > 0 {
                    self.free_blocks.release(req.slot, u64::from(unused));
                }
                self.remember_goal(&req, extent.end());
                self.stats.allocations.add(1);
                Ok(extent)
            }
            None => {
                self.free_blocks.release(req.slot, u64::from(reserved));
                Err(AllocError::NoSpace)
            }
        }
    }

    /// Runs the ladder: the goal itself, then each criterion over the candidate groups.
    fn search(&self, goal: u64, len: u32, min_len: u32) -> Option<Extent> {
        let goal = goal.clamp(self.geometry.first_data_block, self.geometry.blocks - 1);
        let (goal_group, goal_offset) = self.geometry.group_of(goal);
        // Next-fit at the goal: the cheapest way to stay contiguous.
        if let Some(e) = self.try_group(goal_group, false, |s| {
            s.find_free(goal_offset, len, len)
                .filter(|e| e.start == goal_offset)
        }) {
            self.stats.by_criterion[0].add(1);
            return Some(e);
        }
        let ladder: &[Criterion] = if len.is_power_of_two() && len > 1 {
            &[
                Criterion::Aligned,
                Criterion::GoalLength,
                Criterion::BestAvailable,
                Criterion::AnyFree,
            ]
        } else {
            &[
                Criterion::GoalLength,
                Criterion::BestAvailable,
                Criterion::AnyFree,
            ]
        };
        for (rung, criterion) in ladder.iter().enumerate() {
            let last = rung == ladder.len() - 1;
            let min_order = match criterion {
                Criterion::Aligned | Criterion::GoalLength => (31 - len.leading_zeros()) as u8,
                Criterion::BestAvailable | Criterion::AnyFree => {
                    (31 - min_len.leading_zeros()) as u8
                }
            };
            let find = |s: &GroupSpace| match criterion {
                Criterion::Aligned => s
                    .find_aligned(min_order)
                    .map(|start| GroupExtent { start, len }),
                Criterion::GoalLength => s.find_free(0, len, len),
                Criterion::BestAvailable | Criterion::AnyFree => {
                    s.longest_free(len).filter(|e| e.len >= min_len)
                }
            };
            let found = if last || !self.config.use_index {
                // The last pass visits every group, waiting for locks: it is what makes
                // "no space" exact. Without the index, every pass is a linear walk.
                (0..self.geometry.groups())
                    .map(|i| (goal_group + i) % self.geometry.groups())
                    .find_map(|g| self.try_group(g, last, find))
            } else {
                self.index
                    .candidates(goal_group as usize, min_order)
                    .find_map(|g| self.try_group(g as u32, false, find))
            };
            if let Some(e) = found {
                self.stats.by_criterion[rung + 1].add(1);
                return Some(e);
            }
        }
        None
    }

    /// Locks group `g` (skipping it if busy, unless `wait`), looks for space with `find`,
    /// and takes what it finds.
    fn try_group(
        &self,
        g: u32,
        wait: bool,
        find: impl Fn(&GroupSpace) -> Option<GroupExtent>,
    ) -> Option<Extent> {
        let group = &self.groups[g as usize];
        let mut space = match self.config.locking {
            GroupLocking::TrySkip if !wait => group.space.try_lock(&self.stats.group_locks)?,
            _ => group.space.lock(&self.stats.group_locks),
        };
        let found = find(&space)?;
        let before = space.largest_order();
        // OK to unwrap: `find` only returns free space of this group, and we hold its lock.
        space.mark_used(found).unwrap();
        self.index.update(g as usize, before, space.largest_order());
        group.free_published.store(space.free(), Ordering::Relaxed);
        Some(Extent {
            start: self.geometry.block_at(g, found.start),
            len: found.len,
        })
    }

    /// The per-group pieces of an extent (extents may cross group boundaries), or `None`
    /// if it is empty or runs outside the volume.
    pub(crate) fn pieces(&self, extent: Extent) -> Option<Vec<(u32, GroupExtent)>> {
        if extent.start < self.geometry.first_data_block
            || extent.end() > self.geometry.blocks
            || extent.len == 0
        {
            return None;
        }
        let mut out = Vec::new();
        let mut at = extent.start;
        while at < extent.end() {
            let (g, offset) = self.geometry.group_of(at);
            let len =
                (u64::from(self.geometry.group_blocks(g) - offset)).min(extent.end() - at) as u32;
            out.push((g, GroupExtent { start: offset, len }));
            at += u64::from(len);
        }
        Some(out)
    }

    /// Returns blocks to free space at once. Blocks freed by a transaction that has not
    /// committed go through [`crate::pending_frees`] instead.
    pub fn free(&self, extent: Extent, slot: usize) -> Result<(), AllocError> {
        let _global = (self.config.locking == GroupLocking::Global)
            .then(|| self.global.lock(&self.stats.global_lock));
        for (g, range) in self.pieces(extent).ok_or(AllocError::BadFree(extent))? {
            self.free_in_group(g, range, slot)?;
        }
        Ok(())
    }

    pub(crate) fn group(&self, g: u32) -> &BlockGroup {
        &self.groups[g as usize]
    }

    /// Marks `range` of group `g` free and returns its blocks to the counter.
    pub(crate) fn free_in_group(
        &self,
        g: u32,
        range: GroupExtent,
        slot: usize,
    ) -> Result<(), AllocError> {
        let group = &self.groups[g as usize];
        let mut space = group.space.lock(&self.stats.group_locks);
        let before = space.largest_order();
        space.mark_free(range).map_err(|_| {
            AllocError::BadFree(Extent {
                start: self.geometry.block_at(g, range.start),
                len: range.len,
            })
        })?;
        self.index.update(g as usize, before, space.largest_order());
        group.free_published.store(space.free(), Ordering::Relaxed);
        drop(space);
        self.free_blocks.release(slot, u64::from(range.len));
        self.stats.frees.add(1);
        Ok(())
    }

    pub(crate) fn window_stats(&self) -> &WindowStats {
        &self.stats.windows
    }

    pub(crate) fn config(&self) -> &AllocatorConfig {
        &self.config
    }

    pub(crate) fn packing(&self) -> &PackingWindows {
        &self.packing
    }
}

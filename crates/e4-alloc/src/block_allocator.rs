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
use std::sync::Arc;

use crate::block_flex_sums::FlexFreeBlocks;
use crate::block_group::{GroupExtent, GroupSpace};
use crate::dirty_groups::DirtyGroups;
use crate::free_space_index::FreeSpaceIndex;
use crate::group_damage::{DamagedGroups, GroupDamage, Unfounded};
use crate::group_loading::{BlockBitmapSource, GroupSummary};
use crate::group_state::{FreeRefusal, GroupState, ReservedRun};
use crate::instrumented_lock::InstrumentedMutex;
use crate::limit_counter::{LimitCounter, LimitCounterStats};
use crate::reserve_pool::ReservePool;
use crate::small_file_packing::PackingWindows;
use crate::stats::{Counter, LockStats};
use crate::sync::MutexGuard;

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
    /// Blocks per allocation cluster (`1 << (s_log_cluster_size - s_log_block_size)`). The
    /// allocator counts, searches and hands out single blocks, so a bigalloc volume (more
    /// than 1) is refused by the constructors ([`AllocError::Bigalloc`]) rather than
    /// corrupted by block-granular bitmaps over cluster-granular ones.
    pub blocks_per_cluster: u32,
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
            blocks_per_cluster: 1,
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
    /// Which set-aside blocks the request may fall back to when the free blocks run out.
    pub reserve: Reserve,
}

/// The set-aside blocks a request may use, as the kernel's `ext4_has_free_clusters` decides:
/// each level may use what the one before may, and more.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub enum Reserve {
    /// Neither reserve: an ordinary caller.
    #[default]
    None,
    /// The root reserve (the caller is root, or the filesystem's reserved uid/gid; see
    /// [`BlockAllocator::with_root_reserve`]).
    Root,
    /// Both reserves: metadata an operation that frees space cannot do without (the
    /// kernel's `EXT4_MB_USE_RESERVED`; see [`BlockAllocator::with_metadata_reserve`]).
    Metadata,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AllocError {
    /// Fewer than `min_len` blocks are free (or free in one piece, for `min_len` > 1).
    NoSpace,
    /// A free was refused, and nothing was changed.
    BadFree { extent: Extent, reason: BadFree },
    /// A group's bitmap was found corrupt when it was loaded (it disagrees with its
    /// descriptor, or shows metadata free): nothing in the group is handed out or freed
    /// for the rest of this open ([`crate::group_damage`]).
    GroupCorrupt(GroupDamage),
    /// A group's bitmap could not be loaded (the source's words: an I/O error, a bad
    /// checksum).
    BitmapUnreadable { group: u32, reason: String },
    /// The volume uses bigalloc (`blocks_per_cluster` blocks per cluster), which the
    /// allocator does not support.
    Bigalloc { blocks_per_cluster: u32 },
}

/// Why a free was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BadFree {
    /// Empty, or outside the volume.
    OutsideVolume,
    /// Part of it is not in use (a double free).
    NotInUse,
    /// Part of it is the unused part of a reservation window: someone's future blocks.
    Reserved,
    /// Part of it already waits in a transaction's pending frees.
    Pending,
    /// Part of it is filesystem metadata (the system zone).
    SystemZone,
    /// Part of it is not among the transaction's pending frees (a cancel of a free the
    /// transaction did not make).
    NotPending,
}

impl From<FreeRefusal> for BadFree {
    fn from(r: FreeRefusal) -> Self {
        match r {
            FreeRefusal::NotInUse => BadFree::NotInUse,
            FreeRefusal::Reserved => BadFree::Reserved,
            FreeRefusal::Pending => BadFree::Pending,
            FreeRefusal::SystemZone => BadFree::SystemZone,
        }
    }
}

impl std::fmt::Display for AllocError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AllocError::NoSpace => write!(f, "no space left on the filesystem"),
            AllocError::BadFree { extent, reason } => {
                let why = match reason {
                    BadFree::OutsideVolume => "lie outside the volume",
                    BadFree::NotInUse => "are not all in use",
                    BadFree::Reserved => "are reserved for another file's appends",
                    BadFree::Pending => "are already being freed",
                    BadFree::SystemZone => "hold filesystem metadata",
                    BadFree::NotPending => "are not among the transaction's frees",
                };
                write!(
                    f,
                    "cannot free blocks {}+{}: they {why}",
                    extent.start, extent.len
                )
            }
            AllocError::GroupCorrupt(damage) => write!(f, "{damage}"),
            AllocError::BitmapUnreadable { group, reason } => {
                write!(
                    f,
                    "block bitmap of group {group} cannot be loaded: {reason}"
                )
            }
            AllocError::Bigalloc { blocks_per_cluster } => write!(
                f,
                "bigalloc (clusters of {blocks_per_cluster} blocks) is not supported by the \
                 block allocator"
            ),
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
    /// Blocks whose free was skipped because their group is corrupt: they stay in use on
    /// disk (a leak e2fsck reclaims) rather than return to a bitmap no one trusts.
    pub leaked: Counter,
}

/// Blocks moved into reservation windows, and out of them (used by an append, or
/// released). The difference is what windows hold.
#[derive(Default)]
pub struct WindowStats {
    pub reserved: Counter,
    pub consumed: Counter,
}

/// One group behind its own cache-line-aligned lock (see [`GroupState`]). Until its bitmap
/// is needed the group is only this: a few dozen bytes (see [`crate::group_loading`]).
/// Aligned to one 64-byte line so neighbouring groups' locks do not share it; not the 128
/// bytes of `CachePadded`, which would double the 16 TiB footprint (8 MiB more).
#[repr(align(64))]
pub struct BlockGroup {
    /// `None` until the bitmap is first needed, and again after a clean group is evicted.
    /// Boxed, so an unloaded group stays within one cache line.
    pub(crate) state: InstrumentedMutex<Option<Box<GroupState>>>,
    /// Metadata ranges of the group, sorted: never handed out or freed.
    pub(crate) system: Box<[GroupExtent]>,
    /// BLOCK_UNINIT: the on-disk bitmap was never written; it is computed, not read.
    pub(crate) uninit: bool,
    /// Set when an owner gives up a reservation of this group ([`ReservedRun::give_up`]).
    pub(crate) has_released: Arc<std::sync::atomic::AtomicBool>,
    /// The group's free count as of its last change, published under the lock for readers
    /// that must not take it (the inode allocator's Orlov heuristic).
    pub(crate) free_published: AtomicU32,
}

/// A locked group whose bitmap is loaded (made only by [`BlockAllocator::lock_group`] and
/// the search, after loading).
pub(crate) struct LockedGroup<'a>(MutexGuard<'a, Option<Box<GroupState>>>);

impl std::ops::Deref for LockedGroup<'_> {
    type Target = GroupState;
    fn deref(&self) -> &GroupState {
        // OK to unwrap: a LockedGroup is only made once the state is loaded.
        self.0.as_deref().unwrap()
    }
}

impl std::ops::DerefMut for LockedGroup<'_> {
    fn deref_mut(&mut self) -> &mut GroupState {
        // OK to unwrap: as in `deref`.
        self.0.as_deref_mut().unwrap()
    }
}

/// Stream-goal slots: enough that concurrent streams rarely share one.
pub(crate) const GOAL_SLOTS: usize = 256;

pub struct BlockAllocator {
    pub(crate) geometry: Geometry,
    pub(crate) config: AllocatorConfig,
    pub(crate) groups: Box<[BlockGroup]>,
    pub(crate) index: FreeSpaceIndex,
    pub(crate) free_blocks: LimitCounter,
    pub(crate) stream_goals: Box<[CachePadded<AtomicU64>]>,
    pub(crate) global: InstrumentedMutex<()>,
    pub(crate) shared_goal: InstrumentedMutex<u64>,
    pub(crate) packing: PackingWindows,
    pub(crate) stats: AllocatorStats,
    /// Where group bitmaps come from when first needed.
    pub(crate) source: Box<dyn BlockBitmapSource>,
    /// Groups whose on-disk bitmap may differ from what was last written back.
    pub(crate) dirty: DirtyGroups,
    /// Blocks only privileged requests may use.
    pub(crate) root_reserve: ReservePool,
    pub(crate) metadata_reserve: ReservePool,
    /// Free blocks per flex group, if the inode allocator's flex-group size was given.
    pub(crate) flex_free: Option<FlexFreeBlocks>,
    /// Groups whose bitmaps were refused at load, never used again.
    pub(crate) damaged: DamagedGroups,
    /// Free blocks of refused groups the counter still counts (promised at the time).
    pub(crate) unfounded: Unfounded,
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
    /// An allocator over groups built from their on-disk bitmaps (`bitmap(group)`), all
    /// loaded now, with `system_zone` (metadata: superblocks and backups, descriptors,
    /// reserved GDT blocks, bitmaps, inode tables, the journal) never handed out or freed. A
    /// bitmap that shows a system-zone block free is corrupt, and refused. For a real
    /// volume, [`BlockAllocator::open`] loads each group when it is first needed instead.
    pub fn new(
        geometry: Geometry,
        config: AllocatorConfig,
        bitmap: impl Fn(u32) -> Vec<u8> + Send + Sync + 'static,
        system_zone: &[Extent],
    ) -> Result<Self, AllocError> {
        // The descriptors' counts are the bitmaps' own, so only the system zone is checked.
        let bitmap = Arc::new(bitmap);
        let counted = |g: u32| GroupSummary {
            free: GroupSpace::from_bitmap(&bitmap(g), geometry.group_blocks(g)).free(),
            uninit: false,
        };
        let read = Arc::clone(&bitmap);
        let source = move |g: u32| Ok::<_, String>(read(g));
        let alloc = Self::open(geometry, config, counted, system_zone, source)?;
        for g in 0..geometry.groups() {
            drop(alloc.lock_group(g, 0)?);
        }
        Ok(alloc)
    }

    /// An allocator over an empty volume with no system zone (for tests and benchmarks).
    ///
    /// # Panics
    ///
    /// If `config` describes bigalloc: a caller's mistake, as no volume is read here.
    pub fn empty(geometry: Geometry, config: AllocatorConfig) -> Self {
        let uninit = |g| GroupSummary {
            free: geometry.group_blocks(g),
            uninit: true,
        };
        let never_read = |_: u32| Err::<Vec<u8>, _>("an empty volume has no bitmaps".into());
        match Self::open(geometry, config, uninit, &[], never_read) {
            Ok(alloc) => alloc,
            // With no system zone there is nothing else to refuse.
            Err(e) => panic!("BlockAllocator::empty: {e}"),
        }
    }

    pub fn geometry(&self) -> &Geometry {
        &self.geometry
    }

    /// The first block of the `len` blocks from `start` that lies in the system zone
    /// (superblocks and descriptors, reserved GDT blocks, bitmaps, inode tables), if one
    /// does: what a file's mapping must never name. Blocks outside the volume are not
    /// looked at (the caller checks the bounds). One look per group the run crosses; no
    /// lock is taken (the system zone never changes).
    pub fn system_zone_block(&self, start: u64, len: u64) -> Option<u64> {
        let g = &self.geometry;
        let end = start.saturating_add(len).min(g.blocks);
        let mut at = start.max(g.first_data_block);
        while at < end {
            let (group, offset) = g.group_of(at);
            let piece_len = u64::from(g.group_blocks(group) - offset).min(end - at);
            let piece_end = u64::from(offset) + piece_len;
            let hit = self.groups[group as usize]
                .system
                .iter()
                .find(|s| u64::from(s.start) < piece_end && offset < s.start + s.len);
            if let Some(s) = hit {
                return Some(g.block_at(group, s.start.max(offset)));
            }
            at += piece_len;
        }
        None
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
        self.free_blocks.sum() + self.root_reserve.held() + self.metadata_reserve.held()
    }

    /// Sets aside `blocks` (`s_r_blocks_count`) for privileged requests only, taken from the
    /// free blocks now (as many as are free).
    pub fn with_root_reserve(self, blocks: u64) -> Self {
        let pool = self.set_aside(blocks);
        BlockAllocator {
            root_reserve: pool,
            ..self
        }
    }

    /// Sets aside `blocks` (the kernel's `s_resv_clusters`: 2 % of the filesystem, at most
    /// 4,096 clusters, on extent-mapped filesystems) for [`Reserve::Metadata`] requests only.
    /// Set it after the root reserve: it is the last to be used and the first refilled.
    pub fn with_metadata_reserve(self, blocks: u64) -> Self {
        let pool = self.set_aside(blocks);
        BlockAllocator {
            metadata_reserve: pool,
            ..self
        }
    }

    /// A pool of `blocks` taken from the free blocks now (as many as are free).
    fn set_aside(&self, blocks: u64) -> ReservePool {
        // Nothing else runs yet, so the counter's sum is exact and the reservation succeeds.
        let wanted = blocks.min(self.free_blocks.sum());
        let held = if self.free_blocks.try_reserve(0, wanted) {
            wanted
        } else {
            0
        };
        ReservePool::new(blocks, held)
    }

    /// Free blocks an unprivileged caller could still get (statfs's `f_bavail`, less what
    /// windows hold): the free blocks without either reserve.
    pub fn available_blocks(&self) -> u64 {
        self.free_blocks.sum()
    }

    /// Returns `n` blocks to the free count: to the root reserve first while it is short.
    pub(crate) fn return_blocks(&self, slot: usize, n: u64) {
        let rest = self.unfounded.pay(n);
        let rest = self.metadata_reserve.refill(rest);
        let rest = self.root_reserve.refill(rest);
        if rest > 0 {
            self.free_blocks.release(slot, rest);
        }
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

    /// A group's block bitmap as it must be written to disk (`bytes` long) and its free
    /// count: blocks in reservation windows and blocks whose free waits for a commit are
    /// free there, though the allocator will not hand them out. Nothing else may be
    /// persisted. Call it with the transaction quiescent (a commit waits for its handles), so
    /// no window is being carved.
    pub fn group_bitmap_for_disk(
        &self,
        group: u32,
        bytes: usize,
    ) -> Result<(Vec<u8>, u32), AllocError> {
        Ok(self.lock_group(group, 0)?.disk_bitmap(bytes))
    }

    /// Whether every loaded group's filing in the index matches its largest free order.
    pub fn index_is_consistent(&self) -> bool {
        self.groups.iter().enumerate().all(|(g, group)| {
            let state = group.state.lock(&self.stats.group_locks);
            state
                .as_ref()
                .is_none_or(|s| self.index.is_filed_only_under(g, s.space.largest_order()))
        })
    }

    /// Locks group `g`, waiting, loads its bitmap if it is not loaded, and takes back
    /// released reservations (their blocks return to the counter through `slot`).
    pub(crate) fn lock_group(&self, g: u32, slot: usize) -> Result<LockedGroup<'_>, AllocError> {
        let guard = self.groups[g as usize].state.lock(&self.stats.group_locks);
        Ok(self.after_lock(g, guard, slot)?.0)
    }

    /// Bookkeeping every lock holder does: load the group if needed, and take back
    /// released reservations, so a dropped window costs nothing until its group is next
    /// used. Returns the locked state and the blocks taken back.
    fn after_lock<'a>(
        &self,
        g: u32,
        mut guard: MutexGuard<'a, Option<Box<GroupState>>>,
        slot: usize,
    ) -> Result<(LockedGroup<'a>, u32), AllocError> {
        if guard.is_none() {
            if let Some(damage) = self.damage_of(g) {
                return Err(AllocError::GroupCorrupt(damage));
            }
            *guard = Some(Box::new(self.load_group(g, slot)?));
        }
        let mut state = LockedGroup(guard);
        let before = state.space.largest_order();
        let freed = state.reclaim_released(&self.groups[g as usize].has_released);
        if freed > 0 {
            self.publish(g, before, &state);
            self.return_blocks(slot, u64::from(freed));
            self.stats.windows.consumed.add(u64::from(freed));
        }
        Ok((state, freed))
    }

    /// After a change to group `g`'s space (still under its lock): refile it in the index
    /// and publish its free count. Both happen before the lock is dropped, so the index
    /// never lags a change another thread could act on. A change the on-disk bitmap shows
    /// is marked by the caller ([`Self::mark_dirty`]): reserving a window, giving its rest
    /// back and a commit's frees becoming reusable change nothing on disk (the disk bitmap
    /// shows reserved and pending blocks free), so the next commit need not write it.
    pub(crate) fn publish(&self, g: u32, before: Option<u8>, state: &GroupState) {
        self.index
            .update(g as usize, before, state.space.largest_order());
        self.set_published_free(g, state.space.free());
    }

    /// Publishes group `g`'s free count (under its lock), moving its flex group's sum.
    pub(crate) fn set_published_free(&self, g: u32, free: u32) {
        let before = self.groups[g as usize]
            .free_published
            .swap(free, Ordering::Relaxed);
        if let Some(flex_free) = &self.flex_free {
            flex_free.changed(g, before, free);
        }
    }

    /// Notes that group `g`'s on-disk bitmap changed (caller holds its lock, or carves from
    /// a window of it inside a transaction). The bit is read first: it is shared with 63
    /// other groups, and only the first change after a write-back needs to write it. (It is
    /// cleared only by write-back, with every transaction stopped.)
    pub(crate) fn mark_dirty(&self, g: u32) {
        self.dirty.insert(g as usize);
    }

    /// Takes back every released reservation in every group and what idle packing windows
    /// hold; returns the blocks recovered. The last resort before "no space": O(groups).
    fn reclaim_for_space(&self, slot: usize) -> u64 {
        let mut recovered = self.reclaim_small_file_windows();
        for g in 0..self.geometry.groups() {
            let guard = self.groups[g as usize].state.lock(&self.stats.group_locks);
            // An unloaded group holds no reservations; nothing to take back there.
            if guard.is_some() {
                if let Ok((_, freed)) = self.after_lock(g, guard, slot) {
                    recovered += u64::from(freed);
                }
            }
        }
        recovered
    }

    /// The stream-goal slot of a stream key (nearby keys in different slots).
    fn goal_slot(&self, stream: u64) -> &AtomicU64 {
        &self.stream_goals[crate::shard::shard_of(stream, GOAL_SLOTS)]
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
    /// it takes back released reservations and idle packing windows and tries once more.
    pub fn allocate(&self, req: AllocRequest) -> Result<Extent, AllocError> {
        self.allocate_run(req, false).map(|(extent, _)| extent)
    }

    /// [`Self::allocate`], optionally registering the extent as a reservation of its group
    /// (for windows), in the same lock hold.
    pub(crate) fn allocate_run(
        &self,
        req: AllocRequest,
        reserve: bool,
    ) -> Result<(Extent, Option<Arc<ReservedRun>>), AllocError> {
        match self.allocate_once(req, reserve) {
            Err(AllocError::NoSpace) if self.reclaim_for_space(req.slot) > 0 => {
                self.allocate_once(req, reserve)
            }
            result => result,
        }
    }

    fn allocate_once(
        &self,
        req: AllocRequest,
        reserve: bool,
    ) -> Result<(Extent, Option<Arc<ReservedRun>>), AllocError> {
        let min_len = req.min_len.clamp(1, req.len.max(1));
        let len = req.len.max(min_len);
        // Admission: promise only blocks that exist (and, to the unprivileged, only blocks
        // outside the root reserve).
        let counter = &self.free_blocks;
        // A request larger than what is free takes all of it (at least `min_len`): one
        // request, not one per `min_len` blocks (a 1 GiB fallocate on a nearly full image
        // was 30,000 one-block allocations).
        let (want, least) = (u64::from(len), u64::from(min_len));
        let root = || match req.reserve {
            Reserve::None => 0,
            Reserve::Root => self.root_reserve.take_up_to(want, least),
            Reserve::Metadata => match self.root_reserve.take_up_to(want, least) {
                0 => self.metadata_reserve.take_up_to(want, least),
                got => got,
            },
        };
        let reserved = match counter.try_reserve_up_to(req.slot, want, least) {
            0 => root(),
            got => got,
        };
        if reserved == 0 {
            return Err(AllocError::NoSpace);
        }
        // OK to cast: at most `len`.
        let reserved = reserved as u32;
        let _global = (self.config.locking == GroupLocking::Global)
            .then(|| self.global.lock(&self.stats.global_lock));
        let goal = self.start_goal(&req);
        let load_error = std::cell::RefCell::new(None);
        let result = self.search(goal, reserved, min_len, req.slot, reserve, &load_error);
        match result {
            Some((extent, run)) => {
                let unused = reserved - extent.len;
                if unused > 0 {
                    self.return_blocks(req.slot, u64::from(unused));
                }
                self.remember_goal(&req, extent.end());
                self.stats.allocations.add(1);
                Ok((extent, run))
            }
            None => {
                self.return_blocks(req.slot, u64::from(reserved));
                Err(load_error.into_inner().unwrap_or(AllocError::NoSpace))
            }
        }
    }

    /// Runs the ladder: the goal itself, then each criterion over the candidate groups.
    fn search(
        &self,
        goal: u64,
        len: u32,
        min_len: u32,
        slot: usize,
        reserve: bool,
        load_error: &std::cell::RefCell<Option<AllocError>>,
    ) -> Option<(Extent, Option<Arc<ReservedRun>>)> {
        let goal = goal.clamp(self.geometry.first_data_block, self.geometry.blocks - 1);
        let (goal_group, goal_offset) = self.geometry.group_of(goal);
        let take = |g: u32, wait: bool, find: &dyn Fn(&GroupSpace) -> Option<GroupExtent>| {
            self.try_group(g, wait, find, slot, reserve, load_error)
        };
        // Next-fit at the goal: the cheapest way to stay contiguous.
        if let Some(found) = take(goal_group, false, &|s: &GroupSpace| {
            s.find_free(goal_offset, len, len)
                .filter(|e| e.start == goal_offset)
        }) {
            self.stats.by_criterion[0].add(1);
            return Some(found);
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
                    .find_map(|g| take(g, last, &find))
            } else {
                self.index
                    .candidates(goal_group as usize, min_order)
                    .find_map(|g| take(g as u32, false, &find))
            };
            if let Some(found) = found {
                self.stats.by_criterion[rung + 1].add(1);
                return Some(found);
            }
        }
        None
    }

    /// Locks group `g` (skipping it if busy, unless `wait`), looks for space with `find`,
    /// and takes what it finds, registering it as a reservation if `reserve`.
    fn try_group(
        &self,
        g: u32,
        wait: bool,
        find: &dyn Fn(&GroupSpace) -> Option<GroupExtent>,
        slot: usize,
        reserve: bool,
        load_error: &std::cell::RefCell<Option<AllocError>>,
    ) -> Option<(Extent, Option<Arc<ReservedRun>>)> {
        let group = &self.groups[g as usize];
        let guard = match self.config.locking {
            GroupLocking::TrySkip if !wait => group.state.try_lock(&self.stats.group_locks)?,
            _ => group.state.lock(&self.stats.group_locks),
        };
        let mut state = match self.after_lock(g, guard, slot) {
            Ok((state, _)) => state,
            Err(e) => {
                // The group cannot be used; the search goes on without it, and reports
                // this instead of "no space" if nothing else is found.
                load_error.replace(Some(e));
                return None;
            }
        };
        let found = find(&state.space)?;
        let before = state.space.largest_order();
        // OK to unwrap: `find` only returns free space of this group, and we hold its lock.
        state.space.mark_used(found).unwrap();
        let run = reserve.then(|| {
            let run = Arc::new(ReservedRun::new(g, found, Arc::clone(&group.has_released)));
            state.reserved.push(Arc::clone(&run));
            run
        });
        if !reserve {
            // A window's blocks reach the disk bitmap when they are carved.
            self.mark_dirty(g);
        }
        self.publish(g, before, &state);
        let extent = Extent {
            start: self.geometry.block_at(g, found.start),
            len: found.len,
        };
        Some((extent, run))
    }

    /// The per-group pieces of an extent (extents may cross group boundaries).
    pub(crate) fn pieces(&self, extent: Extent) -> Result<Vec<(u32, GroupExtent)>, AllocError> {
        pieces_of(&self.geometry, extent).ok_or(AllocError::BadFree {
            extent,
            reason: BadFree::OutsideVolume,
        })
    }

    /// The pieces of `extent`, each checked under its group's lock to be freeable by its
    /// owner, before anything is changed: a free that would be refused in its second group
    /// does not free its first. (Another thread freeing the same blocks at the same moment
    /// could still interleave; the owner's inode lock rules that out.)
    pub(crate) fn checked_pieces(
        &self,
        extent: Extent,
    ) -> Result<Vec<(u32, GroupExtent)>, AllocError> {
        let pieces = self.pieces(extent)?;
        // A free inside one group (every extent e4 allocates) is checked once, under the
        // lock that applies it; only a multi-group free needs the look ahead.
        if pieces.len() == 1 {
            return Ok(pieces);
        }
        for &(g, range) in &pieces {
            if let Some(state) = self.lock_group_for_free(g, range, 0, false)? {
                state.check_free(range).map_err(|r| AllocError::BadFree {
                    extent,
                    reason: r.into(),
                })?;
            }
        }
        Ok(pieces)
    }

    /// Locks group `g` for a free of `range`: `None` when the group is corrupt, for the
    /// free to skip (the kernel's `ext4_free_blocks` does the same): its blocks stay in use
    /// on disk, and a bitmap no one trusts does not look healthier. Counted in
    /// [`AllocatorStats::leaked`] when `count` (the pass that applies the free).
    pub(crate) fn lock_group_for_free(
        &self,
        g: u32,
        range: GroupExtent,
        slot: usize,
        count: bool,
    ) -> Result<Option<LockedGroup<'_>>, AllocError> {
        match self.lock_group(g, slot) {
            Ok(state) => Ok(Some(state)),
            Err(AllocError::GroupCorrupt(_)) => {
                if count {
                    self.stats.leaked.add(u64::from(range.len));
                }
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    /// The damage group `g` was refused for, if it was (read under the group's lock).
    pub(crate) fn damage_of(&self, g: u32) -> Option<GroupDamage> {
        if self.damaged.contains(g) {
            self.damaged.of(g)
        } else {
            None
        }
    }

    /// The groups found corrupt since the last call, each reported once: a caller shows
    /// them as warnings. See [`crate::group_damage`].
    pub fn take_damage(&self) -> Vec<GroupDamage> {
        self.damaged.take_new()
    }

    /// Every group found corrupt so far.
    pub fn corrupt_groups(&self) -> Vec<GroupDamage> {
        self.damaged.all()
    }

    /// Returns blocks to free space at once. Blocks freed by a transaction that has not
    /// committed go through [`crate::pending_frees`] instead. Refused, changing nothing, if
    /// any block is free already, reserved in a window, pending, or metadata.
    pub fn free(&self, extent: Extent, slot: usize) -> Result<(), AllocError> {
        let _global = (self.config.locking == GroupLocking::Global)
            .then(|| self.global.lock(&self.stats.global_lock));
        for (g, range) in self.checked_pieces(extent)? {
            let Some(mut state) = self.lock_group_for_free(g, range, slot, true)? else {
                continue;
            };
            state.check_free(range).map_err(|r| AllocError::BadFree {
                extent,
                reason: r.into(),
            })?;
            self.mark_free_locked(g, &mut state, range);
            self.mark_dirty(g);
            drop(state);
            self.return_blocks(slot, u64::from(range.len));
        }
        self.stats.frees.add(1);
        Ok(())
    }

    /// Marks `range` (checked to be in use) free, under group `g`'s lock.
    pub(crate) fn mark_free_locked(&self, g: u32, state: &mut LockedGroup<'_>, range: GroupExtent) {
        let before = state.space.largest_order();
        // OK to unwrap: the caller checked the range is in use, under this lock.
        state.space.mark_free(range).unwrap();
        self.publish(g, before, state);
    }

    /// Gives a reservation's unused blocks back to its group at once.
    pub(crate) fn release_run(&self, run: &Arc<ReservedRun>, slot: usize) {
        let g = run.group;
        // A group holding a reservation is loaded and never evicted, so this cannot fail;
        // if it did, the run stays released and is taken back at the next load.
        let Ok(mut state) = self.lock_group(g, slot) else {
            run.give_up();
            return;
        };
        let before = state.space.largest_order();
        let freed = state.release(run);
        if freed > 0 {
            self.publish(g, before, &state);
            drop(state);
            self.return_blocks(slot, u64::from(freed));
            self.stats.windows.consumed.add(u64::from(freed));
        }
    }

    /// Free blocks as `statfs` reports them: unreserved blocks plus blocks held in windows,
    /// read without a lock. The two are separate counters that move while they are read, so
    /// the sum is clamped to the volume: it can lag, but never claims more than exists.
    pub fn free_blocks_for_statfs(&self) -> u64 {
        let capacity = self.geometry.blocks - self.geometry.first_data_block;
        (self.free_blocks() + self.in_windows()).min(capacity)
    }

    /// Blocks an unprivileged caller could still get as `statfs` reports them (`f_bavail`):
    /// [`Self::available_blocks`] plus blocks held in windows, which are free until used,
    /// as ext4 counts its preallocations (without them `df` lost a window's worth of
    /// blocks, hundreds, for every file being written).
    pub fn available_blocks_for_statfs(&self) -> u64 {
        self.available_blocks() + self.in_windows()
    }

    /// Blocks held unused in windows, from two counters read without a lock (it can lag).
    pub fn in_windows(&self) -> u64 {
        let w = &self.stats.windows;
        w.reserved.get().saturating_sub(w.consumed.get())
    }

    /// Blocks held unused in reservations, over all groups (O(groups), for checks).
    pub fn reserved_blocks(&self) -> u64 {
        (0..self.geometry.groups())
            .map(|g| {
                let guard = self.groups[g as usize].state.lock(&self.stats.group_locks);
                if guard.is_none() {
                    return 0; // An unloaded group holds no reservations.
                }
                self.after_lock(g, guard, 0)
                    .map_or(0, |(state, _)| state.reserved_blocks())
            })
            .sum()
    }

    /// Returns `n` freed blocks to the free-block counter.
    pub(crate) fn release_free_blocks(&self, slot: usize, n: u64) {
        if n > 0 {
            self.return_blocks(slot, n);
            self.stats.frees.add(1);
        }
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

/// The per-group pieces of an extent, or `None` if it is empty or runs outside the volume.
pub(crate) fn pieces_of(geometry: &Geometry, extent: Extent) -> Option<Vec<(u32, GroupExtent)>> {
    if extent.start < geometry.first_data_block || extent.end() > geometry.blocks || extent.len == 0
    {
        return None;
    }
    let mut out = Vec::new();
    let mut at = extent.start;
    while at < extent.end() {
        let (g, offset) = geometry.group_of(at);
        let len = (u64::from(geometry.group_blocks(g) - offset)).min(extent.end() - at) as u32;
        out.push((g, GroupExtent { start: offset, len }));
        at += u64::from(len);
    }
    Some(out)
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    /// The last pass of the ladder waits for a busy group instead of skipping it: with all
    /// free space in a group whose lock another thread holds, the allocation must wait and
    /// succeed, never report a false "no space".
    #[test]
    fn the_last_pass_waits_for_a_busy_group() {
        let geometry = Geometry {
            first_data_block: 0,
            blocks_per_group: 1024,
            blocks: 2048,
        };
        let alloc = BlockAllocator::empty(geometry, AllocatorConfig::default());
        // Group 0 full, so only group 1 has space.
        let full = alloc
            .allocate(AllocRequest {
                goal: Some(0),
                len: 1024,
                min_len: 1024,
                slot: 0,
                stream: 0,
                reserve: Reserve::None,
            })
            .unwrap();
        assert_eq!(full.start, 0);
        drop(alloc.lock_group(1, 0).unwrap());
        let held = alloc.groups[1].state.lock(&alloc.stats.group_locks);
        std::thread::scope(|s| {
            let waiter = s.spawn(|| {
                alloc.allocate(AllocRequest {
                    goal: Some(0),
                    len: 8,
                    min_len: 8,
                    slot: 1,
                    stream: 1,
                    reserve: Reserve::None,
                })
            });
            // Let the allocation reach the busy group before the lock is given up.
            while alloc.stats.group_locks.snapshot().try_skips == 0 {
                std::thread::yield_now();
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
            drop(held);
            let got = waiter.join().unwrap().unwrap();
            assert_eq!(geometry.group_of(got.start).0, 1);
        });
    }

    /// A request for more than is free gets what is free in one extent, from the main
    /// counter and then from the root reserve, not `min_len` blocks per request.
    #[test]
    fn a_request_larger_than_the_free_space_gets_all_of_it_at_once() {
        let geometry = Geometry {
            first_data_block: 0,
            blocks_per_group: 1024,
            blocks: 1024,
        };
        let alloc =
            BlockAllocator::empty(geometry, AllocatorConfig::default()).with_root_reserve(100);
        let ask = |reserve| {
            alloc.allocate(AllocRequest {
                goal: Some(0),
                len: 5000,
                min_len: 1,
                slot: 0,
                stream: 0,
                reserve,
            })
        };
        assert_eq!(ask(Reserve::None).unwrap().len, 924);
        assert_eq!(
            ask(Reserve::None),
            Err(AllocError::NoSpace),
            "the reserve is root's"
        );
        assert_eq!(ask(Reserve::Root).unwrap().len, 100);
        assert_eq!(ask(Reserve::Root), Err(AllocError::NoSpace));
        assert_eq!(alloc.stats.allocations.get(), 2);
    }
}

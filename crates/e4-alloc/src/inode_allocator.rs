//! The inode allocator: where a new inode goes, and how it is claimed (requirement S3).
//!
//! Placement ([`crate::inode_placement`]) follows ext4's `find_group_orlov` and
//! `find_group_other`, so that the images e4 writes are laid out as the kernel would lay them
//! out: directories spread across flex groups, files near their parent. It reads per-group
//! and per-flex-group counts published by the group-lock holders, never a lock, and searches
//! flex groups in O(log flex groups).
//!
//! The chosen group is only where the scan starts. Each group is first examined without its
//! lock (is any inode free, and from where to search), then locked with `try_lock`, so a
//! group busy with another creator is skipped for the next one; only the last pass waits,
//! which makes "no free inode" exact. Under the lock the claim is one find-and-set
//! ([`crate::inode_group`]). A limit counter admits a creation only if an inode is free.

use crate::block_allocator::{BlockAllocator, GroupLocking};
use crate::dirty_groups::DirtyGroups;
use crate::group_damage::{DamagedGroups, GroupDamage, Unfounded};
use crate::inode_flex_counts::{FlexInodeCounts, FlexInodeSummary};
use crate::inode_group::{InodeBitmap, InodeGroup, InodeGroupSnapshot, LockedInodeGroup};
use crate::inode_group_loading::{InodeBitmapSource, InodeGroupSummary};
use crate::instrumented_lock::InstrumentedMutex;
use crate::limit_counter::{LimitCounter, LimitCounterStats};
use crate::stats::{Counter, LockStats};

/// How inodes are laid out in groups.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InodeGeometry {
    pub groups: u32,
    pub inodes_per_group: u32,
    /// Groups per flex group: a power of two, 1 without `flex_bg`.
    pub groups_per_flex: u32,
    /// The first inode number not reserved for the filesystem (`s_first_ino`, usually 11).
    pub first_inode: u32,
}

impl InodeGeometry {
    pub(crate) fn flexes(&self) -> u32 {
        self.groups.div_ceil(self.groups_per_flex)
    }

    /// The group of inode `ino` and its index there; `None` for inode 0 and numbers past the
    /// last group.
    pub fn group_of(&self, ino: u32) -> Option<(u32, u32)> {
        let zero_based = ino.checked_sub(1)?;
        let group = zero_based.checked_div(self.inodes_per_group)?;
        (group < self.groups).then_some((group, zero_based % self.inodes_per_group))
    }

    /// The number of inode `index` of `group`; `None` outside the geometry or past the
    /// 32-bit inode numbers.
    pub fn inode_at(&self, group: u32, index: u32) -> Option<u32> {
        if group >= self.groups || index >= self.inodes_per_group {
            return None;
        }
        let ino = u64::from(group) * u64::from(self.inodes_per_group) + u64::from(index) + 1;
        u32::try_from(ino).ok()
    }

    /// The groups of flex group `flex` (64-bit arithmetic: `groups_per_flex` may be 2^31).
    pub(crate) fn flex_groups(&self, flex: u32) -> std::ops::Range<u32> {
        let start = u64::from(flex) * u64::from(self.groups_per_flex);
        let end = (start + u64::from(self.groups_per_flex)).min(u64::from(self.groups));
        start.min(end) as u32..end as u32
    }

    /// The geometry with a flex group no larger than the volume (e4-format accepts up to
    /// 2^31 groups per flex group: such a flex group is the whole volume).
    pub(crate) fn clamped(self) -> Self {
        InodeGeometry {
            groups_per_flex: self.groups_per_flex.clamp(1, self.groups.max(1)),
            ..self
        }
    }

    /// Leading inodes of `group` below the first non-reserved one (`s_first_ino`).
    pub(crate) fn reserved_in(&self, group: u32) -> u32 {
        u64::from(self.first_inode.saturating_sub(1))
            .saturating_sub(u64::from(group) * u64::from(self.inodes_per_group))
            .min(u64::from(self.inodes_per_group)) as u32
    }

    /// Inodes a group may hand out: those whose number fits in 32 bits.
    pub(crate) fn numbered_in(&self, group: u32) -> u32 {
        let first = u64::from(group) * u64::from(self.inodes_per_group);
        u64::from(u32::MAX)
            .saturating_sub(first)
            .min(u64::from(self.inodes_per_group)) as u32
    }
}

/// What kind of inode is wanted, which decides where it goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InodeKind {
    /// A directory whose parent is the root (or one marked top-level, `chattr +T`), spread
    /// over the volume starting from `name_hash` (the half-MD4 hash of its name, as ext4
    /// uses).
    TopDirectory { name_hash: u32 },
    /// Any other directory.
    Directory,
    /// A regular file, symlink or special file.
    Other,
}

impl InodeKind {
    fn is_directory(self) -> bool {
        self != InodeKind::Other
    }
}

#[derive(Debug, Clone, Copy)]
pub struct InodeRequest {
    /// The parent directory's inode number.
    pub parent: u32,
    /// The group where the parent's last child went (ext4's `i_last_alloc_group`), if known.
    pub parent_hint: Option<u32>,
    pub kind: InodeKind,
    /// Limit-counter slot of the caller (its thread or CPU).
    pub slot: usize,
}

/// A newly claimed inode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NewInode {
    pub ino: u32,
    /// Its group: the parent's next `parent_hint`.
    pub group: u32,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InodeError {
    /// No inode is free.
    NoSpace,
    /// A freed inode number is reserved, outside the volume, or not in use.
    BadFree(u32),
    /// Corruption: the free-inode count promised a free inode, but with every group locked
    /// every group's inode bitmap is full. `counted_free` is what the count still says
    /// (including the inode the failed creation was promised).
    CountMismatch { counted_free: u64 },
    /// A group's inode bitmap could not be loaded (the source's words: an I/O error, a bad
    /// checksum).
    BitmapUnreadable { group: u32, reason: String },
    /// A group's inode bitmap was found corrupt when it was loaded (its free inodes differ
    /// from its descriptor's count): no inode of the group is claimed or freed for the rest
    /// of this open ([`crate::group_damage`]).
    GroupCorrupt(GroupDamage),
}

impl std::fmt::Display for InodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            InodeError::NoSpace => write!(f, "no free inodes left on the filesystem"),
            InodeError::BadFree(ino) => write!(f, "inode {ino} is not allocated"),
            InodeError::CountMismatch { counted_free } => write!(
                f,
                "free inode count says {counted_free} free but every group's inode bitmap is \
                 full (count and bitmaps disagree)"
            ),
            InodeError::BitmapUnreadable { group, reason } => {
                write!(
                    f,
                    "inode bitmap of group {group} cannot be loaded: {reason}"
                )
            }
            InodeError::GroupCorrupt(damage) => write!(f, "{damage}"),
        }
    }
}

impl std::error::Error for InodeError {}

/// Counters for reports.
#[derive(Default)]
pub struct InodeAllocatorStats {
    /// Group locks taken to claim an inode (and to read a group for persisting).
    pub group_locks: LockStats,
    /// Group locks taken to free an inode.
    pub free_locks: LockStats,
    pub global_lock: LockStats,
    pub allocations: Counter,
    pub frees: Counter,
    /// Groups looked at without their lock while scanning.
    pub groups_examined: Counter,
    /// Inode-bitmap words read (under the group lock).
    pub words_scanned: Counter,
    /// Flex-group tree nodes Orlov's searches visited ([`crate::inode_placement`]).
    pub placement_nodes: Counter,
    /// Inodes whose free was skipped because their group is corrupt: they stay in use on
    /// disk (a leak e2fsck reclaims).
    pub leaked: Counter,
}

/// Scans over every group (try-lock passes and waiting passes) before a creation concludes
/// that the count and the bitmaps disagree. A scan that finds nothing while the count
/// promised an inode lost races to creators that claimed in front of it while frees landed
/// behind it; after this many, the last check locks every group and decides exactly.
const RACED_SCANS: usize = 4;

pub struct InodeAllocator {
    pub(crate) geometry: InodeGeometry,
    locking: GroupLocking,
    pub(crate) groups: Box<[InodeGroup]>,
    /// Per-flex-group sums of `groups`' counts, kept by the group-lock holders.
    pub(crate) flexes: FlexInodeCounts,
    pub(crate) free_inodes: LimitCounter,
    /// Directories on the volume, for Orlov's "directories per flex group" average.
    pub(crate) directories: Counter,
    global: InstrumentedMutex<()>,
    pub(crate) stats: InodeAllocatorStats,
    /// Where group bitmaps come from when first needed.
    pub(crate) source: Box<dyn InodeBitmapSource>,
    /// Groups changed since their last write-back snapshot.
    pub(crate) dirty: DirtyGroups,
    /// Groups whose bitmaps were refused at load, never used again.
    pub(crate) damaged: DamagedGroups,
    /// Free inodes of refused groups the counter still counts (promised at the time).
    pub(crate) unfounded: Unfounded,
}

impl InodeAllocator {
    /// An allocator over groups built from their on-disk inode bitmaps (`bitmap(group)`),
    /// all read now, and used-directory counts (`used_dirs(group)`). Inodes below
    /// `first_inode` are never handed out, whatever the bitmaps say. `locking` is
    /// [`GroupLocking::TrySkip`] in e4; the others exist for comparison. For a real volume,
    /// [`InodeAllocator::open`] reads each bitmap when it is first needed instead.
    pub fn new(
        geometry: InodeGeometry,
        locking: GroupLocking,
        counter_slots: usize,
        bitmap: impl Fn(u32) -> Vec<u8>,
        used_dirs: impl Fn(u32) -> u32,
    ) -> Self {
        let geometry = geometry.clamped();
        let groups = (0..geometry.groups)
            .map(|g| {
                let ipg = geometry.inodes_per_group;
                InodeGroup::loaded(
                    InodeBitmap::from_bitmap(
                        &bitmap(g),
                        ipg,
                        geometry.reserved_in(g),
                        geometry.numbered_in(g),
                        ipg,
                    ),
                    used_dirs(g),
                )
            })
            .collect();
        let never_read =
            |g: u32| Err::<Vec<u8>, _>(format!("group {g}'s bitmap was read at construction"));
        Self::from_groups(
            geometry,
            locking,
            counter_slots,
            groups,
            Box::new(never_read),
        )
    }

    /// The allocator over `groups` (of the clamped `geometry`): flex-group sums and counters
    /// from the groups' counts.
    pub(crate) fn from_groups(
        geometry: InodeGeometry,
        locking: GroupLocking,
        counter_slots: usize,
        groups: Box<[InodeGroup]>,
        source: Box<dyn InodeBitmapSource>,
    ) -> Self {
        let flexes = FlexInodeCounts::new((0..geometry.flexes()).map(|flex| {
            let members = &groups[geometry.flex_groups(flex).start as usize
                ..geometry.flex_groups(flex).end as usize];
            (
                members.iter().map(|g| u64::from(g.free())).sum(),
                members.iter().map(|g| u64::from(g.used_dirs())).sum(),
            )
        }));
        let free: u64 = groups.iter().map(|g| u64::from(g.free())).sum();
        let directories = Counter::default();
        directories.add(groups.iter().map(|g| u64::from(g.used_dirs())).sum());
        InodeAllocator {
            dirty: DirtyGroups::new(groups.len()),
            damaged: DamagedGroups::new(groups.len()),
            unfounded: Unfounded::default(),
            geometry,
            locking,
            groups,
            flexes,
            free_inodes: LimitCounter::new(free, counter_slots, 16),
            directories,
            global: InstrumentedMutex::new(()),
            stats: InodeAllocatorStats::default(),
            source,
        }
    }

    /// An allocator over a volume whose only inodes in use are the reserved ones: every
    /// group `INODE_UNINIT`, its bitmap computed when first needed.
    pub fn empty(geometry: InodeGeometry, locking: GroupLocking, counter_slots: usize) -> Self {
        let geo = geometry.clamped();
        let uninit = |g| InodeGroupSummary {
            free_inodes: geo.numbered_in(g).saturating_sub(geo.reserved_in(g)),
            used_dirs: 0,
            itable_unused: geo.inodes_per_group,
            uninit: true,
        };
        let never_read = |_: u32| Err::<Vec<u8>, _>("an empty volume has no bitmaps".into());
        Self::open(geometry, locking, counter_slots, uninit, never_read)
    }

    pub fn geometry(&self) -> &InodeGeometry {
        &self.geometry
    }

    pub fn stats(&self) -> &InodeAllocatorStats {
        &self.stats
    }

    /// The free-inode counter's statistics (its shared-pool operations among them).
    pub fn counter_stats(&self) -> &LimitCounterStats {
        self.free_inodes.stats()
    }

    /// Free inodes not promised to anyone (exact when quiescent).
    pub fn free_inodes(&self) -> u64 {
        self.free_inodes.sum()
    }

    /// Directories on the volume (exact when quiescent).
    pub fn directories(&self) -> u64 {
        self.directories.get()
    }

    /// Flex group `flex`'s sums of free inodes and directories (exact when quiescent); `None`
    /// past the last flex group.
    pub fn flex_summary(&self, flex: u32) -> Option<FlexInodeSummary> {
        self.flexes.summary(flex as usize)
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

    /// A group's bitmap and counts, for persisting (loads the bitmap if needed).
    pub fn group_snapshot(&self, group: u32) -> Result<InodeGroupSnapshot, InodeError> {
        let guard = self.groups[group as usize].lock(&self.stats.group_locks);
        Ok(self.loaded(group, guard, 0)?.snapshot())
    }

    /// How many of group `group`'s inodes `from..to` (indexes in the group) are in use,
    /// this transaction's claims included; `None` if the group's bitmap is not loaded (no
    /// inode of it was claimed or freed since the filesystem was opened).
    pub fn used_between(&self, group: u32, from: u32, to: u32) -> Option<u32> {
        let guard = self
            .groups
            .get(group as usize)?
            .lock(&self.stats.group_locks);
        guard.as_ref().map(|bitmap| bitmap.used_between(from, to))
    }

    /// Claims a free inode for `req`, placed next to `blocks`' free space as Orlov wants.
    pub fn allocate(
        &self,
        req: &InodeRequest,
        blocks: &BlockAllocator,
    ) -> Result<NewInode, InodeError> {
        // Admission: from here on an inode is free that no one else has been promised.
        if !self.free_inodes.try_reserve(req.slot, 1) {
            return Err(InodeError::NoSpace);
        }
        let _global = (self.locking == GroupLocking::Global)
            .then(|| self.global.lock(&self.stats.global_lock));
        let parent_group = self.parent_group(req.parent);
        let start = match req.kind {
            InodeKind::TopDirectory { name_hash } => self.orlov_top(name_hash, blocks),
            InodeKind::Directory => self.orlov(req.parent_hint.unwrap_or(parent_group), blocks),
            InodeKind::Other => self.near_parent(req, parent_group, blocks),
        }
        .unwrap_or(parent_group);
        // The reservation guarantees a free inode exists, so a scan that finds none lost a
        // race to creators that did find one (each miss is someone else's progress), or met
        // a bitmap it could not load; a bounded number of those, then a decision with the
        // bitmaps frozen.
        let directory = req.kind.is_directory();
        let mut load_error = None;
        let found = (0..RACED_SCANS).find_map(|_| self.claim_from(start, directory, req.slot));
        let claimed = match found {
            Some(new) => Ok(new),
            None => self.claim_with_every_group_locked(directory, req.slot, &mut load_error),
        };
        let new = match (claimed, load_error) {
            (Ok(new), _) => new,
            // The promised inode may be in the group that could not be read: give the
            // promise back and say why.
            (Err(_), Some(unreadable)) => {
                self.return_inodes(req.slot, 1);
                return Err(unreadable);
            }
            (Err(e), None) => return Err(e),
        };
        if directory {
            self.directories.add(1);
        }
        self.stats.allocations.add(1);
        Ok(new)
    }

    /// Locks the groups in ascending order, keeping each lock, and claims in the first with a
    /// free inode. A group once locked cannot change, so reaching the end holding every lock
    /// proves every bitmap full: the count that admitted this creation is corrupt. (Every
    /// other path holds at most one group lock, so the ordered acquisition cannot deadlock.)
    /// A group whose bitmap cannot be loaded is left out (it cannot change either), and the
    /// failure noted in `load_error`.
    fn claim_with_every_group_locked(
        &self,
        directory: bool,
        slot: usize,
        load_error: &mut Option<InodeError>,
    ) -> Result<NewInode, InodeError> {
        let mut held: Vec<LockedInodeGroup> = Vec::new();
        for g in 0..self.geometry.groups {
            let guard = self.groups[g as usize].lock(&self.stats.group_locks);
            let mut locked = match self.loaded(g, guard, slot) {
                Ok(locked) => locked,
                Err(e) => {
                    *load_error = Some(e);
                    continue;
                }
            };
            if let Some(new) = self.claim_locked(&mut locked, g, 0, directory) {
                return Ok(new);
            }
            held.push(locked);
        }
        Err(InodeError::CountMismatch {
            counted_free: self.free_inodes.sum() + 1,
        })
    }

    /// Loads the bitmap of inode `ino`'s group (inode bitmaps stay loaded once read), so
    /// that freeing `ino` later, when the caller's transaction commits, cannot fail for want
    /// of it: an operation that frees an inode checks this before it changes anything. A
    /// loaded group costs one load and no lock (an unlink makes this check); a corrupt one
    /// passes too, since the free will skip it ([`Self::free`]).
    pub fn load_group_of(&self, ino: u32, slot: usize) -> Result<(), InodeError> {
        let (g, _) = self
            .geometry
            .group_of(ino)
            .ok_or(InodeError::BadFree(ino))?;
        let group = &self.groups[g as usize];
        if group.has_bitmap() || self.damaged.contains(g) {
            return Ok(());
        }
        match self.loaded(g, group.lock(&self.stats.group_locks), slot) {
            Ok(_) | Err(InodeError::GroupCorrupt(_)) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Returns inode `ino` (a directory if `directory`) to the free inodes.
    pub fn free(&self, ino: u32, directory: bool, slot: usize) -> Result<(), InodeError> {
        let _global = (self.locking == GroupLocking::Global)
            .then(|| self.global.lock(&self.stats.global_lock));
        let bad = || InodeError::BadFree(ino);
        if ino < self.geometry.first_inode || ino > self.last_inode() {
            return Err(bad());
        }
        let (g, index) = self.geometry.group_of(ino).ok_or_else(bad)?;
        let guard = self.groups[g as usize].lock(&self.stats.free_locks);
        match self.loaded(g, guard, slot) {
            Ok(mut locked) => {
                locked
                    .release(index, directory, &self.flexes, self.flex_of(g) as usize)
                    .map_err(|_| bad())?;
                self.return_inodes(slot, 1);
            }
            // The inode stays in use on disk: a bitmap no one trusts is not made to look
            // healthier (as the kernel's `ext4_free_inode` skips a corrupt group).
            Err(InodeError::GroupCorrupt(_)) => self.stats.leaked.add(1),
            Err(e) => return Err(e),
        }
        if directory {
            self.directories.sub(1);
        }
        self.stats.frees.add(1);
        Ok(())
    }

    /// Returns `n` inodes to the free-inode counter, less what refused groups still owe it.
    fn return_inodes(&self, slot: usize, n: u64) {
        let rest = self.unfounded.pay(n);
        if rest > 0 {
            self.free_inodes.release(slot, rest);
        }
    }

    /// The highest inode number (inode numbers are 32 bits on disk).
    fn last_inode(&self) -> u32 {
        self.geometry
            .groups
            .saturating_mul(self.geometry.inodes_per_group)
    }

    fn parent_group(&self, parent: u32) -> u32 {
        self.geometry
            .group_of(parent.clamp(1, self.last_inode().max(1)))
            .map_or(0, |(g, _)| g)
    }

    pub(crate) fn flex_of(&self, group: u32) -> u32 {
        group / self.geometry.groups_per_flex
    }

    /// One scan over every group from `start`: try-locks on the first pass (groups that look
    /// full are not even locked), waiting locks on the last.
    fn claim_from(&self, start: u32, directory: bool, slot: usize) -> Option<NewInode> {
        let groups = self.geometry.groups;
        let passes: &[bool] = match self.locking {
            GroupLocking::TrySkip => &[false, true],
            GroupLocking::Blocking | GroupLocking::Global => &[true],
        };
        for &wait in passes {
            for g in (0..groups).map(|i| (start + i) % groups) {
                if let Some(new) = self.claim_in(g, wait, directory, slot) {
                    return Some(new);
                }
            }
        }
        None
    }

    /// Group `g`'s attempt: a group that looks full is not worth its lock before the last
    /// pass, and one that is still unloaded and counted full is not worth reading before
    /// the final check ([`Self::claim_with_every_group_locked`]). A bitmap that cannot be
    /// loaded is passed over here; the final check meets it again and reports it.
    fn claim_in(&self, g: u32, wait: bool, directory: bool, slot: usize) -> Option<NewInode> {
        let group = &self.groups[g as usize];
        self.stats.groups_examined.add(1);
        let hint = group.hint();
        let guard = if wait {
            group.lock(&self.stats.group_locks)
        } else {
            hint?;
            group.try_lock(&self.stats.group_locks)?
        };
        if guard.is_none() && group.free() == 0 {
            return None;
        }
        let mut locked = self.loaded(g, guard, slot).ok()?;
        self.claim_locked(&mut locked, g, hint.unwrap_or(0), directory)
    }

    /// Claims in group `g`, locked, from `hint`. Only numbered inodes are ever free
    /// (`InodeGroup::from_bitmap` forces the rest in use), so the number always exists.
    fn claim_locked(
        &self,
        locked: &mut LockedInodeGroup,
        g: u32,
        hint: u32,
        directory: bool,
    ) -> Option<NewInode> {
        let flex = self.flex_of(g) as usize;
        let index = locked.claim(
            hint,
            directory,
            &self.flexes,
            flex,
            &self.stats.words_scanned,
        )?;
        let ino = self.geometry.inode_at(g, index)?;
        Some(NewInode { ino, group: g })
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::block_allocator::{AllocatorConfig, Geometry};

    fn small_blocks() -> BlockAllocator {
        BlockAllocator::empty(
            Geometry {
                first_data_block: 0,
                blocks_per_group: 128,
                blocks: 512,
            },
            AllocatorConfig::default(),
        )
    }

    /// Counts that promise free inodes over bitmaps that are full: a bounded number of scans,
    /// then an error naming the disagreement, in every locking mode and for every kind (not a
    /// loop forever, not "no space").
    #[test]
    fn count_and_bitmap_disagreeing_is_an_error_not_a_spin() {
        let geo = InodeGeometry {
            groups: 4,
            inodes_per_group: 64,
            groups_per_flex: 2,
            first_inode: 11,
        };
        let blocks = small_blocks();
        for locking in [
            GroupLocking::TrySkip,
            GroupLocking::Blocking,
            GroupLocking::Global,
        ] {
            for kind in [
                InodeKind::Other,
                InodeKind::Directory,
                InodeKind::TopDirectory { name_hash: 7 },
            ] {
                let alloc = InodeAllocator::empty(geo, locking, 1);
                for g in 0..geo.groups {
                    let guard = alloc.groups[g as usize].lock(&LockStats::default());
                    alloc.loaded(g, guard, 0).unwrap().corrupt_all_used();
                }
                let free = alloc.free_inodes();
                let req = InodeRequest {
                    parent: 2,
                    parent_hint: None,
                    kind,
                    slot: 0,
                };
                let err = alloc.allocate(&req, &blocks).unwrap_err();
                assert_eq!(err, InodeError::CountMismatch { counted_free: free });
                assert!(err.to_string().contains("count and bitmaps disagree"));
                // Every group locked once per raced scan's pass (the try-lock pass too: the
                // counts say every group has free inodes) plus the final check.
                let passes = if locking == GroupLocking::TrySkip {
                    2
                } else {
                    1
                };
                let locks = alloc.stats.group_locks.snapshot().acquisitions;
                assert_eq!(locks, (passes * RACED_SCANS as u64 + 1) * 4, "{locking:?}");
            }
        }
    }

    /// A creator that finds its group's lock held goes to the next group of the flex group
    /// instead of waiting, and the skip is counted.
    #[test]
    fn busy_group_is_skipped_not_waited_for() {
        let geo = InodeGeometry {
            groups: 4,
            inodes_per_group: 64,
            groups_per_flex: 4,
            first_inode: 11,
        };
        let alloc = InodeAllocator::empty(geo, GroupLocking::TrySkip, 1);
        let blocks = small_blocks();
        let req = InodeRequest {
            parent: 2,
            parent_hint: None,
            kind: InodeKind::Other,
            slot: 0,
        };
        let held = alloc.groups[0].lock(&LockStats::default());
        let new = alloc.allocate(&req, &blocks).unwrap();
        assert_eq!(new.group, 1);
        assert_eq!(alloc.stats.group_locks.snapshot().try_skips, 1);
        drop(held);
        assert_eq!(alloc.allocate(&req, &blocks).unwrap().ino, 11);
    }
}

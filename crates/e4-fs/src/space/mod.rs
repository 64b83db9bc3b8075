//! Space on disk: e4-alloc's allocators loaded from the bitmaps and descriptors
//! ([`Space::load`]), and what they decide encoded back as bitmaps, descriptors and the
//! superblock, as bytes for write-back to write ([`bitmaps`], [`next_superblock`]). Also the
//! placement policy and the orphan list. Nothing here writes to the device.

pub(crate) mod bitmaps;
pub(crate) mod caller;
pub(crate) mod descriptors;
#[cfg(feature = "testing")]
pub(crate) mod faults;
pub(crate) mod fixed_metadata;
pub(crate) mod next_superblock;
pub(crate) mod orphans;
pub(crate) mod placement;

use e4_alloc::{
    AllocatorConfig, BlockAllocator, Geometry as AllocGeometry, GroupLocking, GroupSummary,
    InodeAllocator, InodeGeometry, InodeGroupSummary, Reserve,
};
use e4_format::bitmap::{BitmapBlock, BitmapKind, BitmapSeed};
use e4_format::features::RoCompatFeatures;
use e4_format::geometry::Geometry;
use e4_format::group_descriptor::{GroupDescriptor, BG_BLOCK_UNINIT, BG_INODE_UNINIT};
use e4_format::superblock::Superblock;
use e4_journal::PhysicalRun;

use crate::buffer::store::BlockStore;
use crate::error::{Error, Result, Shortage};
use crate::space::caller::Caller;
use crate::space::next_superblock::NextSuperblock;
use crate::space::orphans::Orphans;

/// The allocators and the on-disk summaries they feed, for a filesystem open for writing.
pub(crate) struct Space {
    pub blocks: BlockAllocator,
    pub inodes: InodeAllocator,
    /// The set-aside blocks this handle's writers may fall back to: [`Reserve::Root`] when
    /// [`OpenOptions::caller`](crate::OpenOptions::caller) may use the superuser's blocks,
    /// otherwise [`Reserve::None`].
    pub reserve: Reserve,
    /// The superblock as it will be written next.
    pub superblock: NextSuperblock,
    /// Inodes without links that are still open.
    pub orphans: Orphans,
    /// Allocation failures a test asked for.
    #[cfg(feature = "testing")]
    pub faults: faults::AllocationFaults,
}

/// Blocks held back from ordinary allocation so that punching holes or shifting extents
/// never fails for want of a tree block: 2 % of the filesystem or 4096 clusters, whichever is
/// smaller, and nothing without extents. This is the kernel's rule
/// (`ext4_calculate_resv_clusters`), so `statfs` and ENOSPC agree with it.
pub(crate) fn metadata_reserve(sb: &Superblock) -> u64 {
    if !sb
        .incompat()
        .contains(e4_format::features::IncompatFeatures::EXTENTS)
    {
        return 0;
    }
    let ratio = u64::from(sb.cluster_ratio());
    (sb.blocks_count() / ratio / 50).min(4096) * ratio
}

impl Space {
    /// Builds the allocators from the descriptors (bitmaps load lazily per group, each
    /// checked against its checksum as it loads). `journal` is where the journal's blocks
    /// are: with the fixed metadata, the system zone no file may map, free or be given.
    /// `slots` is the number of per-thread slots of the limit counters.
    pub(crate) fn load(
        store: &BlockStore,
        sb: &Superblock,
        geometry: &Geometry,
        descriptors: &[GroupDescriptor],
        journal: &[PhysicalRun],
        caller: &Caller,
        slots: usize,
    ) -> Result<Self> {
        if sb.cluster_ratio() > 1 {
            return Err(Error::NotSupported(
                "writing bigalloc filesystems (clusters larger than a block)".into(),
            ));
        }
        // The orphan list is cleaned up once the filesystem is open (`ops/orphan_cleanup.rs`);
        // the orphan file is not read.
        if sb.ro_compat().contains(RoCompatFeatures::ORPHAN_PRESENT) {
            return Err(Error::ReadOnly(
                "the orphan file has inodes to clean up; run e2fsck first".into(),
            ));
        }
        let csum = sb.has_metadata_csum() || sb.ro_compat().contains(RoCompatFeatures::GDT_CSUM);
        let alloc_geometry = AllocGeometry {
            first_data_block: geometry.first_data_block(),
            blocks_per_group: geometry.blocks_per_group(),
            blocks: geometry.blocks(),
        };
        let config = AllocatorConfig {
            counter_slots: slots,
            ..AllocatorConfig::default()
        };
        let summary = |g: u32| {
            let d = &descriptors[g as usize];
            GroupSummary {
                free: d.free_blocks_count(),
                uninit: csum && d.flags & BG_BLOCK_UNINIT != 0,
            }
        };
        let block_source = bitmap_source(store, sb, descriptors, BitmapKind::Block, None);
        let blocks = BlockAllocator::open(
            alloc_geometry,
            config,
            summary,
            &system_zone(geometry, descriptors, journal),
            block_source,
        )
        .map_err(Error::from_block_allocation)?
        .with_root_reserve(sb.reserved_blocks_count())
        .with_metadata_reserve(metadata_reserve(sb))
        .with_flex_groups(sb.groups_per_flex());
        let inode_geometry = InodeGeometry {
            groups: geometry.groups(),
            inodes_per_group: geometry.inodes_per_group(),
            groups_per_flex: sb.groups_per_flex(),
            first_inode: sb.first_ino(),
        };
        // An inode bitmap block holds one bit per inode of the group; the rest is padding.
        let inode_bytes = geometry.inodes_per_group().div_ceil(8) as usize;
        let inode_source =
            bitmap_source(store, sb, descriptors, BitmapKind::Inode, Some(inode_bytes));
        let inodes = InodeAllocator::open(
            inode_geometry,
            GroupLocking::TrySkip,
            slots,
            |g| {
                let d = &descriptors[g as usize];
                // The uninit flags and itable_unused mean something only with checksums.
                InodeGroupSummary {
                    free_inodes: d.free_inodes_count(),
                    used_dirs: d.used_dirs_count(),
                    itable_unused: if csum { d.itable_unused() } else { 0 },
                    uninit: csum && d.flags & BG_INODE_UNINIT != 0,
                }
            },
            inode_source,
        );
        Ok(Space {
            blocks,
            inodes,
            reserve: if caller.may_use_reserved_blocks(sb) {
                Reserve::Root
            } else {
                Reserve::None
            },
            superblock: NextSuperblock::mounted(sb, descriptors),
            orphans: Orphans::default(),
            #[cfg(feature = "testing")]
            faults: faults::AllocationFaults::new(),
        })
    }

    /// Asked before every allocation of blocks or an inode: fails only when a
    /// fault-injection test makes it (nothing at all without the `testing` feature).
    pub(crate) fn may_allocate(&self, what: Shortage) -> Result<()> {
        #[cfg(feature = "testing")]
        self.faults.check(what)?;
        #[cfg(not(feature = "testing"))]
        let _ = what;
        Ok(())
    }

    /// Whether this handle's writes may use the superuser's reserve (e4-alloc's
    /// `allocate_append_as` and `allocate_small_file_as` take it as a flag).
    pub(crate) fn may_use_root_reserve(&self) -> bool {
        self.reserve >= Reserve::Root
    }
}

/// Every group's fixed metadata (superblock and descriptor copies, bitmaps, inode table)
/// and the journal's blocks: blocks the allocator must never hand out or free, whatever a
/// bitmap says, and no file's mapping may name (the kernel's system zone, with the journal
/// inode's blocks as `ext4_protect_reserved_inode` adds them).
fn system_zone(
    geometry: &Geometry,
    descriptors: &[GroupDescriptor],
    journal: &[PhysicalRun],
) -> Vec<e4_alloc::Extent> {
    let mut zone = Vec::new();
    for run in journal {
        // Runs of at most 2^32 - 1 blocks each (a journal has at most 2^32 blocks).
        let mut start = run.physical;
        let end = run.physical + run.len;
        while start < end {
            let len = (end - start).min(u64::from(u32::MAX)) as u32;
            zone.push(e4_alloc::Extent { start, len });
            start += u64::from(len);
        }
    }
    for (g, desc) in descriptors.iter().enumerate() {
        let base = geometry.base_metadata(g as u32);
        for (start, len) in [
            (base.start, base.len),
            (desc.block_bitmap(), 1),
            (desc.inode_bitmap(), 1),
            (desc.inode_table(), geometry.inode_table_blocks()),
        ] {
            if len > 0 {
                zone.push(e4_alloc::Extent {
                    start,
                    len: len as u32,
                });
            }
        }
    }
    zone
}

/// How an allocator loads a group's bitmap of `kind` when it first needs it: the whole
/// block read from the device (the allocator keeps its own copy; the cache never holds
/// it), its checksum verified against the descriptor's, and cut to `keep` bytes when given.
/// The one loader for block and inode bitmaps.
fn bitmap_source(
    store: &BlockStore,
    sb: &Superblock,
    descriptors: &[GroupDescriptor],
    kind: BitmapKind,
    keep: Option<usize>,
) -> impl Fn(u32) -> std::result::Result<Vec<u8>, String> + Send + Sync + 'static {
    let device = store.device();
    let block_size = store.block_size() as usize;
    let seed = BitmapSeed::for_superblock(sb, kind);
    let descriptors = descriptors.to_vec();
    move |g: u32| {
        let desc = &descriptors[g as usize];
        let nr = match kind {
            BitmapKind::Block => desc.block_bitmap(),
            BitmapKind::Inode => desc.inode_bitmap(),
        };
        let mut bitmap = vec![0u8; block_size];
        device
            .read_exact_at(&mut bitmap, nr * block_size as u64)
            .map_err(|e| format!("read of block {nr}: {e}"))?;
        if let Some(seed) = seed {
            BitmapBlock::of(desc, kind, g)
                .verify(&bitmap, seed)
                .map_err(|e| e.to_string())?;
        }
        if let Some(keep) = keep {
            bitmap.truncate(keep);
        }
        Ok(bitmap)
    }
}

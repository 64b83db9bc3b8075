//! The state every pass shares: the image, the decoded superblock and descriptors, the
//! one block-ownership bitmap, the per-inode arrays and the problem list. Passes borrow it
//! immutably and from many threads; everything they change is atomic.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use e4_format::features::{IncompatFeatures, RoCompatFeatures};
use e4_format::geometry::Geometry;
use e4_format::group_descriptor::{GroupDescriptor, BG_BLOCK_UNINIT, BG_INODE_UNINIT};
use e4_format::inode::{Inode, InodeSeed};
use e4_format::superblock::Superblock;
use e4_format::table::TableTooLarge;
use e4_format::{FormatError, MetadataBlock};

use crate::report::problem::{Location, Problem, ProblemCode};
use crate::state::atomic_bitmap::AtomicBitmap;
use crate::state::ea_inode_refs::EaInodes;
use crate::state::encryption_policies::EncryptionPolicies;
use crate::state::image::Image;
use crate::state::inode_state::InodeStates;
use crate::state::problem_list::{self, ProblemList};
use crate::state::quota_usage::QuotaTotals;

/// Shared checker state.
#[derive(Debug)]
pub struct Context {
    /// The image, read with positional reads.
    pub image: Image,
    /// The primary superblock as decoded (even if its checksum is wrong).
    pub sb: Superblock,
    /// Layout arithmetic.
    pub geo: Geometry,
    /// Every group's descriptor as decoded.
    pub groups: Vec<GroupDescriptor>,
    /// Whether each group's descriptor checksum verified (all true without group
    /// checksums).
    descriptor_checksums_ok: Vec<bool>,
    /// The metadata_csum seed, when the filesystem has metadata checksums.
    pub csum_seed: Option<u32>,
    /// log2 of the blocks per cluster: 0 without bigalloc. The three maps below have a bit
    /// per cluster, as e2fsck's `block_found_map`, `block_dup_map` and
    /// `block_metadata_map` have (under bigalloc a block is owned with its whole cluster).
    pub cluster_bits: u32,
    /// Every cluster found in use: metadata, then each inode's blocks (pass 1).
    pub block_found: AtomicBitmap,
    /// Clusters claimed a second time (by an inode after metadata or another inode).
    pub block_dup: AtomicBitmap,
    /// Clusters of fixed metadata: superblocks, descriptors, bitmaps, inode tables.
    pub metadata: AtomicBitmap,
    /// Per-inode state.
    pub inodes: InodeStates,
    /// Xattr values held in inodes: the entries naming each, for pass 4.
    pub ea_inodes: EaInodes,
    /// Quota usage found in pass 1, per user, group and project.
    pub quota: QuotaTotals,
    /// The policies of encrypted inodes, found in pass 1 for pass 2.
    pub encryption: EncryptionPolicies,
    /// Inodes pass 1 found failing their checksum (not blank ones). Pass 1 forgives
    /// them; pass 1B's scan and pass 2's `process_bad_inode` read them again, and stop
    /// e2fsck. Damage only, so a set under one lock.
    pub checksum_failed: Mutex<BTreeSet<u32>>,
    /// Inodes pass 1 marks bad (e2fsck's `inode_bad_map`: a bad mode or special file,
    /// fields that must be zero, a bad xattr block): pass 2 hands each entry naming one
    /// to `process_bad_inode`.
    pub bad_inodes: Mutex<BTreeSet<u32>>,
    /// Problems found, in no particular order until [`Context::take_problems`] sorts them.
    problems: Mutex<ProblemList>,
    /// Problems dropped because the list could not grow ([`ProblemList::push`]): the check
    /// ends with [`Context::problems_fit`]'s error rather than an abort.
    problems_lost: AtomicU64,
}

/// The size of the original ext2 inode, the part libext2fs looks at for a blank inode.
pub const BASE_INODE_SIZE: usize = 128;

/// Whether inode record `raw` was never written: libext2fs calls its checksum valid when
/// the 128-byte base inode is all zeros (`ext2fs_inode_csum_verify`), in pass 1's scan and
/// in every read of an inode on its own.
pub fn is_blank_inode(raw: &[u8]) -> bool {
    raw.iter().take(BASE_INODE_SIZE).all(|&b| b == 0)
}

/// Decodes inode `ino` from its record `raw` as libext2fs reads one, without looking at
/// `i_extra_isize`: when the extra size does not fit the record, its base fields alone,
/// with the decoding error beside them (pass 1 reports it as `PR_1_EXTRA_ISIZE`). An
/// error only when not even the base decodes.
pub fn decode_inode(raw: &[u8], ino: u32) -> Result<(Inode, Option<FormatError>), FormatError> {
    match Inode::decode(raw, ino) {
        Ok(inode) => Ok((inode, None)),
        Err(e) => match raw
            .get(..BASE_INODE_SIZE)
            .map(|base| Inode::decode(base, ino))
        {
            Some(Ok(inode)) => Ok((inode, Some(e))),
            _ => Err(e),
        },
    }
}

impl Context {
    /// Shared state for a filesystem whose superblock and descriptors have been read; its
    /// tables are sized by the superblock's counts, so reserved fallibly.
    pub fn new(
        image: Image,
        sb: Superblock,
        groups: Vec<GroupDescriptor>,
        descriptor_checksums_ok: Vec<bool>,
        problems: ProblemList,
    ) -> Result<Self, TableTooLarge> {
        let geo = Geometry::new(&sb);
        let cluster_bits = sb.cluster_ratio().trailing_zeros();
        let clusters = geo.blocks().div_ceil(1 << cluster_bits);
        let csum_seed = sb.has_metadata_csum().then(|| sb.csum_seed());
        Ok(Context {
            image,
            inodes: InodeStates::new(sb.inodes_count)?,
            ea_inodes: EaInodes::default(),
            quota: QuotaTotals::default(),
            encryption: EncryptionPolicies::default(),
            checksum_failed: Mutex::default(),
            bad_inodes: Mutex::default(),
            sb,
            geo,
            groups,
            descriptor_checksums_ok,
            csum_seed,
            cluster_bits,
            block_found: AtomicBitmap::new(clusters, "the clusters in use")?,
            block_dup: AtomicBitmap::new(clusters, "the clusters claimed twice")?,
            metadata: AtomicBitmap::new(clusters, "the metadata clusters")?,
            problems: Mutex::new(problems),
            problems_lost: AtomicU64::new(0),
        })
    }

    /// Records a problem.
    pub fn report(&self, code: ProblemCode, location: Location, message: impl Into<String>) {
        let problem = Problem::new(code, location, message);
        // A poisoned lock means another thread panicked: keep collecting regardless.
        let mut problems = self.problems.lock().unwrap_or_else(|e| e.into_inner());
        if problems.push(problem).is_err() {
            self.problems_lost.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// An error if any problem was dropped for want of memory: the report would be
    /// incomplete.
    pub fn problems_fit(&self) -> Result<(), TableTooLarge> {
        let lost = self.problems_lost.load(Ordering::Relaxed);
        if lost == 0 {
            return Ok(());
        }
        let kept = self.problems.lock().map_or(0, |p| p.len() as u64);
        Err(problem_list::too_large(kept + lost))
    }

    /// The problems found, sorted into the order that does not depend on threads. The
    /// sort key holds every field of a problem, so problems with equal keys are equal and
    /// the deduplicated list is the same whichever of them a sort puts first: an unstable
    /// sort gives it without a stable sort's buffer of half the list.
    pub fn take_problems(&self) -> Result<Vec<Problem>, TableTooLarge> {
        let list = std::mem::take(&mut *self.problems.lock().unwrap_or_else(|e| e.into_inner()));
        let mut problems = list.into_vec()?;
        problems.sort_unstable_by(|a, b| a.sort_key().cmp(&b.sort_key()));
        problems.dedup();
        Ok(problems)
    }

    /// Whether no problem recorded so far leaves the filesystem in error.
    pub fn has_no_errors(&self) -> bool {
        self.problems
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .all(|p| !p.code.is_error())
    }

    /// Bytes held by the shared arrays.
    pub fn state_bytes(&self) -> u64 {
        (self.block_found.memory_bytes()
            + self.block_dup.memory_bytes()
            + self.metadata.memory_bytes()
            + self.inodes.memory_bytes()) as u64
    }

    /// Reads inode `ino` on its own (not through a pass 1 scan), checking its checksum, as
    /// libext2fs's `ext2fs_read_inode` does for the checks before pass 1: an inode whose
    /// checksum fails is an error, not an inode.
    pub fn read_inode(&self, ino: u32) -> Result<Inode, ReadInodeError> {
        let unreadable = |why: &str| ReadInodeError::Unreadable(why.to_string());
        let geo = &self.geo;
        let location = geo
            .inode_location(ino)
            .ok_or_else(|| unreadable("it is past the inode count"))?;
        let table = self
            .groups
            .get(location.group as usize)
            .ok_or_else(|| unreadable("it is past the last group"))?
            .inode_table();
        let offset = table
            .checked_mul(u64::from(geo.block_size()))
            .ok_or_else(|| unreadable("its inode table is past any device"))?
            + location.table_offset;
        let mut raw = vec![0u8; self.sb.inode_size() as usize];
        self.image
            .read_at(offset, &mut raw)
            .map_err(|e| unreadable(&e.to_string()))?;
        // A blank inode's checksum is not looked at (found by random flips: an xattr
        // entry naming a value inode never written).
        let seed = self.csum_seed.filter(|_| !is_blank_inode(&raw));
        // A bad `i_extra_isize` does not stop libext2fs's read (found by random flips in
        // an ext3 resize inode: e2fsck checked it on, e4 called it unreadable).
        let (inode, _) = decode_inode(&raw, ino).map_err(|e| unreadable(&e.to_string()))?;
        if let Some(fs_seed) = seed {
            Inode::verify(
                &raw,
                InodeSeed { fs_seed, ino },
                e4_format::Location::Inode(ino),
            )
            .map_err(|e| match e {
                FormatError::Checksum { .. } => ReadInodeError::Checksum(e),
                e => unreadable(&e.to_string()),
            })?;
        }
        Ok(inode)
    }

    /// Block size in bytes.
    pub fn block_size(&self) -> u32 {
        self.geo.block_size()
    }

    /// Blocks per cluster: 1 without bigalloc.
    pub fn cluster_ratio(&self) -> u64 {
        1 << self.cluster_bits
    }

    /// The cluster holding `block` (libext2fs's `EXT2FS_B2C`).
    pub fn cluster_of(&self, block: u64) -> u64 {
        block >> self.cluster_bits
    }

    /// Group `group`'s first cluster and how many it has (the last group may be short),
    /// the bits of its block bitmap that mean something.
    pub fn group_clusters(&self, group: u32) -> (u64, u64) {
        let first = self.cluster_of(self.geo.group_first_block(group));
        (
            first,
            self.geo.group_blocks(group).div_ceil(self.cluster_ratio()),
        )
    }

    /// Whether group descriptors carry checksums and the uninit flags mean something
    /// (`gdt_csum` or `metadata_csum`).
    pub fn has_group_csum(&self) -> bool {
        self.sb.has_metadata_csum() || self.sb.ro_compat().contains(RoCompatFeatures::GDT_CSUM)
    }

    /// The MMP block, when the feature is on and `s_mmp_block` lies inside the filesystem
    /// past its first data block (where `ext2fs_mmp_read` accepts it and pass 1 marks it).
    pub fn mmp_block(&self) -> Option<u64> {
        let block = self.sb.mmp_block;
        (self.sb.incompat().contains(IncompatFeatures::MMP)
            && block > self.geo.first_data_block()
            && block < self.geo.blocks())
        .then_some(block)
    }

    /// Whether `block` may hold data: inside the filesystem and not before the first data
    /// block (e2fsck's test for an illegal block number).
    pub fn is_valid_block(&self, block: u64) -> bool {
        block >= self.geo.first_data_block() && block < self.geo.blocks()
    }

    /// Whether the range `start..start + count` lies inside the filesystem.
    pub fn is_valid_range(&self, start: u64, count: u64) -> bool {
        self.is_valid_block(start)
            && start
                .checked_add(count)
                .is_some_and(|end| end <= self.geo.blocks())
    }

    /// Whether group `group`'s inode table was never initialised (INODE_UNINIT with
    /// group checksums): its inodes are all free and are not scanned (libext2fs's inode
    /// scan trusts the flag whatever the descriptor's checksum).
    pub fn inode_uninit(&self, group: u32) -> bool {
        self.has_group_csum()
            && self
                .groups
                .get(group as usize)
                .is_some_and(|g| g.flags & BG_INODE_UNINIT != 0)
    }

    /// Whether group `group`'s block bitmap is flagged as never written (BLOCK_UNINIT
    /// with group checksums).
    pub fn block_uninit(&self, group: u32) -> bool {
        self.has_group_csum()
            && self
                .groups
                .get(group as usize)
                .is_some_and(|g| g.flags & BG_BLOCK_UNINIT != 0)
    }

    /// Whether pass 5 takes group `group`'s block bitmap as its own metadata only instead
    /// of reading it: BLOCK_UNINIT, honoured (as libext2fs's `read_bitmaps` honours it)
    /// only when the descriptor's checksum verifies.
    pub fn block_bitmap_uninit(&self, group: u32) -> bool {
        self.block_uninit(group) && self.descriptor_checksum_ok(group)
    }

    /// Whether group `group`'s inode bitmap reads as all free without being read: as
    /// [`Self::block_bitmap_uninit`], for INODE_UNINIT.
    pub fn inode_bitmap_uninit(&self, group: u32) -> bool {
        self.inode_uninit(group) && self.descriptor_checksum_ok(group)
    }

    fn descriptor_checksum_ok(&self, group: u32) -> bool {
        self.descriptor_checksums_ok
            .get(group as usize)
            .copied()
            .unwrap_or(true)
    }

    /// How many inodes at the start of `group`'s table may be in use: all of them, less
    /// `bg_itable_unused` when group checksums make that count trustworthy.
    pub fn inodes_to_scan(&self, group: u32) -> u32 {
        let ipg = self.geo.inodes_per_group();
        if self.inode_uninit(group) {
            return 0;
        }
        let unused = if self.has_group_csum() {
            self.groups
                .get(group as usize)
                .map_or(0, |g| g.itable_unused())
        } else {
            0
        };
        ipg.saturating_sub(unused)
    }
}

/// Why [`Context::read_inode`] gave no inode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReadInodeError {
    /// The record's checksum does not match (libext2fs's `EXT2_ET_INODE_CSUM_INVALID`).
    Checksum(FormatError),
    /// It lies past the inode tables, cannot be read, or does not decode.
    Unreadable(String),
}

impl std::fmt::Display for ReadInodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReadInodeError::Checksum(e) => e.fmt(f),
            ReadInodeError::Unreadable(why) => f.write_str(why),
        }
    }
}

//! Before pass 1 (e2fsck's `check_super_block`): read and check the superblock, then every
//! group descriptor (placement of bitmaps and inode tables, flags, counts, checksums) and
//! the summary counters. What makes the image impossible to check is an [`FsckError`];
//! everything else is a problem and the check goes on.

use std::path::Path;

use rayon::prelude::*;

use e4_format::casefold::ENCODING_UTF8_12_1;
use e4_format::features::READABLE_INCOMPAT;
use e4_format::features::{feature_names, FeatureKind, IncompatFeatures};
use e4_format::geometry::Geometry;
use e4_format::group_descriptor::{
    GroupChecksum, GroupDescriptor, GroupSeed, BG_BLOCK_UNINIT, BG_INODE_UNINIT,
};
use e4_format::superblock::{Superblock, SUPERBLOCK_OFFSET};
use e4_format::table::{try_table, TableTooLarge};
use e4_format::{FormatError, MetadataBlock};

use crate::report::phase_times::PhaseClock;
use crate::report::problem::{Location, Problem, ProblemCode};
use crate::state::context::Context;
use crate::state::image::Image;
use crate::state::problem_list::ProblemList;

/// INCOMPAT features the checker understands: what e4 reads, encrypt, whose names are
/// opaque bytes but every structure around them is checked, and casefold (the engine
/// refuses both: it cannot look names up in them).
const CHECKABLE_INCOMPAT: IncompatFeatures = READABLE_INCOMPAT
    .union(IncompatFeatures::ENCRYPT)
    .union(IncompatFeatures::CASEFOLD);

/// Why an image cannot be checked at all (e2fsck's exit status 8).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FsckError {
    /// The image could not be opened or read.
    Io(String),
    /// The superblock does not describe an ext2/3/4 filesystem.
    NotExt(String),
    /// The filesystem uses a feature the checker does not understand.
    Unsupported(String),
    /// A table sized by the superblock's claims does not fit in memory.
    TooLarge(TableTooLarge),
}

impl From<TableTooLarge> for FsckError {
    fn from(e: TableTooLarge) -> Self {
        FsckError::TooLarge(e)
    }
}

impl std::fmt::Display for FsckError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FsckError::Io(m) => write!(f, "cannot read the image: {m}"),
            FsckError::NotExt(m) => write!(f, "not an ext2/3/4 filesystem: {m}"),
            FsckError::Unsupported(m) => write!(f, "unsupported filesystem: {m}"),
            FsckError::TooLarge(e) => write!(f, "cannot check: {e}"),
        }
    }
}

impl std::error::Error for FsckError {}

/// Opens `path`, checks the superblock and descriptors, and returns the shared state with
/// their problems recorded.
pub fn open_and_check(path: &Path, clock: &mut PhaseClock) -> Result<Context, FsckError> {
    // The caller names the image (the CLI's line starts with it), as for every other error.
    let image = Image::open(path).map_err(|e| FsckError::Io(e.to_string()))?;
    let mut problems = ProblemList::default();
    let (sb, from_backup) = read_superblock(&image, &mut problems)?;
    let unknown = sb.incompat().bits() & !CHECKABLE_INCOMPAT.bits();
    if unknown != 0 {
        return Err(FsckError::Unsupported(format!(
            "incompatible features {}",
            feature_names(FeatureKind::Incompat, unknown).join(", ")
        )));
    }
    if sb.incompat().contains(IncompatFeatures::CASEFOLD) && sb.encoding != ENCODING_UTF8_12_1 {
        problems.push(Problem::new(
            ProblemCode::E2FSCK_UNSUPPORTED_ENCODING,
            Location::Superblock,
            format!("unsupported encoding: {}", sb.encoding),
        ))?;
    }
    let geo = Geometry::new(&sb);
    let device_blocks = image.len() / u64::from(geo.block_size());
    // e2fsck's PR_0_FS_SIZE_WRONG asks whether to abort; there is nothing past the end
    // to check, and per-block state sized from a corrupt count could exhaust memory, so
    // the check stops here.
    if device_blocks < geo.blocks() {
        return Err(FsckError::NotExt(format!(
            "the superblock says {} blocks, the device holds {device_blocks}",
            geo.blocks()
        )));
    }
    let mut desc_problems = ProblemList::default();
    let (mut groups, mut checksums_ok) = read_descriptors(
        &image,
        &sb,
        &descriptor_geometry(&sb, from_backup),
        from_backup,
        &mut desc_problems,
    )?;
    let mut sb = sb;
    // Misplaced bitmaps or tables make e2fsck distrust the whole table
    // (`ext2fs_check_desc`) and start again from the backup superblock and descriptors.
    let look_bad =
        (0..geo.groups()).any(|g| misplaced(&sb, &geo, g, &groups[g as usize]).contains(&true));
    if look_bad && !from_backup {
        if let Some((backup, offset)) = read_backup_superblock(&image) {
            problems.push(Problem::new(
                ProblemCode::PR_0_CHECK_DESC_FAILED,
                Location::Superblock,
                format!("group descriptors look bad; using the backup superblock at byte {offset} and its descriptors"),
            ))?;
            sb = backup;
            desc_problems = ProblemList::default();
            (groups, checksums_ok) = read_descriptors(
                &image,
                &sb,
                &descriptor_geometry(&sb, true),
                true,
                &mut desc_problems,
            )?;
        }
    }
    problems.append(desc_problems)?;
    clock.lap("read superblock and descriptors");
    let ctx = Context::new(image, sb, groups, checksums_ok, problems)?;
    clock.lap("allocate state");
    crate::pass0::mmp::check(&ctx);
    check_descriptors(&ctx);
    crate::pass0::resize_inode::check(&ctx);
    check_journal_state(&ctx);
    crate::pass0::journal::check(&ctx);
    ctx.problems_fit()?;
    clock.lap("check descriptors and journal");
    Ok(ctx)
}

/// Reads the primary superblock. One that does not validate or whose checksum is wrong is
/// replaced, as e2fsck does, by the first valid backup in group 1 for any block size (its
/// usual place), and reported; the second value says a backup is used.
fn read_superblock(
    image: &Image,
    problems: &mut ProblemList,
) -> Result<(Superblock, bool), FsckError> {
    let mut raw = [0u8; 1024];
    image
        .read_at(SUPERBLOCK_OFFSET, &mut raw)
        .map_err(|e| FsckError::NotExt(format!("reading the superblock: {e}")))?;
    // e2fsck turns to a backup whenever the primary does not open, a wrong checksum
    // included. Without a valid backup it gives up (exit 8), even when only the checksum
    // is wrong: e2fsck 1.47.0 -n on a one-group image whose superblock checksum fails
    // prints "The superblock could not be read" and exits 8, so this does too.
    let primary_error = match trusted_superblock(&raw, e4_format::Location::Superblock) {
        Ok(sb) => return Ok((sb, false)),
        Err(FormatError::Incompatible(m)) => return Err(FsckError::Unsupported(m)),
        Err(e) => e,
    };
    let Some((backup, offset)) = read_backup_superblock(image) else {
        return Err(FsckError::NotExt(format!(
            "{primary_error}, and no valid backup superblock was found"
        )));
    };
    problems.push(Problem::new(
        ProblemCode::PR_0_SB_CORRUPT,
        Location::Superblock,
        format!(
            "primary superblock is invalid ({primary_error}); using the backup at byte {offset}"
        ),
    ))?;
    Ok((backup, true))
}

/// Decodes a superblock and verifies its checksum: one whose checksum is wrong is not used,
/// as e2fsck does not use it (it turns to a backup).
fn trusted_superblock(raw: &[u8], loc: e4_format::Location) -> Result<Superblock, FormatError> {
    let sb = Superblock::decode_checked(raw)?;
    Superblock::verify(raw, (), loc)?;
    Ok(sb)
}

/// Reads every group descriptor; a descriptor whose checksum is wrong is reported and used.
/// The layout to find the descriptor table with: after the primary superblock, or after
/// the backup in group 1 when that is the superblock in use.
fn descriptor_geometry(sb: &Superblock, from_backup: bool) -> Geometry {
    let primary = Geometry::new(sb);
    if from_backup {
        let backup_block = primary.group_first_block(1);
        Geometry::with_descriptors_after(sb, backup_block)
    } else {
        primary
    }
}

/// The first valid backup superblock in group 1, trying each block size (e2fsck's
/// `get_backup_sb` guesses), and its byte offset.
fn read_backup_superblock(image: &Image) -> Option<(Superblock, u64)> {
    let mut raw = [0u8; 1024];
    (0..=6u32).find_map(|log| {
        let block_size = 1024u64 << log;
        // Group 1 starts after 8 * block_size blocks (one bitmap block's worth), plus
        // the boot block with 1 KiB blocks.
        let first_data_block = u64::from(log == 0);
        let offset = (8 * block_size + first_data_block) * block_size;
        image.read_at(offset, &mut raw).ok()?;
        let backup =
            trusted_superblock(&raw, e4_format::Location::Block(offset / block_size)).ok()?;
        (u64::from(backup.block_size()) == block_size).then_some((backup, offset))
    })
}

/// Descriptor blocks parsed in parallel at a time: 4 Ki groups with 64-byte descriptors
/// and 4 KiB blocks, about half a MiB of parsed results beside the tables. Batches of 64 Ki
/// groups held a descriptor and a problem for each group at once, beside the growing
/// problem list: on an image claiming 2^16 groups of garbage descriptors that was 3.5 MiB
/// of the check's peak (`e4/tests/bounded.rs`). A batch is still thousands of descriptors
/// to share among the threads.
const DESCRIPTOR_BLOCKS_PER_BATCH: u32 = 1 << 6;

/// `geo` says where the table is: after the primary superblock, or after the backup in
/// group 1 (`Geometry::with_descriptors_after`); with `from_backup` the uninit flags are
/// cleared as libext2fs clears them. Returns the descriptors and, for each, whether its
/// checksum verified.
fn read_descriptors(
    image: &Image,
    sb: &Superblock,
    geo: &Geometry,
    from_backup: bool,
    problems: &mut ProblemList,
) -> Result<(Vec<GroupDescriptor>, Vec<bool>), FsckError> {
    let checksum = GroupChecksum::for_superblock(sb);
    let desc_size = sb.desc_size() as usize;
    let claimed = u64::from(geo.groups());
    let table = "the group descriptors";
    let mut groups = try_table(claimed, table, e4_format::Location::Superblock)?;
    let mut checksums_ok = try_table(claimed, table, e4_format::Location::Superblock)?;
    // One read per descriptor block, not per group: the groups sharing a block share its
    // place (classic table or meta_bg). 320 reads of 64 bytes were most of this step.
    // Parsed in parallel a batch of blocks at a time, into the tables reserved above:
    // nothing else grows with the group count.
    let per_block = geo.descriptors_per_block().max(1);
    let blocks = geo.groups().div_ceil(per_block);
    for batch in (0..blocks).step_by(DESCRIPTOR_BLOCKS_PER_BATCH as usize) {
        let parsed: Vec<Result<(GroupDescriptor, Option<Problem>), FsckError>> = (batch
            ..blocks.min(batch + DESCRIPTOR_BLOCKS_PER_BATCH))
            .into_par_iter()
            .flat_map_iter(|chunk| {
                let first = chunk * per_block;
                let groups = first..(first + per_block).min(geo.groups());
                let table = image
                    .read_blocks(
                        descriptor_block_to_read(geo, sb, first, from_backup),
                        1,
                        geo.block_size(),
                    )
                    .map_err(|e| {
                        FsckError::NotExt(format!("reading group {first}'s descriptor: {e}"))
                    });
                groups.map(move |group| {
                    let table = table.as_ref().map_err(Clone::clone)?;
                    let at = geo.descriptor_offset(group);
                    parse_descriptor(&table[at..at + desc_size], group, checksum)
                })
            })
            .collect();
        for result in parsed {
            let (mut desc, problem) = result?;
            checksums_ok.push(problem.is_none());
            if let Some(problem) = problem {
                problems.push(problem)?;
            }
            if from_backup {
                // Backup descriptors were written at mkfs or resize time, so their uninit
                // flags and unused-inode counts may be stale; libext2fs clears them when it
                // opens from a backup, and so does this.
                desc.flags &= !(BG_BLOCK_UNINIT | BG_INODE_UNINIT);
                desc.itable_unused_lo = 0;
                desc.itable_unused_hi = 0;
            }
            groups.push(desc);
        }
    }
    Ok((groups, checksums_ok))
}

/// The block holding `group`'s descriptor, as libext2fs's `ext2fs_descriptor_block_loc2`
/// finds it: where `geo` puts it, except that from the backup superblock a meta_bg
/// descriptor block is read from the copy in its meta group's second group (when that
/// group exists), not from the leader's primary copy. The backup copies are mke2fs's, so
/// their counts and flags may be stale, and e2fsck reports them as it reads them.
fn descriptor_block_to_read(geo: &Geometry, sb: &Superblock, group: u32, from_backup: bool) -> u64 {
    let per_block = geo.descriptors_per_block().max(1);
    let meta_group = group / per_block;
    let primary = geo.descriptor_block(group);
    if !from_backup
        || !sb.incompat().contains(IncompatFeatures::META_BG)
        || meta_group < sb.first_meta_bg
    {
        return primary;
    }
    let leader = meta_group * per_block;
    let leader_start = geo.group_first_block(leader);
    let blocks_per_group = u64::from(geo.blocks_per_group());
    if primary + blocks_per_group < geo.blocks() {
        leader_start + blocks_per_group + u64::from(geo.has_superblock(leader + 1))
    } else {
        primary
    }
}

/// Decodes group `group`'s descriptor and checks its checksum; a wrong checksum is a
/// problem, not a reason to stop.
fn parse_descriptor(
    bytes: &[u8],
    group: u32,
    checksum: GroupChecksum,
) -> Result<(GroupDescriptor, Option<Problem>), FsckError> {
    let desc =
        GroupDescriptor::from_bytes(bytes, group).map_err(|e| FsckError::NotExt(e.to_string()))?;
    let seed = GroupSeed { checksum, group };
    match GroupDescriptor::verify(bytes, seed, e4_format::Location::Group(group)) {
        Ok(()) => Ok((desc, None)),
        Err(FormatError::Checksum {
            stored, computed, ..
        }) => {
            let problem = Problem::new(
                ProblemCode::PR_0_GDT_CSUM,
                Location::Group(group),
                format!(
                    "group descriptor {group} checksum is {stored:#06x}, should be {computed:#06x}"
                ),
            );
            Ok((desc, Some(problem)))
        }
        Err(e) => Err(FsckError::NotExt(e.to_string())),
    }
}

/// e2fsck's per-group descriptor checks in `check_super_block`.
/// Which of a group's bitmaps and inode table lie outside where they may be: the group
/// itself, or anywhere in the filesystem under flex_bg (e2fsck's placement checks, and
/// `ext2fs_check_desc`'s). Returns (block bitmap, inode bitmap, inode table).
fn misplaced(sb: &Superblock, geo: &Geometry, group: u32, desc: &GroupDescriptor) -> [bool; 3] {
    let (first, last) = if sb.incompat().contains(IncompatFeatures::FLEX_BG) {
        (geo.first_data_block(), geo.blocks().saturating_sub(1))
    } else {
        let start = geo.group_first_block(group);
        (start, start + geo.group_blocks(group).saturating_sub(1))
    };
    let outside = |b: u64, len: u64| b < first || b.saturating_add(len - 1) > last;
    [
        outside(desc.block_bitmap(), 1),
        outside(desc.inode_bitmap(), 1),
        outside(desc.inode_table(), geo.inode_table_blocks().max(1)),
    ]
}

fn check_descriptors(ctx: &Context) {
    let geo = &ctx.geo;
    let csum = ctx.has_group_csum();
    (0..geo.groups()).into_par_iter().for_each(|group| {
        let desc = &ctx.groups[group as usize];
        let loc = Location::Group(group);
        let [block_bitmap, inode_bitmap, inode_table] = misplaced(&ctx.sb, geo, group, desc);
        if block_bitmap {
            ctx.report(
                ProblemCode::PR_0_BB_NOT_GROUP,
                loc,
                format!(
                    "block bitmap for group {group} is not in group (block {})",
                    desc.block_bitmap()
                ),
            );
        }
        if inode_bitmap {
            ctx.report(
                ProblemCode::PR_0_IB_NOT_GROUP,
                loc,
                format!(
                    "inode bitmap for group {group} is not in group (block {})",
                    desc.inode_bitmap()
                ),
            );
        }
        if inode_table {
            ctx.report(
                ProblemCode::PR_0_ITABLE_NOT_GROUP,
                loc,
                format!(
                    "inode table for group {group} is not in group (block {})",
                    desc.inode_table()
                ),
            );
        }
        let uninit_flags = desc.flags & (BG_BLOCK_UNINIT | BG_INODE_UNINIT);
        if !csum && (uninit_flags != 0 || desc.itable_unused() != 0) {
            ctx.report(
                ProblemCode::PR_0_GDT_UNINIT,
                loc,
                format!("group descriptor {group} marked uninitialized without feature set"),
            );
        }
        if group + 1 == geo.groups() && desc.flags & BG_BLOCK_UNINIT != 0 && csum {
            ctx.report(
                ProblemCode::PR_0_BB_UNINIT_LAST,
                loc,
                "last group block bitmap uninitialized",
            );
        }
        if csum
            && (desc.itable_unused() > desc.free_inodes_count()
                || desc.itable_unused() > geo.inodes_per_group())
        {
            ctx.report(
                ProblemCode::PR_0_GDT_ITABLE_UNUSED,
                loc,
                format!(
                    "group descriptor {group} has invalid unused inodes count {}",
                    desc.itable_unused()
                ),
            );
        }
    });
}

/// A journal that needs recovery is reported, as `e2fsck -n` warns that it skips the
/// recovery; the check goes on with the image as it is on disk, as e2fsck's does, so the
/// exit status is e2fsck's on the same image.
fn check_journal_state(ctx: &Context) {
    if ctx.sb.incompat().contains(IncompatFeatures::RECOVER) {
        ctx.report(
            ProblemCode::PR_0_JOURNAL_RUN,
            Location::Journal,
            "the journal needs recovery; checked the image as it is on disk, without replaying it",
        );
    }
}

//! Pass 1, "Checking inodes, blocks, and sizes": every inode of every inode table, in
//! parallel. The tables are cut into pieces of equal inode count (the unused tail of each
//! group, `bg_itable_unused`, is not read), each read with one positional read, so the
//! work divides by what it costs, not by group. Each inode's fields are checked, its blocks
//! walked and claimed in the shared ownership bitmap, its `i_size` and `i_blocks`
//! compared with what was found; directories are returned for pass 2.

mod bad_blocks;
mod encryption;
mod inline_data;
mod quota_inodes;
mod really_dir;
mod special_inode;

use std::collections::HashSet;
use std::sync::Mutex;

use rayon::prelude::*;

use e4_format::casefold::ENCODING_UTF8_12_1;
use e4_format::codec::le32;
use e4_format::features::{CompatFeatures, IncompatFeatures, RoCompatFeatures};
use e4_format::inode::{flags, FileType, Inode, InodeSeed, I_BLOCK_SIZE, ROOT_INO};
use e4_format::table::TableTooLarge;
use e4_format::MetadataBlock;

use crate::pass1::inline_data::{
    check_flag_conflict, check_flag_without_feature, check_system_data_present, inline_data_size,
    system_data, SystemData,
};
use crate::pass1::quota_inodes::{quota_slot, QuotaSlot};
use crate::pass1::special_inode::check_special;
use crate::report::problem::{Location, ProblemCode};
use crate::report::progress::{PassMeter, Progress};
use crate::state::atomic_bitmap::AtomicBitmap;
use crate::state::block_claim::{BlockWalk, WalkMode};
use crate::state::block_tally::BlockTally;
use crate::state::context::{decode_inode, is_blank_inode, Context};
use crate::state::directories::{
    Directories, Directory, DirectoryFlags, InlineContents, HOLE_REPORTS_PER_DIRECTORY,
};
use crate::state::inode_state::InodeKind;
use crate::state::quota_usage::QuotaUsage;
use crate::state::reserved_inodes::BAD_BLOCKS_INO;
use crate::walk::block_map::walk_block_map;
use crate::walk::extent::walk_extent_tree;
use crate::walk::too_big::TooBig;
use crate::xattr::ea_inode::ValueCharge;
use crate::xattr::entries::{check_entries, value_inodes_named, XattrPlace};
use crate::xattr::inode_area;
use crate::xattr::lookup::BlockChecksum;
use crate::xattr::refs::XattrBlocks;

/// Inodes per unit of work: large enough that one read covers many table blocks (128 KiB
/// of 256-byte inodes, each worker's buffer), small enough that a few full groups split
/// over every thread. 2,048 made the buffers 512 KiB each: 0.7 MiB more at the peak of a
/// two-thread check of the fsck benchmark's small-file image (the buffers' change with
/// this one's others cost 0.2 % more instructions on its `small-mid` image).
const INODES_PER_PIECE: u32 = 512;

/// A contiguous run of one group's inode table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TablePiece {
    /// The group.
    pub group: u32,
    /// Index of the first inode within the group.
    pub first: u32,
    /// Inodes in the piece.
    pub count: u32,
}

/// The first group, in scan order, whose inode table libext2fs's inode scan refuses: a
/// table that starts before the first data block or ends past the filesystem
/// (`ext2fs_open_inode_scan` for group 0, `get_next_blockgroup` for the others, whatever
/// the group's flags). e2fsck's pass 1 stops there (`PR_1_ISCAN_ERROR`, fatal), having
/// scanned the groups before it; a table at block 0 is no table (skipped, as
/// `EXT2_SF_SKIP_MISSING_ITABLE` skips it). A superblock claiming many groups over
/// garbage descriptors (zeros, then bitmap bytes of 0xff) meets such a table early.
pub fn unscannable_group(ctx: &Context) -> Option<u32> {
    let table_blocks = ctx.geo.inode_table_blocks();
    (0..ctx.geo.groups()).find(|&group| {
        let table = ctx.groups[group as usize].inode_table();
        table != 0 && !ctx.is_valid_range(table, table_blocks)
    })
}

/// Reports the scan stopping at `group` ([`unscannable_group`]), at the group's first
/// inode: it sorts after what pass 1 found in the groups before, as e2fsck meets it.
pub fn report_unscannable(ctx: &Context, group: u32) {
    ctx.report(
        ProblemCode::PR_1_ISCAN_ERROR,
        Location::Inode(group * ctx.geo.inodes_per_group() + 1),
        format!(
            "error while scanning inodes: corrupt group descriptor: bad block for inode table of group {group} (block {})",
            ctx.groups[group as usize].inode_table()
        ),
    );
}

/// Splits the used inode table of every group before `stop` (every group when `None`)
/// into pieces of at most [`INODES_PER_PIECE`]; a group whose table is at block 0 has
/// none ([`unscannable_group`]).
pub fn plan_pieces(ctx: &Context, stop: Option<u32>) -> Vec<TablePiece> {
    let mut pieces = Vec::new();
    for group in 0..stop.unwrap_or(ctx.geo.groups()) {
        if ctx.groups[group as usize].inode_table() == 0 {
            continue;
        }
        let used = ctx.inodes_to_scan(group);
        let mut first = 0;
        while first < used {
            let count = (used - first).min(INODES_PER_PIECE);
            pieces.push(TablePiece {
                group,
                first,
                count,
            });
            first += count;
        }
    }
    pieces
}

/// Runs pass 1 and returns the directories found (in inode order) and the xattr blocks.
pub fn run(
    ctx: &Context,
    pieces: &[TablePiece],
    progress: Option<&Progress>,
) -> Result<(Directories, XattrBlocks), TableTooLarge> {
    mark_metadata(ctx)?;
    let xattrs = XattrBlocks::default();
    let total = pieces.iter().map(|p| u64::from(p.count)).sum();
    let meter = PassMeter::start(progress, 1, total);
    let found = Mutex::new(Directories::default());
    pieces.par_iter().for_each(|piece| {
        scan_piece(ctx, piece, WalkMode::Claim, &xattrs, &found);
        meter.advance(u64::from(piece.count));
    });
    // The workers' inode table buffers are not needed again until pass 1B, which only
    // runs on damage: freed now rather than held through passes 2 to 5.
    rayon::broadcast(|_| drop(TABLE_BUFFER.take()));
    xattrs.check_refcounts(ctx);
    let mut dirs = found.into_inner().unwrap_or_else(|e| e.into_inner());
    dirs.sort();
    ctx.inodes
        .count_directories(dirs.records().iter().map(|d| (d.ino, d.links)));
    Ok((dirs, xattrs))
}

/// Pass 1B: when blocks were claimed twice, walks every inode again and reports those
/// owning any of them, with how many.
pub fn find_shared_owners(ctx: &Context, pieces: &[TablePiece], xattrs: &XattrBlocks) {
    if !ctx.block_dup.any() {
        return;
    }
    // `ext2fs_get_next_inode_full` returns the first inode whose checksum fails as an
    // error, which ends pass 1B and e2fsck.
    let first = ctx
        .checksum_failed
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .first()
        .copied();
    if let Some(first) = first {
        ctx.report(
            ProblemCode::PR_1B_ISCAN_ERROR,
            Location::Inode(first),
            format!("error while scanning inodes ({first}): inode checksum does not match inode"),
        );
    }
    pieces.par_iter().for_each(|piece| {
        // No directory is recorded in this mode.
        let none = Mutex::new(Directories::default());
        for (ino, shared) in scan_piece(ctx, piece, WalkMode::CountShared, xattrs, &none) {
            ctx.report(
                ProblemCode::PR_1B_DUP_BLOCK,
                Location::Inode(ino),
                format!("inode {ino} has {shared} multiply-claimed block(s)"),
            );
        }
    });
}

/// Marks superblocks, descriptors, bitmaps and inode tables as used, before any inode
/// claims a block (e2fsck's `mark_table_blocks`). A collision between two groups'
/// metadata shows as a duplicate like any other. Under bigalloc the blocks are marked
/// one by one first, so that metadata sharing a cluster is no collision, then each
/// cluster holding one is marked (as e2fsck marks a per-block map, then converts it with
/// `ext2fs_convert_subcluster_bitmap`).
fn mark_metadata(ctx: &Context) -> Result<(), TableTooLarge> {
    if ctx.cluster_bits == 0 {
        mark_metadata_blocks(ctx, &ctx.metadata, &ctx.block_found, &ctx.block_dup);
    } else {
        let blocks = ctx.geo.blocks();
        let per_block = [
            AtomicBitmap::new(blocks, "the metadata blocks")?,
            AtomicBitmap::new(blocks, "the blocks in use")?,
            AtomicBitmap::new(blocks, "the blocks claimed twice")?,
        ];
        let [metadata, found, dup] = &per_block;
        mark_metadata_blocks(ctx, metadata, found, dup);
        for (blocks, clusters) in
            per_block
                .iter()
                .zip([&ctx.metadata, &ctx.block_found, &ctx.block_dup])
        {
            blocks.for_each_set(0..ctx.geo.blocks(), |b| {
                clusters.set(ctx.cluster_of(b));
            });
        }
    }
    // e2fsck marks the MMP block found, not as metadata: an inode claiming it is a
    // duplicate, as for any block found before.
    if let Some(block) = ctx.mmp_block() {
        ctx.block_found.set(ctx.cluster_of(block));
    }
    Ok(())
}

/// Marks every group's fixed metadata in `metadata` and `found`, a second mark of a block
/// in `dup`, one bit per block.
fn mark_metadata_blocks(
    ctx: &Context,
    metadata: &AtomicBitmap,
    found: &AtomicBitmap,
    dup: &AtomicBitmap,
) {
    let geo = &ctx.geo;
    let table_blocks = geo.inode_table_blocks();
    (0..geo.groups()).into_par_iter().for_each(|group| {
        let mark = |start: u64, count: u64| {
            if ctx.is_valid_range(start, count) {
                metadata.set_range(start, count, |_| {});
                found.set_range(start, count, |b| {
                    dup.set(b);
                });
            }
        };
        let base = geo.base_metadata(group);
        mark(base.start, base.len);
        let desc = &ctx.groups[group as usize];
        mark(desc.block_bitmap(), 1);
        mark(desc.inode_bitmap(), 1);
        mark(desc.inode_table(), table_blocks);
    });
}

/// Scans one piece of inode table, adding its directories to `found`. Returns, in pass 1B,
/// the inodes owning shared blocks with their counts.
fn scan_piece(
    ctx: &Context,
    piece: &TablePiece,
    mode: WalkMode,
    xattrs: &XattrBlocks,
    found: &Mutex<Directories>,
) -> Vec<(u32, u64)> {
    let geo = &ctx.geo;
    let inode_size = ctx.sb.inode_size() as usize;
    let desc = &ctx.groups[piece.group as usize];
    let offset = desc
        .inode_table()
        .checked_mul(u64::from(geo.block_size()))
        .and_then(|o| o.checked_add(u64::from(piece.first) * inode_size as u64));
    // Grown to the largest piece this thread has read, and not zeroed again: zeroing a
    // fresh buffer per piece cost as many instructions as a tenth of pass 1. Taken out of
    // the thread's slot for the scan rather than borrowed in place: a scan that waits
    // inside rayon can run another piece's scan on this thread meanwhile (which then
    // finds the slot empty and grows a buffer of its own).
    let mut table = TABLE_BUFFER.take();
    let len = piece.count as usize * inode_size;
    if table.len() < len {
        table.resize(len, 0);
    }
    let shared = scan_table(ctx, piece, mode, xattrs, offset, &mut table[..len], found);
    TABLE_BUFFER.set(table);
    shared
}

thread_local! {
    /// Each worker's buffer for the piece of inode table it is scanning.
    static TABLE_BUFFER: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Reads the piece of inode table at byte `offset` into `table` and checks its inodes.
fn scan_table(
    ctx: &Context,
    piece: &TablePiece,
    mode: WalkMode,
    xattrs: &XattrBlocks,
    offset: Option<u64>,
    table: &mut [u8],
    found: &Mutex<Directories>,
) -> Vec<(u32, u64)> {
    let inode_size = ctx.sb.inode_size() as usize;
    let first_ino = piece.group * ctx.geo.inodes_per_group() + piece.first + 1;
    let read = offset
        .ok_or_else(|| std::io::Error::other("inode table is past any device"))
        .and_then(|offset| ctx.image.read_at(offset, table));
    if let Err(e) = read {
        if mode == WalkMode::Claim {
            ctx.report(
                ProblemCode::PR_1_ISCAN_ERROR,
                Location::Group(piece.group),
                format!("error while scanning inodes ({first_ino}): {e}"),
            );
        }
        return Vec::new();
    }
    let mut shared = Vec::new();
    let mut quota = QuotaUsage::default();
    for (i, raw) in table.chunks_exact(inode_size).enumerate() {
        let ino = first_ino + i as u32;
        if ino > ctx.sb.inodes_count {
            break;
        }
        let entered = Mutex::new(HashSet::new());
        let walk = BlockWalk {
            ctx,
            ino,
            mode,
            entered: &entered,
        };
        if let Some((dir, tally)) = check_inode(&walk, raw, xattrs, &mut quota) {
            if tally.shared > 0 {
                shared.push((ino, tally.shared));
            }
            // Straight into the shared list: per-piece lists, each worker's own, left
            // 0.8 MiB of what they freed resident at the end of a two-thread pass 1.
            if let Some((dir, inline)) = dir {
                found.lock().unwrap_or_else(|e| e.into_inner()).push(
                    dir,
                    &tally.dir_blocks,
                    inline,
                );
            }
        }
    }
    if mode == WalkMode::Claim {
        ctx.quota.add(quota);
    }
    shared
}

/// A directory pass 1 found: its record and, for an inline directory, its contents.
type FoundDirectory = (Directory, Option<InlineContents>);

/// Checks one inode, charging what it uses to `quota_usage`. Returns, for an inode in use,
/// its directory record with its inline contents (if a directory) and the tally of its
/// blocks (a directory's among them).
fn check_inode(
    walk: &BlockWalk<'_>,
    raw: &[u8],
    xattrs: &XattrBlocks,
    quota_usage: &mut QuotaUsage,
) -> Option<(Option<FoundDirectory>, BlockTally)> {
    let ctx = walk.ctx;
    let ino = walk.ino;
    let loc = Location::Inode(ino);
    // An `i_extra_isize` that does not fit leaves the inode checked on its base fields, as
    // e2fsck -n declines the repair and goes on; it is reported below, for an inode in use.
    let (inode, bad_extra_isize) = match decode_inode(raw, ino) {
        Ok(decoded) => decoded,
        Err(e) => {
            walk.report(
                ProblemCode::PR_1_EXTRA_ISIZE,
                loc,
                format!("inode {ino}: {e}"),
            );
            return None;
        }
    };
    let csum_ok = ctx.csum_seed.is_none_or(|fs_seed| {
        Inode::verify(
            raw,
            InodeSeed { fs_seed, ino },
            e4_format::Location::Inode(ino),
        )
        .is_ok()
    });
    let blank = is_blank_inode(raw);
    // Unused inodes too: e2fsck's pass 1 reports a failed checksum for every inode it
    // scans (`finish_processing_inode` on the `!i_links_count` path), so an unused
    // inode's bad checksum makes the filesystem unclean.
    if !csum_ok && !blank {
        if walk.mode == WalkMode::Claim {
            ctx.checksum_failed
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(ino);
        }
        walk.report(
            ProblemCode::PR_1_INODE_ONLY_CSUM_INVALID,
            loc,
            format!("inode {ino} passes checks, but checksum does not match inode"),
        );
    }
    if ino == BAD_BLOCKS_INO {
        let tally = bad_blocks::check(walk, &inode, csum_ok);
        ctx.inodes
            .record(ino, InodeKind::Reserved, inode.links_count(), true);
        return Some((None, tally));
    }
    let reserved = ino < ctx.sb.first_ino() && ino != ROOT_INO;
    let links = inode.links_count();
    check_low_dtime(walk, &inode);
    let quota = quota_slot(ctx, ino);
    if quota != QuotaSlot::No {
        quota_inodes::check(walk, &inode, quota);
        if quota == QuotaSlot::Unused {
            ctx.inodes
                .record(ino, InodeKind::Reserved, links, inode.size() == 0);
            return Some((None, BlockTally::default()));
        }
    }
    if !reserved && links == 0 {
        if inode.record.mode != 0 && inode.record.dtime == 0 {
            walk.report(
                ProblemCode::PR_1_ZERO_DTIME,
                loc,
                format!("deleted inode {ino} has zero dtime"),
            );
        }
        return None;
    }
    let file_type = inode.file_type();
    // Xattr values held in inodes, named from this inode's own attributes.
    let mut ibody_values = ValueCharge::default();
    // An xattr value inode is checked as any inode of its mode (e2fsck 1.47.0 asks
    // nothing of the flag on a directory); pass 4 counts the entries naming it.
    if inode.has_flag(flags::EA_INODE) && !reserved && walk.mode == WalkMode::Claim {
        ctx.ea_inodes.record(&inode);
    }
    let kind = if quota == QuotaSlot::QuotaFile {
        InodeKind::Reserved
    } else if reserved {
        check_reserved_mode(walk, &inode);
        InodeKind::Reserved
    } else if is_special_inode(ctx, ino) {
        // Journal, quota and orphan files are referenced from the superblock, not from
        // directories.
        InodeKind::Reserved
    } else {
        check_dtime(walk, &inode);
        if inode.has_flag(flags::ENCRYPT) {
            encryption::check(walk, &inode);
        }
        check_casefold_flag(walk, &inode, file_type);
        // e2fsck's `check_inode_extra_space` runs for inodes in use other than the
        // reserved and special ones.
        if let Some(e) = &bad_extra_isize {
            walk.report(
                ProblemCode::PR_1_EXTRA_ISIZE,
                loc,
                format!("inode {ino}: {e}"),
            );
        }
        check_zero_fields(walk, &inode);
        ibody_values = check_inode_xattrs(walk, &inode);
        check_flag_conflict(walk, &inode);
        check_flag_without_feature(walk, &inode);
        check_system_data_present(walk, &inode, csum_ok);
        check_index_flag(walk, &inode);
        really_dir::check(walk, &inode);
        if ino == ROOT_INO && file_type != Some(FileType::Directory) {
            walk.report(
                ProblemCode::PR_1_ROOT_NO_DIR,
                loc,
                "root inode is not a directory",
            );
        }
        if file_type.is_none() {
            walk.report_bad_inode(
                ProblemCode::PR_2_BAD_MODE,
                format!("inode {ino} has invalid mode ({:#o})", inode.record.mode),
            );
        }
        match file_type {
            Some(t)
                if !check_special(walk, &inode, t, || {
                    inline_data_size(ctx, &inode, BlockChecksum::Verify)
                }) =>
            {
                InodeKind::Bad
            }
            _ => InodeKind::of(file_type),
        }
    };
    let dir = kind == InodeKind::Directory;
    // The xattr values and block first: e2fsck's `check_blocks` counts them before the
    // block map, whose count limit (`too_big`) they bring nearer.
    let mut tally = BlockTally {
        blocks: ibody_values.blocks,
        ..BlockTally::default()
    };
    let mut value_inodes = ibody_values.inodes;
    if inode.file_acl() != 0 {
        value_inodes += xattrs.visit(walk, &inode, &mut tally);
    }
    let extents_fs = ctx.sb.incompat().contains(IncompatFeatures::EXTENTS);
    let extent_mapped = inode.has_flag(flags::EXTENTS) && extents_fs;
    if has_valid_blocks(&inode) {
        tally.append(if extent_mapped {
            walk_extent_tree(walk, &inode, dir)
        } else {
            let too_big = TooBig::for_inode(walk, &inode);
            walk_block_map(walk, &inode, dir, too_big, tally.blocks)
        });
    }
    if walk.mode == WalkMode::CountShared {
        return Some((None, tally));
    }
    let inline = inode.has_flag(flags::INLINE_DATA);
    if dir && tally.dir_blocks.is_empty() && !inline {
        walk.report(
            ProblemCode::PR_1_ZERO_LENGTH_DIR,
            loc,
            format!("inode {ino} is a zero-length directory"),
        );
    }
    // e2fsck -n declines to clear a zero-length directory and goes on to its size check.
    check_size(walk, &inode, &tally, dir);
    check_i_blocks(walk, &inode, &tally);
    check_bigalloc_block_map(walk, &inode, file_type);
    let valid_inline_symlink = file_type == Some(FileType::Symlink)
        && kind != InodeKind::Bad
        && inode.has_flag(flags::INLINE_DATA);
    if quota_inodes::charges(ctx, &inode, valid_inline_symlink) {
        let space = tally.blocks * ctx.cluster_ratio() * u64::from(ctx.block_size());
        quota_usage.charge(&inode, space, 1 + value_inodes);
    }
    let zero_length = inode.size() == 0 && tally.blocks == 0;
    ctx.inodes.record(ino, kind, links, zero_length);
    let directory = dir.then(|| {
        if !inline {
            report_holes(walk, &tally.dir_blocks, extent_mapped);
        }
        let flags = DirectoryFlags {
            // Without dir_index too: e2fsck -n keeps the index it declined to clear.
            htree: inode.has_flag(flags::INDEX),
            casefold: inode.has_flag(flags::CASEFOLD)
                && ctx.sb.incompat().contains(IncompatFeatures::CASEFOLD)
                && ctx.sb.encoding == ENCODING_UTF8_12_1,
            root_unmappable: tally.block_zero_unmappable,
            siphash: inode.has_flag(flags::ENCRYPT) && inode.has_flag(flags::CASEFOLD),
        };
        let record = Directory::new(
            ino,
            inode.record.generation,
            inode.size(),
            inode.record.blocks_lo,
            links,
            flags,
        );
        (record, inline_entries(ctx, &inode))
    });
    Some((directory, tally))
}

/// Checks the attributes in `inode` itself (e2fsck's `check_ea_in_inode`: their layout,
/// their hashes and the value inodes they name) and returns what those values charge
/// to it. Entries are checked in order up to the first problem, which ends the walk.
fn check_inode_xattrs(walk: &BlockWalk<'_>, inode: &Inode) -> ValueCharge {
    if walk.mode != WalkMode::Claim {
        return ValueCharge::default();
    }
    let (xattrs, layout) = inode_area::walk(&inode.xattr_area);
    if let Some(list) = inode_area::entry_list(&inode.xattr_area) {
        walk.ctx.ea_inodes.add_refs(&value_inodes_named(list));
    }
    let checked = check_entries(walk.ctx, inode, &xattrs, XattrPlace::Inode);
    if let Some(problem) = layout.filter(|_| !checked.stopped) {
        let ino = inode.ino;
        walk.report(
            problem.code(),
            Location::Inode(ino),
            format!("extended attribute in inode {ino} {}", problem.describe()),
        );
    }
    checked.charged
}

/// What pass 2 reads of an inline directory: `i_block` and the `system.data` value.
/// Without the feature e2fsck does not read its entries (`check_blocks_inline_data` runs
/// only under it), nor when `system.data` cannot be read (pass 2's `check_dir_block`
/// gives up on the directory when `ext2fs_inline_data_size` fails), so its children go
/// unreferenced and its `..` unrecorded.
fn inline_entries(ctx: &Context, inode: &Inode) -> Option<InlineContents> {
    if !inode.has_flag(flags::INLINE_DATA)
        || !ctx.sb.incompat().contains(IncompatFeatures::INLINE_DATA)
    {
        return None;
    }
    let value = match system_data(ctx, inode, BlockChecksum::Verify) {
        SystemData::Found(value) => value,
        SystemData::Absent => Vec::new(),
        SystemData::Unreadable => return None,
    };
    Some((inode.record.block.to_vec(), value))
}

/// e2fsck's `ext2fs_inode_has_valid_blocks2`: devices, fifos, sockets, fast symlinks and
/// inline data map no blocks through `i_block`. A symlink without an xattr block is fast
/// when `i_blocks` is 0; with one, `i_blocks` counts the xattr block (a whole cluster
/// under bigalloc), so libext2fs guesses from `i_size` and `i_block[1]` instead.
fn has_valid_blocks(inode: &Inode) -> bool {
    match inode.file_type() {
        Some(FileType::Directory | FileType::Regular) => {}
        Some(FileType::Symlink) if inode.file_acl() == 0 => {
            if inode.record.blocks_lo == 0 {
                return false;
            }
        }
        Some(FileType::Symlink) => {
            let size = inode.record.size_lo;
            let second_word = le32(&inode.record.block, 4).unwrap_or(0);
            return size >= I_BLOCK_SIZE as u32 || (size > 4 && second_word == 0);
        }
        _ => return false,
    }
    !inode.has_flag(flags::INLINE_DATA)
}

/// Inodes the superblock names (journal, quota, orphan file), wherever they are.
fn is_special_inode(ctx: &Context, ino: u32) -> bool {
    let sb = &ctx.sb;
    [
        sb.journal_inum,
        sb.usr_quota_inum,
        sb.grp_quota_inum,
        sb.prj_quota_inum,
        sb.orphan_file_inum,
    ]
    .contains(&ino)
}

/// Reserved inodes may only have the modes e2fsck allows.
fn check_reserved_mode(walk: &BlockWalk<'_>, inode: &Inode) {
    let ino = walk.ino;
    let mode = inode.record.mode;
    let regular = inode.file_type() == Some(FileType::Regular);
    // The quota slots (3 and 4) are checked by `quota_inode` instead.
    let bad = match ino {
        5 => inode.file_type() == Some(FileType::Directory),
        7 | e4_format::inode::JOURNAL_INO => mode != 0 && !regular,
        _ => mode != 0,
    };
    if bad {
        walk.report(
            ProblemCode::PR_1_RESERVED_BAD_MODE,
            Location::Inode(ino),
            format!("reserved inode {ino} has invalid mode ({mode:#o})"),
        );
    }
}

/// Fields that must be zero unless a feature gives them a meaning (e2fsck marks such an
/// inode bad in pass 1 and reports each field from pass 2's `process_bad_inode`). The
/// Hurd uses these words for its own fields.
fn check_zero_fields(walk: &BlockWalk<'_>, inode: &Inode) {
    const CREATOR_HURD: u32 = 1;
    let ctx = walk.ctx;
    let sb = &ctx.sb;
    if sb.creator_os == CREATOR_HURD {
        return;
    }
    let ino = walk.ino;
    let r = &inode.record;
    let dir = inode.file_type() == Some(FileType::Directory);
    let checks = [
        (
            r.obso_faddr != 0,
            ProblemCode::PR_2_FADDR_ZERO,
            "i_faddr",
            u64::from(r.obso_faddr),
        ),
        (
            dir && r.size_high != 0 && !sb.incompat().contains(IncompatFeatures::LARGEDIR),
            ProblemCode::PR_2_DIR_SIZE_HIGH_ZERO,
            "i_size_high",
            u64::from(r.size_high),
        ),
        (
            r.blocks_high != 0 && !sb.ro_compat().contains(RoCompatFeatures::HUGE_FILE),
            ProblemCode::PR_2_BLOCKS_HI_ZERO,
            "i_blocks_hi",
            u64::from(r.blocks_high),
        ),
        (
            r.file_acl_high != 0 && !sb.incompat().contains(IncompatFeatures::BIT64),
            ProblemCode::PR_2_I_FILE_ACL_HI_ZERO,
            "i_file_acl_hi",
            u64::from(r.file_acl_high),
        ),
    ];
    for (bad, code, field, value) in checks {
        if bad {
            walk.report_bad_inode(
                code,
                format!("{field} for inode {ino} is {value}, should be zero"),
            );
        }
    }
}

/// A dtime below the inode count is the link of an orphan list (e2fsck's
/// `low_dtime_check`, off while the journal needs recovery, whose replay may fix it).
fn check_low_dtime(walk: &BlockWalk<'_>, inode: &Inode) {
    let ctx = walk.ctx;
    let dtime = inode.record.dtime;
    if dtime != 0
        && dtime < ctx.sb.inodes_count
        && !ctx.sb.incompat().contains(IncompatFeatures::RECOVER)
    {
        walk.report(
            ProblemCode::PR_1_LOW_DTIME,
            Location::Inode(walk.ino),
            format!("inode {} was part of the orphaned inode list", walk.ino),
        );
    }
}

/// An inode in use must have no deletion time.
fn check_dtime(walk: &BlockWalk<'_>, inode: &Inode) {
    let ino = walk.ino;
    if inode.record.dtime == 0 {
        return;
    }
    let (code, text) = if ino == ROOT_INO {
        (
            ProblemCode::PR_1_ROOT_DTIME,
            "root inode has dtime set".to_string(),
        )
    } else {
        (
            ProblemCode::PR_1_SET_DTIME,
            format!("inode {ino} is in use, but has dtime set"),
        )
    };
    walk.report(code, Location::Inode(ino), text);
}

/// e2fsck's `i_size` checks at the end of `check_blocks`.
fn check_size(walk: &BlockWalk<'_>, inode: &Inode, tally: &BlockTally, dir: bool) {
    let ctx = walk.ctx;
    let block_size = u64::from(ctx.block_size());
    let size = inode.size();
    let last = tally.last_block;
    let expected = last.map_or(0, |l| (l + 1) * block_size);
    let bad = if inode.file_type() == Some(FileType::Symlink) {
        // e2fsck checks a symlink's size against its target instead (special_inode.rs).
        false
    } else if dir && inode.has_flag(flags::INLINE_DATA) {
        // e2fsck holds an inline directory to exactly what `i_block` and `system.data`
        // hold. An inline file maps no blocks, so of the rules below only the largest
        // size its mapping allows applies: without the extents flag, a block map's (a
        // 40-byte inline file claiming 1 TiB on 1 KiB blocks is e2fsck's
        // `PR_1_BAD_I_SIZE`; e4 called it clean).
        inline_data_size(ctx, inode, BlockChecksum::Ignore) != Some(size)
    } else if dir {
        // e2fsck holds the block count in an `unsigned` (`nblock = size >> bits`): a
        // directory's size past 2^32 blocks wraps there, so an `i_size_high` that only
        // adds whole multiples of 2^32 blocks passes this check (and is reported as
        // `PR_2_DIR_SIZE_HIGH_ZERO` instead).
        let nblock = u64::from((size / block_size) as u32);
        let want = last.map_or(0, |l| l + 1);
        size % block_size != 0
            || nblock > want
            || (nblock < want && want - nblock > u64::from(ctx.sb.prealloc_dir_blocks))
    } else {
        let extents = inode.has_flag(flags::EXTENTS);
        tally.last_init_block.is_some_and(|l| size < l * block_size)
            || (extents && size > (1u64 << (32 + ctx.sb.log_block_size + 10)) - 1)
            || (!extents && size > block_map_max_size(block_size))
    };
    if bad {
        walk.report(
            ProblemCode::PR_1_BAD_I_SIZE,
            Location::Inode(walk.ino),
            format!("inode {}, i_size is {size}, should be {expected}", walk.ino),
        );
    }
}

/// The largest size a block-mapped file can have (e2fsck's `ext2_max_sizes`): what its
/// direct, single, double and triple indirect pointers reach.
fn block_map_max_size(block_size: u64) -> u64 {
    let per = block_size / 4;
    (12 + per + per * per + per * per * per) * block_size
}

/// e2fsck's `i_blocks` check: 512-byte sectors of every block owned (of every cluster,
/// under bigalloc).
fn check_i_blocks(walk: &BlockWalk<'_>, inode: &Inode, tally: &BlockTally) {
    let ctx = walk.ctx;
    let huge = ctx.sb.ro_compat().contains(RoCompatFeatures::HUGE_FILE);
    let on_disk = u64::from(inode.record.blocks_lo)
        | if huge {
            u64::from(inode.record.blocks_high) << 32
        } else {
            0
        };
    // Under bigalloc every allocation unit counted is a whole cluster.
    let blocks = tally.blocks * ctx.cluster_ratio();
    let expected = if huge && inode.has_flag(flags::HUGE_FILE) {
        blocks
    } else {
        blocks * u64::from(ctx.block_size() / 512)
    };
    if on_disk != expected {
        walk.report(
            ProblemCode::PR_1_BAD_I_BLOCKS,
            Location::Inode(walk.ino),
            format!(
                "inode {}, i_blocks is {on_disk}, should be {expected}",
                walk.ino
            ),
        );
    }
}

/// `EXT4_CASEFOLD_FL` on an inode that is not a directory (`PR_1_CASEFOLD_NONDIR`), or
/// on a filesystem without the casefold feature (`PR_1_CASEFOLD_FEATURE`); under `-n`
/// both are asked.
fn check_casefold_flag(walk: &BlockWalk<'_>, inode: &Inode, file_type: Option<FileType>) {
    if !inode.has_flag(flags::CASEFOLD) {
        return;
    }
    let ino = walk.ino;
    if file_type != Some(FileType::Directory) {
        walk.report(
            ProblemCode::PR_1_CASEFOLD_NONDIR,
            Location::Inode(ino),
            format!("inode {ino} has the casefold flag set but is not a directory"),
        );
    }
    if !walk.ctx.sb.incompat().contains(IncompatFeatures::CASEFOLD) {
        walk.report(
            ProblemCode::PR_1_CASEFOLD_FEATURE,
            Location::Inode(ino),
            format!("directory {ino} has the casefold flag, but the casefold feature is not set"),
        );
    }
}

/// `PR_1_NO_BIGALLOC_BLOCKMAP_FILES`: under bigalloc a regular file or directory
/// (the root or past the reserved inodes) with data blocks must be extent-mapped or
/// inline; the kernel cannot allocate clusters to a block map. Data blocks are what
/// `i_blocks` holds less the xattr block's cluster (`ext2fs_inode_data_blocks2`).
fn check_bigalloc_block_map(walk: &BlockWalk<'_>, inode: &Inode, file_type: Option<FileType>) {
    let ctx = walk.ctx;
    let ino = walk.ino;
    if ctx.cluster_bits == 0
        || !matches!(file_type, Some(FileType::Regular | FileType::Directory))
        || (ino != ROOT_INO && ino < ctx.sb.first_ino())
        || inode.has_flag(flags::EXTENTS)
        || inode.has_flag(flags::INLINE_DATA)
    {
        return;
    }
    let huge = ctx.sb.ro_compat().contains(RoCompatFeatures::HUGE_FILE);
    let i_blocks = u64::from(inode.record.blocks_lo)
        | if huge {
            u64::from(inode.record.blocks_high) << 32
        } else {
            0
        };
    let xattr_sectors = if inode.file_acl() != 0 {
        ctx.cluster_ratio() * u64::from(ctx.block_size() / 512)
    } else {
        0
    };
    // libext2fs subtracts in unsigned 64 bits: an `i_blocks` below the xattr cluster
    // wraps to a large count.
    if i_blocks.wrapping_sub(xattr_sectors) > 0 {
        walk.report(
            ProblemCode::PR_1_NO_BIGALLOC_BLOCKMAP_FILES,
            Location::Inode(ino),
            format!("inode {ino} on bigalloc filesystem cannot be block mapped"),
        );
    }
}

/// A directory's unmapped logical blocks, as e2fsck's pass 1 lists them for pass 2, which
/// asks to allocate each (`PR_2_DIRECTORY_HOLE`, one report per block): every block below
/// the last one mapped, and, in a block-mapped directory, block 0 whatever else it maps
/// (`process_block` adds it, so that `.` and `..` are looked for). In an extent-mapped
/// directory each extent starting past the block after the previous one is also offered
/// to be moved down (`PR_1_COLLAPSE_DBLOCK`, in `scan_extent_node`). `blocks` are the
/// mapped blocks, in logical order.
fn report_holes(walk: &BlockWalk<'_>, blocks: &[(u32, u64)], extent_mapped: bool) {
    let ino = walk.ino;
    let mut holes = Vec::new();
    let mut expected = 0u32;
    for &(logical, _) in blocks {
        if logical > expected {
            if extent_mapped {
                walk.report(
                    ProblemCode::PR_1_COLLAPSE_DBLOCK,
                    Location::Inode(ino),
                    format!("directory inode {ino} block {logical} should be at block {expected}"),
                );
            }
            holes.push(expected..logical);
        }
        expected = logical.saturating_add(1);
    }
    if blocks.is_empty() && !extent_mapped {
        holes.push(0..1);
    }
    let mut reported = 0;
    for hole in &holes {
        for logical in hole.clone() {
            if reported == HOLE_REPORTS_PER_DIRECTORY {
                let rest: u64 = holes
                    .iter()
                    .map(|h| u64::from(h.end - h.start))
                    .sum::<u64>()
                    - u64::from(reported);
                walk.report(
                    ProblemCode::PR_2_DIRECTORY_HOLE,
                    Location::Inode(ino),
                    format!("directory inode {ino} has {rest} more unallocated blocks"),
                );
                return;
            }
            walk.report(
                ProblemCode::PR_2_DIRECTORY_HOLE,
                Location::Inode(ino),
                format!("directory inode {ino} has an unallocated block #{logical}"),
            );
            reported += 1;
        }
    }
}

/// e2fsck's pass 1 checks of the `INDEX_FL` flag itself (`handle_htree`): on a regular
/// file or symlink (`PR_1_HTREE_NODIR`), or on a filesystem without dir_index
/// (`PR_1_HTREE_SET`). `e2fsck -n` declines to clear it and goes on to treat a directory
/// as indexed, as pass 2 then does.
fn check_index_flag(walk: &BlockWalk<'_>, inode: &Inode) {
    if !inode.has_flag(flags::INDEX) {
        return;
    }
    let ino = walk.ino;
    if matches!(
        inode.file_type(),
        Some(FileType::Regular | FileType::Symlink)
    ) {
        walk.report(
            ProblemCode::PR_1_HTREE_NODIR,
            Location::Inode(ino),
            format!("inode {ino} has INDEX_FL flag set but is not a directory"),
        );
    }
    if !walk.ctx.sb.compat().contains(CompatFeatures::DIR_INDEX) {
        walk.report(
            ProblemCode::PR_1_HTREE_SET,
            Location::Inode(ino),
            format!("inode {ino} has INDEX_FL flag set on filesystem without htree support"),
        );
    }
}

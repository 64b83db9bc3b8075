//! Pass 5, "Checking group summary information": each group's on-disk block and inode
//! bitmaps against what passes 1 to 4 found, its free counts and directory count, the
//! bitmap checksums and the last group's padding; then the superblock's totals. Groups are
//! compared in parallel; each reports its own differences as ranges, like e2fsck's
//! "Block bitmap differences: -(a--b) +c".

use rayon::prelude::*;

use e4_format::bitmap::{BitmapBlock, BitmapKind, BitmapSeed};
use e4_format::FormatError;

use crate::report::problem::{Location, ProblemCode};
use crate::report::progress::{PassMeter, Progress};
use crate::state::atomic_bitmap::low_bits;
use crate::state::context::Context;

/// What one group counted.
#[derive(Debug, Clone, Copy, Default)]
struct GroupCounts {
    free_blocks: u64,
    free_inodes: u64,
}

/// Runs pass 5.
pub fn run(ctx: &Context, progress: Option<&Progress>) {
    let meter = PassMeter::start(progress, 5, u64::from(ctx.geo.groups()));
    let totals = (0..ctx.geo.groups())
        .into_par_iter()
        .map(|group| {
            let counts = GroupCounts {
                free_blocks: check_block_bitmap(ctx, group),
                free_inodes: check_inode_bitmap(ctx, group),
            };
            meter.advance(1);
            counts
        })
        .reduce(GroupCounts::default, |a, b| GroupCounts {
            free_blocks: a.free_blocks + b.free_blocks,
            free_inodes: a.free_inodes + b.free_inodes,
        });
    // Descriptors count free clusters, the superblock free blocks (in whole clusters).
    let free_blocks = totals.free_blocks * ctx.cluster_ratio();
    if free_blocks != ctx.sb.free_blocks_count() {
        ctx.report(
            ProblemCode::PR_5_FREE_BLOCK_COUNT,
            Location::Filesystem,
            format!(
                "free blocks count wrong ({}, counted={free_blocks})",
                ctx.sb.free_blocks_count(),
            ),
        );
    }
    if totals.free_inodes != u64::from(ctx.sb.free_inodes_count) {
        ctx.report(
            ProblemCode::PR_5_FREE_INODE_COUNT,
            Location::Filesystem,
            format!(
                "free inodes count wrong ({}, counted={})",
                ctx.sb.free_inodes_count, totals.free_inodes
            ),
        );
    }
}

/// Reads a bitmap block, or `None` if its location is invalid (reported before pass 1).
fn read_bitmap(ctx: &Context, block: u64) -> Option<Vec<u8>> {
    if !ctx.is_valid_block(block) {
        return None;
    }
    ctx.image.read_blocks(block, 1, ctx.block_size()).ok()
}

/// Whether every byte of a bitmap block after the first `bits` bits is 0xff.
fn tail_is_set(bytes: &[u8], bits: u64) -> bool {
    let start = usize::try_from(bits.div_ceil(8)).unwrap_or(usize::MAX);
    bytes
        .get(start..)
        .is_none_or(|tail| tail.iter().all(|&b| b == 0xFF))
}

/// Bits `i..i + 64` of an on-disk bitmap (`i` a multiple of 64), bit `i` lowest; bytes
/// past the end read as clear, as [`bit`] reads them.
fn disk_word(bytes: &[u8], i: u64) -> u64 {
    let mut word = [0u8; 8];
    if let Some(rest) = usize::try_from(i / 8).ok().and_then(|at| bytes.get(at..)) {
        let n = rest.len().min(8);
        word[..n].copy_from_slice(&rest[..n]);
    }
    u64::from_le_bytes(word)
}

/// How many of the first `count` bits of an on-disk bitmap are clear.
fn clear_bits(bytes: &[u8], count: u64) -> u64 {
    (0..count)
        .step_by(64)
        .map(|i| u64::from((!disk_word(bytes, i) & low_bits(count - i)).count_ones()))
        .sum()
}

fn bit(bytes: &[u8], index: u64) -> bool {
    bytes
        .get((index / 8) as usize)
        .is_some_and(|b| b & (1 << (index % 8)) != 0)
}

/// Compares group `group`'s block bitmap, a bit per cluster (per block without
/// bigalloc); returns the free clusters counted.
fn check_block_bitmap(ctx: &Context, group: u32) -> u64 {
    let geo = &ctx.geo;
    let desc = &ctx.groups[group as usize];
    let (start, count) = ctx.group_clusters(group);
    let found = |i: u64| ctx.block_found.get(start + i);
    let uninit = ctx.block_bitmap_uninit(group);
    let on_disk: Option<Vec<u8>> = if uninit {
        Some(vec![0u8; geo.block_size() as usize])
    } else {
        read_bitmap(ctx, desc.block_bitmap())
    };
    // A BLOCK_UNINIT group's bitmap then has the group's own metadata marked in it
    // (libext2fs's `mark_uninit_bg_group_blocks`): all there is when it was not read,
    // added to what was read when a bad descriptor checksum had it read from disk.
    let on_disk = on_disk.map(|mut bytes| {
        if ctx.block_uninit(group) {
            for (i, chunk) in (0..count).step_by(64).zip(bytes.chunks_exact_mut(8)) {
                let word = ctx.metadata.bits_at(start + i) & low_bits(count - i);
                let read = u64::from_le_bytes(chunk.try_into().unwrap_or_default());
                chunk.copy_from_slice(&(read | word).to_le_bytes());
            }
        }
        bytes
    });
    // Under -n the bitmap is not corrected, so e2fsck counts what it says is free.
    let free = match &on_disk {
        Some(bytes) => clear_bits(bytes, count),
        None => (0..count).filter(|&i| !found(i)).count() as u64,
    };
    if let Some(bytes) = &on_disk {
        // Word by word first: a group whose bitmap agrees (nearly all of them) costs a
        // compare per 64 blocks instead of two lookups per block.
        let agrees = (0..count).step_by(64).all(|i| {
            (disk_word(bytes, i) ^ ctx.block_found.bits_at(start + i)) & low_bits(count - i) == 0
        });
        if !agrees {
            report_differences(
                ctx,
                count,
                |i| bit(bytes, i),
                found,
                // e2fsck names a cluster by its first block.
                |i| (start + i) << ctx.cluster_bits,
                (ProblemCode::PR_5_BLOCK_UNUSED, ProblemCode::PR_5_BLOCK_USED),
                BitmapKind::Block,
            );
        }
        if !uninit {
            let per_group = u64::from(geo.blocks_per_group()) / ctx.cluster_ratio();
            if (count..per_group).any(|i| !bit(bytes, i)) || !tail_is_set(bytes, per_group) {
                ctx.report(
                    ProblemCode::PR_5_BLOCK_BMAP_PADDING,
                    Location::Group(group),
                    "padding at end of block bitmap is not set",
                );
            }
            // e2fsck skips a BLOCK_UNINIT group's bitmap checksum by the flag alone,
            // even where a bad descriptor checksum had the bitmap read from disk.
            let seed = BitmapSeed::for_superblock(&ctx.sb, BitmapKind::Block);
            if let (Some(seed), false) = (seed, ctx.block_uninit(group)) {
                if let Err(FormatError::Checksum { .. }) =
                    BitmapBlock::of(desc, BitmapKind::Block, group).verify(bytes, seed)
                {
                    ctx.report(
                        ProblemCode::PR_5_BLOCK_BITMAP_CSUM_INVALID,
                        Location::Group(group),
                        format!("group {group} block bitmap does not match checksum"),
                    );
                }
            }
        }
    }
    if u64::from(desc.free_blocks_count()) != free {
        ctx.report(
            ProblemCode::PR_5_FREE_BLOCK_COUNT_GROUP,
            Location::Group(group),
            format!(
                "free blocks count wrong for group #{group} ({}, counted={free})",
                desc.free_blocks_count()
            ),
        );
    }
    free
}

/// Compares group `group`'s inode bitmap and counts; returns the free inodes counted.
fn check_inode_bitmap(ctx: &Context, group: u32) -> u64 {
    let geo = &ctx.geo;
    let desc = &ctx.groups[group as usize];
    let ipg = u64::from(geo.inodes_per_group());
    let first = u64::from(group) * ipg + 1;
    let count = ipg.min(u64::from(ctx.sb.inodes_count).saturating_sub(first - 1));
    let first_ino = u64::from(ctx.sb.first_ino());
    // Inodes `first + i` to `first + i + 63` found in use, the first lowest; bits past
    // `count` clear. Reserved inodes are always in use (e2fsck marks them so in pass 1).
    let found_word = |i: u64| {
        let ino = first + i;
        let reserved = low_bits(first_ino.saturating_sub(ino));
        (ctx.inodes.in_use_bits(ino as u32) | reserved) & low_bits(count - i)
    };
    let found = |i: u64| found_word(i) & 1 != 0;
    let uninit = ctx.inode_bitmap_uninit(group);
    let on_disk = if uninit {
        Some(vec![0u8; geo.block_size() as usize])
    } else {
        read_bitmap(ctx, desc.inode_bitmap())
    };
    // As for blocks, e2fsck -n counts from the bitmap it did not correct; a directory
    // counts where the bitmap says its inode is in use. All of it a word at a time: a
    // group is 8,192 inodes, nearly always all unused or all as found.
    let marked_word = |i: u64| {
        on_disk.as_ref().map_or_else(
            || found_word(i),
            |bytes| disk_word(bytes, i) & low_bits(count - i),
        )
    };
    let (mut free, mut dirs, mut agrees) = (0u64, 0u64, true);
    for i in (0..count).step_by(64) {
        let marked = marked_word(i);
        free += u64::from((!marked & low_bits(count - i)).count_ones());
        dirs += u64::from((marked & ctx.inodes.directory_bits((first + i) as u32)).count_ones());
        agrees &= marked == found_word(i);
    }
    if let Some(bytes) = &on_disk {
        if !agrees {
            report_differences(
                ctx,
                count,
                |i| bit(bytes, i),
                found,
                |i| first + i,
                (ProblemCode::PR_5_INODE_UNUSED, ProblemCode::PR_5_INODE_USED),
                BitmapKind::Inode,
            );
        }
        // Inodes past s_inodes_count, and the rest of the block past the group's inodes,
        // must read as in use (libext2fs's bitmap tail check).
        // An INODE_UNINIT group's bitmap is not read, so it has no tail to check.
        if !uninit && ((count..ipg).any(|i| !bit(bytes, i)) || !tail_is_set(bytes, ipg)) {
            ctx.report(
                ProblemCode::PR_5_INODE_BMAP_PADDING,
                Location::Group(group),
                "padding at end of inode bitmap is not set",
            );
        }
        // As for blocks, the checksum is skipped by the INODE_UNINIT flag alone.
        let seed = BitmapSeed::for_superblock(&ctx.sb, BitmapKind::Inode);
        if let (Some(seed), false) = (seed, ctx.inode_uninit(group)) {
            if let Err(FormatError::Checksum { .. }) =
                BitmapBlock::of(desc, BitmapKind::Inode, group).verify(bytes, seed)
            {
                ctx.report(
                    ProblemCode::PR_5_INODE_BITMAP_CSUM_INVALID,
                    Location::Group(group),
                    format!("group {group} inode bitmap does not match checksum"),
                );
            }
        }
    }
    if u64::from(desc.free_inodes_count()) != free {
        ctx.report(
            ProblemCode::PR_5_FREE_INODE_COUNT_GROUP,
            Location::Group(group),
            format!(
                "free inodes count wrong for group #{group} ({}, counted={free})",
                desc.free_inodes_count()
            ),
        );
    }
    if u64::from(desc.used_dirs_count()) != dirs {
        ctx.report(
            ProblemCode::PR_5_FREE_DIR_COUNT_GROUP,
            Location::Group(group),
            format!(
                "directories count wrong for group #{group} ({}, counted={dirs})",
                desc.used_dirs_count()
            ),
        );
    }
    free
}

/// Reports each run of bits where the on-disk bitmap and what was found differ:
/// `codes.0` where the disk says used and nothing was found, `codes.1` the reverse.
fn report_differences(
    ctx: &Context,
    count: u64,
    on_disk: impl Fn(u64) -> bool,
    found: impl Fn(u64) -> bool,
    number: impl Fn(u64) -> u64,
    codes: (ProblemCode, ProblemCode),
    kind: BitmapKind,
) {
    let mut i = 0;
    while i < count {
        let (disk, seen) = (on_disk(i), found(i));
        if disk == seen {
            i += 1;
            continue;
        }
        let run_start = i;
        while i < count && on_disk(i) == disk && found(i) == seen {
            i += 1;
        }
        let (first, last) = (number(run_start), number(i - 1));
        let (code, sign) = if disk { (codes.0, '-') } else { (codes.1, '+') };
        let range = if first == last {
            format!("{sign}{first}")
        } else {
            format!("{sign}({first}--{last})")
        };
        let (location, what) = match kind {
            BitmapKind::Block => (Location::Block(first), "block"),
            BitmapKind::Inode => (Location::Inode(first as u32), "inode"),
        };
        ctx.report(
            code,
            location,
            format!("{what} bitmap differences: {range}"),
        );
    }
}

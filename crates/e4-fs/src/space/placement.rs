//! Where new blocks go, as policy rather than mechanism: the reservation windows directories
//! grow in, and where a directory that outgrows its first blocks continues.

use e4_alloc::ReservationWindow;
use e4_format::geometry::Geometry;
use e4_format::superblock::Superblock;

/// Directories grow in reservation windows of at most this many blocks (256 KiB at 4 KiB)
/// once they are past their first blocks, or a quarter of their size when that is more
/// ([`directory_window_cap`]).
const DIRECTORY_WINDOW_CAP: u32 = 64;
/// A directory's blocks come one at a time from the group until it holds this many: most
/// directories never grow past a block or two, and a window would only hold space back.
pub(crate) const WINDOWLESS_BLOCKS: u64 = 2;

/// The largest window for a directory of `blocks` blocks: [`DIRECTORY_WINDOW_CAP`], or a
/// quarter of the directory when that is more. A directory that stops growing then holds
/// back at most a quarter of its size, and one that keeps growing beside others gets runs
/// that grow with it: two threads' directories of 2,800 blocks, made by turns, had 37
/// extents each with 64-block windows and have 17 (debugfs `ex`).
pub(crate) fn directory_window_cap(blocks: u64) -> u32 {
    u32::try_from(blocks / 4)
        .unwrap_or(u32::MAX)
        .max(DIRECTORY_WINDOW_CAP)
}

/// The window a directory's handle starts with.
pub(crate) fn directory_window() -> ReservationWindow {
    ReservationWindow::capped(DIRECTORY_WINDOW_CAP)
}

/// How many places directories that outgrow their first blocks are spread over: the
/// kernel's "colour" count (`ext4_inode_to_goal_block`).
const COLOURS: u64 = 16;

/// Where a directory that outgrows its first blocks continues: one of [`COLOURS`]
/// equal parts, chosen by inode number, of its inode's flex group past the first group
/// (which holds the flex group's bitmaps and inode tables; the kernel sends regular
/// files past it too), or of its own group without flex groups. Directories growing at
/// the same time (each thread's own) would otherwise all continue from the same first
/// free block and take their windows there by turns: two threads' 524-block
/// directories had 5 to 11 extents each (a tree block, and one more block to read on
/// every lookup) where one thread's had 2. The kernel colours a file's first block by
/// process id (without delayed allocation); the inode number also spreads the
/// directories one thread makes.
pub(crate) fn first_window_goal(geometry: &Geometry, sb: &Superblock, group: u32, ino: u32) -> u64 {
    let per_flex = sb.groups_per_flex().max(1);
    let flex_first = group - group % per_flex;
    let data_groups = per_flex.min(geometry.groups() - flex_first) - 1;
    let (start, groups) = match data_groups {
        0 => (group, 1),
        n => (flex_first + 1, n),
    };
    let first = geometry.group_first_block(start);
    let end =
        (first + u64::from(groups) * u64::from(geometry.blocks_per_group())).min(sb.blocks_count());
    first + u64::from(ino) % COLOURS * ((end - first) / COLOURS)
}

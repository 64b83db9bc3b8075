//! Sizing a filesystem to a tree (`e4 mkfs -d DIR` without SIZE): the smallest size, in
//! steps, whose layout leaves the tree's blocks and inodes free plus a stated margin. The
//! tree is measured by the caller ([`TreeUsage`]); each candidate size is laid out in
//! memory exactly as it would be made, so the free counts are the made filesystem's.

use crate::error::{MkfsError, Result};
use crate::layout::FIRST_INO;
use crate::params::MkfsOptions;
use crate::profile::Profile;

/// What a tree needs, per possible block size (1 KiB to 64 KiB).
#[derive(Debug, Clone, Default)]
pub struct TreeUsage {
    /// Blocks the tree's files, directories, symlinks and attribute blocks take, for block
    /// sizes 1024 << 0 .. 1024 << 6.
    pub blocks: [u64; 7],
    /// Inodes the tree takes.
    pub inodes: u64,
}

impl TreeUsage {
    fn blocks_for(&self, block_size: u32) -> u64 {
        self.blocks[(block_size / 1024).trailing_zeros() as usize]
    }
}

/// Smallest step of growth while searching (1 MiB).
const STEP: u64 = 1 << 20;

/// `opts` with a SIZE (a whole number of MiB), and an inode count where the profile's
/// ratio would give too few, whose filesystem has at least the tree's blocks and inodes free
/// plus `margin_percent` of each.
pub fn size_to_fit(
    opts: &MkfsOptions,
    profile: &Profile,
    usage: &TreeUsage,
    margin_percent: u64,
) -> Result<MkfsOptions> {
    let with_margin = |n: u64| n + n * margin_percent / 100;
    let mut bytes = (with_margin(usage.blocks_for(4096)) * 4096 * 5 / 4).max(8 * STEP);
    for _ in 0..64 {
        bytes = bytes.div_ceil(STEP) * STEP;
        let mut sized = opts.clone();
        sized.size = Some(format!("{}K", bytes / 1024));
        let need_inodes = with_margin(usage.inodes);
        let (mut params, mut layout, _) = crate::build(&sized, profile, 0)?;
        let mut free_inodes = u64::from(layout.sb.inodes_count) - u64::from(FIRST_INO);
        if free_inodes < need_inodes && sized.inodes.is_none() && sized.bytes_per_inode.is_none() {
            // The profile's ratio gives too few inodes for a tree of small files: ask for
            // them (-N) rather than growing the blocks.
            sized.inodes = Some(need_inodes + u64::from(FIRST_INO));
            (params, layout, _) = crate::build(&sized, profile, 0)?;
            free_inodes = u64::from(layout.sb.inodes_count) - u64::from(FIRST_INO);
        }
        let free_blocks: u64 = (0..layout.groups())
            .map(|g| layout.group_free_blocks(g))
            .sum();
        let need_blocks = with_margin(usage.blocks_for(params.block_size));
        if free_blocks >= need_blocks && free_inodes >= need_inodes {
            return Ok(sized);
        }
        let short = need_blocks.saturating_sub(free_blocks) * u64::from(params.block_size);
        bytes += short.max(bytes / 8).max(STEP);
    }
    Err(MkfsError::Geometry(
        "no size found that holds the tree (it grew past every step tried)".into(),
    ))
}

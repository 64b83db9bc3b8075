//! How far an inode's logical blocks may reach (e2fsck's `PR_1_TOOBIG_*`, latched under
//! "Inode N is too big"): a directory without large_dir and without `i_size_high` may
//! not map past `2^21` KiB of logical blocks (`1 << (21 - s_log_block_size)`), and a
//! block-mapped symlink may map only its block 0. A block past the limit is reported and
//! then neither claimed nor counted, as e2fsck's `process_block` and `scan_extent_node`
//! skip it, so `i_size`, `i_blocks` and the bitmaps then show its absence.
//!
//! e2fsck's other limit, a regular file or directory whose block count reaches
//! `1 << (31 - s_log_block_size)` (`p->num_blocks + 1 >= p->max_blocks`), needs 2^25 or
//! more blocks mapped through one block map and is not checked.

use e4_format::features::IncompatFeatures;
use e4_format::inode::{FileType, Inode};

use crate::block_claim::BlockWalk;
use crate::problem::{Location, ProblemCode};

/// The limits that apply to one inode.
#[derive(Debug, Clone, Copy)]
pub struct TooBig {
    /// For a directory the rule applies to: the largest logical block count allowed.
    dir_limit: Option<u64>,
    /// Neither a directory nor a regular file (a symlink with blocks).
    symlink: bool,
}

impl TooBig {
    pub fn for_inode(walk: &BlockWalk<'_>, inode: &Inode) -> Self {
        let sb = &walk.ctx.sb;
        let file_type = inode.file_type();
        let dir = file_type == Some(FileType::Directory);
        let dir_limit = (dir
            && !sb.incompat().contains(IncompatFeatures::LARGEDIR)
            && inode.record.size_high == 0)
            .then(|| 1u64 << (21 - sb.log_block_size.min(6)));
        TooBig {
            dir_limit,
            symlink: !dir && file_type != Some(FileType::Regular),
        }
    }

    /// The problem with a block map's data block at `logical`, if it is past a limit
    /// (e2fsck's `process_block`: `blockcnt > limit` for a directory, `blockcnt > 0` for a
    /// symlink).
    pub fn block_map_problem(&self, logical: u64) -> Option<ProblemCode> {
        if self.dir_limit.is_some_and(|limit| logical > limit) {
            Some(ProblemCode::PR_1_TOOBIG_DIR)
        } else if self.symlink && logical > 0 {
            Some(ProblemCode::PR_1_TOOBIG_SYMLINK)
        } else {
            None
        }
    }

    /// Whether an extent of `len` blocks from `logical` ends past a directory's limit
    /// (`scan_extent_node`: `e_lblk + e_len > limit`, reported at block `e_lblk +
    /// e_len`).
    pub fn extent_too_big(&self, logical: u64, len: u64) -> bool {
        self.dir_limit
            .is_some_and(|limit| logical.saturating_add(len) > limit)
    }
}

/// Reports `code` (a `PR_1_TOOBIG_*`) for block #`logical` at `physical`.
pub fn report(walk: &BlockWalk<'_>, code: ProblemCode, logical: u64, physical: u64) {
    let ino = walk.ino;
    let what = if code == ProblemCode::PR_1_TOOBIG_DIR {
        "directory"
    } else {
        "symlink"
    };
    walk.report(
        code,
        Location::Inode(ino),
        format!(
            "inode {ino} is too big: block #{logical} ({physical}) causes {what} to be too big"
        ),
    );
}

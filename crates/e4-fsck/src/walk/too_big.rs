//! How far an inode's logical blocks may reach, and how many blocks a block map may own
//! (e2fsck's `PR_1_TOOBIG_*`, latched under "Inode N is too big"):
//!
//! - a directory without large_dir and without `i_size_high` may not map past `2^21` KiB
//!   of logical blocks (`1 << (21 - s_log_block_size)`), extent-mapped or not;
//! - a block-mapped symlink may map only its block 0;
//! - a block-mapped regular file or directory may own fewer than e2fsck's `max_blocks`,
//!   `1 << (31 - s_log_block_size)` (the most whose `i_blocks` in 512-byte units fits in
//!   32 bits): `process_block` finds a block too big when the blocks counted before it
//!   (`p->num_blocks`: the xattr block and values, then every block of the map, indirect
//!   blocks too, in the iterator's order) plus one reach `max_blocks`. Extent trees have
//!   no such limit (`scan_extent_node` does not look at the count).
//!
//! A block past a limit is reported and then neither claimed nor counted, as e2fsck's
//! `process_block` and `scan_extent_node` skip it, so `i_size`, `i_blocks` and the
//! bitmaps then show its absence. Since an uncounted block leaves the count where it
//! was, once the count limit is reached every later block of the map is too big; an
//! indirect block found too big is still walked (e2fsck's iterator reads it, as the
//! callback declined to clear it), so its children are reported too.

use e4_format::features::IncompatFeatures;
use e4_format::inode::{FileType, Inode};

use crate::report::problem::{Location, ProblemCode};
use crate::state::block_claim::BlockWalk;

/// The limits that apply to one inode.
#[derive(Debug, Clone, Copy)]
pub struct TooBig {
    /// For a directory the rule applies to: the largest logical block count allowed.
    dir_limit: Option<u64>,
    /// Neither a directory nor a regular file (a symlink with blocks).
    symlink: bool,
    /// For a regular file or directory: e2fsck's `max_blocks`, and the code a block
    /// reaching it gets.
    count_limit: Option<(u64, ProblemCode)>,
}

impl TooBig {
    /// The limits e2fsck applies to `inode` on this filesystem.
    pub fn for_inode(walk: &BlockWalk<'_>, inode: &Inode) -> Self {
        let sb = &walk.ctx.sb;
        let log_block_size = sb.log_block_size.min(6);
        let file_type = inode.file_type();
        let dir_limit = (file_type == Some(FileType::Directory)
            && !sb.incompat().contains(IncompatFeatures::LARGEDIR)
            && inode.record.size_high == 0)
            .then(|| 1u64 << (21 - log_block_size));
        Self::new(file_type, dir_limit, 1u64 << (31 - log_block_size))
    }

    /// The limits of an inode of `file_type`: `dir_limit` for a directory the logical
    /// block limit applies to, and `max_blocks`, the count limit of a regular file's or
    /// directory's block map.
    pub fn new(file_type: Option<FileType>, dir_limit: Option<u64>, max_blocks: u64) -> Self {
        let count_code = match file_type {
            Some(FileType::Directory) => Some(ProblemCode::PR_1_TOOBIG_DIR),
            Some(FileType::Regular) => Some(ProblemCode::PR_1_TOOBIG_REG),
            _ => None,
        };
        TooBig {
            dir_limit,
            symlink: count_code.is_none(),
            count_limit: count_code.map(|code| (max_blocks, code)),
        }
    }

    /// The problem with a block map's data block at `logical`, if it is past a logical
    /// limit (e2fsck's `process_block`: `blockcnt > limit` for a directory, `blockcnt > 0`
    /// for a symlink).
    pub fn block_map_problem(&self, logical: u64) -> Option<ProblemCode> {
        if self.dir_limit.is_some_and(|limit| logical > limit) {
            Some(ProblemCode::PR_1_TOOBIG_DIR)
        } else if self.symlink && logical > 0 {
            Some(ProblemCode::PR_1_TOOBIG_SYMLINK)
        } else {
            None
        }
    }

    /// The problem with the next block of a block map, data or indirect, when the inode
    /// already owns `owned` blocks counted in e2fsck's order (`p->num_blocks + 1 >=
    /// p->max_blocks`).
    pub fn count_problem(&self, owned: u64) -> Option<ProblemCode> {
        self.count_limit
            .filter(|&(max_blocks, _)| owned.saturating_add(1) >= max_blocks)
            .map(|(_, code)| code)
    }

    /// Whether an inode owning `owned` blocks could own up to `more` further ones without
    /// any of them reaching the count limit: then those blocks may be walked in any order.
    pub fn count_stays_below(&self, owned: u64, more: u64) -> bool {
        self.count_limit
            .is_none_or(|(max_blocks, _)| owned.saturating_add(more) < max_blocks)
    }

    /// Whether an extent of `len` blocks from `logical` ends past a directory's limit
    /// (`scan_extent_node`: `e_lblk + e_len > limit`, reported at block `e_lblk +
    /// e_len`).
    pub fn extent_too_big(&self, logical: u64, len: u64) -> bool {
        self.dir_limit
            .is_some_and(|limit| logical.saturating_add(len) > limit)
    }
}

/// Reports `code` (a `PR_1_TOOBIG_*`) for the block at `physical`: data block
/// #`logical`, or an indirect block (`None`).
pub fn report(walk: &BlockWalk<'_>, code: ProblemCode, logical: Option<u64>, physical: u64) {
    let ino = walk.ino;
    let what = match code {
        ProblemCode::PR_1_TOOBIG_DIR => "directory",
        ProblemCode::PR_1_TOOBIG_REG => "file",
        _ => "symlink",
    };
    let block = match logical {
        Some(logical) => format!("block #{logical}"),
        None => "indirect block".to_string(),
    };
    walk.report(
        code,
        Location::Inode(ino),
        format!("inode {ino} is too big: {block} ({physical}) causes {what} to be too big"),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn count_limit_is_reached_by_the_block_after_max_blocks_minus_one() {
        let reg = TooBig::new(Some(FileType::Regular), None, 10);
        assert_eq!(reg.count_problem(8), None);
        assert_eq!(reg.count_problem(9), Some(ProblemCode::PR_1_TOOBIG_REG));
        assert!(reg.count_stays_below(4, 5));
        assert!(!reg.count_stays_below(4, 6));
        let dir = TooBig::new(Some(FileType::Directory), Some(100), 10);
        assert_eq!(dir.count_problem(9), Some(ProblemCode::PR_1_TOOBIG_DIR));
        assert_eq!(
            dir.block_map_problem(101),
            Some(ProblemCode::PR_1_TOOBIG_DIR)
        );
        let symlink = TooBig::new(Some(FileType::Symlink), None, 10);
        assert_eq!(symlink.count_problem(1_000), None);
        assert!(symlink.count_stays_below(u64::MAX, 1));
        assert_eq!(
            symlink.block_map_problem(1),
            Some(ProblemCode::PR_1_TOOBIG_SYMLINK)
        );
    }
}

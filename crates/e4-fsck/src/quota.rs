//! Quota usage (the quota feature): pass 1 adds up, per user, group and project, the
//! space and inodes of every inode e2fsck charges (`quota_data_add`,
//! `quota_data_inodes`), and after pass 5 each quota file's entries are compared with
//! those sums (e2fsck's `quota_compare_and_update`): an entry whose usage differs, an id
//! in use with no entry, or a file that cannot be read is `PR_6_UPDATE_QUOTAS` for its
//! type. The files are the kernel's quota tree format, v2 revision 1, whose layout
//! e4-format's `quota` module decodes; this walks its tree (`quotaio_tree.c`).

use std::collections::{HashMap, HashSet};

use e4_format::features::RoCompatFeatures;
use e4_format::inode::Inode;
use e4_format::quota::{
    data_block_entries, tree_references, QuotaHeader, TREE_BLOCK_SIZE, TREE_DEPTH, TREE_ROOT,
};

use crate::report::problem::{Location, ProblemCode};
use crate::state::context::Context;
use crate::state::quota_usage::Usage;
use crate::walk::file_map::map_logical;

/// Compares each quota file the superblock names with the usage pass 1 found.
pub fn check(ctx: &Context) {
    let sb = &ctx.sb;
    if !sb.ro_compat().contains(RoCompatFeatures::QUOTA) {
        return;
    }
    let usage = ctx.quota.lock();
    let files = [sb.usr_quota_inum, sb.grp_quota_inum, sb.prj_quota_inum];
    for (qtype, &ino) in files.iter().enumerate() {
        if ino == 0 {
            continue;
        }
        let found = usage.of_type(qtype);
        let consistent = read_quota_file(ctx, ino, qtype).is_some_and(|on_disk| {
            on_disk
                .iter()
                .all(|(id, u)| found.get(id).copied().unwrap_or_default() == *u)
                && found.keys().all(|id| on_disk.contains_key(id))
        });
        if !consistent {
            ctx.report(
                ProblemCode::PR_6_UPDATE_QUOTAS,
                Location::Inode(ino),
                format!("update quota info for quota type {qtype}"),
            );
        }
    }
}

/// The usage each entry of quota file `ino` (of type `qtype`) records; `None` when the
/// file cannot be read as a v2r1 quota tree.
fn read_quota_file(ctx: &Context, ino: u32, qtype: usize) -> Option<HashMap<u32, Usage>> {
    let file = QuotaFile {
        ctx,
        inode: ctx.read_inode(ino).ok()?,
    };
    let header =
        QuotaHeader::decode_checked(&file.block(0)?, qtype, e4_format::Location::Inode(ino))
            .ok()?;
    let mut walk = TreeWalk {
        file,
        blocks: header.blocks,
        seen: HashSet::new(),
        entries: HashMap::new(),
    };
    walk.tree(TREE_ROOT, 0)?;
    Some(walk.entries)
}

/// A quota file, read one tree block at a time.
struct QuotaFile<'a> {
    ctx: &'a Context,
    inode: Inode,
}

impl QuotaFile<'_> {
    /// Tree block `block`: zeros in a hole or past `i_size` (as a short read gives);
    /// `None` when its file block cannot be mapped or read.
    fn block(&self, block: u32) -> Option<[u8; TREE_BLOCK_SIZE]> {
        let mut out = [0u8; TREE_BLOCK_SIZE];
        let at = u64::from(block) * TREE_BLOCK_SIZE as u64;
        if at >= self.inode.size() {
            return Some(out);
        }
        let block_size = u64::from(self.ctx.block_size());
        let physical = map_logical(self.ctx, &self.inode, at / block_size)?;
        if physical != 0 {
            let bytes = self
                .ctx
                .image
                .read_blocks(physical, 1, self.ctx.block_size())
                .ok()?;
            let start = (at % block_size) as usize;
            out.copy_from_slice(bytes.get(start..start + TREE_BLOCK_SIZE)?);
        }
        Some(out)
    }
}

/// `qtree_scan_dquots`: the tree from its root.
struct TreeWalk<'a> {
    file: QuotaFile<'a>,
    /// `dqi_blocks`: the blocks the file holds; a reference past them is corruption
    /// (`check_reference`).
    blocks: u32,
    /// The blocks walked, each with the depth it was walked at.
    seen: HashSet<(u32, usize)>,
    entries: HashMap<u32, Usage>,
}

impl TreeWalk<'_> {
    /// `report_tree`: the references of the index block `block` at `depth`, leading to
    /// data blocks at the last level. Every reference is checked against `dqi_blocks`,
    /// as e2fsck checks it each time it meets it; e2fsck walks an index block again each
    /// time one names it (a data block only once), but a walk of one block at one depth
    /// always finds the same, so each is walked once here: a damaged tree costs no more
    /// than its size, and gives e2fsck's outcome.
    fn tree(&mut self, block: u32, depth: usize) -> Option<()> {
        let bytes = self.file.block(block)?;
        for child in tree_references(&bytes) {
            if child == 0 {
                continue;
            }
            if child >= self.blocks {
                return None;
            }
            if !self.seen.insert((child, depth + 1)) {
                continue;
            }
            if depth + 1 < TREE_DEPTH {
                self.tree(child, depth + 1)?;
            } else {
                self.data(child)?;
            }
        }
        Some(())
    }

    /// `report_block`: every used entry of a data block.
    fn data(&mut self, block: u32) -> Option<()> {
        let bytes = self.file.block(block)?;
        for entry in data_block_entries(&bytes) {
            self.entries.insert(
                entry.id,
                Usage {
                    space: entry.space,
                    inodes: entry.inodes,
                },
            );
        }
        Some(())
    }
}

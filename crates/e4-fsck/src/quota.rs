//! Quota usage (the quota feature): pass 1 adds up, per user, group and project, the
//! space and inodes of every inode e2fsck charges (`quota_data_add`,
//! `quota_data_inodes`), and after pass 5 each quota file's entries are compared with
//! those sums (e2fsck's `quota_compare_and_update`): an entry whose usage differs, an id
//! in use with no entry, or a file that cannot be read is `PR_6_UPDATE_QUOTAS` for its
//! type. The files are the kernel's quota tree format, v2 revision 1, whose layout
//! e4-format's `quota` module decodes; this walks its tree (`quotaio_tree.c`).

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;

use e4_format::features::RoCompatFeatures;
use e4_format::inode::{flags, Inode};
use e4_format::quota::{
    data_block_entries, tree_references, QuotaHeader, QUOTA_TYPES, TREE_BLOCK_SIZE, TREE_DEPTH,
    TREE_ROOT,
};

use crate::context::Context;
use crate::file_map::map_logical;
use crate::problem::{Location, ProblemCode};

/// What one id uses: bytes and inodes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    pub space: u64,
    pub inodes: u64,
}

/// Usage per id of each quota type; pass 1 fills one per piece of inode table and adds
/// it to the shared total once, so the scan takes no lock per inode.
#[derive(Debug, Default)]
pub struct QuotaUsage {
    per_type: [HashMap<u32, Usage>; QUOTA_TYPES],
}

impl QuotaUsage {
    /// Charges `inode` with `space` bytes and `inodes` inodes to its user, group and
    /// project (the project only where `i_projid` is within the inode's extra fields;
    /// e4-format reads it as 0 otherwise, as `get_qid` does).
    pub fn charge(&mut self, inode: &Inode, space: u64, inodes: u64) {
        let ids = [inode.uid(), inode.gid(), inode.record.projid];
        for (map, id) in self.per_type.iter_mut().zip(ids) {
            let usage = map.entry(id).or_default();
            usage.space += space;
            usage.inodes += inodes;
        }
    }

    fn add(&mut self, other: QuotaUsage) {
        for (map, other) in self.per_type.iter_mut().zip(other.per_type) {
            for (id, usage) in other {
                let total = map.entry(id).or_default();
                total.space += usage.space;
                total.inodes += usage.inodes;
            }
        }
    }
}

/// The sums of all pieces.
#[derive(Debug, Default)]
pub struct QuotaTotals {
    usage: Mutex<QuotaUsage>,
}

impl QuotaTotals {
    /// Adds one piece's usage.
    pub fn add(&self, piece: QuotaUsage) {
        self.usage
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .add(piece);
    }
}

/// Whether pass 1 charges inode `ino` (links counted): the root and every inode from
/// `s_first_ino` on, but for the project quota file and xattr value inodes
/// (`check_blocks`). An inline-data symlink e2fsck finds valid never reaches that point
/// (`valid_inline_symlink`).
pub fn charges(ctx: &Context, inode: &Inode, valid_inline_symlink: bool) -> bool {
    let ino = inode.ino;
    ctx.sb.ro_compat().contains(RoCompatFeatures::QUOTA)
        && ino != ctx.sb.prj_quota_inum
        && (ino == e4_format::inode::ROOT_INO || ino >= ctx.sb.first_ino())
        && !inode.has_flag(flags::EA_INODE)
        && !valid_inline_symlink
}

/// Compares each quota file the superblock names with the usage pass 1 found.
pub fn check(ctx: &Context) {
    let sb = &ctx.sb;
    if !sb.ro_compat().contains(RoCompatFeatures::QUOTA) {
        return;
    }
    let usage = ctx.quota.usage.lock().unwrap_or_else(|e| e.into_inner());
    let files = [sb.usr_quota_inum, sb.grp_quota_inum, sb.prj_quota_inum];
    for (qtype, &ino) in files.iter().enumerate() {
        if ino == 0 {
            continue;
        }
        let found = &usage.per_type[qtype];
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

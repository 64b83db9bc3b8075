//! Quota usage (the quota feature): pass 1 adds up, per user, group and project, the
//! space and inodes of every inode e2fsck charges (`quota_data_add`,
//! `quota_data_inodes`), and after pass 5 each quota file's entries are compared with
//! those sums (e2fsck's `quota_compare_and_update`): an entry whose usage differs, an id
//! in use with no entry, or a file that cannot be read is `PR_6_UPDATE_QUOTAS` for its
//! type. The files are the kernel's quota tree format, v2 revision 1 (`quotaio_tree.c`).

use std::collections::HashMap;
use std::sync::Mutex;

use e4_format::codec::le32;
use e4_format::extent::{ExtentNodeView, MAX_DEPTH};
use e4_format::features::RoCompatFeatures;
use e4_format::inode::{flags, Inode};

use crate::context::Context;
use crate::problem::{Location, ProblemCode};

/// The three quota types, in e2fsck's order (`USRQUOTA`, `GRPQUOTA`, `PRJQUOTA`).
const TYPES: usize = 3;
/// `dqh_magic` of each type's file.
const MAGICS: [u32; TYPES] = [0xD9C0_1F11, 0xD9C0_1927, 0xD9C0_3F14];
/// `dqh_version` of the v2r1 format.
const VERSION: u32 = 1;
/// The tree's block size (`QT_BLKSIZE`), its root block (`QT_TREEOFF`) and depth.
const TREE_BLOCK: usize = 1024;
const TREE_ROOT: u32 = 1;
const TREE_DEPTH: usize = 4;
/// A data block: a 16-byte header (`qt_disk_dqdbheader`), then 72-byte entries
/// (`v2r1_disk_dqblk`).
const DATA_HEADER: usize = 16;
const ENTRY_SIZE: usize = 72;
/// Offsets in an entry: `dqb_id`, `dqb_curinodes`, `dqb_curspace`.
const ENTRY_ID: usize = 0;
const ENTRY_INODES: usize = 24;
const ENTRY_SPACE: usize = 48;

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
    per_type: [HashMap<u32, Usage>; TYPES],
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
    let inode = ctx.read_inode(ino).ok()?;
    let file = read_file(ctx, &inode)?;
    if le32(&file, 0)? != MAGICS[qtype] || le32(&file, 4)? != VERSION {
        return None;
    }
    let mut entries = HashMap::new();
    let mut seen_data = Vec::new();
    walk_tree(&file, TREE_ROOT, 0, &mut seen_data, &mut entries)?;
    Some(entries)
}

/// Quota block `block` of the file, zeros past its end (as a read past the end gives).
fn tree_block(file: &[u8], block: u32) -> [u8; TREE_BLOCK] {
    let mut out = [0u8; TREE_BLOCK];
    let start = block as usize * TREE_BLOCK;
    if let Some(bytes) = file.get(start..) {
        let n = bytes.len().min(TREE_BLOCK);
        out[..n].copy_from_slice(&bytes[..n]);
    }
    out
}

/// `report_tree`: the references of an index block at `depth`, leading to data blocks at
/// the last level (each read once).
fn walk_tree(
    file: &[u8],
    block: u32,
    depth: usize,
    seen_data: &mut Vec<u32>,
    entries: &mut HashMap<u32, Usage>,
) -> Option<()> {
    let bytes = tree_block(file, block);
    for reference in bytes.chunks_exact(4) {
        let child = u32::from_le_bytes([reference[0], reference[1], reference[2], reference[3]]);
        if child == 0 {
            continue;
        }
        if depth + 1 < TREE_DEPTH {
            walk_tree(file, child, depth + 1, seen_data, entries)?;
        } else if !seen_data.contains(&child) {
            seen_data.push(child);
            read_data_block(&tree_block(file, child), entries);
        }
    }
    Some(())
}

/// `report_block`: every used entry of a data block (an unused one is all zeros).
fn read_data_block(bytes: &[u8; TREE_BLOCK], entries: &mut HashMap<u32, Usage>) {
    for entry in bytes[DATA_HEADER..].chunks_exact(ENTRY_SIZE) {
        if entry.iter().all(|&b| b == 0) {
            continue;
        }
        // OK to unwrap: each chunk is ENTRY_SIZE bytes, past every offset read.
        let id = le32(entry, ENTRY_ID).unwrap();
        entries.insert(
            id,
            Usage {
                space: le64(entry, ENTRY_SPACE),
                inodes: le64(entry, ENTRY_INODES),
            },
        );
    }
}

/// The little-endian u64 at `at` in an entry (inside it: see [`read_data_block`]).
fn le64(entry: &[u8], at: usize) -> u64 {
    let mut word = [0u8; 8];
    word.copy_from_slice(&entry[at..at + 8]);
    u64::from_le_bytes(word)
}

/// The contents of a small file (a quota file): its `i_size` bytes through its extent
/// tree or block map (direct and single indirect blocks); holes read as zeros. `None`
/// when a mapping block cannot be read.
fn read_file(ctx: &Context, inode: &Inode) -> Option<Vec<u8>> {
    let block_size = ctx.block_size() as usize;
    let size = usize::try_from(inode.size()).ok()?;
    let blocks = size.div_ceil(block_size);
    let mut mapped = vec![0u64; blocks];
    if inode.has_flag(flags::EXTENTS) {
        map_extents(ctx, inode.record.block.to_vec(), &mut mapped, 0)?;
    } else {
        map_block_map(ctx, inode, &mut mapped)?;
    }
    let mut file = vec![0u8; blocks * block_size];
    for (logical, &physical) in mapped.iter().enumerate() {
        if physical != 0 && ctx.is_valid_block(physical) {
            let bytes = ctx.image.read_blocks(physical, 1, ctx.block_size()).ok()?;
            file[logical * block_size..(logical + 1) * block_size].copy_from_slice(&bytes);
        }
    }
    file.truncate(size);
    Some(file)
}

/// Fills `mapped` (physical block per logical block) from the extent node in `node`.
fn map_extents(ctx: &Context, node: Vec<u8>, mapped: &mut [u64], level: u16) -> Option<()> {
    if level > MAX_DEPTH {
        return None;
    }
    let view = ExtentNodeView::new(&node, e4_format::Location::Block(0)).ok()?;
    for i in 0..view.len() {
        if view.is_leaf() {
            let extent = view.leaf(i).extent();
            for k in 0..u64::from(extent.len) {
                let logical = u64::from(extent.logical) + k;
                if let Some(slot) = usize::try_from(logical)
                    .ok()
                    .and_then(|l| mapped.get_mut(l))
                {
                    *slot = if extent.unwritten {
                        0
                    } else {
                        extent.physical + k
                    };
                }
            }
        } else {
            let child = view.index(i).leaf();
            let bytes = ctx.image.read_blocks(child, 1, ctx.block_size()).ok()?;
            map_extents(ctx, bytes, mapped, level + 1)?;
        }
    }
    Some(())
}

/// Fills `mapped` from a block map's twelve direct blocks and its single indirect block.
fn map_block_map(ctx: &Context, inode: &Inode, mapped: &mut [u64]) -> Option<()> {
    const DIRECT: usize = 12;
    let word = |bytes: &[u8], i: usize| u64::from(le32(bytes, 4 * i).unwrap_or(0));
    let i_block = &inode.record.block;
    for (logical, slot) in mapped.iter_mut().enumerate().take(DIRECT) {
        *slot = word(i_block, logical);
    }
    let indirect = word(i_block, DIRECT);
    if mapped.len() > DIRECT && indirect != 0 && ctx.is_valid_block(indirect) {
        let bytes = ctx.image.read_blocks(indirect, 1, ctx.block_size()).ok()?;
        for (i, slot) in mapped[DIRECT..].iter_mut().enumerate() {
            *slot = word(&bytes, i);
        }
    }
    Some(())
}

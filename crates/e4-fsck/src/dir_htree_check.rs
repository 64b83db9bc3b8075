//! htree directories in pass 2 (e2fsck's `parse_int_node` and the checks after the block
//! walk): the root and interior index nodes are read first, one directory per task, giving
//! each leaf the hash range its index entry promises; then every block is checked in the
//! parallel walk, where each leaf's names must hash inside its range. Leaves referenced
//! never or twice, unordered hashes and index checksums are reported here.

use std::collections::{HashMap, HashSet};

use e4_format::checksum::inode_csum_seed;
use e4_format::codec::{le16, le32};
use e4_format::dir_hash::{dir_hash, HashVersion};
use e4_format::dir_htree::{DxNode, DxRoot, MAX_LEVELS, MAX_LEVELS_LARGEDIR};
use e4_format::features::IncompatFeatures;
use e4_format::{FormatError, Location as FormatLocation, MetadataBlock};

use crate::context::Context;
use crate::pass1::Directory;
use crate::problem::{Location, ProblemCode};

/// Byte offset of the root's count/limit header (after `.`, `..` and the root info).
const ROOT_ENTRIES_OFFSET: usize = 0x20;
/// Byte offset of an interior node's count/limit header (after its fake entry).
const NODE_ENTRIES_OFFSET: usize = 8;
/// The largest hash a last leaf may hold (e2fsck's `node_max_hash` for the last entry).
const LAST_MAX_HASH: u32 = 0xffff_fffe;

/// The hash range an index entry promises one leaf.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeafRange {
    /// Smallest hash allowed.
    pub min: u32,
    /// Largest hash allowed.
    pub max: u32,
    version: HashVersion,
    seed: [u32; 4],
}

impl LeafRange {
    /// The hash of `name` as the index orders it.
    pub fn hash(&self, name: &[u8]) -> u32 {
        dir_hash(self.version, name, &self.seed).major
    }
}

/// What the index says about one htree directory's blocks.
#[derive(Debug, Clone, Default)]
pub struct HtreeLayout {
    index_blocks: HashSet<u32>,
    leaves: HashMap<u32, LeafRange>,
}

impl HtreeLayout {
    /// Whether logical block `logical` is the root or an interior index node.
    pub fn is_index_block(&self, logical: u32) -> bool {
        self.index_blocks.contains(&logical)
    }

    /// The hash range of leaf `logical`, if the index names it.
    pub fn leaf_range(&self, logical: u32) -> Option<LeafRange> {
        self.leaves.get(&logical).copied()
    }

    /// Reads and checks `dir`'s index. An invalid root is reported and leaves a layout
    /// naming only the root as an index block: the other blocks are then checked as
    /// linear leaves, as e2fsck does once it has decided to clear the index.
    pub fn check(ctx: &Context, dir: &Directory) -> Self {
        let mut walker = IndexWalker {
            ctx,
            dir,
            csum: ctx
                .csum_seed
                .map(|s| inode_csum_seed(s, dir.ino, dir.generation)),
            layout: HtreeLayout::default(),
            references: HashMap::new(),
        };
        if walker.walk_root().is_none() {
            return walker.layout;
        }
        walker.check_references();
        walker.layout
    }
}

struct IndexWalker<'a> {
    ctx: &'a Context,
    dir: &'a Directory,
    csum: Option<u32>,
    layout: HtreeLayout,
    references: HashMap<u32, u32>,
}

impl IndexWalker<'_> {
    fn report(&self, code: ProblemCode, logical: u32, message: String) {
        self.ctx.report(
            code,
            Location::DirEntry {
                dir: self.dir.ino,
                logical,
                offset: 0,
            },
            message,
        );
    }

    fn read(&self, logical: u32) -> Option<(u64, Vec<u8>)> {
        let at = self
            .dir
            .blocks
            .binary_search_by_key(&logical, |&(l, _)| l)
            .ok()?;
        let physical = self.dir.blocks[at].1;
        let bytes = self
            .ctx
            .image
            .read_blocks(physical, 1, self.ctx.block_size())
            .ok()?;
        Some((physical, bytes))
    }

    fn walk_root(&mut self) -> Option<()> {
        let ino = self.dir.ino;
        // Block 0 of an htree directory is the root, never a leaf with a checksum tail.
        self.layout.index_blocks.insert(0);
        let (physical, bytes) = self.read(0)?;
        let sb = &self.ctx.sb;
        let max_levels = if sb.incompat().contains(IncompatFeatures::LARGEDIR) {
            MAX_LEVELS_LARGEDIR
        } else {
            MAX_LEVELS
        };
        let loc = FormatLocation::InodeBlock {
            inode: ino,
            block: physical,
        };
        if !hashes_in_order(&bytes, ROOT_ENTRIES_OFFSET) {
            self.report(
                ProblemCode::PR_2_HTREE_HASH_ORDER,
                0,
                format!(
                    "problem in HTREE directory inode {ino}: block #0 has an unordered hash table"
                ),
            );
            return None;
        }
        let root = match DxRoot::parse(&bytes, self.csum.is_some(), max_levels, loc) {
            Ok(root) => root,
            Err(e) => {
                self.report(
                    ProblemCode::PR_2_HTREE_BAD_ROOT,
                    0,
                    format!("problem in HTREE directory inode {ino}: root node is invalid ({e})"),
                );
                return None;
            }
        };
        let Some(version) = HashVersion::from_disk(root.info.hash_version, sb.unsigned_dir_hash())
        else {
            self.report(
                ProblemCode::PR_2_HTREE_BAD_ROOT,
                0,
                format!(
                    "problem in HTREE directory inode {ino}: unsupported hash version {}",
                    root.info.hash_version
                ),
            );
            return None;
        };
        if let Some(seed) = self.csum {
            if let Err(FormatError::Checksum { .. }) = DxNode::verify(&bytes, seed, loc) {
                self.report(
                    ProblemCode::PR_2_HTREE_ROOT_CSUM_INVALID,
                    0,
                    format!("problem in HTREE directory inode {ino}: root node fails checksum"),
                );
            }
        }
        let template = LeafRange {
            min: 0,
            max: LAST_MAX_HASH,
            version,
            seed: sb.hash_seed,
        };
        self.walk_entries(&root.node, root.info.indirect_levels, template);
        Some(())
    }

    /// Records the children of `node`; `levels_below` index levels remain under it.
    fn walk_entries(&mut self, node: &DxNode, levels_below: u8, range: LeafRange) {
        for (i, entry) in node.entries.iter().enumerate() {
            let min = if i == 0 { range.min } else { entry.hash & !1 };
            let max = node
                .entries
                .get(i + 1)
                .map_or(range.max, |next| next.hash & !1);
            let child = LeafRange { min, max, ..range };
            // The low 28 bits are the block (the rest are reserved flags).
            let logical = entry.block & 0x0fff_ffff;
            *self.references.entry(logical).or_insert(0) += 1;
            if levels_below == 0 {
                self.layout.leaves.insert(logical, child);
            } else {
                self.walk_interior(logical, levels_below - 1, child);
            }
        }
    }

    fn walk_interior(&mut self, logical: u32, levels_below: u8, range: LeafRange) {
        let ino = self.dir.ino;
        if !self.layout.index_blocks.insert(logical) {
            return;
        }
        let Some((physical, bytes)) = self.read(logical) else {
            return;
        };
        let loc = FormatLocation::InodeBlock {
            inode: ino,
            block: physical,
        };
        if !hashes_in_order(&bytes, NODE_ENTRIES_OFFSET) {
            self.report(
                ProblemCode::PR_2_HTREE_HASH_ORDER,
                logical,
                format!("problem in HTREE directory inode {ino}: block #{logical} has an unordered hash table"),
            );
            return;
        }
        let node = match DxNode::parse(&bytes, self.csum.is_some(), loc) {
            Ok(node) => node,
            Err(e) => {
                self.report(
                    ProblemCode::PR_2_HTREE_BAD_ROOT,
                    logical,
                    format!("problem in HTREE directory inode {ino}: block #{logical} is not a valid index node ({e})"),
                );
                return;
            }
        };
        if let Some(seed) = self.csum {
            if let Err(FormatError::Checksum { .. }) = DxNode::verify(&bytes, seed, loc) {
                self.report(
                    ProblemCode::PR_2_HTREE_NODE_CSUM_INVALID,
                    logical,
                    format!("problem in HTREE directory inode {ino}: internal node fails checksum"),
                );
            }
        }
        self.walk_entries(&node, levels_below, range);
    }

    /// Every block but the root must be referenced exactly once.
    fn check_references(&self) {
        let ino = self.dir.ino;
        for &(logical, _) in self.dir.blocks.iter().filter(|&&(l, _)| l != 0) {
            match self.references.get(&logical).copied().unwrap_or(0) {
                0 => self.report(
                    ProblemCode::PR_2_HTREE_NOTREF,
                    logical,
                    format!(
                        "problem in HTREE directory inode {ino}: block #{logical} not referenced"
                    ),
                ),
                1 => {}
                _ => self.report(
                    ProblemCode::PR_2_HTREE_DUPREF,
                    logical,
                    format!(
                        "problem in HTREE directory inode {ino}: block #{logical} referenced twice"
                    ),
                ),
            }
        }
    }
}

/// Whether the index entries at `offset` (limit, count, then hash/block pairs, the first
/// without a hash) have non-decreasing hashes. Out-of-range counts are left to the parser.
fn hashes_in_order(block: &[u8], offset: usize) -> bool {
    let count = usize::from(le16(block, offset + 2).unwrap_or(0));
    let hashes: Vec<u32> = (1..count)
        .map_while(|i| le32(block, offset + 8 * i))
        .collect();
    hashes.windows(2).all(|w| w[0] <= w[1])
}

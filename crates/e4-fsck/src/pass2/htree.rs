//! htree directories in pass 2 (e2fsck's `parse_int_node` and the checks after the block
//! walk): the root and interior index nodes are read first, one directory per task, giving
//! each leaf the hash range its index entry promises; then every block is checked in the
//! parallel walk, where each leaf's names must hash inside its range. Leaves referenced
//! never or twice, unordered hashes and index checksums are reported here.
//!
//! Depth is judged as e2fsck judges it: a block is an interior node by its content (an
//! empty entry spanning the block, then an interior node's limit), not by its place under
//! the root, and every leaf must lie `indirect_levels + 1` nodes below the root
//! (`PR_2_HTREE_BAD_DEPTH`). A root claiming more levels than the filesystem allows is
//! reported (`PR_2_HTREE_BAD_ROOT`, and `PR_1_HTREE_DEPTH` and the missing large_dir
//! feature as e2fsck's pass 1 `handle_htree` reports them) and its index still walked, as
//! `e2fsck -n` walks it.
//!
//! As in e2fsck, every block with an interior node's content is parsed, named by an
//! index entry or not (`check_dir_block` calls `parse_int_node` for each), so an
//! unreferenced node's entries are checked and its children referenced. A leaf is
//! held to the range its own entry gives it (no lower bound for a node's first child,
//! `0xfffffffe` for its last); a node's first and last leaves hand their lowest and
//! highest hashes up to it after pass 2's walk (`update_parents`), and the node is
//! compared with the range its parent's entry gives it, so a leaf out of its node's
//! range is reported at the node, where e2fsck reports it.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use e4_format::checksum::inode_csum_seed;
use e4_format::codec::{le16, le32};
use e4_format::dir_entry::{rec_len_from_disk, EntryHashes};
use e4_format::dir_hash::{dir_hash, HashVersion};
use e4_format::dir_htree::{DxNode, DxRoot, DxRootInfo, MAX_LEVELS, MAX_LEVELS_LARGEDIR};
use e4_format::features::IncompatFeatures;
use e4_format::superblock::Superblock;
use e4_format::{FormatError, Location as FormatLocation, MetadataBlock};

use crate::pass2::casefold_hash::{hashed_name, HashedName};
use crate::report::problem::{Location, ProblemCode};
use crate::state::context::Context;
use crate::state::directories::{DirBlock, Directory, HOLE_REPORTS_PER_DIRECTORY};

/// Byte offset of the root's count/limit header (after `.`, `..` and the root info).
const ROOT_ENTRIES_OFFSET: usize = 0x20;
/// Byte offset of `dx_root_info` in block 0 (after `.` and `..`).
const ROOT_INFO_OFFSET: usize = 24;
/// `dx_root_info.info_length`: at least 8.
const ROOT_INFO_LENGTH: u8 = 8;
/// `EXT2_HASH_FLAG_INCOMPAT` in `unused_flags`: a root this e2fsck does not understand.
const HASH_FLAG_INCOMPAT: u8 = 0x1;
/// Hash versions a root may name on disk: legacy, half-MD4, TEA (the unsigned variants
/// are the superblock's business, not the root's).
const DISK_HASH_VERSIONS: [u8; 3] = [0, 1, 2];
/// `EXT2_HASH_SIPHASH`: only for encrypted and casefolded directories, which keep each
/// name's hash in its entry.
const HASH_SIPHASH: u8 = 6;
/// Byte offset of an interior node's count/limit header (after its fake entry).
const NODE_ENTRIES_OFFSET: usize = 8;
/// The largest hash a last leaf may hold (e2fsck's `node_max_hash` for the last entry).
const LAST_MAX_HASH: u32 = 0xffff_fffe;
/// Bytes of `dx_tail` (reserved word and checksum) after an index with metadata_csum.
const DX_TAIL_SIZE: usize = 8;
/// Bytes of one index entry (hash, block).
const DX_ENTRY_SIZE: usize = 8;
/// Index levels past which a tree is broken whatever the features (`EXT4_HTREE_LEVEL`).
const HTREE_LEVEL: u8 = MAX_LEVELS_LARGEDIR;
/// Index levels a directory may have without large_dir (`EXT4_HTREE_LEVEL_COMPAT`).
const HTREE_LEVEL_COMPAT: u8 = MAX_LEVELS;
/// A directory of this size needs large_dir (`ext2fs_needs_large_file_feature`).
const LARGE_FILE_SIZE: u64 = 1 << 31;
/// The bits of an index entry's `block` that name the block (`EXT4_DX_BLOCK_MASK`; the
/// rest are reserved flags).
const DX_BLOCK_MASK: u32 = 0x0fff_ffff;
/// Nodes below the root the walk follows; deeper blocks are taken as leaves (at the wrong
/// depth), so a chain of crafted nodes cannot exhaust the stack.
const MAX_WALK_DEPTH: u32 = 16;

/// The hash range an index entry promises one leaf.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeafRange {
    /// Smallest hash allowed.
    pub min: u32,
    /// Largest hash allowed.
    pub max: u32,
    hash: NameHash,
    seed: [u32; 4],
    /// The directory is casefolded: names are hashed case-folded (a name that is not
    /// UTF-8 as it is, as `ext2fs_dirhash2` falls back to).
    casefold: bool,
}

/// Where the hash that places a name in the index comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum NameHash {
    /// Computed from the name, with this version and the superblock's seed.
    Computed(HashVersion),
    /// SipHash, which the kernel keys from the directory's encryption key, so no checker
    /// can compute it: read from the hashes stored after each name
    /// ([`EntryHashes`]). e2fsck reads them whenever the root names SipHash, whether or
    /// not the directory keeps hashes in its entries (then what follows the name).
    Stored,
}

impl LeafRange {
    /// The hash by which the index orders the entry that `record` begins with, whose
    /// name is `name` (its bytes after the header); `None` for a name e2fsck gets no
    /// hash for (in a casefolded directory, see [`hashed_name`]: pass 2 then keeps the
    /// previous entry's, which adds nothing to the leaf's range).
    pub fn hash(&self, name: &[u8], record: &[u8]) -> Option<u32> {
        match self.hash {
            NameHash::Computed(version) => {
                let hashed = if self.casefold {
                    match hashed_name(name) {
                        HashedName::Bytes(bytes) => bytes,
                        HashedName::Unhashed => return None,
                    }
                } else {
                    Cow::Borrowed(name)
                };
                Some(dir_hash(version, &hashed, &self.seed).major)
            }
            NameHash::Stored => Some(EntryHashes::read(record, name.len()).hash),
        }
    }
}

/// What the index says about one htree directory's blocks.
#[derive(Debug, Default)]
pub struct HtreeLayout {
    index_blocks: HashSet<u32>,
    leaves: HashMap<u32, LeafRange>,
    /// A problem of e2fsck's last look at the index was found (see
    /// [`HtreeLayout::note`]); pass 2's leaf checks add theirs from any thread.
    invalid: AtomicBool,
    /// What the index entries naming each block say of it.
    named: HashMap<u32, Naming>,
    /// Each interior node (not the root): the lowest and highest hash of its entries
    /// that name a block inside the directory (`parse_int_node`'s `min_hash` and
    /// `max_hash`, `(0xffffffff, 0)` when none does).
    nodes: BTreeMap<u32, (u32, u32)>,
    /// Each leaf pass 2 read: the lowest and highest hash of its names, `(0xffffffff,
    /// 0)` when it has none (`check_dir_block`'s `min_hash` and `max_hash`).
    leaf_hashes: Mutex<HashMap<u32, (u32, u32)>>,
}

/// What e2fsck's record of a block named by index entries holds (`dx_dirblock_info`):
/// the first entry naming it sets its parent; each later one overwrites its range and
/// previous sibling and adds its flags.
#[derive(Debug, Clone, Copy)]
struct Naming {
    parent: u32,
    /// The block the entry before names (0 for a first entry).
    previous: u32,
    /// Named by a node's first entry (`DX_FLAG_FIRST`): no lower bound.
    first: bool,
    /// Named by a node's last entry (`DX_FLAG_LAST`).
    last: bool,
    /// The entry's hash (0 for a first entry) and the next entry's (`0xfffffffe` after
    /// the last).
    node_min: u32,
    node_max: u32,
}

impl HtreeLayout {
    /// Notes a problem reported against this index: e2fsck's last look at an index
    /// (after pass 2's walk) counts bad min and max hashes, leaves at the wrong depth
    /// and blocks referenced never or twice, and asks to clear an index with any of
    /// them (`PR_2_HTREE_CLEAR`).
    pub fn note(&self, code: ProblemCode) {
        if matches!(
            code,
            ProblemCode::PR_2_HTREE_MIN_HASH
                | ProblemCode::PR_2_HTREE_MAX_HASH
                | ProblemCode::PR_2_HTREE_BAD_DEPTH
                | ProblemCode::PR_2_HTREE_NOTREF
                | ProblemCode::PR_2_HTREE_DUPREF
        ) {
            self.invalid.store(true, Ordering::Relaxed);
        }
    }

    /// Whether e2fsck asks to clear this index (`PR_2_HTREE_CLEAR`).
    pub fn is_invalid(&self) -> bool {
        self.invalid.load(Ordering::Relaxed)
    }

    /// Whether logical block `logical` is the root or an interior index node.
    pub fn is_index_block(&self, logical: u32) -> bool {
        self.index_blocks.contains(&logical)
    }

    /// The hash range of leaf `logical`, if the index names it.
    pub fn leaf_range(&self, logical: u32) -> Option<LeafRange> {
        self.leaves.get(&logical).copied()
    }

    /// Records the hashes of the names in leaf `logical` (`None`: it has none), for
    /// [`HtreeLayout::check_node_hashes`].
    pub fn record_leaf_hashes(&self, logical: u32, bounds: Option<(u32, u32)>) {
        self.leaf_hashes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(logical, bounds.unwrap_or((u32::MAX, 0)));
    }

    /// e2fsck's last look at each interior node's hashes, once pass 2 has read every
    /// leaf: `update_parents` for leaves, then for nodes (in block order, each first
    /// child giving its parent its lowest hash and moving the bound of the parent's
    /// previous sibling to it, each last child its highest), then each node's lowest
    /// hash against its entry's (not for a first child) and its highest against the
    /// next entry's (`PR_2_HTREE_MIN_HASH`, `PR_2_HTREE_MAX_HASH`, at the node). A
    /// node's range as a leaf's parent moves only in the nodes' own check: the leaves
    /// were held to theirs in pass 2.
    pub fn check_node_hashes(&self, ctx: &Context, ino: u32) {
        let mut leaves: Vec<(u32, (u32, u32))> =
            std::mem::take(&mut *self.leaf_hashes.lock().unwrap_or_else(|e| e.into_inner()))
                .into_iter()
                .collect();
        leaves.sort_unstable();
        let mut hashes = self.nodes.clone();
        let mut moved_bounds = HashMap::new();
        for (logical, (min, max)) in leaves {
            self.hand_up(logical, min, max, &mut hashes, &mut moved_bounds);
        }
        for &logical in self.nodes.keys() {
            if let Some(&(min, max)) = hashes.get(&logical) {
                self.hand_up(logical, min, max, &mut hashes, &mut moved_bounds);
            }
        }
        for (&logical, &(min, max)) in &hashes {
            let naming = self.named.get(&logical);
            let node_min = naming.map_or(0, |n| n.node_min);
            let node_max = moved_bounds
                .get(&logical)
                .copied()
                .unwrap_or(naming.map_or(0, |n| n.node_max));
            let location = Location::DirEntry {
                dir: ino,
                logical,
                offset: 0,
            };
            let report = |code: ProblemCode, which: &str| {
                self.note(code);
                ctx.report(
                    code,
                    location,
                    format!("problem in HTREE directory inode {ino}: block #{logical} has bad {which} hash"),
                );
            };
            if !naming.is_some_and(|n| n.first) && min < node_min {
                report(ProblemCode::PR_2_HTREE_MIN_HASH, "min");
            }
            if max > node_max {
                report(ProblemCode::PR_2_HTREE_MAX_HASH, "max");
            }
        }
    }

    /// One step of e2fsck's `update_parents`: block `child`, whose hashes run from `min`
    /// to `max`, gives them to its parent node in `hashes` if it is the parent's first
    /// or last child; a first child also moves the upper bound of the parent's previous
    /// sibling to `min` (recorded in `moved_bounds`).
    fn hand_up(
        &self,
        child: u32,
        min: u32,
        max: u32,
        hashes: &mut BTreeMap<u32, (u32, u32)>,
        moved_bounds: &mut HashMap<u32, u32>,
    ) {
        let Some(naming) = self.named.get(&child) else {
            return;
        };
        // The root's own hashes are never compared.
        let Some(parent) = hashes.get_mut(&naming.parent) else {
            return;
        };
        if naming.first {
            parent.0 = min;
            if let Some(previous) = self.named.get(&naming.parent).map(|p| p.previous) {
                if previous != 0 {
                    moved_bounds.insert(previous, min);
                }
            }
        }
        if naming.last {
            parent.1 = max;
        }
    }

    /// Reads and checks `dir`'s index. An invalid root is reported and leaves a layout
    /// naming only the root as an index block: the other blocks are then checked as
    /// linear leaves, as e2fsck does once it has decided to clear the index.
    /// `blocks` are the directory's, in logical order.
    pub fn check(ctx: &Context, dir: &Directory, blocks: &[DirBlock]) -> Self {
        let mut walker = IndexWalker {
            ctx,
            dir,
            blocks,
            csum: ctx
                .csum_seed
                .map(|s| inode_csum_seed(s, dir.ino, dir.generation)),
            layout: HtreeLayout::default(),
            references: HashMap::new(),
            depth: 0,
            unreferenced_leaf: None,
            template: None,
        };
        if walker.walk_root().is_none() {
            if walker.physical(0).is_some() {
                return walker.layout;
            }
            // Block 0 is a hole: e2fsck declines to allocate it and keeps the index,
            // whose root it never reads, so no block is referenced, the tree's depth is
            // 0 and names hash with the default version (legacy).
            walker.depth = 0;
            walker.unreferenced_leaf = Some(LeafRange {
                min: 0,
                max: 0,
                hash: NameHash::Computed(HashVersion::Legacy),
                seed: ctx.sb.hash_seed,
                casefold: dir.casefold(),
            });
        }
        walker.walk_unreferenced_nodes();
        walker.check_references();
        walker.layout
    }
}

struct IndexWalker<'a> {
    ctx: &'a Context,
    dir: &'a Directory,
    /// The directory's blocks, in logical order.
    blocks: &'a [DirBlock],
    csum: Option<u32>,
    layout: HtreeLayout,
    references: HashMap<u32, u32>,
    /// How many nodes each leaf must lie below the root: `indirect_levels + 1`.
    depth: u32,
    /// The range a leaf no index entry names is held to: e2fsck's record of it keeps
    /// `node_min_hash` and `node_max_hash` 0, so any name hashing above 0 is past it.
    unreferenced_leaf: Option<LeafRange>,
    /// The hash version and seed of a root that could be read, with the widest range.
    template: Option<LeafRange>,
}

impl IndexWalker<'_> {
    /// A leaf at `logical` reached at another depth than the root's `indirect_levels` say
    /// (`PR_2_HTREE_BAD_DEPTH`).
    fn report_bad_depth(&self, logical: u32) {
        let ino = self.dir.ino;
        self.report(
            ProblemCode::PR_2_HTREE_BAD_DEPTH,
            logical,
            format!(
                "problem in HTREE directory inode {ino}: block #{logical} has invalid depth ({})",
                self.depth
            ),
        );
    }

    fn report(&self, code: ProblemCode, logical: u32, message: String) {
        self.layout.note(code);
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

    /// The directory's length in blocks as e2fsck's index check sees it: one past its
    /// last mapped logical block (`e2fsck_add_dx_dir`'s `pb.last_block + 1`).
    fn dir_block_count(&self) -> u32 {
        self.blocks
            .last()
            .map_or(0, |b| b.logical.saturating_add(1))
    }

    fn physical(&self, logical: u32) -> Option<u64> {
        let at = self
            .blocks
            .binary_search_by_key(&logical, |b| b.logical)
            .ok()?;
        Some(self.blocks[at].physical)
    }

    fn read(&self, logical: u32) -> Option<(u64, Vec<u8>)> {
        let physical = self.physical(logical)?;
        let bytes = self
            .ctx
            .image
            .read_blocks(physical, 1, self.ctx.block_size())
            .ok()?;
        Some((physical, bytes))
    }

    /// e2fsck's test for an interior node (`check_dir_block`): an entry with inode 0 and
    /// no name spanning the whole block, followed by the limit an interior node has. Only
    /// the first ten bytes are read, so probing a leaf costs one small read.
    fn is_index_node(&self, logical: u32) -> bool {
        let Some(physical) = self.physical(logical) else {
            return false;
        };
        let block_size = self.ctx.block_size() as usize;
        let mut head = [0u8; 10];
        let at = physical.saturating_mul(block_size as u64);
        if self.ctx.image.read_at(at, &mut head).is_err() {
            return false;
        }
        let tail = if self.csum.is_some() { DX_TAIL_SIZE } else { 0 };
        let limit = (block_size - (NODE_ENTRIES_OFFSET + tail)) / DX_ENTRY_SIZE;
        le32(&head, 0) == Some(0)
            && le16(&head, 4).map(|l| rec_len_from_disk(l, block_size)) == Some(block_size)
            && head[6] == 0
            && le16(&head, 8).map(usize::from) == Some(limit)
    }

    /// Reports a pass 1 problem with the root (e2fsck's `handle_htree`), at the inode.
    fn report_root_info(&self, code: ProblemCode, what: String) {
        let ino = self.dir.ino;
        self.ctx.report(
            code,
            Location::Inode(ino),
            format!("HTREE directory inode {ino} {what}"),
        );
    }

    /// e2fsck's pass 1 checks of the root (`handle_htree`), each reported and the next
    /// still made, as `e2fsck -n` declines each repair: `reserved_zero` and
    /// `info_length`, the hash version, the incompatible flag, then the depth.
    fn check_root_info(&self, info: &DxRootInfo) {
        if info.reserved_zero != 0 || info.info_length < ROOT_INFO_LENGTH {
            self.report_root_info(
                ProblemCode::PR_1_HTREE_BADROOT,
                "has an invalid root node".into(),
            );
        }
        let version = info.hash_version;
        if version != HASH_SIPHASH && !DISK_HASH_VERSIONS.contains(&version) {
            self.report_root_info(
                ProblemCode::PR_1_HTREE_HASHV,
                format!("has an unsupported hash version ({version})"),
            );
        }
        // By the inode's flags alone (`ext4_hash_in_dirent`), whatever its context.
        if self.dir.siphash() && version != HASH_SIPHASH {
            self.report_root_info(
                ProblemCode::PR_1_HTREE_NEEDS_SIPHASH,
                format!("uses hash version ({version}), but should use SipHash (6)"),
            );
        } else if !self.dir.siphash() && version == HASH_SIPHASH {
            self.report_root_info(
                ProblemCode::PR_1_HTREE_CANNOT_SIPHASH,
                "uses SipHash, but should not".into(),
            );
        }
        if info.unused_flags & HASH_FLAG_INCOMPAT != 0 {
            self.report_root_info(
                ProblemCode::PR_1_HTREE_INCOMPAT,
                "uses an incompatible htree root node flag".into(),
            );
        }
        self.check_depth_limits(info.indirect_levels);
    }

    /// e2fsck's pass 1 limits on the depth a root claims (`handle_htree`): more than
    /// [`HTREE_LEVEL`] levels, or more than the filesystem allows without large_dir in a
    /// directory too small to need them (both reported when both hold, as e2fsck -n
    /// does); and a directory deep or large enough to need large_dir when the feature is
    /// missing (`PR_2_FEATURE_LARGE_DIRS`, reported once for the filesystem).
    fn check_depth_limits(&self, levels: u8) {
        let ino = self.dir.ino;
        let sb = &self.ctx.sb;
        let large_dir = sb.incompat().contains(IncompatFeatures::LARGEDIR);
        let allowed = if large_dir {
            MAX_LEVELS_LARGEDIR
        } else {
            MAX_LEVELS
        };
        let loc = Location::Inode(ino);
        if levels > HTREE_LEVEL {
            self.ctx.report(
                ProblemCode::PR_1_HTREE_DEPTH,
                loc,
                format!("HTREE directory inode {ino} has a tree depth ({levels}) which is too big (more than {HTREE_LEVEL})"),
            );
        }
        let (max_size, max_blocks) = two_level_bounds(sb);
        if levels > allowed
            && !large_dir
            && self.dir.size < max_size
            && self.dir.i_blocks_lo < max_blocks
        {
            self.ctx.report(
                ProblemCode::PR_1_HTREE_DEPTH,
                loc,
                format!("HTREE directory inode {ino} has a tree depth ({levels}) which is too big without large_dir"),
            );
        }
        if (levels > HTREE_LEVEL_COMPAT || self.dir.size >= LARGE_FILE_SIZE) && !large_dir {
            self.ctx.report(
                ProblemCode::PR_2_FEATURE_LARGE_DIRS,
                Location::Superblock,
                "filesystem has large directories, but lacks LARGE_DIR flag in superblock",
            );
        }
    }

    fn walk_root(&mut self) -> Option<()> {
        let ino = self.dir.ino;
        // Block 0 of an htree directory is the root, never a leaf with a checksum tail.
        self.layout.index_blocks.insert(0);
        let Some((physical, bytes)) = self.read(0) else {
            self.report_root_info(
                ProblemCode::PR_1_HTREE_BADROOT,
                "has an invalid root node (no block 0)".into(),
            );
            return None;
        };
        let sb = &self.ctx.sb;
        if self.dir.root_unmappable() {
            // e2fsck stops its root checks there and keeps the index (declined).
            self.report_root_info(
                ProblemCode::PR_1_HTREE_BADROOT,
                "has an invalid root node (block 0 cannot be mapped)".into(),
            );
        } else if let Some(info) = bytes
            .get(ROOT_INFO_OFFSET..ROOT_INFO_OFFSET + DxRootInfo::SIZE)
            .and_then(|raw| raw.try_into().ok())
            .map(DxRootInfo::decode)
        {
            self.check_root_info(&info);
        }
        let max_levels = if sb.incompat().contains(IncompatFeatures::LARGEDIR) {
            MAX_LEVELS_LARGEDIR
        } else {
            MAX_LEVELS
        };
        let loc = FormatLocation::InodeBlock {
            inode: ino,
            block: physical,
        };
        let entries = self.check_count_limit(0, &bytes, ROOT_ENTRIES_OFFSET);
        if !hashes_in_order(&entries, ROOT_ENTRIES_OFFSET) {
            self.report(
                ProblemCode::PR_2_HTREE_HASH_ORDER,
                0,
                format!(
                    "problem in HTREE directory inode {ino}: block #0 has an unordered hash table"
                ),
            );
            return None;
        }
        // The level limit is checked below, as e2fsck checks it, and the index is walked
        // whatever the root claims.
        let root = match DxRoot::parse(&entries, self.csum.is_some(), u8::MAX, loc) {
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
        let levels = root.info.indirect_levels;
        if levels >= max_levels {
            self.report(
                ProblemCode::PR_2_HTREE_BAD_ROOT,
                0,
                format!(
                    "problem in HTREE directory inode {ino}: root node is invalid ({} index levels, at most {max_levels})",
                    u32::from(levels) + 1
                ),
            );
        }
        self.depth = u32::from(levels) + 1;
        // A version the root may not name was reported in pass 1 (`PR_1_HTREE_HASHV`);
        // without it no name can be hashed, so the leaves are not checked against ranges.
        let hash = if root.info.hash_version == HASH_SIPHASH {
            NameHash::Stored
        } else {
            DISK_HASH_VERSIONS
                .contains(&root.info.hash_version)
                .then(|| HashVersion::from_disk(root.info.hash_version, sb.unsigned_dir_hash()))
                .flatten()
                .map(NameHash::Computed)?
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
            hash,
            seed: sb.hash_seed,
            casefold: self.dir.casefold(),
        };
        self.unreferenced_leaf = Some(LeafRange { max: 0, ..template });
        self.template = Some(template);
        self.walk_entries(&root.node, 0, 1, template);
        Some(())
    }

    /// Records the children of `node` (block `node_logical`), which lie `depth` nodes
    /// below the root: an interior node is walked, a leaf gets the hash range its entry
    /// gives it and must be at the depth the root claims. Each child's naming is
    /// recorded as e2fsck's `parse_int_node` records it, and an interior node's own
    /// lowest and highest entry hash.
    fn walk_entries(&mut self, node: &DxNode, node_logical: u32, depth: u32, template: LeafRange) {
        let ino = self.dir.ino;
        let mut entry_hashes = (u32::MAX, 0u32);
        let count = node.entries.len();
        for (i, entry) in node.entries.iter().enumerate() {
            let min = if i == 0 { 0 } else { entry.hash & !1 };
            let max = node
                .entries
                .get(i + 1)
                .map_or(LAST_MAX_HASH, |next| next.hash & !1);
            let child = LeafRange {
                min,
                max,
                ..template
            };
            // The low 28 bits are the block (the rest are reserved flags).
            let logical = entry.block & DX_BLOCK_MASK;
            if logical >= self.dir_block_count() {
                self.report(
                    ProblemCode::PR_2_HTREE_BADBLK,
                    0,
                    format!("problem in HTREE directory inode {ino}: bad block number {logical}"),
                );
                continue;
            }
            entry_hashes = (entry_hashes.0.min(min), entry_hashes.1.max(min));
            let previous = i
                .checked_sub(1)
                .map_or(0, |p| node.entries[p].block & DX_BLOCK_MASK);
            let naming = self.layout.named.entry(logical).or_insert(Naming {
                parent: node_logical,
                previous,
                first: false,
                last: false,
                node_min: min,
                node_max: max,
            });
            naming.previous = previous;
            naming.node_min = min;
            naming.node_max = max;
            naming.first |= i == 0;
            naming.last |= i + 1 == count;
            *self.references.entry(logical).or_insert(0) += 1;
            if depth < MAX_WALK_DEPTH && self.is_index_node(logical) {
                self.walk_interior(logical, depth, template);
                continue;
            }
            self.layout.leaves.insert(logical, child);
            if self.physical(logical).is_none() {
                // A hole, which e2fsck declines to allocate, is never read: its record
                // keeps no hashes, so one that is not its node's first child has a min
                // hash below its range (and its depth is not judged).
                if i > 0 && min > 0 {
                    self.report(
                        ProblemCode::PR_2_HTREE_MIN_HASH,
                        logical,
                        format!("problem in HTREE directory inode {ino}: block #{logical} has bad min hash"),
                    );
                }
                continue;
            }
            if depth != self.depth {
                self.report_bad_depth(logical);
            }
        }
        if node_logical != 0 {
            self.layout.nodes.insert(node_logical, entry_hashes);
        }
    }

    /// e2fsck's checks of the count/limit header at `offset` in index block `logical`
    /// (`parse_int_node`): a limit other than the block's capacity
    /// (`PR_2_HTREE_BAD_LIMIT`) and a count past it (`PR_2_HTREE_BAD_COUNT`, after which
    /// e2fsck reads entries up to the capacity), each reported and declined. Returns
    /// the block as e2fsck goes on to read it, its header set to the capacity where it
    /// was wrong (the checksum is verified on the block as stored).
    fn check_count_limit(&self, logical: u32, bytes: &[u8], offset: usize) -> Vec<u8> {
        let ino = self.dir.ino;
        let tail = if self.csum.is_some() { DX_TAIL_SIZE } else { 0 };
        let capacity = bytes.len().saturating_sub(offset + tail) / DX_ENTRY_SIZE;
        let capacity = u16::try_from(capacity).unwrap_or(u16::MAX);
        let mut entries = bytes.to_vec();
        let mut report = |code: ProblemCode, at: usize, field: &str, found: u16| {
            // OK to index: `le16` read these two bytes of a block as long.
            entries[at..at + 2].copy_from_slice(&capacity.to_le_bytes());
            self.report(
                code,
                logical,
                format!("problem in HTREE directory inode {ino}: block #{logical} has invalid {field} ({found})"),
            );
        };
        if let Some(limit) = le16(bytes, offset).filter(|&l| l != capacity) {
            report(ProblemCode::PR_2_HTREE_BAD_LIMIT, offset, "limit", limit);
        }
        if let Some(count) = le16(bytes, offset + 2).filter(|&c| c > capacity) {
            report(
                ProblemCode::PR_2_HTREE_BAD_COUNT,
                offset + 2,
                "count",
                count,
            );
        }
        entries
    }

    /// Walks interior node `logical`, `depth` nodes below the root.
    fn walk_interior(&mut self, logical: u32, depth: u32, range: LeafRange) {
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
        let entries = self.check_count_limit(logical, &bytes, NODE_ENTRIES_OFFSET);
        if !hashes_in_order(&entries, NODE_ENTRIES_OFFSET) {
            self.report(
                ProblemCode::PR_2_HTREE_HASH_ORDER,
                logical,
                format!("problem in HTREE directory inode {ino}: block #{logical} has an unordered hash table"),
            );
            return;
        }
        let node = match DxNode::parse(&entries, self.csum.is_some(), loc) {
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
        self.walk_entries(&node, logical, depth + 1, range);
    }

    /// Parses each block with an interior node's content that no entry named in the walk
    /// from the root, as e2fsck's pass 2 parses every such block: its entries are
    /// checked and its children referenced. Its own record names no parent, which
    /// e2fsck reads as the root, so its leaves must lie two nodes down.
    fn walk_unreferenced_nodes(&mut self) {
        let Some(template) = self.template else {
            return;
        };
        let blocks = self.blocks;
        for logical in blocks.iter().map(|b| b.logical) {
            if logical != 0
                && !self.references.contains_key(&logical)
                && !self.layout.index_blocks.contains(&logical)
                && self.is_index_node(logical)
            {
                self.walk_interior(logical, 1, template);
            }
        }
    }

    /// Every block but the root must be referenced exactly once. e2fsck looks at every
    /// block number below the directory's end, holes included (a hole no entry names is
    /// unreferenced too). A leaf no entry names is judged as e2fsck judges it: its
    /// parent is taken to be the root (so it is at the wrong depth unless the tree has
    /// one level) and its names must hash to 0 (pass 2, through its range).
    fn check_references(&mut self) {
        let ino = self.dir.ino;
        let not_referenced = |walker: &Self, logical: u32| {
            walker.report(
                ProblemCode::PR_2_HTREE_NOTREF,
                logical,
                format!("problem in HTREE directory inode {ino}: block #{logical} not referenced"),
            );
        };
        let mut holes_reported = 0;
        let mut next = 1u32;
        let blocks = self.blocks;
        for logical in blocks.iter().map(|b| b.logical).filter(|&l| l != 0) {
            // The holes before this block: each one named by no entry is reported, up
            // to as many as pass 1 reports holes, the rest in one report (each step
            // below meets a referenced block, of which there are few, or reports).
            for hole in next..logical {
                if holes_reported > HOLE_REPORTS_PER_DIRECTORY {
                    break;
                }
                if self.references.contains_key(&hole) {
                    continue;
                }
                holes_reported += 1;
                if holes_reported <= HOLE_REPORTS_PER_DIRECTORY {
                    not_referenced(self, hole);
                } else {
                    self.report(
                        ProblemCode::PR_2_HTREE_NOTREF,
                        hole,
                        format!("problem in HTREE directory inode {ino}: more blocks from #{hole} not referenced"),
                    );
                }
            }
            next = logical.saturating_add(1);
            match self.references.get(&logical).copied().unwrap_or(0) {
                0 => {
                    not_referenced(self, logical);
                    self.judge_unreferenced_leaf(logical);
                }
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

    /// Gives mapped block `logical`, which no index entry names, the range and depth
    /// check of e2fsck's zeroed record, unless its content is an interior node's (parsed
    /// by [`IndexWalker::walk_unreferenced_nodes`]).
    fn judge_unreferenced_leaf(&mut self, logical: u32) {
        let Some(range) = self.unreferenced_leaf else {
            return;
        };
        if self.layout.is_index_block(logical) || self.is_index_node(logical) {
            return;
        }
        self.layout.leaves.insert(logical, range);
        if self.depth != 1 {
            self.report_bad_depth(logical);
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

/// The size and `i_blocks_lo` below which a directory cannot need more than two index
/// levels, as e2fsck 1.47.0's `handle_htree` computes them: `(idx_pb - 1) * (idx_pb - 2)
/// << blockbits` with `blockbits = EXT2_BLOCK_SIZE_BITS + 10` and `idx_pb = 1 <<
/// (blockbits - 3)`, in C `int` arithmetic, which wraps; the size is compared with the
/// result widened to 64 bits, `i_blocks_lo` with it as unsigned 32 bits. Computed the same
/// way here so the verdicts match bit for bit.
fn two_level_bounds(sb: &Superblock) -> (u64, u32) {
    let blockbits = sb.log_block_size.min(6) + 20;
    let idx_pb: i32 = 1 << (blockbits - 3);
    let product = (idx_pb - 1).wrapping_mul(idx_pb - 2);
    let max_size = i64::from(product.wrapping_shl(blockbits)) as u64;
    let max_blocks = product.wrapping_shl(blockbits - 9) as u32;
    (max_size, max_blocks)
}

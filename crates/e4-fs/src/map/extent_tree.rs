//! Changing an inode's extent tree: insert, remove (punch and truncate), the unwritten →
//! written conversion and shifting extents along the file (`shift.rs`), following the
//! kernel's shapes (`fs/ext4/extents.c`) so that what e4 writes is what the kernel would
//! have written, and `e2fsck -fn` passes it silently.
//!
//! The tree works through [`MetaIo`] only, so it runs the same on the engine's transaction and
//! on the in-memory store its tests use. Nodes are written as [`BlockKind::ExtentNode`] and
//! sealed by the engine at write-back (`ExtentNode`'s [`e4_format::MetadataBlock::seal`]).
//!
//! Two rules shape everything here (reference/write-path.md §1):
//! - **Kernel shapes.** Merge with a same-state, logically and physically adjacent neighbour in
//!   the leaf; else insert sorted; else split (`ext4_ext_split`: new nodes take the entries right
//!   of the insertion point; appending leaves the old leaf full); else grow (root copied to a new
//!   block). Index keys equal each child's first logical block all the way up.
//! - **e2fsck's shape rule.** `e2fsck` (pass 1, `e2fsck_should_rebuild_extents`) offers to
//!   rebuild a tree whose level could be narrower (free slots at a level, counting one slot fewer
//!   in each non-full non-root node, exceed one block's worth) or shorter (a level holds fewer
//!   entries than a shallower level has slots). Operations that add nodes or shrink nodes check
//!   it afterwards and, if it fails, re-pack the whole tree into the blocks it already owns.
//!
//! Failure atomicity: every block an insert needs (split and grow) is allocated before anything
//! is changed, and given back if one allocation fails, so `NoSpace` leaves the tree as it was.
//! Operations that need a new entry in a full leaf (a punch inside one extent, a conversion of
//! the middle of an unwritten extent) first split the extent at the range edge the same way;
//! that split maps the same blocks, so a later failure leaves the mapping unchanged. Re-packing
//! never allocates (a packed tree needs no more blocks than any valid one holding the same
//! extents). Errors from [`MetaIo::write`] mid-operation are not undone: the transaction that
//! owns the buffers must be aborted.

use e4_format::extent::{
    Extent, ExtentEntries, ExtentHeader, ExtentIndex, ExtentLeaf, ExtentNode, ExtentNodeView,
    ENTRY_SIZE, EXTENT_MAGIC, MAX_DEPTH, MAX_INIT_LEN,
};
use e4_format::inode::I_BLOCK_SIZE;
use e4_format::{FormatError, Location, Problem, Structure};

use crate::error::{Error, Result};
use crate::io::credits::NEW_BLOCK;
use crate::io::meta_io::{look_at, BlockKind, MetaIo, Owner};

/// `eh_max` of the root node in `i_block`: (60 - 12) / 12.
const ROOT_MAX_ENTRIES: u16 = 4;
/// Longest written extent (`EXT_INIT_MAX_LEN`).
const MAX_WRITTEN_LEN: u32 = MAX_INIT_LEN as u32;
/// Longest unwritten extent (`EXT_UNWRITTEN_MAX_LEN`).
const MAX_UNWRITTEN_LEN: u32 = MAX_INIT_LEN as u32 - 1;
/// One past the last logical block an extent can map (`ee_block` is 32 bits).
const LOGICAL_LIMIT: u64 = 1 << 32;
/// One past the last physical block an extent can name (`ee_start` is 48 bits).
const PHYSICAL_LIMIT: u64 = 1 << 48;
const STRUCTURE: Structure = Structure::ExtentNode;

/// An index entry: the child node at `child` covers logical blocks from `logical` on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Index {
    logical: u32,
    child: u64,
}

/// A decoded node. Leaves (`depth` 0) use `extents`, interior nodes `indexes`.
#[derive(Debug, Clone)]
struct Node {
    /// The block holding the node; `None` for the root in `i_block`.
    block: Option<u64>,
    /// `eh_depth`.
    depth: u16,
    /// `eh_max`.
    max: u16,
    extents: Vec<Extent>,
    indexes: Vec<Index>,
}

impl Node {
    fn empty_leaf(block: Option<u64>, max: u16) -> Node {
        Node {
            block,
            depth: 0,
            max,
            extents: Vec::new(),
            indexes: Vec::new(),
        }
    }

    fn len(&self) -> usize {
        if self.depth == 0 {
            self.extents.len()
        } else {
            self.indexes.len()
        }
    }

    fn is_full(&self) -> bool {
        self.len() >= usize::from(self.max)
    }

    /// The first logical block the node covers (its key in the parent); `None` when empty.
    fn first_key(&self) -> Option<u32> {
        if self.depth == 0 {
            self.extents.first().map(|e| e.logical)
        } else {
            self.indexes.first().map(|i| i.logical)
        }
    }

    /// The index entry to follow for `logical`: the last whose key is at or below it, or the
    /// first when `logical` lies before every key (as `ext4_ext_binsearch_idx`).
    fn child_position(&self, logical: u32) -> usize {
        self.indexes
            .partition_point(|i| i.logical <= logical)
            .saturating_sub(1)
    }

    fn encode(&self, bytes: &mut [u8]) {
        bytes.fill(0);
        let node = ExtentNode {
            header: ExtentHeader {
                magic: EXTENT_MAGIC,
                // OK to cast: entries never exceed eh_max, a u16.
                entries: self.len() as u16,
                max: self.max,
                depth: self.depth,
                generation: 0,
            },
            entries: if self.depth == 0 {
                ExtentEntries::Leaf(self.extents.iter().map(leaf_record).collect())
            } else {
                ExtentEntries::Index(
                    self.indexes
                        .iter()
                        .map(|i| ExtentIndex {
                            block: i.logical,
                            leaf_lo: i.child as u32,
                            leaf_hi: (i.child >> 32) as u16,
                            unused: 0,
                        })
                        .collect(),
                )
            },
        };
        node.encode_into(bytes);
    }
}

fn leaf_record(e: &Extent) -> ExtentLeaf {
    // OK to cast: lengths are checked against 32768 / 32767 on the way in.
    let len = if e.unwritten {
        MAX_INIT_LEN + e.len as u16
    } else {
        e.len as u16
    };
    ExtentLeaf {
        block: e.logical,
        len,
        start_hi: (e.physical >> 32) as u16,
        start_lo: e.physical as u32,
    }
}

/// One past the last logical block of `e`.
fn end_of(e: &Extent) -> u64 {
    u64::from(e.logical) + u64::from(e.len)
}

/// `ext4_can_extents_be_merged`: `right` continues `left` logically and physically, in the
/// same state, and the sum fits one extent.
fn can_merge(left: &Extent, right: &Extent) -> bool {
    let cap = if left.unwritten {
        MAX_UNWRITTEN_LEN
    } else {
        MAX_WRITTEN_LEN
    };
    left.unwritten == right.unwritten
        && end_of(left) == u64::from(right.logical)
        && left.physical + u64::from(left.len) == right.physical
        && left.len + right.len <= cap
}

/// The part of `e` from logical block `from` (inside it) on.
fn tail_of(e: &Extent, from: u32) -> Extent {
    let skip = from - e.logical;
    Extent {
        logical: from,
        len: e.len - skip,
        physical: e.physical + u64::from(skip),
        unwritten: e.unwritten,
    }
}

/// A node on the way from the root to a leaf, and the entry followed in it.
struct Step {
    node: Node,
    /// Index entry followed (interior nodes); unused in the leaf.
    position: usize,
}

/// Per-level totals as `e2fsck_should_rebuild_extents` counts them, plus what a re-pack needs.
struct Survey {
    /// Per level from the root: (entries, slots); slots count one fewer in each non-full
    /// non-root node ("implementation wart" in e2fsck: an appending split leaves one free).
    levels: Vec<(u64, u64)>,
    node_blocks: Vec<u64>,
}

/// The largest tree (in blocks, the root in `i_block` not counted) whose shape is kept as
/// e2fsck wants it. Keeping it costs a walk of the whole tree after every operation that adds,
/// empties or shrinks a node, and under inserts at random places a re-pack every few splits
/// (e2fsck tolerates one node's worth of free slots per level, and a split leaves two half
/// nodes), so without a bound punching every other block of a file costs time quadratic in
/// its extents (measured: making 4 files of 4 million one-block extents that way had not
/// finished after five minutes; with the bound, and e4-alloc's pending frees kept ordered,
/// it takes 91 s). A larger tree keeps the kernel's shapes, as the kernel's own trees do:
/// `e2fsck -f` may then offer to narrow it, an optimisation that leaves its exit status 0.
/// 256 blocks hold some 87,000 extents with 4 KiB blocks and 21,000 with 1 KiB.
pub const SHAPE_KEPT_UP_TO_NODES: usize = 256;

impl Survey {
    /// Whether `e2fsck -f` would offer to narrow or shorten the tree (PR_1E_CAN_NARROW /
    /// PR_1E_CAN_COLLAPSE_EXTENT_TREE).
    fn e2fsck_would_rebuild(&self, node_capacity: u16) -> bool {
        self.levels
            .iter()
            .enumerate()
            .any(|(i, &(entries, slots))| {
                slots - entries > u64::from(node_capacity)
                    || self.levels[..i].iter().any(|&(_, above)| entries < above)
            })
    }
}

/// What [`ExtentTree::lookup`] found at a logical block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lookup {
    /// The extent that holds it.
    Extent(Extent),
    /// Nothing maps it; `next` is the first mapped logical block after it (`u64::MAX`:
    /// none), and `previous` what the walk saw of the block before it.
    Hole { next: u64, previous: Previous },
}

/// The block before a hole, as far as a lookup's walk to the hole saw it: what a write or
/// fallocate filling the hole wants for a goal (the block after the previous one's), had
/// without a second walk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Previous {
    /// Mapped: `after` is the physical block right after the one that maps it.
    Mapped {
        after: u64,
    },
    Unmapped,
    /// In a leaf the walk did not read: the hole starts a leaf's range below its first
    /// extent, which only a tree whose index key is lower than its child's first extent
    /// has (e4 and the kernel keep the keys equal, `correct_keys`).
    Unknown,
}

/// One step of a lookup's walk down the tree.
enum Down {
    Found(Extent),
    Hole(Previous),
    Child { block: u64, depth: u16 },
}

/// An inode's extent tree, rooted in its 60-byte `i_block`.
///
/// Counts the non-root nodes it allocates and frees ([`ExtentTree::node_blocks_change`]): the
/// caller keeps `i_blocks` = data blocks + tree blocks.
pub struct ExtentTree<'a> {
    root: &'a mut [u8; I_BLOCK_SIZE],
    io: &'a dyn MetaIo,
    owner: Owner,
    node_blocks_change: i64,
    /// Set when an operation added or emptied a node or removed entries, the only changes
    /// that can break e2fsck's shape rule; checked at the end of the operation.
    shape_may_have_changed: bool,
}

impl<'a> ExtentTree<'a> {
    /// The tree rooted in `root` (an inode's `i_block`), owned by `owner`.
    pub fn new(root: &'a mut [u8; I_BLOCK_SIZE], io: &'a dyn MetaIo, owner: Owner) -> Self {
        ExtentTree {
            root,
            io,
            owner,
            node_blocks_change: 0,
            shape_may_have_changed: false,
        }
    }

    /// Writes an empty depth-0 root (magic, eh_max 4, no entries) into `root`.
    pub fn init_empty(root: &mut [u8; I_BLOCK_SIZE]) {
        Node::empty_leaf(None, ROOT_MAX_ENTRIES).encode(root);
    }

    /// Non-root nodes allocated minus nodes freed since this `ExtentTree` was made; the caller
    /// adds `change × block_size / 512` to `i_blocks`.
    pub fn node_blocks_change(&self) -> i64 {
        self.node_blocks_change
    }

    /// The extent containing `logical`, if it is mapped.
    pub fn find(&self, logical: u32) -> Result<Option<Extent>> {
        Ok(match self.lookup(u64::from(logical))? {
            Lookup::Extent(e) => Some(e),
            Lookup::Hole { .. } => None,
        })
    }

    /// What covers `logical`: the extent holding it, or a hole up to the next mapped block.
    /// Walks from the root to the leaf looking at each node where it lies (a binary search
    /// over its entries; nothing decoded but the entries it probes), so a lookup costs a
    /// few cache reads and no allocation: the read path and the write path's probes both
    /// come here. A child must have the depth its parent expects; the stricter checks of an
    /// edit (a child's first key is its index entry's) are made when a path is read to be
    /// changed, so a tree the kernel reads can be read.
    pub fn lookup(&self, logical: u64) -> Result<Lookup> {
        let ino = self.owner.ino;
        // Where the next mapped region starts, from the entries seen on the way down.
        let mut next = u64::MAX;
        let mut step = |bytes: &[u8], loc: Location, depth: Option<u16>| -> Result<Down> {
            let node = ExtentNodeView::new(bytes, loc)?;
            if let Some(depth) = depth {
                if node.header.depth != depth {
                    return Err(corrupt(
                        loc,
                        Problem::ChildDepthMismatch {
                            depth: node.header.depth,
                            parent_depth: depth + 1,
                        },
                    ));
                }
            }
            let pos = node.entries_starting_by(logical);
            if pos < node.len() {
                next = next.min(u64::from(node.first_block(pos)));
            }
            if pos == 0 {
                // Nothing in the whole tree starts by `logical` when the root says so;
                // below it, the block before may be in the leaf to the left.
                return Ok(Down::Hole(if depth.is_none() {
                    Previous::Unmapped
                } else {
                    Previous::Unknown
                }));
            }
            if node.is_leaf() {
                let extent = node.leaf(pos - 1).extent();
                let end = u64::from(extent.logical) + u64::from(extent.len);
                return Ok(if logical < end {
                    Down::Found(extent)
                } else if logical == end {
                    Down::Hole(Previous::Mapped {
                        after: extent.physical + u64::from(extent.len),
                    })
                } else {
                    Down::Hole(Previous::Unmapped)
                });
            }
            Ok(Down::Child {
                block: node.index(pos - 1).leaf(),
                depth: node.header.depth - 1,
            })
        };
        let mut down = step(&self.root[..], Location::Inode(ino), None)?;
        loop {
            match down {
                Down::Found(extent) => return Ok(Lookup::Extent(extent)),
                Down::Hole(previous) => return Ok(Lookup::Hole { next, previous }),
                Down::Child { block, depth } => {
                    let loc = Location::InodeBlock { inode: ino, block };
                    self.io.check_mapped(block, 1, self.owner)?;
                    down = look_at(self.io, block, BlockKind::ExtentNode, self.owner, |bytes| {
                        step(bytes, loc, Some(depth))
                    })?;
                }
            }
        }
    }

    /// The first extent that contains `logical` or starts after it (to size a hole).
    pub fn next_extent(&self, logical: u32) -> Result<Option<Extent>> {
        let path = self.path_to(logical)?;
        self.next_extent_on(&path, logical)
    }

    /// [`ExtentTree::next_extent`] from `path`, the path to `logical`.
    fn next_extent_on(&self, path: &[Step], logical: u32) -> Result<Option<Extent>> {
        let (leaf, ancestors) = path.split_last().expect("a path ends at a leaf");
        if let Some(e) = leaf
            .node
            .extents
            .iter()
            .find(|e| end_of(e) > u64::from(logical))
        {
            return Ok(Some(*e));
        }
        // Nothing left in this leaf: the first extent of the next leaf, found from the
        // deepest ancestor with an entry right of the one followed.
        for step in ancestors.iter().rev() {
            if let Some(next) = step.node.indexes.get(step.position + 1) {
                let mut node = self.read_node(next.child, step.node.depth - 1)?;
                while node.depth > 0 {
                    node = self.read_node(node.indexes[0].child, node.depth - 1)?;
                }
                return Ok(node.extents.first().copied());
            }
        }
        Ok(None)
    }

    /// Every extent, in logical order.
    pub fn extents(&self) -> Result<Vec<Extent>> {
        let mut extents = Vec::new();
        self.all_extents(&self.read_root()?, &mut extents)?;
        Ok(extents)
    }

    /// Maps `extent.len` blocks from `extent.logical` to `extent.physical`. The range must be
    /// unmapped; a mapped block fails with [`Error::Invalid`] and changes nothing. The
    /// physical blocks must not be ones the nodes this insert walks already use (an extent
    /// of the leaf, a node block, an index entry's child): such a block came from a bitmap
    /// that lost its bit, and mapping it would cross-link the file with itself; that fails
    /// as corruption and changes nothing. The new extent merges into an adjacent one where
    /// the kernel would merge it.
    pub fn insert(&mut self, extent: Extent) -> Result<()> {
        self.check_new_extent(&extent)?;
        self.declare_edges(1)?;
        if self.merged_in_root_leaf(&extent)? {
            return Ok(());
        }
        let mut path = self.path_to(extent.logical)?;
        if let Some(next) = self.next_extent_on(&path, extent.logical)? {
            if u64::from(next.logical) < end_of(&extent) {
                return Err(Error::Invalid(format!(
                    "logical blocks {}..{} of inode {} are already mapped",
                    next.logical.max(extent.logical),
                    end_of(&next).min(end_of(&extent)),
                    self.owner.ino
                )));
            }
        }
        // Beyond the kernel where it is cheap (issue 22, item 2): only the nodes already in
        // hand are compared, not the whole tree.
        if let Some(block) = already_used(&path, &extent) {
            return Err(corrupt(
                Location::Inode(self.owner.ino),
                Problem::BlockReferencedTwice { block },
            ));
        }
        let leaf_level = path.len() - 1;
        let leaf = &mut path[leaf_level].node;
        let at = leaf
            .extents
            .partition_point(|e| e.logical <= extent.logical);
        if at > 0 && can_merge(&leaf.extents[at - 1], &extent) {
            leaf.extents[at - 1].len += extent.len;
            // The new extent may close the gap to the right neighbour too.
            if at < leaf.extents.len() && can_merge(&leaf.extents[at - 1], &leaf.extents[at]) {
                leaf.extents[at - 1].len += leaf.extents[at].len;
                leaf.extents.remove(at);
                self.shape_may_have_changed = true;
            }
            self.write_node(&path[leaf_level].node)?;
        } else if at < leaf.extents.len() && can_merge(&extent, &leaf.extents[at]) {
            let right = &mut leaf.extents[at];
            right.logical = extent.logical;
            right.physical = extent.physical;
            right.len += extent.len;
            self.write_node(&path[leaf_level].node)?;
            if at == 0 {
                self.correct_keys(&mut path)?;
            }
        } else {
            self.insert_into_leaf(path, extent)?;
        }
        self.keep_e2fsck_shape()
    }

    /// Unmaps logical blocks `start .. start + len` (clipped to the 2^32-block limit) and
    /// returns the runs of data blocks unmapped, as `(physical, len)` in logical order, for
    /// the caller to free. Extents across the edges are cut; emptied nodes are freed; an empty
    /// tree goes back to a depth-0 root. Fails with `NoSpace` (and changes nothing) only when
    /// the range lies strictly inside one extent in a full leaf, which must split.
    pub fn remove(&mut self, start: u32, len: u64) -> Result<Vec<(u64, u64)>> {
        let end = u64::from(start).saturating_add(len).min(LOGICAL_LIMIT);
        // An empty tree (every new file's, so every unlinked empty file's) has nothing to
        // walk, and nothing to declare.
        if len == 0 || self.is_empty()? {
            return Ok(Vec::new());
        }
        // Two edges, and the split that cuts a range out of one extent.
        self.declare_edges(3)?;
        if let Some(e) = self.find(start)? {
            if e.logical < start && end < end_of(&e) {
                // OK to cast: end < end_of(e) <= 2^32.
                self.split_extent_at(end as u32)?;
            }
        }
        let mut root = self.read_root()?;
        let mut runs = Vec::new();
        self.remove_in(&mut root, start, end, &mut runs)?;
        if !runs.is_empty() {
            if root.len() == 0 {
                root = Node::empty_leaf(None, ROOT_MAX_ENTRIES);
            }
            self.write_node(&root)?;
        }
        self.keep_e2fsck_shape()?;
        Ok(runs)
    }

    /// Marks logical blocks `logical .. logical + len` written where they are mapped by
    /// unwritten extents (holes and written blocks in the range are left alone). Extents are
    /// split at the range edges and the converted part merges with written neighbours.
    ///
    /// Fails with `NoSpace` when an edge split needs a node block and none is left; the
    /// mapping and every block's state are then as they were (one edge may have been split
    /// into two extents of the same state, which maps the same blocks).
    pub fn mark_written(&mut self, logical: u32, len: u64) -> Result<()> {
        let end = u64::from(logical).saturating_add(len).min(LOGICAL_LIMIT);
        if len == 0 {
            return Ok(());
        }
        self.declare_edges(2)?;
        // Split at the far edge first: if the near edge then fails, no state has changed.
        for edge in [end, u64::from(logical)] {
            if let Err(err) = self.split_unwritten_at(edge) {
                // The far-edge split may have added a node: keep the shape e2fsck wants
                // even on the way out (re-packing never allocates).
                self.keep_e2fsck_shape()?;
                return Err(err);
            }
        }
        let mut root = self.read_root()?;
        if self.convert_in(&mut root, logical, end)? {
            self.write_node(&root)?;
        }
        self.keep_e2fsck_shape()
    }

    fn check_new_extent(&self, e: &Extent) -> Result<()> {
        let max_len = if e.unwritten {
            MAX_UNWRITTEN_LEN
        } else {
            MAX_WRITTEN_LEN
        };
        if e.len == 0 || e.len > max_len {
            return Err(Error::Invalid(format!(
                "an extent of {} blocks (1..={max_len} allowed) for inode {}",
                e.len, self.owner.ino
            )));
        }
        if end_of(e) > LOGICAL_LIMIT {
            return Err(Error::FileTooBig(format!(
                "inode {}: logical block {} is past the extent format's 2^32 limit",
                self.owner.ino,
                end_of(e) - 1
            )));
        }
        if e.physical == 0 || e.physical + u64::from(e.len) > PHYSICAL_LIMIT {
            return Err(Error::Invalid(format!(
                "physical block {} for inode {} cannot be stored in an extent",
                e.physical, self.owner.ino
            )));
        }
        Ok(())
    }

    /// `eh_max` of a node in a block: (bs - 12) / 12.
    fn node_capacity(&self) -> u16 {
        // OK to cast: block sizes are at most 64 KiB, so this is below 5462.
        ((self.io.block_size() - ENTRY_SIZE) / ENTRY_SIZE) as u16
    }

    /// Declares the credits of an edit at `edges` places of the tree: at each, the path's
    /// nodes below the root changed, and each level split (a new node) plus a new level.
    /// Emptied nodes are freed, which the free declares itself.
    fn declare_edges(&self, edges: u32) -> Result<()> {
        // The root header's eh_depth, read where it lies (decoding the root for it was a
        // fortieth of an unlink); a damaged one is caught by the edit itself.
        let depth = u16::from_le_bytes([self.root[6], self.root[7]]).min(MAX_DEPTH);
        let depth = u32::from(depth);
        self.io
            .extend_credits(edges * (depth + (depth + 1) * NEW_BLOCK));
        Ok(())
    }

    /// The common append of a small file (every fallocate2 and 4 KiB-append operation), done
    /// where the entry lies: a tree that is one leaf in `i_block`, whose extent before
    /// `extent` takes it in (`can_merge`) with no later extent in the way, gets that entry's
    /// length rewritten, without decoding the root into lists and encoding it back (three
    /// allocations). Checks what the general path would (the root's entries in order,
    /// apart, of non-zero length, and none of their blocks among the new ones); anything
    /// else, a doubt included, is left to the general path, which reports it.
    fn merged_in_root_leaf(&mut self, extent: &Extent) -> Result<bool> {
        let root = ExtentNodeView::new(&self.root[..], Location::Inode(self.owner.ino))?;
        if !root.is_leaf() || root.header.max != ROOT_MAX_ENTRIES {
            return Ok(false);
        }
        let at = root.entries_starting_by(u64::from(extent.logical));
        if at == 0 || at != root.len() {
            return Ok(false);
        }
        let extents = (0..root.len()).map(|i| root.leaf(i).extent());
        let sound = leaf_problem(extents.clone()).is_none();
        let (start, end) = (extent.physical, end_of_physical(extent));
        let apart = extents
            .clone()
            .all(|e| end_of_physical(&e) <= start || end <= e.physical);
        let last = root.leaf(at - 1).extent();
        if !(sound && apart && can_merge(&last, extent)) {
            return Ok(false);
        }
        let merged = Extent {
            len: last.len + extent.len,
            ..last
        };
        let mut record = [0u8; ENTRY_SIZE];
        leaf_record(&merged).encode(&mut record);
        self.root[ENTRY_SIZE * at..ENTRY_SIZE * (at + 1)].copy_from_slice(&record);
        Ok(true)
    }

    /// Whether the tree maps nothing: a root leaf without entries (its header checked).
    fn is_empty(&self) -> Result<bool> {
        let root = ExtentNodeView::new(&self.root[..], Location::Inode(self.owner.ino))?;
        Ok(root.is_leaf() && root.len() == 0)
    }

    fn read_root(&self) -> Result<Node> {
        let ino = self.owner.ino;
        let node = self.decode(&self.root[..], Location::Inode(ino), None)?;
        if node.max != ROOT_MAX_ENTRIES {
            return Err(corrupt(
                Location::Inode(ino),
                Problem::FieldMismatch {
                    field: "eh_max",
                    found: node.max.into(),
                    expected: ROOT_MAX_ENTRIES.into(),
                },
            ));
        }
        if node.depth > 0 && node.len() == 0 {
            return Err(corrupt(
                Location::Inode(ino),
                Problem::EmptyNode { depth: node.depth },
            ));
        }
        Ok(node)
    }

    /// Reads the non-root node in `block`, which its parent says has depth `depth`.
    fn read_node(&self, block: u64, depth: u16) -> Result<Node> {
        let loc = Location::InodeBlock {
            inode: self.owner.ino,
            block,
        };
        self.io.check_mapped(block, 1, self.owner)?;
        let bytes = self.io.read(block, BlockKind::ExtentNode, self.owner)?;
        let node = self.decode(&bytes, loc, Some(block))?;
        check_child(loc, depth, node.depth, node.first_key())?;
        Ok(node)
    }

    /// The node in `bytes`, checked: no empty or overlapping extent, keys in order. Read
    /// through the zero-copy view (no intermediate list of entries, no list of keys): the
    /// write path decodes the root on every edit.
    fn decode(&self, bytes: &[u8], loc: Location, block: Option<u64>) -> Result<Node> {
        let view = ExtentNodeView::new(bytes, loc)?;
        let mut node = Node::empty_leaf(block, view.header.max);
        node.depth = view.header.depth;
        let in_order = if view.is_leaf() {
            node.extents = (0..view.len()).map(|i| view.leaf(i).extent()).collect();
            if let Some(problem) = leaf_problem(node.extents.iter().copied()) {
                return Err(corrupt(loc, problem));
            }
            node.extents.windows(2).all(|w| w[0].logical < w[1].logical)
        } else {
            node.indexes = (0..view.len())
                .map(|i| {
                    let index = view.index(i);
                    Index {
                        logical: index.block,
                        child: index.leaf(),
                    }
                })
                .collect();
            node.indexes.windows(2).all(|w| w[0].logical < w[1].logical)
        };
        if !in_order {
            return Err(corrupt(loc, Problem::KeysOutOfOrder));
        }
        Ok(node)
    }

    /// The store the tree reads through, and whose blocks these are.
    pub(crate) fn io_and_owner(&self) -> (&dyn MetaIo, Owner) {
        (self.io, self.owner)
    }

    fn write_node(&mut self, node: &Node) -> Result<()> {
        match node.block {
            None => {
                node.encode(&mut self.root[..]);
                Ok(())
            }
            Some(block) => {
                let mut bytes = vec![0u8; self.io.block_size()];
                node.encode(&mut bytes);
                self.io
                    .write(block, BlockKind::ExtentNode, self.owner, &bytes)
            }
        }
    }

    /// The nodes from the root down to the leaf that holds (or would hold) `logical`.
    fn path_to(&self, logical: u32) -> Result<Vec<Step>> {
        let mut node = self.read_root()?;
        let mut path = Vec::with_capacity(usize::from(node.depth) + 1);
        while node.depth > 0 {
            let position = node.child_position(logical);
            let child = self.read_node(node.indexes[position].child, node.depth - 1)?;
            path.push(Step { node, position });
            node = child;
        }
        path.push(Step { node, position: 0 });
        Ok(path)
    }

    /// After the first key of the path's leaf changed: rewrites each ancestor's key for the
    /// child followed, upward while that child is its parent's first (`ext4_ext_correct_indexes`).
    fn correct_keys(&mut self, path: &mut [Step]) -> Result<()> {
        for level in (1..path.len()).rev() {
            let Some(key) = path[level].node.first_key() else {
                return Ok(());
            };
            let parent = &mut path[level - 1];
            let entry = &mut parent.node.indexes[parent.position];
            if entry.logical == key {
                return Ok(());
            }
            entry.logical = key;
            let first = parent.position == 0;
            self.write_node(&path[level - 1].node)?;
            if !first {
                return Ok(());
            }
        }
        Ok(())
    }

    /// Puts `extent` into the leaf at the end of `path` (whose in-memory leaf may already hold
    /// other changes to be written with it), splitting and growing as `ext4_ext_insert_extent`
    /// does. Every block needed is allocated before anything is written.
    fn insert_into_leaf(&mut self, mut path: Vec<Step>, extent: Extent) -> Result<()> {
        let leaf_level = path.len() - 1;
        if !path[leaf_level].node.is_full() {
            return self.insert_with_room(path, extent);
        }
        // The lowest ancestor with a free slot takes the new index entry; without one the
        // tree grows, and the old root's entries land in a block with room (level 1).
        let room_at = (0..leaf_level).rev().find(|&l| !path[l].node.is_full());
        let grow = room_at.is_none();
        if grow && usize::from(path[0].node.depth) >= usize::from(MAX_DEPTH) {
            return Err(Error::FileTooBig(format!(
                "inode {}: extent tree already has the kernel's maximum depth {MAX_DEPTH}",
                self.owner.ino
            )));
        }
        let split_levels = match room_at {
            Some(at) => leaf_level - at,
            // A depth-0 root moved into a block leaves a leaf with room: no split.
            None => leaf_level,
        };
        let goal = path[leaf_level].node.block.unwrap_or(0);
        let mut blocks = self.allocate_all(goal, usize::from(grow) + split_levels)?;
        if grow {
            // OK to unwrap: one block per grow was allocated above.
            let block = blocks.pop().unwrap();
            self.grow(&mut path, block)?;
        }
        if split_levels == 0 {
            return self.insert_with_room(path, extent);
        }
        self.split(path, room_at.unwrap_or(1), blocks, extent)
    }

    /// Inserts `extent` in order into the path's leaf, which has a free slot.
    fn insert_with_room(&mut self, mut path: Vec<Step>, extent: Extent) -> Result<()> {
        let leaf_level = path.len() - 1;
        let leaf = &mut path[leaf_level].node;
        let at = leaf.extents.partition_point(|e| e.logical < extent.logical);
        leaf.extents.insert(at, extent);
        self.write_node(&path[leaf_level].node)?;
        if at == 0 {
            self.correct_keys(&mut path)?;
        }
        Ok(())
    }

    /// Allocates `count` node blocks, or none: on failure the ones already taken are freed.
    fn allocate_all(&mut self, goal: u64, count: usize) -> Result<Vec<u64>> {
        let mut blocks = Vec::with_capacity(count);
        for _ in 0..count {
            match self.io.allocate(goal, self.owner) {
                Ok(block) => blocks.push(block),
                Err(err) => {
                    for &block in &blocks {
                        self.io.free(block, 1, self.owner)?;
                    }
                    return Err(err);
                }
            }
        }
        self.node_blocks_change += count as i64;
        if count > 0 {
            self.shape_may_have_changed = true;
        }
        Ok(blocks)
    }

    /// `ext4_ext_grow_indepth`: the root's entries move to `block`; the root becomes one index
    /// entry pointing there, one level deeper. `path` gains the new level.
    fn grow(&mut self, path: &mut Vec<Step>, block: u64) -> Result<()> {
        let old_root = &path[0].node;
        let moved = Node {
            block: Some(block),
            depth: old_root.depth,
            max: self.node_capacity(),
            extents: old_root.extents.clone(),
            indexes: old_root.indexes.clone(),
        };
        self.write_node(&moved)?;
        let root = Node {
            block: None,
            depth: old_root.depth + 1,
            max: ROOT_MAX_ENTRIES,
            extents: Vec::new(),
            indexes: vec![Index {
                // OK to unwrap: only a full root grows.
                logical: moved.first_key().unwrap(),
                child: block,
            }],
        };
        self.write_node(&root)?;
        let position = path[0].position;
        path[0] = Step {
            node: root,
            position: 0,
        };
        path.insert(
            1,
            Step {
                node: moved,
                position,
            },
        );
        Ok(())
    }

    /// `ext4_ext_split`: the leaf and every full node down from level `room_at + 1` split at
    /// the path; new nodes (one per level, from `blocks`) take the entries right of it, and
    /// level `room_at` gets an index entry for the new subtree keyed by the first moved
    /// logical block (`border`). `extent` goes into the half that covers it.
    fn split(
        &mut self,
        mut path: Vec<Step>,
        room_at: usize,
        mut blocks: Vec<u64>,
        extent: Extent,
    ) -> Result<()> {
        let leaf_level = path.len() - 1;
        let capacity = self.node_capacity();
        let leaf = &mut path[leaf_level].node;
        let at = leaf.extents.partition_point(|e| e.logical < extent.logical);
        // As the kernel: entries after the extent found by the search move; appending moves
        // none and leaves the old leaf full.
        let split_from = at.max(1);
        // OK to unwrap: one block per split level was allocated.
        let mut new_node = Node::empty_leaf(Some(blocks.pop().unwrap()), capacity);
        let border;
        let mut key_changed = false;
        if split_from >= leaf.extents.len() {
            border = extent.logical;
            new_node.extents.push(extent);
        } else {
            new_node.extents = leaf.extents.split_off(split_from);
            border = new_node.extents[0].logical;
            leaf.extents.insert(at, extent);
            key_changed = at == 0;
        }
        self.write_node(&path[leaf_level].node)?;
        self.write_node(&new_node)?;
        for level in (room_at + 1..leaf_level).rev() {
            let step = &mut path[level];
            let mut index_node = Node {
                // OK to unwrap: one block per split level was allocated.
                block: Some(blocks.pop().unwrap()),
                depth: step.node.depth,
                max: capacity,
                extents: Vec::new(),
                indexes: vec![Index {
                    logical: border,
                    // OK to unwrap: every new node has a block.
                    child: new_node.block.unwrap(),
                }],
            };
            index_node
                .indexes
                .extend(step.node.indexes.split_off(step.position + 1));
            self.write_node(&step.node)?;
            self.write_node(&index_node)?;
            new_node = index_node;
        }
        let parent = &mut path[room_at].node;
        let slot = parent.indexes.partition_point(|i| i.logical < border);
        parent.indexes.insert(
            slot,
            Index {
                logical: border,
                // OK to unwrap: every new node has a block.
                child: new_node.block.unwrap(),
            },
        );
        self.write_node(&path[room_at].node)?;
        if key_changed {
            self.correct_keys(&mut path)?;
        }
        Ok(())
    }

    /// Splits an unwritten extent that runs across `logical` so that one ends there.
    fn split_unwritten_at(&mut self, logical: u64) -> Result<()> {
        let Ok(logical) = u32::try_from(logical) else {
            // The end of the logical space is an edge already.
            return Ok(());
        };
        match self.find(logical)? {
            Some(e) if e.unwritten && e.logical < logical => self.split_extent_at(logical),
            _ => Ok(()),
        }
    }

    /// Splits the extent containing `logical` (which must start before it) into two of the
    /// same state that meet at `logical`: the mapping is unchanged, the tree has one more
    /// entry. Fails with `NoSpace`, changing nothing, when a full leaf cannot split.
    fn split_extent_at(&mut self, logical: u32) -> Result<()> {
        let mut path = self.path_to(logical)?;
        let leaf_level = path.len() - 1;
        let leaf = &mut path[leaf_level].node;
        let Some(e) = leaf
            .extents
            .iter_mut()
            .find(|e| e.logical < logical && u64::from(logical) < end_of(e))
        else {
            return Ok(());
        };
        let tail = tail_of(e, logical);
        e.len -= tail.len;
        self.insert_into_leaf(path, tail)
    }

    /// Removes `start..end` under `node` (written by the caller if a run was collected),
    /// collecting the data runs. Emptied children are freed and dropped; keys follow their
    /// child's new first block.
    fn remove_in(
        &mut self,
        node: &mut Node,
        start: u32,
        end: u64,
        runs: &mut Vec<(u64, u64)>,
    ) -> Result<()> {
        if node.depth == 0 {
            let mut kept = Vec::with_capacity(node.extents.len());
            for e in &node.extents {
                if end_of(e) <= u64::from(start) || u64::from(e.logical) >= end {
                    kept.push(*e);
                    continue;
                }
                let cut_start = e.logical.max(start);
                let cut_end = end_of(e).min(end);
                let skipped = u64::from(cut_start - e.logical);
                runs.push((e.physical + skipped, cut_end - u64::from(cut_start)));
                if e.logical < cut_start {
                    kept.push(Extent {
                        len: cut_start - e.logical,
                        ..*e
                    });
                }
                if cut_end < end_of(e) {
                    // OK to cast: cut_end < end_of(e) <= 2^32.
                    kept.push(tail_of(e, cut_end as u32));
                }
            }
            if kept.len() < node.extents.len() {
                self.shape_may_have_changed = true;
            }
            node.extents = kept;
            return Ok(());
        }
        let mut i = 0;
        while i < node.indexes.len() {
            let from = node.indexes[i].logical;
            let to = node
                .indexes
                .get(i + 1)
                .map_or(LOGICAL_LIMIT, |next| u64::from(next.logical));
            // The first child also holds anything before its key (never written so, but
            // the search would send such a block there).
            let from = if i == 0 { 0 } else { from };
            if to <= u64::from(start) || u64::from(from) >= end {
                i += 1;
                continue;
            }
            let child_block = node.indexes[i].child;
            let mut child = self.read_node(child_block, node.depth - 1)?;
            let runs_before = runs.len();
            self.remove_in(&mut child, start, end, runs)?;
            if runs.len() == runs_before {
                i += 1;
                continue;
            }
            match child.first_key() {
                None => {
                    self.io.free(child_block, 1, self.owner)?;
                    self.node_blocks_change -= 1;
                    self.shape_may_have_changed = true;
                    node.indexes.remove(i);
                }
                Some(key) => {
                    self.write_node(&child)?;
                    node.indexes[i].logical = key;
                    i += 1;
                }
            }
        }
        Ok(())
    }

    /// Marks unwritten extents inside `start..end` under `node` written (the edges were
    /// split already) and merges them with their neighbours in the leaf. Writes changed
    /// children; returns whether `node` itself changed (for the caller to write).
    fn convert_in(&mut self, node: &mut Node, start: u32, end: u64) -> Result<bool> {
        if node.depth == 0 {
            let mut changed = false;
            let mut converted = vec![false; node.extents.len()];
            for (e, converted) in node.extents.iter_mut().zip(&mut converted) {
                if e.unwritten && e.logical >= start && end_of(e) <= end {
                    e.unwritten = false;
                    *converted = true;
                    changed = true;
                }
            }
            let mut merged: Vec<(Extent, bool)> = Vec::with_capacity(node.extents.len());
            for (e, was_converted) in node.extents.iter().zip(converted) {
                match merged.last_mut() {
                    Some((last, last_converted))
                        if (*last_converted || was_converted) && can_merge(last, e) =>
                    {
                        last.len += e.len;
                        *last_converted = true;
                    }
                    _ => merged.push((*e, was_converted)),
                }
            }
            if merged.len() < node.extents.len() {
                self.shape_may_have_changed = true;
            }
            node.extents = merged.into_iter().map(|(e, _)| e).collect();
            return Ok(changed);
        }
        for i in 0..node.indexes.len() {
            let from = if i == 0 { 0 } else { node.indexes[i].logical };
            let to = node
                .indexes
                .get(i + 1)
                .map_or(LOGICAL_LIMIT, |next| u64::from(next.logical));
            if to <= u64::from(start) || u64::from(from) >= end {
                continue;
            }
            let mut child = self.read_node(node.indexes[i].child, node.depth - 1)?;
            if self.convert_in(&mut child, start, end)? {
                self.write_node(&child)?;
            }
        }
        // Merging keeps each leaf's first extent's start, so no key changes.
        Ok(false)
    }

    /// Counts what e2fsck counts per level, a level at a time from the root, reading only
    /// node headers and interior nodes' entries; `None` as soon as the tree proves larger
    /// than [`SHAPE_KEPT_UP_TO_NODES`] (so a large tree costs a few interior nodes' reads).
    fn survey(&self) -> Result<Option<Survey>> {
        let root = self.read_root()?;
        let mut survey = Survey {
            levels: vec![(root.len() as u64, u64::from(root.max))],
            node_blocks: Vec::new(),
        };
        // (block, its key in the parent) of every node one level down.
        let mut level: Vec<(u64, u32)> =
            root.indexes.iter().map(|i| (i.child, i.logical)).collect();
        let mut depth = root.depth;
        while depth > 0 {
            depth -= 1;
            if survey.node_blocks.len() + level.len() > SHAPE_KEPT_UP_TO_NODES {
                return Ok(None);
            }
            let (mut entries, mut slots) = (0, 0);
            let mut below = Vec::new();
            for &(block, key) in &level {
                survey.node_blocks.push(block);
                let (len, max) = self.survey_node(block, key, depth, &mut below)?;
                entries += len;
                // e2fsck forgives one free slot in each node that is not full.
                slots += max - u64::from(len < max);
            }
            survey.levels.push((entries, slots));
            level = below;
        }
        Ok(Some(survey))
    }

    /// Checks the node in `block` as [`Self::read_node`] does, and that its first key is
    /// `key`; returns its (entries, eh_max) and, for an interior node, adds its children to
    /// `below`.
    fn survey_node(
        &self,
        block: u64,
        key: u32,
        depth: u16,
        below: &mut Vec<(u64, u32)>,
    ) -> Result<(u64, u64)> {
        let loc = Location::InodeBlock {
            inode: self.owner.ino,
            block,
        };
        let mut counts = (0, 0);
        self.io.check_mapped(block, 1, self.owner)?;
        self.io
            .visit(block, BlockKind::ExtentNode, self.owner, &mut |bytes| {
                let view = ExtentNodeView::new(bytes, loc)?;
                let first = (!view.is_empty()).then(|| view.first_block(0));
                check_child(loc, depth, view.header.depth, first)?;
                check_key(loc, first, key)?;
                if !view.is_leaf() {
                    below.extend((0..view.len()).map(|i| {
                        let index = view.index(i);
                        (index.leaf(), index.block)
                    }));
                }
                counts = (view.len() as u64, u64::from(view.header.max));
                Ok(())
            })?;
        Ok(counts)
    }

    /// Adds the extents under `node` to `extents`, in logical order, checking each child's
    /// first key against its index entry.
    fn all_extents(&self, node: &Node, extents: &mut Vec<Extent>) -> Result<()> {
        extents.extend_from_slice(&node.extents);
        for index in &node.indexes {
            let child = self.read_node(index.child, node.depth - 1)?;
            let loc = Location::InodeBlock {
                inode: self.owner.ino,
                block: index.child,
            };
            check_key(loc, child.first_key(), index.logical)?;
            self.all_extents(&child, extents)?;
        }
        Ok(())
    }

    /// At the end of an operation that added, emptied or shrank nodes: if e2fsck would offer
    /// to narrow or shorten the tree, re-packs it.
    fn keep_e2fsck_shape(&mut self) -> Result<()> {
        if !std::mem::take(&mut self.shape_may_have_changed) {
            return Ok(());
        }
        let Some(survey) = self.survey()? else {
            return Ok(());
        };
        if survey.e2fsck_would_rebuild(self.node_capacity()) {
            let extents = self.extents()?;
            self.repack(extents, survey.node_blocks)?;
        }
        Ok(())
    }

    /// Rebuilds the tree holding `extents` with each level packed left to right, in blocks
    /// taken from `blocks` (the tree's current nodes); the rest are freed. Nodes are filled to
    /// one below capacity when that needs no more blocks than the tree has (e2fsck does not
    /// count a single free slot against a node, and it lets later inserts land without
    /// splitting), else to capacity, which always fits.
    fn repack(&mut self, extents: Vec<Extent>, mut blocks: Vec<u64>) -> Result<()> {
        // Every node may be rewritten. OK to cast: at most SHAPE_KEPT_UP_TO_NODES.
        self.io.extend_credits(blocks.len() as u32);
        let capacity = usize::from(self.node_capacity());
        let nodes_needed = |fill: usize| -> usize {
            let mut entries = extents.len();
            let mut nodes = 0;
            while entries > usize::from(ROOT_MAX_ENTRIES) {
                entries = entries.div_ceil(fill);
                nodes += entries;
            }
            nodes
        };
        let fill = if nodes_needed(capacity - 1) <= blocks.len() {
            capacity - 1
        } else {
            capacity
        };
        blocks.sort_unstable();
        blocks.reverse();
        let root = if extents.len() <= usize::from(ROOT_MAX_ENTRIES) {
            Node {
                extents,
                ..Node::empty_leaf(None, ROOT_MAX_ENTRIES)
            }
        } else {
            let node_max = self.node_capacity();
            let mut level: Vec<Node> = extents
                .chunks(fill)
                .map(|chunk| Node {
                    extents: chunk.to_vec(),
                    ..Node::empty_leaf(None, node_max)
                })
                .collect();
            loop {
                let depth = level[0].depth + 1;
                let mut indexes = Vec::with_capacity(level.len());
                for mut node in level {
                    // OK to unwrap: nodes_needed(fill) <= blocks.len() was checked above.
                    let block = blocks.pop().unwrap();
                    node.block = Some(block);
                    self.write_node(&node)?;
                    indexes.push(Index {
                        // OK to unwrap: chunks are never empty.
                        logical: node.first_key().unwrap(),
                        child: block,
                    });
                }
                let index_node = |indexes: Vec<Index>, max: u16| Node {
                    block: None,
                    depth,
                    max,
                    extents: Vec::new(),
                    indexes,
                };
                if indexes.len() <= usize::from(ROOT_MAX_ENTRIES) {
                    break index_node(indexes, ROOT_MAX_ENTRIES);
                }
                level = indexes
                    .chunks(fill)
                    .map(|chunk| index_node(chunk.to_vec(), node_max))
                    .collect();
            }
        };
        self.write_node(&root)?;
        for block in blocks {
            self.io.free(block, 1, self.owner)?;
            self.node_blocks_change -= 1;
        }
        Ok(())
    }
}

/// Checks a node read under an index entry (at `loc`): its depth must be `depth`, one
/// below its parent's, and it must hold entries (`first` is its first key).
fn check_child(loc: Location, depth: u16, found_depth: u16, first: Option<u32>) -> Result<()> {
    if found_depth != depth {
        return Err(corrupt(
            loc,
            Problem::ChildDepthMismatch {
                depth: found_depth,
                parent_depth: depth + 1,
            },
        ));
    }
    if first.is_none() {
        return Err(corrupt(loc, Problem::EmptyNode { depth }));
    }
    Ok(())
}

/// Checks that a child node's first key (`first`) is its index entry's `key`.
fn check_key(loc: Location, first: Option<u32>, key: u32) -> Result<()> {
    if first != Some(key) {
        return Err(corrupt(loc, Problem::ChildKeyMismatch { first, key }));
    }
    Ok(())
}

fn corrupt(loc: Location, problem: Problem) -> Error {
    FormatError::corrupt(STRUCTURE, loc, problem).into()
}

/// The first block of `extent`'s physical run that a node on `path` already uses: a node's
/// own block, an index entry's child, or a block of one of the leaf's extents.
fn already_used(path: &[Step], extent: &Extent) -> Option<u64> {
    let (start, end) = (extent.physical, end_of_physical(extent));
    let inside = |b: &u64| (start..end).contains(b);
    path.iter().find_map(|step| {
        let node = &step.node;
        node.block
            .filter(inside)
            .or_else(|| node.indexes.iter().map(|i| i.child).find(inside))
            .or_else(|| {
                node.extents.iter().find_map(|e| {
                    (e.physical < end && start < end_of_physical(e)).then(|| e.physical.max(start))
                })
            })
    })
}

/// What is wrong with a leaf's extents, in the order they lie, if anything: one of no
/// length (the first such), else one reaching past the start of the next (which out of
/// order also does). One pass: it runs on every append to a small file.
fn leaf_problem(extents: impl Iterator<Item = Extent>) -> Option<Problem> {
    let mut zero_length = None;
    let mut overlap = false;
    let mut previous: Option<Extent> = None;
    for e in extents {
        if e.len == 0 && zero_length.is_none() {
            zero_length = Some(e.logical);
        }
        overlap |= previous.is_some_and(|p| end_of(&p) > u64::from(e.logical));
        previous = Some(e);
    }
    match zero_length {
        Some(logical) => Some(Problem::ZeroLengthExtent { logical }),
        None => overlap.then_some(Problem::ExtentsOverlap),
    }
}

fn end_of_physical(e: &Extent) -> u64 {
    e.physical + u64::from(e.len)
}

mod shift;
#[cfg(test)]
mod tests;

pub use shift::ShiftDirection;

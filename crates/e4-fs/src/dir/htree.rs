//! The htree index of a directory, being searched and grown (`fs/ext4/namei.c`): the path
//! from the root to the leaf a hash selects (`dx_probe`), the walk to the next leaf for names
//! whose hashes collide across a split (`ext4_htree_next_block`), turning a full one-block
//! directory into an indexed one (`make_indexed_dir`), leaf splits (`do_split`), index node
//! splits and root growth (`ext4_dx_add_entry`).

use std::collections::BTreeSet;

use e4_format::dir_entry::rec_len_to_disk;
use e4_format::dir_hash::{dir_hash, HashVersion};
use e4_format::dir_htree::{
    DxEntries, DxEntry, DxNode, DxRoot, DxRootInfo, HashOrder, DX_BLOCK_MASK, MAX_LEVELS_LARGEDIR,
};
use e4_format::{FormatError, Problem, Structure};
use smallvec::{smallvec, SmallVec};

use crate::dir::editor::{check_dot_entries, DirectoryEditor, Found, DOTDOT_OFFSET};
use crate::dir::leaf::{LeafBlock, LeafEntry, LeafProbe, NewEntry, REC_LEN_FIELD};
use crate::error::Shortage;
use crate::error::{Error, Result};
use crate::io::meta_io::{look_at, BlockKind};

/// One index node on the path from the root, and the entry the path follows in it: what
/// a lookup needs of the node, read where it lies in the cache. The node itself is copied
/// only for an insert that edits it ([`DirectoryEditor::node_of`]): a probe that copied
/// every node on its way down spent a tenth of a create in allocating and freeing them.
pub(super) struct IndexLevel {
    /// The node's logical block in the directory (0 for the root).
    pub(super) logical: u64,
    /// Index of the entry followed.
    pub(super) at: usize,
    /// The node's `count` and `limit`.
    count: usize,
    limit: u16,
    followed: DxEntry,
    /// The entry after the followed one, if there is one.
    next: Option<DxEntry>,
    /// The node, once an edit has copied it.
    node: Option<DxNode>,
}

impl IndexLevel {
    /// The level of node `logical` whose entries are `entries`, following entry `at`.
    fn following(logical: u64, entries: &DxEntries<'_>, at: usize) -> Self {
        IndexLevel {
            logical,
            at,
            count: entries.len(),
            limit: entries.limit,
            followed: entries.get(at),
            next: (at + 1 < entries.len()).then(|| entries.get(at + 1)),
            node: None,
        }
    }

    /// The level of `node` (already a copy, as an edit leaves it), following entry `at`.
    fn of_node(logical: u64, node: DxNode, at: usize) -> Self {
        IndexLevel {
            logical,
            at,
            count: node.entries.len(),
            limit: node.limit,
            followed: node.entries[at],
            next: node.entries.get(at + 1).copied(),
            node: Some(node),
        }
    }

    fn is_full(&self) -> bool {
        self.count >= usize::from(self.limit)
    }

    /// The entry the path follows.
    pub(super) fn followed(&self) -> DxEntry {
        self.followed
    }
}

/// The path from the root to a leaf (`struct dx_frame` array).
pub(super) struct IndexPath {
    /// Block 0's bytes when they are not yet on the disk (a directory being converted to an
    /// index); `None` when block 0 is the root as read, which a split then reads again to
    /// rewrite the root in place, keeping "." and "..". (Only a split writes the root: a
    /// lookup does not copy it.)
    unwritten_root: Option<Vec<u8>>,
    root_info: DxRootInfo,
    /// Root first; one level per index level (at most three: large_dir's depth, so the
    /// path lives on the stack).
    levels: SmallVec<[IndexLevel; MAX_LEVELS_LARGEDIR as usize]>,
    /// How names are hashed, from the root and the superblock.
    pub(super) version: HashVersion,
}

impl IndexPath {
    /// The key [`DirectoryEditor::advance`] would move to, read from the levels in hand.
    pub(super) fn next_key(&self) -> Option<u32> {
        self.levels
            .iter()
            .rev()
            .find_map(|l| l.next)
            .map(|next| next.hash)
    }

    pub(super) fn bottom(&self) -> &IndexLevel {
        // OK to unwrap: a path always holds the root.
        self.levels.last().unwrap()
    }
}

/// A live entry with the hash that orders it.
struct HashedEntry {
    hash: u32,
    /// `rec_len` where the entry was: `do_split` weighs entries by it.
    rec_len: usize,
    /// Position in the block's chain, to repack the staying entries in their old order.
    order: usize,
    entry: NewEntry,
}

impl DirectoryEditor<'_> {
    /// The live entry `name` in an indexed directory: in the leaf its hash selects, or in the
    /// following leaves whose keys carry the same hash (a run of equal hashes split across
    /// leaves).
    pub(crate) fn find_indexed(&self, name: &[u8]) -> Result<Option<Found>> {
        let mut path = self.probe_name(name)?;
        let hash = self.hash_name(path.version, name);
        loop {
            let logical = self.index_target(path.bottom().followed(), path.bottom().logical)?;
            let (physical, entry) = self.look_leaf(logical, |_, leaf| Ok(leaf.find(name)))?;
            if let Some(entry) = entry {
                return Ok(Some(Found { physical, entry }));
            }
            match self.advance(&mut path)? {
                Some(key) if key & !1 == hash => continue,
                _ => return Ok(None),
            }
        }
    }

    /// Every leaf of the index, in hash order. A block the index references twice is
    /// corruption (e2fsck's PR_2_HTREE_DUPREF): left alone, a node referenced from many
    /// places would multiply the walk.
    pub(crate) fn index_leaves(&self) -> Result<Vec<u64>> {
        let (info, root) = self.read_root()?;
        let mut seen = BTreeSet::new();
        let mut targets = |node: &DxNode, from: u64| -> Result<Vec<u64>> {
            let mut out = Vec::with_capacity(node.entries.len());
            for &e in &node.entries {
                let target = self.index_target(e, from)?;
                if !seen.insert(target) {
                    return Err(FormatError::corrupt(
                        Structure::HtreeIndex,
                        self.loc(self.physical(from)?),
                        Problem::BlockReferencedTwice { block: target },
                    )
                    .into());
                }
                out.push(target);
            }
            Ok(out)
        };
        let mut frontier = targets(&root, 0)?;
        for _ in 0..info.indirect_levels {
            let mut next = Vec::new();
            for logical in frontier {
                let node = self.read_index_node(logical)?;
                next.extend(targets(&node, logical)?);
            }
            frontier = next;
        }
        Ok(frontier)
    }

    /// Adds an entry to an indexed directory (`ext4_dx_add_entry`): into the leaf its hash
    /// selects if it has room; else the leaf splits, after the index above it has made room
    /// for one more key by splitting a node or adding a level.
    pub(crate) fn add_indexed(&mut self, entry: NewEntry) -> Result<()> {
        loop {
            let mut path = self.probe_name(&entry.name)?;
            let hash = self.hash_name(path.version, &entry.name);
            let logical = self.index_target(path.bottom().followed(), path.bottom().logical)?;
            let (physical, probe) =
                self.look_leaf(logical, |_, leaf| Ok(leaf.probe(&entry.name)))?;
            match probe {
                LeafProbe::Found => {
                    let name = String::from_utf8_lossy(&entry.name).into_owned();
                    return Err(Error::Exists(name));
                }
                LeafProbe::Absent(Some(slot)) => {
                    return self.edit_leaf(physical, |leaf| {
                        leaf.insert_at(slot, &entry.name, entry.ino, entry.file_type)
                    });
                }
                LeafProbe::Absent(None) => {}
            }
            if !path.bottom().is_full() {
                let version = path.version;
                let (_, staying) = self.look_leaf(logical, |_, leaf| {
                    Ok(self.hashed(leaf.leaf().entries(), version))
                })?;
                return self.split_leaf(&mut path, physical, staying, entry, hash);
            }
            // The index changed shape: find the leaf again from the root, as the kernel does.
            self.make_room_in_index(&mut path)?;
        }
    }

    /// [`DirectoryEditor::add_new`] through the index: one probe and one read of the leaf
    /// answer whether `name` exists and, usually, take the new entry. `None` when that
    /// leaf cannot settle it: the name's hash may continue in the next leaf, or the leaf
    /// is full (the caller then looks up and adds the long way).
    pub(crate) fn add_new_indexed(
        &mut self,
        name: &[u8],
        file_type: u8,
        make: &mut dyn FnMut() -> Result<u32>,
    ) -> Result<Option<u32>> {
        let path = self.probe_name(name)?;
        let hash = self.hash_name(path.version, name);
        if path.next_key().is_some_and(|key| key & !1 == hash) {
            return Ok(None);
        }
        let logical = self.index_target(path.bottom().followed(), path.bottom().logical)?;
        let (physical, probe) = self.look_leaf(logical, |_, leaf| Ok(leaf.probe(name)))?;
        let slot = match probe {
            LeafProbe::Found => {
                return Err(Error::Exists(String::from_utf8_lossy(name).into_owned()))
            }
            LeafProbe::Absent(None) => return Ok(None),
            LeafProbe::Absent(Some(slot)) => slot,
        };
        // `make` allocates and writes the new inode: no buffer lock may be held across it.
        let ino = make()?;
        self.edit_leaf(physical, |leaf| leaf.insert_at(slot, name, ino, file_type))?;
        Ok(Some(ino))
    }

    /// Turns a full one-block linear directory into an indexed one (`make_indexed_dir`):
    /// block 0 keeps "." and ".." and becomes the root; its other entries, with the new one,
    /// are split between new blocks 1 and 2.
    pub(crate) fn make_indexed(
        &mut self,
        physical: u64,
        block0: LeafBlock,
        entry: NewEntry,
    ) -> Result<()> {
        let loc = self.loc(physical);
        check_dot_entries(block0.bytes(), self.format(), loc)?;
        let version =
            HashVersion::from_disk(self.format().def_hash_version, self.format().unsigned_hash)
                .ok_or_else(|| {
                    Error::NotSupported(format!(
                        "default directory hash version {}",
                        self.format().def_hash_version
                    ))
                })?;
        let mut live: Vec<LeafEntry> = block0.entries().skip(2).collect();
        // The kernel first copies everything after ".." to the start of block 1, so the
        // entry that ended the chain grows by the bytes "." and ".." occupied.
        let moved_from = block0
            .entries()
            .nth(1)
            .map_or(DOTDOT_OFFSET, |dotdot| dotdot.offset + dotdot.rec_len);
        if let Some(last) = live.last_mut() {
            if last.offset + last.rec_len == block0.chain_end() {
                last.rec_len += moved_from;
            }
        }
        let staying = self.hashed(live.into_iter(), version);

        // Block 1 gets an empty leaf at once, so that if block 2 cannot be had the
        // directory is still a valid linear one.
        let physical1 = self.blocks().append_block()?;
        self.write_leaf(physical1, &LeafBlock::empty(self.format()))?;

        let mut root_block = block0.bytes().to_vec();
        let dotdot_len = self.format().block_size - DOTDOT_OFFSET;
        let rec_len_field = DOTDOT_OFFSET + REC_LEN_FIELD.start..DOTDOT_OFFSET + REC_LEN_FIELD.end;
        root_block[rec_len_field].copy_from_slice(&rec_len_to_disk(dotdot_len).to_le_bytes());
        let root = DxRoot::new(
            self.format().block_size,
            self.format().metadata_csum,
            self.format().def_hash_version,
            1,
        );
        let mut path = IndexPath {
            unwritten_root: Some(root_block),
            root_info: root.info,
            levels: smallvec![IndexLevel::of_node(0, root.node, 0)],
            version,
        };
        let hash = self.hash_name(version, &entry.name);
        self.split_leaf(&mut path, physical1, staying, entry, hash)?;
        self.blocks().set_indexed(true);
        Ok(())
    }

    /// Splits the full leaf at `physical` (the one `path` leads to) in two by hash
    /// (`do_split`), adds `entry` to the half its hash belongs in, and adds the new half's
    /// key to the bottom index node, which has room.
    fn split_leaf(
        &mut self,
        path: &mut IndexPath,
        physical: u64,
        mut entries: Vec<HashedEntry>,
        entry: NewEntry,
        hash: u32,
    ) -> Result<()> {
        entries.sort_by_key(|e| (e.hash, e.order));
        // Move entries from the top while the moved bytes, with half the next entry, stay
        // within half a block; if that takes them all, split by count.
        let half = self.format().block_size / 2;
        let mut moved_bytes = 0;
        let mut moved = 0;
        let mut stopped_at = None;
        for (i, e) in entries.iter().enumerate().rev() {
            if moved_bytes + e.rec_len / 2 > half {
                stopped_at = Some(i);
                break;
            }
            moved_bytes += e.rec_len;
            moved += 1;
        }
        let split = match stopped_at {
            Some(i) if i > 0 => entries.len() - moved,
            _ => entries.len() / 2,
        };
        let hash2 = entries.get(split).map_or(hash, |e| e.hash);
        // Equal hashes on both sides: the new key says the run continues from the left.
        let continued = split > 0 && entries[split - 1].hash == hash2;

        let mut right: Vec<NewEntry> = Vec::new();
        let mut left_ordered: Vec<(usize, NewEntry)> = Vec::new();
        for (i, e) in entries.into_iter().enumerate() {
            if i >= split {
                right.push(e.entry);
            } else {
                left_ordered.push((e.order, e.entry));
            }
        }
        left_ordered.sort_by_key(|(order, _)| *order);
        let mut left: Vec<NewEntry> = left_ordered.into_iter().map(|(_, e)| e).collect();
        if hash >= hash2 {
            right.push(entry);
        } else {
            left.push(entry);
        }
        let pack = |entries: &[NewEntry]| {
            LeafBlock::packed(self.format(), entries).ok_or_else(|| {
                Error::NoSpace(Shortage::Room("directory leaf after a split".into()))
            })
        };
        // Everything that can fail comes before the first write, so a failed split leaves
        // the directory as it was (but for an unused block at its end, if a write fails).
        let (left, right) = (pack(&left)?, pack(&right)?);
        let (new_physical, new_logical) = self.append_index_block()?;
        self.write_leaf(physical, &left)?;
        self.write_leaf(new_physical, &right)?;

        let bottom = path.levels.len() - 1;
        let key = hash2 | u32::from(continued);
        self.insert_key(&mut path.levels[bottom], key, new_logical)?;
        self.write_index_level(path, bottom)
    }

    /// Appends a block that an index entry will point at, first checking that its number
    /// fits in `dx_entry.block`.
    fn append_index_block(&mut self) -> Result<(u64, u32)> {
        let logical = u32::try_from(self.blocks().block_count())
            .ok()
            .filter(|&b| b <= DX_BLOCK_MASK)
            .ok_or_else(|| Error::FileTooBig("directory past 2^28 blocks".into()))?;
        Ok((self.blocks().append_block()?, logical))
    }

    /// Makes room for one more key in the bottom node of `path` (full): splits the lowest
    /// full node whose parent has room, or, when every node on the path is full, moves the
    /// root's entries into a new node below it (one more level). At the deepest allowed
    /// index the directory is full: [`Error::NoSpace`]`("directory index")`.
    fn make_room_in_index(&mut self, path: &mut IndexPath) -> Result<()> {
        let mut level = path.levels.len() - 1;
        while level > 0 && path.levels[level - 1].is_full() {
            level -= 1;
        }
        let block_size = self.format().block_size;
        let csum = self.format().metadata_csum;
        if level == 0 {
            if path.levels.len() >= usize::from(self.format().max_index_levels()) {
                return Err(Error::NoSpace(Shortage::DirectoryIndex));
            }
            let (physical, logical) = self.append_index_block()?;
            let root = self.node_of(&mut path.levels[0])?;
            let child = DxNode::new_interior(block_size, csum, root.entries.clone());
            self.write_index_node(physical, &child)?;
            root.entries = vec![DxEntry {
                hash: 0,
                block: logical,
            }];
            path.root_info.indirect_levels += 1;
            return self.write_index_level(path, 0);
        }
        let (physical, logical) = self.append_index_block()?;
        let full = self.node_of(&mut path.levels[level])?;
        let keep = full.entries.len() / 2;
        let moved = full.entries.split_off(keep);
        let key = moved[0].hash;
        self.write_index_node(physical, &DxNode::new_interior(block_size, csum, moved))?;
        self.write_index_level(path, level)?;
        self.insert_key(&mut path.levels[level - 1], key, logical)?;
        self.write_index_level(path, level - 1)
    }

    /// Reads the root and walks down to the bottom index node for `name`'s hash.
    fn probe_name(&self, name: &[u8]) -> Result<IndexPath> {
        self.probe(|version| self.hash_name(version, name))
    }

    /// Reads the root and walks down to the bottom index node for the hash `hash_of` gives
    /// under the directory's hash version.
    pub(super) fn probe(&self, hash_of: impl FnOnce(HashVersion) -> u32) -> Result<IndexPath> {
        let (root_info, version, hash, root) = self.look_at_index(0, |info, entries| {
            // OK to unwrap: block 0 is the root, shown with its info.
            let info = info.cloned().expect("the root comes with its info");
            let Some(version) =
                HashVersion::from_disk(info.hash_version, self.format().unsigned_hash)
            else {
                let loc = self.loc(self.physical(0)?);
                let problem = Problem::UnknownHashVersion {
                    version: info.hash_version,
                };
                return Err(FormatError::corrupt(Structure::HtreeRoot, loc, problem).into());
            };
            let hash = hash_of(version);
            let root = IndexLevel::following(0, &entries, entries.child_for(hash));
            Ok((info, version, hash, root))
        })?;
        let mut levels: SmallVec<[IndexLevel; MAX_LEVELS_LARGEDIR as usize]> = smallvec![root];
        for _ in 0..root_info.indirect_levels {
            let parent = levels.last().expect("levels start with the root");
            let logical = self.index_target(parent.followed(), parent.logical)?;
            levels.push(self.read_level(logical, |entries| entries.child_for(hash))?);
        }
        Ok(IndexPath {
            unwritten_root: None,
            root_info,
            levels,
            version,
        })
    }

    /// Moves `path` to the next leaf in hash order (`ext4_htree_next_block`) and returns
    /// the key of the entry it moved to at the level that advanced; `None` past the last
    /// leaf.
    pub(super) fn advance(&self, path: &mut IndexPath) -> Result<Option<u32>> {
        let Some(level) = (0..path.levels.len())
            .rev()
            .find(|&l| path.levels[l].next.is_some())
        else {
            return Ok(None);
        };
        let at = path.levels[level].at + 1;
        path.levels[level] = self.read_level(path.levels[level].logical, |_| at)?;
        let key = path.levels[level].followed().hash;
        for below in level + 1..path.levels.len() {
            let above = &path.levels[below - 1];
            let logical = self.index_target(above.followed(), above.logical)?;
            path.levels[below] = self.read_level(logical, |_| 0)?;
        }
        Ok(Some(key))
    }

    /// The level of index node `logical` (0: the root) following the entry `pick` chooses
    /// among its entries, read where the node lies.
    fn read_level(
        &self,
        logical: u64,
        pick: impl FnOnce(&DxEntries<'_>) -> usize,
    ) -> Result<IndexLevel> {
        self.look_at_index(logical, |_, entries| {
            let at = pick(&entries);
            if at >= entries.len() {
                return Err(Error::Internal(format!(
                    "index entry {at} of {} followed in directory block {logical}",
                    entries.len()
                )));
            }
            Ok(IndexLevel::following(logical, &entries, at))
        })
    }

    /// Shows index node `logical` (0: the root, with its info) to `look` where it lies in
    /// the cache, checked as a parse checks it: the hash order by the buffer cache's
    /// verifier, once per block read (`check_index_block`), the rest on every look.
    fn look_at_index<T>(
        &self,
        logical: u64,
        look: impl FnOnce(Option<&DxRootInfo>, DxEntries<'_>) -> Result<T>,
    ) -> Result<T> {
        let physical = self.physical(logical)?;
        let format = self.format();
        look_at(
            self.io(),
            physical,
            BlockKind::HtreeNode,
            self.owner(),
            |bytes| {
                let loc = self.loc(physical);
                if logical == 0 {
                    let (info, entries) = DxRoot::entries_in(
                        bytes,
                        format.metadata_csum,
                        format.max_index_levels(),
                        HashOrder::CheckedBefore,
                        loc,
                    )?;
                    look(Some(&info), entries)
                } else {
                    let order = HashOrder::CheckedBefore;
                    look(
                        None,
                        DxNode::entries_in(bytes, format.metadata_csum, order, loc)?,
                    )
                }
            },
        )
    }

    /// The node of `level`, copied from where it lies the first time an edit needs it.
    fn node_of<'l>(&self, level: &'l mut IndexLevel) -> Result<&'l mut DxNode> {
        let node = match level.node.take() {
            Some(node) => node,
            None if level.logical == 0 => self.read_root()?.1,
            None => self.read_index_node(level.logical)?,
        };
        Ok(level.node.insert(node))
    }

    /// Adds (key → block) right after the entry `level` follows (`dx_insert_block`).
    fn insert_key(&self, level: &mut IndexLevel, key: u32, block: u32) -> Result<()> {
        let at = level.at;
        let node = self.node_of(level)?;
        node.entries.insert(at + 1, DxEntry { hash: key, block });
        level.count = node.entries.len();
        Ok(())
    }

    /// Block 0's root info and its index, copied.
    fn read_root(&self) -> Result<(DxRootInfo, DxNode)> {
        self.look_at_index(0, |info, entries| {
            // OK to unwrap: block 0 is the root, shown with its info.
            let info = info.cloned().expect("the root comes with its info");
            Ok((info, entries.to_node()))
        })
    }

    /// Interior index node `logical`, copied.
    fn read_index_node(&self, logical: u64) -> Result<DxNode> {
        self.look_at_index(logical, |_, entries| Ok(entries.to_node()))
    }

    /// The logical block an index entry in node `from` points at, checked to lie inside
    /// the directory and not to be the root.
    pub(super) fn index_target(&self, entry: DxEntry, from: u64) -> Result<u64> {
        let block = u64::from(entry.block & DX_BLOCK_MASK);
        let count = self.block_count()?;
        if block == 0 || block >= count {
            let loc = self.loc(self.physical(from)?);
            return Err(FormatError::corrupt(
                Structure::HtreeIndex,
                loc,
                Problem::IndexPointsOutside {
                    block,
                    blocks: count,
                },
            )
            .into());
        }
        Ok(block)
    }

    fn write_index_level(&self, path: &IndexPath, level: usize) -> Result<()> {
        let index = &path.levels[level];
        let node = index.node.as_ref().ok_or_else(|| {
            Error::Internal(format!(
                "index node at directory block {} written without an edit",
                index.logical
            ))
        })?;
        let physical = self.physical(index.logical)?;
        if index.logical != 0 {
            return self.write_index_node(physical, node);
        }
        let mut block = match &path.unwritten_root {
            Some(bytes) => bytes.clone(),
            None => self
                .io()
                .read(physical, BlockKind::HtreeNode, self.owner())?,
        };
        DxRoot {
            info: path.root_info.clone(),
            node: node.clone(),
        }
        .encode_into(&mut block);
        self.io()
            .write(physical, BlockKind::HtreeNode, self.owner(), &block)
    }

    fn write_index_node(&self, physical: u64, node: &DxNode) -> Result<()> {
        let block = node.encode_interior(self.format().block_size);
        self.io()
            .write(physical, BlockKind::HtreeNode, self.owner(), &block)
    }

    fn hash_name(&self, version: HashVersion, name: &[u8]) -> u32 {
        dir_hash(version, name, &self.format().hash_seed).major
    }

    /// Live entries with their hashes, numbered in the order given (chain order).
    fn hashed(
        &self,
        entries: impl Iterator<Item = LeafEntry>,
        version: HashVersion,
    ) -> Vec<HashedEntry> {
        entries
            .enumerate()
            .map(|(order, e)| HashedEntry {
                hash: self.hash_name(version, &e.name),
                rec_len: e.rec_len,
                order,
                entry: NewEntry {
                    ino: e.ino,
                    file_type: e.file_type,
                    name: e.name,
                },
            })
            .collect()
    }
}

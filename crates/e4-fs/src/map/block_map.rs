//! Changing an inode's indirect block map (ext2/ext3, and ext4 inodes without EXTENTS_FL):
//! `i_block` holds 12 direct pointers, then the single, double and triple indirect pointers
//! (reference/write-path.md §2). Indirect blocks are arrays of little-endian u32 block
//! numbers, 0 for a hole; they are zero-filled when allocated, counted in `i_blocks`, and
//! freed when a removal empties them. There is no unwritten state.
//!
//! Failure atomicity: an operation works on private copies of the blocks it changes and of
//! `i_block`, and writes them through [`MetaIo`] only once it cannot fail any more; if an
//! allocation fails, the indirect blocks it already took are given back, so `NoSpace` leaves
//! the map as it was.

use std::collections::{BTreeMap, BTreeSet};

use e4_format::block_map::{block_map_path, indirect_pointer, DIRECT_BLOCKS, SINGLE_INDIRECT_SLOT};
use e4_format::inode::I_BLOCK_SIZE;
use e4_format::{FormatError, Location, Problem, Structure};

use crate::error::Shortage;
use crate::error::{Error, Result};
use crate::io::credits::GROUP;
use crate::io::meta_io::{look_at, BlockKind, MetaIo, Owner};
use crate::map::run::Mapping;

/// Pointers in `i_block`.
const ROOT_POINTERS: usize = I_BLOCK_SIZE / 4;
/// Block numbers in a block map are 32 bits, and so are logical block numbers in ext4.
const POINTER_LIMIT: u64 = 1 << 32;

fn pointer_at(words: &[u8], index: usize) -> u32 {
    // OK to unwrap: callers index within the array (15 words, or block_size / 4).
    indirect_pointer(words, index as u32).unwrap()
}

fn set_pointer(words: &mut [u8], index: usize, value: u32) {
    words[4 * index..4 * index + 4].copy_from_slice(&value.to_le_bytes());
}

/// An inode's block map, rooted in its 60-byte `i_block`.
///
/// Counts the indirect blocks it allocates and frees ([`BlockMapTree::node_blocks_change`]):
/// the caller keeps `i_blocks` = data blocks + indirect blocks.
pub struct BlockMapTree<'a> {
    root: &'a mut [u8; I_BLOCK_SIZE],
    io: &'a dyn MetaIo,
    owner: Owner,
    node_blocks_change: i64,
}

/// The changes of one operation, kept aside until it can no longer fail.
struct Pending {
    root: [u8; I_BLOCK_SIZE],
    /// Indirect blocks read or created, by block number.
    blocks: BTreeMap<u64, Vec<u8>>,
    /// Those of `blocks` changed or created, to be written.
    dirty: BTreeSet<u64>,
    allocated: Vec<u64>,
    freed: Vec<u64>,
}

impl Pending {
    fn new(root: [u8; I_BLOCK_SIZE]) -> Self {
        Pending {
            root,
            blocks: BTreeMap::new(),
            dirty: BTreeSet::new(),
            allocated: Vec::new(),
            freed: Vec::new(),
        }
    }
}

impl<'a> BlockMapTree<'a> {
    /// The map rooted in `root` (an inode's `i_block`), owned by `owner`.
    pub fn new(root: &'a mut [u8; I_BLOCK_SIZE], io: &'a dyn MetaIo, owner: Owner) -> Self {
        BlockMapTree {
            root,
            io,
            owner,
            node_blocks_change: 0,
        }
    }

    /// Indirect blocks allocated minus freed since this `BlockMapTree` was made; the caller
    /// adds `change × block_size / 512` to `i_blocks`.
    pub fn node_blocks_change(&self) -> i64 {
        self.node_blocks_change
    }

    /// One past the last logical block the map can address at this block size (§2 table).
    pub fn logical_limit(&self) -> u64 {
        let per = (self.io.block_size() / 4) as u64;
        (DIRECT_BLOCKS + per + per * per + per * per * per).min(POINTER_LIMIT)
    }

    /// The run of blocks from `logical` on, at most `max_len` long: where they are mapped
    /// contiguously, or how long the hole there is. Follows the pointers down looking at
    /// each indirect block where it lies (no copy), then extends the run over the
    /// following pointers of the last array it read, so a reader issues one device read
    /// per contiguous run. A hole that starts at a missing indirect block spans the rest of
    /// that block's subtree.
    pub fn lookup_run(&self, logical: u64, max_len: u64) -> Result<Mapping> {
        let Some(path) = block_map_path(logical, self.block_size_u32()) else {
            return Ok(Mapping::Hole { len: u64::MAX });
        };
        let per = (self.io.block_size() / 4) as u64;
        let mut pointer = pointer_at(&self.root[..], path.slot);
        let mut holder = None;
        for level in 0..path.depth {
            if pointer == 0 {
                // The subtree under the missing block: what is left of it from `logical`.
                let (mut span, mut offset) = (1u64, 0u64);
                for j in (level..path.depth).rev() {
                    offset += u64::from(path.indexes[j]) * span;
                    span *= per;
                }
                return Ok(Mapping::Hole {
                    len: (span - offset).min(max_len).max(1),
                });
            }
            let block = u64::from(pointer);
            self.io.check_mapped(block, 1, self.owner)?;
            pointer = look_at(
                self.io,
                block,
                BlockKind::IndirectBlock,
                self.owner,
                |words| Ok(pointer_at(words, path.indexes[level] as usize)),
            )?;
            holder = Some(block);
        }
        let first = pointer;
        let extend = |words: &[u8], at: usize| {
            let limit = max_len.min((words.len() / 4 - at) as u64);
            (1..limit)
                .take_while(|&k| {
                    let next = pointer_at(words, at + k as usize);
                    match first {
                        0 => next == 0,
                        _ => next != 0 && u64::from(next) == u64::from(first) + k,
                    }
                })
                .count() as u64
                + 1
        };
        let len = match holder {
            // Direct blocks: the run stays among the twelve direct pointers.
            None => extend(&self.root[..4 * DIRECT_BLOCKS as usize], path.slot),
            Some(block) => {
                let at = path.indexes[path.depth - 1] as usize;
                look_at(
                    self.io,
                    block,
                    BlockKind::IndirectBlock,
                    self.owner,
                    |words| Ok(extend(words, at)),
                )?
            }
        };
        Ok(match first {
            0 => Mapping::Hole { len },
            _ => Mapping::Data {
                physical: u64::from(first),
                len,
                unwritten: false,
            },
        })
    }

    /// The physical block `logical` maps to, or `None` for a hole.
    #[cfg(any(test, feature = "testing"))]
    pub fn find(&self, logical: u64) -> Result<Option<u64>> {
        Ok(match self.lookup_run(logical, 1)? {
            Mapping::Data { physical, .. } => Some(physical),
            Mapping::Hole { .. } => None,
        })
    }

    /// Maps `len` logical blocks from `logical` to the physical blocks from `physical`,
    /// allocating indirect blocks as needed. Every block must be a hole (else
    /// [`Error::Invalid`]) and below [`Self::logical_limit`] (else [`Error::FileTooBig`]);
    /// on any error nothing is changed.
    pub fn insert(&mut self, logical: u64, physical: u64, len: u64) -> Result<()> {
        let end = logical.saturating_add(len);
        if end > self.logical_limit() {
            return Err(Error::FileTooBig(format!(
                "inode {}: logical block {} is past the block map's limit {}",
                self.owner.ino,
                end - 1,
                self.logical_limit()
            )));
        }
        if physical == 0 || physical.saturating_add(len) > POINTER_LIMIT {
            return Err(Error::Invalid(format!(
                "physical blocks {physical}+{len} for inode {} cannot be stored in a block map",
                self.owner.ino
            )));
        }
        let mut pending = Pending::new(*self.root);
        for k in 0..len {
            if let Err(err) = self.map_one(&mut pending, logical + k, physical + k) {
                for &block in &pending.allocated {
                    self.io.free(block, 1, self.owner)?;
                }
                return Err(err);
            }
        }
        self.commit(pending)
    }

    /// Unmaps logical blocks `start .. start + len` (punch; `len` = `u64::MAX` truncates) and
    /// returns the data runs unmapped, as `(physical, len)` in logical order, for the caller to
    /// free. Indirect blocks left without any pointer are freed and unhooked.
    pub fn remove(&mut self, start: u64, len: u64) -> Result<Vec<(u64, u64)>> {
        let end = start.saturating_add(len).min(self.logical_limit());
        let mut pending = Pending::new(*self.root);
        let mut runs: Vec<(u64, u64)> = Vec::new();
        let per = (self.io.block_size() / 4) as u64;
        let mut root = pending.root;
        for slot in 0..ROOT_POINTERS {
            let (base, depth) = if slot < SINGLE_INDIRECT_SLOT {
                (slot as u64, 0)
            } else {
                let depth = (slot - SINGLE_INDIRECT_SLOT + 1) as u32;
                let base = DIRECT_BLOCKS + (1..depth).map(|d| per.pow(d)).sum::<u64>();
                (base, depth)
            };
            let span = per.pow(depth);
            if base + span <= start || base >= end {
                continue;
            }
            let pointer = pointer_at(&root, slot);
            if pointer != 0
                && self.remove_under(&mut pending, pointer, depth, base, start, end, &mut runs)?
            {
                set_pointer(&mut root, slot, 0);
            }
        }
        pending.root = root;
        self.commit(pending)?;
        Ok(runs)
    }

    fn block_size_u32(&self) -> u32 {
        // OK to cast: block sizes are at most 64 KiB.
        self.io.block_size() as u32
    }

    fn read_indirect(&self, block: u64) -> Result<Vec<u8>> {
        self.io.check_mapped(block, 1, self.owner)?;
        self.io.read(block, BlockKind::IndirectBlock, self.owner)
    }

    /// The store the map reads through, and whose blocks these are.
    pub(crate) fn io_and_owner(&self) -> (&dyn MetaIo, Owner) {
        (self.io, self.owner)
    }

    /// Brings indirect block `block` into `pending` (once), so later reads see its changes.
    fn load(&self, pending: &mut Pending, block: u64) -> Result<()> {
        if let std::collections::btree_map::Entry::Vacant(slot) = pending.blocks.entry(block) {
            slot.insert(self.read_indirect(block)?);
        }
        Ok(())
    }

    /// Sets the pointer for `logical` to `physical` in `pending`, allocating missing indirect
    /// blocks (zero-filled) on the way down.
    fn map_one(&self, pending: &mut Pending, logical: u64, physical: u64) -> Result<()> {
        // OK to unwrap: the caller checked logical < logical_limit().
        let path = block_map_path(logical, self.block_size_u32()).unwrap();
        // OK to cast: the caller checked physical < 2^32.
        let physical = physical as u32;
        let mut holder: Option<u64> = None;
        let mut index = path.slot;
        for level in 0..=path.depth {
            let pointer = match holder {
                None => pointer_at(&pending.root, index),
                Some(block) => {
                    self.load(pending, block)?;
                    pointer_at(&pending.blocks[&block], index)
                }
            };
            if level == path.depth {
                if pointer != 0 {
                    return Err(Error::Invalid(format!(
                        "logical block {logical} of inode {} is already mapped",
                        self.owner.ino
                    )));
                }
                self.store(pending, holder, index, physical);
                return Ok(());
            }
            let next = if pointer == 0 {
                let goal = holder.unwrap_or(u64::from(physical));
                let block = self.io.allocate(goal, self.owner)?;
                pending.allocated.push(block);
                let Ok(pointer) = u32::try_from(block) else {
                    return Err(Error::NoSpace(Shortage::Room(format!(
                        "block map of inode {}: no indirect block below 2^32",
                        self.owner.ino
                    ))));
                };
                pending.blocks.insert(block, vec![0; self.io.block_size()]);
                pending.dirty.insert(block);
                self.store(pending, holder, index, pointer);
                block
            } else {
                u64::from(pointer)
            };
            holder = Some(next);
            index = path.indexes[level] as usize;
        }
        Ok(())
    }

    fn store(&self, pending: &mut Pending, holder: Option<u64>, index: usize, value: u32) {
        match holder {
            None => set_pointer(&mut pending.root, index, value),
            Some(block) => {
                // OK to unwrap: map_one loaded the holder into pending first.
                set_pointer(pending.blocks.get_mut(&block).unwrap(), index, value);
                pending.dirty.insert(block);
            }
        }
    }

    /// Clears the pointers for `start..end` under the indirect block `pointer` of `depth`
    /// levels covering logical blocks from `base`, collecting data runs. Returns whether the
    /// block was emptied and freed (its parent must drop the pointer).
    #[allow(clippy::too_many_arguments)]
    fn remove_under(
        &self,
        pending: &mut Pending,
        pointer: u32,
        depth: u32,
        base: u64,
        start: u64,
        end: u64,
        runs: &mut Vec<(u64, u64)>,
    ) -> Result<bool> {
        if depth == 0 {
            push_run(runs, u64::from(pointer));
            return Ok(true);
        }
        let block = u64::from(pointer);
        if pending.freed.contains(&block) {
            // A second pointer to a block this removal already freed: freeing it again
            // would hand the allocator a block twice.
            return Err(FormatError::corrupt(
                Structure::BlockMap,
                Location::InodeBlock {
                    inode: self.owner.ino,
                    block,
                },
                Problem::BlockReferencedTwice { block },
            )
            .into());
        }
        self.load(pending, block)?;
        let per = (self.io.block_size() / 4) as u64;
        let child_span = per.pow(depth - 1);
        let first = start.saturating_sub(base) / child_span;
        let last = ((end - base).div_ceil(child_span)).min(per);
        for i in first..last {
            let child = pointer_at(&pending.blocks[&block], i as usize);
            if child == 0 {
                continue;
            }
            let child_base = base + i * child_span;
            if self.remove_under(pending, child, depth - 1, child_base, start, end, runs)? {
                // OK to unwrap: loaded above; a child's removal never drops its parent.
                set_pointer(pending.blocks.get_mut(&block).unwrap(), i as usize, 0);
                pending.dirty.insert(block);
            }
        }
        if pending.blocks[&block].iter().all(|&b| b == 0) {
            pending.blocks.remove(&block);
            pending.dirty.remove(&block);
            pending.freed.push(block);
            return Ok(true);
        }
        Ok(false)
    }

    /// Writes what `pending` changed: indirect blocks, freed blocks, then `i_block`. An
    /// edit's indirect blocks are known before any is written, so it declares exactly
    /// them, and the groups of those it took (frees declare themselves).
    fn commit(&mut self, pending: Pending) -> Result<()> {
        let credits = pending.dirty.len() + pending.allocated.len() * GROUP as usize;
        self.io
            .extend_credits(u32::try_from(credits).unwrap_or(u32::MAX));
        for block in &pending.dirty {
            let bytes = &pending.blocks[block];
            self.io
                .write(*block, BlockKind::IndirectBlock, self.owner, bytes)?;
        }
        for &block in &pending.freed {
            self.io.free(block, 1, self.owner)?;
        }
        self.node_blocks_change += pending.allocated.len() as i64 - pending.freed.len() as i64;
        *self.root = pending.root;
        Ok(())
    }
}

/// Adds data block `physical` to the runs, extending the last run when contiguous.
fn push_run(runs: &mut Vec<(u64, u64)>, physical: u64) {
    match runs.last_mut() {
        Some((start, len)) if *start + *len == physical => *len += 1,
        _ => runs.push((physical, 1)),
    }
}

#[cfg(test)]
mod tests;

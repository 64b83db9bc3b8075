//! A second opinion on a directory the editor wrote, for tests: it reads the blocks straight
//! from a [`MemoryMetaIo`] through e4-format's decoders alone (not through the editor's code)
//! and checks every rule of write-path.md §3 that e2fsck pass 2 checks, plus reachability:
//! every name must sit where a lookup by its hash goes.

use std::collections::BTreeMap;

use e4_format::dir_entry::{entry_size, has_tail, DirEntryIter, DirLeafBlock, TAIL_SIZE};
use e4_format::dir_hash::{dir_hash, HashVersion};
use e4_format::dir_htree::{DxNode, DxRoot};
use e4_format::{Location, MetadataBlock};

use crate::dir::entry::DirFormat;
use crate::io::meta_io::memory::MemoryMetaIo;
use crate::io::meta_io::{BlockKind, Owner};

/// Where count/limit sit in a root (after "." , ".." and `dx_root_info`) and in an interior
/// node (after the fake dirent).
const ROOT_ENTRIES_OFFSET: usize = 0x20;
const NODE_ENTRIES_OFFSET: usize = 8;

/// What a directory holds: name → (inode, file type code).
pub(crate) type Contents = BTreeMap<Vec<u8>, (u32, u8)>;

/// Summary of an indexed directory's shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Shape {
    /// `indirect_levels` of the root (0 for a linear directory).
    pub indirect_levels: u8,
    pub leaves: usize,
}

/// The directory as the checker found it.
struct Checker<'a> {
    io: &'a MemoryMetaIo,
    blocks: &'a [u64],
    format: &'a DirFormat,
    owner: Owner,
    /// Stands in for the inode checksum seed: any value checks that sealing and verifying
    /// agree on what a block's checksum covers.
    seed: u32,
    contents: Contents,
    references: Vec<u32>,
    leaves: usize,
}

/// Checks the directory whose logical blocks are `blocks`; returns its contents and shape,
/// or the first broken rule.
pub(crate) fn check_directory(
    io: &MemoryMetaIo,
    blocks: &[u64],
    indexed: bool,
    format: &DirFormat,
    owner: Owner,
) -> Result<(Contents, Shape), String> {
    let mut checker = Checker {
        io,
        blocks,
        format,
        owner,
        seed: 0x5eed ^ owner.ino,
        contents: Contents::new(),
        references: vec![0; blocks.len()],
        leaves: 0,
    };
    if blocks.is_empty() {
        return Err("directory has no blocks".into());
    }
    if !(indexed && format.dir_index) {
        for logical in 0..blocks.len() {
            checker.leaf(logical, None)?;
        }
        return Ok((
            checker.contents,
            Shape {
                indirect_levels: 0,
                leaves: blocks.len(),
            },
        ));
    }
    let levels = checker.root()?;
    for (logical, &refs) in checker.references.iter().enumerate().skip(1) {
        if refs != 1 {
            return Err(format!("block {logical} is referenced {refs} times"));
        }
    }
    let leaves = checker.leaves;
    Ok((
        checker.contents,
        Shape {
            indirect_levels: levels,
            leaves,
        },
    ))
}

/// Which hashes a block may hold: `[low, high)`.
#[derive(Debug, Clone, Copy)]
struct HashRange {
    low: u64,
    high: u64,
}

impl Checker<'_> {
    fn block(&self, logical: usize, kind: BlockKind) -> Result<Vec<u8>, String> {
        let physical = self.blocks[logical];
        let blocks = self.io.blocks.lock().unwrap();
        let Some((written_as, bytes)) = blocks.get(&physical) else {
            return Err(format!("block {logical} was never written"));
        };
        if *written_as != kind {
            return Err(format!(
                "block {logical} is a {written_as:?}, expected {kind:?}"
            ));
        }
        Ok(bytes.clone())
    }

    fn hash_version(&self, raw: u8) -> Result<HashVersion, String> {
        HashVersion::from_disk(raw, self.format.unsigned_hash)
            .ok_or_else(|| format!("hash version {raw}"))
    }

    /// Checks the root and everything below it; returns `indirect_levels`.
    fn root(&mut self) -> Result<u8, String> {
        let bytes = self.block(0, BlockKind::HtreeNode)?;
        let bs = self.format.block_size;
        let loc = Location::Block(self.blocks[0]);
        let root = DxRoot::parse(
            &bytes,
            self.format.metadata_csum,
            self.format.max_index_levels(),
            loc,
        )
        .map_err(|e| e.to_string())?;
        let first_two: Vec<_> = DirEntryIter::new(&bytes, bs, self.format.filetype, loc)
            .take(2)
            .collect::<Result<_, _>>()
            .map_err(|e| e.to_string())?;
        if first_two.len() != 2
            || first_two[0].name != b"."
            || first_two[0].inode != self.owner.ino
            || first_two[0].rec_len != 12
            || first_two[1].name != b".."
            || first_two[1].rec_len != bs - 12
        {
            return Err(format!("root's dot entries: {first_two:?}"));
        }
        if root.info.hash_version != self.format.def_hash_version {
            return Err(format!("root hash version {}", root.info.hash_version));
        }
        if self.format.metadata_csum {
            self.check_dx_tail(&bytes, &root.node, ROOT_ENTRIES_OFFSET, loc)?;
        }
        let version = self.hash_version(root.info.hash_version)?;
        let whole = HashRange {
            low: 0,
            high: 1 << 32,
        };
        self.node_children(&root.node, root.info.indirect_levels, whole, version)?;
        Ok(root.info.indirect_levels)
    }

    /// The dx_tail of an index block (after `limit` entries from `offset`) must be zero
    /// until sealed; sealed, the block must verify.
    fn check_dx_tail(
        &self,
        bytes: &[u8],
        node: &DxNode,
        offset: usize,
        loc: Location,
    ) -> Result<(), String> {
        let tail = offset + 8 * usize::from(node.limit);
        if bytes[tail..tail + 8] != [0; 8] {
            return Err(format!("index block {loc}: dx_tail written before sealing"));
        }
        let mut sealed = bytes.to_vec();
        DxNode::seal(&mut sealed, self.seed);
        DxNode::verify(&sealed, self.seed, loc).map_err(|e| format!("sealed index block: {e}"))
    }

    /// Checks the children of an index node whose entries lie in `range`; `below` index
    /// levels remain under this node.
    fn node_children(
        &mut self,
        node: &DxNode,
        below: u8,
        range: HashRange,
        version: HashVersion,
    ) -> Result<(), String> {
        let count = node.entries.len();
        for (i, entry) in node.entries.iter().enumerate() {
            let low = if i == 0 {
                range.low
            } else {
                u64::from(entry.hash & !1)
            };
            let high = match node.entries.get(i + 1) {
                // A key with the collision bit says the run of its hash continues from the
                // left, so the left block may hold that hash; without it, it may not.
                Some(next) => u64::from(next.hash & !1) + u64::from(next.hash & 1),
                None => range.high,
            };
            if i > 0 && (low < range.low || low > range.high) {
                return Err(format!(
                    "key {:#x} outside its node's range {range:x?}",
                    entry.hash
                ));
            }
            if i > 0 && entry.hash < node.entries[i - 1].hash {
                return Err(format!("keys out of order at {i} of {count}"));
            }
            let child = entry.block as usize;
            if child == 0 || child >= self.blocks.len() {
                return Err(format!("index points at block {child}"));
            }
            self.references[child] += 1;
            let child_range = HashRange { low, high };
            if below == 0 {
                self.leaf(child, Some((child_range, version)))?;
            } else {
                let bytes = self.block(child, BlockKind::HtreeNode)?;
                let loc = Location::Block(self.blocks[child]);
                let child_node = DxNode::parse(&bytes, self.format.metadata_csum, loc)
                    .map_err(|e| e.to_string())?;
                if self.format.metadata_csum {
                    self.check_dx_tail(&bytes, &child_node, NODE_ENTRIES_OFFSET, loc)?;
                }
                self.node_children(&child_node, below - 1, child_range, version)?;
            }
        }
        Ok(())
    }

    /// Checks a leaf block: a valid entry chain ending at the tail, its names in `hashes`
    /// when it is an htree leaf.
    fn leaf(
        &mut self,
        logical: usize,
        hashes: Option<(HashRange, HashVersion)>,
    ) -> Result<(), String> {
        self.leaves += 1;
        let mut bytes = self.block(logical, BlockKind::DirectoryLeaf)?;
        let bs = self.format.block_size;
        let loc = Location::Block(self.blocks[logical]);
        let end = if self.format.metadata_csum {
            if !has_tail(&bytes) {
                return Err(format!("block {logical} has no tail"));
            }
            if bytes[bs - 4..] != [0; 4] {
                return Err(format!("block {logical}'s tail checksum was written"));
            }
            DirLeafBlock::seal(&mut bytes, self.seed);
            DirLeafBlock::verify(&bytes, self.seed, loc).map_err(|e| e.to_string())?;
            bs - TAIL_SIZE
        } else {
            bs
        };
        let entries: Vec<_> = DirEntryIter::new(&bytes[..end], bs, self.format.filetype, loc)
            .collect::<Result<_, _>>()
            .map_err(|e| format!("block {logical}: {e}"))?;
        for (position, entry) in entries.iter().enumerate() {
            if entry.rec_len < 12 || entry.rec_len % 4 != 0 {
                return Err(format!("block {logical}: rec_len {}", entry.rec_len));
            }
            if entry.inode == 0 {
                continue;
            }
            if entry.rec_len < entry_size(entry.name.len()) {
                return Err(format!("block {logical}: name overflows its record"));
            }
            if entry.name.is_empty() {
                return Err(format!("block {logical}: a live entry has no name"));
            }
            let dots = entry.name == b"." || entry.name == b"..";
            let dot_place = hashes.is_none() && logical == 0 && position < 2;
            if dot_place {
                let expected: &[u8] = if position == 0 { b"." } else { b".." };
                if entry.name != expected || (position == 0 && entry.rec_len != 12) {
                    return Err(format!("block 0 entry {position} is {:?}", entry.name));
                }
                continue;
            }
            if dots {
                return Err(format!("block {logical} holds {:?}", entry.name));
            }
            if let Some((range, version)) = hashes {
                let hash = u64::from(dir_hash(version, entry.name, &self.format.hash_seed).major);
                if hash < range.low || hash >= range.high {
                    return Err(format!(
                        "{:?} (hash {hash:#x}) in block {logical}, whose range is {range:x?}",
                        String::from_utf8_lossy(entry.name)
                    ));
                }
            }
            let previous = self
                .contents
                .insert(entry.name.to_vec(), (entry.inode, entry.file_type));
            if previous.is_some() {
                return Err(format!("{:?} appears twice", entry.name));
            }
        }
        Ok(())
    }
}

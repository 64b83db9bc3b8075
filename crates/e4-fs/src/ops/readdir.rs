//! Reading directories: linear blocks, htree-indexed blocks (read linearly, skipping index
//! nodes) and inline directories; name lookup (by index where there is one).

use crate::buffer::cache::BufferRole;
use crate::io::meta_io::Owner;
use std::sync::Arc;

use e4_format::checksum::inode_csum_seed;
use e4_format::dir_entry::{file_type as ft, has_tail, DirEntryIter, TAIL_SIZE};
use e4_format::dir_htree::{DxNode, DxRoot};
use e4_format::features::{CompatFeatures, IncompatFeatures};
use e4_format::inline_data::{inline_dir_parent, inline_dir_regions, SYSTEM_DATA};
use e4_format::inode::{flags, Inode};
use e4_format::{FormatError, Location, MetadataBlock, Problem, Structure};

use crate::buffer::cache::Buffer;
use crate::dir::entry::{require_directory, DirEntry};
use crate::error::Result;
use crate::filesystem::Filesystem;
use crate::io::meta_io::BlockKind;
use crate::map::file_mapping::Mapping;

/// What a directory block holds.
enum DirBlock {
    /// Entries, in `bytes[..end]` of physical block `physical`.
    Leaf {
        block: Arc<Buffer>,
        physical: u64,
        end: usize,
    },
    /// An htree index block: no entries.
    Index,
    /// The htree root: "." and ".." followed by the index.
    Root {
        root: DxRoot,
        block: Arc<Buffer>,
        physical: u64,
    },
}

impl Filesystem {
    fn is_htree(&self, dir: &Inode) -> bool {
        dir.has_flag(flags::INDEX)
            && self
                .superblock()
                .compat()
                .contains(CompatFeatures::DIR_INDEX)
            && !dir.has_flag(flags::INLINE_DATA)
    }

    fn filetype_feature(&self) -> bool {
        self.superblock()
            .incompat()
            .contains(IncompatFeatures::FILETYPE)
    }

    fn dir_seed(&self, dir: &Inode) -> Option<u32> {
        self.store
            .csum_seed()
            .map(|s| inode_csum_seed(s, dir.ino, dir.record.generation))
    }

    /// Number of blocks in a (non-inline) directory.
    fn dir_blocks(&self, dir: &Inode) -> u64 {
        dir.size().div_ceil(u64::from(self.block_size()))
    }

    /// Reads logical block `logical` of a directory through the cache; holes are corrupt.
    pub(crate) fn read_dir_block(&self, dir: &Inode, logical: u64) -> Result<(u64, Arc<Buffer>)> {
        match self.map_block(dir, logical, 1)? {
            Mapping::Data {
                physical,
                unwritten: false,
                ..
            } => Ok((physical, self.store.read(physical)?)),
            _ => Err(FormatError::corrupt(
                Structure::Directory,
                Location::Inode(dir.ino),
                Problem::Hole { logical },
            )
            .into()),
        }
    }

    /// Reads and classifies a directory block, verifying its checksum.
    fn dir_block(&self, dir: &Inode, logical: u64) -> Result<DirBlock> {
        let (physical, block) = self.read_dir_block(dir, logical)?;
        let loc = Location::InodeBlock {
            inode: dir.ino,
            block: physical,
        };
        let seed = self.dir_seed(dir);
        let csum = self.superblock().has_metadata_csum();
        let htree_role = BufferRole::of(BlockKind::HtreeNode, Owner::of(dir));
        // The bytes are read under the buffer's lock and checked after it is released
        // (verification takes it again).
        let classified = {
            let bytes = block.bytes();
            let bs = bytes.len();
            if self.is_htree(dir) && logical == 0 {
                // "." and ".." are real entries at the start of the root block.
                let root = DxRoot::parse(&bytes, csum, self.htree_max_levels(), loc)?;
                Some(Ok(root))
            } else if self.is_htree(dir)
                && e4_format::codec::le32(&bytes, 0) == Some(0)
                && e4_format::codec::le16(&bytes, 4)
                    .map(|l| e4_format::dir_entry::rec_len_from_disk(l, bs))
                    == Some(bs)
            {
                // Without checksums an empty leaf looks the same as an index node; only a
                // well-formed index is treated as one.
                match DxNode::parse(&bytes, csum, loc) {
                    Ok(node) => Some(Err(node)),
                    Err(e) if csum => return Err(e.into()),
                    Err(_) => None,
                }
            } else {
                None
            }
        };
        match (classified, seed) {
            (Some(Ok(root)), seed) => {
                if let Some(seed) = seed {
                    block.verify_as(htree_role, |b| DxNode::verify(b, seed, loc))?;
                }
                return Ok(DirBlock::Root {
                    root,
                    block,
                    physical,
                });
            }
            (Some(Err(_)), seed) => {
                if let Some(seed) = seed {
                    block.verify_as(htree_role, |b| DxNode::verify(b, seed, loc))?;
                }
                return Ok(DirBlock::Index);
            }
            (None, _) => {}
        }
        let end = {
            let bytes = block.bytes();
            if csum && has_tail(&bytes) {
                bytes.len() - TAIL_SIZE
            } else {
                bytes.len()
            }
        };
        // The same verify step the editors' reads run: the checksum and the entry chain.
        self.store.verify(
            &block,
            BufferRole::of(BlockKind::DirectoryLeaf, Owner::of(dir)),
        )?;
        Ok(DirBlock::Leaf {
            block,
            physical,
            end,
        })
    }

    fn htree_max_levels(&self) -> u8 {
        if self
            .superblock()
            .incompat()
            .contains(IncompatFeatures::LARGEDIR)
        {
            e4_format::dir_htree::MAX_LEVELS_LARGEDIR
        } else {
            e4_format::dir_htree::MAX_LEVELS
        }
    }

    /// Calls `visit` for each live entry (including "." and "..") until it returns `Some`.
    fn scan_dir<T>(
        &self,
        dir: &Inode,
        mut visit: impl FnMut(&e4_format::dir_entry::DirEntry<'_>) -> Option<T>,
    ) -> Result<Option<T>> {
        require_directory(dir)?;
        let bs = self.block_size() as usize;
        let filetype = self.filetype_feature();
        if dir.has_flag(flags::INLINE_DATA) {
            let extra = self.raw_xattr(dir, SYSTEM_DATA)?.unwrap_or_default();
            for region in inline_dir_regions(&dir.record.block, &extra) {
                for entry in DirEntryIter::new(region, bs, filetype, Location::Inode(dir.ino)) {
                    let entry = entry?;
                    if entry.inode != 0 {
                        if let Some(found) = visit(&entry) {
                            return Ok(Some(found));
                        }
                    }
                }
            }
            return Ok(None);
        }
        let htree = self.is_htree(dir);
        for logical in 0..self.dir_blocks(dir) {
            if htree && logical == 0 {
                let DirBlock::Root {
                    block, physical, ..
                } = self.dir_block(dir, 0)?
                else {
                    unreachable!("block 0 of an indexed directory is its root");
                };
                let loc = Location::InodeBlock {
                    inode: dir.ino,
                    block: physical,
                };
                // Only "." and ".." precede the index in the root block.
                for entry in DirEntryIter::new(&block.bytes(), bs, filetype, loc).take(2) {
                    let entry = entry?;
                    if let Some(found) = visit(&entry) {
                        return Ok(Some(found));
                    }
                }
                continue;
            }
            if let Some(found) = self.scan_leaf(dir, logical, &mut visit)? {
                return Ok(Some(found));
            }
        }
        Ok(None)
    }

    fn scan_leaf<T>(
        &self,
        dir: &Inode,
        logical: u64,
        visit: &mut impl FnMut(&e4_format::dir_entry::DirEntry<'_>) -> Option<T>,
    ) -> Result<Option<T>> {
        let DirBlock::Leaf {
            block,
            physical,
            end,
        } = self.dir_block(dir, logical)?
        else {
            return Ok(None);
        };
        let loc = Location::InodeBlock {
            inode: dir.ino,
            block: physical,
        };
        let bs = self.block_size() as usize;
        for entry in DirEntryIter::new(&block.bytes()[..end], bs, self.filetype_feature(), loc) {
            let entry = entry?;
            if entry.inode != 0 {
                if let Some(found) = visit(&entry) {
                    return Ok(Some(found));
                }
            }
        }
        Ok(None)
    }

    /// Lists directory `dir`, without "." and "..".
    pub fn read_dir(&self, dir: u32) -> Result<Vec<DirEntry>> {
        self.read_caller_inode(dir, |inode| self.read_dir_of(inode))
    }

    /// Finds `name` in directory `dir` (through the dentry cache).
    pub fn lookup(&self, dir: u32, name: &[u8]) -> Result<Option<u32>> {
        self.check_caller_ino(dir)?;
        Ok(self.lookup_child(dir, name)?.map(|child| child.ino))
    }

    /// The parent of directory `dir` (its ".." entry).
    pub fn parent(&self, dir: u32) -> Result<u32> {
        self.read_caller_inode(dir, |inode| self.parent_of(inode))
    }

    /// A live entry with a zero-length name fails the listing, as the kernel's readdir
    /// fails with EIO on one (`verify_dirent_name`): there is no name to give the caller,
    /// and skipping it would hide an inode the directory still references.
    pub(crate) fn read_dir_of(&self, dir: &Inode) -> Result<Vec<DirEntry>> {
        let mut out = Vec::new();
        let nameless = self.scan_dir(dir, |e| {
            if e.name.is_empty() {
                return Some(());
            }
            if e.name != b"." && e.name != b".." {
                out.push(DirEntry {
                    name: e.name.to_vec(),
                    ino: e.inode,
                    file_type: ft::to_file_type(e.file_type),
                });
            }
            None
        })?;
        if nameless.is_some() {
            return Err(FormatError::corrupt(
                Structure::DirectoryEntry,
                Location::Inode(dir.ino),
                Problem::EmptyName,
            )
            .into());
        }
        Ok(out)
    }

    /// The parent of a directory (its ".." entry).
    pub(crate) fn parent_of(&self, dir: &Inode) -> Result<u32> {
        require_directory(dir)?;
        if dir.has_flag(flags::INLINE_DATA) {
            return Ok(inline_dir_parent(&dir.record.block));
        }
        self.scan_dir(dir, |e| (e.name == b"..").then_some(e.inode))?
            .ok_or_else(|| {
                FormatError::corrupt(
                    Structure::Directory,
                    Location::Inode(dir.ino),
                    Problem::MissingDotDot,
                )
                .into()
            })
    }

    /// Finds `name` in `dir`, through the hash index when the directory has one (reading
    /// one block per index level plus the leaf), linearly otherwise.
    pub(crate) fn lookup_in(&self, dir: &Inode, name: &[u8]) -> Result<Option<u32>> {
        require_directory(dir)?;
        if name == b"." {
            return Ok(Some(dir.ino));
        }
        if name == b".." {
            return self.parent_of(dir).map(Some);
        }
        // No name is empty: a live entry with a zero-length name (corruption that e4 fsck
        // reports as `PR_2_NULL_NAME`) must not be found by a lookup of "".
        if name.is_empty() {
            return Ok(None);
        }
        if self.is_htree(dir) {
            return self.htree_lookup(dir, name);
        }
        self.scan_dir(dir, |e| (e.name == name).then_some(e.inode))
    }

    fn htree_lookup(&self, dir: &Inode, name: &[u8]) -> Result<Option<u32>> {
        let seed = self.dir_seed(dir);
        let DirBlock::Root { root, physical, .. } = self.dir_block(dir, 0)? else {
            unreachable!("block 0 of an indexed directory is its root");
        };
        let loc = Location::InodeBlock {
            inode: dir.ino,
            block: physical,
        };
        let sb = self.superblock();
        let version = e4_format::dir_hash::HashVersion::from_disk(
            root.info.hash_version,
            sb.unsigned_dir_hash(),
        )
        .ok_or_else(|| {
            FormatError::corrupt(
                Structure::HtreeRoot,
                loc,
                Problem::UnknownHashVersion {
                    version: root.info.hash_version,
                },
            )
        })?;
        let hash = e4_format::dir_hash::dir_hash(version, name, &sb.hash_seed).major;
        // Path of (node, position) from the root down to the bottom index level.
        let mut path = vec![(root.node.clone(), root.node.child_for(hash))];
        for _ in 0..root.info.indirect_levels {
            let (node, pos) = path.last().expect("path starts with the root");
            let child = u64::from(node.entries[*pos].block);
            let next = self.read_index_node(dir, child, seed)?;
            let pos = next.child_for(hash);
            path.push((next, pos));
        }
        loop {
            let (node, pos) = path.last().expect("path is never empty");
            let leaf = u64::from(node.entries[*pos].block);
            if leaf == 0 || leaf >= self.dir_blocks(dir) {
                return Err(FormatError::corrupt(
                    Structure::HtreeIndex,
                    loc,
                    Problem::IndexPointsOutside {
                        block: leaf,
                        blocks: self.dir_blocks(dir),
                    },
                )
                .into());
            }
            if let Some(ino) =
                self.scan_leaf(dir, leaf, &mut |e| (e.name == name).then_some(e.inode))?
            {
                return Ok(Some(ino));
            }
            // Names with the same hash may continue in the next leaf, whose starting hash
            // then has the collision bit set (ext4_htree_next_block).
            match self.advance_htree_path(dir, &mut path, seed)? {
                Some(key) if key & !1 == hash => {}
                _ => return Ok(None),
            }
        }
    }

    fn read_index_node(&self, dir: &Inode, logical: u64, seed: Option<u32>) -> Result<DxNode> {
        if logical == 0 || logical >= self.dir_blocks(dir) {
            return Err(FormatError::corrupt(
                Structure::HtreeIndex,
                Location::Inode(dir.ino),
                Problem::IndexPointsOutside {
                    block: logical,
                    blocks: self.dir_blocks(dir),
                },
            )
            .into());
        }
        let (physical, block) = self.read_dir_block(dir, logical)?;
        let loc = Location::InodeBlock {
            inode: dir.ino,
            block: physical,
        };
        let node = DxNode::parse(&block.bytes(), self.superblock().has_metadata_csum(), loc)?;
        if let Some(seed) = seed {
            block.verify_as(BufferRole::of(BlockKind::HtreeNode, Owner::of(dir)), |b| {
                DxNode::verify(b, seed, loc)
            })?;
        }
        Ok(node)
    }

    /// Moves the path to the next leaf in hash order and returns that leaf's starting hash:
    /// the key at the level that advanced, since the first entry of a node below stores
    /// none. `None` at the end of the index.
    fn advance_htree_path(
        &self,
        dir: &Inode,
        path: &mut Vec<(DxNode, usize)>,
        seed: Option<u32>,
    ) -> Result<Option<u32>> {
        let depth = path.len();
        // Find the deepest level that has a next entry.
        let Some(level) = (0..depth)
            .rev()
            .find(|&l| path[l].1 + 1 < path[l].0.entries.len())
        else {
            return Ok(None);
        };
        path[level].1 += 1;
        let key = path[level].0.entries[path[level].1].hash;
        path.truncate(level + 1);
        while path.len() < depth {
            let (node, pos) = path.last().expect("path is never empty");
            let child = self.read_index_node(dir, u64::from(node.entries[*pos].block), seed)?;
            path.push((child, 0));
        }
        Ok(Some(key))
    }
}

#[cfg(test)]
mod tests {
    use e4_format::dir_entry::{DirEntryIter, ENTRY_HEADER_SIZE};
    use e4_format::inode::ROOT_INO;
    use e4_format::{FormatError, Location, Problem};
    use e4_testkit::{make_image, PROFILES};

    use crate::error::Error;
    use crate::filesystem::{Filesystem, OpenOptions};
    use crate::map::file_mapping::Mapping;

    /// An ext2 image whose directory `/d` holds `a` and `b`, with `a`'s `name_len` set to
    /// 0 (a live entry with a zero-length name, e2fsck's `PR_2_NULL_NAME`).
    fn image_with_a_nameless_entry() -> Vec<u8> {
        let src = tempfile::tempdir().unwrap();
        std::fs::create_dir(src.path().join("d")).unwrap();
        std::fs::write(src.path().join("d/a"), b"a").unwrap();
        std::fs::write(src.path().join("d/b"), b"b").unwrap();
        let profile = PROFILES.iter().find(|p| p.name == "ext2").unwrap();
        let image = make_image(src.path(), profile, 4, 64);
        let mut bytes = std::fs::read(&image.path).unwrap();
        let fs = Filesystem::open_bytes(bytes.clone(), OpenOptions::default()).unwrap();
        let d = fs.lookup(ROOT_INO, b"d").unwrap().unwrap();
        let Mapping::Data { physical, .. } =
            fs.map_block(&fs.read_inode(d).unwrap(), 0, 1).unwrap()
        else {
            panic!("/d has no block 0");
        };
        let bs = fs.block_size() as usize;
        let start = physical as usize * bs;
        let block = &bytes[start..start + bs];
        let mut offset = 0;
        for entry in DirEntryIter::new(block, bs, true, Location::Block(physical)) {
            let entry = entry.unwrap();
            if entry.name == b"a" {
                break;
            }
            offset += entry.rec_len;
        }
        // name_len is the byte after rec_len.
        bytes[start + offset + ENTRY_HEADER_SIZE - 2] = 0;
        bytes
    }

    /// Lookups never find a nameless entry (not even a lookup of ""), the entries after it
    /// are still found, and a listing fails with the problem named, as the kernel's
    /// readdir fails with EIO.
    #[test]
    fn a_nameless_entry_is_never_found_and_fails_a_listing() {
        let fs =
            Filesystem::open_bytes(image_with_a_nameless_entry(), OpenOptions::default()).unwrap();
        let d = fs.lookup(ROOT_INO, b"d").unwrap().unwrap();
        assert_eq!(fs.lookup(d, b"").unwrap(), None);
        assert_eq!(fs.lookup(d, b"a").unwrap(), None);
        assert!(fs.lookup(d, b"b").unwrap().is_some());
        match fs.read_dir(d) {
            Err(Error::Format(FormatError::Corrupt {
                problem: Problem::EmptyName,
                ..
            })) => {}
            other => panic!("listing a nameless entry gave {other:?}"),
        }
    }
}

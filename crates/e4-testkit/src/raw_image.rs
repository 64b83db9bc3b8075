//! An image file read with e4-format alone: its blocks, group descriptors and inode records,
//! and a file's logical blocks mapped through its extent tree or block map. For tests of
//! e4-format's parsers and of the checker, which must find structures in an image without
//! the engine they are a second opinion on (e4-fs).
//!
//! Nothing here verifies a checksum: a test decides what to verify, and a checker test must
//! be able to read a structure it has just damaged. Everything that follows a pointer read
//! from the image checks it first, and reports a bad one as a [`FormatError`] naming the
//! structure and where it was, so a test of a damaged image fails with a sentence, not a
//! panic.

use std::path::Path;

use e4_format::block_map::{block_map_path, indirect_pointer};
use e4_format::extent::ExtentNodeView;
use e4_format::geometry::Geometry;
use e4_format::group_descriptor::GroupDescriptor;
use e4_format::inode::{flags, Inode};
use e4_format::superblock::{Superblock, SUPERBLOCK_OFFSET};
use e4_format::{FormatError, Location, Problem, Result, Structure};

/// An image file's bytes, with the superblock and layout needed to find things in them.
pub struct RawImage {
    bytes: Vec<u8>,
    superblock: Superblock,
    geometry: Geometry,
}

impl RawImage {
    /// Reads the image at `path` whole (test images are a few MiB) and decodes its primary
    /// superblock, whatever its checksum. Fails if the file cannot be read or the superblock
    /// is unusable (bad magic, inconsistent geometry).
    pub fn read(path: &Path) -> Result<Self> {
        let bytes = std::fs::read(path)
            .unwrap_or_else(|e| panic!("cannot read image {}: {e}", path.display()));
        Self::from_bytes(bytes)
    }

    /// As [`RawImage::read`], for an image already in memory.
    pub fn from_bytes(bytes: Vec<u8>) -> Result<Self> {
        let start = SUPERBLOCK_OFFSET as usize;
        let raw = bytes.get(start..start + 1024).unwrap_or_default();
        let superblock = Superblock::decode_checked(raw)?;
        let geometry = Geometry::new(&superblock);
        Ok(RawImage {
            bytes,
            superblock,
            geometry,
        })
    }

    pub fn superblock(&self) -> &Superblock {
        &self.superblock
    }

    /// The 1024 bytes of the primary superblock, as stored.
    pub fn superblock_bytes(&self) -> &[u8] {
        let start = SUPERBLOCK_OFFSET as usize;
        // OK to index: `from_bytes` decoded a superblock from these bytes.
        &self.bytes[start..start + 1024]
    }

    pub fn geometry(&self) -> &Geometry {
        &self.geometry
    }

    pub fn block_size(&self) -> usize {
        self.superblock.block_size() as usize
    }

    /// Block `nr`, or an error if it lies outside the filesystem or past the end of the file.
    pub fn block(&self, nr: u64) -> Result<&[u8]> {
        let outside = || {
            FormatError::corrupt(
                Structure::BlockPointer,
                Location::Block(nr),
                Problem::OutsideFilesystem { block: nr },
            )
        };
        if nr >= self.geometry.blocks() {
            return Err(outside());
        }
        let bs = self.block_size();
        let start = usize::try_from(nr).map_err(|_| outside())? * bs;
        self.bytes.get(start..start + bs).ok_or_else(outside)
    }

    /// The descriptor of `group`, whatever its checksum (classic and meta_bg layouts).
    pub fn group_descriptor(&self, group: u32) -> Result<GroupDescriptor> {
        GroupDescriptor::from_bytes(self.group_descriptor_bytes(group)?, group)
    }

    /// The `s_desc_size` bytes of `group`'s descriptor, as stored.
    pub fn group_descriptor_bytes(&self, group: u32) -> Result<&[u8]> {
        if group >= self.geometry.groups() {
            return Err(FormatError::corrupt(
                Structure::GroupDescriptor,
                Location::Group(group),
                Problem::NumberOutOfRange,
            ));
        }
        let block = self.block(self.geometry.descriptor_block(group))?;
        let start = self.geometry.descriptor_offset(group);
        // OK to index: a descriptor's offset plus its size stays within its block, as
        // `descriptors_per_block` is the block size divided by `s_desc_size`.
        Ok(&block[start..start + self.superblock.desc_size() as usize])
    }

    /// Byte offset in the image of inode `ino`'s record: where a test damages it.
    pub fn inode_offset(&self, ino: u32) -> Result<u64> {
        let location = self.geometry.inode_location(ino).ok_or_else(|| {
            FormatError::corrupt(
                Structure::InodeNumber,
                Location::Inode(ino),
                Problem::NumberOutOfRange,
            )
        })?;
        let table = self.group_descriptor(location.group)?.inode_table();
        Ok(table * self.block_size() as u64 + location.table_offset)
    }

    /// The `s_inode_size` bytes of inode `ino`'s record, as stored.
    pub fn inode_bytes(&self, ino: u32) -> Result<&[u8]> {
        let offset = self.inode_offset(ino)?;
        let size = self.superblock.inode_size() as usize;
        usize::try_from(offset)
            .ok()
            .and_then(|start| self.bytes.get(start..start + size))
            .ok_or_else(|| {
                FormatError::corrupt(
                    Structure::InodeTable,
                    Location::Inode(ino),
                    Problem::OutsideFilesystem {
                        block: offset / self.block_size() as u64,
                    },
                )
            })
    }

    /// Inode `ino`, decoded whatever its checksum.
    pub fn inode(&self, ino: u32) -> Result<Inode> {
        Inode::decode(self.inode_bytes(ino)?, ino)
    }

    /// The physical block holding logical block `logical` of inode `ino`, through its extent
    /// tree or block map; `None` for a hole (and for inline data, which has no blocks). An
    /// unwritten extent's block is returned too: it belongs to the file, whatever it holds.
    pub fn file_block(&self, ino: u32, logical: u64) -> Result<Option<u64>> {
        let inode = self.inode(ino)?;
        if inode.has_flag(flags::INLINE_DATA) {
            Ok(None)
        } else if inode.has_flag(flags::EXTENTS) {
            self.extent_block(&inode, logical)
        } else {
            self.mapped_block(&inode, logical)
        }
    }

    /// Descends the extent tree from the root in `i_block` to the leaf covering `logical`.
    fn extent_block(&self, inode: &Inode, logical: u64) -> Result<Option<u64>> {
        let ino = inode.ino;
        // Where the current node lies: the inode's `i_block`, then a tree block.
        let mut node_at = Location::Inode(ino);
        let mut node = ExtentNodeView::new(&inode.record.block, node_at)?;
        // Each step down checks that the child is one level lower, so the walk ends at a
        // leaf within the root's depth (at most MAX_DEPTH, checked by `ExtentNodeView::new`).
        loop {
            let covering = node.entries_starting_by(logical);
            if covering == 0 {
                return Ok(None);
            }
            if node.is_leaf() {
                let extent = node.leaf(covering - 1).extent();
                let offset = logical - u64::from(extent.logical);
                return Ok((offset < u64::from(extent.len)).then_some(extent.physical + offset));
            }
            let child = node.index(covering - 1).leaf();
            let child_bytes = self.pointed_block(child, Structure::ExtentNode, node_at)?;
            let loc = Location::InodeBlock {
                inode: ino,
                block: child,
            };
            let parent_depth = node.header.depth;
            node = ExtentNodeView::new(child_bytes, loc)?;
            node_at = loc;
            if node.header.depth + 1 != parent_depth {
                return Err(FormatError::corrupt(
                    Structure::ExtentNode,
                    loc,
                    Problem::ChildDepthMismatch {
                        depth: node.header.depth,
                        parent_depth,
                    },
                ));
            }
        }
    }

    /// Block `at`, reached through a pointer in a `structure` at `holder`: a pointer outside
    /// the filesystem is that structure's corruption, reported where the pointer was.
    fn pointed_block(&self, at: u64, structure: Structure, holder: Location) -> Result<&[u8]> {
        self.block(at).map_err(|_| {
            FormatError::corrupt(structure, holder, Problem::OutsideFilesystem { block: at })
        })
    }

    /// Follows `i_block`'s direct or indirect pointers to `logical`'s block.
    fn mapped_block(&self, inode: &Inode, logical: u64) -> Result<Option<u64>> {
        let Some(path) = block_map_path(logical, self.superblock.block_size()) else {
            return Ok(None);
        };
        // OK to unwrap: a slot is one of i_block's 15 words.
        let mut pointer = indirect_pointer(&inode.record.block, path.slot as u32).unwrap();
        // Where the pointer being followed was read: `i_block`, then an indirect block.
        let mut holder = Location::Inode(inode.ino);
        for &index in &path.indexes[..path.depth] {
            if pointer == 0 {
                return Ok(None);
            }
            let at = u64::from(pointer);
            let block = self.pointed_block(at, Structure::BlockMap, holder)?;
            holder = Location::InodeBlock {
                inode: inode.ino,
                block: at,
            };
            // OK to unwrap: an index is below the block's pointer count (block_map_path).
            pointer = indirect_pointer(block, index).unwrap();
        }
        Ok((pointer != 0).then_some(u64::from(pointer)))
    }
}

#[cfg(test)]
mod tests {
    use std::io::{Seek, SeekFrom, Write};
    use std::process::Command;

    use super::*;
    use crate::{make_image, Profile};

    fn debugfs(image: &Path, request: &str) -> String {
        let out = Command::new(crate::tool("debugfs"))
            .args(["-R", request])
            .arg(image)
            .output()
            .expect("debugfs must be installed (e2fsprogs)");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// debugfs's `imap`: "located at block B, offset 0xO".
    fn debugfs_inode_offset(image: &Path, ino: u32, block_size: u64) -> u64 {
        let text = debugfs(image, &format!("imap <{ino}>"));
        let after = |marker: &str| text.split(marker).nth(1).unwrap().to_string();
        let block: u64 = after("located at block ")
            .split(',')
            .next()
            .unwrap()
            .parse()
            .unwrap();
        let offset = u64::from_str_radix(after("offset 0x").trim(), 16).unwrap();
        block * block_size + offset
    }

    /// A file with data in every other block of its first 40, then one block at 1 MiB: past
    /// the direct and single-indirect blocks of a 1 KiB block map, and more extents than the
    /// inode's root holds (a depth-1 tree).
    fn sparse_file(dir: &Path, block_size: u64) {
        let mut file = std::fs::File::create(dir.join("sparse")).unwrap();
        for i in (0..40).step_by(2) {
            file.seek(SeekFrom::Start(i * block_size)).unwrap();
            file.write_all(&vec![i as u8 + 1; block_size as usize])
                .unwrap();
        }
        file.seek(SeekFrom::Start(1 << 20)).unwrap();
        file.write_all(&vec![7; block_size as usize]).unwrap();
    }

    #[test]
    fn blocks_and_inodes_are_where_debugfs_finds_them() {
        for (name, args) in [
            ("ext4", &["-t", "ext4", "-b", "4096"][..]),
            ("ext2-1k", &["-t", "ext2", "-b", "1024"]),
            (
                "meta-bg",
                &["-t", "ext4", "-b", "1024", "-O", "meta_bg,^resize_inode"],
            ),
        ] {
            let bs: u64 = if args.contains(&"1024") { 1024 } else { 4096 };
            let dir = tempfile::tempdir().unwrap();
            sparse_file(dir.path(), bs);
            let profile = Profile {
                name,
                mke2fs_args: args,
                mke2fs_miscopies: &[],
            };
            let img = make_image(dir.path(), &profile, 16, 256);
            let raw = RawImage::read(&img.path).unwrap();
            assert_eq!(raw.block_size() as u64, bs);
            let stat = debugfs(&img.path, "stat /sparse");
            let ino: u32 = stat
                .split("Inode: ")
                .nth(1)
                .unwrap()
                .split_whitespace()
                .next()
                .unwrap()
                .parse()
                .unwrap();
            for probe in [1, 2, 11, ino, raw.superblock().inodes_count] {
                assert_eq!(
                    raw.inode_offset(probe).unwrap(),
                    debugfs_inode_offset(&img.path, probe, bs),
                    "{name}: inode {probe}"
                );
            }
            let last = (1 << 20) / bs;
            let mut mapped = 0;
            for logical in (0..45).chain([last - 1, last, last + 1]) {
                let ours = raw.file_block(ino, logical).unwrap();
                let theirs: u64 = debugfs(&img.path, &format!("bmap <{ino}> {logical}"))
                    .trim()
                    .parse()
                    .unwrap();
                assert_eq!(ours.unwrap_or(0), theirs, "{name}: block {logical}");
                if let Some(physical) = ours {
                    let data = raw.block(physical).unwrap();
                    let expected = if logical == last {
                        7
                    } else {
                        logical as u8 + 1
                    };
                    assert!(
                        data.iter().all(|&b| b == expected),
                        "{name}: block {logical}"
                    );
                    mapped += 1;
                }
            }
            assert_eq!(mapped, 21, "{name}");
            assert!(raw.file_block(ino, u64::from(u32::MAX)).unwrap().is_none());
        }
    }

    #[test]
    fn bad_pointers_are_errors_naming_where_they_were() {
        let img = crate::make_empty_image(&["-t", "ext4", "-b", "4096"], 16);
        let mut bytes = std::fs::read(&img.path).unwrap();
        let raw = RawImage::from_bytes(bytes.clone()).unwrap();
        let blocks = raw.geometry().blocks();
        assert!(raw.block(blocks).is_err());
        assert!(raw.inode(0).is_err());
        assert!(raw.group_descriptor(raw.geometry().groups()).is_err());
        // Point the journal's extent root at a block past the end: its first block is then
        // an error in inode 8, not a panic.
        let journal = raw.inode_offset(8).unwrap() as usize;
        let i_block = journal + 0x28;
        assert_eq!(&bytes[i_block..i_block + 2], &[0x0A, 0xF3], "extent magic");
        bytes[i_block + 6] = 1; // depth 1: the entry is an index
        let index = i_block + 12;
        bytes[index + 4..index + 12].fill(0);
        bytes[index + 4..index + 8].copy_from_slice(&(blocks as u32 + 5).to_le_bytes());
        let damaged = RawImage::from_bytes(bytes).unwrap();
        let err = damaged.file_block(8, 0).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!(
                "extent tree node of inode 8 is corrupt: block {} lies outside the filesystem",
                blocks + 5
            )
        );

        // The same for a block map: a single-indirect pointer past the end.
        let img = crate::make_empty_image(&["-t", "ext2", "-b", "1024"], 4);
        let mut bytes = std::fs::read(&img.path).unwrap();
        let raw = RawImage::from_bytes(bytes.clone()).unwrap();
        let single_indirect = raw.inode_offset(2).unwrap() as usize + 0x28 + 4 * 12;
        bytes[single_indirect..single_indirect + 4].copy_from_slice(&u32::MAX.to_le_bytes());
        let damaged = RawImage::from_bytes(bytes).unwrap();
        assert_eq!(
            damaged.file_block(2, 0).unwrap(),
            raw.file_block(2, 0).unwrap()
        );
        assert_eq!(
            damaged.file_block(2, 12).unwrap_err().to_string(),
            format!(
                "block map of inode 2 is corrupt: block {} lies outside the filesystem",
                u32::MAX
            )
        );
    }
}

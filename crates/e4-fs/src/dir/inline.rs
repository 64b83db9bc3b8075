//! Inline directories (write-path.md §4, `fs/ext4/inline.c`): a small directory kept in its
//! inode. `i_block[0..4)` holds the parent's inode number in place of "." and ".."; the rest
//! of `i_block` is one chain of entries and the `system.data` value a second, separate one;
//! there is no checksum tail, and `i_size` is 60 plus the value's length.
//!
//! [`InlineDirectory`] is the entry layout alone, edited in memory as the kernel edits it
//! (`ext4_add_dirent_to_inline`, `ext4_delete_inline_entry`, `ext4_update_inline_dir`).
//! [`InlineDirectoryEditor`] applies it to a locked directory inode for the namespace
//! operations. When a new name fits neither region, even after the value grows to all the
//! in-inode space there is, the editor converts the directory to one block
//! (`ext4_convert_inline_data_nolock`) and hands the insertion to the block editor: editing
//! in place where the inode suffices keeps the kernel's layout (a new directory stays
//! inline until it fills, like the kernel's), and the one-way conversion reuses the block
//! code for everything after it.

use crate::io::meta_io::Owner;
use e4_format::features::IncompatFeatures;
use e4_format::inline_data::DIR_PARENT_SIZE;
use e4_format::inode::{flags, FileType, Inode, I_BLOCK_SIZE};
use e4_format::Location;

use crate::dir::editor::{DirectoryBlocks, DirectoryEdit, DirectoryEditor};
use crate::dir::entry::{check_name, public_entry, DirEntry, DirFormat};
use crate::dir::leaf::{LeafBlock, LeafEntry, NewEntry};
use crate::error::Shortage;
use crate::error::{Error, Result};
use crate::filesystem::Filesystem;
use crate::io::meta_io::{BlockKind, MetaIo};
use crate::map::extent_tree::ExtentTree;
use crate::ops::directory_blocks::InodeDirectoryBlocks;
use crate::txn::txn_io::TxnIo;
use crate::xattr::inline_data::InlineData;

/// A growth of the value smaller than the smallest entry (`EXT4_DIR_REC_LEN(1)`) is not
/// worth making (`ext4_update_inline_dir`).
const MIN_GROWTH: usize = 12;

/// The inline bytes of a new, empty directory (`ext4_try_create_inline_dir`): the parent,
/// then one free record over the rest of `i_block`; the `system.data` value is empty.
pub(crate) fn empty_inline_dir(parent_ino: u32) -> [u8; I_BLOCK_SIZE] {
    let mut bytes = [0u8; I_BLOCK_SIZE];
    bytes[..DIR_PARENT_SIZE].copy_from_slice(&parent_ino.to_le_bytes());
    e4_format::dir_entry::encode_entry(
        &mut bytes[DIR_PARENT_SIZE..],
        0,
        I_BLOCK_SIZE - DIR_PARENT_SIZE,
        0,
        &[],
    );
    bytes
}

/// An inline directory's parent and its two entry regions.
#[derive(Debug, Clone)]
pub(crate) struct InlineDirectory {
    parent: u32,
    /// The rest of `i_block`, then the `system.data` value.
    regions: [LeafBlock; 2],
}

impl InlineDirectory {
    /// Parses the inline bytes (`i_block`, then the value) of directory `ino`.
    pub fn parse(content: &[u8], filetype: bool, ino: u32) -> Result<Self> {
        let loc = Location::Inode(ino);
        if content.len() < I_BLOCK_SIZE {
            return Err(e4_format::FormatError::corrupt(
                e4_format::Structure::InlineDirectory,
                loc,
                e4_format::Problem::TooShort {
                    len: content.len(),
                    need: I_BLOCK_SIZE,
                },
            )
            .into());
        }
        let (i_block, value) = content.split_at(I_BLOCK_SIZE);
        let parent = u32::from_le_bytes([i_block[0], i_block[1], i_block[2], i_block[3]]);
        Ok(InlineDirectory {
            parent,
            regions: [
                LeafBlock::inline_region(i_block[DIR_PARENT_SIZE..].to_vec(), filetype, loc)?,
                LeafBlock::inline_region(value.to_vec(), filetype, loc)?,
            ],
        })
    }

    /// The inline bytes: the parent, the `i_block` region, then the value.
    pub fn content(&self) -> Vec<u8> {
        let mut out = self.parent.to_le_bytes().to_vec();
        for region in &self.regions {
            out.extend_from_slice(region.bytes());
        }
        out
    }

    /// Bytes of the `system.data` value.
    pub fn value_len(&self) -> usize {
        self.regions[1].bytes().len()
    }

    fn find(&self, name: &[u8]) -> Option<(usize, LeafEntry)> {
        (0..self.regions.len()).find_map(|i| self.regions[i].find(name).map(|e| (i, e)))
    }

    pub fn lookup(&self, name: &[u8]) -> Option<DirEntry> {
        self.find(name).map(|(_, e)| public_entry(e))
    }

    /// Adds `entry` in the first record with room, `i_block` first. False when neither
    /// region has room.
    pub fn insert(&mut self, entry: &NewEntry) -> bool {
        self.regions
            .iter_mut()
            .any(|r| r.insert(&entry.name, entry.ino, entry.file_type))
    }

    /// Grows the value region to `value_len` bytes (its last record takes them). False,
    /// changing nothing, when that adds less than one entry's worth.
    pub fn grow_value(&mut self, value_len: usize) -> bool {
        if value_len < self.value_len() + MIN_GROWTH {
            return false;
        }
        self.regions[1].grow_region(value_len);
        true
    }

    pub fn remove(&mut self, name: &[u8]) -> Option<DirEntry> {
        let (region, entry) = self.find(name)?;
        self.regions[region].remove(entry.offset);
        Some(public_entry(entry))
    }

    pub fn set_target(&mut self, name: &[u8], ino: u32, code: u8) -> Option<DirEntry> {
        let (region, entry) = self.find(name)?;
        self.regions[region].set_target(entry.offset, ino, code);
        Some(public_entry(entry))
    }

    pub fn set_parent(&mut self, parent_ino: u32) {
        self.parent = parent_ino;
    }

    pub fn is_empty(&self) -> bool {
        self.regions.iter().all(|r| r.entries().next().is_none())
    }

    /// The directory's first block after conversion ("." and "..", then the entries).
    pub fn to_block(&self, format: &DirFormat, self_ino: u32) -> Option<LeafBlock> {
        let [first, value] = &self.regions;
        LeafBlock::from_inline(format, self_ino, self.parent, &[first, value])
    }
}

/// Edits a locked inline directory inode in the running transaction.
pub(crate) struct InlineDirectoryEditor<'a> {
    pub fs: &'a Filesystem,
    pub io: &'a TxnIo<'a>,
    pub format: &'a DirFormat,
    pub inode: &'a mut Inode,
}

impl InlineDirectoryEditor<'_> {
    fn load(&self) -> Result<(InlineData, InlineDirectory)> {
        let data = InlineData::load(self.inode)?;
        let dir = InlineDirectory::parse(
            &data.content(self.inode),
            self.format.filetype,
            self.inode.ino,
        )?;
        Ok((data, dir))
    }

    /// Writes `dir` back into the inode; `i_size` follows (60 + value length).
    fn save(&mut self, data: &mut InlineData, dir: &InlineDirectory) -> Result<()> {
        let content = dir.content();
        if !data.store(self.inode, &content) {
            return Err(Error::NoSpace(Shortage::Room(format!(
                "inline directory {}: {} bytes do not fit the inode",
                self.inode.ino,
                content.len()
            ))));
        }
        self.inode.set_size(content.len() as u64);
        Ok(())
    }

    /// Moves the directory out of the inode into one new block: `system.data` removed,
    /// EXTENTS_FL and an empty root (on an extents filesystem), the block mapped, `i_size`
    /// one block. A full filesystem leaves the inode as it was.
    fn convert(&mut self, data: &mut InlineData, dir: &InlineDirectory) -> Result<()> {
        let ino = self.inode.ino;
        let leaf = dir.to_block(self.format, ino).ok_or_else(|| {
            Error::NoSpace(Shortage::Room(format!(
                "inline directory {ino}: block too small"
            )))
        })?;
        let saved = self.inode.clone();
        data.remove(self.inode)?;
        give_empty_mapping(self.fs, self.inode);
        self.inode.set_size(0);
        let owner = Owner::of(self.inode);
        let mut blocks = InodeDirectoryBlocks {
            fs: self.fs,
            io: self.io,
            inode: self.inode,
            window: None,
        };
        let placed = blocks.append_block().and_then(|physical| {
            self.io
                .write(physical, BlockKind::DirectoryLeaf, owner, leaf.bytes())
        });
        if let Err(e) = placed {
            *self.inode = saved;
            return Err(e);
        }
        Ok(())
    }
}

/// Gives an inode leaving inline data the mapping a new file of its kind has: EXTENTS_FL and
/// an empty extent root on an extents filesystem, else zeroed block pointers.
pub(crate) fn give_empty_mapping(fs: &Filesystem, inode: &mut Inode) {
    inode.record.block = [0; I_BLOCK_SIZE];
    if fs
        .superblock()
        .incompat()
        .contains(IncompatFeatures::EXTENTS)
    {
        inode.record.flags |= flags::EXTENTS;
        ExtentTree::init_empty(&mut inode.record.block);
    }
}

impl DirectoryEdit for InlineDirectoryEditor<'_> {
    fn lookup(&self, name: &[u8]) -> Result<Option<DirEntry>> {
        check_name(name)?;
        Ok(self.load()?.1.lookup(name))
    }

    /// Adds the entry inline (`ext4_try_add_inline_entry`): in a region with room, else
    /// after growing the value to all the in-inode space there is, else in the block the
    /// directory is converted to.
    fn add_entry(&mut self, name: &[u8], ino: u32, file_type: FileType) -> Result<()> {
        check_name(name)?;
        if ino == 0 {
            return Err(Error::Invalid("directory entry for inode 0".into()));
        }
        let (mut data, mut dir) = self.load()?;
        if dir.lookup(name).is_some() {
            return Err(Error::Exists(String::from_utf8_lossy(name).into_owned()));
        }
        let entry = NewEntry {
            ino,
            file_type: self.format.file_type_code(file_type),
            name: name.to_vec(),
        };
        let max_value = data.capacity().map_or(0, |c| c - I_BLOCK_SIZE);
        if dir.insert(&entry) || (dir.grow_value(max_value) && dir.insert(&entry)) {
            return self.save(&mut data, &dir);
        }
        self.convert(&mut data, &dir)?;
        let owner = Owner::of(self.inode);
        let mut blocks = InodeDirectoryBlocks {
            fs: self.fs,
            io: self.io,
            inode: self.inode,
            window: None,
        };
        DirectoryEditor::new(self.io, &mut blocks, self.format, owner)
            .add_entry(name, ino, file_type)
    }

    fn remove_entry(&mut self, name: &[u8]) -> Result<Option<DirEntry>> {
        check_name(name)?;
        let (mut data, mut dir) = self.load()?;
        let removed = dir.remove(name);
        if removed.is_some() {
            self.save(&mut data, &dir)?;
        }
        Ok(removed)
    }

    fn set_entry(
        &mut self,
        name: &[u8],
        ino: u32,
        file_type: FileType,
    ) -> Result<Option<DirEntry>> {
        check_name(name)?;
        let (mut data, mut dir) = self.load()?;
        let old = dir.set_target(name, ino, self.format.file_type_code(file_type));
        if old.is_some() {
            self.save(&mut data, &dir)?;
        }
        Ok(old)
    }

    fn set_parent(&mut self, parent_ino: u32) -> Result<()> {
        let (mut data, mut dir) = self.load()?;
        dir.set_parent(parent_ino);
        self.save(&mut data, &dir)
    }

    fn is_empty(&self) -> Result<bool> {
        Ok(self.load()?.1.is_empty())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::buffer::verifier::check_leaf_chain;
    use e4_format::dir_entry::{file_type as ft, DirEntryIter};

    fn format(metadata_csum: bool) -> DirFormat {
        DirFormat {
            block_size: 1024,
            filetype: true,
            metadata_csum,
            dir_index: true,
            large_dir: false,
            def_hash_version: 1,
            unsigned_hash: false,
            hash_seed: [0; 4],
        }
    }

    fn entry(name: &str, ino: u32) -> NewEntry {
        NewEntry {
            ino,
            file_type: ft::REGULAR,
            name: name.as_bytes().to_vec(),
        }
    }

    fn names(dir: &InlineDirectory) -> Vec<Vec<u8>> {
        dir.regions
            .iter()
            .flat_map(|r| r.entries().map(|e| e.name).collect::<Vec<_>>())
            .collect()
    }

    #[test]
    fn a_new_directory_is_its_parent_and_one_free_record() {
        let bytes = empty_inline_dir(2);
        assert_eq!(bytes[..4], 2u32.to_le_bytes());
        let dir = InlineDirectory::parse(&bytes, true, 12).unwrap();
        assert!(dir.is_empty());
        assert_eq!(dir.content(), bytes.to_vec());
        assert_eq!(dir.value_len(), 0);
    }

    #[test]
    fn entries_fill_i_block_then_the_grown_value() {
        let mut dir = InlineDirectory::parse(&empty_inline_dir(2), true, 12).unwrap();
        // 56 bytes of i_block: four 12-byte entries (1-4 byte names) and an 8-byte remnant.
        for (i, name) in ["a", "bb", "ccc", "dddd"].iter().enumerate() {
            assert!(dir.insert(&entry(name, 20 + i as u32)), "{name}");
        }
        assert!(!dir.insert(&entry("eeeee", 30)));
        assert!(!dir.grow_value(8), "less than one entry's worth");
        assert!(dir.grow_value(40));
        assert!(dir.insert(&entry("eeeee", 30)));
        assert_eq!(dir.value_len(), 40);
        let content = dir.content();
        assert_eq!(content.len(), 100);
        // The value is a chain of its own that ends exactly at its end.
        let value: Vec<_> = DirEntryIter::new(&content[60..], 40, true, Location::Inode(12))
            .map(|e| e.unwrap())
            .collect();
        assert_eq!(value.iter().map(|e| e.rec_len).sum::<usize>(), 40);
        assert_eq!(value[0].name, b"eeeee");
        let reread = InlineDirectory::parse(&content, true, 12).unwrap();
        assert_eq!(names(&reread).len(), 5);
        assert_eq!(reread.lookup(b"eeeee").unwrap().ino, 30);
    }

    #[test]
    fn remove_and_retarget_work_in_either_region() {
        let mut dir = InlineDirectory::parse(&empty_inline_dir(2), true, 12).unwrap();
        dir.insert(&entry("in-i-block-name-long-enough-to-fill", 20));
        dir.grow_value(32);
        dir.insert(&entry("in-value", 21));
        assert_eq!(
            dir.set_target(b"in-value", 22, ft::REGULAR).unwrap().ino,
            21
        );
        assert_eq!(dir.lookup(b"in-value").unwrap().ino, 22);
        assert_eq!(
            dir.remove(b"in-i-block-name-long-enough-to-fill")
                .unwrap()
                .ino,
            20
        );
        assert!(!dir.is_empty());
        assert_eq!(dir.remove(b"in-value").unwrap().ino, 22);
        assert!(dir.is_empty());
        assert!(dir.remove(b"in-value").is_none());
        dir.set_parent(7);
        assert_eq!(dir.content()[..4], 7u32.to_le_bytes());
    }

    #[test]
    fn conversion_makes_dot_entries_copies_records_and_stretches_the_last() {
        for csum in [false, true] {
            let mut dir = InlineDirectory::parse(&empty_inline_dir(5), true, 12).unwrap();
            // A 44-byte name takes 52 of i_block's 56 bytes: "b" goes to the value.
            let long = "a".repeat(44);
            dir.insert(&entry(&long, 20));
            dir.grow_value(24);
            dir.insert(&entry("b", 21));
            let format = format(csum);
            let leaf = dir.to_block(&format, 12).unwrap();
            let loc = Location::Block(0);
            check_leaf_chain(leaf.bytes(), format.filetype, format.metadata_csum, loc).unwrap();
            let parsed = LeafBlock::checked(leaf.bytes().to_vec(), &format, loc).unwrap();
            let entries: Vec<_> = parsed.entries().collect();
            let shape: Vec<_> = entries
                .iter()
                .map(|e| (e.name.clone(), e.ino, e.offset))
                .collect();
            assert_eq!(
                shape,
                vec![
                    (b".".to_vec(), 12, 0),
                    (b"..".to_vec(), 5, 12),
                    (long.clone().into_bytes(), 20, 24),
                    (b"b".to_vec(), 21, 80),
                ]
            );
            assert_eq!(80 + entries[3].rec_len, parsed.chain_end());
        }
    }
}

//! Inline directories (write-path.md §4, `fs/ext4/inline.c`): a small directory kept in its
//! inode. `i_block[0..4)` holds the parent's inode number in place of "." and ".."; the rest
//! of `i_block` is one chain of entries and the `system.data` value a second, separate one;
//! there is no checksum tail, and `i_size` is 60 plus the value's length.
//!
//! [`InlineDirectory`] is the entry layout alone, edited in memory as the kernel edits it
//! (`ext4_add_dirent_to_inline`, `ext4_delete_inline_entry`, `ext4_update_inline_dir`).
//! `ops/inline_directory.rs` applies it to a locked directory inode for the namespace
//! operations.

use e4_format::inline_data::DIR_PARENT_SIZE;
use e4_format::inode::I_BLOCK_SIZE;
use e4_format::Location;

use crate::buffer::verifier::MIN_REC_LEN;
use crate::dir::entry::{DirEntry, DirFormat};
use crate::dir::leaf::{LeafBlock, LeafEntry, NewEntry};
use crate::error::Result;

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

    /// The parent directory (where "." and ".." would be).
    pub fn parent(&self) -> u32 {
        self.parent
    }

    /// The live entries in order, each with the byte offset it will have in block 0 when
    /// the directory leaves the inode ([`Self::to_block`] copies the regions whole after
    /// "." and ".."): a listing's cookies then mean the same entries before and after.
    pub fn entries(&self) -> impl Iterator<Item = (usize, LeafEntry)> + '_ {
        let first = 2 * MIN_REC_LEN;
        let bases = [first, first + self.regions[0].bytes().len()];
        self.regions
            .iter()
            .zip(bases)
            .flat_map(|(region, base)| region.entries().map(move |e| (base + e.offset, e)))
    }

    pub fn lookup(&self, name: &[u8]) -> Option<DirEntry> {
        self.find(name).map(|(_, e)| e.to_public())
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
        Some(entry.to_public())
    }

    pub fn set_target(&mut self, name: &[u8], ino: u32, code: u8) -> Option<DirEntry> {
        let (region, entry) = self.find(name)?;
        self.regions[region].set_target(entry.offset, ino, code);
        Some(entry.to_public())
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

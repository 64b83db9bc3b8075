//! One directory leaf block being edited: a chain of `ext4_dir_entry_2` records that ends at
//! the block size, or at the 12-byte checksum tail under metadata_csum. Insertion, deletion
//! and the "." / ".." pair follow the kernel (`ext4_find_dest_de`, `ext4_insert_dentry`,
//! `ext4_generic_delete_entry`, `ext4_init_new_dir`) so that blocks e4 edits look like
//! blocks the kernel edits.

use e4_format::dir_entry::{
    encode_entry, entry_size, has_tail, init_leaf_tail, rec_len_to_disk, DirEntry, DirEntryIter,
    TAIL_SIZE,
};
use e4_format::{FormatError, Location, Problem, Structure};

use crate::dir_write::DirFormat;
use crate::error::Result;

/// The smallest record the kernel accepts (`EXT4_DIR_REC_LEN(1)`); the entry iterator alone
/// allows 8, the bare header.
const MIN_REC_LEN: usize = 12;
/// Fields of `ext4_dir_entry_2`, as byte ranges in a record.
const INODE_FIELD: std::ops::Range<usize> = 0..4;
pub(crate) const REC_LEN_FIELD: std::ops::Range<usize> = 4..6;
/// `name_len`: the first byte after `rec_len`.
const NAME_LEN_FIELD: usize = 6;
/// `file_type` (the high byte of `name_len` without the filetype feature).
const FILE_TYPE_FIELD: usize = 7;

/// A live entry as the leaf holds it, with its place in the block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LeafEntry {
    /// Byte offset of the record in the block.
    pub offset: usize,
    /// `rec_len`: the record's bytes, slack included.
    pub rec_len: usize,
    pub ino: u32,
    /// The raw `file_type` code (0 without the filetype feature).
    pub file_type: u8,
    pub name: Vec<u8>,
}

impl LeafEntry {
    fn new(offset: usize, entry: &DirEntry<'_>) -> Self {
        LeafEntry {
            offset,
            rec_len: entry.rec_len,
            ino: entry.inode,
            file_type: entry.file_type,
            name: entry.name.to_vec(),
        }
    }
}

/// An entry to place in a block that is being built from scratch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct NewEntry {
    pub ino: u32,
    pub file_type: u8,
    pub name: Vec<u8>,
}

/// A directory leaf block whose entry chain has been checked: every record lies inside the
/// chain, has a valid `rec_len` and holds its name.
#[derive(Debug, Clone)]
pub(crate) struct LeafBlock {
    bytes: Vec<u8>,
    /// Where the entry chain ends: the block size, less the tail under metadata_csum.
    end: usize,
    filetype: bool,
}

impl LeafBlock {
    /// Checks a leaf block read from the directory. `loc` names it in errors.
    pub(crate) fn parse(bytes: Vec<u8>, format: &DirFormat, loc: Location) -> Result<Self> {
        let bad = |problem| FormatError::corrupt(Structure::DirectoryBlock, loc, problem);
        if bytes.len() != format.block_size {
            return Err(bad(Problem::WrongBlockSize {
                len: bytes.len(),
                expected: format.block_size,
            })
            .into());
        }
        if format.metadata_csum && !has_tail(&bytes) {
            return Err(bad(Problem::NoChecksumTail).into());
        }
        let leaf = LeafBlock {
            end: chain_end(format),
            bytes,
            filetype: format.filetype,
        };
        leaf.check_chain(loc)?;
        Ok(leaf)
    }

    /// Checks that every record of the chain is whole and at least [`MIN_REC_LEN`] long.
    fn check_chain(&self, loc: Location) -> Result<()> {
        let mut offset = 0;
        let block_size = self.bytes.len();
        for entry in DirEntryIter::new(&self.bytes[..self.end], block_size, self.filetype, loc) {
            let entry = entry?;
            if entry.rec_len < MIN_REC_LEN {
                return Err(FormatError::corrupt(
                    Structure::DirectoryBlock,
                    loc,
                    Problem::BadRecLen {
                        offset,
                        rec_len: entry.rec_len,
                    },
                )
                .into());
            }
            offset += entry.rec_len;
        }
        Ok(())
    }

    /// One entry region of an inline directory (the rest of `i_block`, or the `system.data`
    /// value): a chain that fills `bytes` exactly, with no tail. `loc` names it in errors.
    pub(crate) fn inline_region(bytes: Vec<u8>, filetype: bool, loc: Location) -> Result<Self> {
        let leaf = LeafBlock {
            end: bytes.len(),
            bytes,
            filetype,
        };
        leaf.check_chain(loc)?;
        Ok(leaf)
    }

    /// The first block of a directory converted from inline (`ext4_finish_convert_inline_dir`):
    /// "." and ".." in 12 bytes each, then the inline regions' records copied as they are,
    /// the last one stretched to the end of the chain, then the tail. `None` if they do not
    /// fit the block.
    pub(crate) fn from_inline(
        format: &DirFormat,
        self_ino: u32,
        parent_ino: u32,
        regions: &[&LeafBlock],
    ) -> Option<Self> {
        let end = chain_end(format);
        let mut bytes = vec![0u8; format.block_size];
        if format.metadata_csum {
            init_leaf_tail(&mut bytes);
        }
        let dir_type = format.file_type_code(e4_format::inode::FileType::Directory);
        encode_entry(&mut bytes, self_ino, MIN_REC_LEN, dir_type, b".");
        encode_entry(
            &mut bytes[MIN_REC_LEN..],
            parent_ino,
            MIN_REC_LEN,
            dir_type,
            b"..",
        );
        let mut at = 2 * MIN_REC_LEN;
        let mut last = MIN_REC_LEN;
        for region in regions {
            if at + region.end > end {
                return None;
            }
            if let Some((offset, _)) = region.records().last() {
                last = at + offset;
            }
            bytes[at..at + region.end].copy_from_slice(&region.bytes[..region.end]);
            at += region.end;
        }
        let mut leaf = LeafBlock {
            bytes,
            end,
            filetype: format.filetype,
        };
        leaf.set_rec_len(last, end - last);
        Some(leaf)
    }

    /// A block with no entries: one free record spanning the chain, then the tail
    /// (`ext4_append` followed by the "add to new block" path of `ext4_add_entry`).
    pub(crate) fn empty(format: &DirFormat) -> Self {
        Self::packed(format, &[]).expect("an empty list fits in any block")
    }

    /// The first block of a new directory (`ext4_init_new_dir`): "." (12 bytes) and ".."
    /// spanning the rest of the chain, both of type directory.
    pub(crate) fn with_dot_entries(format: &DirFormat, self_ino: u32, parent_ino: u32) -> Self {
        let dir_type = format.file_type_code(e4_format::inode::FileType::Directory);
        let entries = [
            NewEntry {
                ino: self_ino,
                file_type: dir_type,
                name: b".".to_vec(),
            },
            NewEntry {
                ino: parent_ino,
                file_type: dir_type,
                name: b"..".to_vec(),
            },
        ];
        Self::packed(format, &entries).expect("two short entries fit in any block")
    }

    /// A block holding `entries` in order, each in its smallest record, the last one taking
    /// the rest of the chain (`dx_pack_dirents`, `dx_move_dirents`). `None` if they do not
    /// fit.
    pub(crate) fn packed(format: &DirFormat, entries: &[NewEntry]) -> Option<Self> {
        let end = chain_end(format);
        let mut bytes = vec![0u8; format.block_size];
        if format.metadata_csum {
            init_leaf_tail(&mut bytes);
        }
        let sizes: Vec<usize> = entries.iter().map(|e| entry_size(e.name.len())).collect();
        if sizes.iter().sum::<usize>() > end {
            return None;
        }
        let mut offset = 0;
        for (i, (entry, size)) in entries.iter().zip(&sizes).enumerate() {
            let rec_len = if i + 1 == entries.len() {
                end - offset
            } else {
                *size
            };
            encode_entry(
                &mut bytes[offset..],
                entry.ino,
                rec_len,
                entry.file_type,
                &entry.name,
            );
            offset += rec_len;
        }
        if entries.is_empty() {
            encode_entry(&mut bytes, 0, end, 0, &[]);
        }
        Some(LeafBlock {
            bytes,
            end,
            filetype: format.filetype,
        })
    }

    /// Where the entry chain ends: the block size, less the tail under metadata_csum.
    pub(crate) fn chain_end(&self) -> usize {
        self.end
    }

    /// The block's bytes, to be written as a [`crate::meta_io::BlockKind::DirectoryLeaf`].
    pub(crate) fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// Every record in chain order with its offset, free ones included.
    fn records(&self) -> impl Iterator<Item = (usize, DirEntry<'_>)> + '_ {
        // The chain was checked when the block was parsed or built and every edit keeps it
        // valid, so the iterator yields no errors; stopping at one would only hide entries.
        let entries = DirEntryIter::new(
            &self.bytes[..self.end],
            self.bytes.len(),
            self.filetype,
            Location::Block(0),
        )
        .map_while(std::result::Result::ok);
        entries.scan(0usize, |offset, entry| {
            let at = *offset;
            *offset += entry.rec_len;
            Some((at, entry))
        })
    }

    /// The live entries, in chain order.
    pub(crate) fn entries(&self) -> impl Iterator<Item = LeafEntry> + '_ {
        self.records()
            .filter(|(_, e)| e.inode != 0)
            .map(|(offset, e)| LeafEntry::new(offset, &e))
    }

    /// The live entry called `name`, if the block holds one.
    pub(crate) fn find(&self, name: &[u8]) -> Option<LeafEntry> {
        self.records()
            .find(|(_, e)| e.inode != 0 && e.name == name)
            .map(|(offset, e)| LeafEntry::new(offset, &e))
    }

    /// Adds an entry in the first record with room for it (`ext4_find_dest_de`): a live
    /// record is cut to its smallest size and the entry takes the rest; a free record is
    /// reused whole. False when no record has room.
    pub(crate) fn insert(&mut self, name: &[u8], ino: u32, file_type: u8) -> bool {
        let needed = entry_size(name.len());
        let slot = self.records().find_map(|(offset, e)| {
            let used = if e.inode == 0 {
                0
            } else {
                entry_size(e.name.len())
            };
            (e.rec_len - used >= needed).then_some((offset, used, e.rec_len))
        });
        let Some((offset, used, rec_len)) = slot else {
            return false;
        };
        if used > 0 {
            // The live entry keeps its first `used` bytes; only its rec_len changes.
            self.set_rec_len(offset, used);
        }
        let at = offset + used;
        self.bytes[at..offset + rec_len].fill(0);
        encode_entry(&mut self.bytes[at..], ino, rec_len - used, file_type, name);
        true
    }

    /// Deletes the record at `offset` (`ext4_generic_delete_entry`): the previous record
    /// absorbs it and it is zeroed; the first record of the block instead becomes free,
    /// keeping its `rec_len`, with everything after that field zeroed.
    pub(crate) fn remove(&mut self, offset: usize) {
        let mut previous = None;
        let mut found = None;
        for (at, e) in self.records() {
            if at == offset {
                found = Some(e.rec_len);
                break;
            }
            previous = Some((at, e.rec_len));
        }
        let Some(rec_len) = found else {
            return;
        };
        match previous {
            Some((prev, prev_len)) => {
                self.set_rec_len(prev, prev_len + rec_len);
                self.bytes[offset..offset + rec_len].fill(0);
            }
            None => {
                self.bytes[offset + INODE_FIELD.start..offset + INODE_FIELD.end].fill(0);
                self.bytes[offset + NAME_LEN_FIELD..offset + rec_len].fill(0);
            }
        }
    }

    /// Lengthens an inline region to `len` bytes (`ext4_update_final_de`): its last record
    /// takes the new bytes, or, in an empty region, one free record spans them. `len` is a
    /// multiple of 4, at least [`MIN_REC_LEN`] more than the current length.
    pub(crate) fn grow_region(&mut self, len: usize) {
        let last = self.records().last().map(|(offset, e)| (offset, e.rec_len));
        let old = self.end;
        self.bytes.resize(len, 0);
        self.end = len;
        match last {
            Some((offset, rec_len)) => self.set_rec_len(offset, rec_len + len - old),
            None => encode_entry(&mut self.bytes, 0, len, 0, &[]),
        }
    }

    /// Points the record at `offset` at another inode (a rename over an existing name).
    pub(crate) fn set_target(&mut self, offset: usize, ino: u32, file_type: u8) {
        let field = offset + INODE_FIELD.start..offset + INODE_FIELD.end;
        self.bytes[field].copy_from_slice(&ino.to_le_bytes());
        if self.filetype {
            self.bytes[offset + FILE_TYPE_FIELD] = file_type;
        }
    }

    fn set_rec_len(&mut self, offset: usize, rec_len: usize) {
        let field = offset + REC_LEN_FIELD.start..offset + REC_LEN_FIELD.end;
        self.bytes[field].copy_from_slice(&rec_len_to_disk(rec_len).to_le_bytes());
    }
}

/// Where a leaf's entry chain ends under `format`.
fn chain_end(format: &DirFormat) -> usize {
    if format.metadata_csum {
        format.block_size - TAIL_SIZE
    } else {
        format.block_size
    }
}

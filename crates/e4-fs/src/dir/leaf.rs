//! One directory leaf block being edited: a chain of `ext4_dir_entry_2` records that ends at
//! the block size, or at the 12-byte checksum tail under metadata_csum. Insertion, deletion
//! and the "." / ".." pair follow the kernel (`ext4_find_dest_de`, `ext4_insert_dentry`,
//! `ext4_generic_delete_entry`, `ext4_init_new_dir`) so that blocks e4 edits look like
//! blocks the kernel edits.

use std::ops::Range;

use e4_format::dir_entry::{
    encode_entry, entry_size, has_tail, init_leaf_tail, rec_len_from_disk, rec_len_to_disk,
    ENTRY_HEADER_SIZE, TAIL_SIZE,
};
use e4_format::{FormatError, Location, Problem, Structure};

use crate::buffer::verifier::{check_chain_region, MIN_REC_LEN};
use crate::dir::entry::{DirEntry, DirFormat};
use crate::dir::leaf_index::LeafIndex;
use crate::error::Result;
use crate::io::derived::Derived;
use crate::io::meta_io::BeforeChange;

/// The smallest block size whose `rec_len` values are encoded (`ext4_rec_len_from_disk`).
const LARGE_BLOCK: usize = 65536;
/// A block size below [`LARGE_BLOCK`], standing for all of them: below it, `rec_len` is
/// read as it is.
const SMALL_BLOCK: usize = 4096;
/// The room the smallest entry (a 1-byte name) needs: a record without it has room for
/// none.
const SMALLEST_ENTRY: usize = MIN_REC_LEN;

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
    /// The entry as callers see it.
    pub(crate) fn into_public(self) -> DirEntry {
        DirEntry {
            name: self.name,
            ino: self.ino,
            file_type: e4_format::dir_entry::file_type::to_file_type(self.file_type),
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
/// chain, has a valid `rec_len` and holds its name. `B` holds the bytes: a block of its own
/// (`Vec<u8>`, for blocks being built or rebuilt), or the cached block itself, borrowed for
/// a look (`&[u8]`) or an edit in place (`&mut [u8]`).
#[derive(Debug, Clone)]
pub(crate) struct LeafBlock<B = Vec<u8>> {
    bytes: B,
    /// Where the entry chain ends: the block size, less the tail under metadata_csum.
    end: usize,
    filetype: bool,
}

impl<B: AsRef<[u8]>> LeafBlock<B> {
    /// A leaf whose entry chain was checked when it was read ([`check_leaf_chain`], the
    /// verify step the engine runs once per buffer): only the checks that cost nothing are
    /// made again. A directory operation reads a leaf or two, and walking every record to
    /// re-check it was a fifth of a create.
    pub(crate) fn checked(bytes: B, format: &DirFormat, loc: Location) -> Result<Self> {
        let bad = |problem| FormatError::corrupt(Structure::DirectoryBlock, loc, problem);
        let len = bytes.as_ref().len();
        if len != format.block_size {
            return Err(bad(Problem::WrongBlockSize {
                len,
                expected: format.block_size,
            })
            .into());
        }
        if format.metadata_csum && !has_tail(bytes.as_ref()) {
            return Err(bad(Problem::NoChecksumTail).into());
        }
        Ok(LeafBlock {
            end: chain_end(format),
            bytes,
            filetype: format.filetype,
        })
    }

    /// Checks that every record of the chain is whole and at least [`MIN_REC_LEN`] long.
    fn check_chain(&self, loc: Location) -> Result<()> {
        let bytes = self.bytes.as_ref();
        check_chain_region(&bytes[..self.end], bytes.len(), self.filetype, loc)
    }

    /// Where the entry chain ends: the block size, less the tail under metadata_csum.
    pub(crate) fn chain_end(&self) -> usize {
        self.end
    }

    /// The block's bytes, to be written as a [`crate::io::meta_io::BlockKind::DirectoryLeaf`].
    pub(crate) fn bytes(&self) -> &[u8] {
        self.bytes.as_ref()
    }

    /// Every record in chain order, free ones included.
    fn records(&self) -> Records<'_> {
        self.records_from(0)
    }

    /// The records in chain order from the one at `offset` (which must start one).
    fn records_from(&self, offset: usize) -> Records<'_> {
        let bytes = self.bytes.as_ref();
        Records {
            chain: &bytes[..self.end],
            offset,
            block_size: bytes.len(),
            filetype: self.filetype,
        }
    }

    /// The live entries, in chain order.
    pub(crate) fn entries(&self) -> impl Iterator<Item = LeafEntry> + '_ {
        self.records()
            .filter(|r| r.inode != 0)
            .map(|r| r.to_entry())
    }

    /// The name of the live record at `offset`, if one starts there.
    fn live_name_at(&self, offset: usize) -> Option<&[u8]> {
        let record = self.records_from(offset).next()?;
        (record.inode != 0).then_some(record.name)
    }

    /// The live entry called `name`, if the block holds one.
    pub(crate) fn find(&self, name: &[u8]) -> Option<LeafEntry> {
        self.scan(name, None).entry()
    }

    /// The first record with room for an entry with a `name_len`-byte name
    /// (`ext4_find_dest_de`).
    fn slot_for(&self, name_len: usize) -> Option<Slot> {
        let needed = entry_size(name_len);
        self.records().find_map(|r| r.slot(needed))
    }

    /// [`LeafBlock::scan`] through the leaf's index where the store keeps one (`kept`).
    fn scan_in(&self, name: &[u8], needed: Option<usize>, kept: Option<&Derived>) -> Scan<'_> {
        // Only a create builds the index: a lookup alone walks (once per leaf read, the
        // build would cost more than the walk it saves).
        let index = match (kept, needed) {
            (Some(kept), Some(_)) => kept.get_or_make(|| self.index()),
            (Some(kept), None) => kept.get::<LeafIndex>(),
            (None, _) => None,
        };
        let Some(index) = index else {
            return self.scan(name, needed);
        };
        let scan = self.scan_indexed(name, needed, index);
        debug_assert_eq!(
            scan.answer(),
            self.scan(name, needed).answer(),
            "the leaf index disagrees with a walk of the leaf about {:?}",
            String::from_utf8_lossy(name)
        );
        scan
    }

    /// [`LeafBlock::scan`]'s answer from `index`: only the records whose name hashes as
    /// `name` does are read, and the search for room starts at the first room.
    fn scan_indexed(&self, name: &[u8], needed: Option<usize>, index: &LeafIndex) -> Scan<'_> {
        let bytes = self.bytes.as_ref();
        let chain = &bytes[..self.end];
        let wanted = Wanted::new(name);
        // The first holder in the chain, as the walk's: a damaged leaf may hold a name twice.
        // (The table offers such twins in chain order already, as the build enters them and
        // an insert never adds a live name; the minimum does not depend on that.)
        let holder = index
            .holding(name)
            .filter_map(|offset| {
                let rest = chain.get(offset..)?;
                let header = Header::first(rest, bytes.len(), self.filetype)?;
                (header.holds(rest, &wanted) == Some(true)).then_some((offset, header, rest))
            })
            .min_by_key(|(offset, _, _)| *offset);
        if let Some((offset, header, rest)) = holder {
            return Scan::found(header, rest, offset);
        }
        Scan::Absent(needed.and_then(|needed| {
            self.records_from(index.first_room())
                .find_map(|r| r.slot(needed))
        }))
    }

    /// This leaf's index: where its records start, its live records' names, and its first
    /// record with room.
    pub(crate) fn index(&self) -> LeafIndex {
        LeafIndex::new(
            self.records()
                .map(|r| (r.offset, (r.inode != 0).then_some(r.name))),
            self.end,
            self.first_room_from(0),
        )
    }

    /// The offset of the first record from `offset` on with room for the smallest entry;
    /// the chain's end if none has.
    fn first_room_from(&self, offset: usize) -> usize {
        self.records_from(offset)
            .find(|r| r.slot(SMALLEST_ENTRY).is_some())
            .map_or(self.end, |r| r.offset)
    }

    /// The walk behind [`LeafBlock::find`] and [`LeafView::probe`] (the kernel's
    /// `search_dirblock`, and `ext4_find_dest_de` when `needed` asks for a slot too). Every
    /// lookup of an absent name and every create walks a whole leaf, a few hundred records,
    /// so the loop touches only what decides each record: one 8-byte header load, the
    /// name's bytes only where its length matches, and the slot's arithmetic only until a
    /// slot is found. It stops where [`Records`] stops, but for a live record whose name,
    /// of another length than `name`, runs past the chain: one a checked chain never has.
    fn scan(&self, name: &[u8], needed: Option<usize>) -> Scan<'_> {
        // The loop is compiled once per record layout, so that it tests neither layout
        // fact per record.
        let large = self.bytes.as_ref().len() >= LARGE_BLOCK;
        match (self.filetype, large) {
            (true, false) => self.scan_as::<true, false>(name, needed),
            (true, true) => self.scan_as::<true, true>(name, needed),
            (false, false) => self.scan_as::<false, false>(name, needed),
            (false, true) => self.scan_as::<false, true>(name, needed),
        }
    }

    /// [`LeafBlock::scan`] for blocks with (`FILETYPE`) or without the filetype feature,
    /// of 64 KiB (`LARGE`, where `rec_len` is encoded) or less. Two loops, so that neither
    /// carries the other's state: the first while a slot is wanted, the second after.
    #[inline(always)]
    fn scan_as<const FILETYPE: bool, const LARGE: bool>(
        &self,
        name: &[u8],
        needed: Option<usize>,
    ) -> Scan<'_> {
        let bytes = self.bytes.as_ref();
        let chain = &bytes[..self.end];
        // rec_len_from_disk reads a length as it is below 64 KiB, whatever the size.
        let block_size = if LARGE { bytes.len() } else { SMALL_BLOCK };
        let offset_of = |rest: &[u8]| chain.len() - rest.len();
        let wanted = Wanted::new(name);
        let mut rest = chain;
        let mut slot = None;
        if let Some(needed) = needed {
            while let Some(header) = Header::first(rest, block_size, FILETYPE) {
                match header.holds(rest, &wanted) {
                    Some(true) => return Scan::found(header, rest, offset_of(rest)),
                    Some(false) => {}
                    None => return Scan::Absent(None),
                }
                slot = header.slot(offset_of(rest), needed);
                rest = &rest[header.rec_len..];
                if slot.is_some() {
                    break;
                }
            }
        }
        while let Some(header) = Header::first(rest, block_size, FILETYPE) {
            match header.holds(rest, &wanted) {
                Some(true) => return Scan::found(header, rest, offset_of(rest)),
                Some(false) => {}
                None => break,
            }
            rest = &rest[header.rec_len..];
        }
        Scan::Absent(slot)
    }
}

impl<B: AsRef<[u8]> + AsMut<[u8]>> LeafBlock<B> {
    /// Adds an entry in the first record with room for it ([`LeafBlock::insert_at`]).
    /// False when no record has room.
    pub(crate) fn insert(&mut self, name: &[u8], ino: u32, file_type: u8) -> bool {
        match self.slot_for(name.len()) {
            Some(slot) => {
                self.insert_at(slot, name, ino, file_type);
                true
            }
            None => false,
        }
    }

    /// Adds an entry in `slot`, which [`LeafView::probe`] found for this name: a live
    /// record is cut to its smallest size and the entry takes the rest; a free record is
    /// reused whole.
    pub(crate) fn insert_at(&mut self, slot: Slot, name: &[u8], ino: u32, file_type: u8) {
        let Slot {
            offset,
            used,
            rec_len,
        } = slot;
        if used > 0 {
            // The live entry keeps its first `used` bytes; only its rec_len changes.
            self.set_rec_len(offset, used);
        }
        let at = offset + used;
        let bytes = self.bytes.as_mut();
        bytes[at..offset + rec_len].fill(0);
        encode_entry(&mut bytes[at..], ino, rec_len - used, file_type, name);
    }

    /// Deletes the record at `offset` (`ext4_generic_delete_entry`): the previous record
    /// absorbs it and it is zeroed; the first record of the block instead becomes free,
    /// keeping its `rec_len`, with everything after that field zeroed. Returns where the
    /// freed bytes are now: the record that absorbed them, or the record itself made free;
    /// `None` if no record starts at `offset`.
    pub(crate) fn remove(&mut self, offset: usize) -> Option<usize> {
        self.remove_after(0, offset)
    }

    /// [`LeafBlock::remove`], walking to the record before `offset` from the record at
    /// `from` (0, or a record before `offset`).
    fn remove_after(&mut self, from: usize, offset: usize) -> Option<usize> {
        let removal = self.removal(from, offset)?;
        Some(self.apply_removal(removal))
    }

    /// [`LeafBlock::apply_removal`]'s plan for the record at `offset`, walking from the
    /// record at `from`; `None` if no record starts there.
    fn removal(&self, from: usize, offset: usize) -> Option<Removal> {
        let mut previous = None;
        for r in self.records_from(from) {
            if r.offset == offset {
                return Some(Removal {
                    offset,
                    rec_len: r.rec_len,
                    previous,
                });
            }
            previous = Some((r.offset, r.rec_len));
        }
        None
    }

    /// Removes the record `removal` names; returns where the freed bytes are now.
    fn apply_removal(&mut self, removal: Removal) -> usize {
        let Removal {
            offset,
            rec_len,
            previous,
        } = removal;
        match previous {
            Some((prev, prev_len)) => {
                self.set_rec_len(prev, prev_len + rec_len);
                self.bytes.as_mut()[offset..offset + rec_len].fill(0);
                prev
            }
            None => {
                let bytes = self.bytes.as_mut();
                bytes[offset + INODE_FIELD.start..offset + INODE_FIELD.end].fill(0);
                bytes[offset + NAME_LEN_FIELD..offset + rec_len].fill(0);
                offset
            }
        }
    }

    /// Points the record at `offset` at another inode (a rename over an existing name).
    pub(crate) fn set_target(&mut self, offset: usize, ino: u32, file_type: u8) {
        let filetype = self.filetype;
        let bytes = self.bytes.as_mut();
        bytes[offset + INODE_FIELD.start..offset + INODE_FIELD.end]
            .copy_from_slice(&ino.to_le_bytes());
        if filetype {
            bytes[offset + FILE_TYPE_FIELD] = file_type;
        }
    }

    fn set_rec_len(&mut self, offset: usize, rec_len: usize) {
        let field = offset + REC_LEN_FIELD.start..offset + REC_LEN_FIELD.end;
        self.bytes.as_mut()[field].copy_from_slice(&rec_len_to_disk(rec_len).to_le_bytes());
    }
}

impl LeafBlock {
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
            if let Some(record) = region.records().last() {
                last = at + record.offset;
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

    /// Lengthens an inline region to `len` bytes (`ext4_update_final_de`): its last record
    /// takes the new bytes, or, in an empty region, one free record spans them. `len` is a
    /// multiple of 4, at least [`MIN_REC_LEN`] more than the current length.
    pub(crate) fn grow_region(&mut self, len: usize) {
        let last = self.records().last().map(|r| (r.offset, r.rec_len));
        let old = self.end;
        self.bytes.resize(len, 0);
        self.end = len;
        match last {
            Some((offset, rec_len)) => self.set_rec_len(offset, rec_len + len - old),
            None => encode_entry(&mut self.bytes, 0, len, 0, &[]),
        }
    }
}

/// One record of a checked chain, borrowing its name from the block.
struct Record<'a> {
    offset: usize,
    inode: u32,
    rec_len: usize,
    file_type: u8,
    /// Empty in a free record (inode 0).
    name: &'a [u8],
}

/// A record with room for a new entry: at `offset`, its own entry using `used` bytes (0 if
/// free) of its `rec_len`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Slot {
    offset: usize,
    used: usize,
    rec_len: usize,
}

/// What [`LeafView::probe`] found.
#[derive(Debug)]
pub(crate) enum LeafProbe {
    /// The name is here.
    Found,
    /// The name is not here; where it would go, if anywhere.
    Absent(Option<Slot>),
}

impl Record<'_> {
    /// This record as a slot for an entry needing `needed` bytes, if it has room.
    fn slot(&self, needed: usize) -> Option<Slot> {
        slot_in(
            self.offset,
            self.inode,
            self.rec_len,
            self.name.len(),
            needed,
        )
    }

    fn to_entry(&self) -> LeafEntry {
        LeafEntry {
            offset: self.offset,
            rec_len: self.rec_len,
            ino: self.inode,
            file_type: self.file_type,
            name: self.name.to_vec(),
        }
    }
}

/// Walks a [`LeafBlock`]'s chain. The chain was checked when the block was parsed or built
/// and every edit keeps it valid, so this decodes without re-checking (directory lookups
/// and inserts walk every record of a leaf, several times per operation). The bounds are
/// still tested: a record that breaks them ends the walk rather than reading past the
/// chain.
#[derive(Clone)]
struct Records<'a> {
    chain: &'a [u8],
    offset: usize,
    block_size: usize,
    filetype: bool,
}

impl<'a> Iterator for Records<'a> {
    type Item = Record<'a>;

    fn next(&mut self) -> Option<Record<'a>> {
        let offset = self.offset;
        let rest = self.chain.get(offset..)?;
        let record = Header::first(rest, self.block_size, self.filetype)?.record(rest, offset)?;
        self.offset = offset + record.rec_len;
        Some(record)
    }
}

/// What [`LeafBlock::scan`] found.
enum Scan<'a> {
    /// The live record holding the name.
    Found(Record<'a>),
    /// No such name; the first slot with room, if one was asked for and found.
    Absent(Option<Slot>),
}

impl<'a> Scan<'a> {
    /// The record `header` starts at the front of `rest`, whose name [`Header::holds`]
    /// found there.
    fn found(header: Header, rest: &'a [u8], offset: usize) -> Self {
        match header.record(rest, offset) {
            Some(record) => Scan::Found(record),
            None => Scan::Absent(None),
        }
    }

    /// The entry found, if any.
    fn entry(&self) -> Option<LeafEntry> {
        match self {
            Scan::Found(record) => Some(record.to_entry()),
            Scan::Absent(_) => None,
        }
    }

    /// What a caller learns: the offset of the record found, or the slot.
    fn answer(&self) -> (Option<usize>, Option<Slot>) {
        match self {
            Scan::Found(record) => (Some(record.offset), None),
            Scan::Absent(slot) => (None, *slot),
        }
    }
}

/// A cached leaf being looked at, with its index where the store keeps one
/// ([`crate::io::meta_io::MetaIo::visit_with_derived`]).
pub(crate) struct LeafView<'a> {
    leaf: LeafBlock<&'a [u8]>,
    kept: Option<&'a Derived>,
}

impl<'a> LeafView<'a> {
    pub(crate) fn new(leaf: LeafBlock<&'a [u8]>, kept: Option<&'a Derived>) -> Self {
        LeafView { leaf, kept }
    }

    /// The leaf, for what the index does not answer (listings, ".." checks).
    pub(crate) fn leaf(&self) -> &LeafBlock<&'a [u8]> {
        &self.leaf
    }

    /// [`LeafBlock::find`], through the index.
    pub(crate) fn find(&self, name: &[u8]) -> Option<LeafEntry> {
        self.leaf.scan_in(name, None, self.kept).entry()
    }

    /// Looks for `name` and, in the same look, for the first record with room for it
    /// ([`LeafBlock::slot_for`]'s): a create reads each leaf once for both.
    pub(crate) fn probe(&self, name: &[u8]) -> LeafProbe {
        match self
            .leaf
            .scan_in(name, Some(entry_size(name.len())), self.kept)
        {
            Scan::Found(_) => LeafProbe::Found,
            Scan::Absent(slot) => LeafProbe::Absent(slot),
        }
    }
}

/// The leaf index among what the store keeps for a leaf, if built.
fn index_in<'k>(kept: &'k mut Option<&mut Derived>) -> Option<&'k mut LeafIndex> {
    kept.as_deref_mut()?.get_mut()
}

/// The removal of the record at `offset` (`rec_len` bytes), with the record before it
/// (offset, rec_len), which absorbs it, if any.
#[derive(Debug, Clone, Copy)]
struct Removal {
    offset: usize,
    rec_len: usize,
    previous: Option<(usize, usize)>,
}

impl Removal {
    /// The bytes the removal changes: the record before's `rec_len` and the record.
    fn changed(&self) -> Range<usize> {
        let first = self.previous.map_or(self.offset, |(prev, _)| prev);
        first..self.offset + self.rec_len
    }
}

/// A cached leaf being changed in place, with its index where the store keeps one
/// ([`crate::io::meta_io::MetaIo::modify_with_derived`]): each edit changes both. Each
/// edit first names the bytes it changes to `before` where the store asks for them
/// ([`crate::io::meta_io::MetaIo::modify_in_ranges`]): a removal the record and the
/// `rec_len` of the record before, an insert the record it splits, a new target the
/// inode and type fields.
pub(crate) struct LeafEdit<'a> {
    leaf: LeafBlock<&'a mut [u8]>,
    kept: Option<&'a mut Derived>,
    before: Option<&'a mut BeforeChange<'a>>,
}

impl<'a> LeafEdit<'a> {
    pub(crate) fn new(
        leaf: LeafBlock<&'a mut [u8]>,
        kept: Option<&'a mut Derived>,
        before: Option<&'a mut BeforeChange<'a>>,
    ) -> Self {
        LeafEdit { leaf, kept, before }
    }

    /// Names `range` as about to change.
    fn before_change(&mut self, range: Range<usize>) {
        if let Some(before) = self.before.as_deref_mut() {
            before(range.start, &self.leaf.bytes[range]);
        }
    }

    /// [`LeafBlock::insert_at`]. The first room moves only if the slot was there.
    pub(crate) fn insert_at(&mut self, slot: Slot, name: &[u8], ino: u32, file_type: u8) {
        self.before_change(slot.offset..slot.offset + slot.rec_len);
        self.leaf.insert_at(slot, name, ino, file_type);
        if let Some(index) = index_in(&mut self.kept) {
            if !index.add(slot.offset + slot.used, name) {
                *index = self.leaf.index();
            } else if slot.offset <= index.first_room() {
                index.set_first_room(self.leaf.first_room_from(slot.offset));
            }
        }
        self.check_index();
    }

    /// Removes the live record at `offset` if it holds `name` for `ino` ([`LeafBlock::remove`],
    /// walking from the record before, which the index knows); false, changing nothing, if
    /// no such record starts there (a place found before the leaf changed). The record that
    /// takes the freed bytes has room now.
    pub(crate) fn remove(&mut self, offset: usize, ino: u32, name: &[u8]) -> bool {
        let holds = self
            .leaf
            .records_from(offset)
            .next()
            .is_some_and(|r| r.inode == ino && r.name == name);
        if !holds {
            return false;
        }
        let from = index_in(&mut self.kept)
            .as_ref()
            .and_then(|i| i.record_before(offset))
            .unwrap_or(0);
        let removal = match self.leaf.removal(from, offset) {
            Some(removal) => removal,
            // The record the index named does not lead to `offset`: a stale index (a bug
            // the debug checks exist to catch). The walk from the start decides, and the
            // index is dropped, to be built afresh.
            None if from != 0 => {
                if let Some(kept) = self.kept.as_deref_mut() {
                    kept.clear();
                }
                match self.leaf.removal(0, offset) {
                    Some(removal) => removal,
                    None => return false,
                }
            }
            None => return false,
        };
        self.before_change(removal.changed());
        let room = self.leaf.apply_removal(removal);
        if let Some(index) = index_in(&mut self.kept) {
            if room != offset {
                index.absorbed(offset);
            }
            index.set_first_room(index.first_room().min(room));
        }
        self.check_index();
        true
    }

    /// [`LeafBlock::set_target`]: the name stays, and so does the index.
    pub(crate) fn set_target(&mut self, offset: usize, ino: u32, file_type: u8) {
        self.before_change(offset..offset + FILE_TYPE_FIELD + 1);
        self.leaf.set_target(offset, ino, file_type);
    }

    /// With debug assertions, checks the index kept against one built afresh.
    fn check_index(&mut self) {
        if cfg!(debug_assertions) {
            if let Some(index) = index_in(&mut self.kept) {
                let live = |offset| self.leaf.live_name_at(offset);
                assert_eq!(
                    index.contents(live),
                    self.leaf.index().contents(live),
                    "the leaf index went stale in an edit"
                );
            }
        }
    }
}

/// The fixed 8 bytes of a record, decoded from one load.
#[derive(Clone, Copy)]
struct Header {
    inode: u32,
    rec_len: usize,
    name_len: usize,
    file_type: u8,
}

impl Header {
    /// The header of the record at the front of `rest` (the chain from that record on),
    /// if it lies there with a `rec_len` that neither ends the chain early nor runs past
    /// it. Only these bounds are tested: the rest was checked when the block was parsed or
    /// built.
    #[inline(always)]
    fn first(rest: &[u8], block_size: usize, filetype: bool) -> Option<Header> {
        let raw = u64::from_le_bytes(*rest.first_chunk::<ENTRY_HEADER_SIZE>()?);
        let rec_len = rec_len_from_disk((raw >> 32) as u16, block_size);
        if rec_len < ENTRY_HEADER_SIZE || rec_len > rest.len() {
            return None;
        }
        let (name_len, file_type) = if filetype {
            (usize::from((raw >> 48) as u8), (raw >> 56) as u8)
        } else {
            (usize::from((raw >> 48) as u16), 0)
        };
        Some(Header {
            inode: raw as u32,
            rec_len,
            name_len,
            file_type,
        })
    }

    /// Whether this record, at the front of `rest`, is a live entry called `wanted`;
    /// `None` if it is live with a name of that length that runs past the chain (where
    /// [`Records`] ends its walk). Names of another length are not read.
    #[inline(always)]
    fn holds(&self, rest: &[u8], wanted: &Wanted<'_>) -> Option<bool> {
        let name = wanted.name;
        if self.inode == 0 || self.name_len != name.len() {
            return Some(false);
        }
        let stored = rest.get(ENTRY_HEADER_SIZE..ENTRY_HEADER_SIZE + name.len())?;
        if let (Some(tail), Some(stored_tail)) = (wanted.tail, tail_word(stored)) {
            if tail != stored_tail {
                return Some(false);
            }
        }
        Some(same_name(stored, name))
    }

    /// The record this header starts, at the front of `rest` and at `offset` in the chain;
    /// `None` if it is live and its name runs past the chain.
    fn record<'a>(&self, rest: &'a [u8], offset: usize) -> Option<Record<'a>> {
        let name = if self.inode == 0 {
            &[][..]
        } else {
            rest.get(ENTRY_HEADER_SIZE..ENTRY_HEADER_SIZE + self.name_len)?
        };
        Some(Record {
            offset,
            inode: self.inode,
            rec_len: self.rec_len,
            file_type: self.file_type,
            name,
        })
    }

    /// This record, at `offset`, as a slot for an entry needing `needed` bytes.
    fn slot(&self, offset: usize, needed: usize) -> Option<Slot> {
        slot_in(offset, self.inode, self.rec_len, self.name_len, needed)
    }
}

/// The record at `offset` as a slot for an entry needing `needed` bytes, if it has room:
/// a free record (inode 0) offers its whole `rec_len`, a live one what its entry leaves.
fn slot_in(
    offset: usize,
    inode: u32,
    rec_len: usize,
    name_len: usize,
    needed: usize,
) -> Option<Slot> {
    // Most live records are as short as their entry allows: their own entry takes at least
    // MIN_REC_LEN, and this one comparison turns them down.
    let least_used = if inode == 0 { 0 } else { MIN_REC_LEN };
    if rec_len < least_used + needed {
        return None;
    }
    let used = if inode == 0 { 0 } else { entry_size(name_len) };
    (rec_len >= used + needed).then_some(Slot {
        offset,
        used,
        rec_len,
    })
}

/// Whether two names are equal, compared from the end: names in one directory often share
/// a prefix and differ in their last bytes (`file1001`, `file1002`), and an inline loop
/// over a few bytes is cheaper than a call to `memcmp` per record.
/// The name a scan looks for, with its last four bytes as one word.
struct Wanted<'a> {
    name: &'a [u8],
    tail: Option<u32>,
}

impl<'a> Wanted<'a> {
    fn new(name: &'a [u8]) -> Self {
        Wanted {
            name,
            tail: tail_word(name),
        }
    }
}

/// A name's last four bytes as one word (`None` if shorter): names of one length in one
/// directory ("f12345", "f12346") differ at the end most often, so one compare of this
/// word turns down nearly every record a whole-leaf scan passes.
#[inline(always)]
fn tail_word(name: &[u8]) -> Option<u32> {
    name.last_chunk::<4>().map(|w| u32::from_ne_bytes(*w))
}

fn same_name(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().rev().zip(b.iter().rev()).all(|(x, y)| x == y)
}

/// Where a leaf's entry chain ends under `format`.
fn chain_end(format: &DirFormat) -> usize {
    if format.metadata_csum {
        format.block_size - TAIL_SIZE
    } else {
        format.block_size
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn format() -> DirFormat {
        DirFormat {
            block_size: 1024,
            filetype: true,
            metadata_csum: false,
            dir_index: true,
            large_dir: false,
            def_hash_version: 1,
            unsigned_hash: false,
            hash_seed: [0; 4],
        }
    }

    fn entry(name: &[u8], ino: u32) -> NewEntry {
        NewEntry {
            ino,
            file_type: 1,
            name: name.to_vec(),
        }
    }

    /// A name removed from a leaf stays in its index as a stale entry; a later name may put
    /// bytes at that offset that read as a record holding the removed name (an inode,
    /// lengths, "victim"). The index offers only offsets where records start, so the
    /// removed name stays gone, as a walk of the leaf finds it gone.
    #[test]
    fn a_removed_name_is_not_found_inside_a_later_name() {
        let format = format();
        let loc = Location::Block(1);
        let long = [b'q'; 20];
        // Records at 0 ("p"), 12 (20 q's), 40 ("victim") and 56 ("w", to the end).
        let entries = [
            entry(b"p", 11),
            entry(&long, 12),
            entry(b"victim", 13),
            entry(b"w", 14),
        ];
        let mut bytes = LeafBlock::packed(&format, &entries)
            .unwrap()
            .bytes()
            .to_vec();
        let mut kept = Derived::default();
        let view = |bytes: &[u8], kept: &Derived, name: &[u8]| {
            let view = LeafView::new(LeafBlock::checked(bytes, &format, loc).unwrap(), Some(kept));
            (view.probe(name), view.find(name).map(|e| e.offset))
        };
        assert_eq!(view(&bytes, &kept, b"victim").1, Some(40));
        {
            let leaf = LeafBlock::checked(&mut bytes[..], &format, loc).unwrap();
            let mut edit = LeafEdit::new(leaf, Some(&mut kept), None);
            assert!(edit.remove(12, 12, &long));
            assert!(edit.remove(40, 13, b"victim"));
        }
        // 20 bytes of name, then what reads as a record at 40: inode 0x41414141, rec_len
        // 257, name_len 6, file type 1, "victim".
        let mut forged = vec![b'x'; 20];
        forged.extend_from_slice(&[0x41, 0x41, 0x41, 0x41, 0x01, 0x01, 6, 1]);
        forged.extend_from_slice(b"victim");
        let LeafProbe::Absent(Some(slot)) = view(&bytes, &kept, &forged).0 else {
            panic!("no room for the forged name");
        };
        {
            let leaf = LeafBlock::checked(&mut bytes[..], &format, loc).unwrap();
            LeafEdit::new(leaf, Some(&mut kept), None).insert_at(slot, &forged, 15, 1);
        }
        assert_eq!(view(&bytes, &kept, &forged).1, Some(12));
        assert!(matches!(
            view(&bytes, &kept, b"victim"),
            (LeafProbe::Absent(_), None)
        ));
        assert_eq!(
            LeafBlock::checked(&bytes[..], &format, loc)
                .unwrap()
                .find(b"victim"),
            None
        );
    }

    /// A leaf with records at 0 ("a", inode 11), 12 ("b", 12) and 24 ("c", 13, to the end).
    fn leaf_a_b_c(format: &DirFormat) -> Vec<u8> {
        let entries = [entry(b"a", 11), entry(b"b", 12), entry(b"c", 13)];
        LeafBlock::packed(format, &entries)
            .unwrap()
            .bytes()
            .to_vec()
    }

    /// A removal at a place that does not hold the name asked for (a place found before the
    /// leaf changed) changes nothing: not another name's record, not one of another inode,
    /// not bytes inside a record.
    #[test]
    fn a_removal_where_the_entry_is_not_changes_nothing() {
        let format = format();
        let loc = Location::Block(1);
        let mut bytes = leaf_a_b_c(&format);
        let before = bytes.clone();
        let mut kept = Derived::default();
        let leaf = LeafBlock::checked(&mut bytes[..], &format, loc).unwrap();
        let mut edit = LeafEdit::new(leaf, Some(&mut kept), None);
        assert!(!edit.remove(12, 12, b"c"), "another name's record");
        assert!(!edit.remove(12, 99, b"b"), "another inode's record");
        assert!(!edit.remove(16, 12, b"b"), "inside a record");
        assert!(!edit.remove(2048, 12, b"b"), "past the chain");
        assert_eq!(bytes, before);
    }

    /// An index that names a record start where none is (stale: a bug) must not make a
    /// removal edit the wrong record or none: the walk from the start decides, and the
    /// index is dropped.
    #[test]
    fn a_removal_with_a_stale_index_walks_from_the_start() {
        let format = format();
        let loc = Location::Block(1);
        let mut bytes = leaf_a_b_c(&format);
        // Starts at 0, 16 and 24: 16 lies inside "b"'s record.
        let records = [(0, None), (16, None), (24, Some(&b"c"[..]))];
        let stale = LeafIndex::new(records.into_iter(), 1024, 1024);
        let mut kept = Derived::default();
        assert!(kept.get_or_make(|| stale).is_some());
        let leaf = LeafBlock::checked(&mut bytes[..], &format, loc).unwrap();
        assert!(LeafEdit::new(leaf, Some(&mut kept), None).remove(24, 13, b"c"));
        let leaf = LeafBlock::checked(&bytes[..], &format, loc).unwrap();
        let names: Vec<Vec<u8>> = leaf.entries().map(|e| e.name).collect();
        assert_eq!(names, vec![b"a".to_vec(), b"b".to_vec()]);
        assert_eq!(leaf.entries().last().map(|e| e.rec_len), Some(1024 - 12));
        assert!(kept.get::<LeafIndex>().is_none());
    }
}

//! Changing a directory's contents: adding, removing, retargeting and finding names, in
//! linear directories and in htree-indexed ones (write-path.md §3).
//!
//! The mechanism works on one directory through two small interfaces, so it can be tested
//! on an in-memory store: [`MetaIo`] for its blocks' bytes and [`DirectoryBlocks`] for the
//! mapping from the directory's logical blocks to physical ones (the engine implements it
//! over the inode's extent tree or block map). It never computes checksums: leaf blocks are
//! written as [`BlockKind::DirectoryLeaf`] with their 12-byte tail entry in place and index
//! blocks as [`BlockKind::HtreeNode`]; the engine seals them at write-back with
//! [`e4_format::MetadataBlock::seal`] (of `DirLeafBlock` and `DxNode`).
//!
//! ```ignore
//! let mut dir = DirectoryEditor::new(&io, &mut blocks, &format, owner);
//! dir.init(parent_ino)?;
//! dir.add_entry(b"hello", 12, FileType::Regular)?;
//! assert_eq!(dir.lookup(b"hello")?.map(|e| e.ino), Some(12));
//! ```
//!
//! The caller holds the directory's lock and has checked that a name it adds is absent (as
//! a last line, a duplicate in a block the insertion reads, every block up to the one with
//! room when linear, the leaf the hash selects when indexed, is [`Error::Exists`]). Blocks
//! are never freed: a directory only grows.

use e4_format::dir_entry::DirEntryIter;
use e4_format::inode::FileType;
use e4_format::{FormatError, Location, Problem, Structure};

use crate::dir::entry::{check_name, DirEntry, DirFormat};
use crate::dir::leaf::{LeafBlock, LeafEdit, LeafEntry, LeafProbe, LeafView, NewEntry};
use crate::error::Shortage;
use crate::error::{Error, Result};
use crate::io::meta_io::{edit_in_ranges, look_with_derived, BlockKind, MetaIo, Owner};

/// The blocks of one directory, as the engine maps them.
/// Credits ([`crate::io::credits`]) of adding one entry, besides the blocks the directory
/// grows by (each declared by [`DirectoryBlocks::append_block`]): the leaf it goes into,
/// the leaf a split moves half of it from, and the htree's root and up to three index
/// blocks on its path (a split changes each level's node).
pub(crate) const ADD_ENTRY_CREDITS: u32 = 6;
/// Credits of removing one entry: its leaf (blocks are never merged or given back).
pub(crate) const REMOVE_ENTRY_CREDITS: u32 = 1;

pub trait DirectoryBlocks {
    /// How many blocks the directory holds: `i_size` / block size.
    fn block_count(&self) -> u64;
    /// The physical block behind logical block `logical` (below [`Self::block_count`]). A
    /// hole or an unwritten extent is corruption, reported as such.
    fn physical(&self, logical: u64) -> Result<u64>;
    /// Allocates and maps logical block [`Self::block_count`], grows `i_size` by one block
    /// and returns the new block's physical number. Fails with [`Error::NoSpace`] when the
    /// filesystem is full, or [`Error::FileTooBig`] when the directory cannot grow (`i_size`
    /// above 4 GiB needs large_dir).
    fn append_block(&mut self) -> Result<u64>;
    /// Whether the directory is hash-indexed (`EXT4_INDEX_FL`).
    fn is_indexed(&self) -> bool;
    /// Sets or clears `EXT4_INDEX_FL`.
    fn set_indexed(&mut self, on: bool);
}

/// The edits the namespace operations make to one locked directory, whatever holds its
/// entries: blocks ([`DirectoryEditor`]) or the inode itself
/// (`ops/inline_directory.rs`). Methods as [`DirectoryEditor`]'s.
pub(crate) trait DirectoryEdit {
    fn lookup(&self, name: &[u8]) -> Result<Option<DirEntry>>;
    fn add_entry(&mut self, name: &[u8], ino: u32, file_type: FileType) -> Result<()>;
    /// Adds `name` if the directory does not hold it ([`Error::Exists`] if it does),
    /// pointing at the inode `make` returns; `make` runs only once the name is known to be
    /// absent, and its error is returned as it is. This default looks up, then adds.
    fn add_new(
        &mut self,
        name: &[u8],
        file_type: FileType,
        make: &mut dyn FnMut() -> Result<u32>,
    ) -> Result<u32> {
        add_new_after_lookup(self, name, file_type, make)
    }
    fn remove_entry(&mut self, name: &[u8]) -> Result<Option<DirEntry>>;
    /// Finds `name` and remembers where, so that [`DirectoryEdit::remove_located`] need not
    /// find it again. This default remembers only the name.
    fn locate(&self, name: &[u8]) -> Result<Option<Located>> {
        Ok(self.lookup(name)?.map(|entry| Located { entry, at: None }))
    }
    /// Removes the entry [`DirectoryEdit::locate`] found. The directory must have stayed
    /// locked since (the place found is then still the entry's).
    fn remove_located(&mut self, located: Located) -> Result<()> {
        self.remove_entry(&located.entry.name).map(drop)
    }
    fn set_entry(&mut self, name: &[u8], ino: u32, file_type: FileType)
        -> Result<Option<DirEntry>>;
    fn set_parent(&mut self, parent_ino: u32) -> Result<()>;
    fn is_empty(&self) -> Result<bool>;
}

impl DirectoryEdit for DirectoryEditor<'_> {
    fn lookup(&self, name: &[u8]) -> Result<Option<DirEntry>> {
        DirectoryEditor::lookup(self, name)
    }
    fn add_entry(&mut self, name: &[u8], ino: u32, file_type: FileType) -> Result<()> {
        DirectoryEditor::add_entry(self, name, ino, file_type)
    }
    /// In an indexed directory one probe usually settles both the lookup and the insert.
    fn add_new(
        &mut self,
        name: &[u8],
        file_type: FileType,
        make: &mut dyn FnMut() -> Result<u32>,
    ) -> Result<u32> {
        check_name(name)?;
        if self.is_indexed() {
            let code = self.format.file_type_code(file_type);
            if let Some(ino) = self.add_new_indexed(name, code, make)? {
                return Ok(ino);
            }
        }
        add_new_after_lookup(self, name, file_type, make)
    }
    fn remove_entry(&mut self, name: &[u8]) -> Result<Option<DirEntry>> {
        DirectoryEditor::remove_entry(self, name)
    }
    fn locate(&self, name: &[u8]) -> Result<Option<Located>> {
        check_name(name)?;
        Ok(self.find(name)?.map(|found| {
            let (entry, place) = found.into_parts();
            Located {
                entry,
                at: Some(place),
            }
        }))
    }
    fn remove_located(&mut self, located: Located) -> Result<()> {
        match located.at {
            Some(place) => self.remove_at(place, &located.entry),
            None => DirectoryEditor::remove_entry(self, &located.entry.name).map(drop),
        }
    }
    fn set_entry(
        &mut self,
        name: &[u8],
        ino: u32,
        file_type: FileType,
    ) -> Result<Option<DirEntry>> {
        DirectoryEditor::set_entry(self, name, ino, file_type)
    }
    fn set_parent(&mut self, parent_ino: u32) -> Result<()> {
        DirectoryEditor::set_parent(self, parent_ino)
    }
    fn is_empty(&self) -> Result<bool> {
        DirectoryEditor::is_empty(self)
    }
}

/// An entry [`DirectoryEdit::locate`] found, with its place when the editor keeps one.
pub(crate) struct Located {
    pub entry: DirEntry,
    at: Option<EntryPlace>,
}

/// Where a live entry is: the leaf block that holds it and its record's offset there.
pub(crate) struct EntryPlace {
    physical: u64,
    offset: usize,
}

/// [`DirectoryEdit::add_new`] the long way: a lookup, then `make`, then an add.
fn add_new_after_lookup(
    dir: &mut (impl DirectoryEdit + ?Sized),
    name: &[u8],
    file_type: FileType,
    make: &mut dyn FnMut() -> Result<u32>,
) -> Result<u32> {
    if dir.lookup(name)?.is_some() {
        return Err(Error::Exists(String::from_utf8_lossy(name).into_owned()));
    }
    let ino = make()?;
    dir.add_entry(name, ino, file_type)?;
    Ok(ino)
}

/// A live entry found by name, with the leaf block that holds it.
pub(crate) struct Found {
    pub physical: u64,
    pub entry: LeafEntry,
}

impl Found {
    /// The entry as callers see it, and where it is.
    fn into_parts(self) -> (DirEntry, EntryPlace) {
        let place = EntryPlace {
            physical: self.physical,
            offset: self.entry.offset,
        };
        (self.entry.into_public(), place)
    }
}

/// Edits one directory. Holds no state between calls beyond its borrows.
pub struct DirectoryEditor<'a> {
    io: &'a dyn MetaIo,
    blocks: &'a mut dyn DirectoryBlocks,
    format: &'a DirFormat,
    owner: Owner,
}

impl<'a> DirectoryEditor<'a> {
    /// `owner` is the directory inode: its number goes in ".", and with its generation it
    /// seeds the checksums the engine computes at write-back.
    pub fn new(
        io: &'a dyn MetaIo,
        blocks: &'a mut dyn DirectoryBlocks,
        format: &'a DirFormat,
        owner: Owner,
    ) -> Self {
        DirectoryEditor {
            io,
            blocks,
            format,
            owner,
        }
    }

    /// Gives a new, blockless directory its first block: "." and ".." pointing at
    /// `parent_ino` (`ext4_init_new_dir`). Link counts are the caller's.
    pub fn init(&mut self, parent_ino: u32) -> Result<()> {
        if self.blocks.block_count() != 0 {
            return Err(Error::Invalid(format!(
                "directory {} already has blocks",
                self.owner.ino
            )));
        }
        let physical = self.blocks.append_block()?;
        let leaf = LeafBlock::with_dot_entries(self.format, self.owner.ino, parent_ino);
        self.write_leaf(physical, &leaf)
    }

    /// Adds `name` → `ino` (`ext4_add_entry`). A linear directory takes it in the first
    /// block with room, or in a new block; a full one-block directory becomes indexed when
    /// the filesystem has dir_index; an indexed one inserts through its index, splitting
    /// leaves and index nodes and growing a level as needed. A full index fails with
    /// [`Error::NoSpace`]`("directory index")`.
    pub fn add_entry(&mut self, name: &[u8], ino: u32, file_type: FileType) -> Result<()> {
        check_name(name)?;
        if ino == 0 {
            return Err(Error::Invalid("directory entry for inode 0".into()));
        }
        let entry = NewEntry {
            ino,
            file_type: self.format.file_type_code(file_type),
            name: name.to_vec(),
        };
        if self.is_indexed() {
            return self.add_indexed(entry);
        }
        let count = self.block_count()?;
        for logical in 0..count {
            let (physical, probe) = self.look_leaf(logical, |_, leaf| Ok(leaf.probe(name)))?;
            match probe {
                LeafProbe::Found => {
                    return Err(Error::Exists(String::from_utf8_lossy(name).into_owned()))
                }
                LeafProbe::Absent(Some(slot)) => {
                    return self.edit_leaf(physical, |leaf| {
                        leaf.insert_at(slot, &entry.name, entry.ino, entry.file_type)
                    })
                }
                LeafProbe::Absent(None) if count == 1 && self.format.dir_index => {
                    let (physical, block0) = self.read_leaf(logical)?;
                    return self.make_indexed(physical, block0, entry);
                }
                LeafProbe::Absent(None) => {}
            }
        }
        let physical = self.blocks.append_block()?;
        let mut leaf = LeafBlock::empty(self.format);
        if !leaf.insert(&entry.name, entry.ino, entry.file_type) {
            // An empty leaf holds at least 1012 bytes; the longest entry needs 264.
            return Err(Error::NoSpace(Shortage::Room("directory block".into())));
        }
        self.write_leaf(physical, &leaf)
    }

    /// Removes `name` (`ext4_delete_entry`) and returns what it pointed at; `None` if the
    /// directory has no such entry. Blocks are never freed.
    pub fn remove_entry(&mut self, name: &[u8]) -> Result<Option<DirEntry>> {
        check_name(name)?;
        let Some(found) = self.find(name)? else {
            return Ok(None);
        };
        let (entry, place) = found.into_parts();
        self.remove_at(place, &entry)?;
        Ok(Some(entry))
    }

    /// Removes `entry` at `place`, the leaf and offset it was found at. A place that no
    /// longer holds it (found before the leaf changed: a caller's locking bug) is an error
    /// and changes nothing; removing there anyway would leave the name behind, pointing at
    /// an inode its unlink frees, or take another name out.
    fn remove_at(&mut self, place: EntryPlace, entry: &DirEntry) -> Result<()> {
        let removed = self.edit_leaf(place.physical, |leaf| {
            leaf.remove(place.offset, entry.ino, &entry.name)
        })?;
        if !removed {
            return Err(Error::Internal(format!(
                "directory {}: block {}: no entry {:?} at offset {} to remove",
                self.owner.ino,
                place.physical,
                String::from_utf8_lossy(&entry.name),
                place.offset
            )));
        }
        Ok(())
    }

    /// Finds `name`. "." and ".." are the caller's to resolve: like every name no entry may
    /// have, they are [`Error::Invalid`] here (and a name over 255 bytes
    /// [`Error::NameTooLong`]).
    pub fn lookup(&self, name: &[u8]) -> Result<Option<DirEntry>> {
        check_name(name)?;
        Ok(self.find(name)?.map(|found| found.entry.into_public()))
    }

    /// Points the existing entry `name` at `ino` (a rename over an existing name) and
    /// returns what it pointed at before; `None`, changing nothing, if there is no entry.
    pub fn set_entry(
        &mut self,
        name: &[u8],
        ino: u32,
        file_type: FileType,
    ) -> Result<Option<DirEntry>> {
        check_name(name)?;
        let Some(found) = self.find(name)? else {
            return Ok(None);
        };
        let code = self.format.file_type_code(file_type);
        self.edit_leaf(found.physical, |leaf| {
            leaf.set_target(found.entry.offset, ino, code)
        })?;
        Ok(Some(found.entry.into_public()))
    }

    /// Rewrites ".." to point at `parent_ino` (a directory moved to another parent).
    pub fn set_parent(&mut self, parent_ino: u32) -> Result<()> {
        let kind = self.block_zero_kind();
        let physical = self.blocks.physical(0)?;
        let mut bytes = self.io.read(physical, kind, self.owner)?;
        check_dot_entries(&bytes, self.format, self.loc(physical))?;
        bytes[DOTDOT_OFFSET..DOTDOT_OFFSET + 4].copy_from_slice(&parent_ino.to_le_bytes());
        self.io.write(physical, kind, self.owner, &bytes)
    }

    /// Whether the directory holds nothing but "." and ".." (`ext4_empty_dir`).
    pub fn is_empty(&self) -> Result<bool> {
        let mut empty = true;
        self.visit_entries(|_| {
            empty = false;
            false
        })?;
        Ok(empty)
    }

    /// Every live entry but "." and "..", in block order (hash order when indexed).
    #[cfg(any(test, feature = "testing"))]
    pub fn entries(&self) -> Result<Vec<DirEntry>> {
        let mut out = Vec::new();
        self.visit_entries(|e| {
            out.push(e.into_public());
            true
        })?;
        Ok(out)
    }

    /// Calls `visit` on each live entry but "." and ".." until it returns false, in the
    /// order cheapest to read: block order, the leaves in index order when indexed (a
    /// listing that resumes needs [`Self::list_from`]'s order instead).
    pub(crate) fn visit_entries(&self, mut visit: impl FnMut(LeafEntry) -> bool) -> Result<()> {
        // The index's leaves, or the blocks counted from `i_size` one by one: never a list
        // sized by `i_size`, which a damaged inode may claim is 2^50 bytes (a block past
        // the mapped ones ends the walk as a hole).
        let indexed = if self.is_indexed() {
            Some(self.index_leaves()?)
        } else {
            None
        };
        let linear = match indexed {
            Some(_) => 0..0,
            None => 0..self.block_count()?,
        };
        for logical in indexed.into_iter().flatten().chain(linear) {
            let (_, go_on) = self.look_leaf(logical, |physical, leaf| {
                // Block 0 of a linear directory starts with "." and "..".
                let skip = if logical == 0 {
                    check_dot_entries(leaf.leaf().bytes(), self.format, self.loc(physical))?;
                    2
                } else {
                    0
                };
                Ok(leaf.leaf().entries().skip(skip).all(&mut visit))
            })?;
            if !go_on {
                break;
            }
        }
        Ok(())
    }

    /// The live entry `name`, through the index when there is one.
    fn find(&self, name: &[u8]) -> Result<Option<Found>> {
        if self.is_indexed() {
            return self.find_indexed(name);
        }
        for logical in 0..self.block_count()? {
            let (physical, entry) = self.look_leaf(logical, |_, leaf| Ok(leaf.find(name)))?;
            if let Some(entry) = entry {
                return Ok(Some(Found { physical, entry }));
            }
        }
        Ok(None)
    }

    // Block access shared with the index code (dir_index.rs).

    pub(crate) fn format(&self) -> &DirFormat {
        self.format
    }

    pub(crate) fn owner(&self) -> Owner {
        self.owner
    }

    pub(crate) fn io(&self) -> &dyn MetaIo {
        self.io
    }

    pub(crate) fn blocks(&mut self) -> &mut dyn DirectoryBlocks {
        self.blocks
    }

    pub(crate) fn physical(&self, logical: u64) -> Result<u64> {
        self.blocks.physical(logical)
    }

    /// The directory's indexed flag counts only on a dir_index filesystem (`is_dx`).
    pub(crate) fn is_indexed(&self) -> bool {
        self.format.dir_index && self.blocks.is_indexed()
    }

    /// Blocks in the directory; a directory without any is corrupt.
    pub(crate) fn block_count(&self) -> Result<u64> {
        match self.blocks.block_count() {
            0 => Err(FormatError::corrupt(
                Structure::Directory,
                Location::Inode(self.owner.ino),
                Problem::NoBlocks,
            )
            .into()),
            n => Ok(n),
        }
    }

    pub(crate) fn loc(&self, physical: u64) -> Location {
        Location::InodeBlock {
            inode: self.owner.ino,
            block: physical,
        }
    }

    /// Runs `look` on leaf `logical` where it lies in the cache, with the leaf's index where
    /// the store keeps one; returns the leaf's block number and what `look` made. `look`
    /// must not use the editor's `MetaIo`.
    pub(crate) fn look_leaf<T>(
        &self,
        logical: u64,
        look: impl FnOnce(u64, &LeafView<'_>) -> Result<T>,
    ) -> Result<(u64, T)> {
        let physical = self.physical(logical)?;
        let loc = self.loc(physical);
        let seen = look_with_derived(
            self.io,
            physical,
            BlockKind::DirectoryLeaf,
            self.owner,
            |bytes, kept| {
                let leaf = LeafView::new(LeafBlock::checked(bytes, self.format, loc)?, kept);
                look(physical, &leaf)
            },
        )?;
        Ok((physical, seen))
    }

    /// Changes leaf block `physical` where it lies with `edit`, which cannot fail (every
    /// check comes before: a look found the place, and the directory's lock has been held
    /// since) and keeps the leaf's index, where the store keeps one, true.
    pub(crate) fn edit_leaf<T>(
        &self,
        physical: u64,
        edit: impl FnOnce(&mut LeafEdit<'_>) -> T,
    ) -> Result<T> {
        let loc = self.loc(physical);
        edit_in_ranges(
            self.io,
            physical,
            BlockKind::DirectoryLeaf,
            self.owner,
            |bytes, kept, before| {
                let leaf = LeafBlock::checked(bytes, self.format, loc)?;
                Ok(edit(&mut LeafEdit::new(leaf, kept, Some(before))))
            },
        )
    }

    /// A copy of leaf `logical`, for a split or a conversion that rebuilds it.
    pub(crate) fn read_leaf(&self, logical: u64) -> Result<(u64, LeafBlock)> {
        let physical = self.physical(logical)?;
        let bytes = self
            .io
            .read(physical, BlockKind::DirectoryLeaf, self.owner)?;
        Ok((
            physical,
            LeafBlock::checked(bytes, self.format, self.loc(physical))?,
        ))
    }

    pub(crate) fn write_leaf(&self, physical: u64, leaf: &LeafBlock) -> Result<()> {
        self.io
            .write(physical, BlockKind::DirectoryLeaf, self.owner, leaf.bytes())
    }

    pub(crate) fn block_zero_kind(&self) -> BlockKind {
        if self.is_indexed() {
            BlockKind::HtreeNode
        } else {
            BlockKind::DirectoryLeaf
        }
    }
}

/// Where ".." starts: "." always takes the first 12 bytes (`ext4_init_new_dir`).
pub(crate) const DOTDOT_OFFSET: usize = 12;

/// Checks that a directory's block 0 (a leaf or an index root) starts with "." in 12 bytes
/// and then "..", as `make_indexed_dir` and `ext4_empty_dir` require.
pub(crate) fn check_dot_entries(bytes: &[u8], format: &DirFormat, loc: Location) -> Result<()> {
    let mut first_two = DirEntryIter::new(bytes, format.block_size, format.filetype, loc);
    let dot = first_two.next().transpose()?;
    let dotdot = first_two.next().transpose()?;
    match (dot, dotdot) {
        (Some(dot), Some(dotdot))
            if dot.name == b"." && dot.rec_len == DOTDOT_OFFSET && dotdot.name == b".." =>
        {
            Ok(())
        }
        _ => Err(
            FormatError::corrupt(Structure::DirectoryBlock, loc, Problem::MissingDotEntries).into(),
        ),
    }
}

#[cfg(test)]
mod tests;

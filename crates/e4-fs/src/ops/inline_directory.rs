//! An inline directory inode, locked, as the namespace operations edit it: the entry layout
//! of [`InlineDirectory`] applied to the inode in the running transaction. When a new name
//! fits neither region, even after the value grows to all the in-inode space there is, the
//! editor converts the directory to one block (`ext4_convert_inline_data_nolock`) and hands
//! the insertion to the block editor: editing in place where the inode suffices keeps the
//! kernel's layout (a new directory stays inline until it fills, like the kernel's), and the
//! one-way conversion reuses the block code for everything after it.

use e4_format::inode::{FileType, Inode, I_BLOCK_SIZE};

use crate::dir::editor::{DirectoryBlocks, DirectoryEdit, DirectoryEditor};
use crate::dir::entry::{check_name, DirEntry, DirFormat};
use crate::dir::inline::InlineDirectory;
use crate::dir::leaf::NewEntry;
use crate::error::{Error, Result, Shortage};
use crate::filesystem::Filesystem;
use crate::io::meta_io::{BlockKind, MetaIo, Owner};
use crate::map::file_mapping::give_empty_mapping;
use crate::ops::directory_blocks::InodeDirectoryBlocks;
use crate::txn::txn_io::TxnIo;
use crate::xattr::inline_data::InlineData;

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
        give_empty_mapping(self.fs.superblock(), self.inode);
        self.inode.set_size(0);
        let owner = Owner::of(self.inode);
        let mut blocks = InodeDirectoryBlocks {
            fs: self.fs,
            io: self.io,
            inode: self.inode,
            window: None,
            runs: None,
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
            runs: None,
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

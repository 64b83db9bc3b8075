//! Reading directories: listing (whole, or resumed from a cookie, as readdir does), name
//! lookup and the parent, through the same mechanisms the namespace operations edit with:
//! the directory editor (linear and htree) over a read-only [`ReadIo`], and the inline
//! layout for directories kept in their inode.

use e4_format::inode::{flags, Inode, I_BLOCK_SIZE};
use e4_format::{FormatError, Location, Problem, Structure};

use crate::buffer::read_io::ReadIo;
use crate::dir::editor::DirectoryEditor;
use crate::dir::entry::{check_name, require_directory, DirEntry};
use crate::dir::inline::InlineDirectory;
use crate::dir::leaf::LeafEntry;
use crate::error::Result;
use crate::filesystem::Filesystem;
use crate::io::meta_io::Owner;
use crate::ops::directory_blocks::ReadDirBlocks;

/// Where a listing of a directory resumes: 0 is the start, and each entry a listing gives
/// comes with the cookie that resumes after it (FUSE's readdir offset). Cookies stay valid
/// while the directory changes (`dir/listing.rs` says how); they are not ordered across
/// directories, and mean nothing in another directory.
pub type DirCookie = u64;

impl Filesystem {
    /// Lists directory `dir`, without "." and "..".
    pub fn read_dir(&self, dir: u32) -> Result<Vec<DirEntry>> {
        self.read_caller_inode(dir, |inode| self.read_dir_of(inode))
    }

    /// Lists directory `dir` from `cookie` on (0: from the start), without "." and "..":
    /// `visit` gets each entry and the cookie that resumes after it, until it returns
    /// false (the caller's buffer is full) or the directory ends. The directory is read
    /// under its inode's shared lock for the length of the call, so a listing in many
    /// calls sees every entry that stays in the directory throughout, once.
    pub fn read_dir_from(
        &self,
        dir: u32,
        cookie: DirCookie,
        mut visit: impl FnMut(DirEntry, DirCookie) -> bool,
    ) -> Result<()> {
        self.read_caller_inode(dir, |inode| self.list_dir(inode, Some(cookie), &mut visit))
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

    /// The whole listing, in the order cheapest to read (no hash is computed).
    pub(crate) fn read_dir_of(&self, dir: &Inode) -> Result<Vec<DirEntry>> {
        let mut out = Vec::new();
        self.list_dir(dir, None, &mut |entry, _| {
            out.push(entry);
            true
        })?;
        Ok(out)
    }

    /// Lists `dir` from `cookie` on, or whole and without cookies (`None`: `visit` gets 0
    /// for each). A live entry with a zero-length name fails the listing, as the kernel's
    /// readdir fails with EIO on one (`verify_dirent_name`): there is no name to give the
    /// caller, and skipping it would hide an inode the directory still references.
    fn list_dir(
        &self,
        dir: &Inode,
        cookie: Option<DirCookie>,
        visit: &mut dyn FnMut(DirEntry, DirCookie) -> bool,
    ) -> Result<()> {
        require_directory(dir)?;
        let mut nameless = false;
        let mut give = |entry: LeafEntry, next: u64| {
            if entry.name.is_empty() {
                nameless = true;
                return false;
            }
            visit(entry.into_public(), next)
        };
        if dir.has_flag(flags::INLINE_DATA) {
            let inline = self.inline_directory(dir)?;
            let from = cookie.unwrap_or(0);
            for (position, entry) in inline.entries() {
                if position as u64 >= from && !give(entry, position as u64 + 1) {
                    break;
                }
            }
        } else {
            self.with_directory(dir, |editor| match cookie {
                Some(cookie) => editor.list_from(cookie, &mut give),
                None => editor.visit_entries(|entry| give(entry, 0)),
            })?;
        }
        if nameless {
            return Err(FormatError::corrupt(
                Structure::DirectoryEntry,
                Location::Inode(dir.ino),
                Problem::EmptyName,
            )
            .into());
        }
        Ok(())
    }

    /// The parent of a directory (its ".." entry).
    pub(crate) fn parent_of(&self, dir: &Inode) -> Result<u32> {
        require_directory(dir)?;
        if dir.has_flag(flags::INLINE_DATA) {
            return Ok(self.inline_directory(dir)?.parent());
        }
        self.with_directory(dir, |editor| editor.parent())
    }

    /// Finds `name` in `dir`, through the hash index when the directory has one (reading
    /// one block per index level plus the leaf), linearly otherwise. A name no entry may
    /// hold (empty, too long, with '/' or NUL) is not found: a live entry with a
    /// zero-length name (corruption that e4 fsck reports as `PR_2_NULL_NAME`) must not be
    /// found by a lookup of "".
    pub(crate) fn lookup_in(&self, dir: &Inode, name: &[u8]) -> Result<Option<u32>> {
        require_directory(dir)?;
        if name == b"." {
            return Ok(Some(dir.ino));
        }
        if name == b".." {
            return self.parent_of(dir).map(Some);
        }
        if check_name(name).is_err() {
            return Ok(None);
        }
        let found = if dir.has_flag(flags::INLINE_DATA) {
            self.inline_directory(dir)?.lookup(name)
        } else {
            self.with_directory(dir, |editor| editor.lookup(name))?
        };
        Ok(found.map(|entry| entry.ino))
    }

    /// Runs `read` on the directory editor of block directory `dir`, reading through the
    /// cache.
    fn with_directory<T>(
        &self,
        dir: &Inode,
        read: impl FnOnce(&DirectoryEditor<'_>) -> Result<T>,
    ) -> Result<T> {
        let io = ReadIo::new(&self.store);
        let format = self.dir_format();
        let mut root = [0u8; I_BLOCK_SIZE];
        let mut blocks = ReadDirBlocks::new(dir, &mut root, &io, self.block_size());
        read(&DirectoryEditor::new(
            &io,
            &mut blocks,
            &format,
            Owner::of(dir),
        ))
    }

    /// The entries of inline directory `dir`, as the inode holds them.
    fn inline_directory(&self, dir: &Inode) -> Result<InlineDirectory> {
        let filetype = self.dir_format().filetype;
        InlineDirectory::parse(&self.inline_content(dir)?, filetype, dir.ino)
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
    use crate::map::run::Mapping;

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

//! Where an inode's extended attributes are stored, and how a change is laid out: the
//! in-inode area first, then one xattr block (`i_file_acl`), as `ext4_xattr_set_handle`
//! does; the block copied on write while other inodes share it (`h_refcount` > 1) and
//! released (decremented, or freed with its last reference) when the inode stops using it.
//!
//! The mechanism works through [`MetaIo`], so it is tested on an in-memory store. The
//! caller holds the inode's lock; a shared block's reference count is changed under the
//! block's own lock ([`crate::xattr::block_locks::XattrBlockLocks`]), because the other
//! inodes that share it are not locked.

use e4_format::inode::Inode;
use e4_format::xattr::{
    decode_xattr_block, encode_inode_xattrs_after, encode_xattr_block, fits_inode_xattrs,
    fits_xattr_block, parse_inode_xattrs, Xattr, XattrBlockHeader, XattrEntry, XattrValue,
};
use e4_format::{FormatError, Location, Problem, Structure};
use parking_lot::Mutex;

use crate::error::Shortage;
use crate::error::{Error, Result};
use crate::io::meta_io::Owner;
use crate::io::meta_io::{BlockKind, MetaIo};

/// An attribute's identity: its name index and the name stored after the prefix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct XattrKey<'a> {
    pub index: u8,
    pub name: &'a [u8],
}

impl XattrKey<'_> {
    fn matches(&self, entry: &XattrEntry) -> bool {
        entry.index == self.index && entry.name == self.name
    }
}

/// The xattr block an inode refers to, as read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct XattrBlock {
    pub nr: u64,
    /// `h_refcount`: inodes sharing the block.
    pub refcount: u32,
    pub entries: Vec<XattrEntry>,
}

/// An inode's attributes as stored: the in-inode ones in their order, and the block's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct InodeXattrs {
    pub in_inode: Vec<XattrEntry>,
    pub block: Option<XattrBlock>,
}

/// Where every attribute goes after a change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct XattrLayout {
    pub in_inode: Vec<XattrEntry>,
    pub block: Vec<XattrEntry>,
}

/// Converts a parsed attribute to the form the encoders take. Values stored in their own
/// inode (ea_inode) have reference counts of their own that e4 does not maintain, so an
/// inode holding one is not changed.
fn writable_entry(xattr: Xattr, ino: u32) -> Result<XattrEntry> {
    let name = xattr.stored_name().to_vec();
    match xattr.value {
        XattrValue::Inline(value) => Ok(XattrEntry {
            index: xattr.index,
            name,
            value,
        }),
        XattrValue::InInode { inode, .. } => Err(Error::NotSupported(format!(
            "changing the extended attributes of inode {ino}: one value is stored in inode \
             {inode} (ea_inode), which e4 does not write"
        ))),
    }
}

/// `inode`'s in-inode attributes in their stored order, in the form the encoders take.
pub(crate) fn in_inode_entries(inode: &Inode) -> Result<Vec<XattrEntry>> {
    parse_inode_xattrs(&inode.xattr_area, Location::Inode(inode.ino))?
        .into_iter()
        .map(|x| writable_entry(x, inode.ino))
        .collect()
}

/// Reads xattr block `nr`, which `inode` refers to, and decodes its header.
fn read_block_header(
    io: &dyn MetaIo,
    inode: &Inode,
    nr: u64,
) -> Result<(Vec<u8>, XattrBlockHeader)> {
    io.check_mapped(nr, 1, Owner::of(inode))?;
    let bytes = io.read(nr, BlockKind::XattrBlock, Owner::of(inode))?;
    let loc = Location::InodeBlock {
        inode: inode.ino,
        block: nr,
    };
    let header = XattrBlockHeader::decode_checked(&bytes, loc)?;
    check_referenced(&header, loc)?;
    Ok((bytes, header))
}

/// Refuses a block that has no references: nothing should point at it.
fn check_referenced(header: &XattrBlockHeader, loc: Location) -> Result<()> {
    if header.refcount == 0 {
        let problem = Problem::FieldOutOfRange {
            field: "h_refcount",
            value: 0,
        };
        return Err(FormatError::corrupt(Structure::XattrBlock, loc, problem).into());
    }
    Ok(())
}

impl InodeXattrs {
    /// Reads `inode`'s attributes: its in-inode area and its block, if any.
    pub fn load(io: &dyn MetaIo, inode: &Inode) -> Result<Self> {
        let in_inode = in_inode_entries(inode)?;
        let nr = inode.file_acl();
        let block = if nr == 0 {
            None
        } else {
            // Checked like a block of the file's mapping: an edit writes it in place.
            io.check_mapped(nr, 1, Owner::of(inode))?;
            let bytes = io.read(nr, BlockKind::XattrBlock, Owner::of(inode))?;
            let loc = Location::InodeBlock {
                inode: inode.ino,
                block: nr,
            };
            let (header, attrs) = decode_xattr_block(&bytes, loc)?;
            check_referenced(&header, loc)?;
            let entries = attrs
                .into_iter()
                .map(|x| writable_entry(x, inode.ino))
                .collect::<Result<_>>()?;
            Some(XattrBlock {
                nr,
                refcount: header.refcount,
                entries,
            })
        };
        Ok(InodeXattrs { in_inode, block })
    }

    /// The value of attribute `key`, wherever it is stored.
    pub fn value(&self, key: XattrKey<'_>) -> Option<&[u8]> {
        self.in_inode
            .iter()
            .chain(self.block.iter().flat_map(|b| &b.entries))
            .find(|e| key.matches(e))
            .map(|e| e.value.as_slice())
    }

    /// The layout after setting `key` to `value` (or removing it, with `None`): a value goes
    /// into the inode if everything there still fits (`area_len` bytes), else into the
    /// block, and leaves the place it was in. [`Error::NoSpace`] when it fits neither.
    pub fn change(
        &self,
        key: XattrKey<'_>,
        value: Option<&[u8]>,
        area_len: usize,
        block_size: usize,
    ) -> Result<XattrLayout> {
        let without = |entries: &[XattrEntry]| -> Vec<XattrEntry> {
            entries
                .iter()
                .filter(|e| !key.matches(e))
                .cloned()
                .collect()
        };
        let block_entries = self.block.as_ref().map_or(&[][..], |b| &b.entries);
        let Some(value) = value else {
            return Ok(XattrLayout {
                in_inode: without(&self.in_inode),
                block: without(block_entries),
            });
        };
        let entry = XattrEntry {
            index: key.index,
            name: key.name.to_vec(),
            value: value.to_vec(),
        };
        // In place if it is in the inode (in-inode order is kept), else at the end.
        let mut in_inode = self.in_inode.clone();
        match in_inode.iter_mut().find(|e| key.matches(e)) {
            Some(old) => *old = entry.clone(),
            None => in_inode.push(entry.clone()),
        }
        if fits_inode_xattrs(&in_inode, area_len) {
            return Ok(XattrLayout {
                in_inode,
                block: without(block_entries),
            });
        }
        let mut block = without(block_entries);
        block.push(entry);
        if !fits_xattr_block(&block, block_size) {
            return Err(Error::NoSpace(Shortage::Room(format!(
                "extended attribute of {} bytes: it fits neither the inode nor one xattr \
                 block (values in separate inodes, ea_inode, are not written by e4)",
                value.len()
            ))));
        }
        Ok(XattrLayout {
            in_inode: without(&self.in_inode),
            block,
        })
    }

    /// Writes `layout` for `inode`: the in-inode area, and the block (rewritten in place
    /// when the inode is its only user, copied to a new block near `goal` when it is
    /// shared, allocated when there was none, released when nothing is left in it).
    /// Sets `i_file_acl`; returns the change in blocks the inode owns (-1, 0 or 1), for
    /// `i_blocks`. The new block is allocated before anything changes, so running out of
    /// space leaves the inode as it was.
    pub fn store(
        &self,
        io: &dyn MetaIo,
        inode: &mut Inode,
        layout: &XattrLayout,
        goal: u64,
        block_lock: &Mutex<()>,
    ) -> Result<i64> {
        let area =
            encode_inode_xattrs_after(&inode.xattr_area, &layout.in_inode, inode.xattr_area.len())
                .ok_or_else(|| {
                    Error::Internal("in-inode attributes laid out past the inode".into())
                })?;
        let owner = Owner::of(inode);
        let old_entries = self.block.as_ref().map(|b| &b.entries);
        let mut blocks_delta = 0;
        if old_entries != Some(&layout.block) {
            match (&self.block, layout.block.is_empty()) {
                (Some(old), true) => {
                    release_xattr_block(io, inode, old.nr, block_lock)?;
                    set_file_acl(inode, 0);
                    blocks_delta = -1;
                }
                (Some(old), false) if old.refcount == 1 => {
                    io.write(
                        old.nr,
                        BlockKind::XattrBlock,
                        owner,
                        &self.encode(layout, io)?,
                    )?;
                }
                (old, false) => {
                    let bytes = self.encode(layout, io)?;
                    let nr = io.allocate(goal, owner)?;
                    io.write(nr, BlockKind::XattrBlock, owner, &bytes)?;
                    match old {
                        // Copy on write: the other inodes keep the old block.
                        Some(old) => release_xattr_block(io, inode, old.nr, block_lock)?,
                        None => blocks_delta = 1,
                    }
                    set_file_acl(inode, nr);
                }
                (None, true) => {}
            }
        }
        inode.xattr_area = area;
        Ok(blocks_delta)
    }

    fn encode(&self, layout: &XattrLayout, io: &dyn MetaIo) -> Result<Vec<u8>> {
        encode_xattr_block(&layout.block, 1, io.block_size())
            .ok_or_else(|| Error::Internal("xattr block laid out past its end".into()))
    }
}

/// Points `i_file_acl` at block `nr` (0: none).
pub(crate) fn set_file_acl(inode: &mut Inode, nr: u64) {
    inode.record.file_acl_lo = nr as u32;
    inode.record.file_acl_high = (nr >> 32) as u16;
}

/// Takes `inode`'s reference to xattr block `nr` away: decrements `h_refcount`, or frees the
/// block with its last reference (`ext4_xattr_release_block`). `block_lock` is the block's
/// lock: the reference count is read and written under it, so two inodes sharing the block
/// cannot both see the same count.
pub(crate) fn release_xattr_block(
    io: &dyn MetaIo,
    inode: &Inode,
    nr: u64,
    block_lock: &Mutex<()>,
) -> Result<()> {
    let _shared = block_lock.lock();
    let owner = Owner::of(inode);
    let (mut bytes, mut header) = read_block_header(io, inode, nr)?;
    if header.refcount == 1 {
        return io.free(nr, 1, owner);
    }
    header.refcount -= 1;
    let mut raw = [0u8; XattrBlockHeader::SIZE];
    header.encode(&mut raw);
    bytes[..XattrBlockHeader::SIZE].copy_from_slice(&raw);
    io.write(nr, BlockKind::XattrBlock, owner, &bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::meta_io::memory::MemoryMetaIo;
    use crate::io::meta_io::Owner;

    const BS: usize = 1024;

    fn entry(name: &str, len: usize) -> XattrEntry {
        XattrEntry {
            index: 1,
            name: name.as_bytes().to_vec(),
            value: vec![name.len() as u8; len],
        }
    }

    fn key(name: &str) -> XattrKey<'_> {
        XattrKey {
            index: 1,
            name: name.as_bytes(),
        }
    }

    fn inode_with_area(area_len: usize) -> Inode {
        let mut inode = Inode::new(12, 256, 0o100644, 1);
        inode.xattr_area = vec![0; area_len];
        inode
    }

    /// Sets `name` to `len` bytes on `inode` through the whole mechanism; returns the blocks
    /// delta.
    fn set(io: &MemoryMetaIo, inode: &mut Inode, name: &str, len: Option<usize>) -> Result<i64> {
        let stored = InodeXattrs::load(io, inode)?;
        let value = len.map(|len| vec![name.len() as u8; len]);
        let layout = stored.change(key(name), value.as_deref(), inode.xattr_area.len(), BS)?;
        stored.store(io, inode, &layout, 0, &Mutex::new(()))
    }

    fn header(io: &MemoryMetaIo, nr: u64) -> XattrBlockHeader {
        let blocks = io.blocks.lock().unwrap();
        XattrBlockHeader::decode_checked(&blocks[&nr].1, Location::Block(nr)).unwrap()
    }

    #[test]
    fn values_go_to_the_inode_first_then_the_block() {
        let io = MemoryMetaIo::new(BS, 100, 200);
        let mut inode = inode_with_area(96);
        assert_eq!(set(&io, &mut inode, "a", Some(40)).unwrap(), 0);
        assert_eq!(inode.file_acl(), 0);
        // 4 magic + 60 for "a" + 4 end: 28 bytes left, too few for 40 more.
        assert_eq!(set(&io, &mut inode, "b", Some(40)).unwrap(), 1);
        assert_eq!(inode.file_acl(), 100);
        let stored = InodeXattrs::load(&io, &inode).unwrap();
        assert_eq!(stored.in_inode, vec![entry("a", 40)]);
        assert_eq!(stored.block.unwrap().entries, vec![entry("b", 40)]);
        // Shrinking "b" moves it into the inode; the emptied block is freed.
        assert_eq!(set(&io, &mut inode, "b", Some(4)).unwrap(), -1);
        assert_eq!(inode.file_acl(), 0);
        assert_eq!(io.live_blocks(), 0);
        let stored = InodeXattrs::load(&io, &inode).unwrap();
        assert_eq!(stored.in_inode, vec![entry("a", 40), entry("b", 4)]);
        // Removing everything leaves an area with no magic.
        set(&io, &mut inode, "a", None).unwrap();
        set(&io, &mut inode, "b", None).unwrap();
        assert_eq!(inode.xattr_area, vec![0; 96]);
    }

    #[test]
    fn a_value_too_large_for_inode_and_block_is_no_space() {
        let io = MemoryMetaIo::new(BS, 100, 200);
        let mut inode = inode_with_area(0);
        let err = set(&io, &mut inode, "big", Some(BS)).unwrap_err();
        assert!(matches!(err, Error::NoSpace(_)), "{err}");
        assert_eq!(io.live_blocks(), 0);
        assert_eq!(inode.file_acl(), 0);
    }

    #[test]
    fn a_full_filesystem_leaves_the_inode_unchanged() {
        let io = MemoryMetaIo::new(BS, 100, 100);
        let mut inode = inode_with_area(96);
        set(&io, &mut inode, "a", Some(8)).unwrap();
        let before = inode.clone();
        let err = set(&io, &mut inode, "b", Some(200)).unwrap_err();
        assert!(matches!(err, Error::NoSpace(_)), "{err}");
        assert_eq!(inode, before);
    }

    #[test]
    fn a_shared_block_is_copied_on_write_and_released() {
        let io = MemoryMetaIo::new(BS, 100, 200);
        let mut first = inode_with_area(0);
        set(&io, &mut first, "shared", Some(10)).unwrap();
        // A second inode shares the block, as the kernel's mbcache would make it.
        let shared = first.file_acl();
        let mut bytes = io.blocks.lock().unwrap()[&shared].1.clone();
        bytes[4] = 2;
        io.write(shared, BlockKind::XattrBlock, Owner::of(&first), &bytes)
            .unwrap();
        let mut second = inode_with_area(0);
        second.ino = 13;
        set_file_acl(&mut second, shared);

        assert_eq!(set(&io, &mut second, "own", Some(5)).unwrap(), 0);
        assert_ne!(second.file_acl(), shared);
        assert_eq!(header(&io, shared).refcount, 1);
        assert_eq!(header(&io, second.file_acl()).refcount, 1);
        let copied = InodeXattrs::load(&io, &second).unwrap().block.unwrap();
        assert_eq!(copied.entries, vec![entry("own", 5), entry("shared", 10)]);
        let original = InodeXattrs::load(&io, &first).unwrap().block.unwrap();
        assert_eq!(original.entries, vec![entry("shared", 10)]);
        // The last reference frees it.
        assert_eq!(set(&io, &mut first, "shared", None).unwrap(), -1);
        assert_eq!(io.live_blocks(), 1);
    }

    #[test]
    fn removing_from_a_shared_block_copies_what_is_left() {
        let io = MemoryMetaIo::new(BS, 100, 200);
        let mut inode = inode_with_area(0);
        set(&io, &mut inode, "x", Some(10)).unwrap();
        set(&io, &mut inode, "y", Some(10)).unwrap();
        let shared = inode.file_acl();
        let mut bytes = io.blocks.lock().unwrap()[&shared].1.clone();
        bytes[4] = 3;
        io.write(shared, BlockKind::XattrBlock, Owner::of(&inode), &bytes)
            .unwrap();
        set(&io, &mut inode, "x", None).unwrap();
        assert_eq!(header(&io, shared).refcount, 2);
        let copy = InodeXattrs::load(&io, &inode).unwrap().block.unwrap();
        assert_eq!((copy.refcount, copy.entries), (1, vec![entry("y", 10)]));
        // Dropping the last attribute of a shared block only takes the reference away.
        let mut other = inode_with_area(0);
        other.ino = 14;
        set(&io, &mut other, "z", Some(10)).unwrap();
        let nr = other.file_acl();
        let mut bytes = io.blocks.lock().unwrap()[&nr].1.clone();
        bytes[4] = 2;
        io.write(nr, BlockKind::XattrBlock, Owner::of(&other), &bytes)
            .unwrap();
        assert_eq!(set(&io, &mut other, "z", None).unwrap(), -1);
        assert_eq!((other.file_acl(), header(&io, nr).refcount), (0, 1));
    }

    /// A store whose reads take a while, so that racing read-modify-writes overlap.
    struct SlowReads<'a>(&'a MemoryMetaIo);

    impl MetaIo for SlowReads<'_> {
        fn block_size(&self) -> usize {
            self.0.block_size()
        }
        fn visit(
            &self,
            nr: u64,
            kind: BlockKind,
            owner: Owner,
            look: &mut dyn FnMut(&[u8]) -> Result<()>,
        ) -> Result<()> {
            let bytes = self.0.read(nr, kind, owner)?;
            std::thread::sleep(std::time::Duration::from_millis(5));
            look(&bytes)
        }
        fn write(&self, nr: u64, kind: BlockKind, owner: Owner, bytes: &[u8]) -> Result<()> {
            self.0.write(nr, kind, owner, bytes)
        }
        fn allocate(&self, goal: u64, owner: Owner) -> Result<u64> {
            self.0.allocate(goal, owner)
        }
        fn free(&self, start: u64, len: u64, owner: Owner) -> Result<()> {
            self.0.free(start, len, owner)
        }
    }

    #[test]
    fn concurrent_releases_of_a_shared_block_lose_no_reference() {
        let io = MemoryMetaIo::new(BS, 100, 200);
        let mut inode = inode_with_area(0);
        set(&io, &mut inode, "x", Some(10)).unwrap();
        let nr = inode.file_acl();
        let mut bytes = io.blocks.lock().unwrap()[&nr].1.clone();
        bytes[4] = 9;
        io.write(nr, BlockKind::XattrBlock, Owner::of(&inode), &bytes)
            .unwrap();
        let slow = SlowReads(&io);
        let lock = Mutex::new(());
        std::thread::scope(|s| {
            for _ in 0..8 {
                s.spawn(|| release_xattr_block(&slow, &inode, nr, &lock).unwrap());
            }
        });
        assert_eq!(header(&io, nr).refcount, 1);
    }

    #[test]
    fn a_block_with_no_references_is_corrupt() {
        let io = MemoryMetaIo::new(BS, 100, 200);
        let mut inode = inode_with_area(0);
        set(&io, &mut inode, "x", Some(10)).unwrap();
        let nr = inode.file_acl();
        let mut bytes = io.blocks.lock().unwrap()[&nr].1.clone();
        bytes[4] = 0;
        io.write(nr, BlockKind::XattrBlock, Owner::of(&inode), &bytes)
            .unwrap();
        let err = InodeXattrs::load(&io, &inode).unwrap_err();
        assert!(
            matches!(
                err,
                Error::Format(FormatError::Corrupt {
                    structure: Structure::XattrBlock,
                    problem: Problem::FieldOutOfRange {
                        field: "h_refcount",
                        ..
                    },
                    ..
                })
            ),
            "{err}"
        );
    }
}

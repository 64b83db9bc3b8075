//! What the passes learn about each inode, in compact arrays sized from the superblock and
//! indexed by inode number: pass 1 writes each inode's slot from exactly one thread, pass 2
//! counts references with atomic increments from many, passes 3 to 5 read. Nothing is kept
//! per thread, so nothing is merged.
//!
//! Which inodes are in use, and which are directories, is also kept as two bitmaps laid out
//! as the on-disk inode bitmaps are (bit `ino - 1`): what runs over every inode (pass 4,
//! pass 5's bitmap and directory counts, the summary) then goes 64 inodes at a time and
//! skips the words of unused inodes, instead of reading a byte per inode. On an image with
//! few inodes in use among millions (the fragmented benchmark: 4 files, 2.6 million inodes)
//! those per-inode loops were a quarter of the check and ran at half speed on two threads.

use std::ops::Range;
use std::sync::atomic::{AtomicU16, AtomicU32, AtomicU8, Ordering};

use e4_format::dir_entry::file_type;
use e4_format::inode::FileType;

use crate::state::atomic_bitmap::AtomicBitmap;
use crate::state::lazy_slots::LazySlots;

/// What pass 1 decided an inode is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum InodeKind {
    /// Not in use (no links), never scanned, or past the inode count.
    Unused = 0,
    Regular,
    Directory,
    Symlink,
    CharDevice,
    BlockDevice,
    Fifo,
    Socket,
    /// In use, but its mode is not a file type (e2fsck's `inode_bad_map`).
    Bad,
    /// A reserved inode below `s_first_ino` (journal, resize, quota, ...).
    Reserved,
}

impl InodeKind {
    const ALL: [InodeKind; 10] = [
        InodeKind::Unused,
        InodeKind::Regular,
        InodeKind::Directory,
        InodeKind::Symlink,
        InodeKind::CharDevice,
        InodeKind::BlockDevice,
        InodeKind::Fifo,
        InodeKind::Socket,
        InodeKind::Bad,
        InodeKind::Reserved,
    ];

    /// The kind of an in-use inode with this file type.
    pub fn of(file_type: Option<FileType>) -> Self {
        match file_type {
            Some(FileType::Regular) => InodeKind::Regular,
            Some(FileType::Directory) => InodeKind::Directory,
            Some(FileType::Symlink) => InodeKind::Symlink,
            Some(FileType::CharDevice) => InodeKind::CharDevice,
            Some(FileType::BlockDevice) => InodeKind::BlockDevice,
            Some(FileType::Fifo) => InodeKind::Fifo,
            Some(FileType::Socket) => InodeKind::Socket,
            None => InodeKind::Bad,
        }
    }

    /// The directory entry file type that names this kind (`EXT2_FT_*`), if any. A bad
    /// inode left unrepaired should be named with type 0, as e2fsck's `check_filetype`
    /// expects of an inode in its `inode_bad_map`.
    pub fn dirent_file_type(self) -> Option<u8> {
        Some(match self {
            InodeKind::Bad => 0,
            InodeKind::Regular => file_type::REGULAR,
            InodeKind::Directory => file_type::DIRECTORY,
            InodeKind::Symlink => file_type::SYMLINK,
            InodeKind::CharDevice => file_type::CHAR_DEVICE,
            InodeKind::BlockDevice => file_type::BLOCK_DEVICE,
            InodeKind::Fifo => file_type::FIFO,
            InodeKind::Socket => file_type::SOCKET,
            InodeKind::Unused | InodeKind::Reserved => return None,
        })
    }

    /// Whether the inode is in use.
    pub fn in_use(self) -> bool {
        self != InodeKind::Unused
    }
}

/// Flag bit in the kind byte: the inode has no size and no blocks (pass 4 clears such an
/// unattached inode instead of reconnecting it).
const ZERO_LENGTH: u8 = 0x80;

/// Per-inode state for the whole filesystem.
#[derive(Debug)]
pub struct InodeStates {
    /// [`InodeKind`] plus the [`ZERO_LENGTH`] flag.
    kind: LazySlots<AtomicU8>,
    /// `i_links_count` as pass 1 read it.
    links: LazySlots<AtomicU16>,
    /// References found by pass 2 (directory entries, `.` and `..` included).
    refs: LazySlots<AtomicU32>,
    /// For directories: the inode their `..` entry names (0: none seen).
    dotdot: LazySlots<AtomicU32>,
    /// Bit `ino - 1`: the inode is in use (any kind but [`InodeKind::Unused`]).
    in_use: AtomicBitmap,
    /// Bit `ino - 1`: the inode is a directory.
    directories: AtomicBitmap,
}

impl InodeStates {
    /// State for inodes `1..=count`, all unused.
    pub fn new(count: u32) -> Self {
        let n = count as usize;
        InodeStates {
            kind: LazySlots::new(n),
            links: LazySlots::new(n),
            refs: LazySlots::new(n),
            dotdot: LazySlots::new(n),
            in_use: AtomicBitmap::new(u64::from(count)),
            directories: AtomicBitmap::new(u64::from(count)),
        }
    }

    fn slot(ino: u32) -> usize {
        (ino as usize).wrapping_sub(1)
    }

    /// Records what pass 1 found (from the one thread that scans `ino`).
    pub fn record(&self, ino: u32, kind: InodeKind, links: u16, zero_length: bool) {
        let i = Self::slot(ino);
        if let (Some(k), Some(l)) = (self.kind.get_or_alloc(i), self.links.get_or_alloc(i)) {
            let flag = if zero_length { ZERO_LENGTH } else { 0 };
            k.store(kind as u8 | flag, Ordering::Relaxed);
            l.store(links, Ordering::Relaxed);
            if kind.in_use() {
                self.in_use.set(i as u64);
            }
            if kind == InodeKind::Directory {
                self.directories.set(i as u64);
            }
        }
    }

    /// Calls `visit` with each inode in use among `inodes`, in order.
    pub fn for_each_in_use(&self, inodes: Range<u32>, mut visit: impl FnMut(u32)) {
        let slots =
            u64::from(inodes.start.saturating_sub(1))..u64::from(inodes.end.saturating_sub(1));
        self.in_use
            .for_each_set(slots, |slot| visit(slot as u32 + 1));
    }

    /// Inodes in use.
    pub fn count_in_use(&self) -> u64 {
        self.in_use.count_ones()
    }

    /// Whether inodes `ino..ino + 64` are in use, inode `ino` lowest (see
    /// [`AtomicBitmap::bits_at`]); inode 0 and those past the count read as unused.
    pub fn in_use_bits(&self, ino: u32) -> u64 {
        ino.checked_sub(1)
            .map_or(0, |slot| self.in_use.bits_at(u64::from(slot)))
    }

    /// Whether inodes `ino..ino + 64` are directories, laid out as [`Self::in_use_bits`].
    pub fn directory_bits(&self, ino: u32) -> u64 {
        ino.checked_sub(1)
            .map_or(0, |slot| self.directories.bits_at(u64::from(slot)))
    }

    /// The inode's kind (unused past the end).
    pub fn kind(&self, ino: u32) -> InodeKind {
        let raw = self
            .kind
            .get(Self::slot(ino))
            .map_or(0, |k| k.load(Ordering::Relaxed));
        InodeKind::ALL
            .get(usize::from(raw & !ZERO_LENGTH))
            .copied()
            .unwrap_or(InodeKind::Unused)
    }

    /// Whether the inode has neither size nor blocks.
    pub fn is_zero_length(&self, ino: u32) -> bool {
        self.kind
            .get(Self::slot(ino))
            .is_some_and(|k| k.load(Ordering::Relaxed) & ZERO_LENGTH != 0)
    }

    /// `i_links_count` as read in pass 1.
    pub fn links(&self, ino: u32) -> u16 {
        self.links
            .get(Self::slot(ino))
            .map_or(0, |l| l.load(Ordering::Relaxed))
    }

    /// Counts one more reference to `ino`.
    pub fn add_ref(&self, ino: u32) {
        if let Some(r) = self.refs.get_or_alloc(Self::slot(ino)) {
            r.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// References counted so far.
    pub fn refs(&self, ino: u32) -> u32 {
        self.refs
            .get(Self::slot(ino))
            .map_or(0, |r| r.load(Ordering::Relaxed))
    }

    /// Records directory `dir`'s `..` target.
    pub fn set_dotdot(&self, dir: u32, target: u32) {
        if let Some(d) = self.dotdot.get_or_alloc(Self::slot(dir)) {
            d.store(target, Ordering::Relaxed);
        }
    }

    /// Directory `dir`'s `..` target (0 if none was seen).
    pub fn dotdot(&self, dir: u32) -> u32 {
        self.dotdot
            .get(Self::slot(dir))
            .map_or(0, |d| d.load(Ordering::Relaxed))
    }

    /// Bytes of memory held.
    pub fn memory_bytes(&self) -> usize {
        self.kind.memory_bytes()
            + self.links.memory_bytes()
            + self.refs.memory_bytes()
            + self.dotdot.memory_bytes()
            + self.in_use.memory_bytes()
            + self.directories.memory_bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_and_read_back() {
        let s = InodeStates::new(20);
        s.record(12, InodeKind::Directory, 3, true);
        assert_eq!(s.kind(12), InodeKind::Directory);
        assert!(s.is_zero_length(12));
        assert_eq!(s.links(12), 3);
        assert_eq!(s.kind(13), InodeKind::Unused);
        // Out of range reads as unused and writes are ignored, never a panic.
        s.record(0, InodeKind::Regular, 1, false);
        s.add_ref(999);
        assert_eq!(s.kind(999), InodeKind::Unused);
        s.add_ref(12);
        s.add_ref(12);
        assert_eq!(s.refs(12), 2);
    }

    #[test]
    fn bitmaps_follow_the_kinds_recorded() {
        let s = InodeStates::new(200);
        s.record(2, InodeKind::Directory, 3, false);
        s.record(7, InodeKind::Reserved, 0, false);
        s.record(70, InodeKind::Regular, 1, false);
        s.record(130, InodeKind::Directory, 2, false);
        s.record(200, InodeKind::Symlink, 1, false);
        let mut seen = Vec::new();
        s.for_each_in_use(1..201, |ino| seen.push(ino));
        assert_eq!(seen, [2, 7, 70, 130, 200]);
        seen.clear();
        s.for_each_in_use(8..130, |ino| seen.push(ino));
        assert_eq!(seen, [70]);
        assert_eq!(s.count_in_use(), 5);
        assert_eq!(s.in_use_bits(1), 1 << 1 | 1 << 6);
        assert_eq!(s.in_use_bits(65), 1 << 5);
        assert_eq!(s.directory_bits(2), 1);
        assert_eq!(s.directory_bits(129), 1 << 1);
        assert_eq!(s.in_use_bits(0), 0);
        assert_eq!(s.in_use_bits(201), 0);
    }
}

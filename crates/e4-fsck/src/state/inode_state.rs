//! What the passes learn about each inode, in a byte per inode sized from the superblock
//! and indexed by inode number: pass 1 writes each inode's byte from exactly one thread,
//! pass 2 marks references with atomic ORs from many, passes 3 to 5 read. Nothing is kept
//! per thread, so nothing is merged.
//!
//! The byte holds the kind and three flags, and the counts that are 1 for nearly every
//! inode are flags too, as e2fsck's `icount` keeps them: "its links count is 1" (set by
//! pass 1) and "something references it" (the first reference's OR). Every directory's
//! counts are other than 1 (`.`, `..` and subdirectories): they are kept, with its `..`
//! target, in arrays by its place among the directories pass 1 found
//! ([`DirectoryCounts`]), which also say which inodes are directories. What else is not
//! 1 — a file with hard links — goes into [`Exceptions`], a sharded map. Before, four
//! arrays took 11 bytes an inode: 25 MB for the 2.2 million inodes of the fsck
//! benchmark's small-file image, where e2fsck needs 11 MiB in all.
//!
//! Which inodes are in use is also kept as a bitmap laid out as the on-disk inode bitmap
//! is (bit `ino - 1`): what runs over every inode (pass 4, pass 5's bitmap and directory
//! counts, the summary) then goes 64 inodes at a time and skips the words of unused
//! inodes, instead of reading a byte per inode. On an image with few inodes in use among
//! millions (the fragmented benchmark: 4 files, 2.6 million inodes) those per-inode loops
//! were a quarter of the check and ran at half speed on two threads.

use std::collections::HashMap;
use std::ops::Range;
use std::sync::atomic::{AtomicU32, AtomicU8, Ordering};
use std::sync::{Mutex, OnceLock};

use e4_format::dir_entry::file_type;
use e4_format::inode::FileType;

use e4_format::table::TableTooLarge;

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
/// Flag bit in the kind byte: `i_links_count` is 1 (any other count is in [`Exceptions`],
/// and 0 is neither).
const ONE_LINK: u8 = 0x40;
/// Flag bit in the kind byte: at least one reference was counted (the second and later
/// are counted in [`Exceptions`]).
const REFERENCED: u8 = 0x20;
/// Flag bit in the kind byte: the inode has an entry in [`Exceptions`] (so the passes that
/// read every inode's counts look in the map only for the few that have one).
const EXCEPTIONAL: u8 = 0x10;
/// The bits of the kind byte that hold the [`InodeKind`].
const KIND_BITS: u8 = 0x0f;

/// Shards of [`Exceptions`]: enough that pass 2's threads rarely meet on one lock.
const EXCEPTION_SHARDS: usize = 64;

/// What is not 1 about an inode's counts, and a directory's `..`.
#[derive(Debug, Default, Clone, Copy)]
struct Counts {
    /// `i_links_count` when it is neither 0 nor 1.
    links: u16,
    /// References counted after the first.
    more_refs: u32,
    /// For a directory: the inode its `..` entry names (0: none seen).
    dotdot: u32,
}

/// The inodes whose counts are not 1, in shards chosen by inode number.
#[derive(Debug)]
struct Exceptions {
    shards: Box<[Mutex<HashMap<u32, Counts>>]>,
}

impl Exceptions {
    fn new() -> Self {
        Exceptions {
            shards: (0..EXCEPTION_SHARDS)
                .map(|_| Mutex::new(HashMap::new()))
                .collect(),
        }
    }

    fn shard(&self, ino: u32) -> std::sync::MutexGuard<'_, HashMap<u32, Counts>> {
        // A poisoned shard means a worker panicked: its counts are still whole.
        self.shards[ino as usize % EXCEPTION_SHARDS]
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    fn update(&self, ino: u32, change: impl FnOnce(&mut Counts)) {
        change(self.shard(ino).entry(ino).or_default());
    }

    fn get(&self, ino: u32) -> Counts {
        self.shard(ino).get(&ino).copied().unwrap_or_default()
    }

    fn memory_bytes(&self) -> usize {
        let entry = size_of::<(u32, Counts)>() + 1;
        self.shards
            .iter()
            .map(|shard| shard.lock().map_or(0, |map| map.capacity() * entry))
            .sum()
    }
}

/// The counts of the directories pass 1 found, in arrays by their place in inode order:
/// 14 bytes a directory. Every directory has counts other than 1 (`.`, `..`, its
/// subdirectories) and a `..`, so in [`Exceptions`] each took an entry of a hash map
/// (about 36 bytes with the map's free slots): 1.1 MB of the 31,000-directory benchmark
/// image's check, where e2fsck's `dir_info` and icounts take 28 bytes a directory.
#[derive(Debug)]
struct DirectoryCounts {
    /// The directories' inode numbers, ascending: where a directory's counts are.
    inos: Box<[u32]>,
    /// `i_links_count` as read in pass 1.
    links: Box<[u16]>,
    /// References counted after the first.
    more_refs: Box<[AtomicU32]>,
    /// The inode the directory's `..` entry names (0: none seen).
    dotdot: Box<[AtomicU32]>,
}

impl DirectoryCounts {
    fn at(&self, ino: u32) -> Option<usize> {
        self.inos.binary_search(&ino).ok()
    }
}

/// Per-inode state for the whole filesystem.
#[derive(Debug)]
pub struct InodeStates {
    /// [`InodeKind`] plus the [`ZERO_LENGTH`], [`ONE_LINK`] and [`REFERENCED`] flags.
    kind: LazySlots<AtomicU8>,
    /// Links other than 0 and 1, references after the first (directory entries, `.` and
    /// `..` included), directories' `..`.
    exceptions: Exceptions,
    /// Links, references and `..` of the directories, and which inodes are directories,
    /// from the end of pass 1 ([`InodeStates::count_directories`]).
    directory_counts: OnceLock<DirectoryCounts>,
    /// Bit `ino - 1`: the inode is in use (any kind but [`InodeKind::Unused`]).
    in_use: AtomicBitmap,
}

impl InodeStates {
    /// State for inodes `1..=count`, all unused.
    pub fn new(count: u32) -> Result<Self, TableTooLarge> {
        let n = count as usize;
        Ok(InodeStates {
            kind: LazySlots::new(n, "the inodes' states")?,
            exceptions: Exceptions::new(),
            directory_counts: OnceLock::new(),
            in_use: AtomicBitmap::new(u64::from(count), "the inodes in use")?,
        })
    }

    fn slot(ino: u32) -> usize {
        (ino as usize).wrapping_sub(1)
    }

    /// Records what pass 1 found (from the one thread that scans `ino`, before pass 2
    /// counts any reference). A directory's links other than 1 are not kept here but
    /// handed over with the others' by [`Self::count_directories`].
    pub fn record(&self, ino: u32, kind: InodeKind, links: u16, zero_length: bool) {
        let i = Self::slot(ino);
        if let Some(k) = self.kind.get_or_alloc(i) {
            let zero = if zero_length { ZERO_LENGTH } else { 0 };
            let one = if links == 1 { ONE_LINK } else { 0 };
            let exceptional = if links > 1 && kind != InodeKind::Directory {
                self.exceptions.update(ino, |c| c.links = links);
                EXCEPTIONAL
            } else {
                0
            };
            k.store(kind as u8 | zero | one | exceptional, Ordering::Relaxed);
            if kind.in_use() {
                self.in_use.set(i as u64);
            }
        }
    }

    /// Takes the directories pass 1 found, as (inode, `i_links_count`) in ascending inode
    /// order: from now on their counts and `..` are kept in arrays by their place in
    /// that order. Called once, after pass 1 and before any reference is counted.
    pub fn count_directories(&self, dirs: impl Iterator<Item = (u32, u16)>) {
        let (inos, links): (Vec<u32>, Vec<u16>) = dirs.unzip();
        let zeros = || (0..inos.len()).map(|_| AtomicU32::new(0)).collect();
        let counts = DirectoryCounts {
            more_refs: zeros(),
            dotdot: zeros(),
            inos: inos.into(),
            links: links.into(),
        };
        // A second call would be a bug in the passes' order; the first list stays.
        let _ = self.directory_counts.set(counts);
    }

    /// Where `ino`'s counts are in [`DirectoryCounts`], if its kind byte `flags` says it
    /// is a directory and pass 1's list has it.
    fn directory(&self, flags: u8, ino: u32) -> Option<(&DirectoryCounts, usize)> {
        if flags & KIND_BITS != InodeKind::Directory as u8 {
            return None;
        }
        let counts = self.directory_counts.get()?;
        Some((counts, counts.at(ino)?))
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

    /// Whether inodes `ino..ino + 64` are directories, laid out as [`Self::in_use_bits`]
    /// (all zero before [`Self::count_directories`]). Read from the sorted list of
    /// directories rather than a bitmap of every inode: 275 KB less for 2.2 million
    /// inodes.
    pub fn directory_bits(&self, ino: u32) -> u64 {
        let Some(counts) = self.directory_counts.get() else {
            return 0;
        };
        let first = counts.inos.partition_point(|&d| d < ino);
        counts.inos[first..]
            .iter()
            .map_while(|&d| d.checked_sub(ino).filter(|&bit| bit < 64))
            .fold(0, |bits, bit| bits | 1 << bit)
    }

    /// The inode's kind (unused past the end).
    pub fn kind(&self, ino: u32) -> InodeKind {
        let raw = self.flags(ino);
        InodeKind::ALL
            .get(usize::from(raw & KIND_BITS))
            .copied()
            .unwrap_or(InodeKind::Unused)
    }

    /// Whether the inode has neither size nor blocks.
    pub fn is_zero_length(&self, ino: u32) -> bool {
        self.flags(ino) & ZERO_LENGTH != 0
    }

    /// `i_links_count` as read in pass 1.
    pub fn links(&self, ino: u32) -> u16 {
        let flags = self.flags(ino);
        if flags & ONE_LINK != 0 {
            1
        } else if let Some((dirs, at)) = self.directory(flags, ino) {
            dirs.links[at]
        } else {
            self.exceptional(flags, ino).links
        }
    }

    /// Counts one more reference to `ino`: the first is a flag, the others are counted in
    /// the exceptions.
    pub fn add_ref(&self, ino: u32) {
        if let Some(k) = self.kind.get_or_alloc(Self::slot(ino)) {
            let flags = k.fetch_or(REFERENCED, Ordering::Relaxed);
            if flags & REFERENCED == 0 {
                return;
            }
            if let Some((dirs, at)) = self.directory(flags, ino) {
                // Saturating, as the map's count: never wrapped back to few.
                let _ =
                    dirs.more_refs[at].fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                        Some(n.saturating_add(1))
                    });
            } else {
                self.exceptions
                    .update(ino, |c| c.more_refs = c.more_refs.saturating_add(1));
                k.fetch_or(EXCEPTIONAL, Ordering::Relaxed);
            }
        }
    }

    /// References counted so far.
    pub fn refs(&self, ino: u32) -> u32 {
        let flags = self.flags(ino);
        if flags & REFERENCED == 0 {
            0
        } else if let Some((dirs, at)) = self.directory(flags, ino) {
            1 + dirs.more_refs[at].load(Ordering::Relaxed)
        } else {
            1 + self.exceptional(flags, ino).more_refs
        }
    }

    /// Records directory `dir`'s `..` target.
    pub fn set_dotdot(&self, dir: u32, target: u32) {
        // Only for an inode the state covers: a damaged number adds no entry.
        if let Some(k) = self.kind.get_or_alloc(Self::slot(dir)) {
            if let Some((dirs, at)) = self.directory(k.load(Ordering::Relaxed), dir) {
                dirs.dotdot[at].store(target, Ordering::Relaxed);
            } else {
                self.exceptions.update(dir, |c| c.dotdot = target);
                k.fetch_or(EXCEPTIONAL, Ordering::Relaxed);
            }
        }
    }

    /// Directory `dir`'s `..` target (0 if none was seen).
    pub fn dotdot(&self, dir: u32) -> u32 {
        let flags = self.flags(dir);
        match self.directory(flags, dir) {
            Some((dirs, at)) => dirs.dotdot[at].load(Ordering::Relaxed),
            None => self.exceptional(flags, dir).dotdot,
        }
    }

    /// The map's entry for `ino` if its kind byte `flags` says it has one, else zeros.
    fn exceptional(&self, flags: u8, ino: u32) -> Counts {
        if flags & EXCEPTIONAL == 0 {
            Counts::default()
        } else {
            self.exceptions.get(ino)
        }
    }

    /// The kind byte of `ino` (0 past the end or never written).
    fn flags(&self, ino: u32) -> u8 {
        self.kind
            .get(Self::slot(ino))
            .map_or(0, |k| k.load(Ordering::Relaxed))
    }

    /// Bytes of memory held.
    pub fn memory_bytes(&self) -> usize {
        self.kind.memory_bytes()
            + self.exceptions.memory_bytes()
            + self.directory_counts.get().map_or(0, |d| d.inos.len() * 14)
            + self.in_use.memory_bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_and_read_back() {
        let s = InodeStates::new(20).unwrap();
        s.record(12, InodeKind::Directory, 3, true);
        s.count_directories([(12, 3)].into_iter());
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
        let s = InodeStates::new(200).unwrap();
        s.record(2, InodeKind::Directory, 3, false);
        s.record(7, InodeKind::Reserved, 0, false);
        s.record(70, InodeKind::Regular, 1, false);
        s.record(130, InodeKind::Directory, 2, false);
        s.record(200, InodeKind::Symlink, 1, false);
        s.count_directories([(2, 3), (130, 2)].into_iter());
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

    #[test]
    fn counts_of_one_are_flags_and_the_rest_exceptions() {
        let s = InodeStates::new(100).unwrap();
        s.record(11, InodeKind::Regular, 1, true);
        s.record(12, InodeKind::Directory, 5, false);
        s.record(13, InodeKind::Regular, 0, false);
        s.record(14, InodeKind::Regular, u16::MAX, false);
        s.count_directories([(12, 5)].into_iter());
        for _ in 0..3 {
            s.add_ref(12);
        }
        s.add_ref(11);
        s.set_dotdot(12, 2);
        // The flags share the byte with the kind and leave it whole.
        assert_eq!(s.kind(11), InodeKind::Regular);
        assert!(s.is_zero_length(11));
        assert_eq!((s.links(11), s.refs(11)), (1, 1));
        assert_eq!(s.kind(12), InodeKind::Directory);
        assert!(!s.is_zero_length(12));
        assert_eq!((s.links(12), s.refs(12), s.dotdot(12)), (5, 3, 2));
        assert_eq!((s.links(13), s.refs(13), s.dotdot(13)), (0, 0, 0));
        assert_eq!(s.links(14), u16::MAX);
        // An inode pass 1 never recorded can still be referenced (an entry naming a free
        // inode), and then reads as unused with its references.
        s.add_ref(50);
        s.add_ref(50);
        assert_eq!((s.kind(50), s.refs(50)), (InodeKind::Unused, 2));
        // Only the inodes whose counts are not 1 are in the map, directories aside.
        assert_eq!(
            s.exceptions
                .shards
                .iter()
                .map(|m| m.lock().unwrap().len())
                .sum::<usize>(),
            2
        );
        // Past the end: nothing recorded, nothing added.
        s.add_ref(101);
        s.set_dotdot(101, 2);
        assert_eq!((s.refs(101), s.dotdot(101)), (0, 0));
    }

    #[test]
    fn references_from_many_threads_are_all_counted() {
        use rayon::prelude::*;
        let s = InodeStates::new(1000).unwrap();
        (1..=1000).for_each(|ino| s.record(ino, InodeKind::Regular, 1, false));
        // Four rounds over every inode, in parallel: inode k is referenced in its first
        // k % 4 rounds.
        (0..4000u32).into_par_iter().for_each(|i| {
            let (round, ino) = (i / 1000, i % 1000 + 1);
            if round < ino % 4 {
                s.add_ref(ino);
            }
        });
        for ino in 1..=1000u32 {
            assert_eq!(s.refs(ino), ino % 4, "inode {ino}");
        }
    }
}

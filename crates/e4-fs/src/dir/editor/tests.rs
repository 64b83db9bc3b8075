//! Tests of directory editing on an in-memory store, each checked by the independent
//! structure checker in `dir_check.rs` and against a model of the contents.

use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};

use e4_format::dir_entry::{file_type as ft, TAIL_SIZE};
use e4_format::dir_hash::{dir_hash, HashVersion};
use e4_format::dir_htree::DxRoot;
use e4_format::inode::FileType;
use e4_format::{Location, Problem, Structure};
use proptest::prelude::*;

use super::*;
use crate::buffer::verifier::check_leaf_chain;
use crate::dir::check::{check_directory, Contents, Shape};
use crate::io::meta_io::memory::MemoryMetaIo;

const OWNER: Owner = Owner {
    ino: 2000,
    generation: 7,
};
const PARENT: u32 = 2;
const SEED: [u32; 4] = [0x1234_5678, 0x9abc_def0, 0x0fed_cba9, 0x8765_4321];

/// A directory's block list over a [`MemoryMetaIo`].
struct MemoryDirBlocks {
    io: Arc<MemoryMetaIo>,
    blocks: Vec<u64>,
    indexed: bool,
}

impl DirectoryBlocks for MemoryDirBlocks {
    fn block_count(&self) -> u64 {
        self.blocks.len() as u64
    }

    fn physical(&self, logical: u64) -> Result<u64> {
        self.blocks.get(logical as usize).copied().ok_or_else(|| {
            FormatError::corrupt(
                Structure::Directory,
                Location::Inode(OWNER.ino),
                Problem::Hole { logical },
            )
            .into()
        })
    }

    fn append_block(&mut self) -> Result<u64> {
        let physical = self.io.allocate(0, OWNER)?;
        self.blocks.push(physical);
        Ok(physical)
    }

    fn is_indexed(&self) -> bool {
        self.indexed
    }

    fn set_indexed(&mut self, on: bool) {
        self.indexed = on;
    }
}

struct Fixture {
    io: Arc<MemoryMetaIo>,
    dir: MemoryDirBlocks,
    format: DirFormat,
}

impl Fixture {
    /// A new directory, initialised.
    fn new(format: DirFormat) -> Self {
        Self::with_block_limit(format, u64::MAX)
    }

    /// A new directory on a store that has `limit - 100` blocks to give.
    fn with_block_limit(format: DirFormat, limit: u64) -> Self {
        let io = Arc::new(
            MemoryMetaIo::new(format.block_size, 100, limit).verifying_leaves({
                let (filetype, csum) = (format.filetype, format.metadata_csum);
                Box::new(move |bytes, loc| check_leaf_chain(bytes, filetype, csum, loc))
            }),
        );
        let dir = MemoryDirBlocks {
            io: io.clone(),
            blocks: Vec::new(),
            indexed: false,
        };
        let mut fixture = Fixture { io, dir, format };
        fixture.editor().init(PARENT).unwrap();
        fixture
    }

    fn editor(&mut self) -> DirectoryEditor<'_> {
        DirectoryEditor::new(&*self.io, &mut self.dir, &self.format, OWNER)
    }

    fn try_check(&self) -> std::result::Result<(Contents, Shape), String> {
        check_directory(
            &self.io,
            &self.dir.blocks,
            self.dir.indexed,
            &self.format,
            OWNER,
        )
    }

    fn check(&self) -> (Contents, Shape) {
        self.try_check().unwrap_or_else(|e| panic!("{e}"))
    }

    fn block(&self, logical: usize) -> Vec<u8> {
        let physical = self.dir.blocks[logical];
        self.io.blocks.lock().unwrap()[&physical].1.clone()
    }

    fn set_block(&self, logical: usize, bytes: Vec<u8>) {
        let physical = self.dir.blocks[logical];
        self.io.blocks.lock().unwrap().get_mut(&physical).unwrap().1 = bytes;
    }
}

fn format(block_size: usize, metadata_csum: bool) -> DirFormat {
    DirFormat {
        block_size,
        filetype: true,
        metadata_csum,
        dir_index: true,
        large_dir: false,
        def_hash_version: 1,
        unsigned_hash: false,
        hash_seed: SEED,
    }
}

/// Pads `base` with '-' (which no base uses) to `len` bytes, so padded names stay unique.
fn padded(base: String, len: usize) -> Vec<u8> {
    let mut name = base.into_bytes();
    while name.len() < len {
        name.push(b'-');
    }
    name
}

/// A name no other index gives, 1 to 255 bytes long: the first 36 are one character.
fn unique_name(i: usize) -> Vec<u8> {
    const DIGITS: &[u8] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ";
    let mut base = Vec::new();
    let mut n = i;
    loop {
        base.push(DIGITS[n % 36]);
        n /= 36;
        if n == 0 {
            break;
        }
    }
    let len = if i < 200 {
        base.len()
    } else {
        1 + (i * 7919) % 255
    };
    padded(String::from_utf8(base).unwrap(), len)
}

/// A long name, for filling index levels with few entries per leaf.
fn long_name(i: usize, len: usize) -> Vec<u8> {
    padded(format!("L{i:x}"), len)
}

/// Names that share their half-MD4 hash (under [`SEED`]) with at least one other, grouped:
/// found by hashing two million candidates and keeping the birthday collisions.
fn colliding_names() -> &'static [Vec<u8>] {
    static NAMES: OnceLock<Vec<Vec<u8>>> = OnceLock::new();
    NAMES.get_or_init(|| {
        let candidate = |i: u32| padded(format!("c{i:x}"), 8 + (i as usize * 7919) % 248);
        let mut hashed: Vec<(u32, u32)> = (0..1u32 << 21)
            .map(|i| {
                let hash = dir_hash(HashVersion::HalfMd4, &candidate(i), &SEED).major;
                (hash, i)
            })
            .collect();
        hashed.sort_unstable();
        hashed
            .chunk_by(|a, b| a.0 == b.0)
            .filter(|run| run.len() > 1)
            .flat_map(|run| run.iter().map(|&(_, i)| candidate(i)))
            .collect()
    })
}

/// The names a random edit sequence draws from: colliding groups first, then unique names.
fn name_pool() -> &'static [Vec<u8>] {
    static POOL: OnceLock<Vec<Vec<u8>>> = OnceLock::new();
    POOL.get_or_init(|| {
        let mut pool: Vec<Vec<u8>> = colliding_names().iter().take(800).cloned().collect();
        pool.extend((0..2200).map(unique_name));
        pool
    })
}

fn file_type_for(i: usize) -> FileType {
    [FileType::Regular, FileType::Directory, FileType::Symlink][i % 3]
}

#[test]
fn new_directory_holds_dot_entries_spanning_the_block() {
    for (bs, csum) in [(1024, true), (4096, false)] {
        let fixture = Fixture::new(format(bs, csum));
        let block = fixture.block(0);
        let end = if csum { bs - TAIL_SIZE } else { bs };
        assert_eq!(&block[0..4], &OWNER.ino.to_le_bytes());
        assert_eq!(u16::from_le_bytes([block[4], block[5]]), 12);
        assert_eq!(&block[6..9], &[1, ft::DIRECTORY, b'.']);
        assert_eq!(&block[12..16], &PARENT.to_le_bytes());
        assert_eq!(
            usize::from(u16::from_le_bytes([block[16], block[17]])),
            end - 12
        );
        assert_eq!(&block[18..22], &[2, ft::DIRECTORY, b'.', b'.']);
        let (contents, shape) = fixture.check();
        assert!(contents.is_empty());
        assert_eq!(shape.leaves, 1);
    }
}

#[test]
fn insert_cuts_the_first_record_with_room() {
    let mut fixture = Fixture::new(format(1024, true));
    let mut dir = fixture.editor();
    dir.add_entry(b"a", 20, FileType::Regular).unwrap();
    dir.add_entry(b"bb", 21, FileType::Regular).unwrap();
    let block = fixture.block(0);
    // ".." shrank to 12; "a" (12 bytes) followed, then "bb" took the rest.
    assert_eq!(u16::from_le_bytes([block[16], block[17]]), 12);
    assert_eq!(&block[24..28], &20u32.to_le_bytes());
    assert_eq!(u16::from_le_bytes([block[28], block[29]]), 12);
    assert_eq!(&block[36..40], &21u32.to_le_bytes());
    assert_eq!(
        usize::from(u16::from_le_bytes([block[40], block[41]])),
        1024 - TAIL_SIZE - 36
    );
}

#[test]
fn remove_merges_into_the_previous_record_or_frees_the_first() {
    let mut fixture = Fixture::new(DirFormat {
        dir_index: false,
        ..format(1024, false)
    });
    let mut dir = fixture.editor();
    dir.add_entry(b"a", 20, FileType::Regular).unwrap();
    dir.add_entry(b"bb", 21, FileType::Regular).unwrap();
    dir.add_entry(b"ccc", 22, FileType::Regular).unwrap();
    let removed = dir.remove_entry(b"bb").unwrap().unwrap();
    assert_eq!(
        (removed.ino, removed.file_type),
        (21, Some(FileType::Regular))
    );
    assert!(dir.remove_entry(b"bb").unwrap().is_none());
    let block = fixture.block(0);
    // "a" at 24 now spans the removed record; "bb"'s bytes are zero.
    assert_eq!(u16::from_le_bytes([block[28], block[29]]), 24);
    assert!(block[36..48].iter().all(|&b| b == 0));
    assert_eq!(&block[48..52], &22u32.to_le_bytes());
    // The next name that fits goes in the first record with room: the gap "bb" left.
    fixture
        .editor()
        .add_entry(b"dd", 23, FileType::Regular)
        .unwrap();
    let block = fixture.block(0);
    assert_eq!(u16::from_le_bytes([block[28], block[29]]), 12);
    assert_eq!(&block[36..40], &23u32.to_le_bytes());
    assert_eq!(u16::from_le_bytes([block[40], block[41]]), 12);

    // The first record of a block other than block 0 becomes free in place.
    let mut dir = fixture.editor();
    let mut i = 0;
    while dir.blocks.block_count() < 2 {
        dir.add_entry(&long_name(i, 200), 30, FileType::Regular)
            .unwrap();
        i += 1;
    }
    let first_in_block_1 = long_name(i - 1, 200);
    dir.remove_entry(&first_in_block_1).unwrap().unwrap();
    let block = fixture.block(1);
    assert_eq!(&block[0..4], &[0; 4]);
    assert_eq!(usize::from(u16::from_le_bytes([block[4], block[5]])), 1024);
    assert!(block[6..].iter().all(|&b| b == 0));
    fixture.check();
}

#[test]
fn without_dir_index_a_directory_grows_linearly() {
    let mut fixture = Fixture::new(DirFormat {
        dir_index: false,
        ..format(1024, true)
    });
    let mut dir = fixture.editor();
    for i in 0..100 {
        dir.add_entry(&long_name(i, 100), 30 + i as u32, FileType::Regular)
            .unwrap();
    }
    assert!(matches!(
        dir.add_entry(&long_name(5, 100), 1, FileType::Regular),
        Err(Error::Exists(_))
    ));
    assert!(!fixture.dir.indexed);
    let (contents, shape) = fixture.check();
    assert_eq!(contents.len(), 100);
    assert!(shape.leaves > 10);
}

/// In a 64 KiB block a record spanning the whole block has its rec_len encoded (0xffff,
/// `ext4_rec_len_to_disk`): a linear directory's second block starts as one, and the leaf
/// walks must decode it to find names after it and a slot in it.
#[test]
fn a_64k_block_takes_entries_after_an_encoded_rec_len() {
    let mut fixture = Fixture::new(DirFormat {
        dir_index: false,
        ..format(65536, false)
    });
    let names: Vec<Vec<u8>> = (0..1000).map(|i| long_name(i, 100)).collect();
    let mut dir = fixture.editor();
    for (i, name) in names.iter().enumerate() {
        dir.add_entry(name, 30 + i as u32, FileType::Regular)
            .unwrap();
    }
    for (i, name) in names.iter().enumerate() {
        assert_eq!(
            dir.lookup(name).unwrap().map(|e| e.ino),
            Some(30 + i as u32)
        );
    }
    assert!(matches!(
        dir.add_entry(&names[999], 1, FileType::Regular),
        Err(Error::Exists(_))
    ));
    let (contents, shape) = fixture.check();
    assert_eq!(contents.len(), 1000);
    assert_eq!(shape.leaves, 2);
}

#[test]
fn a_full_one_block_directory_becomes_indexed() {
    for (bs, csum) in [(1024, true), (1024, false), (4096, true)] {
        let mut fixture = Fixture::new(format(bs, csum));
        let mut added = Vec::new();
        let mut i = 0;
        while fixture.dir.blocks.len() == 1 {
            let name = long_name(i, 40);
            fixture
                .editor()
                .add_entry(&name, 100 + i as u32, FileType::Regular)
                .unwrap();
            added.push(name);
            i += 1;
        }
        assert!(fixture.dir.indexed);
        assert_eq!(fixture.dir.blocks.len(), 3);
        let again = fixture.editor().add_entry(&added[0], 1, FileType::Regular);
        assert!(matches!(again, Err(Error::Exists(_))), "{again:?}");
        let root = DxRoot::parse(&fixture.block(0), csum, 2, Location::Block(0)).unwrap();
        assert_eq!(root.node.entries.len(), 2);
        assert_eq!(
            (root.node.entries[0].block, root.node.entries[1].block),
            (1, 2)
        );
        assert_eq!(root.info.hash_version, 1);
        let (contents, shape) = fixture.check();
        assert_eq!(contents.len(), added.len());
        assert_eq!(
            shape,
            Shape {
                indirect_levels: 0,
                leaves: 2
            }
        );
        let dir = fixture.editor();
        for (i, name) in added.iter().enumerate() {
            assert_eq!(dir.lookup(name).unwrap().unwrap().ino, 100 + i as u32);
        }
    }
}

#[test]
fn parent_and_emptiness_in_linear_and_indexed_directories() {
    let mut fixture = Fixture::new(format(1024, true));
    assert!(fixture.editor().is_empty().unwrap());
    fixture.editor().set_parent(77).unwrap();
    assert_eq!(&fixture.block(0)[12..16], &77u32.to_le_bytes());
    fixture.editor().add_entry(b"x", 9, FileType::Fifo).unwrap();
    assert!(!fixture.editor().is_empty().unwrap());
    for i in 0..200 {
        fixture
            .editor()
            .add_entry(&long_name(i, 60), 500, FileType::Regular)
            .unwrap();
    }
    assert!(fixture.dir.indexed);
    fixture.editor().set_parent(78).unwrap();
    assert_eq!(&fixture.block(0)[12..16], &78u32.to_le_bytes());
    fixture.editor().remove_entry(b"x").unwrap().unwrap();
    assert!(!fixture.editor().is_empty().unwrap());
    for i in 0..200 {
        fixture
            .editor()
            .remove_entry(&long_name(i, 60))
            .unwrap()
            .unwrap();
    }
    assert!(fixture.editor().is_empty().unwrap());
    assert!(fixture.editor().entries().unwrap().is_empty());
    fixture.check();
}

#[test]
fn set_entry_retargets_in_place() {
    let mut fixture = Fixture::new(format(4096, true));
    let mut dir = fixture.editor();
    dir.add_entry(b"name", 40, FileType::Regular).unwrap();
    let old = dir
        .set_entry(b"name", 41, FileType::Directory)
        .unwrap()
        .unwrap();
    assert_eq!((old.ino, old.file_type), (40, Some(FileType::Regular)));
    let now = dir.lookup(b"name").unwrap().unwrap();
    assert_eq!((now.ino, now.file_type), (41, Some(FileType::Directory)));
    assert!(dir
        .set_entry(b"other", 1, FileType::Regular)
        .unwrap()
        .is_none());
}

#[test]
fn without_filetype_entries_record_no_type() {
    let mut fixture = Fixture::new(DirFormat {
        filetype: false,
        ..format(1024, false)
    });
    fixture
        .editor()
        .add_entry(b"f", 12, FileType::Symlink)
        .unwrap();
    let entry = fixture.editor().lookup(b"f").unwrap().unwrap();
    assert_eq!(entry.file_type, None);
    let (contents, _) = fixture.check();
    assert_eq!(contents[&b"f".to_vec()], (12, 0));
}

#[test]
fn bad_names_are_refused() {
    let mut fixture = Fixture::new(format(1024, true));
    let mut dir = fixture.editor();
    for name in [&b""[..], b".", b"..", b"a/b", b"a\0b"] {
        assert!(matches!(
            dir.add_entry(name, 5, FileType::Regular),
            Err(Error::Invalid(_))
        ));
    }
    assert!(matches!(
        dir.add_entry(&[b'n'; 256], 5, FileType::Regular),
        Err(Error::NameTooLong(_))
    ));
    // "." and ".." are not entries to look up, retarget or remove here.
    for name in [&b"."[..], b".."] {
        assert!(matches!(dir.lookup(name), Err(Error::Invalid(_))));
        assert!(matches!(dir.remove_entry(name), Err(Error::Invalid(_))));
        let retarget = dir.set_entry(name, 9, FileType::Directory);
        assert!(matches!(retarget, Err(Error::Invalid(_))));
    }
    dir.add_entry(&[b'n'; 255], 5, FileType::Regular).unwrap();
}

#[test]
fn corrupt_blocks_are_errors_not_panics() {
    let mut fixture = Fixture::new(format(1024, true));
    for i in 0..100 {
        fixture
            .editor()
            .add_entry(&long_name(i, 60), 500, FileType::Regular)
            .unwrap();
    }
    // A leaf with a zero rec_len.
    let good = fixture.block(1);
    let mut bad = good.clone();
    bad[4..6].fill(0);
    fixture.set_block(1, bad);
    let result = fixture.editor().entries();
    assert!(matches!(result, Err(Error::Format(_))), "{result:?}");
    fixture.set_block(1, good);
    // Index entries pointing past the directory's end.
    let good = fixture.block(0);
    let mut bad = good.clone();
    let count = usize::from(u16::from_le_bytes([good[0x22], good[0x23]]));
    for i in 0..count {
        let at = 0x20 + 8 * i + 4;
        bad[at..at + 4].copy_from_slice(&999u32.to_le_bytes());
    }
    fixture.set_block(0, bad);
    for name in [long_name(1, 60), long_name(500, 60)] {
        assert!(matches!(
            fixture.editor().lookup(&name),
            Err(Error::Format(_))
        ));
        let added = fixture.editor().add_entry(&name, 1, FileType::Regular);
        assert!(matches!(added, Err(Error::Format(_))));
    }
    // Two index entries naming the same leaf.
    let mut bad = good.clone();
    bad[0x20 + 8 + 4..0x20 + 8 + 8].copy_from_slice(&good[0x20 + 4..0x20 + 8]);
    fixture.set_block(0, bad);
    let listed = fixture.editor().entries();
    assert!(matches!(listed, Err(Error::Format(_))), "{listed:?}");
    fixture.set_block(0, good);
    fixture.check();
}

#[test]
fn every_hash_version_indexes_consistently() {
    for (version, unsigned) in [(0, false), (0, true), (1, true), (2, false), (2, true)] {
        let mut fixture = Fixture::new(DirFormat {
            def_hash_version: version,
            unsigned_hash: unsigned,
            ..format(1024, true)
        });
        let names: Vec<Vec<u8>> = (0..1500)
            .map(|i| {
                // Bytes above 0x7f make the signed and unsigned variants differ.
                let mut name = long_name(i, 20 + i % 100);
                name[1] = 0x80 + (i % 100) as u8;
                name
            })
            .collect();
        for (i, name) in names.iter().enumerate() {
            fixture
                .editor()
                .add_entry(name, 100 + i as u32, FileType::Regular)
                .unwrap();
        }
        let (contents, shape) = fixture.check();
        assert_eq!(contents.len(), names.len());
        assert_eq!(shape.indirect_levels, 1, "version {version}");
        let dir = fixture.editor();
        for (i, name) in names.iter().enumerate() {
            assert_eq!(dir.lookup(name).unwrap().unwrap().ino, 100 + i as u32);
        }
    }
}

#[test]
fn every_block_size_up_to_64k() {
    for bs in [1024, 2048, 4096, 65536] {
        for csum in [false, true] {
            let mut fixture = Fixture::new(format(bs, csum));
            let names: Vec<Vec<u8>> = (0..3000).map(unique_name).collect();
            for (i, name) in names.iter().enumerate() {
                fixture
                    .editor()
                    .add_entry(name, 100 + i as u32, FileType::Regular)
                    .unwrap();
            }
            for name in names.iter().step_by(3) {
                fixture.editor().remove_entry(name).unwrap().unwrap();
            }
            let (contents, shape) = fixture.check();
            assert_eq!(contents.len(), 2000, "{bs} {csum}");
            assert!(shape.leaves > 1, "{bs} {csum}");
            let dir = fixture.editor();
            for (i, name) in names.iter().enumerate() {
                let found = dir.lookup(name).unwrap().map(|e| e.ino);
                assert_eq!(found, (i % 3 != 0).then_some(100 + i as u32));
            }
        }
    }
}

#[test]
fn colliding_names_are_found_across_leaf_splits() {
    let names = colliding_names();
    assert!(names.len() > 1000, "only {} colliding names", names.len());
    let mut fixture = Fixture::new(format(1024, true));
    for (i, name) in names.iter().enumerate() {
        fixture
            .editor()
            .add_entry(name, 100 + i as u32, FileType::Regular)
            .unwrap();
    }
    let (contents, _) = fixture.check();
    assert_eq!(contents.len(), names.len());
    // Some split fell inside a run of one hash, so some key carries the collision bit.
    let continued = (1..fixture.dir.blocks.len()).any(|logical| {
        let (_, kind) = (
            0,
            fixture.io.blocks.lock().unwrap()[&fixture.dir.blocks[logical]].0,
        );
        kind == BlockKind::HtreeNode
            && fixture.block(logical)[8..]
                .chunks(8)
                .skip(1)
                .any(|e| e[0] & 1 == 1)
    }) || DxRoot::parse(&fixture.block(0), true, 2, Location::Block(0))
        .unwrap()
        .node
        .entries
        .iter()
        .any(|e| e.hash & 1 == 1);
    assert!(continued, "no split fell inside a run of equal hashes");
    for (i, name) in names.iter().enumerate() {
        assert_eq!(
            fixture.editor().lookup(name).unwrap().unwrap().ino,
            100 + i as u32
        );
    }
    // A create probes once: the leaf it lands on may not hold a name whose run of equal
    // hashes continues in the next leaf, so it must not take the name there.
    for name in names {
        let mut made = false;
        let added = fixture.editor().add_new(name, FileType::Regular, &mut || {
            made = true;
            Ok(7)
        });
        assert!(matches!(added, Err(Error::Exists(_))), "{added:?}");
        assert!(!made, "an inode was made for a name that exists");
    }
}

/// Adds long names until `limit` entries or an error; returns how many were added and the
/// error, checking the structure every `check_every` entries.
fn grow(fixture: &mut Fixture, limit: usize, len: usize) -> (usize, Option<Error>) {
    for i in 0..limit {
        if let Err(e) =
            fixture
                .editor()
                .add_entry(&long_name(i, len), 100 + i as u32, FileType::Regular)
        {
            return (i, Some(e));
        }
    }
    (limit, None)
}

#[test]
fn large_dir_grows_a_third_index_level() {
    let mut fixture = Fixture::new(DirFormat {
        large_dir: true,
        ..format(1024, true)
    });
    let (added, error) = grow(&mut fixture, 200_000, 200);
    assert!(error.is_none(), "{error:?}");
    let (contents, shape) = fixture.check();
    assert_eq!(contents.len(), added);
    assert_eq!(shape.indirect_levels, 2);
    let dir = fixture.editor();
    for i in (0..added).step_by(997) {
        assert_eq!(
            dir.lookup(&long_name(i, 200)).unwrap().unwrap().ino,
            100 + i as u32
        );
    }
}

#[test]
fn without_large_dir_the_index_fills_at_two_levels() {
    let mut fixture = Fixture::new(format(1024, true));
    let (added, error) = grow(&mut fixture, 200_000, 200);
    assert!(
        matches!(&error, Some(Error::NoSpace(Shortage::DirectoryIndex))),
        "{error:?} after {added}"
    );
    let (contents, shape) = fixture.check();
    assert_eq!(contents.len(), added);
    assert_eq!(shape.indirect_levels, 1);
    let dir = fixture.editor();
    assert!(dir.lookup(&long_name(added, 200)).unwrap().is_none());
    for i in (0..added).step_by(397) {
        assert!(dir.lookup(&long_name(i, 200)).unwrap().is_some());
    }
}

#[test]
fn four_kib_blocks_grow_a_second_level() {
    let mut fixture = Fixture::new(format(4096, true));
    let (added, error) = grow(&mut fixture, 12_000, 250);
    assert!(error.is_none(), "{error:?}");
    let (contents, shape) = fixture.check();
    assert_eq!(contents.len(), added);
    assert_eq!(shape.indirect_levels, 1);
}

#[test]
fn running_out_of_blocks_leaves_a_valid_directory() {
    for limit in 101..140 {
        let mut fixture = Fixture::with_block_limit(format(1024, true), limit);
        let (added, error) = grow(&mut fixture, 10_000, 120);
        assert!(
            matches!(&error, Some(Error::NoSpace(Shortage::Blocks))),
            "{error:?}"
        );
        let (contents, _) = fixture.check();
        assert_eq!(contents.len(), added);
        // Every block the store gave is one of the directory's.
        assert_eq!(fixture.io.live_blocks(), fixture.dir.blocks.len());
    }
}

#[derive(Debug, Clone)]
enum Edit {
    Add(usize),
    Remove(usize),
    Lookup(usize),
    Retarget(usize),
}

fn edit() -> impl Strategy<Value = Edit> {
    let pool = name_pool().len();
    prop_oneof![
        7 => (0..pool).prop_map(Edit::Add),
        2 => (0..pool).prop_map(Edit::Remove),
        1 => (0..pool).prop_map(Edit::Lookup),
        1 => (0..pool).prop_map(Edit::Retarget),
    ]
}

/// Applies `edits` to a directory and to a model, checking both agree, and the structure,
/// after every step.
fn run_edits(format: DirFormat, edits: &[Edit]) -> std::result::Result<(), TestCaseError> {
    let pool = name_pool();
    let mut fixture = Fixture::new(format);
    let mut model: BTreeMap<Vec<u8>, (u32, u8)> = BTreeMap::new();
    for (step, edit) in edits.iter().enumerate() {
        match *edit {
            Edit::Add(i) => {
                let name = &pool[i];
                let t = file_type_for(i + step);
                let ino = 100 + step as u32;
                if model.contains_key(name) {
                    // A create's path (`add_new`) must find the name wherever it lies:
                    // before or after the leaf's first slot with room, or in the next leaf
                    // of a run of colliding hashes.
                    let mut make = || -> Result<u32> { panic!("made an inode for a name taken") };
                    let added = fixture.editor().add_new(name, t, &mut make);
                    prop_assert!(
                        matches!(added, Err(Error::Exists(_))),
                        "adding {:?} again at step {}: {:?}",
                        String::from_utf8_lossy(name),
                        step,
                        added
                    );
                } else {
                    // Half through the create's path, half through `add_entry` (link, rename).
                    if step % 2 == 0 {
                        let made = fixture.editor().add_new(name, t, &mut || Ok(ino)).unwrap();
                        prop_assert_eq!(made, ino);
                    } else {
                        fixture.editor().add_entry(name, ino, t).unwrap();
                    }
                    model.insert(name.clone(), (ino, fixture.format.file_type_code(t)));
                }
            }
            Edit::Remove(i) => {
                let removed = fixture.editor().remove_entry(&pool[i]).unwrap();
                let expected = model.remove(&pool[i]);
                prop_assert_eq!(removed.map(|e| e.ino), expected.map(|(ino, _)| ino));
            }
            Edit::Lookup(i) => {
                let found = fixture.editor().lookup(&pool[i]).unwrap();
                prop_assert_eq!(found.map(|e| e.ino), model.get(&pool[i]).map(|e| e.0));
            }
            Edit::Retarget(i) => {
                let t = file_type_for(step);
                let ino = 100 + step as u32;
                let old = fixture.editor().set_entry(&pool[i], ino, t).unwrap();
                let code = fixture.format.file_type_code(t);
                let expected = model
                    .get_mut(&pool[i])
                    .map(|e| std::mem::replace(e, (ino, code)));
                prop_assert_eq!(old.map(|e| e.ino), expected.map(|e| e.0));
            }
        }
        let (contents, _) = fixture.try_check().map_err(TestCaseError::fail)?;
        prop_assert!(
            contents == model,
            "contents differ from the model at step {}",
            step
        );
    }
    let listed: Vec<Vec<u8>> = fixture
        .editor()
        .entries()
        .unwrap()
        .into_iter()
        .map(|e| e.name)
        .collect();
    prop_assert_eq!(listed.len(), model.len());
    Ok(())
}

proptest! {
    // At 1 KiB, a few thousand edits with long names split leaves, add an index level and
    // split index nodes; 4 KiB blocks take more entries than a check per step allows.
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn random_edits_keep_a_valid_directory_1k(
        csum in any::<bool>(),
        filetype in any::<bool>(),
        edits in prop::collection::vec(edit(), 1..3000),
    ) {
        run_edits(DirFormat { filetype, ..format(1024, csum) }, &edits)?;
    }

    #[test]
    fn random_edits_keep_a_valid_directory_4k(
        csum in any::<bool>(),
        edits in prop::collection::vec(edit(), 1..3000),
    ) {
        run_edits(format(4096, csum), &edits)?;
    }
}

//! Directories built by e4's directory editor inside real images, judged by `e2fsck -fn`
//! (whose pass 2 checks every entry chain, htree limit, count, hash range, depth and
//! checksum), read back through e4's own reader, and, where loop mounts work, listed and
//! looked up by the kernel.
//!
//! debugfs makes the directory and gives it exactly as many blocks as the editor will use
//! (learnt from a dry run on a scratch store: the editor is deterministic); the editor
//! writes those blocks, sealed as the engine will seal them; debugfs then sets the size,
//! the index flag and the link counts of the files the entries name.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::{File, OpenOptions as FileOptions};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::Path;
use std::sync::Mutex;

use e4_format::checksum::inode_csum_seed;
use e4_format::dir_entry::DirLeafBlock;
use e4_format::dir_hash::{dir_hash, HashVersion};
use e4_format::dir_htree::{DxNode, DxRoot};
use e4_format::inode::FileType;
use e4_format::{Location, MetadataBlock};
use e4_fs::testing::{BlockKind, MetaIo, Owner};
use e4_fs::testing::{DirFormat, DirectoryBlocks, DirectoryEditor};
use e4_fs::{Error, Filesystem, OpenOptions, Result, Shortage};
use e4_testkit::{debugfs_script, e2fsck_clean, make_empty_image, KernelMount};

/// Blocks read from an image (or zeros, for a dry run) and written to memory.
struct ImageBlocks {
    block_size: usize,
    image: Option<File>,
    written: Mutex<BTreeMap<u64, (BlockKind, Vec<u8>)>>,
}

impl MetaIo for ImageBlocks {
    fn block_size(&self) -> usize {
        self.block_size
    }

    fn visit(
        &self,
        nr: u64,
        _kind: BlockKind,
        _owner: Owner,
        look: &mut dyn FnMut(&[u8]) -> Result<()>,
    ) -> Result<()> {
        if let Some((_, bytes)) = self.written.lock().unwrap().get(&nr) {
            return look(bytes);
        }
        let mut bytes = vec![0; self.block_size];
        if let Some(image) = &self.image {
            image
                .read_exact_at(&mut bytes, nr * self.block_size as u64)
                .unwrap();
        }
        look(&bytes)
    }

    fn write(&self, nr: u64, kind: BlockKind, _owner: Owner, bytes: &[u8]) -> Result<()> {
        self.written
            .lock()
            .unwrap()
            .insert(nr, (kind, bytes.to_vec()));
        Ok(())
    }

    fn allocate(&self, _goal: u64, _owner: Owner) -> Result<u64> {
        unreachable!("directory blocks come from DirectoryBlocks::append_block")
    }

    fn free(&self, _start: u64, _len: u64, _owner: Owner) -> Result<()> {
        unreachable!("directories never free blocks")
    }
}

/// A directory whose blocks come, in order, from a list made beforehand.
struct PreparedBlocks {
    pool: Vec<u64>,
    used: usize,
    indexed: bool,
}

impl DirectoryBlocks for PreparedBlocks {
    fn block_count(&self) -> u64 {
        self.used as u64
    }

    fn physical(&self, logical: u64) -> Result<u64> {
        assert!(logical < self.used as u64);
        Ok(self.pool[logical as usize])
    }

    fn append_block(&mut self) -> Result<u64> {
        let physical = *self
            .pool
            .get(self.used)
            .ok_or(Error::NoSpace(Shortage::Blocks))?;
        self.used += 1;
        Ok(physical)
    }

    fn is_indexed(&self) -> bool {
        self.indexed
    }

    fn set_indexed(&mut self, on: bool) {
        self.indexed = on;
    }
}

/// What the test does to the directory: add the names, then remove every
/// `remove_every`-th.
struct Workload {
    names: Names,
    remove_every: usize,
    /// The root's `indirect_levels` the directory must reach; `None`: it stays linear.
    index_levels: Option<u8>,
    /// Whether the filesystem hashes names as unsigned bytes.
    unsigned_hash: bool,
}

/// Which names to add.
enum Names {
    /// `count` distinct names of `len` bytes.
    Padded { count: usize, len: usize },
    /// Names sharing their hash with another, under the image's hash seed: found among two
    /// million candidates by their birthday collisions.
    Colliding,
}

impl Names {
    fn make(&self, format: &DirFormat) -> Vec<Vec<u8>> {
        match *self {
            Names::Padded { count, len } => (0..count).map(|i| name(i, len)).collect(),
            Names::Colliding => {
                let version =
                    HashVersion::from_disk(format.def_hash_version, format.unsigned_hash).unwrap();
                let candidate = |i: usize| name(i, 8 + (i * 7919) % 248);
                let mut hashed: Vec<(u32, usize)> = (0..1 << 21)
                    .map(|i| (dir_hash(version, &candidate(i), &format.hash_seed).major, i))
                    .collect();
                hashed.sort_unstable();
                hashed
                    .chunk_by(|a, b| a.0 == b.0)
                    .filter(|run| run.len() > 1)
                    .flat_map(|run| run.iter().map(|&(_, i)| candidate(i)))
                    .collect()
            }
        }
    }
}

/// Links per target file, below the 65000 cap.
const LINKS_PER_FILE: usize = 60_000;

/// Entry `i`, `len` bytes long; from the third byte on, bytes above 0x7f, where the signed
/// and unsigned hash variants differ.
fn name(i: usize, len: usize) -> Vec<u8> {
    let mut name = format!("é-{i:x}.").into_bytes();
    name.resize(len.max(name.len()), 0xE9);
    name
}

/// Adds `names`, then removes every `remove_every`-th; returns the indexes of those left.
fn run(
    io: &ImageBlocks,
    blocks: &mut PreparedBlocks,
    format: &DirFormat,
    owner: Owner,
    targets: &[u32],
    names: &[Vec<u8>],
    remove_every: usize,
) -> Vec<usize> {
    let mut dir = DirectoryEditor::new(io, blocks, format, owner);
    dir.init(2).unwrap();
    for (i, name) in names.iter().enumerate() {
        let target = targets[i / LINKS_PER_FILE];
        dir.add_entry(name, target, FileType::Regular).unwrap();
    }
    let mut left = Vec::new();
    for (i, name) in names.iter().enumerate() {
        if i % remove_every == 0 {
            assert!(dir.remove_entry(name).unwrap().is_some());
        } else {
            left.push(i);
        }
    }
    left
}

/// The physical blocks of directory `d` in logical order, from the leaves of `ex d`
/// ("level/depth  entry/entries  first - last  physical - physical_last  length").
fn directory_blocks(image: &Path) -> Vec<u64> {
    let extents = debugfs_script(image, "ex d\n");
    let mut blocks = Vec::new();
    for line in extents.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        let is_leaf = words.len() >= 11
            && words[0]
                .strip_suffix('/')
                .is_some_and(|level| level == words[1]);
        if !is_leaf {
            continue;
        }
        let number = |i: usize| words[i].parse::<u64>().unwrap();
        let (first, last, physical) = (number(4), number(6), number(7));
        assert_eq!(first, blocks.len() as u64, "{extents}");
        blocks.extend((0..=last - first).map(|i| physical + i));
    }
    blocks
}

fn build_and_check(mke2fs_args: &[&str], size_mib: u64, work: Workload) {
    let img = make_empty_image(mke2fs_args, size_mib);
    if work.unsigned_hash {
        // s_flags: EXT2_FLAGS_UNSIGNED_HASH instead of mke2fs's SIGNED_HASH.
        debugfs_script(&img.path, "ssv flags 2\n");
    }
    let sb = Filesystem::open(&img.path, OpenOptions::default())
        .unwrap()
        .superblock()
        .clone();
    let format = DirFormat::from_superblock(&sb);
    let names = work.names.make(&format);
    let files = names.len().div_ceil(LINKS_PER_FILE);
    let mut script = String::from("mkdir d\n");
    for f in 0..files {
        script += &format!("write /dev/null f{f}\n");
    }
    debugfs_script(&img.path, &script);

    let fs = Filesystem::open(&img.path, OpenOptions::default()).unwrap();
    let ino = fs.resolve("/d", true).unwrap();
    let owner = Owner {
        ino,
        generation: fs.read_inode(ino).unwrap().record.generation,
    };
    let targets: Vec<u32> = (0..files)
        .map(|f| fs.resolve(&format!("/f{f}"), true).unwrap())
        .collect();
    drop(fs);

    // Dry run: how many blocks will the directory need?
    let scratch = ImageBlocks {
        block_size: format.block_size,
        image: None,
        written: Mutex::default(),
    };
    let mut dry = PreparedBlocks {
        pool: (1_000_000..).take(1 << 20).collect(),
        used: 0,
        indexed: false,
    };
    let remove_every = work.remove_every;
    run(
        &scratch,
        &mut dry,
        &format,
        owner,
        &targets,
        &names,
        remove_every,
    );
    let needed = dry.used;

    debugfs_script(&img.path, &"expand_dir d\n".repeat(needed - 1));
    let pool = directory_blocks(&img.path);
    assert_eq!(pool.len(), needed);

    let io = ImageBlocks {
        block_size: format.block_size,
        image: Some(File::open(&img.path).unwrap()),
        written: Mutex::default(),
    };
    let mut blocks = PreparedBlocks {
        pool,
        used: 0,
        indexed: false,
    };
    let left = run(
        &io,
        &mut blocks,
        &format,
        owner,
        &targets,
        &names,
        remove_every,
    );
    assert_eq!(blocks.used, needed);
    let levels = blocks.indexed.then(|| {
        let root = &io.written.lock().unwrap()[&blocks.pool[0]].1;
        DxRoot::parse(root, format.metadata_csum, 3, Location::Block(0))
            .unwrap()
            .info
            .indirect_levels
    });
    assert_eq!(levels, work.index_levels);

    // Seal and write back, as the engine does at commit.
    let seed = sb
        .has_metadata_csum()
        .then(|| inode_csum_seed(sb.csum_seed(), owner.ino, owner.generation));
    let image = FileOptions::new().write(true).open(&img.path).unwrap();
    for (nr, (kind, mut bytes)) in io.written.into_inner().unwrap() {
        if let Some(seed) = seed {
            match kind {
                BlockKind::DirectoryLeaf => DirLeafBlock::seal(&mut bytes, seed),
                BlockKind::HtreeNode => DxNode::seal(&mut bytes, seed),
                other => panic!("directory block written as {other:?}"),
            }
        }
        image
            .write_all_at(&bytes, nr * format.block_size as u64)
            .unwrap();
    }
    drop(image);

    let flags = 0x8_0000 | if blocks.indexed { 0x1000 } else { 0 };
    let mut script = format!(
        "sif d size {}\nsif d flags {flags:#x}\n",
        needed * format.block_size
    );
    for f in 0..files {
        // Each file is also named in the root directory.
        let links = 1 + left.iter().filter(|&&i| i / LINKS_PER_FILE == f).count();
        script += &format!("sif f{f} links_count {links}\n");
    }
    debugfs_script(&img.path, &script);

    if let Err(report) = e2fsck_clean(&img.path) {
        panic!("{report}");
    }

    let fs = Filesystem::open(&img.path, OpenOptions::default()).unwrap();
    let listed: BTreeSet<Vec<u8>> = fs
        .read_dir(ino)
        .unwrap()
        .into_iter()
        .map(|e| e.name)
        .collect();
    let expected: BTreeSet<Vec<u8>> = left.iter().map(|&i| names[i].clone()).collect();
    assert_eq!(listed, expected);
    for &i in &left {
        let found = fs.lookup(ino, &names[i]).unwrap();
        assert_eq!(found, Some(targets[i / LINKS_PER_FILE]), "entry {i}");
    }
    drop(fs);

    // The kernel lists the same names and finds each through its own htree lookup.
    if let Ok(mount) = KernelMount::mount(&img.path) {
        let d = mount.path().join("d");
        let listed: BTreeSet<Vec<u8>> = std::fs::read_dir(&d)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_vec())
            .collect();
        assert_eq!(listed, expected);
        for &i in &left {
            let path = d.join(std::ffi::OsStr::from_bytes(&names[i]));
            let ino = std::fs::symlink_metadata(&path).unwrap().ino();
            assert_eq!(ino, u64::from(targets[i / LINKS_PER_FILE]), "entry {i}");
        }
    }
}

#[test]
fn e2fsck_accepts_a_two_level_htree_with_checksums() {
    build_and_check(
        &["-t", "ext4", "-b", "1024"],
        64,
        Workload {
            names: Names::Padded {
                count: 4000,
                len: 200,
            },
            remove_every: 3,
            index_levels: Some(1),
            unsigned_hash: false,
        },
    );
}

#[test]
fn e2fsck_accepts_an_htree_without_checksums() {
    build_and_check(
        &["-t", "ext4", "-b", "4096", "-O", "^metadata_csum"],
        64,
        Workload {
            names: Names::Padded {
                count: 12_000,
                len: 120,
            },
            remove_every: 5,
            index_levels: Some(1),
            unsigned_hash: false,
        },
    );
}

#[test]
fn e2fsck_accepts_a_linear_directory() {
    build_and_check(
        &["-t", "ext4", "-b", "1024", "-O", "^dir_index"],
        32,
        Workload {
            names: Names::Padded {
                count: 500,
                len: 30,
            },
            remove_every: 4,
            index_levels: None,
            unsigned_hash: false,
        },
    );
}

#[test]
fn e2fsck_accepts_a_three_level_htree_with_large_dir() {
    build_and_check(
        &["-t", "ext4", "-b", "1024", "-O", "large_dir", "-N", "2048"],
        160,
        Workload {
            names: Names::Padded {
                count: 36_000,
                len: 250,
            },
            remove_every: 11,
            index_levels: Some(2),
            unsigned_hash: false,
        },
    );
}

#[test]
fn e2fsck_and_the_reader_accept_runs_of_equal_hashes_split_across_leaves() {
    // A fixed seed makes the collisions, and so the tree, the same on every run; with this
    // one, some run of equal hashes continues across the boundary between two index nodes.
    build_and_check(
        &[
            "-t",
            "ext4",
            "-b",
            "1024",
            "-E",
            "hash_seed=12345678-9abc-def0-0fed-cba987654321",
        ],
        64,
        Workload {
            names: Names::Colliding,
            remove_every: 13,
            index_levels: Some(1),
            unsigned_hash: false,
        },
    );
}

#[test]
fn e2fsck_accepts_an_htree_hashed_as_unsigned_bytes() {
    build_and_check(
        &["-t", "ext4", "-b", "1024"],
        64,
        Workload {
            names: Names::Padded {
                count: 3000,
                len: 150,
            },
            remove_every: 7,
            index_levels: Some(1),
            unsigned_hash: true,
        },
    );
}

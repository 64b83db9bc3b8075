//! What a workload did and what it was promised: every file's contents after each change,
//! the tree of names after each change to it, and at each fsync or sync return what must
//! survive a crash from then on. Files are filled with 16-byte records naming the file, the
//! record's place and the change that wrote it, so a file showing another file's bytes is
//! told apart from one showing its own older bytes.
//!
//! A file's bytes after a crash are checked record by record (each some version's record
//! at that place: a write's blocks reach the device one by one, and an overwrite lands in
//! place before its commit), except for a file made with [`Run::create_whole`], whose every
//! change is one that e4 makes atomic: it must be one version whole, or a state a range
//! move in pieces may leave between two of them (`range_moves.rs`).

use std::collections::hash_map::DefaultHasher;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use e4_format::extent::{ExtentEntries, ExtentNode};
use e4_format::Location;
use e4_fs::device::Device;
use e4_fs::recording_device::{RecordingDevice, WriteLog};
use e4_fs::{
    Creator, FallocateMode, FileType, Filesystem, Mapping, OpenOptions, RenameMode, XattrSet,
};
use e4_testkit::make_empty_image;

use super::range_moves::{RangeMove, Shift};

pub const ROOT: u32 = 2;
pub const BLOCK: usize = 4096;
/// Bytes per record of a file's contents.
pub const RECORD: usize = 16;
/// The first word of every record (not jbd2's magic, so no data block is escaped).
const RECORD_MAGIC: u32 = 0x4534_5243;

const FILE: Creator = Creator {
    permissions: 0o644,
    uid: 0,
    gid: 0,
    umask: 0,
};
const DIR: Creator = Creator {
    permissions: 0o755,
    uid: 0,
    gid: 0,
    umask: 0,
};

/// Where the clock stands for these tests (2026-12-06).
const FROZEN_CLOCK: i64 = 1_796_515_200;

/// No interval commits: only the workload's fsyncs and syncs (and pressure) commit, so the
/// log is the same from run to run but for the threads' interleaving.
pub fn options() -> OpenOptions {
    OpenOptions {
        commit_interval: Duration::ZERO,
        // Commits where the operations' sizes put them, the same on every run.
        commit_thread: false,
        ..OpenOptions::writable()
    }
}

pub type Xattrs = BTreeMap<Vec<u8>, Vec<u8>>;

/// A name in the tree, as an image shows it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Entry {
    pub ino: u32,
    pub dir: bool,
    pub xattrs: Xattrs,
}

/// Every path (from "/") to what it names.
pub type Tree = BTreeMap<String, Entry>;

/// The file id of each path that names a file the workload made.
type Ids = BTreeMap<String, usize>;

fn tree_hash(tree: &Tree) -> u64 {
    let mut h = DefaultHasher::new();
    tree.hash(&mut h);
    h.finish()
}

/// The tree `fs` shows, and the contents of its regular files.
pub fn read_tree(fs: &Filesystem) -> Result<(Tree, HashMap<String, Vec<u8>>), String> {
    let e = |e: e4_fs::Error| e.to_string();
    let mut tree = Tree::new();
    let mut contents = HashMap::new();
    let mut todo = vec![("/".to_string(), ROOT)];
    while let Some((path, ino)) = todo.pop() {
        let meta = fs.metadata(ino).map_err(e)?;
        let mut xattrs = Xattrs::new();
        for name in fs.list_xattrs(ino).map_err(e)? {
            let value = fs.get_xattr(ino, &name).map_err(e)?.unwrap_or_default();
            xattrs.insert(name, value);
        }
        let dir = meta.file_type == FileType::Directory;
        if dir {
            for entry in fs.read_dir(ino).map_err(e)? {
                if entry.name == b"." || entry.name == b".." {
                    continue;
                }
                let name = String::from_utf8_lossy(&entry.name);
                todo.push((format!("{}/{name}", path.trim_end_matches('/')), entry.ino));
            }
        } else if meta.file_type == FileType::Regular {
            contents.insert(path.clone(), fs.read_file(ino, u64::MAX).map_err(e)?);
        }
        tree.insert(path, Entry { ino, dir, xattrs });
    }
    Ok((tree, contents))
}

/// What must survive a crash once `flushes` flushes have been issued.
#[derive(Debug, Clone, Copy)]
struct Promise {
    flushes: usize,
    promised: Promised,
}

#[derive(Debug, Clone, Copy)]
enum Promised {
    /// The tree as of this version of it, or a later one (a completed sync).
    Tree(usize),
    /// The file's contents as of this version, or a later one (a completed fsync or sync).
    File { id: usize, version: usize },
}

/// A rename, to say which way a tree that matches no moment broke it.
#[derive(Debug, Clone)]
struct Rename {
    from: String,
    to: String,
    ino: u32,
}

/// The record of a workload.
#[derive(Default)]
pub struct Model {
    trees: Vec<Tree>,
    tree_hashes: Vec<u64>,
    /// Every version of each file's contents, by file id.
    versions: Vec<Vec<Arc<Vec<u8>>>>,
    /// Each file's inode, by file id.
    inos: Vec<u32>,
    /// Which file each path of each version of the tree names, by file id.
    ids: Vec<Ids>,
    renames: Vec<Rename>,
    promises: Vec<Promise>,
    /// Whether each file, by file id, must show one version whole ([`Run::create_whole`]).
    whole: Vec<bool>,
    /// Each file's range moves that may stop between pieces, by file id.
    pieced: Vec<Vec<PiecedMove>>,
    /// The contents of the next version of a file that writes are making, by file id.
    writing: HashMap<usize, Vec<u8>>,
}

/// A range move that may stop between pieces.
struct PiecedMove {
    /// The version of the file it started from.
    before: usize,
    moved: RangeMove,
    /// Checks that found the file between two of its pieces (each distinct recovered
    /// image once per promises in force).
    seen_part_way: AtomicUsize,
}

/// The least a crash state must hold, from the promises made by then.
pub struct Floors {
    /// Promises in force (states with as many agree on what to check).
    pub in_force: usize,
    tree: usize,
    files: HashMap<usize, usize>,
}

impl Model {
    fn push_tree(&mut self, tree: Tree, ids: Ids) {
        self.tree_hashes.push(tree_hash(&tree));
        self.trees.push(tree);
        self.ids.push(ids);
    }

    fn tree(&self) -> &Tree {
        // OK to unwrap: a run starts with the image's tree.
        self.trees.last().unwrap()
    }

    fn promise(&mut self, flushes: usize, promised: Promised) {
        self.promises.push(Promise { flushes, promised });
    }

    /// Promises everything as it stands.
    fn promise_all(&mut self, flushes: usize) {
        self.promise(flushes, Promised::Tree(self.trees.len() - 1));
        // OK to unwrap: a run starts with the image's tree.
        let ids: Vec<usize> = self.ids.last().unwrap().values().copied().collect();
        for id in ids {
            let version = self.versions[id].len() - 1;
            self.promise(flushes, Promised::File { id, version });
        }
    }

    /// What a state after `flushes` flushes must hold.
    pub fn floors(&self, flushes: usize) -> Floors {
        let mut floors = Floors {
            in_force: 0,
            tree: 0,
            files: HashMap::new(),
        };
        for p in self.promises.iter().filter(|p| p.flushes <= flushes) {
            floors.in_force += 1;
            match p.promised {
                Promised::Tree(v) => floors.tree = floors.tree.max(v),
                Promised::File { id, version } => {
                    let floor = floors.files.entry(id).or_default();
                    *floor = (*floor).max(version);
                }
            }
        }
        floors
    }

    /// Each way the recovered `fs` breaks a promise or an operation's atomicity.
    pub fn problems(&self, fs: &Filesystem, floors: &Floors) -> Vec<String> {
        let (tree, contents) = match read_tree(fs) {
            Ok(read) => read,
            Err(e) => return vec![format!("the recovered image cannot be read: {e}")],
        };
        let mut problems = Vec::new();
        let hash = tree_hash(&tree);
        let matched = (floors.tree..self.trees.len())
            .find(|&v| self.tree_hashes[v] == hash && self.trees[v] == tree);
        if matched.is_none() {
            problems.push(self.tree_mismatch(&tree, floors.tree));
        }
        for (path, bytes) in &contents {
            let ino = tree[path].ino;
            // The file a path names: in the moment the tree matched; failing that, in the
            // last synced one or the newest, where the inode agrees.
            let named = |v: usize| {
                let same = self.trees[v].get(path).is_some_and(|e| e.ino == ino);
                self.ids[v].get(path).filter(|_| same).copied()
            };
            let id = match matched {
                Some(v) => named(v),
                None => named(floors.tree).or_else(|| named(self.trees.len() - 1)),
            };
            let Some(id) = id else {
                if matched.is_some() {
                    problems.push(format!("{path} (inode {ino}) is no file the workload made"));
                }
                continue;
            };
            let floor = floors.files.get(&id).copied().unwrap_or(0);
            if let Some(problem) = self.content_problem(id, floor, bytes) {
                problems.push(format!("{path} (file {id}, inode {ino}): {problem}"));
            }
        }
        problems
    }

    /// Says how `tree` differs from the tree last synced and the newest one.
    fn tree_mismatch(&self, tree: &Tree, floor: usize) -> String {
        let diff = |model: &Tree| {
            let missing: Vec<&String> = model.keys().filter(|p| !tree.contains_key(*p)).collect();
            let extra: Vec<&String> = tree.keys().filter(|p| !model.contains_key(*p)).collect();
            let changed: Vec<&String> = model
                .iter()
                .filter(|(p, e)| tree.get(*p).is_some_and(|t| t != *e))
                .map(|(p, _)| p)
                .collect();
            format!(
                "missing {:?}, unexpected {:?}, changed {:?}",
                &missing[..missing.len().min(4)],
                &extra[..extra.len().min(4)],
                &changed[..changed.len().min(4)]
            )
        };
        let mut broken = Vec::new();
        for r in &self.renames {
            let at = |p: &String| tree.get(p).is_some_and(|e| e.ino == r.ino);
            match (at(&r.from), at(&r.to)) {
                (true, true) => broken.push(format!("both {} and {}", r.from, r.to)),
                (false, false) if tree.values().all(|e| e.ino != r.ino) => {
                    broken.push(format!("neither {} nor {}", r.from, r.to))
                }
                _ => {}
            }
        }
        format!(
            "the names match no moment since the last sync (tree {floor} of {}): against it {}; \
             against the last {}{}",
            self.trees.len() - 1,
            diff(&self.trees[floor]),
            diff(self.tree()),
            if broken.is_empty() {
                String::new()
            } else {
                format!("; renames broken: {}", broken.join(", "))
            }
        )
    }

    /// For each range move in pieces, which file, the move, and how many checks found the
    /// file between two of its pieces: a workload that moves in pieces asserts each was
    /// found so, or its crash states never reached between them.
    pub fn part_way_states(&self) -> Vec<(usize, RangeMove, usize)> {
        self.pieced
            .iter()
            .enumerate()
            .flat_map(|(id, moves)| {
                moves
                    .iter()
                    .map(move |m| (id, m.moved, m.seen_part_way.load(Ordering::Relaxed)))
            })
            .collect()
    }

    /// Why `bytes` are not what file `id` may hold from version `floor` on, if they are not:
    /// for a whole file one of those versions, or a move in pieces from one of them part
    /// way; for the others, its size is one of those versions', and every record is one
    /// that some version had.
    fn content_problem(&self, id: usize, floor: usize, bytes: &[u8]) -> Option<String> {
        if !self.whole[id] {
            return self.record_problem(id, floor, bytes);
        }
        let versions = &self.versions[id][floor..];
        if versions.iter().any(|v| v.as_slice() == bytes) {
            return None;
        }
        // Two moves may leave the same bytes part-way (an insert and the collapse that
        // undoes it): each counts it.
        let mut part_way = false;
        for m in self.pieced[id].iter().filter(|m| m.before >= floor) {
            if m.moved
                .part_way(&self.versions[id][m.before], bytes)
                .is_some()
            {
                m.seen_part_way.fetch_add(1, Ordering::Relaxed);
                part_way = true;
            }
        }
        if part_way {
            return None;
        }
        let near = versions
            .iter()
            .map(|v| {
                let same = v.iter().zip(bytes).take_while(|(a, b)| a == b).count();
                (same, v.len())
            })
            .max();
        Some(format!(
            "{} bytes, no version since {floor} whole nor a move of one part-way (the nearest \
             version, of {} bytes, differs from byte {}){}",
            bytes.len(),
            near.map_or(0, |n| n.1),
            near.map_or(0, |n| n.0),
            self.record_problem(id, floor, bytes)
                .map_or(String::new(), |p| format!("; {p}"))
        ))
    }

    /// Why `bytes` are not what file `id` may hold from version `floor` on, record by
    /// record, if they are not: its size is one of those versions', and every record is
    /// one that some version had.
    fn record_problem(&self, id: usize, floor: usize, bytes: &[u8]) -> Option<String> {
        let versions = &self.versions[id][floor..];
        if !versions.iter().any(|v| v.len() == bytes.len()) {
            let sizes: Vec<usize> = versions.iter().map(|v| v.len()).collect();
            return Some(format!(
                "{} bytes, not a size it had since version {floor} ({sizes:?})",
                bytes.len()
            ));
        }
        for start in (0..bytes.len()).step_by(RECORD) {
            let end = (start + RECORD).min(bytes.len());
            let found = &bytes[start..end];
            if versions
                .iter()
                .any(|v| v.len() >= end && &v[start..end] == found)
            {
                continue;
            }
            return Some(match decode(found) {
                Some((other, _, _)) if other != id as u32 => {
                    format!("shows file {other}'s data at byte {start}")
                }
                Some((_, index, change)) => format!(
                    "byte {start} holds its record {index} of change {change}, which no \
                     version since {floor} has there (they hold {:?})",
                    versions
                        .iter()
                        .map(|v| v.get(start..end).and_then(decode))
                        .collect::<Vec<_>>()
                ),
                None if found.iter().all(|&b| b == 0) => {
                    format!("byte {start} reads as zeros, which no version since {floor} has")
                }
                None => format!("byte {start} holds bytes no file was written with"),
            });
        }
        None
    }
}

fn record(id: usize, index: usize, change: usize) -> [u8; RECORD] {
    let mut r = [0; RECORD];
    for (i, word) in [RECORD_MAGIC, id as u32, index as u32, change as u32]
        .into_iter()
        .enumerate()
    {
        r[i * 4..i * 4 + 4].copy_from_slice(&word.to_le_bytes());
    }
    r
}

/// (file id, record index, change) of a record.
fn decode(bytes: &[u8]) -> Option<(u32, u32, u32)> {
    let word = |i: usize| u32::from_le_bytes(bytes[i * 4..i * 4 + 4].try_into().unwrap());
    (bytes.len() == RECORD && word(0) == RECORD_MAGIC).then(|| (word(1), word(2), word(3)))
}

/// A workload in progress: the filesystem on a recording device, and its model.
pub struct Run {
    pub fs: Filesystem,
    device: Arc<RecordingDevice>,
    model: Mutex<Model>,
}

impl Run {
    /// A fresh 16 MiB ext4 (4 KiB blocks, a 4 MiB journal), with `setup` done and synced
    /// before the recording starts.
    pub fn start(setup: impl FnOnce(&Run)) -> Run {
        Run::start_on(&["-t", "ext4", "-b", "4096"], 16, options(), setup)
    }

    /// [`Run::start`] on an image mke2fs makes with `mke2fs_args` (4 KiB blocks) and
    /// `size_mib`, opened with `options` for the workload.
    pub fn start_on(
        mke2fs_args: &[&str],
        size_mib: u64,
        options: OpenOptions,
        setup: impl FnOnce(&Run),
    ) -> Run {
        // Every timestamp e4 writes is this one, in this test binary: a recovery of the same
        // crash image then writes the same bytes, whenever it runs (an orphan's dtime).
        e4_fs::testing::freeze_clock(Some(FROZEN_CLOCK));
        let img = make_empty_image(mke2fs_args, size_mib);
        let bytes = std::fs::read(&img.path).unwrap();
        let fs = Filesystem::open_bytes(bytes.clone(), OpenOptions::default()).unwrap();
        let mut model = Model::default();
        model.push_tree(read_tree(&fs).unwrap().0, Ids::new());
        drop(fs);
        let run = Run::on(bytes, model, options.clone());
        setup(&run);
        let Run { fs, device, model } = run;
        fs.unmount().unwrap();
        let mut model = model.into_inner().unwrap();
        model.promises.clear();
        model.promise_all(0);
        let mut bytes = vec![0; device.size() as usize];
        device.read_exact_at(&mut bytes, 0).unwrap();
        Run::on(bytes, model, options)
    }

    fn on(bytes: Vec<u8>, model: Model, options: OpenOptions) -> Run {
        let device = Arc::new(RecordingDevice::new(bytes, BLOCK));
        let fs = Filesystem::open_device(device.clone(), options).unwrap();
        Run {
            fs,
            device,
            model: Mutex::new(model),
        }
    }

    /// Unmounts (a sync: everything is promised) and hands back the log and the model.
    /// Fails if a commit was written around the log (too large for it: not crash-safe).
    pub fn finish(self) -> (WriteLog, Model) {
        // OK to unwrap: the workloads' images have a journal.
        let stats = self.fs.journal_stats().unwrap();
        assert_eq!(
            stats.unjournaled, 0,
            "a commit went around the log: {stats:?}"
        );
        self.fs.unmount().unwrap();
        let mut model = self.model.into_inner().unwrap();
        model.promise_all(self.device.flushes());
        (self.device.log(), model)
    }

    fn model(&self) -> std::sync::MutexGuard<'_, Model> {
        self.model.lock().unwrap()
    }

    /// The inode of file `id`.
    pub fn ino(&self, id: usize) -> u32 {
        self.model().inos[id]
    }

    /// The node blocks of file `id`'s extent tree (not the root in the inode), read from
    /// the device: with no commit thread, an operation that committed has written its
    /// blocks home when it returns.
    pub fn tree_blocks(&self, id: usize) -> HashSet<u64> {
        let inode = self.fs.read_inode(self.ino(id)).unwrap();
        let root = ExtentNode::parse(&inode.record.block, Location::Inode(inode.ino)).unwrap();
        let mut blocks = HashSet::new();
        let mut todo = vec![root];
        while let Some(node) = todo.pop() {
            let ExtentEntries::Index(indexes) = node.entries else {
                continue;
            };
            for child in indexes.iter().map(|index| index.leaf()) {
                let mut bytes = vec![0; BLOCK];
                self.device
                    .read_exact_at(&mut bytes, child * BLOCK as u64)
                    .unwrap();
                todo.push(ExtentNode::parse(&bytes, Location::Block(child)).unwrap());
                blocks.insert(child);
            }
        }
        blocks
    }

    /// The blocks file `id` maps.
    pub fn data_blocks(&self, id: usize) -> HashSet<u64> {
        let inode = self.fs.read_inode(self.ino(id)).unwrap();
        let end = inode.size().div_ceil(BLOCK as u64);
        let (mut blocks, mut logical) = (HashSet::new(), 0);
        while logical < end {
            match self.fs.map_block(&inode, logical, end - logical).unwrap() {
                Mapping::Data { physical, len, .. } => {
                    blocks.extend(physical..physical + len);
                    logical += len;
                }
                Mapping::Hole { len } => logical += len.max(1),
            }
        }
        blocks
    }

    fn ino_of(&self, path: &str) -> u32 {
        self.model().tree()[path].ino
    }

    fn split(path: &str) -> (&str, &str) {
        // OK to unwrap: every path the workloads name starts with '/'.
        let (parent, name) = path.rsplit_once('/').unwrap();
        (if parent.is_empty() { "/" } else { parent }, name)
    }

    /// Changes the newest tree (and which files it names) with `edit`, as a new version.
    fn edit_tree(&self, edit: impl FnOnce(&mut Tree, &mut Ids)) {
        let mut model = self.model();
        let mut tree = model.tree().clone();
        // OK to unwrap: as many versions of ids as of trees.
        let mut ids = model.ids.last().unwrap().clone();
        edit(&mut tree, &mut ids);
        model.push_tree(tree, ids);
    }

    pub fn mkdir(&self, path: &str) {
        let (parent, name) = Run::split(path);
        let ino = self
            .fs
            .mkdir(self.ino_of(parent), name.as_bytes(), DIR)
            .unwrap();
        self.edit_tree(|t, _| {
            t.insert(
                path.into(),
                Entry {
                    ino,
                    dir: true,
                    xattrs: Xattrs::new(),
                },
            );
        });
    }

    /// Creates an empty file at `path`; its id.
    pub fn create(&self, path: &str) -> usize {
        self.create_checked(path, false)
    }

    /// [`Run::create`] for a file whose every change e4 makes atomic, and which a crash
    /// must leave one version whole (or part-way through a move in pieces): it takes only
    /// writes of whole blocks into holes or past its end, and range moves.
    pub fn create_whole(&self, path: &str) -> usize {
        self.create_checked(path, true)
    }

    fn create_checked(&self, path: &str, whole: bool) -> usize {
        let (parent, name) = Run::split(path);
        let ino = self
            .fs
            .create(self.ino_of(parent), name.as_bytes(), FILE)
            .unwrap();
        let id = {
            let mut model = self.model();
            model.versions.push(vec![Arc::new(Vec::new())]);
            model.inos.push(ino);
            model.whole.push(whole);
            model.pieced.push(Vec::new());
            model.versions.len() - 1
        };
        self.edit_tree(|t, ids| {
            ids.insert(path.into(), id);
            t.insert(
                path.into(),
                Entry {
                    ino,
                    dir: false,
                    xattrs: Xattrs::new(),
                },
            );
        });
        id
    }

    /// Writes `len` bytes of records at `offset` (both multiples of [`RECORD`]). Only the
    /// thread that owns file `id` changes it.
    pub fn write(&self, id: usize, offset: usize, len: usize) {
        self.write_each(id, &[offset], len);
    }

    /// Writes `len` bytes of records at each of `offsets`, a write each, recorded as one
    /// version (for a setup that lays out many extents: a version per write would copy
    /// the file each time).
    pub fn write_each(&self, id: usize, offsets: &[usize], len: usize) {
        for &offset in offsets {
            assert_eq!(self.write_up_to(id, offset, len), len, "a short write");
        }
        let version = Arc::new(self.writing(id));
        self.model().versions[id].push(version);
    }

    /// Writes up to `len` bytes of records at `offset`, as many as fit (a full filesystem
    /// ends the write short): the bytes written.
    pub fn fill(&self, id: usize, offset: usize, len: usize) -> usize {
        let written = self.write_up_to(id, offset, len);
        let version = Arc::new(self.writing(id));
        self.model().versions[id].push(version);
        written
    }

    /// The contents of file `id` as the writes since its last version left them.
    fn writing(&self, id: usize) -> Vec<u8> {
        let mut model = self.model();
        model.writing.remove(&id).unwrap_or_else(|| {
            // OK to unwrap: a file starts with one version.
            model.versions[id].last().unwrap().as_ref().clone()
        })
    }

    /// One write of up to `len` bytes at `offset` into the version file `id` is making.
    fn write_up_to(&self, id: usize, offset: usize, len: usize) -> usize {
        let mut contents = self.writing(id);
        let (ino, change, whole) = {
            let model = self.model();
            (model.inos[id], model.versions[id].len(), model.whole[id])
        };
        if whole {
            // Whole blocks into a hole or past the end go to new blocks, mapped by the
            // commit: atomic. Records are never zeros, so zeros are a hole here.
            let old = &contents[offset.min(contents.len())..(offset + len).min(contents.len())];
            let whole_blocks = len % BLOCK == 0 || offset + len >= contents.len();
            let fresh = (offset + len <= contents.len() || contents.len() % BLOCK == 0)
                && old.iter().all(|&b| b == 0);
            assert!(
                offset % BLOCK == 0 && whole_blocks && fresh,
                "file {id} is checked whole: a write must fill whole blocks of a hole"
            );
        }
        let data: Vec<u8> = (offset / RECORD..(offset + len) / RECORD)
            .flat_map(|index| record(id, index, change))
            .collect();
        let len = self.fs.write_at(ino, offset as u64, &data).unwrap();
        if contents.len() < offset + len {
            contents.resize(offset + len, 0);
        }
        contents[offset..offset + len].copy_from_slice(&data[..len]);
        self.model().writing.insert(id, contents);
        len
    }

    pub fn append(&self, id: usize, len: usize) {
        let size = self.size(id);
        self.write(id, size, len);
    }

    fn size(&self, id: usize) -> usize {
        self.model().versions[id].last().unwrap().len()
    }

    fn change(&self, id: usize, edit: impl FnOnce(&mut Vec<u8>)) {
        let mut model = self.model();
        let mut contents = model.versions[id].last().unwrap().as_ref().clone();
        edit(&mut contents);
        model.versions[id].push(Arc::new(contents));
    }

    /// Truncates file `id` to `size`. The rest of the new last block is zeroed where it
    /// lies, before the commit that shrinks the file (as ext4 does), so a crash may show
    /// the old size with those bytes zero: that is a version too.
    pub fn truncate(&self, id: usize, size: usize) {
        let ino = self.in_place(id);
        self.fs.truncate(ino, size as u64).unwrap();
        self.change(id, |c| {
            let end = size.next_multiple_of(BLOCK).min(c.len());
            if size < end {
                c[size..end].fill(0);
            }
        });
        self.change(id, |c| c.resize(size, 0));
    }

    pub fn punch(&self, id: usize, offset: usize, len: usize) {
        let ino = self.in_place(id);
        self.fs
            .fallocate(ino, FallocateMode::PunchHole, offset as u64, len as u64)
            .unwrap();
        self.change(id, |c| {
            let end = (offset + len).min(c.len());
            if offset < end {
                c[offset..end].fill(0);
            }
        });
    }

    /// The inode of file `id`, for a change that writes over its blocks in place (zeros
    /// in a partial block), which a crash may leave half done: not for a file checked
    /// whole.
    fn in_place(&self, id: usize) -> u32 {
        let model = self.model();
        assert!(
            !model.whole[id],
            "file {id} is checked whole: no changes in place"
        );
        model.inos[id]
    }

    /// Inserts or collapses (`shift`) `len` bytes at `offset` of file `id` (whole blocks):
    /// a move e4 makes in one transaction, so a crash leaves it done or not.
    pub fn move_range(&self, id: usize, shift: Shift, offset: usize, len: usize) {
        self.move_range_as(id, shift, offset, len, false);
    }

    /// [`Run::move_range`] for a move larger than a transaction (the workload's
    /// transaction limit makes it so), which e4 makes in pieces: a crash between two
    /// leaves the file part-way (`range_moves.rs`).
    pub fn move_range_in_pieces(&self, id: usize, shift: Shift, offset: usize, len: usize) {
        self.move_range_as(id, shift, offset, len, true);
    }

    fn move_range_as(&self, id: usize, shift: Shift, offset: usize, len: usize, pieces: bool) {
        assert!(
            offset % BLOCK == 0 && len % BLOCK == 0,
            "moves are in whole blocks"
        );
        let ino = self.model().inos[id];
        let mode = match shift {
            Shift::Insert => FallocateMode::InsertRange,
            Shift::Collapse => FallocateMode::CollapseRange,
        };
        self.fs
            .fallocate(ino, mode, offset as u64, len as u64)
            .unwrap();
        let moved = RangeMove {
            shift,
            at: offset / BLOCK,
            count: len / BLOCK,
        };
        let mut model = self.model();
        let before = model.versions[id].len() - 1;
        if pieces {
            model.pieced[id].push(PiecedMove {
                before,
                moved,
                seen_part_way: AtomicUsize::new(0),
            });
        }
        let after = moved.apply(&model.versions[id][before]);
        model.versions[id].push(Arc::new(after));
    }

    /// Renames `from` to `to`, replacing what `to` named.
    pub fn rename(&self, from: &str, to: &str) {
        let ((from_parent, from_name), (to_parent, to_name)) = (Run::split(from), Run::split(to));
        self.fs
            .rename(
                self.ino_of(from_parent),
                from_name.as_bytes(),
                self.ino_of(to_parent),
                to_name.as_bytes(),
                RenameMode::Replace,
            )
            .unwrap();
        let mut ino = 0;
        self.edit_tree(|t, ids| {
            let entry = t.remove(from).unwrap();
            assert!(!entry.dir, "the workloads rename files only");
            ino = entry.ino;
            t.insert(to.into(), entry);
            match ids.remove(from) {
                Some(id) => ids.insert(to.into(), id),
                None => ids.remove(to),
            };
        });
        self.model().renames.push(Rename {
            from: from.into(),
            to: to.into(),
            ino,
        });
    }

    pub fn unlink(&self, path: &str) {
        let (parent, name) = Run::split(path);
        self.fs
            .unlink(self.ino_of(parent), name.as_bytes())
            .unwrap();
        self.edit_tree(|t, ids| {
            t.remove(path);
            ids.remove(path);
        });
    }

    pub fn rmdir(&self, path: &str) {
        let (parent, name) = Run::split(path);
        self.fs.rmdir(self.ino_of(parent), name.as_bytes()).unwrap();
        self.edit_tree(|t, _| {
            t.remove(path);
        });
    }

    pub fn set_xattr(&self, path: &str, name: &str, value: &[u8]) {
        self.fs
            .set_xattr(self.ino_of(path), name.as_bytes(), value, XattrSet::Either)
            .unwrap();
        self.edit_tree(|t, _| {
            t.get_mut(path)
                .unwrap()
                .xattrs
                .insert(name.as_bytes().to_vec(), value.to_vec());
        });
    }

    pub fn remove_xattr(&self, path: &str, name: &str) {
        self.fs
            .remove_xattr(self.ino_of(path), name.as_bytes())
            .unwrap();
        self.edit_tree(|t, _| {
            t.get_mut(path).unwrap().xattrs.remove(name.as_bytes());
        });
    }

    /// Keeps file `id` open (so an unlink leaves it, orphaned, until [`Run::close`]).
    pub fn open(&self, id: usize) {
        self.fs.open_inode(self.model().inos[id]).unwrap();
    }

    pub fn close(&self, id: usize) {
        self.fs.release_inode(self.model().inos[id]).unwrap();
    }

    /// fsync: from its return, file `id`'s contents survive a crash.
    pub fn fsync(&self, id: usize) {
        let ino = self.model().inos[id];
        self.fs.fsync(ino).unwrap();
        let flushes = self.device.flushes();
        let mut model = self.model();
        let version = model.versions[id].len() - 1;
        model.promise(flushes, Promised::File { id, version });
    }

    /// sync: from its return, the tree and every file survive a crash.
    pub fn sync(&self) {
        self.fs.sync().unwrap();
        let flushes = self.device.flushes();
        self.model().promise_all(flushes);
    }
}

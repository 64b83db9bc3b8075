//! All or nothing: every operation either completes or leaves the image as it was, whatever
//! fails under it. Each operation runs on a fresh open of a healthy image (so every block it
//! needs comes from the device) once without faults, counting its device reads, data writes
//! and allocations; then once for each of those points with that one failing: a read that
//! fails, a read whose bytes come back damaged (a verification failure), a data write that
//! fails, an allocation that finds the filesystem full (and every allocation after it). After
//! each, the faults stop, the filesystem commits and unmounts, and the image must pass
//! `e2fsck -fn` and hold exactly the tree from before the operation or the one from after it
//! (times aside: each run has its own clock); what the open filesystem showed before it
//! unmounted must be what its image holds, times included.
//!
//! Every profile is swept at every point: one per family with chosen block sizes (ext4 with
//! 4 KiB blocks, ext4 with inline data on 1 KiB blocks, ext3, ext2 without dir_index), each
//! of the test kit's profiles, and variants the kit lacks. A run works on a copy-on-write
//! overlay of the base image ([`OverlayDevice`]), so the thousands of runs cost little more
//! than their e2fsck.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use e4_format::features::IncompatFeatures;
use e4_fs::device::{Device, Fault, FaultyDevice, MemoryDevice};
use e4_fs::{
    Creator, Error, FallocateMode, FileType, Filesystem, OpenOptions, RenameMode, SetAttributes,
    Shortage, Timestamp, XattrSet,
};
use e4_testkit::{e2fsck_clean, e2fsck_problems, make_empty_image, PROFILES};

const ROOT: u32 = 2;
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

fn options() -> OpenOptions {
    OpenOptions {
        commit_interval: Duration::ZERO,
        ..OpenOptions::writable()
    }
}

fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// What a path holds, for comparing trees: everything but times and inode numbers.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Node {
    file_type: FileType,
    permissions: u16,
    uid: u32,
    gid: u32,
    size: u64,
    nlink: u16,
    /// `i_blocks`, in 512-byte units.
    blocks: u64,
    /// File contents or a symlink's target.
    bytes: Vec<u8>,
    xattrs: BTreeMap<Vec<u8>, Vec<u8>>,
    /// `i_flags` (inline data, extents, ...).
    flags: u32,
    /// A device's major and minor numbers.
    rdev: (u32, u32),
    /// Access, modification and change times: compared only between the open filesystem
    /// and its image (a run's own clock sets them), see [`timeless`].
    times: [Timestamp; 3],
}

type Tree = BTreeMap<String, Node>;

/// The first path at which `shown` and `held` differ, with both sides, for a report.
fn first_difference(shown: &Tree, held: &Tree) -> String {
    let paths: std::collections::BTreeSet<&String> = shown.keys().chain(held.keys()).collect();
    paths
        .into_iter()
        .find(|p| shown.get(*p) != held.get(*p))
        .map_or_else(String::new, |p| {
            format!("{p}: shown {:?}, held {:?}", shown.get(p), held.get(p))
        })
}

/// The tree an image holds, or why it cannot be read.
fn snapshot(image: &[u8]) -> Result<Tree, String> {
    let fs = Filesystem::open_bytes(image.to_vec(), OpenOptions::default())
        .map_err(|e| e.to_string())?;
    tree_of(&fs)
}

/// The chunk [`OverlayDevice`] and [`ScratchImage`] track changes in (the largest block).
const CHUNK: usize = 4096;

/// The chunks a run wrote, by chunk number, as they stand after it.
type Written = BTreeMap<u64, Vec<u8>>;

/// A device over a shared base image that keeps what is written apart, a chunk at a time:
/// each of a sweep's thousands of runs starts from the base without a copy of the whole
/// image, and hands back only the few chunks it changed.
struct OverlayDevice {
    base: Arc<Vec<u8>>,
    written: parking_lot::Mutex<Written>,
}

impl OverlayDevice {
    fn new(base: Arc<Vec<u8>>) -> Self {
        OverlayDevice {
            base,
            written: parking_lot::Mutex::new(Written::new()),
        }
    }

    /// The chunks of `len` bytes at `offset`, each with the range it covers in the chunk
    /// and in the caller's buffer; an error when the range reaches past the end.
    fn pieces(&self, len: usize, offset: u64) -> std::io::Result<Vec<(u64, Range, Range)>> {
        let start = offset as usize;
        if start
            .checked_add(len)
            .is_none_or(|end| end > self.base.len())
        {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "past the end of the device",
            ));
        }
        let mut pieces = Vec::new();
        let mut at = start;
        while at < start + len {
            let chunk = at / CHUNK;
            let end = ((chunk + 1) * CHUNK).min(start + len);
            pieces.push((
                chunk as u64,
                at - chunk * CHUNK..end - chunk * CHUNK,
                at - start..end - start,
            ));
            at = end;
        }
        Ok(pieces)
    }

    /// What was written, leaving nothing.
    fn take_written(&self) -> Written {
        std::mem::take(&mut self.written.lock())
    }
}

type Range = std::ops::Range<usize>;

impl Device for OverlayDevice {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
        let written = self.written.lock();
        for (chunk, inside, outside) in self.pieces(buf.len(), offset)? {
            let from = match written.get(&chunk) {
                Some(bytes) => &bytes[inside],
                None => {
                    let at = chunk as usize * CHUNK;
                    &self.base[at + inside.start..at + inside.end]
                }
            };
            buf[outside].copy_from_slice(from);
        }
        Ok(())
    }

    fn write_all_at(&self, buf: &[u8], offset: u64) -> std::io::Result<()> {
        let mut written = self.written.lock();
        for (chunk, inside, outside) in self.pieces(buf.len(), offset)? {
            let bytes = written.entry(chunk).or_insert_with(|| {
                let at = chunk as usize * CHUNK;
                self.base[at..(at + CHUNK).min(self.base.len())].to_vec()
            });
            bytes[inside].copy_from_slice(&buf[outside]);
        }
        Ok(())
    }

    fn flush(&self) -> std::io::Result<()> {
        Ok(())
    }

    fn size(&self) -> u64 {
        self.base.len() as u64
    }
}

/// The image file a sweep checks each run's result in: the base with one run's chunks
/// written over it, the previous run's chunks put back first.
struct ScratchImage {
    _dir: tempfile::TempDir,
    path: std::path::PathBuf,
    file: std::fs::File,
    base: Arc<Vec<u8>>,
    /// The chunks that differ from the base now.
    changed: Vec<u64>,
}

impl ScratchImage {
    fn new(base: Arc<Vec<u8>>) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("image");
        std::fs::write(&path, &*base).unwrap();
        let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        ScratchImage {
            _dir: dir,
            path,
            file,
            base,
            changed: Vec::new(),
        }
    }

    /// Makes the file hold the base with `written` over it.
    fn hold(&mut self, written: &Written) {
        use std::os::unix::fs::FileExt;
        for chunk in std::mem::take(&mut self.changed) {
            if !written.contains_key(&chunk) {
                let at = chunk as usize * CHUNK;
                let original = &self.base[at..(at + CHUNK).min(self.base.len())];
                self.file.write_all_at(original, at as u64).unwrap();
            }
        }
        for (&chunk, bytes) in written {
            self.file.write_all_at(bytes, chunk * CHUNK as u64).unwrap();
            self.changed.push(chunk);
        }
    }

    /// The tree the file holds.
    fn snapshot(&self) -> Result<Tree, String> {
        let fs = Filesystem::open(&self.path, OpenOptions::default()).map_err(|e| e.to_string())?;
        tree_of(&fs)
    }
}

/// The tree `fs` shows: for a filesystem still open, what its caches hold.
fn tree_of(fs: &Filesystem) -> Result<Tree, String> {
    let e = |e: Error| e.to_string();
    let mut tree = Tree::new();
    let root = fs.metadata(ROOT).map_err(e)?;
    tree.insert(
        "/".into(),
        Node {
            file_type: root.file_type,
            permissions: root.permissions,
            uid: root.uid,
            gid: root.gid,
            size: root.size,
            nlink: root.nlink,
            blocks: root.blocks,
            bytes: Vec::new(),
            xattrs: BTreeMap::new(),
            flags: root.flags,
            rdev: root.rdev,
            times: [root.atime, root.mtime, root.ctime],
        },
    );
    let mut todo = vec![(String::new(), ROOT)];
    while let Some((path, dir)) = todo.pop() {
        for entry in fs.read_dir(dir).map_err(e)? {
            if entry.name == b"." || entry.name == b".." {
                continue;
            }
            let child = format!("{path}/{}", String::from_utf8_lossy(&entry.name));
            let meta = fs.metadata(entry.ino).map_err(e)?;
            let bytes = match meta.file_type {
                FileType::Regular => fs.read_file(entry.ino, u64::MAX).map_err(e)?,
                FileType::Symlink => fs.read_link(entry.ino).map_err(e)?,
                FileType::Directory => {
                    todo.push((child.clone(), entry.ino));
                    Vec::new()
                }
                _ => Vec::new(),
            };
            let mut xattrs = BTreeMap::new();
            for name in fs.list_xattrs(entry.ino).map_err(e)? {
                let value = fs
                    .get_xattr(entry.ino, &name)
                    .map_err(e)?
                    .unwrap_or_default();
                xattrs.insert(name, value);
            }
            tree.insert(
                child,
                Node {
                    file_type: meta.file_type,
                    permissions: meta.permissions,
                    uid: meta.uid,
                    gid: meta.gid,
                    size: meta.size,
                    nlink: meta.nlink,
                    blocks: meta.blocks,
                    bytes,
                    xattrs,
                    flags: meta.flags,
                    rdev: meta.rdev,
                    times: [meta.atime, meta.mtime, meta.ctime],
                },
            );
        }
    }
    Ok(tree)
}

/// The image every operation starts from: files small and large (the large ones in many
/// runs, their extent trees more than one leaf deep), a file with holes, a directory of
/// several blocks, xattrs in the inode and in a block, a slow symlink.
fn base_image(mke2fs: &[&str]) -> Vec<u8> {
    let img = make_empty_image(mke2fs, 16);
    let fs = Filesystem::open(&img.path, options()).unwrap();
    let bs = fs.block_size() as usize;
    let d1 = fs.mkdir(ROOT, b"d1", DIR).unwrap();
    fs.mkdir(ROOT, b"d2", DIR).unwrap();
    let small = fs.create(d1, b"small", FILE).unwrap();
    fs.write_at(small, 0, b"small file").unwrap();
    let medium = fs.create(d1, b"medium", FILE).unwrap();
    let big = fs.create(d1, b"big", FILE).unwrap();
    // Written a block at a time in turn, so each is a run of one block: more extents than
    // one leaf holds where the blocks are small. At most 200 blocks, so that no operation's
    // frees reach the pending limit that makes it commit (a sixteenth of the volume, 256
    // blocks at 4 KiB): the faults are the operation's, not a commit's.
    let extents_per_leaf = (bs as u64 - 12) / 12;
    for i in 0..(extents_per_leaf + 40).min(200) {
        fs.write_at(big, i * bs as u64, &pattern(bs, i)).unwrap();
        let other = if i < 40 {
            medium
        } else {
            holey_filler(&fs, d1)
        };
        fs.write_at(other, i.min(40) * bs as u64, &pattern(bs, i + 500))
            .unwrap();
    }
    // Every other block written: each hole takes its own allocation when filled.
    let holey = fs.create(d1, b"holey", FILE).unwrap();
    for i in (0..60u64).step_by(2) {
        fs.write_at(holey, i * bs as u64, &pattern(bs, i + 900))
            .unwrap();
    }
    let wide = fs.mkdir(ROOT, b"wide", DIR).unwrap();
    for i in 0..(bs / 16) {
        fs.create(wide, format!("entry-number-{i:04}").as_bytes(), FILE)
            .unwrap();
    }
    let x = fs.create(ROOT, b"x", FILE).unwrap();
    fs.write_at(x, 0, &pattern(3000, 9)).unwrap();
    fs.set_xattr(x, b"user.small", b"v", XattrSet::Either)
        .unwrap();
    fs.set_xattr(x, b"user.big", &pattern(bs / 2, 2), XattrSet::Either)
        .unwrap();
    fs.symlink(ROOT, b"ln", &[b'l'; 300], FILE).unwrap();
    let inl = fs.create(ROOT, b"inl", FILE).unwrap();
    fs.write_at(inl, 0, b"a few bytes").unwrap();
    // Attributes on a directory and on a symlink (`user.` is for files and directories
    // only, as in the kernel; a symlink takes `trusted.`).
    let d2 = fs.resolve("/d2", false).unwrap();
    fs.set_xattr(d2, b"user.dir", b"d", XattrSet::Either)
        .unwrap();
    let ln = fs.resolve("/ln", false).unwrap();
    fs.set_xattr(ln, b"trusted.link", b"l", XattrSet::Either)
        .unwrap();
    // A fast symlink whose attribute is in a block: its i_blocks counts that block alone.
    let fast = fs.symlink(ROOT, b"fl", b"short-target", FILE).unwrap();
    fs.set_xattr(fast, b"trusted.big", &pattern(bs / 2, 10), XattrSet::Either)
        .unwrap();
    // A small directory (inline where the filesystem has inline_data), an empty one to
    // rename a directory over, and, with inline_data, a directory one entry short of
    // leaving its inode.
    let small_dir = fs.mkdir(ROOT, b"sd", DIR).unwrap();
    fs.create(small_dir, b"a", FILE).unwrap();
    fs.mkdir(small_dir, b"b", DIR).unwrap();
    fs.mkdir(ROOT, b"empty", DIR).unwrap();
    // With inline_data, a directory one entry short of leaving its inode; and on every
    // filesystem one whose single block is full, so that the next entry makes it indexed
    // (block 0 turns from a leaf into the htree root) where dir_index is on.
    let block = u64::from(fs.block_size());
    if has_inline_data(&fs) {
        one_entry_short(&fs, "full", |size| size < block);
    }
    one_entry_short(&fs, "line", |size| size <= block);
    fs.unmount().unwrap();
    e2fsck_clean(&img.path).unwrap();
    std::fs::read(&img.path).unwrap()
}

/// Whether `fs` stores small files and directories in their inodes (inline_data).
fn has_inline_data(fs: &Filesystem) -> bool {
    fs.superblock()
        .incompat()
        .contains(IncompatFeatures::INLINE_DATA)
}

/// Names of the entries [`one_entry_short`] fills a directory with.
fn full_entry(i: usize) -> String {
    format!("entry-{i:02}")
}

/// `/NAME`: a directory one entry short of the point where its size stops being
/// `below(size)`, so that the next entry changes its form. Found by filling a probe
/// directory until it gets there, then making `/NAME` with one entry fewer.
fn one_entry_short(fs: &Filesystem, name: &str, below: impl Fn(u64) -> bool) {
    let probe = fs.mkdir(ROOT, b"probe", DIR).unwrap();
    let mut fits = 0;
    while below(fs.metadata(probe).unwrap().size) {
        fs.create(probe, full_entry(fits).as_bytes(), FILE).unwrap();
        fits += 1;
    }
    for i in 0..fits {
        fs.unlink(probe, full_entry(i).as_bytes()).unwrap();
    }
    fs.rmdir(ROOT, b"probe").unwrap();
    let full = fs.mkdir(ROOT, name.as_bytes(), DIR).unwrap();
    for i in 0..fits - 1 {
        fs.create(full, full_entry(i).as_bytes(), FILE).unwrap();
    }
    assert!(
        below(fs.metadata(full).unwrap().size),
        "/{name} is full already"
    );
}

/// An access or default ACL in the xattr form (version 2) with a named user, so that it is
/// stored and not folded into the permission bits: owner rwx, user 1000 r, group r-x,
/// mask r-x, other r.
fn named_acl() -> Vec<u8> {
    const NO_ID: u32 = u32::MAX;
    let entries: [(u16, u16, u32); 5] = [
        (0x01, 7, NO_ID),
        (0x02, 4, 1000),
        (0x04, 5, NO_ID),
        (0x10, 5, NO_ID),
        (0x20, 4, NO_ID),
    ];
    let mut out = 2u32.to_le_bytes().to_vec();
    for (tag, perm, id) in entries {
        out.extend_from_slice(&tag.to_le_bytes());
        out.extend_from_slice(&perm.to_le_bytes());
        out.extend_from_slice(&id.to_le_bytes());
    }
    out
}

/// The file the base image's large file is interleaved with past `medium`'s 40 blocks.
fn holey_filler(fs: &Filesystem, d1: u32) -> u32 {
    match fs.lookup(d1, b"filler").unwrap() {
        Some(ino) => ino,
        None => fs.create(d1, b"filler", FILE).unwrap(),
    }
}

type Op = fn(&Filesystem) -> e4_fs::Result<()>;

fn at(fs: &Filesystem, path: &str) -> e4_fs::Result<u32> {
    fs.resolve(path, false)
}

/// The file a write operation writes: a write that finds the filesystem full part-way stops
/// short and keeps what it wrote (as the kernel's does), so after a success the file may
/// hold a prefix of the write; after a failure its structure is as before, but blocks it
/// already had may hold part of the new bytes (data is written in place). Everything else
/// must still be the before or the after state.
fn written_file(op: &str) -> Option<&'static str> {
    match op {
        "append" => Some("/d1/medium"),
        "sparse write" => Some("/d1/big"),
        "fill holes" => Some("/d1/holey"),
        "grow an inline file" => Some("/inl"),
        "overwrite in place" => Some("/d1/big"),
        _ => None,
    }
}

/// The file an allocating fallocate changes: one that finds the filesystem full keeps what
/// it allocated, as `ext4_alloc_file_blocks` does, so after an allocation fault the file
/// may lie between its before and after states (`tests/fallocate_full.rs`).
fn allocated_file(op: &str) -> Option<&'static str> {
    match op {
        "fallocate" => Some("/d1/medium"),
        "fallocate over holes" => Some("/d1/holey"),
        "fallocate keeping the size" => Some("/d1/small"),
        _ => None,
    }
}

/// Every operation, by name. Each resolves its paths itself, so lookups are fault points too.
/// The fallocate family needs extents; the inline directory's growth needs inline_data.
fn operations(extents: bool, inline: bool) -> Vec<(&'static str, Op)> {
    let mut ops: Vec<(&'static str, Op)> = vec![
        ("create", |fs| {
            fs.create(at(fs, "/d2")?, b"new", FILE).map(drop)
        }),
        ("mkdir", |fs| {
            fs.mkdir(at(fs, "/d2")?, b"new", DIR).map(drop)
        }),
        ("slow symlink", |fs| {
            fs.symlink(at(fs, "/d2")?, b"sl", &[b's'; 200], FILE)
                .map(drop)
        }),
        ("link", |fs| {
            fs.link(at(fs, "/d1/small")?, at(fs, "/d2")?, b"hl")
        }),
        ("create in a wide directory", |fs| {
            fs.create(at(fs, "/wide")?, b"one-more-entry", FILE)
                .map(drop)
        }),
        ("unlink a large file", |fs| {
            fs.unlink(at(fs, "/d1")?, b"big")
        }),
        ("unlink from a wide directory", |fs| {
            fs.unlink(at(fs, "/wide")?, b"entry-number-0007")
        }),
        ("unlink a file with an xattr block", |fs| {
            fs.unlink(ROOT, b"x")
        }),
        ("rmdir", |fs| fs.rmdir(ROOT, b"d2")),
        ("rename across directories", |fs| {
            fs.rename(
                at(fs, "/d1")?,
                b"medium",
                at(fs, "/d2")?,
                b"m",
                RenameMode::Replace,
            )
        }),
        ("rename over a file with an xattr block", |fs| {
            fs.rename(at(fs, "/d1")?, b"small", ROOT, b"x", RenameMode::Replace)
        }),
        ("rename a directory into another", |fs| {
            fs.rename(ROOT, b"d1", at(fs, "/wide")?, b"moved", RenameMode::Replace)
        }),
        ("append", |fs| {
            let bs = fs.block_size() as usize;
            fs.write_at(at(fs, "/d1/medium")?, 40 * bs as u64, &pattern(60 * bs, 1))
                .map(drop)
        }),
        ("sparse write", |fs| {
            let bs = u64::from(fs.block_size());
            fs.write_at(at(fs, "/d1/big")?, 5000 * bs + 7, b"far away")
                .map(drop)
        }),
        ("grow an inline file", |fs| {
            fs.write_at(at(fs, "/inl")?, 0, &pattern(500, 3)).map(drop)
        }),
        ("truncate", |fs| fs.truncate(at(fs, "/d1/big")?, 1000)),
        ("fill holes", |fs| {
            let bs = fs.block_size() as usize;
            fs.write_at(at(fs, "/d1/holey")?, 0, &pattern(60 * bs, 5))
                .map(drop)
        }),
        ("truncate up", |fs| {
            fs.truncate(at(fs, "/d1/small")?, 1 << 20)
        }),
        ("xattr into a block", |fs| {
            let bs = fs.block_size() as usize;
            fs.set_xattr(
                at(fs, "/d1/small")?,
                b"user.b",
                &pattern(bs / 2, 4),
                XattrSet::Either,
            )
        }),
        ("xattr removed", |fs| {
            fs.remove_xattr(at(fs, "/x")?, b"user.big")
        }),
        ("fast symlink", |fs| {
            fs.symlink(at(fs, "/d2")?, b"fs", b"target", FILE).map(drop)
        }),
        ("mknod", |fs| {
            fs.mknod(at(fs, "/d2")?, b"dev", FileType::CharDevice, (1, 3), FILE)
                .map(drop)
        }),
        ("rename exchanging a file and a directory", |fs| {
            fs.rename(ROOT, b"x", ROOT, b"d2", RenameMode::Exchange)
        }),
        ("rename refusing to replace", |fs| {
            fs.rename(
                at(fs, "/d1")?,
                b"small",
                at(fs, "/d2")?,
                b"s",
                RenameMode::NoReplace,
            )
        }),
        ("truncate through setattr", |fs| {
            fs.setattr(
                at(fs, "/d1/big")?,
                &SetAttributes {
                    size: Some(5000),
                    ..SetAttributes::default()
                },
            )
            .map(drop)
        }),
        ("last close of an unlinked file", |fs| {
            let big = at(fs, "/d1/big")?;
            fs.open_inode(big)?;
            fs.unlink(at(fs, "/d1")?, b"big")?;
            fs.release_inode(big)
        }),
        ("chmod", |fs| {
            fs.setattr(
                at(fs, "/d1/big")?,
                &SetAttributes {
                    permissions: Some(0o600),
                    ..SetAttributes::default()
                },
            )
            .map(drop)
        }),
        ("chown", |fs| {
            fs.setattr(
                at(fs, "/d1/big")?,
                &SetAttributes {
                    uid: Some(1000),
                    gid: Some(1000),
                    ..SetAttributes::default()
                },
            )
            .map(drop)
        }),
        ("set times", |fs| {
            let when = Timestamp {
                seconds: 1_000_000_000,
                nanoseconds: 5,
            };
            fs.setattr(
                at(fs, "/d1/small")?,
                &SetAttributes {
                    atime: Some(when),
                    mtime: Some(when),
                    ..SetAttributes::default()
                },
            )
            .map(drop)
        }),
        ("overwrite in place", |fs| {
            let bs = fs.block_size() as usize;
            fs.write_at(at(fs, "/d1/big")?, 3 * bs as u64 + 5, &pattern(2 * bs, 6))
                .map(drop)
        }),
        ("truncate a file with an xattr block to nothing", |fs| {
            fs.truncate(at(fs, "/x")?, 0)
        }),
        ("xattr replaced in a block", |fs| {
            let bs = fs.block_size() as usize;
            fs.set_xattr(
                at(fs, "/x")?,
                b"user.big",
                &pattern(bs / 3, 7),
                XattrSet::Replace,
            )
        }),
        ("xattr on a directory, into a block", |fs| {
            let bs = fs.block_size() as usize;
            fs.set_xattr(
                at(fs, "/d1")?,
                b"user.dirbig",
                &pattern(bs / 2, 8),
                XattrSet::Create,
            )
        }),
        ("xattr removed from a directory", |fs| {
            fs.remove_xattr(at(fs, "/d2")?, b"user.dir")
        }),
        ("xattr on a symlink", |fs| {
            fs.set_xattr(at(fs, "/ln")?, b"trusted.more", b"m", XattrSet::Create)
        }),
        ("xattr removed from a symlink", |fs| {
            fs.remove_xattr(at(fs, "/ln")?, b"trusted.link")
        }),
        ("xattr block removed from a fast symlink", |fs| {
            fs.remove_xattr(at(fs, "/fl")?, b"trusted.big")
        }),
        ("unlink a fast symlink with an xattr block", |fs| {
            fs.unlink(ROOT, b"fl")
        }),
        ("access ACL on a directory", |fs| {
            fs.set_xattr(
                at(fs, "/d1")?,
                b"system.posix_acl_access",
                &named_acl(),
                XattrSet::Either,
            )
        }),
        ("default ACL on a directory", |fs| {
            fs.set_xattr(
                at(fs, "/d2")?,
                b"system.posix_acl_default",
                &named_acl(),
                XattrSet::Either,
            )
        }),
        ("unlink from a small directory", |fs| {
            fs.unlink(at(fs, "/sd")?, b"a")
        }),
        ("rename within a small directory", |fs| {
            let sd = at(fs, "/sd")?;
            fs.rename(sd, b"a", sd, b"renamed-a", RenameMode::Replace)
        }),
        ("rename a directory out of a small directory", |fs| {
            fs.rename(
                at(fs, "/sd")?,
                b"b",
                at(fs, "/d1")?,
                b"b",
                RenameMode::Replace,
            )
        }),
        ("rename a directory over an empty one", |fs| {
            fs.rename(ROOT, b"d2", ROOT, b"empty", RenameMode::Replace)
        }),
        ("rmdir a small directory's subdirectory", |fs| {
            fs.rmdir(at(fs, "/sd")?, b"b")
        }),
        ("create in a full one-block directory", |fs| {
            fs.create(at(fs, "/line")?, b"one-entry-too-many", FILE)
                .map(drop)
        }),
        ("link into a full one-block directory", |fs| {
            fs.link(
                at(fs, "/d1/small")?,
                at(fs, "/line")?,
                b"one-entry-too-many",
            )
        }),
        ("rename a directory into a full one-block directory", |fs| {
            fs.rename(
                at(fs, "/sd")?,
                b"b",
                at(fs, "/line")?,
                b"one-entry-too-many",
                RenameMode::Replace,
            )
        }),
    ];
    if inline {
        ops.push(("an inline directory grows into a block", |fs| {
            fs.create(at(fs, "/full")?, b"one-entry-too-many", FILE)
                .map(drop)
        }));
        ops.push(("rename into a full inline directory", |fs| {
            fs.rename(
                at(fs, "/sd")?,
                b"a",
                at(fs, "/full")?,
                b"one-entry-too-many",
                RenameMode::Replace,
            )
        }));
    }
    if extents {
        let more: Vec<(&'static str, Op)> = vec![
            ("fallocate", |fs| {
                let bs = u64::from(fs.block_size());
                fs.fallocate(at(fs, "/d1/medium")?, FallocateMode::Allocate, 0, 200 * bs)
            }),
            ("fallocate over holes", |fs| {
                let bs = u64::from(fs.block_size());
                fs.fallocate(at(fs, "/d1/holey")?, FallocateMode::Allocate, 0, 60 * bs)
            }),
            ("fallocate keeping the size", |fs| {
                let bs = u64::from(fs.block_size());
                fs.fallocate(at(fs, "/d1/small")?, FallocateMode::KeepSize, 0, 100 * bs)
            }),
            ("punch", |fs| {
                let bs = u64::from(fs.block_size());
                fs.fallocate(
                    at(fs, "/d1/big")?,
                    FallocateMode::PunchHole,
                    10 * bs + 3,
                    50 * bs,
                )
            }),
            ("zero range", |fs| {
                let bs = u64::from(fs.block_size());
                fs.fallocate(
                    at(fs, "/d1/big")?,
                    FallocateMode::ZeroRange,
                    100 * bs,
                    80 * bs,
                )
            }),
            ("collapse", |fs| {
                let bs = u64::from(fs.block_size());
                fs.fallocate(
                    at(fs, "/d1/big")?,
                    FallocateMode::CollapseRange,
                    8 * bs,
                    16 * bs,
                )
            }),
            ("insert", |fs| {
                let bs = u64::from(fs.block_size());
                fs.fallocate(
                    at(fs, "/d1/big")?,
                    FallocateMode::InsertRange,
                    8 * bs,
                    16 * bs,
                )
            }),
        ];
        ops.extend(more);
    }
    ops
}

/// What to make fail during one run.
#[derive(Debug, Clone, Copy)]
enum Injected {
    Nothing,
    Device(Fault),
    /// The allocation after this many.
    Allocation(u64),
}

/// What a run saw: the operation's outcome, the device counts and allocations during it,
/// and what the commit and unmount wrote.
struct Run {
    outcome: e4_fs::Result<()>,
    /// The unmount's outcome: it fails when an undo could not put everything back.
    unmounted: e4_fs::Result<()>,
    /// The tree the open filesystem showed after the operation.
    live: Result<Tree, String>,
    reads: u64,
    writes: u64,
    allocations: u64,
    /// What the run wrote to the image (it ends with the unmount).
    written: Written,
}

fn run(base: &Arc<Vec<u8>>, op: Op, injected: Injected) -> Run {
    let device = Arc::new(FaultyDevice::new(
        OverlayDevice::new(Arc::clone(base)),
        Fault::Never,
    ));
    let fs = Filesystem::open_device(Arc::clone(&device) as Arc<dyn Device>, options()).unwrap();
    let (reads0, writes0, _) = device.counts();
    let allocations0 = fs.allocations_seen();
    match injected {
        Injected::Nothing => {}
        Injected::Device(fault) => device.set_fault(match fault {
            Fault::Read(n) => Fault::Read(reads0 + n),
            Fault::CorruptRead(n) => Fault::CorruptRead(reads0 + n),
            Fault::WritesFrom(n) => Fault::WritesFrom(writes0 + n),
            other => other,
        }),
        Injected::Allocation(n) => fs.fail_allocations_after(Some(n)),
    }
    let outcome = op(&fs);
    let (reads, writes, _) = device.counts();
    device.set_fault(Fault::Never);
    fs.fail_allocations_after(None);
    // What the filesystem shows before it writes anything back: a failed operation must
    // leave its caches (inode records, blocks) as they were, not only the disk.
    let live = tree_of(&fs);
    let allocations = fs.allocations_seen() - allocations0;
    let unmounted = fs.unmount();
    Run {
        outcome,
        unmounted,
        live,
        reads: reads - reads0,
        writes: writes - writes0,
        allocations,
        written: device.inner().take_written(),
    }
}

/// `tree` without its times, for comparing runs with each other: every run sets times
/// from its own clock.
fn timeless(tree: &Tree) -> Tree {
    tree.iter()
        .map(|(path, node)| {
            let mut node = node.clone();
            node.times = [Timestamp::default(); 3];
            (path.clone(), node)
        })
        .collect()
}

/// `tree` without the contents of regular files: a failed device write of file data can
/// leave part of the data written (no filesystem can take back bytes the device already
/// holds), but never a change to the structure.
fn structure(tree: &Tree) -> Tree {
    tree.iter()
        .map(|(path, node)| {
            let mut node = node.clone();
            if node.file_type == FileType::Regular {
                node.bytes.clear();
            }
            (path.clone(), node)
        })
        .collect()
}

/// Runs every operation of `ops` under every single fault, on `base`; returns the problems.
/// Damaged reads are injected only where all metadata carries checksums (`checksums`):
/// without them a flipped bit in an inode-table or indirect block is indistinguishable from
/// data, for e4 as for the kernel.
fn sweep(profile: &str, base: &[u8], ops: &[(&'static str, Op)], checksums: bool) -> Vec<String> {
    let base = Arc::new(base.to_vec());
    let mut scratch = ScratchImage::new(Arc::clone(&base));
    let before = timeless(&scratch.snapshot().unwrap());
    let mut problems = Vec::new();
    for &(name, op) in ops {
        let clean = run(&base, op, Injected::Nothing);
        if let Err(e) = &clean.outcome {
            problems.push(format!("{profile}, {name}: fails without a fault: {e}"));
            continue;
        }
        scratch.hold(&clean.written);
        let after = scratch.snapshot().unwrap();
        if clean.live.as_ref() != Ok(&after) {
            problems.push(format!(
                "{profile}, {name}: without a fault, the open filesystem showed a tree its \
                 image does not hold"
            ));
            continue;
        }
        let after = timeless(&after);
        // The after state is one a run may end in: it must be clean itself (an operation
        // whose every faulted run fails is otherwise never checked).
        if let Err(report) = e2fsck_clean(&scratch.path) {
            let first = e2fsck_lines(&report);
            problems.push(format!(
                "{profile}, {name}: without a fault, e2fsck: {}",
                first.join(" | ")
            ));
            continue;
        }
        let mut faults: Vec<Injected> = Vec::new();
        faults.extend((0..clean.reads).map(|n| Injected::Device(Fault::Read(n))));
        if checksums {
            faults.extend((0..clean.reads).map(|n| Injected::Device(Fault::CorruptRead(n))));
        }
        faults.extend((0..clean.writes).map(|n| Injected::Device(Fault::WritesFrom(n))));
        faults.extend((0..clean.allocations).map(Injected::Allocation));
        for injected in faults {
            let faulty = run(&base, op, injected);
            let what = format!(
                "{profile}, {name}, {injected:?} ({:?})",
                faulty.outcome.as_ref().err()
            );
            if let Err(e) = &faulty.unmounted {
                problems.push(format!("{what}: the unmount failed: {e}"));
                continue;
            }
            scratch.hold(&faulty.written);
            let (tree, live) = match (scratch.snapshot(), faulty.live) {
                (Ok(tree), Ok(live)) => (tree, live),
                (Err(e), _) | (_, Err(e)) => {
                    problems.push(format!("{what}: the image cannot be read: {e}"));
                    continue;
                }
            };
            if live != tree {
                problems.push(format!(
                    "{what}: the open filesystem showed a tree its image does not hold ({})",
                    first_difference(&live, &tree)
                ));
                continue;
            }
            let (mut tree, mut before, mut after) =
                (timeless(&tree), before.clone(), after.clone());
            if matches!(injected, Injected::Device(Fault::WritesFrom(_))) {
                (tree, before, after) = (structure(&tree), structure(&before), structure(&after));
            }
            if let Some(file) = written_file(name) {
                for t in [&mut tree, &mut before, &mut after] {
                    match &faulty.outcome {
                        Ok(()) => drop(t.remove(file)),
                        Err(_) => {
                            if let Some(node) = t.get_mut(file) {
                                node.bytes.clear();
                            }
                        }
                    }
                }
            }
            if let (Some(file), Injected::Allocation(_), Err(Error::NoSpace(Shortage::Blocks))) =
                (allocated_file(name), injected, &faulty.outcome)
            {
                let partial = match (tree.get(file), before.get(file), after.get(file)) {
                    (Some(now), Some(old), Some(new)) => {
                        let between = |x: u64, a: u64, b: u64| a.min(b) <= x && x <= a.max(b);
                        let kept = old.bytes.len().min(now.bytes.len());
                        between(now.size, old.size, new.size)
                            && between(now.blocks, old.blocks, new.blocks)
                            && now.bytes[..kept] == old.bytes[..kept]
                            && now.bytes[kept..].iter().all(|&b| b == 0)
                    }
                    _ => false,
                };
                if !partial {
                    problems.push(format!(
                        "{what}: {file} is not between its before and after states"
                    ));
                    continue;
                }
                // Its size, blocks and contents checked (zeros where it grew), the rest of
                // the tree must be the before or the after state.
                for t in [&mut tree, &mut before, &mut after] {
                    if let Some(node) = t.get_mut(file) {
                        (node.size, node.blocks) = (0, 0);
                        node.bytes.clear();
                    }
                }
            }
            if tree != before && tree != after {
                let changed: Vec<_> = tree
                    .iter()
                    .filter(|(p, n)| before.get(*p) != Some(n) && after.get(*p) != Some(n))
                    .map(|(p, _)| p.clone())
                    .chain(
                        before
                            .keys()
                            .filter(|p| !tree.contains_key(*p) && after.contains_key(*p))
                            .cloned(),
                    )
                    .take(5)
                    .collect();
                problems.push(format!(
                    "{what}: the tree is neither before nor after: {changed:?}"
                ));
                continue;
            }
            if faulty.outcome.is_ok() && tree != after {
                problems.push(format!(
                    "{what}: succeeded but the tree is not the after state"
                ));
                continue;
            }
            if let Err(report) = e2fsck_clean(&scratch.path) {
                let first = e2fsck_lines(&report);
                problems.push(format!("{what}: e2fsck: {}", first.join(" | ")));
            }
        }
    }
    problems
}

/// The first problems of an `e2fsck_clean` report, without its command line and pass
/// headers.
fn e2fsck_lines(report: &str) -> Vec<&str> {
    report
        .lines()
        .skip(1)
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with("Pass "))
        .take(8)
        .collect()
}

fn sweep_profile(profile: &[&str]) {
    let base = base_image(profile);
    let fs = Filesystem::open_bytes(base.clone(), OpenOptions::default()).unwrap();
    let extents = fs
        .superblock()
        .incompat()
        .contains(IncompatFeatures::EXTENTS);
    // Block maps carry no checksum even with metadata_csum: a damaged indirect block reads
    // as a valid one with other pointers, for e4 as for the kernel.
    let checksums = fs.superblock().has_metadata_csum() && extents;
    let inline = has_inline_data(&fs);
    drop(fs);
    let problems = sweep(
        &format!("{profile:?}"),
        &base,
        &operations(extents, inline),
        checksums,
    );
    assert!(
        problems.is_empty(),
        "{} runs left damage:\n{}",
        problems.len(),
        problems.join("\n")
    );
}

/// One profile per family, with chosen block sizes.
#[test]
fn ext4_operations_are_all_or_nothing_under_every_fault() {
    sweep_profile(&["-t", "ext4", "-b", "4096"]);
}

#[test]
fn ext4_inline_data_operations_are_all_or_nothing_under_every_fault() {
    sweep_profile(&["-t", "ext4", "-O", "inline_data", "-b", "1024"]);
}

#[test]
fn ext3_operations_are_all_or_nothing_under_every_fault() {
    sweep_profile(&["-t", "ext3", "-b", "1024"]);
}

#[test]
fn ext2_operations_are_all_or_nothing_under_every_fault() {
    sweep_profile(&["-t", "ext2", "-b", "4096", "-O", "^dir_index"]);
}

/// The test kit's profiles (the feature matrix of the read-path tests), by name, each swept
/// by its `testkit_*_sweep` test; [`every_testkit_profile_is_swept`] keeps the list whole.
const SWEPT_TESTKIT_PROFILES: &[&str] = &[
    "ext4-default-4k",
    "ext4-1k",
    "ext4-uninit-bg",
    "ext4-inline-data",
    "ext4-meta-bg",
    "ext4-128-byte-inodes",
    "ext3",
    "ext2",
];

fn sweep_testkit_profile(name: &str) {
    let profile = PROFILES
        .iter()
        .find(|p| p.name == name)
        .unwrap_or_else(|| panic!("the test kit has no profile {name}"));
    sweep_profile(profile.mke2fs_args);
}

#[test]
fn every_testkit_profile_is_swept() {
    for profile in PROFILES {
        assert!(
            SWEPT_TESTKIT_PROFILES.contains(&profile.name),
            "the fault sweep does not cover the test kit's profile {}",
            profile.name
        );
    }
}

#[test]
fn testkit_ext4_default_4k_sweep() {
    sweep_testkit_profile("ext4-default-4k");
}

#[test]
fn testkit_ext4_1k_sweep() {
    sweep_testkit_profile("ext4-1k");
}

#[test]
fn testkit_ext4_uninit_bg_sweep() {
    sweep_testkit_profile("ext4-uninit-bg");
}

#[test]
fn testkit_ext4_inline_data_sweep() {
    sweep_testkit_profile("ext4-inline-data");
}

#[test]
fn testkit_ext4_meta_bg_sweep() {
    sweep_testkit_profile("ext4-meta-bg");
}

#[test]
fn testkit_ext4_128_byte_inodes_sweep() {
    sweep_testkit_profile("ext4-128-byte-inodes");
}

#[test]
fn testkit_ext3_sweep() {
    sweep_testkit_profile("ext3");
}

#[test]
fn testkit_ext2_sweep() {
    sweep_testkit_profile("ext2");
}

/// Variants the test kit lacks: ext4 with block maps instead of extents (64bit needs
/// extents, so without it too), ext4 without 64bit and flex_bg (32-byte descriptors, bitmaps and tables in each group), and inline
/// data in 1 KiB inodes on 4 KiB blocks (large inline directories).
#[test]
fn ext4_without_extents_sweep() {
    sweep_profile(&["-t", "ext4", "-O", "^extents,^64bit"]);
}

#[test]
fn ext4_without_64bit_or_flex_bg_sweep() {
    sweep_profile(&["-t", "ext4", "-O", "^64bit,^flex_bg"]);
}

#[test]
fn ext4_inline_data_in_huge_inodes_sweep() {
    sweep_profile(&[
        "-t",
        "ext4",
        "-O",
        "inline_data",
        "-I",
        "1024",
        "-b",
        "4096",
    ]);
}

/// The sweep's own check: an operation that leaves damage is reported (a guard against a
/// sweep that cannot fail, e.g. one whose snapshots always compare equal).
/// An operation undone after it rewrote a block in another role puts the block's role back
/// with its bytes. A rename into a full one-block directory makes it indexed (block 0
/// becomes the htree root) before the moved directory's ".." is changed, which may fail.
/// The leaf put back was changed earlier in the same transaction, so its checksum is only
/// computed at write-back, by the block's role: sealed as a root, the leaf went out with a
/// stale checksum. Every read of the run fails in turn, or comes back damaged; each image
/// must pass e2fsck.
#[test]
fn an_undone_operation_puts_back_the_roles_of_the_blocks_it_rewrote() {
    let base = Arc::new(base_image(&["-t", "ext4", "-b", "1024"]));
    let op: Op = |fs| {
        let line = at(fs, "/line")?;
        // Block 0 changed in this transaction: its checksum in memory is stale.
        fs.unlink(line, full_entry(0).as_bytes())?;
        fs.create(line, full_entry(0).as_bytes(), FILE)?;
        fs.rename(
            at(fs, "/sd")?,
            b"b",
            line,
            b"one-entry-too-many",
            RenameMode::Replace,
        )
    };
    let clean = run(&base, op, Injected::Nothing);
    clean.outcome.unwrap();
    let mut scratch = ScratchImage::new(Arc::clone(&base));
    let faults = (0..clean.reads).flat_map(|n| [Fault::Read(n), Fault::CorruptRead(n)]);
    for fault in faults {
        let faulty = run(&base, op, Injected::Device(fault));
        faulty.unmounted.unwrap();
        scratch.hold(&faulty.written);
        if let Err(report) = e2fsck_clean(&scratch.path) {
            panic!("{fault:?} ({:?}): {report}", faulty.outcome.err());
        }
    }
}

#[test]
fn the_sweep_reports_an_operation_that_fails_half_way() {
    let base = base_image(&["-t", "ext4"]);
    let ops: Vec<(&'static str, Op)> = vec![("two creates", |fs| {
        let d2 = at(fs, "/d2")?;
        fs.create(d2, b"first", FILE)?;
        fs.create(d2, b"second", FILE).map(drop)
    })];
    let problems = sweep("ext4", &base, &ops, true);
    assert!(
        problems
            .iter()
            .any(|p| p.contains("neither before nor after")),
        "two creates failing between them must be caught: {problems:?}"
    );
}

/// Several threads change their own directories while allocations fail at random moments
/// (every allocation for a while, then none), so failures and their undoing run beside
/// other threads' work on shared groups, bitmaps and caches: each thread keeps
/// a model of its directory, changed only by the operations that succeeded (a write that
/// stops short by what it wrote), and at the end every directory holds exactly its model
/// and `e2fsck -fn` is clean.
#[test]
fn concurrent_operations_under_random_faults_are_all_or_nothing() {
    use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

    let img = make_empty_image(&["-t", "ext4", "-b", "1024"], 16);
    let base = std::fs::read(&img.path).unwrap();
    let device = Arc::new(FaultyDevice::new(MemoryDevice::new(base), Fault::Never));
    let fs = Arc::new(
        Filesystem::open_device(Arc::clone(&device) as Arc<dyn Device>, options()).unwrap(),
    );
    let done = Arc::new(AtomicBool::new(false));
    // Failures seen by all workers so far: on a loaded machine the fault windows can miss
    // a worker's first 300 operations, so each goes on until some have bitten.
    let bitten = Arc::new(AtomicU32::new(0));
    let chaos = {
        let (fs, done) = (Arc::clone(&fs), Arc::clone(&done));
        std::thread::spawn(move || {
            let mut x = 12345u64;
            while !done.load(Ordering::Relaxed) {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                // Device faults here would also hit commits, which only the journal makes
                // all or nothing; the single-threaded sweep injects them into operations.
                fs.fail_allocations_after(Some(x % 3));
                std::thread::sleep(Duration::from_micros(1000 + x % 2000));
                fs.fail_allocations_after(None);
                std::thread::sleep(Duration::from_micros(500));
            }
        })
    };
    let workers: Vec<_> = (0..4u64)
        .map(|t| {
            let (fs, bitten) = (Arc::clone(&fs), Arc::clone(&bitten));
            std::thread::spawn(move || {
                let name = format!("t{t}");
                let dir = loop {
                    if let Ok(dir) = fs.mkdir(ROOT, name.as_bytes(), DIR) {
                        break dir;
                    }
                    if let Ok(Some(dir)) = fs.lookup(ROOT, name.as_bytes()) {
                        break dir;
                    }
                };
                let mut model: BTreeMap<String, Vec<u8>> = BTreeMap::new();
                let mut failed = 0u32;
                let bs = fs.block_size() as usize;
                let mut reported = 0;
                for i in 0u64.. {
                    bitten.fetch_add(failed - reported, Ordering::Relaxed);
                    reported = failed;
                    if i >= 300 && (bitten.load(Ordering::Relaxed) >= 10 || i >= 30_000) {
                        break;
                    }
                    let f = format!("f{}", i % 17);
                    match i % 6 {
                        0 | 1 => {
                            let data = pattern(bs * (1 + (i as usize % 7)), i + t * 1000);
                            // Far enough along that most writes take new blocks.
                            let offset = (i as usize % 13) * 4 * bs;
                            let ino = match fs.lookup(dir, f.as_bytes()) {
                                Ok(Some(ino)) => Some(ino),
                                Ok(None) => match fs.create(dir, f.as_bytes(), FILE) {
                                    Ok(ino) => {
                                        model.insert(f.clone(), Vec::new());
                                        Some(ino)
                                    }
                                    Err(_) => {
                                        failed += 1;
                                        None
                                    }
                                },
                                Err(_) => None,
                            };
                            if let Some(ino) = ino {
                                let written = fs.write_at(ino, offset as u64, &data);
                                failed += u32::from(written.is_err());
                                if let Ok(n) = written {
                                    let content = model.get_mut(&f).unwrap();
                                    if content.len() < offset + n {
                                        content.resize(offset + n, 0);
                                    }
                                    content[offset..offset + n].copy_from_slice(&data[..n]);
                                }
                            }
                        }
                        2 => {
                            if model.contains_key(&f) {
                                match fs.unlink(dir, f.as_bytes()) {
                                    Ok(()) => drop(model.remove(&f)),
                                    Err(_) => failed += 1,
                                }
                            }
                        }
                        3 => {
                            let to = format!("f{}", (i + 5) % 17);
                            if model.contains_key(&f)
                                && fs
                                    .rename(
                                        dir,
                                        f.as_bytes(),
                                        dir,
                                        to.as_bytes(),
                                        RenameMode::Replace,
                                    )
                                    .is_ok()
                            {
                                let content = model.remove(&f).unwrap();
                                model.insert(to, content);
                            }
                        }
                        4 => {
                            if let Some(content) = model.get_mut(&f) {
                                let ino = fs.lookup(dir, f.as_bytes()).ok().flatten();
                                let size = (content.len() / 2) as u64;
                                if ino.is_some_and(|ino| fs.truncate(ino, size).is_ok()) {
                                    content.truncate(size as usize);
                                }
                            }
                        }
                        _ => {
                            // The allocating modes past the end (issue 22: fallocate out
                            // of space left blocks in use, or mapped but free, that other
                            // threads were given again), and zeroing and punching inside.
                            if let Some(content) = model.get_mut(&f) {
                                let ino = fs.lookup(dir, f.as_bytes()).ok().flatten();
                                let size = content.len() as u64;
                                let grow = (1 + i % 9) * bs as u64;
                                let (mode, offset, len) = match (i / 6) % 4 {
                                    0 => (FallocateMode::Allocate, size, grow),
                                    1 => (FallocateMode::KeepSize, size, grow),
                                    2 => (FallocateMode::ZeroRange, size / 3, size / 3),
                                    _ => (FallocateMode::PunchHole, size / 4, size / 2),
                                };
                                match ino.map(|ino| fs.fallocate(ino, mode, offset, len)) {
                                    Some(Ok(())) => {
                                        let range = offset as usize..(offset + len) as usize;
                                        match mode {
                                            FallocateMode::Allocate => {
                                                content.resize(range.end, 0);
                                            }
                                            FallocateMode::KeepSize => {}
                                            _ => content[range].fill(0),
                                        }
                                    }
                                    Some(Err(_)) => failed += 1,
                                    None => {}
                                }
                            }
                        }
                    }
                }
                (name, model, failed)
            })
        })
        .collect();
    let models: Vec<_> = workers.into_iter().map(|w| w.join().unwrap()).collect();
    let failed: u32 = models.iter().map(|(_, _, f)| f).sum();
    assert!(
        failed >= 10,
        "only {failed} operations failed: the faults did not bite"
    );
    done.store(true, Ordering::Relaxed);
    chaos.join().unwrap();
    fs.fail_allocations_after(None);
    device.set_fault(Fault::Never);
    let fs = Arc::try_unwrap(fs).ok().unwrap();
    fs.unmount().unwrap();
    let image = device.inner().bytes();
    let tree = snapshot(&image).unwrap();
    for (name, model, _) in models {
        let held: BTreeMap<String, Vec<u8>> = tree
            .iter()
            .filter_map(|(path, node)| {
                let file = path.strip_prefix(&format!("/{name}/"))?;
                Some((file.to_string(), node.bytes.clone()))
            })
            .collect();
        assert_eq!(
            held.len(),
            model.len(),
            "{name}: {:?} vs {:?}",
            held.keys(),
            model.keys()
        );
        for (file, content) in &model {
            assert!(
                held.get(file) == Some(content),
                "{name}/{file} differs from its model"
            );
        }
    }
    let scratch = tempfile::tempdir().unwrap();
    let path = scratch.path().join("image");
    std::fs::write(&path, &image).unwrap();
    e2fsck_clean(&path).unwrap();
}

/// An inode is given back to its group's bitmap at commit; if that bitmap cannot be read,
/// the unlink must fail then and there, changing nothing, not leave a commit that fails and
/// stops the filesystem. Here group 0's inode bitmap is damaged on disk (its checksum no
/// longer matches); the unlink of a file in that group is refused, the filesystem still
/// commits and unmounts, and the tree is as before.
#[test]
fn an_unlink_whose_inode_bitmap_cannot_be_read_changes_nothing() {
    let mut base = base_image(&["-t", "ext4", "-b", "4096"]);
    let before = snapshot(&base).unwrap();
    let (bitmap, block_size) = {
        let fs = Filesystem::open_bytes(base.clone(), OpenOptions::default()).unwrap();
        (
            fs.group_descriptors()[0].inode_bitmap(),
            u64::from(fs.block_size()),
        )
    };
    // A bit past the used inodes: the bitmap's checksum no longer matches.
    base[(bitmap * block_size + 100) as usize] ^= 0x01;
    let scratch = tempfile::tempdir().unwrap();
    let path = scratch.path().join("image");
    std::fs::write(&path, &base).unwrap();
    let problems = e2fsck_problems(&path);
    assert!(!problems.is_empty(), "e2fsck must see the damage");
    let device = Arc::new(MemoryDevice::new(base));
    let fs = Filesystem::open_device(Arc::clone(&device) as Arc<dyn Device>, options()).unwrap();
    let d1 = fs.resolve("/d1", false).unwrap();
    let refused = fs.unlink(d1, b"small");
    assert!(
        matches!(refused, Err(Error::BitmapUnusable { .. })),
        "{refused:?}"
    );
    fs.sync().expect("the filesystem still commits");
    fs.unmount().expect("and unmounts");
    let after = device.bytes();
    assert_eq!(snapshot(&after).unwrap(), before);
    std::fs::write(&path, &after).unwrap();
    assert_eq!(e2fsck_problems(&path), problems, "nothing new for e2fsck");
}

//! `e4 export`: extract the whole tree with contents, modes, owners, times, symlinks, hard
//! links, device nodes and xattrs, in parallel.
//!
//! Three phases, each parallel within itself:
//! 1. walk the tree (directories fan out over the thread pool) and create the directories;
//! 2. create every other inode once, at its first path (hard links are linked afterwards),
//!    and set its owner, mode, xattrs and times;
//! 3. set directory metadata deepest first, so creating children does not disturb a
//!    parent's times.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::fs::{self, File};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use e4_fs::{FileType, Filesystem, Mapping, Metadata};
use filetime::FileTime;
use nix::sys::stat::{makedev, mknod, Mode, SFlag};
use rayon::prelude::*;

/// Bytes read per call while copying a file.
const CHUNK: usize = 1 << 20;

/// One path in the image.
struct Node {
    /// Path relative to the export root.
    path: PathBuf,
    meta: Metadata,
}

pub fn run(fs: &Filesystem, dest: &Path) -> Result<(), String> {
    if dest.exists() {
        let mut entries = fs::read_dir(dest).map_err(|e| format!("{}: {e}", dest.display()))?;
        if entries.next().is_some() {
            return Err(format!("{}: destination is not empty", dest.display()));
        }
    } else {
        fs::create_dir_all(dest).map_err(|e| format!("{}: {e}", dest.display()))?;
    }
    let root = fs
        .metadata(e4_format::inode::ROOT_INO)
        .map_err(|e| e.to_string())?;
    let visited = InodeSet::new(fs.superblock().inodes_count);
    let mut nodes = walk(fs, PathBuf::new(), root.ino, &visited)?;
    nodes.sort_by(|a, b| a.path.cmp(&b.path));
    let set_owner = nix::unistd::geteuid().is_root();

    // Phase 1: directories.
    for node in nodes
        .iter()
        .filter(|n| n.meta.file_type == FileType::Directory)
    {
        let path = dest.join(&node.path);
        fs::create_dir_all(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    }

    // Phase 2: everything else, each inode once; then hard links.
    let mut first_path: HashMap<u32, &Node> = HashMap::new();
    let mut links: Vec<(&Node, &Node)> = Vec::new();
    for node in nodes
        .iter()
        .filter(|n| n.meta.file_type != FileType::Directory)
    {
        match first_path.get(&node.meta.ino) {
            Some(primary) => links.push((node, primary)),
            None => {
                first_path.insert(node.meta.ino, node);
            }
        }
    }
    let primaries: Vec<&Node> = first_path.into_values().collect();
    primaries.par_iter().try_for_each(|node| {
        create(fs, dest, node).and_then(|()| apply_metadata(fs, dest, node, set_owner))
    })?;
    for (node, primary) in links {
        let (from, to) = (dest.join(&primary.path), dest.join(&node.path));
        fs::hard_link(&from, &to).map_err(|e| format!("{}: {e}", to.display()))?;
    }

    // Phase 3: directories, deepest first.
    let mut dirs: Vec<&Node> = nodes
        .iter()
        .filter(|n| n.meta.file_type == FileType::Directory)
        .collect();
    dirs.sort_by_key(|n| std::cmp::Reverse(n.path.components().count()));
    for depth_group in
        dirs.chunk_by(|a, b| a.path.components().count() == b.path.components().count())
    {
        depth_group
            .par_iter()
            .try_for_each(|node| apply_metadata(fs, dest, node, set_owner))?;
    }
    Ok(())
}

/// A concurrent set of inode numbers, one bit each, to refuse directory cycles.
struct InodeSet {
    words: Vec<AtomicU64>,
}

impl InodeSet {
    fn new(inodes: u32) -> Self {
        InodeSet {
            words: (0..=inodes / 64).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    /// Adds `ino`; false if it was already present.
    fn insert(&self, ino: u32) -> bool {
        let bit = 1u64 << (ino % 64);
        self.words[(ino / 64) as usize].fetch_or(bit, Ordering::Relaxed) & bit == 0
    }
}

fn walk(fs: &Filesystem, path: PathBuf, ino: u32, visited: &InodeSet) -> Result<Vec<Node>, String> {
    let shown = || format!("/{}", path.display());
    let meta = fs.metadata(ino).map_err(|e| format!("{}: {e}", shown()))?;
    if meta.file_type != FileType::Directory {
        return Ok(vec![Node { path, meta }]);
    }
    if !visited.insert(ino) {
        return Err(format!(
            "{}: directory inode {ino} appears twice (a directory cycle)",
            shown()
        ));
    }
    let dir = fs
        .read_inode(ino)
        .map_err(|e| format!("{}: {e}", shown()))?;
    let entries = fs.read_dir(&dir).map_err(|e| format!("{}: {e}", shown()))?;
    let children: Vec<Vec<Node>> = entries
        .into_par_iter()
        .map(|entry| {
            let name = OsStr::from_bytes(&entry.name);
            if entry.name.contains(&b'/') {
                return Err(format!("{}: entry name contains '/'", shown()));
            }
            walk(fs, path.join(name), entry.ino, visited)
        })
        .collect::<Result<_, _>>()?;
    let mut out = vec![Node { path, meta }];
    out.extend(children.into_iter().flatten());
    Ok(out)
}

fn create(fs: &Filesystem, dest: &Path, node: &Node) -> Result<(), String> {
    let path = dest.join(&node.path);
    let err = |e: &dyn std::fmt::Display| format!("{}: {e}", path.display());
    let inode = fs.read_inode(node.meta.ino).map_err(|e| err(&e))?;
    match node.meta.file_type {
        FileType::Regular => {
            let file = File::create(&path).map_err(|e| err(&e))?;
            copy_contents(fs, &inode, &file).map_err(|e| err(&e))?;
            file.set_len(node.meta.size).map_err(|e| err(&e))?;
        }
        FileType::Symlink => {
            let target = fs.read_link(&inode).map_err(|e| err(&e))?;
            std::os::unix::fs::symlink(OsStr::from_bytes(&target), &path).map_err(|e| err(&e))?;
        }
        FileType::CharDevice | FileType::BlockDevice | FileType::Fifo | FileType::Socket => {
            let kind = match node.meta.file_type {
                FileType::CharDevice => SFlag::S_IFCHR,
                FileType::BlockDevice => SFlag::S_IFBLK,
                FileType::Fifo => SFlag::S_IFIFO,
                _ => SFlag::S_IFSOCK,
            };
            let (major, minor) = node.meta.rdev;
            mknod(
                &path,
                kind,
                Mode::from_bits_truncate(0o600),
                makedev(major.into(), minor.into()),
            )
            .map_err(|e| err(&e))?;
        }
        FileType::Directory => unreachable!("directories are created in phase 1"),
    }
    Ok(())
}

/// Copies a file's data, leaving its holes (and unwritten extents) as holes in the copy, so
/// the work is proportional to the data, not to the file's size.
fn copy_contents(fs: &Filesystem, inode: &e4_fs::Inode, file: &File) -> Result<(), String> {
    if inode.has_flag(e4_format::inode::flags::INLINE_DATA) {
        let data = fs
            .read_all(inode, inode.size())
            .map_err(|e| e.to_string())?;
        return file.write_all_at(&data, 0).map_err(|e| e.to_string());
    }
    let bs = u64::from(fs.block_size());
    let size = inode.size();
    let blocks = size.div_ceil(bs);
    let mut buf = vec![0u8; CHUNK];
    let mut logical = 0;
    while logical < blocks {
        let mapping = fs
            .map_block(inode, logical, blocks - logical)
            .map_err(|e| e.to_string())?;
        match mapping {
            Mapping::Data {
                len,
                unwritten: false,
                ..
            } => {
                let end = ((logical + len) * bs).min(size);
                let mut offset = logical * bs;
                while offset < end {
                    let want = ((end - offset) as usize).min(CHUNK);
                    let n = fs
                        .read_at(inode, offset, &mut buf[..want])
                        .map_err(|e| e.to_string())?;
                    file.write_all_at(&buf[..n], offset)
                        .map_err(|e| e.to_string())?;
                    offset += n as u64;
                }
                logical += len;
            }
            Mapping::Data { len, .. } | Mapping::Hole { len } => logical += len,
        }
    }
    Ok(())
}

/// Owner, then permissions (chown clears setuid), then xattrs, then times.
fn apply_metadata(
    fs: &Filesystem,
    dest: &Path,
    node: &Node,
    set_owner: bool,
) -> Result<(), String> {
    let path = dest.join(&node.path);
    let err = |e: &dyn std::fmt::Display| format!("{}: {e}", path.display());
    let m = &node.meta;
    if set_owner {
        std::os::unix::fs::lchown(&path, Some(m.uid), Some(m.gid)).map_err(|e| err(&e))?;
    }
    if m.file_type != FileType::Symlink {
        fs::set_permissions(&path, fs::Permissions::from_mode(u32::from(m.permissions)))
            .map_err(|e| err(&e))?;
    }
    let inode = fs.read_inode(m.ino).map_err(|e| err(&e))?;
    for name in fs.list_xattrs(&inode).map_err(|e| err(&e))? {
        let value = fs
            .get_xattr(&inode, &name)
            .map_err(|e| err(&e))?
            .unwrap_or_default();
        // Symlinks cannot carry user.* attributes on Linux; the kernel never stores them.
        xattr::set(&path, OsStr::from_bytes(&name), &value).map_err(|e| err(&e))?;
    }
    let time = |t: e4_fs::Timestamp| FileTime::from_unix_time(t.seconds, t.nanoseconds);
    filetime::set_symlink_file_times(&path, time(m.atime), time(m.mtime)).map_err(|e| err(&e))?;
    Ok(())
}

//! Comparing two directory trees: types, permissions, owners, sizes, contents, symlink
//! targets, mtime, user xattrs and hard-link structure. (atime is not compared: reading a
//! tree to compare it changes it.)

use std::collections::{BTreeMap, HashMap};
use std::fs;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

/// What to compare beyond type, mode, owner, size and content.
#[derive(Debug, Clone, Default)]
pub struct CompareOptions {
    /// Compare mtime to the nanosecond (else to the second).
    pub mtime_nanoseconds: bool,
    /// Names at the root present on one side only that are not differences (lost+found).
    pub ignore_at_root: Vec<String>,
    /// Paths not compared at all (see [`crate::Profile::mke2fs_miscopies`]).
    pub skip_paths: Vec<String>,
    /// Compare the root directory's times (false when one side's root was made by mke2fs
    /// and the other is a source directory).
    pub root_times: bool,
}

struct Entry {
    meta: fs::Metadata,
    link_target: Option<PathBuf>,
    xattrs: BTreeMap<String, Vec<u8>>,
}

fn walk(root: &Path, rel: &Path, out: &mut BTreeMap<PathBuf, Entry>) {
    let path = root.join(rel);
    let meta = fs::symlink_metadata(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let link_target = meta
        .file_type()
        .is_symlink()
        .then(|| fs::read_link(&path).unwrap());
    let xattrs = xattr::list(&path)
        .map(|names| {
            names
                .filter(|n| n.to_string_lossy().starts_with("user."))
                .map(|n| {
                    let v = xattr::get(&path, &n).ok().flatten().unwrap_or_default();
                    (n.to_string_lossy().into_owned(), v)
                })
                .collect()
        })
        .unwrap_or_default();
    let is_dir = meta.is_dir();
    out.insert(
        rel.to_path_buf(),
        Entry {
            meta,
            link_target,
            xattrs,
        },
    );
    if is_dir {
        let mut names: Vec<_> = fs::read_dir(&path)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        names.sort();
        for name in names {
            walk(root, &rel.join(name), out);
        }
    }
}

/// Differences between trees `a` and `b`, one line each; empty when they match.
pub fn compare_trees(a: &Path, b: &Path, opts: &CompareOptions) -> Vec<String> {
    let (mut left, mut right) = (BTreeMap::new(), BTreeMap::new());
    walk(a, Path::new(""), &mut left);
    walk(b, Path::new(""), &mut right);
    for name in opts.ignore_at_root.iter().chain(&opts.skip_paths) {
        left.retain(|p, _| !p.starts_with(name));
        right.retain(|p, _| !p.starts_with(name));
    }
    let mut diffs = Vec::new();
    // Hard-link groups: the first path (in sorted order) of each inode.
    let mut first_a: HashMap<(u64, u64), PathBuf> = HashMap::new();
    let mut first_b: HashMap<(u64, u64), PathBuf> = HashMap::new();
    for (rel, ea) in &left {
        let Some(eb) = right.get(rel) else {
            diffs.push(format!("{}: only in {}", rel.display(), a.display()));
            continue;
        };
        let (ma, mb) = (&ea.meta, &eb.meta);
        let mut check = |what: &str, x: String, y: String| {
            if x != y {
                diffs.push(format!("{}: {what} differs: {x} vs {y}", rel.display()));
            }
        };
        check(
            "mode",
            format!("{:o}", ma.mode()),
            format!("{:o}", mb.mode()),
        );
        check("uid", ma.uid().to_string(), mb.uid().to_string());
        check("gid", ma.gid().to_string(), mb.gid().to_string());
        check(
            "link target",
            format!("{:?}", ea.link_target),
            format!("{:?}", eb.link_target),
        );
        check(
            "xattrs",
            format!("{:?}", ea.xattrs),
            format!("{:?}", eb.xattrs),
        );
        if !ma.is_dir() {
            check("size", ma.size().to_string(), mb.size().to_string());
            check("nlink", ma.nlink().to_string(), mb.nlink().to_string());
            if ma.file_type().is_block_device() || ma.file_type().is_char_device() {
                check("rdev", ma.rdev().to_string(), mb.rdev().to_string());
            }
        }
        let is_root = rel.as_os_str().is_empty();
        if !ma.file_type().is_symlink() && (opts.root_times || !is_root) {
            let ns = |m: &fs::Metadata| {
                if opts.mtime_nanoseconds {
                    m.mtime_nsec()
                } else {
                    0
                }
            };
            check(
                "mtime",
                format!("{}.{}", ma.mtime(), ns(ma)),
                format!("{}.{}", mb.mtime(), ns(mb)),
            );
        }
        if ma.is_file() && ma.size() == mb.size() {
            let (ca, cb) = (
                fs::read(a.join(rel)).unwrap(),
                fs::read(b.join(rel)).unwrap(),
            );
            if ca != cb {
                let at = ca.iter().zip(&cb).position(|(x, y)| x != y).unwrap_or(0);
                diffs.push(format!("{}: contents differ from byte {at}", rel.display()));
            }
        }
        if !ma.is_dir() && ma.nlink() > 1 {
            let fa = first_a
                .entry((ma.dev(), ma.ino()))
                .or_insert_with(|| rel.clone())
                .clone();
            let fb = first_b
                .entry((mb.dev(), mb.ino()))
                .or_insert_with(|| rel.clone())
                .clone();
            if fa != fb {
                diffs.push(format!(
                    "{}: hard-linked to {} vs {}",
                    rel.display(),
                    fa.display(),
                    fb.display()
                ));
            }
        }
    }
    for rel in right.keys().filter(|r| !left.contains_key(*r)) {
        diffs.push(format!("{}: only in {}", rel.display(), b.display()));
    }
    diffs
}

//! The write path on damaged images: the input is an image (its length rounded down to a
//! multiple of 1 KiB) followed by a tail of at most 1,023 bytes that drives a short
//! sequence of write operations. The image is opened writable in memory (checksums are
//! verified: a writable open refuses otherwise, so seeds without metadata_csum let the
//! damage reach further), the operations run on the root, on directories and files found
//! by listing it and on what they create, and the filesystem is unmounted; what it leaves
//! is opened again read-only and walked. Every result may be an error; none may panic or
//! hang. Seed with `scripts/fuzz-seed-write.sh`.
#![no_main]

use std::sync::Arc;
use std::time::Duration;

use e4_fs::device::MemoryDevice;
use e4_fs::{
    Creator, FallocateMode, FileType, Filesystem, OpenOptions, RenameMode, SetAttributes, XattrSet,
};
use libfuzzer_sys::fuzz_target;

const ROOT: u32 = 2;
/// At most this many operations a run.
const MAX_OPS: usize = 24;
const NAMES: &[&[u8]] = &[
    b"a",
    b"b",
    b"d",
    b"f",
    b"lost+found",
    b"x.long-name-for-a-bigger-entry",
];
const XATTRS: &[&[u8]] = &[
    b"user.a",
    b"user.bb",
    b"trusted.t",
    b"security.selinux",
    b"system.posix_acl_access",
];

/// Reads the operation tail a byte at a time; zeros once it runs out.
struct Tail<'a>(&'a [u8]);

impl Tail<'_> {
    fn byte(&mut self) -> u8 {
        match self.0.split_first() {
            Some((b, rest)) => {
                self.0 = rest;
                *b
            }
            None => 0,
        }
    }
    fn u16(&mut self) -> u16 {
        u16::from_le_bytes([self.byte(), self.byte()])
    }
    fn pick<T: Copy>(&mut self, from: &[T]) -> T {
        from[self.byte() as usize % from.len()]
    }
}

/// Inodes seen so far: directories and everything else.
struct Known {
    dirs: Vec<u32>,
    files: Vec<u32>,
    names: Vec<Vec<u8>>,
}

impl Known {
    fn learn(&mut self, fs: &Filesystem, dir: u32) {
        let Ok(entries) = fs.read_dir(dir) else {
            return;
        };
        for entry in entries.into_iter().take(32) {
            if entry.name == b"." || entry.name == b".." {
                continue;
            }
            if self.names.len() < 64 && !self.names.contains(&entry.name) {
                self.names.push(entry.name.clone());
            }
            let is_dir = match entry.file_type {
                Some(t) => t == FileType::Directory,
                None => fs
                    .read_inode(entry.ino)
                    .is_ok_and(|i| i.file_type() == Some(FileType::Directory)),
            };
            self.add(entry.ino, is_dir);
        }
    }
    fn add(&mut self, ino: u32, is_dir: bool) {
        let list = if is_dir {
            &mut self.dirs
        } else {
            &mut self.files
        };
        if list.len() < 64 && !list.contains(&ino) {
            list.push(ino);
        }
    }
    fn name(&self, t: &mut Tail) -> Vec<u8> {
        let n = t.byte() as usize;
        if n & 1 == 1 && !self.names.is_empty() {
            self.names[(n >> 1) % self.names.len()].clone()
        } else {
            NAMES[(n >> 1) % NAMES.len()].to_vec()
        }
    }
    fn dir(&self, t: &mut Tail) -> u32 {
        t.pick(&self.dirs)
    }
    fn any(&self, t: &mut Tail) -> u32 {
        let n = t.byte() as usize;
        if n & 1 == 1 && !self.files.is_empty() {
            self.files[(n >> 1) % self.files.len()]
        } else {
            self.dirs[(n >> 1) % self.dirs.len()]
        }
    }
}

const OFFSETS: &[u64] = &[
    0,
    1,
    100,
    1023,
    1024,
    4095,
    4096,
    12 << 10,
    48 << 10,
    1 << 20,
    1 << 32,
    (1 << 40) - 7,
];

fn offset(t: &mut Tail) -> u64 {
    t.pick(OFFSETS) + u64::from(t.byte())
}

fn len(t: &mut Tail) -> usize {
    t.u16() as usize % 9000
}

const CREATOR: Creator = Creator {
    permissions: 0o755,
    uid: 0,
    gid: 0,
    umask: 0o022,
};

fuzz_target!(|data: &[u8]| {
    let split = data.len() & !1023;
    let (image, tail) = data.split_at(split);
    let mut t = Tail(tail);
    let device = Arc::new(MemoryDevice::new(image.to_vec()));
    let options = OpenOptions {
        cache_bytes: 1 << 20,
        commit_interval: Duration::ZERO,
        commit_thread: false,
        transaction_limit: Some(t.byte() as usize + 8),
        ..OpenOptions::writable()
    };
    let Ok(fs) = Filesystem::open_device(device.clone(), options) else {
        return;
    };
    let mut known = Known {
        dirs: vec![ROOT],
        files: Vec::new(),
        names: Vec::new(),
    };
    known.learn(&fs, ROOT);
    for dir in known.dirs.clone().into_iter().skip(1).take(4) {
        known.learn(&fs, dir);
    }
    let ops = (t.byte() as usize % MAX_OPS) + 1;
    for _ in 0..ops {
        match t.byte() % 20 {
            0 => {
                let (dir, name) = (known.dir(&mut t), known.name(&mut t));
                if let Ok(ino) = fs.create(dir, &name, CREATOR) {
                    known.add(ino, false);
                }
            }
            1 | 2 => {
                let (ino, at, n) = (known.any(&mut t), offset(&mut t), len(&mut t));
                let fill = t.byte();
                let _ = fs.write_at(ino, at, &vec![fill; n]);
            }
            3 => {
                // Append.
                let (ino, n) = (known.any(&mut t), len(&mut t));
                if let Ok(m) = fs.metadata(ino) {
                    let _ = fs.write_at(ino, m.size, &vec![0xa5; n]);
                }
            }
            4 => {
                let (dir, name) = (known.dir(&mut t), known.name(&mut t));
                if let Ok(ino) = fs.mkdir(dir, &name, CREATOR) {
                    known.add(ino, true);
                }
            }
            5 => {
                let (dir, name) = (known.dir(&mut t), known.name(&mut t));
                let _ = fs.unlink(dir, &name);
            }
            6 => {
                let (dir, name) = (known.dir(&mut t), known.name(&mut t));
                let _ = fs.rmdir(dir, &name);
            }
            7 => {
                let (from, old) = (known.dir(&mut t), known.name(&mut t));
                let (to, new) = (known.dir(&mut t), known.name(&mut t));
                let mode = t.pick(&[
                    RenameMode::Replace,
                    RenameMode::NoReplace,
                    RenameMode::Exchange,
                ]);
                let _ = fs.rename(from, &old, to, &new, mode);
            }
            8 => {
                let (ino, at) = (known.any(&mut t), offset(&mut t));
                let _ = fs.truncate(ino, at);
            }
            9 | 10 => {
                let (ino, name, n) = (known.any(&mut t), t.pick(XATTRS), len(&mut t) % 3000);
                let how = t.pick(&[XattrSet::Either, XattrSet::Create, XattrSet::Replace]);
                let _ = fs.set_xattr(ino, name, &vec![b'v'; n], how);
            }
            11 => {
                let (ino, name) = (known.any(&mut t), t.pick(XATTRS));
                let _ = fs.remove_xattr(ino, name);
            }
            12 => {
                let (ino, dir, name) = (known.any(&mut t), known.dir(&mut t), known.name(&mut t));
                let _ = fs.link(ino, dir, &name);
            }
            13 => {
                let (dir, name, n) = (
                    known.dir(&mut t),
                    known.name(&mut t),
                    t.u16() as usize % 1100 + 1,
                );
                if let Ok(ino) = fs.symlink(dir, &name, &vec![b's'; n], CREATOR) {
                    known.add(ino, false);
                }
            }
            14 => {
                let dir = known.dir(&mut t);
                known.learn(&fs, dir);
            }
            15 => {
                let (ino, at, n) = (known.any(&mut t), offset(&mut t), len(&mut t) as u64 * 7);
                let mode = t.pick(&[
                    FallocateMode::Allocate,
                    FallocateMode::KeepSize,
                    FallocateMode::PunchHole,
                    FallocateMode::ZeroRange,
                    FallocateMode::CollapseRange,
                    FallocateMode::InsertRange,
                ]);
                let _ = fs.fallocate(ino, mode, at, n);
            }
            16 => {
                let ino = known.any(&mut t);
                let attrs = SetAttributes {
                    size: Some(offset(&mut t)),
                    permissions: Some(0o600),
                    ..SetAttributes::default()
                };
                let _ = fs.setattr(ino, &attrs);
            }
            17 => {
                let _ = fs.sync();
            }
            18 => {
                let ino = known.any(&mut t);
                let mut buf = vec![0; 8192];
                let _ = fs.read_at(ino, offset(&mut t), &mut buf);
                let _ = fs.list_xattrs(ino);
            }
            _ => {
                let (dir, name) = (known.dir(&mut t), known.name(&mut t));
                if let Ok(Some(ino)) = fs.lookup(dir, &name) {
                    let _ = fs.metadata(ino);
                }
            }
        }
    }
    if fs.unmount().is_err() {
        return;
    }
    let options = OpenOptions {
        cache_bytes: 1 << 20,
        ..OpenOptions::default()
    };
    if let Ok(fs) = Filesystem::open_bytes(device.bytes(), options) {
        e4_testkit::walk_everything(&fs);
    }
});

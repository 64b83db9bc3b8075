//! Model-based test of the write path: long random sequences of every namespace and data
//! operation, each checked against an in-memory model as it runs (results and errors), on
//! every writable feature profile; then `e2fsck -fn` must pass, and the tree read back by
//! e4 (after reopening) and by the kernel (where loop mounts work) must equal the model.

use std::collections::BTreeMap;
use std::path::Path;

use e4_fs::{Creator, Error, FallocateMode, FileType, Filesystem, OpenOptions, RenameMode};
use e4_testkit::{e2fsck_clean, make_empty_image, KernelMount, PROFILES};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const ROOT: u32 = 2;

#[derive(Debug, Clone, PartialEq)]
enum Node {
    File(Vec<u8>),
    Dir(BTreeMap<Vec<u8>, u32>),
    Symlink(Vec<u8>),
    Fifo,
}

/// The model: inodes by number (numbers come from e4: the model checks what they hold).
struct Model {
    nodes: BTreeMap<u32, Node>,
    links: BTreeMap<u32, u32>,
    parents: BTreeMap<u32, u32>,
}

impl Model {
    fn dir(&self, ino: u32) -> &BTreeMap<Vec<u8>, u32> {
        match &self.nodes[&ino] {
            Node::Dir(d) => d,
            other => panic!("{ino} is not a directory: {other:?}"),
        }
    }
    fn dir_mut(&mut self, ino: u32) -> &mut BTreeMap<Vec<u8>, u32> {
        match self.nodes.get_mut(&ino) {
            Some(Node::Dir(d)) => d,
            _ => panic!("{ino} is not a directory"),
        }
    }
    fn dirs(&self) -> Vec<u32> {
        self.nodes
            .iter()
            .filter(|(_, n)| matches!(n, Node::Dir(_)))
            .map(|(i, _)| *i)
            .collect()
    }
    fn files(&self) -> Vec<u32> {
        self.nodes
            .iter()
            .filter(|(_, n)| matches!(n, Node::File(_)))
            .map(|(i, _)| *i)
            .collect()
    }
    fn is_dir(&self, ino: u32) -> bool {
        matches!(self.nodes[&ino], Node::Dir(_))
    }
    fn unlink_one(&mut self, ino: u32) {
        let n = self.links.get_mut(&ino).unwrap();
        *n -= 1;
        if *n == 0 {
            self.nodes.remove(&ino);
            self.links.remove(&ino);
            self.parents.remove(&ino);
        }
    }
    fn is_ancestor(&self, ancestor: u32, mut dir: u32) -> bool {
        loop {
            if dir == ancestor {
                return true;
            }
            if dir == ROOT {
                return false;
            }
            dir = self.parents[&dir];
        }
    }
}

fn kind(e: &Error) -> &'static str {
    match e {
        Error::NotFound(_) => "ENOENT",
        Error::Exists(_) => "EEXIST",
        Error::NotEmpty(_) => "ENOTEMPTY",
        Error::IsADirectory(_) => "EISDIR",
        Error::NotADirectory(_) => "ENOTDIR",
        Error::Invalid(_) => "EINVAL",
        Error::NoSpace(_) => "ENOSPC",
        other => panic!("unexpected error: {other}"),
    }
}

fn check<T: std::fmt::Debug>(
    step: usize,
    what: &str,
    got: Result<T, Error>,
    want: Result<(), &str>,
) -> Option<T> {
    match (got, want) {
        (Ok(v), Ok(())) => Some(v),
        (Err(e), Err(k)) => {
            assert_eq!(kind(&e), k, "step {step}: {what}: {e}");
            None
        }
        (got, want) => panic!("step {step}: {what}: got {got:?}, model says {want:?}"),
    }
}

const ME: Creator = Creator {
    permissions: 0o644,
    uid: 1000,
    gid: 1000,
    umask: 0,
};

fn random_name(rng: &mut StdRng, names: &[&[u8]]) -> Vec<u8> {
    if rng.gen_bool(0.8) {
        names[rng.gen_range(0..names.len())].to_vec()
    } else {
        let len = rng.gen_range(1..=255);
        (0..len).map(|_| rng.gen_range(b'a'..=b'z')).collect()
    }
}

fn run(profile_args: &[&str], name: &str, seed: u64, steps: usize) {
    let img = make_empty_image(profile_args, 64);
    let mut rng = StdRng::seed_from_u64(seed);
    // Short names, and long ones that fill a directory block after a few dozen entries,
    // so that directories outgrow one block (and become indexed where the profile has
    // dir_index) and later operations find, replace and remove entries in split leaves.
    let names: Vec<Vec<u8>> = (0..40)
        .map(|i| format!("n{i}").into_bytes())
        .chain((0..40).map(|i| format!("{i}-{}", "l".repeat(150)).into_bytes()))
        .collect();
    let names: Vec<&[u8]> = names.iter().map(|n| n.as_slice()).collect();
    let mut model = Model {
        nodes: BTreeMap::new(),
        links: BTreeMap::new(),
        parents: BTreeMap::new(),
    };
    let extents = !profile_args.contains(&"ext2") && !profile_args.contains(&"ext3");
    let fs = Filesystem::open(&img.path, OpenOptions::writable()).unwrap();
    // Start from the root as mke2fs left it (lost+found included).
    let mut root = BTreeMap::new();
    for e in fs.read_dir(ROOT).unwrap() {
        root.insert(e.name.clone(), e.ino);
        model.nodes.insert(e.ino, Node::Dir(BTreeMap::new()));
        model.links.insert(e.ino, 1);
        model.parents.insert(e.ino, ROOT);
    }
    model.nodes.insert(ROOT, Node::Dir(root));
    model.parents.insert(ROOT, ROOT);
    for step in 0..steps {
        let dirs = model.dirs();
        let dir = dirs[rng.gen_range(0..dirs.len())];
        let nm = random_name(&mut rng, &names);
        let existing = model.dir(dir).get(&nm).copied();
        match rng.gen_range(0..100) {
            0..=17 => {
                let want = if existing.is_some() {
                    Err("EEXIST")
                } else {
                    Ok(())
                };
                if let Some(ino) = check(step, "create", fs.create(dir, &nm, ME), want) {
                    model.nodes.insert(ino, Node::File(Vec::new()));
                    model.links.insert(ino, 1);
                    model.dir_mut(dir).insert(nm, ino);
                }
            }
            18..=27 => {
                let want = if existing.is_some() {
                    Err("EEXIST")
                } else {
                    Ok(())
                };
                if let Some(ino) = check(step, "mkdir", fs.mkdir(dir, &nm, ME), want) {
                    model.nodes.insert(ino, Node::Dir(BTreeMap::new()));
                    model.links.insert(ino, 1);
                    model.parents.insert(ino, dir);
                    model.dir_mut(dir).insert(nm, ino);
                }
            }
            28..=31 => {
                let len = if rng.gen_bool(0.5) {
                    rng.gen_range(1..60)
                } else {
                    rng.gen_range(60..400)
                };
                let target: Vec<u8> = (0..len).map(|_| rng.gen_range(b'a'..=b'z')).collect();
                let want = if existing.is_some() {
                    Err("EEXIST")
                } else {
                    Ok(())
                };
                if let Some(ino) = check(step, "symlink", fs.symlink(dir, &nm, &target, ME), want) {
                    model.nodes.insert(ino, Node::Symlink(target));
                    model.links.insert(ino, 1);
                    model.dir_mut(dir).insert(nm, ino);
                }
            }
            32..=33 => {
                let want = if existing.is_some() {
                    Err("EEXIST")
                } else {
                    Ok(())
                };
                if let Some(ino) = check(
                    step,
                    "mknod",
                    fs.mknod(dir, &nm, FileType::Fifo, (0, 0), ME),
                    want,
                ) {
                    model.nodes.insert(ino, Node::Fifo);
                    model.links.insert(ino, 1);
                    model.dir_mut(dir).insert(nm, ino);
                }
            }
            34..=53 => {
                let files = model.files();
                if files.is_empty() {
                    continue;
                }
                let ino = files[rng.gen_range(0..files.len())];
                let offset = if rng.gen_bool(0.5) {
                    match &model.nodes[&ino] {
                        Node::File(d) => d.len() as u64,
                        _ => 0,
                    }
                } else {
                    rng.gen_range(0..2 << 20)
                };
                // Small writes keep files inline on inline_data filesystems.
                let max_len = match rng.gen_range(0..10) {
                    0..=3 => 100,
                    4..=8 => 8192,
                    _ => 300_000,
                };
                let len = rng.gen_range(1..max_len);
                let data: Vec<u8> = (0..len).map(|_| rng.gen()).collect();
                let n = fs
                    .write_at(ino, offset, &data)
                    .unwrap_or_else(|e| panic!("step {step}: write: {e}"));
                assert_eq!(n, len);
                let Some(Node::File(content)) = model.nodes.get_mut(&ino) else {
                    unreachable!()
                };
                let end = offset as usize + len;
                if content.len() < end {
                    content.resize(end, 0);
                }
                content[offset as usize..end].copy_from_slice(&data);
            }
            54..=56 => {
                let files = model.files();
                if files.is_empty() {
                    continue;
                }
                let ino = files[rng.gen_range(0..files.len())];
                let (offset, len) = if rng.gen_bool(0.3) {
                    (rng.gen_range(0..150), rng.gen_range(1..100))
                } else {
                    (rng.gen_range(0..2 << 20), rng.gen_range(1..600_000))
                };
                let mode = [
                    FallocateMode::Allocate,
                    FallocateMode::KeepSize,
                    FallocateMode::PunchHole,
                    FallocateMode::ZeroRange,
                    FallocateMode::CollapseRange,
                    FallocateMode::InsertRange,
                ][rng.gen_range(0..6)];
                let shifts = matches!(
                    mode,
                    FallocateMode::CollapseRange | FallocateMode::InsertRange
                );
                let bs = u64::from(fs.block_size());
                let (offset, len) = if shifts && rng.gen_bool(0.9) {
                    // Mostly whole blocks, which collapse and insert require.
                    (offset / bs * bs, u64::div_ceil(len, bs).min(40) * bs)
                } else {
                    (offset, len)
                };
                let got = fs.fallocate(ino, mode, offset, len);
                if !extents {
                    assert!(
                        matches!(got, Err(Error::NotSupported(_))),
                        "step {step}: {got:?}"
                    );
                    continue;
                }
                let Some(Node::File(content)) = model.nodes.get_mut(&ino) else {
                    unreachable!()
                };
                if shifts {
                    let size = content.len() as u64;
                    let refused = offset % bs != 0
                        || len % bs != 0
                        || match mode {
                            FallocateMode::CollapseRange => offset + len >= size,
                            _ => offset >= size,
                        };
                    if refused {
                        assert!(
                            matches!(got, Err(Error::Invalid(_))),
                            "step {step}: {mode:?} {offset}+{len} of {size}: {got:?}"
                        );
                        continue;
                    }
                }
                got.unwrap_or_else(|e| panic!("step {step}: fallocate {mode:?}: {e}"));
                let (start, stop) = (offset as usize, (offset + len) as usize);
                match mode {
                    FallocateMode::CollapseRange => {
                        content.drain(start..stop);
                        continue;
                    }
                    FallocateMode::InsertRange => {
                        content.splice(start..start, std::iter::repeat_n(0, stop - start));
                        continue;
                    }
                    _ => {}
                }
                let end = (offset + len) as usize;
                let grows = matches!(mode, FallocateMode::Allocate | FallocateMode::ZeroRange);
                if grows && content.len() < end {
                    content.resize(end, 0);
                }
                if matches!(mode, FallocateMode::PunchHole | FallocateMode::ZeroRange) {
                    let stop = end.min(content.len());
                    if (offset as usize) < stop {
                        content[offset as usize..stop].fill(0);
                    }
                }
            }
            57..=59 => {
                let files = model.files();
                if files.is_empty() {
                    continue;
                }
                let ino = files[rng.gen_range(0..files.len())];
                let size = if rng.gen_bool(0.3) {
                    rng.gen_range(0..200)
                } else {
                    rng.gen_range(0..3 << 20)
                };
                fs.truncate(ino, size)
                    .unwrap_or_else(|e| panic!("step {step}: truncate: {e}"));
                let Some(Node::File(content)) = model.nodes.get_mut(&ino) else {
                    unreachable!()
                };
                content.resize(size as usize, 0);
            }
            60..=71 => {
                let want = match existing {
                    None => Err("ENOENT"),
                    Some(i) if model.is_dir(i) => Err("EISDIR"),
                    Some(_) => Ok(()),
                };
                if check(step, "unlink", fs.unlink(dir, &nm), want).is_some() {
                    let ino = model.dir_mut(dir).remove(&nm).unwrap();
                    model.unlink_one(ino);
                }
            }
            72..=77 => {
                let want = match existing {
                    None => Err("ENOENT"),
                    Some(i) if !model.is_dir(i) => Err("ENOTDIR"),
                    Some(i) if !model.dir(i).is_empty() => Err("ENOTEMPTY"),
                    Some(_) => Ok(()),
                };
                if check(step, "rmdir", fs.rmdir(dir, &nm), want).is_some() {
                    let ino = model.dir_mut(dir).remove(&nm).unwrap();
                    model.nodes.remove(&ino);
                    model.links.remove(&ino);
                    model.parents.remove(&ino);
                }
            }
            78..=81 => {
                let files = model.files();
                if files.is_empty() {
                    continue;
                }
                let ino = files[rng.gen_range(0..files.len())];
                let want = if existing.is_some() {
                    Err("EEXIST")
                } else {
                    Ok(())
                };
                if check(step, "link", fs.link(ino, dir, &nm), want).is_some() {
                    *model.links.get_mut(&ino).unwrap() += 1;
                    model.dir_mut(dir).insert(nm, ino);
                }
            }
            82..=97 => {
                let to_dir = dirs[rng.gen_range(0..dirs.len())];
                let to_name = random_name(&mut rng, &names);
                let mode = match rng.gen_range(0..10) {
                    0 => RenameMode::NoReplace,
                    1 => RenameMode::Exchange,
                    _ => RenameMode::Replace,
                };
                let target = model.dir(to_dir).get(&to_name).copied();
                let want = match (existing, target) {
                    (None, _) => Err("ENOENT"),
                    (Some(s), Some(t)) if s == t => Ok(()),
                    (Some(s), t) => {
                        let moving = dir != to_dir;
                        let into_itself = moving
                            && ((model.is_dir(s) && model.is_ancestor(s, to_dir))
                                || (mode == RenameMode::Exchange
                                    && t.is_some_and(|t| {
                                        model.is_dir(t) && model.is_ancestor(t, dir)
                                    })));
                        if into_itself {
                            Err("EINVAL")
                        } else {
                            match (mode, t) {
                                (RenameMode::NoReplace, Some(_)) => Err("EEXIST"),
                                (RenameMode::Exchange, None) => Err("ENOENT"),
                                (RenameMode::Exchange, Some(_)) => Ok(()),
                                (_, None) => Ok(()),
                                (_, Some(t)) => match (model.is_dir(s), model.is_dir(t)) {
                                    (true, false) => Err("ENOTDIR"),
                                    (false, true) => Err("EISDIR"),
                                    (true, true) if !model.dir(t).is_empty() => Err("ENOTEMPTY"),
                                    _ => Ok(()),
                                },
                            }
                        }
                    }
                };
                let got = fs.rename(dir, &nm, to_dir, &to_name, mode);
                if check(step, "rename", got, want).is_some() {
                    let s = existing.unwrap();
                    if target == Some(s) {
                        continue;
                    }
                    if mode == RenameMode::Exchange {
                        let t = target.unwrap();
                        model.dir_mut(dir).insert(nm.clone(), t);
                        model.dir_mut(to_dir).insert(to_name.clone(), s);
                        if model.is_dir(s) {
                            model.parents.insert(s, to_dir);
                        }
                        if model.is_dir(t) {
                            model.parents.insert(t, dir);
                        }
                    } else {
                        model.dir_mut(dir).remove(&nm);
                        if let Some(t) = model.dir_mut(to_dir).insert(to_name.clone(), s) {
                            if model.is_dir(t) {
                                model.nodes.remove(&t);
                                model.links.remove(&t);
                                model.parents.remove(&t);
                            } else {
                                model.unlink_one(t);
                            }
                        }
                        if model.is_dir(s) {
                            model.parents.insert(s, to_dir);
                        }
                    }
                }
            }
            _ => fs.sync().unwrap(),
        }
    }
    eprintln!(
        "{name} seed {seed}: {} inodes, {} directories, {} bytes of file data in the model",
        model.nodes.len(),
        model.dirs().len(),
        model
            .files()
            .iter()
            .map(|f| match &model.nodes[f] {
                Node::File(d) => d.len(),
                _ => 0,
            })
            .sum::<usize>()
    );
    fs.unmount().unwrap();
    e2fsck_clean(&img.path).unwrap_or_else(|e| panic!("{name} seed {seed}: {e}"));
    let fs = Filesystem::open(&img.path, OpenOptions::default()).unwrap();
    compare_e4(&fs, &model, ROOT, name);
    if profile_args.contains(&"inline_data") {
        require_inline_coverage(&fs, &model, name, seed);
    }
    if let Ok(mount) = KernelMount::mount(&img.path) {
        compare_host(&mount.path(), &model, ROOT, name);
    }
}

/// On an inline_data filesystem the run must have left files and directories inline and
/// moved some out of their inodes, or the inline paths went untested.
fn require_inline_coverage(fs: &Filesystem, model: &Model, name: &str, seed: u64) {
    const INLINE_FL: u32 = 0x1000_0000;
    let inline = |ino: &u32| fs.read_inode(*ino).unwrap().flags() & INLINE_FL != 0;
    let files = model.files();
    let dirs: Vec<u32> = model.dirs().into_iter().filter(|&d| d > 11).collect();
    let counts = [
        files.iter().filter(|f| inline(f)).count(),
        files.iter().filter(|f| !inline(f)).count(),
        dirs.iter().filter(|d| inline(d)).count(),
        dirs.iter().filter(|d| !inline(d)).count(),
    ];
    eprintln!("{name} seed {seed}: inline/block files, inline/block directories: {counts:?}");
    assert!(
        counts.iter().all(|&n| n > 0),
        "{name} seed {seed}: inline coverage {counts:?}"
    );
}

fn compare_e4(fs: &Filesystem, model: &Model, dir: u32, name: &str) {
    let mut listed: BTreeMap<Vec<u8>, u32> = BTreeMap::new();
    for e in fs.read_dir(dir).unwrap() {
        listed.insert(e.name, e.ino);
    }
    assert_eq!(&listed, model.dir(dir), "{name}: directory {dir}");
    for (entry, &ino) in model.dir(dir) {
        let inode = fs.read_inode(ino).unwrap();
        let what = format!("{name}: {} (inode {ino})", String::from_utf8_lossy(entry));
        assert_eq!(
            u32::from(inode.links_count()),
            if model.is_dir(ino) {
                2 + model
                    .dir(ino)
                    .values()
                    .filter(|&&c| model.is_dir(c))
                    .count() as u32
            } else {
                model.links[&ino]
            },
            "{what}: links"
        );
        match &model.nodes[&ino] {
            Node::File(content) => {
                assert_eq!(inode.size(), content.len() as u64, "{what}");
                let got = fs.read_file(ino, u64::MAX).unwrap();
                assert!(got == *content, "{what}: content differs");
            }
            Node::Symlink(target) => assert_eq!(&fs.read_link(ino).unwrap(), target, "{what}"),
            Node::Dir(_) => compare_e4(fs, model, ino, name),
            Node::Fifo => assert_eq!(inode.file_type(), Some(FileType::Fifo)),
        }
    }
}

fn compare_host(path: &Path, model: &Model, dir: u32, name: &str) {
    use std::os::unix::ffi::OsStrExt;
    let mut listed: Vec<Vec<u8>> = std::fs::read_dir(path)
        .unwrap()
        .map(|e| e.unwrap().file_name().as_bytes().to_vec())
        .collect();
    listed.sort();
    let want: Vec<Vec<u8>> = model.dir(dir).keys().cloned().collect();
    assert_eq!(listed, want, "{name}: kernel listing of {}", path.display());
    for (entry, &ino) in model.dir(dir) {
        let p = path.join(std::ffi::OsStr::from_bytes(entry));
        match &model.nodes[&ino] {
            Node::File(content) => {
                assert!(
                    std::fs::read(&p).unwrap() == *content,
                    "{name}: kernel reads {} differently",
                    p.display()
                )
            }
            Node::Symlink(target) => assert_eq!(
                std::fs::read_link(&p).unwrap().as_os_str().as_bytes(),
                &target[..]
            ),
            Node::Dir(_) => compare_host(&p, model, ino, name),
            Node::Fifo => {}
        }
    }
}

#[test]
fn random_operations_match_the_model_on_every_profile() {
    for profile in PROFILES {
        for seed in 0..2 {
            run(profile.mke2fs_args, profile.name, seed, 1500);
        }
    }
}

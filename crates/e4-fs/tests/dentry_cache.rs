//! The dentry cache never answers with a name that is gone or points elsewhere.
//!
//! - A model test: random creates, unlinks, rmdirs and renames (replace, no-replace,
//!   exchange; within and between directories; files and directories) on a small tree,
//!   each followed by resolving every path of the tree (so every name is cached when the
//!   next change comes) and comparing with a model of the tree.
//! - A stress test: threads place files and directories at a few shared names by rename (from
//!   a private directory, or from a name of their own, or by exchange) or by create, and
//!   remove them, while readers keep the names cached; a thread that placed something
//!   resolves the name at once, and may find what it placed, nothing, or something placed
//!   after its change began, never something older.
//! - Walks through symlinks, cold and cached, before and after a rename behind the link.
//!
//! All end with `e2fsck -fn`.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;

use e4_fs::{Creator, Error, Filesystem, OpenOptions, RenameMode};
use e4_testkit::{e2fsck_clean, make_empty_image};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const ROOT: u32 = 2;
const ME: Creator = Creator {
    permissions: 0o755,
    uid: 0,
    gid: 0,
    umask: 0,
};

/// What the model knows of a path: its inode and whether it is a directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Node {
    ino: u32,
    dir: bool,
}

/// Every path that exists, from the root ("/s0/a/x").
type Tree = BTreeMap<String, Node>;

fn parent_and_name(path: &str) -> (&str, &str) {
    let cut = path.rfind('/').expect("paths start with /");
    (&path[..cut], &path[cut + 1..])
}

fn is_within(path: &str, top: &str) -> bool {
    path == top
        || path
            .strip_prefix(top)
            .is_some_and(|rest| rest.starts_with('/'))
}

/// Removes `top` and everything under it, returning them relative to `top`.
fn take_subtree(tree: &mut Tree, top: &str) -> Vec<(String, Node)> {
    let inside: Vec<String> = tree.keys().filter(|p| is_within(p, top)).cloned().collect();
    inside
        .into_iter()
        .map(|p| {
            let node = tree.remove(&p).unwrap();
            (p[top.len()..].to_string(), node)
        })
        .collect()
}

fn put_subtree(tree: &mut Tree, top: &str, nodes: Vec<(String, Node)>) {
    for (rest, node) in nodes {
        tree.insert(format!("{top}{rest}"), node);
    }
}

/// What a successful rename of `from` to `to` did to the tree.
fn renamed(tree: &mut Tree, from: &str, to: &str, mode: RenameMode) {
    let moving = take_subtree(tree, from);
    let replaced = take_subtree(tree, to);
    if mode == RenameMode::Exchange {
        put_subtree(tree, from, replaced);
    }
    put_subtree(tree, to, moving);
}

/// Every path the model test looks at: two levels under three fixed directories.
fn model_paths() -> Vec<String> {
    let mut paths = Vec::new();
    for d in ["s0", "s1", "s2"] {
        for n in ["a", "b", "c", "d"] {
            paths.push(format!("/{d}/{n}"));
            for l in ["x", "y"] {
                paths.push(format!("/{d}/{n}/{l}"));
            }
        }
    }
    paths
}

/// Resolves every path (through the cache) and compares with the tree; also `lookup` in
/// each existing parent.
fn check_every_path(fs: &Filesystem, tree: &Tree, paths: &[String], step: usize) {
    for path in paths {
        let got = fs.resolve(path, false);
        match (tree.get(path), &got) {
            (Some(node), Ok(ino)) if node.ino == *ino => {}
            (None, Err(Error::NotFound(_) | Error::NotADirectory(_))) => {}
            (expected, _) => {
                panic!("step {step}: {path} resolved to {got:?}, expected {expected:?}")
            }
        }
        let (parent, name) = parent_and_name(path);
        if let Some(p) = tree.get(parent).filter(|p| p.dir) {
            let found = fs.lookup(p.ino, name.as_bytes()).unwrap();
            assert_eq!(
                found,
                tree.get(path).map(|n| n.ino),
                "step {step}: lookup of {name} in {parent}"
            );
        }
    }
}

fn run_model(mke2fs: &[&str], seed: u64, steps: usize) {
    let img = make_empty_image(mke2fs, 64);
    let fs = Filesystem::open(&img.path, OpenOptions::writable()).unwrap();
    let mut tree = Tree::new();
    for d in ["s0", "s1", "s2"] {
        let ino = fs.mkdir(ROOT, d.as_bytes(), ME).unwrap();
        tree.insert(format!("/{d}"), Node { ino, dir: true });
    }
    let paths = model_paths();
    let mut rng = StdRng::seed_from_u64(seed);
    // Changes that succeeded: creates, removals, then renames by mode.
    let mut done = [0usize; 5];
    check_every_path(&fs, &tree, &paths, 0);
    for step in 1..=steps {
        let op = rng.gen_range(0..8);
        // Creates go to any path of the pool, removals and renames start from a name
        // that exists (not the three fixed directories).
        let existing: Vec<&String> = tree.keys().filter(|p| p.matches('/').count() > 1).collect();
        let path = if op < 2 || existing.is_empty() {
            paths[rng.gen_range(0..paths.len())].clone()
        } else {
            existing[rng.gen_range(0..existing.len())].clone()
        };
        let (parent, name) = parent_and_name(&path);
        let name = name.as_bytes();
        let parent_ino = tree.get(parent).filter(|p| p.dir).map(|p| p.ino);
        match op {
            0 | 1 => {
                let Some(p) = parent_ino else { continue };
                let dir = rng.gen_bool(0.5);
                let made = if dir {
                    fs.mkdir(p, name, ME)
                } else {
                    fs.create(p, name, ME)
                };
                if let Ok(ino) = made {
                    tree.insert(path.clone(), Node { ino, dir });
                    done[0] += 1;
                }
            }
            2 => {
                let (Some(p), Some(node)) = (parent_ino, tree.get(&path).copied()) else {
                    continue;
                };
                let removed = if node.dir {
                    fs.rmdir(p, name)
                } else {
                    fs.unlink(p, name)
                };
                if removed.is_ok() {
                    tree.remove(&path);
                    done[1] += 1;
                }
            }
            _ => {
                let which = rng.gen_range(0..3);
                // An exchange needs a target that exists.
                let to = if which == 2 {
                    if existing.is_empty() {
                        continue;
                    }
                    existing[rng.gen_range(0..existing.len())].clone()
                } else {
                    paths[rng.gen_range(0..paths.len())].clone()
                };
                if is_within(&to, &path) || is_within(&path, &to) {
                    continue;
                }
                let (to_parent, to_name) = parent_and_name(&to);
                let (Some(p), Some(q)) = (
                    parent_ino,
                    tree.get(to_parent).filter(|q| q.dir).map(|q| q.ino),
                ) else {
                    continue;
                };
                let modes = [
                    RenameMode::Replace,
                    RenameMode::NoReplace,
                    RenameMode::Exchange,
                ];
                let which = rng.gen_range(0..3);
                if fs
                    .rename(p, name, q, to_name.as_bytes(), modes[which])
                    .is_ok()
                {
                    renamed(&mut tree, &path, &to, modes[which]);
                    done[2 + which] += 1;
                }
            }
        }
        check_every_path(&fs, &tree, &paths, step);
    }
    assert!(
        done.iter().all(|&n| n >= 100),
        "too few changes succeeded (creates, removals, renames replace/no-replace/exchange): \
         {done:?}"
    );
    fs.unmount().unwrap();
    e2fsck_clean(&img.path).unwrap_or_else(|e| panic!("{mke2fs:?} seed {seed}: {e}"));
}

#[test]
fn every_walk_matches_a_model_of_the_tree_after_every_change() {
    for seed in 0..3 {
        run_model(&["-t", "ext4"], seed, 6000);
    }
    run_model(&["-t", "ext4", "-O", "inline_data"], 7, 6000);
}

/// Shared names for the stress test: four in each of two directories.
const SHARED_NAMES: [&str; 4] = ["n0", "n1", "n2", "n3"];
const WRITERS: usize = 6;
const READERS: usize = 2;
const ROUNDS: usize = 5000;

/// When each inode was last placed at a shared name: `None` while its placing rename runs,
/// then the clock when it returned (a create at the name records only that).
type Placements = Mutex<HashMap<u32, Option<u64>>>;

struct Stress<'a> {
    fs: &'a Filesystem,
    shared: [u32; 2],
    clock: AtomicU64,
    placements: Placements,
    /// Creates at a shared name that have begun and not yet recorded their placement. An
    /// inode number is reused once freed, so while one runs, a name may hold a new inode
    /// whose number still shows its earlier life's placement.
    creating: AtomicU64,
    /// Names checked right after a change.
    checked: AtomicU64,
}

impl Stress<'_> {
    fn tick(&self) -> u64 {
        self.clock.fetch_add(1, Ordering::SeqCst)
    }

    /// Checks `dir/name` right after a change that began at `began` put `placed` there
    /// (`None`: removed what was there): it may hold `placed`, nothing, or an inode whose
    /// placing change was still running or ended after `began`; an older inode is a stale
    /// cache entry.
    fn check_after(&self, dir: usize, name: &str, placed: Option<u32>, began: u64) {
        let path = format!("/d{dir}/{name}");
        let got = self.fs.resolve(&path, false);
        let looked_up = self.fs.lookup(self.shared[dir], name.as_bytes());
        self.checked.fetch_add(1, Ordering::Relaxed);
        for (how, found) in [("resolve", got.map(Some)), ("lookup", looked_up)] {
            match found {
                Ok(None) | Err(Error::NotFound(_)) => {}
                Ok(Some(ino)) if Some(ino) == placed => {}
                Ok(Some(ino)) => {
                    let placed_at = self.placements.lock().unwrap().get(&ino).copied();
                    match placed_at {
                        // Not yet recorded: made at the name by a create still in flight.
                        None | Some(None) => {}
                        Some(Some(end)) if end > began => {}
                        // A create in flight may have reused the number (read after the
                        // placement: a create records its placement before it is counted
                        // out).
                        Some(Some(_)) if self.creating.load(Ordering::SeqCst) > 0 => {}
                        other => panic!(
                            "{how} {path} found inode {ino} (placement {other:?}) after a \
                             change that began at {began} left {placed:?} there"
                        ),
                    }
                }
                Err(e) => panic!("{how} {path}: {e}"),
            }
        }
    }

    /// Puts a new file or directory at a shared name, from the writer's private directory,
    /// or from its own name in a shared directory, or by exchange with that name.
    fn place(&self, rng: &mut StdRng, t: usize, private: u32, round: usize) {
        let (dir, name) = (rng.gen_range(0..2), SHARED_NAMES[rng.gen_range(0..4)]);
        let own = format!("own{t}");
        let way = rng.gen_range(0..3);
        let (from_dir, from_name) = if way == 0 {
            (private, format!("tmp{round}"))
        } else {
            (self.shared[rng.gen_range(0..2)], own.clone())
        };
        let is_dir = rng.gen_bool(0.3);
        let made = if is_dir {
            self.fs.mkdir(from_dir, from_name.as_bytes(), ME)
        } else {
            self.fs.create(from_dir, from_name.as_bytes(), ME)
        };
        let ino = made.unwrap_or_else(|e| panic!("making {from_name}: {e}"));
        self.placements.lock().unwrap().insert(ino, None);
        let mode = match way {
            2 => RenameMode::Exchange,
            _ if rng.gen_bool(0.5) => RenameMode::NoReplace,
            _ => RenameMode::Replace,
        };
        let began = self.tick();
        let moved = self.fs.rename(
            from_dir,
            from_name.as_bytes(),
            self.shared[dir],
            name.as_bytes(),
            mode,
        );
        let ended = self.tick();
        self.placements.lock().unwrap().insert(ino, Some(ended));
        match moved {
            Ok(()) => self.check_after(dir, name, Some(ino), began),
            Err(
                Error::NotFound(_)
                | Error::Exists(_)
                | Error::NotEmpty(_)
                | Error::IsADirectory(_)
                | Error::NotADirectory(_),
            ) => {}
            Err(e) => panic!("rename to {name}: {e}"),
        }
        // Whatever is left at the source (the new inode, or what the exchange brought
        // back) goes: nothing placed earlier may come back to a shared name.
        for remove in [Filesystem::unlink, Filesystem::rmdir] {
            match remove(self.fs, from_dir, from_name.as_bytes()) {
                Ok(()) => break,
                Err(Error::IsADirectory(_) | Error::NotADirectory(_)) => continue,
                Err(Error::NotFound(_)) => break,
                Err(e) => panic!("removing {from_name}: {e}"),
            }
        }
    }

    /// Makes a new file or directory at a shared name (as a create after an unlink in
    /// another thread does: creating a name forgets nothing in the cache).
    fn create_shared(&self, rng: &mut StdRng) {
        let (dir, name) = (rng.gen_range(0..2), SHARED_NAMES[rng.gen_range(0..4)]);
        self.creating.fetch_add(1, Ordering::SeqCst);
        let began = self.tick();
        let made = if rng.gen_bool(0.3) {
            self.fs.mkdir(self.shared[dir], name.as_bytes(), ME)
        } else {
            self.fs.create(self.shared[dir], name.as_bytes(), ME)
        };
        if let Ok(ino) = made {
            let ended = self.tick();
            self.placements.lock().unwrap().insert(ino, Some(ended));
        }
        self.creating.fetch_sub(1, Ordering::SeqCst);
        match made {
            Ok(ino) => self.check_after(dir, name, Some(ino), began),
            Err(Error::Exists(_)) => {}
            Err(e) => panic!("making {name}: {e}"),
        }
    }

    fn remove_shared(&self, rng: &mut StdRng) {
        let (dir, name) = (rng.gen_range(0..2), SHARED_NAMES[rng.gen_range(0..4)]);
        let began = self.tick();
        let removed = if rng.gen_bool(0.5) {
            self.fs.unlink(self.shared[dir], name.as_bytes())
        } else {
            self.fs.rmdir(self.shared[dir], name.as_bytes())
        };
        match removed {
            Ok(()) => self.check_after(dir, name, None, began),
            Err(
                Error::NotFound(_)
                | Error::IsADirectory(_)
                | Error::NotADirectory(_)
                | Error::NotEmpty(_),
            ) => {}
            Err(e) => panic!("removing {name}: {e}"),
        }
    }

    fn writer(&self, t: usize) {
        let mut rng = StdRng::seed_from_u64(t as u64 * 104_729 + 1);
        let private = self
            .fs
            .mkdir(ROOT, format!("private{t}").as_bytes(), ME)
            .unwrap();
        for round in 0..ROUNDS {
            match rng.gen_range(0..10) {
                0..=3 => self.place(&mut rng, t, private, round),
                4..=5 => self.create_shared(&mut rng),
                _ => self.remove_shared(&mut rng),
            }
        }
    }

    /// Keeps every shared name cached (what it finds is checked by the writers).
    fn reader(&self, done: &AtomicBool) {
        while !done.load(Ordering::Relaxed) {
            for dir in 0..2 {
                for name in SHARED_NAMES {
                    match self.fs.resolve(&format!("/d{dir}/{name}"), false) {
                        Ok(_) | Err(Error::NotFound(_)) => {}
                        Err(e) => panic!("/d{dir}/{name}: {e}"),
                    }
                }
            }
        }
    }
}

#[test]
fn a_name_just_placed_never_resolves_to_an_older_inode() {
    let img = make_empty_image(&["-t", "ext4", "-N", "40000"], 128);
    let fs = Filesystem::open(&img.path, OpenOptions::writable()).unwrap();
    let shared = [0, 1].map(|d| fs.mkdir(ROOT, format!("d{d}").as_bytes(), ME).unwrap());
    let stress = Stress {
        fs: &fs,
        shared,
        clock: AtomicU64::new(0),
        placements: Mutex::new(HashMap::new()),
        creating: AtomicU64::new(0),
        checked: AtomicU64::new(0),
    };
    let done = AtomicBool::new(false);
    std::thread::scope(|s| {
        let readers: Vec<_> = (0..READERS)
            .map(|_| s.spawn(|| stress.reader(&done)))
            .collect();
        let writers: Vec<_> = (0..WRITERS)
            .map(|t| {
                let stress = &stress;
                s.spawn(move || stress.writer(t))
            })
            .collect();
        let outcome: Vec<_> = writers.into_iter().map(|w| w.join()).collect();
        done.store(true, Ordering::Relaxed);
        for r in readers {
            r.join().expect("reader failed");
        }
        for w in outcome {
            w.expect("writer failed");
        }
    });
    let checked = stress.checked.load(Ordering::Relaxed);
    assert!(checked > ROUNDS as u64, "only {checked} changes checked");
    let locks = fs.lock_stats();
    assert!(locks.dentry_cache_shards.acquisitions > 0);
    fs.unmount().unwrap();
    e2fsck_clean(&img.path).unwrap();
}

/// Symlinks met mid-path are cached as symlinks (followed again on every walk) and a walk
/// through one sees a rename of what it points into.
#[test]
fn cached_walks_through_symlinks_follow_them_and_see_renames_behind_them() {
    let img = make_empty_image(&["-t", "ext4"], 64);
    let fs = Filesystem::open(&img.path, OpenOptions::writable()).unwrap();
    let a = fs.mkdir(ROOT, b"a", ME).unwrap();
    let b = fs.mkdir(a, b"b", ME).unwrap();
    let f = fs.create(b, b"f", ME).unwrap();
    let relative = fs.symlink(ROOT, b"rel", b"a/b", ME).unwrap();
    fs.symlink(ROOT, b"abs", b"/a", ME).unwrap();
    for _ in 0..2 {
        assert_eq!(fs.resolve("/rel/f", true).unwrap(), f);
        assert_eq!(fs.resolve("/abs/b/f", true).unwrap(), f);
        assert_eq!(fs.resolve("/rel", true).unwrap(), b);
        assert_eq!(fs.resolve("/rel", false).unwrap(), relative);
        assert!(matches!(
            fs.resolve("/a/b/f/x", true),
            Err(Error::NotADirectory(_))
        ));
    }
    fs.rename(a, b"b", a, b"c", RenameMode::NoReplace).unwrap();
    assert!(matches!(
        fs.resolve("/rel/f", true),
        Err(Error::NotFound(_))
    ));
    assert_eq!(fs.resolve("/abs/c/f", true).unwrap(), f);
    fs.rename(ROOT, b"abs", ROOT, b"rel", RenameMode::Replace)
        .unwrap();
    assert_eq!(fs.resolve("/rel/c/f", true).unwrap(), f);
    fs.unmount().unwrap();
    e2fsck_clean(&img.path).unwrap();
}

//! The helper threads of a reproducible import (`e4 mkfs -d` under `SOURCE_DATE_EPOCH`):
//! they read the host tree ahead of the walk and fill the files whose blocks the walk
//! reserved.
//!
//! The walk places every entry on one thread in name order (so the image is the same
//! whatever the thread count); what it needs from the host before placing an entry (its
//! metadata, a symlink's target, its xattrs, a directory's sorted listing) does not depend
//! on that order, so `-j` − 1 helpers read it first. A helper reads a whole directory at a
//! time (one hand-off per directory, not per file: waking a thread on another CPU costs
//! tens of microseconds) and walks the tree in the walk's own order, depth first with
//! names sorted, keeping a [`WorkList`] that is a stack: a directory's subdirectories go
//! on it in reverse name order, so the next one popped is the next one the walk enters. The
//! walk takes a directory's read [`Listing`] when it enters it (waiting if a helper is
//! reading it), or reads it itself when no helper got to it; what the walk places, and in
//! what order, is the same either way.
//!
//! Bounds: helpers stay at most [`DIRECTORIES_AHEAD`] read directories ahead of the walk,
//! the work list holds the subdirectories of at most [`OPEN_PARENTS`] directories (each
//! group holds its directory's descriptor open; the farthest ahead are dropped, to be read
//! by the walk), and at most [`FILL_BACKLOG`] files wait for a fill (the walk fills the
//! next itself beyond that), so memory and open descriptors stay bounded on any tree (the
//! names waiting in the work list are fewer than those of the listings the walk holds).
//! An idle helper is woken for fills only once [`FILL_BATCH`] wait, and every wake is
//! sent after the state's lock is released, so the woken thread does not wait on it at
//! once: on 2 CPUs a wake per file cost more than the fill it handed over. Reading ahead
//! comes before filling, as long as the helpers are not that far ahead: the walk waits on
//! reads, nobody waits on a fill. The walk, once over, fills what is left beside the
//! helpers, so no thread idles while there is work.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::ffi::OsString;
use std::fs::File;
use std::os::unix::ffi::OsStringExt;
use std::path::Path;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use crate::host_copy::{read_xattrs, HostEntry, HostXattrs, XattrSource};
use crate::host_metadata::HostMetadata;

/// Read directories the helpers keep ahead of the walk, at most.
const DIRECTORIES_AHEAD: usize = 64;
/// Directories whose subdirectories wait in the work list, at most (each holds its
/// descriptor open). A directory of a thousand subdirectories (/usr/share/doc) is one.
const OPEN_PARENTS: usize = 64;
/// Files whose blocks the walk reserved and whose data waits for a helper, at most: beyond
/// that the helpers are behind, and the walk fills the next file itself (a fill changes no
/// metadata, so who does it changes nothing in the image). Memory and the host directories
/// kept open for queued files (one per file at worst) stay bounded, and the walk and the
/// helpers share the fills as their other work leaves them time.
pub const FILL_BACKLOG: usize = 256;
/// Files queued before an idle helper is woken for them: a wake costs the walk a system
/// call and the helper tens of microseconds before it runs, more than filling a small
/// file; a batch costs one. (A helper that is not idle finds the queue on its own.)
const FILL_BATCH: usize = 16;

/// A host directory by (device, inode).
pub type DirectoryKey = (u64, u64);

/// What the walk needs from the host to place one entry, read ahead.
pub struct EntryFacts {
    pub meta: HostMetadata,
    /// A symlink's target.
    pub link: Option<Vec<u8>>,
    /// A non-directory's xattrs (a directory's are read from its descriptor when it is
    /// finished).
    pub xattrs: Option<Result<HostXattrs, String>>,
}

/// A directory's entries in name order, each with its facts where they could be read (the
/// walk reads an entry whose facts are missing itself, and reports what fails).
pub type Listing = Vec<(OsString, Option<EntryFacts>)>;

/// A directory to read ahead: `name` in the open host directory `parent`, which must be
/// `key` when opened.
pub struct ReadJob {
    parent: Arc<File>,
    name: OsString,
    key: DirectoryKey,
}

/// The work of a reproducible import's helpers, shared with its walk.
pub struct Helpers<J> {
    state: Mutex<State<J>>,
    /// Work for the helpers (a directory to read, a file to fill) or the walk's end.
    work: Condvar,
    /// For the walk: a directory read.
    progress: Condvar,
}

struct State<J> {
    to_read: WorkList,
    /// Directories being read, with the order number their read will have.
    reading: HashMap<DirectoryKey, u64>,
    /// Directories read and not yet taken by the walk, by order number (the order the walk
    /// enters them).
    read: BTreeMap<u64, (DirectoryKey, Listing)>,
    next_number: u64,
    fills: VecDeque<J>,
    idle_helpers: usize,
    /// The walk waits for a directory being read.
    walk_waits: bool,
    walk_over: bool,
}

impl<J> Helpers<J> {
    pub fn new() -> Self {
        Helpers {
            state: Mutex::new(State {
                to_read: WorkList::default(),
                reading: HashMap::new(),
                read: BTreeMap::new(),
                next_number: 0,
                fills: VecDeque::new(),
                idle_helpers: 0,
                walk_waits: false,
                walk_over: false,
            }),
            work: Condvar::new(),
            progress: Condvar::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State<J>> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The walk waits for a helper to read a directory.
    fn walk_wait<'s>(&self, mut state: MutexGuard<'s, State<J>>) -> MutexGuard<'s, State<J>> {
        state.walk_waits = true;
        let mut state = self.progress.wait(state).unwrap_or_else(|p| p.into_inner());
        state.walk_waits = false;
        state
    }

    /// Releases the state's lock, then wakes a helper if one waits and `work` says there
    /// is work for it (a wake costs a system call and a CPU switch: busy helpers find the
    /// work on their own; and a helper woken while the lock is held would wait on it).
    fn unlock_and_wake_helper(&self, state: MutexGuard<'_, State<J>>, work: bool) {
        let wake = work && state.idle_helpers > 0;
        drop(state);
        if wake {
            self.work.notify_one();
        }
    }

    /// The walk read `listing` (of the open host directory `dir`) itself: its
    /// subdirectories are read ahead, first the first.
    pub fn read_subdirectories(&self, dir: &Arc<File>, listing: &Listing) {
        let mut state = self.lock();
        state.push_subdirectories(dir, listing);
        let work = !state.to_read.is_empty();
        self.unlock_and_wake_helper(state, work);
    }

    /// The walk enters the host directory `key`: its listing, read ahead, or None when no
    /// helper read it (the walk reads it itself). Listings read for directories the walk
    /// has passed (it entered a later one) are dropped.
    pub fn take(&self, key: DirectoryKey) -> Option<Listing> {
        let mut state = self.lock();
        loop {
            let found = state
                .read
                .iter()
                .find(|(_, (k, _))| *k == key)
                .map(|(&n, _)| n);
            if let Some(number) = found {
                let mut later = state.read.split_off(&number);
                state.read = later.split_off(&(number + 1));
                let (_, listing) = later.remove(&number)?;
                // Room ahead again.
                let work = !state.to_read.is_empty();
                self.unlock_and_wake_helper(state, work);
                return Some(listing);
            }
            if !state.reading.contains_key(&key) {
                // Not read, nor being read: the walk reads it, and no helper must.
                state.to_read.remove(key);
                return None;
            }
            state = self.walk_wait(state);
        }
    }

    /// Queues a file for a helper to fill; gives it back when [`FILL_BACKLOG`] wait
    /// already, for the walk to fill itself.
    pub fn fill_later(&self, job: J) -> Option<J> {
        let mut state = self.lock();
        if state.fills.len() >= FILL_BACKLOG {
            return Some(job);
        }
        state.fills.push_back(job);
        let work = state.fills.len() >= FILL_BATCH;
        self.unlock_and_wake_helper(state, work);
        None
    }

    /// The walk is over: its thread fills queued files with `fill` beside the helpers,
    /// which return once the queue is empty.
    pub fn finish(&self, fill: impl Fn(J)) {
        let mut state = self.lock();
        state.walk_over = true;
        state.to_read.clear();
        self.work.notify_all();
        while let Some(job) = state.fills.pop_front() {
            drop(state);
            fill(job);
            state = self.lock();
        }
    }

    /// A helper thread: reads directories ahead of the walk (first) and fills queued files
    /// with `fill`, until [`Helpers::finish`] and the queue is empty.
    pub fn run(&self, fill: impl Fn(J)) {
        let working_directory = OwnWorkingDirectory::of_this_thread();
        let mut state = self.lock();
        loop {
            let ahead = state.read.len() + state.reading.len();
            if ahead < DIRECTORIES_AHEAD {
                if let Some(job) = state.to_read.pop() {
                    let number = state.next_number;
                    state.next_number += 1;
                    state.reading.insert(job.key, number);
                    drop(state);
                    let listing = read_directory(&job, &working_directory);
                    state = self.lock();
                    state.reading.remove(&job.key);
                    if let Some((dir, listing)) = listing {
                        if !state.walk_over {
                            state.push_subdirectories(&dir, &listing);
                            state.read.insert(number, (job.key, listing));
                        }
                    }
                    if state.walk_waits {
                        drop(state);
                        self.progress.notify_one();
                        state = self.lock();
                    }
                    continue;
                }
            }
            if let Some(job) = state.fills.pop_front() {
                drop(state);
                fill(job);
                state = self.lock();
                continue;
            }
            if state.walk_over {
                return;
            }
            state.idle_helpers += 1;
            state = self.work.wait(state).unwrap_or_else(|p| p.into_inner());
            state.idle_helpers -= 1;
        }
    }
}

impl<J> State<J> {
    /// Puts the subdirectories of `listing` (of `dir`) on the work list, so that the first
    /// by name is read next; the directories farthest ahead go when the list is full.
    fn push_subdirectories(&mut self, dir: &Arc<File>, listing: &Listing) {
        let subdirectories = listing.iter().rev().filter_map(|(name, facts)| {
            let meta = &facts.as_ref()?.meta;
            meta.is_dir().then(|| (name.clone(), meta.key()))
        });
        self.to_read.push(dir, subdirectories.collect());
    }
}

/// The directories waiting to be read ahead, as a stack in the walk's order: groups, each
/// the subdirectories of one directory read (which share its open descriptor), the next
/// to read last in the last group. Empty groups are not kept.
#[derive(Default)]
struct WorkList {
    groups: Vec<Subdirectories>,
}

/// Subdirectories of one host directory, waiting to be read ahead.
struct Subdirectories {
    parent: Arc<File>,
    /// Names and keys, the next to read last.
    left: Vec<(OsString, DirectoryKey)>,
}

impl WorkList {
    fn is_empty(&self) -> bool {
        self.groups.is_empty()
    }

    /// Puts `left` (subdirectories of `parent`, the first to read last) on top; past
    /// [`OPEN_PARENTS`] groups, the bottom one (the farthest ahead of the walk) goes.
    fn push(&mut self, parent: &Arc<File>, left: Vec<(OsString, DirectoryKey)>) {
        if left.is_empty() {
            return;
        }
        self.groups.push(Subdirectories {
            parent: Arc::clone(parent),
            left,
        });
        if self.groups.len() > OPEN_PARENTS {
            self.groups.remove(0);
        }
    }

    /// The next directory to read.
    fn pop(&mut self) -> Option<ReadJob> {
        let group = self.groups.last_mut()?;
        // OK to unwrap: empty groups are not kept.
        let (name, key) = group.left.pop().unwrap();
        let parent = Arc::clone(&group.parent);
        if group.left.is_empty() {
            self.groups.pop();
        }
        Some(ReadJob { parent, name, key })
    }

    /// Takes directory `key` off the list (the walk reads it itself). It is the next to
    /// read unless the walk skipped one, so the top is looked at first.
    fn remove(&mut self, key: DirectoryKey) {
        let Some(top) = self.groups.last_mut() else {
            return;
        };
        if top.left.last().is_some_and(|(_, k)| *k == key) {
            self.pop();
            return;
        }
        for group in &mut self.groups {
            group.left.retain(|(_, k)| *k != key);
        }
        self.groups.retain(|group| !group.left.is_empty());
    }

    fn clear(&mut self) {
        self.groups.clear();
    }
}

/// Reads `job`'s directory: opened, checked to be the one expected, listed, sorted, and
/// each entry's facts read. None when it cannot be opened or listed (the walk will read
/// it, and report why).
fn read_directory(
    job: &ReadJob,
    working_directory: &OwnWorkingDirectory,
) -> Option<(Arc<File>, Listing)> {
    let at = HostEntry {
        dir: &job.parent,
        name: &job.name,
        shown: Path::new(&job.name),
    };
    let dir = at.open_directory(job.key).ok()?;
    let names = sorted_names(&dir).ok()?;
    let listing = listing_with_facts(&dir, names, working_directory.enter(&dir));
    Some((Arc::new(dir), listing))
}

/// `names` (of host directory `dir`), each with its facts where they could be read (the
/// walk reads again, and reports, what could not), the xattrs through `paths`.
pub fn listing_with_facts(dir: &File, names: Vec<OsString>, paths: XattrPaths) -> Listing {
    names
        .into_iter()
        .map(|name| {
            let facts = entry_facts(
                &HostEntry {
                    dir,
                    name: &name,
                    // Unused: the reasons are not kept.
                    shown: Path::new(&name),
                },
                paths,
            );
            (name, facts)
        })
        .collect()
}

/// How the entries of a listed directory are named for the xattr calls, which have no
/// `*at` form before Linux 6.13.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum XattrPaths {
    /// `/proc/self/fd/DIR/NAME`: five components to look up, two of them in procfs.
    ThroughProc,
    /// `NAME` alone: this thread's working directory is the listed directory.
    InWorkingDirectory,
}

/// A helper thread's own working directory (`unshare(CLONE_FS)`: the process's stays
/// where it is), moved into each directory the helper reads, so that the xattr calls name
/// its entries by their names alone. Through /proc, listing an entry's xattrs was the
/// dearest of its facts to read (one system call with the path walk above).
struct OwnWorkingDirectory {
    /// The unshare succeeded (a seccomp filter may refuse it; /proc paths are used then).
    own: bool,
}

impl OwnWorkingDirectory {
    fn of_this_thread() -> Self {
        // SAFETY: CLONE_FS gives this thread its own working directory, root and umask,
        // which nothing else on a helper thread uses (it reaches files through directory
        // descriptors); the descriptor table, which `unshare_unsafe` warns of (CLONE_FILES),
        // stays shared.
        let unshared = unsafe { rustix::thread::unshare_unsafe(rustix::thread::UnshareFlags::FS) };
        OwnWorkingDirectory {
            own: unshared.is_ok(),
        }
    }

    /// Moves this thread into `dir`: how entries of `dir` can be named now.
    fn enter(&self, dir: &File) -> XattrPaths {
        match self.own && rustix::process::fchdir(dir).is_ok() {
            true => XattrPaths::InWorkingDirectory,
            false => XattrPaths::ThroughProc,
        }
    }
}

/// The names in host directory `dir` but `.` and `..`, sorted (the walk's order: byte
/// order, whatever order the host lists them in); an error names what failed.
pub fn sorted_names(dir: &File) -> Result<Vec<OsString>, rustix::io::Errno> {
    let mut names = Vec::new();
    for entry in rustix::fs::Dir::read_from(dir)? {
        let name = entry?.file_name().to_bytes().to_vec();
        if name != b"." && name != b".." {
            names.push(OsString::from_vec(name));
        }
    }
    names.sort();
    Ok(names)
}

/// The facts of one entry, or None if any could not be read.
fn entry_facts(at: &HostEntry<'_>, paths: XattrPaths) -> Option<EntryFacts> {
    let meta = at.metadata().ok()?;
    let link = match meta.file_type() {
        rustix::fs::FileType::Symlink => Some(at.read_link().ok()?),
        _ => None,
    };
    let xattrs = (!meta.is_dir()).then(|| match paths {
        XattrPaths::InWorkingDirectory => read_xattrs(XattrSource::Path(Path::new(at.name))),
        XattrPaths::ThroughProc => read_xattrs(XattrSource::Path(&at.proc_path())),
    });
    Some(EntryFacts { meta, link, xattrs })
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;

    /// The walk's side, as `Import::ordered_contents` does it: `dir`'s listing (at
    /// `path`), read ahead when a helper did (true), else read here and its subdirectories
    /// handed to the helpers (false).
    fn listing_of(helpers: &Helpers<()>, dir: &Arc<File>) -> (Listing, bool) {
        let key = HostMetadata::of(dir).unwrap().key();
        match helpers.take(key) {
            Some(listing) => (listing, true),
            None => {
                let names = sorted_names(dir).unwrap();
                let listing = listing_with_facts(dir, names, XattrPaths::ThroughProc);
                helpers.read_subdirectories(dir, &listing);
                (listing, false)
            }
        }
    }

    fn open(path: &Path) -> Arc<File> {
        Arc::new(File::open(path).unwrap())
    }

    /// Walks the directories of `listing` (of `path`) and below as the import does, depth
    /// first in name order, checking each listing against the directory's contents (every
    /// name, sorted; each symlink's target; each file's xattrs, read by name from a
    /// helper's own working directory or through /proc by the walk), except `skip`, which
    /// the walk does not enter
    /// (as it does not enter one it cannot make). Returns how many listings a helper read.
    fn walk_below(helpers: &Helpers<()>, listing: &Listing, path: &Path, skip: &Path) -> usize {
        use std::os::unix::ffi::OsStringExt;
        let mut expected: Vec<OsString> = std::fs::read_dir(path)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        expected.sort();
        let names: Vec<_> = listing.iter().map(|(n, _)| n.clone()).collect();
        assert_eq!(names, expected, "{path:?}");
        let mut read_ahead = 0;
        for (name, facts) in listing {
            let child = path.join(name);
            let facts = facts
                .as_ref()
                .unwrap_or_else(|| panic!("{child:?}: no facts"));
            if facts.meta.file_type() == rustix::fs::FileType::Symlink {
                let target = std::fs::read_link(&child).unwrap().into_os_string();
                assert_eq!(facts.link, Some(target.into_vec()), "{child:?}");
            }
            if facts.meta.is_file() {
                let got = facts.xattrs.clone().unwrap().unwrap();
                let value = std::fs::read(&child).unwrap();
                assert_eq!(got, [("user.e4".into(), Ok(value))], "{child:?}");
            }
            if facts.meta.is_dir() && child != skip {
                let (below, was_read) = listing_of(helpers, &open(&child));
                read_ahead += usize::from(was_read) + walk_below(helpers, &below, &child, skip);
            }
        }
        read_ahead
    }

    /// Every directory's listing, taken depth first in name order as the walk takes them
    /// while a helper reads ahead, is that directory's (sorted, with its facts), whether a
    /// helper read it or the walk did: with more subdirectories in one directory than the
    /// helpers keep directories ahead, with more directories holding subdirectories left
    /// to read than the work list keeps (a chain deeper than [`OPEN_PARENTS`], a sibling
    /// at each level, so the farthest ahead are dropped and the walk reads them), and when
    /// the walk skips a directory whose listing was read.
    #[test]
    fn the_walk_gets_each_directory_its_own_listing_in_order() {
        let root = tempfile::tempdir().unwrap();
        for d in 0..(DIRECTORIES_AHEAD + 6) {
            let dir = root.path().join(format!("d{d:03}"));
            std::fs::create_dir_all(dir.join("inner")).unwrap();
            std::fs::write(dir.join("file"), format!("{d}")).unwrap();
            xattr::set(dir.join("file"), "user.e4", format!("{d}").as_bytes()).unwrap();
            std::os::unix::fs::symlink(format!("target{d}"), dir.join("link")).unwrap();
        }
        let mut level = root.path().join("e");
        for depth in 0..(OPEN_PARENTS + 6) {
            std::fs::create_dir_all(level.join("leaf")).unwrap();
            let file = level.join("leaf").join("file");
            std::fs::write(&file, format!("{depth}")).unwrap();
            xattr::set(&file, "user.e4", format!("{depth}").as_bytes()).unwrap();
            std::os::unix::fs::symlink(format!("up{depth}"), level.join("link")).unwrap();
            level.push("c");
        }
        std::fs::create_dir(&level).unwrap();
        let skip = root.path().join("d003");
        let helpers = Helpers::<()>::new();
        let (top, _) = listing_of(&helpers, &open(root.path()));
        /// Ends the helper's work even when an assertion fails, so the test fails rather
        /// than waits for the helper forever.
        struct Finish<'a>(&'a Helpers<()>);
        impl Drop for Finish<'_> {
            fn drop(&mut self) {
                self.0.finish(|()| {});
            }
        }
        std::thread::scope(|scope| {
            scope.spawn(|| helpers.run(|()| {}));
            let _finish = Finish(&helpers);
            // Until the helper is as far ahead as it goes.
            while {
                let state = helpers.lock();
                !state.to_read.is_empty() && state.read.len() < DIRECTORIES_AHEAD
            } {
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            let read_ahead = walk_below(&helpers, &top, root.path(), &skip);
            assert!(
                read_ahead >= DIRECTORIES_AHEAD / 4,
                "{read_ahead} read ahead"
            );
        });
    }

    /// The work list gives directories back in the walk's order (a group's first name
    /// first, the last group pushed first), keeps at most [`OPEN_PARENTS`] groups by
    /// dropping the bottom one, and takes a directory off from the top or from anywhere.
    #[test]
    fn the_work_list_pops_in_walk_order_and_drops_the_farthest_ahead() {
        let parent = open(Path::new("/"));
        let group = |g: u64| -> Vec<(OsString, DirectoryKey)> {
            (0..3)
                .rev()
                .map(|i| (OsString::from(format!("{g}.{i}")), (g, i)))
                .collect()
        };
        let mut list = WorkList::default();
        for g in 0..(OPEN_PARENTS as u64 + 2) {
            list.push(&parent, group(g));
        }
        list.push(&parent, Vec::new());
        assert_eq!(list.groups.len(), OPEN_PARENTS);
        let top = OPEN_PARENTS as u64 + 1;
        list.remove((top, 0));
        list.remove((top, 2));
        list.remove((top - 1, 1));
        let mut popped = Vec::new();
        while let Some(job) = list.pop() {
            assert_eq!(
                job.name,
                OsString::from(format!("{}.{}", job.key.0, job.key.1))
            );
            popped.push(job.key);
        }
        let mut expected = vec![(top, 1), (top - 1, 0), (top - 1, 2)];
        for g in (2..top - 1).rev() {
            expected.extend((0..3).map(|i| (g, i)));
        }
        assert_eq!(popped, expected);
        assert!(list.is_empty());
    }

    /// Every file queued for a fill is filled once, by a helper or by the walk (when the
    /// helpers are behind, and at the end), however slow the helpers are.
    #[test]
    fn every_queued_fill_is_done_once() {
        let helpers = Helpers::<usize>::new();
        let filled = Mutex::new(Vec::new());
        let fill = |job: usize| filled.lock().unwrap().push(job);
        std::thread::scope(|scope| {
            scope.spawn(|| {
                helpers.run(|job| {
                    std::thread::sleep(std::time::Duration::from_micros(200));
                    fill(job);
                })
            });
            for job in 0..2000 {
                if let Some(job) = helpers.fill_later(job) {
                    fill(job);
                }
            }
            helpers.finish(fill);
        });
        let mut filled = filled.into_inner().unwrap();
        filled.sort_unstable();
        assert!(
            filled == (0..2000).collect::<Vec<_>>(),
            "{} filled",
            filled.len()
        );
    }
}

//! A real source tree as a workload (`untar`, `rm-tree`, `git-status`): what a developer
//! or a build sandbox does to a mounted filesystem, through the system's own `tar`, `rm`
//! and `git`, so the filesystem sees their mix of sizes, depths and calls rather than the
//! micro-benchmarks' one operation.
//!
//! The tree is packed once, before any point, into a tarball in the run's scratch
//! directory ([`TreeTarball::build`]); each thread of a point then works on its own copy.

use std::io;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The tree `--tree` defaults to: the system's C headers. A real source tree (thousands of
/// files from a few bytes to a few hundred KiB, directories a few levels deep), and present
/// wherever e4 itself can be built: Rust links through `cc`, and Debian's gcc depends on
/// libc6-dev, which fills /usr/include (about 2,000 files and 30 MB on a bare build
/// machine; more where other -dev packages are installed, so the report says how many).
pub const DEFAULT_TREE: &str = "/usr/include";

/// The tarball of a tree, and what it holds.
#[derive(Debug, Clone)]
pub struct TreeTarball {
    /// The directory it was made from.
    pub source: PathBuf,
    /// The tarball (uncompressed: the clock measures the filesystem, not gzip).
    pub path: PathBuf,
    /// Regular files in the tree: what `files/s` counts.
    pub files: u64,
    /// Their bytes.
    pub bytes: u64,
}

impl TreeTarball {
    /// Packs `source` into `scratch/tree.tar` with the system's `tar` and counts its files.
    pub fn build(source: &Path, scratch: &Path) -> Result<TreeTarball, String> {
        let (files, bytes) =
            count_files(source).map_err(|e| format!("the tree {}: {e}", source.display()))?;
        if files == 0 {
            return Err(format!("the tree {} holds no files", source.display()));
        }
        let path = scratch.join("tree.tar");
        run(
            Command::new("tar")
                .arg("-cf")
                .arg(&path)
                .arg("-C")
                .arg(source)
                .arg("."),
            &format!("tar -cf {} -C {} .", path.display(), source.display()),
        )
        .map_err(|e| e.to_string())?;
        Ok(TreeTarball {
            source: source.to_path_buf(),
            path,
            files,
            bytes,
        })
    }

    /// Extracts the tree into `dir` (which exists).
    pub fn extract(&self, dir: &Path) -> io::Result<()> {
        run(
            Command::new("tar")
                .arg("-xf")
                .arg(&self.path)
                .arg("-C")
                .arg(dir),
            &format!("tar -xf into {}", dir.display()),
        )
    }

    /// Extracts the tree into `dir` and commits it there as a new git repository, then runs
    /// `git status` once, so the index holds every file's stat data and the timed runs find
    /// the caches as a developer running it again does.
    pub fn extract_committed(&self, dir: &Path) -> io::Result<()> {
        self.extract(dir)?;
        run(git(dir).args(["init", "-q"]), "git init")?;
        run(git(dir).args(["add", "-A"]), "git add -A")?;
        run(
            git(dir).args(["commit", "-q", "--no-verify", "-m", "tree"]),
            "git commit",
        )?;
        git_status_is_clean(dir)
    }
}

/// Whether the system's `git` runs: checked once before any point, so that a missing
/// one is one line, not a failure per point.
pub fn check_git() -> Result<(), String> {
    run(Command::new("git").arg("--version"), "git --version").map_err(|e| e.to_string())
}

/// `rm -rf dir`.
pub fn remove(dir: &Path) -> io::Result<()> {
    run(
        Command::new("rm").arg("-rf").arg(dir),
        &format!("rm -rf {}", dir.display()),
    )
}

/// Runs `git status` in the work tree `dir`; an error unless it reports nothing changed
/// (the tree read back is the tree committed).
pub fn git_status_is_clean(dir: &Path) -> io::Result<()> {
    let out = git(dir)
        .args(["status", "--porcelain"])
        .stdin(Stdio::null())
        .output()
        .map_err(|e| io::Error::new(e.kind(), format!("cannot run git: {e}")))?;
    if !out.status.success() {
        return Err(io::Error::other(format!(
            "git status in {} failed ({}): {}",
            dir.display(),
            out.status,
            first_line(&out.stderr)
        )));
    }
    if !out.stdout.is_empty() {
        return Err(io::Error::other(format!(
            "git status in {} shows changes to the committed tree: {}",
            dir.display(),
            first_line(&out.stdout)
        )));
    }
    Ok(())
}

/// `git -C dir` with no configuration but what the benchmark sets: a user's
/// `core.fsmonitor`, untracked cache or hooks would change what is measured.
fn git(dir: &Path) -> Command {
    let mut c = Command::new("git");
    c.env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .args([
            "-c",
            "user.name=e4 bench",
            "-c",
            "user.email=e4-bench@localhost",
        ])
        .args(["-c", "safe.directory=*", "-c", "commit.gpgsign=false"])
        .arg("-C")
        .arg(dir);
    c
}

/// Runs `command` (described as `what`) to completion; one line saying what failed and
/// why (the program missing, or its first line of complaint) otherwise.
fn run(command: &mut Command, what: &str) -> io::Result<()> {
    let program = command.get_program().to_string_lossy().into_owned();
    let out = command
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .map_err(|e| io::Error::new(e.kind(), format!("cannot run {program}: {e}")))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(io::Error::other(format!(
            "{what} failed ({}): {}",
            out.status,
            first_line(&out.stderr)
        )))
    }
}

fn first_line(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes)
        .lines()
        .next()
        .unwrap_or("")
        .to_string()
}

/// Regular files under `dir` (not following symbolic links) and their bytes.
fn count_files(dir: &Path) -> io::Result<(u64, u64)> {
    let (mut files, mut bytes) = (0, 0);
    let mut pending = vec![dir.to_path_buf()];
    while let Some(d) = pending.pop() {
        for entry in std::fs::read_dir(&d)? {
            let entry = entry?;
            let kind = entry.file_type()?;
            if kind.is_dir() {
                pending.push(entry.path());
            } else if kind.is_file() {
                files += 1;
                bytes += entry.metadata()?.len();
            }
        }
    }
    Ok((files, bytes))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::fs_ops::PosixOps;
    use crate::pinning::{Pin, Placement};
    use crate::target::{run_point, Target, TargetError};
    use crate::workload::{run as run_workload, AppendBy, Params, Workload};

    /// A tree of 4 files (one empty, one in a subdirectory two levels down) and a symbolic
    /// link, packed into `scratch`.
    fn small_tree(scratch: &Path) -> TreeTarball {
        let source = scratch.join("source");
        std::fs::create_dir_all(source.join("include/sys")).unwrap();
        std::fs::write(source.join("a.h"), "int a;\n").unwrap();
        std::fs::write(source.join("empty.h"), "").unwrap();
        std::fs::write(source.join("include/b.h"), "int b;\n".repeat(1000)).unwrap();
        std::fs::write(source.join("include/sys/c.h"), "#define C 1\n").unwrap();
        std::os::unix::fs::symlink("a.h", source.join("link.h")).unwrap();
        TreeTarball::build(&source, scratch).unwrap()
    }

    fn params(threads: usize, tree: &TreeTarball) -> Params {
        Params {
            threads,
            duration: Duration::from_millis(200),
            size: 4096,
            append_by: AppendBy::Write,
            placement: Placement::for_this_process(Pin::None).unwrap(),
            settle: false,
            tree: Some(tree.clone()),
        }
    }

    /// The regular files under `dir` with their bytes, by path relative to it.
    fn files_under(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
        let mut found = Vec::new();
        let mut pending = vec![dir.to_path_buf()];
        while let Some(d) = pending.pop() {
            for entry in std::fs::read_dir(&d).unwrap() {
                let path = entry.unwrap().path();
                let kind = std::fs::symlink_metadata(&path).unwrap().file_type();
                if kind.is_dir() {
                    pending.push(path);
                } else if kind.is_file() {
                    let bytes = std::fs::read(&path).unwrap();
                    found.push((path.strip_prefix(dir).unwrap().to_path_buf(), bytes));
                }
            }
        }
        found.sort();
        found
    }

    #[test]
    fn the_tarball_counts_the_trees_regular_files_and_their_bytes() {
        let scratch = tempfile::tempdir().unwrap();
        let tree = small_tree(scratch.path());
        assert_eq!((tree.files, tree.bytes), (4, 7 + 7000 + 12));
        assert!(tree.path.starts_with(scratch.path()));
        let missing = TreeTarball::build(&scratch.path().join("none"), scratch.path()).unwrap_err();
        assert!(
            missing.contains("none") && !missing.contains('\n'),
            "{missing}"
        );
        let empty = scratch.path().join("empty");
        std::fs::create_dir(&empty).unwrap();
        let none = TreeTarball::build(&empty, scratch.path()).unwrap_err();
        assert!(none.contains("holds no files"), "{none}");
    }

    /// A directory `fs` under `scratch` and the POSIX target working in it.
    fn posix_root(scratch: &Path) -> (PathBuf, PosixOps) {
        let root = scratch.join("fs");
        std::fs::create_dir(&root).unwrap();
        (root.clone(), PosixOps { root })
    }

    #[test]
    fn untar_gives_each_thread_the_whole_tree_and_counts_its_files() {
        let scratch = tempfile::tempdir().unwrap();
        let tree = small_tree(scratch.path());
        let (root, fs) = posix_root(scratch.path());
        let m = run_workload(&fs, Workload::Untar, &params(2, &tree)).unwrap();
        assert_eq!((m.ops, m.bytes, m.files), (2, 2 * tree.bytes, Some(8)));
        let source = files_under(&tree.source);
        for t in 0..2 {
            let copy = root.join(format!("t{t}"));
            assert_eq!(files_under(&copy), source, "thread {t}");
            assert_eq!(
                std::fs::read_link(copy.join("link.h")).unwrap(),
                Path::new("a.h")
            );
        }
    }

    #[test]
    fn rm_tree_removes_each_threads_copy_made_before_the_clock() {
        let scratch = tempfile::tempdir().unwrap();
        let tree = small_tree(scratch.path());
        let (root, fs) = posix_root(scratch.path());
        let m = run_workload(&fs, Workload::RmTree, &params(2, &tree)).unwrap();
        assert_eq!((m.ops, m.files), (2, Some(8)));
        for t in 0..2 {
            let left: Vec<_> = std::fs::read_dir(root.join(format!("t{t}")))
                .unwrap()
                .collect();
            assert!(left.is_empty(), "thread {t} left {left:?}");
        }
    }

    #[test]
    fn git_status_runs_until_the_deadline_in_a_committed_tree_and_sees_a_change() {
        let scratch = tempfile::tempdir().unwrap();
        let tree = small_tree(scratch.path());
        let (root, fs) = posix_root(scratch.path());
        let m = run_workload(&fs, Workload::GitStatus, &params(2, &tree)).unwrap();
        assert!(m.ops >= 2, "at least one run per thread: {}", m.ops);
        assert_eq!(m.files, Some(m.ops * tree.files));
        assert!(m.elapsed >= Duration::from_millis(200), "{:?}", m.elapsed);
        // The check each run makes: a tree that differs from its commit is an error.
        let work = root.join("t1");
        git_status_is_clean(&work).unwrap();
        std::fs::write(work.join("include/sys/c.h"), "#define C 2\n").unwrap();
        let changed = git_status_is_clean(&work).unwrap_err().to_string();
        assert!(changed.contains("c.h"), "{changed}");
    }

    #[test]
    fn the_e4_target_is_not_applicable_to_the_tree_workloads() {
        let scratch = tempfile::tempdir().unwrap();
        let tree = small_tree(scratch.path());
        for workload in [Workload::Untar, Workload::RmTree, Workload::GitStatus] {
            for target in [Target::E4, Target::E4NoJournal] {
                let point = run_point(&target, workload, &params(1, &tree), scratch.path(), "x");
                match point {
                    Err(TargetError::NotApplicable(why)) => {
                        assert!(why.contains(workload.name()), "{why}")
                    }
                    _ => panic!("{} on {}: not refused", workload.name(), target.name()),
                }
            }
        }
        assert!(!scratch.path().join("x").exists(), "no image was made");
    }
}

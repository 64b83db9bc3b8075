//! Unmounting a mount by its directory, retrying while it is busy.
//!
//! `umount` fails with EBUSY while anything holds the mount: an open file, a working
//! directory, and for a moment the descriptors a process copies when it forks (a file
//! opened with O_CLOEXEC is still in the child until it execs). fuser's
//! `SessionUnmounter` gives its handle on the mount up when its one `umount` fails, so
//! a retry through it unmounts nothing and the serving thread waits for ever; here the
//! directory itself is unmounted again (`umount2`, or `fusermount3 -u` without the
//! privilege), and only while the mount on it is still the one that was made (its
//! device in /proc/self/mountinfo), never a later mount on the same directory.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use e4_host_tools::mount_table::mounted_device;
use nix::errno::Errno;

use crate::MountError;

/// Between two attempts at a busy mount.
const RETRY_INTERVAL: Duration = Duration::from_millis(50);

/// A mount on a directory, identified by its device number.
#[derive(Debug, Clone)]
pub(crate) struct MountPoint {
    /// Absolute and canonical, as /proc/self/mountinfo names it.
    dir: PathBuf,
    /// `major:minor` of the mount when it was found; `None` where /proc cannot tell, and
    /// then whatever is mounted on `dir` is taken for it.
    device: Option<(u32, u32)>,
}

impl MountPoint {
    /// The mount now on `dir`, an absolute path without symbolic links (the top mount,
    /// where several are stacked). Not canonicalised here: that would look the mount's
    /// root up through the mount, which may not be served yet.
    pub(crate) fn on(dir: &Path) -> MountPoint {
        MountPoint {
            dir: dir.to_path_buf(),
            device: mounted_device(dir),
        }
    }

    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    /// Whether this mount is still the top one on its directory. Unknown (no device) is
    /// taken as mounted: the unmount itself then tells (EINVAL: nothing mounted there).
    fn is_mounted(&self) -> bool {
        self.device
            .is_none_or(|ours| mounted_device(&self.dir) == Some(ours))
    }

    /// Unmounts, retrying while the mount is busy, for up to `patience`; then fails with
    /// the last attempt's complaint and the processes that hold the mount. Gone already
    /// (or replaced by another mount) is success: someone unmounted it.
    pub(crate) fn unmount_within(&self, patience: Duration) -> Result<(), MountError> {
        let start = Instant::now();
        loop {
            let reason = match self.attempt() {
                Ok(()) => return Ok(()),
                Err(reason) => reason,
            };
            if start.elapsed() >= patience {
                let held_by = match holders(&self.dir) {
                    found if found.is_empty() => "no process this one can see".to_string(),
                    found => found.join(", "),
                };
                return Err(MountError::Unmount {
                    dir: self.dir.display().to_string(),
                    reason: format!("{reason} (held by {held_by})"),
                });
            }
            std::thread::sleep(RETRY_INTERVAL);
        }
    }

    /// One try; why it failed otherwise.
    fn attempt(&self) -> Result<(), String> {
        if !self.is_mounted() {
            return Ok(());
        }
        match nix::mount::umount2(&self.dir, nix::mount::MntFlags::empty()) {
            Ok(()) | Err(Errno::EINVAL | Errno::ENOENT) => Ok(()),
            // Only root may unmount directly; fusermount3 (set-user-id) unmounts a FUSE
            // mount for the user who made it.
            Err(Errno::EPERM) => self.fusermount(),
            Err(e) => Err(e.desc().to_string()),
        }
    }

    fn fusermount(&self) -> Result<(), String> {
        let out = Command::new("fusermount3")
            .arg("-u")
            .arg("--")
            .arg(&self.dir)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("cannot run fusermount3: {e}"))?;
        if out.status.success() || !self.is_mounted() {
            return Ok(());
        }
        let said = String::from_utf8_lossy(&out.stderr);
        Err(said
            .lines()
            .next()
            .unwrap_or("fusermount3 -u failed")
            .to_string())
    }
}

/// Unmounts whatever is mounted on `dir` (a mount this process does not serve: `e4 mount`'s
/// daemon, say), as [`Mounted::unmount`](crate::Mounted::unmount) unmounts its own:
/// retrying while it is busy for up to `patience`, then failing in one line that names
/// what holds it. Not mounted is success.
pub fn unmount_dir(dir: &Path, patience: Duration) -> Result<(), MountError> {
    // The directory's parent is resolved, not the directory: that would ask the mount.
    let canonical = match (dir.parent(), dir.file_name()) {
        (Some(parent), Some(name)) => std::fs::canonicalize(parent)
            .map(|p| p.join(name))
            .unwrap_or_else(|_| dir.to_path_buf()),
        _ => dir.to_path_buf(),
    };
    MountPoint::on(&canonical).unmount_within(patience)
}

/// The processes with something under `dir` as their working or root directory, their
/// program, an open file or a mapped one, as `pid N (command)`, from /proc (the paths
/// as this process sees them; nothing on the mount is touched).
pub(crate) fn holders(dir: &Path) -> Vec<String> {
    let Ok(processes) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut found: Vec<(u32, String)> = processes
        .filter_map(|e| {
            let pid: u32 = e.ok()?.file_name().to_str()?.parse().ok()?;
            let proc_dir = PathBuf::from(format!("/proc/{pid}"));
            holds(&proc_dir, dir).then(|| {
                let command = std::fs::read_to_string(proc_dir.join("comm")).unwrap_or_default();
                (pid, command.trim().to_string())
            })
        })
        .collect();
    found.sort();
    found
        .into_iter()
        .map(|(pid, command)| format!("pid {pid} ({command})"))
        .collect()
}

/// Whether the process of `proc_dir` holds anything under `dir`.
fn holds(proc_dir: &Path, dir: &Path) -> bool {
    let under = |link: &Path| std::fs::read_link(link).is_ok_and(|to| to.starts_with(dir));
    ["cwd", "root", "exe"]
        .iter()
        .any(|l| under(&proc_dir.join(l)))
        || std::fs::read_dir(proc_dir.join("fd"))
            .is_ok_and(|fds| fds.flatten().any(|fd| under(&fd.path())))
        || std::fs::read_to_string(proc_dir.join("maps")).is_ok_and(|maps| {
            maps.lines()
                .filter_map(|l| l.find('/').map(|at| Path::new(&l[at..])))
                .any(|path| path.starts_with(dir))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_process_working_in_a_directory_holds_it() {
        let dir = tempfile::tempdir().unwrap();
        let dir = std::fs::canonicalize(dir.path()).unwrap();
        let mut child = Command::new("sleep")
            .arg("30")
            .current_dir(&dir)
            .spawn()
            .unwrap();
        let held = holders(&dir);
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(
            held.contains(&format!("pid {} (sleep)", child.id())),
            "{held:?}"
        );
        assert!(holders(&dir.join("elsewhere")).is_empty());
    }
}

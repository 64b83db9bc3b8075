//! Safe FUSE mounts in tests. A FUSE mount whose daemon stops answering blocks every
//! process that touches it, `sync` included, until its connection is aborted; so every
//! test mount is watched by a [`FuseGuard`], which aborts and detaches it when the test
//! overruns its limit and detaches it whenever the test ends without unmounting.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::Duration;

/// Whether something is mounted on a directory, read without touching the mount, which may
/// be stuck.
pub use e4_host_tools::mount_table::is_mounted;
use e4_host_tools::mount_table::mounted_device;

/// Reports that a test of `what` cannot mount with FUSE. With `E4_REQUIRE_FUSE=1` (CI sets
/// it wherever /dev/fuse is usable) that fails the test, so a FUSE test is never skipped
/// unnoticed; otherwise one line on stderr says so.
pub fn fuse_skipped(what: &str, reason: &str) {
    if std::env::var_os("E4_REQUIRE_FUSE").is_some_and(|v| v == "1") {
        panic!("E4_REQUIRE_FUSE=1 but {what} cannot mount with FUSE: {reason}");
    }
    eprintln!("{what}: FUSE test skipped: {reason}");
}

/// Ends the mount on `dir` whatever state its daemon is in: aborts the FUSE connection
/// (every waiting request fails, so nothing stays blocked), then detaches it.
fn force_unmount(dir: &Path) {
    if let Some((_, minor)) = mounted_device(dir) {
        let abort = format!("{FUSE_CONNECTIONS}/{minor}/abort");
        let _ = std::fs::write(abort, "1");
    }
    let detached = Command::new("fusermount3")
        .arg("-uz")
        .arg(dir)
        .output()
        .is_ok_and(|o| o.status.success());
    if !detached {
        let _ = Command::new("umount").arg("-l").arg(dir).output();
    }
}

/// Where the kernel lists FUSE connections, each with an `abort` file.
const FUSE_CONNECTIONS: &str = "/sys/fs/fuse/connections";

/// Mounts the FUSE control filesystem if nothing is mounted there yet: without it a
/// stuck connection cannot be aborted, and a test process killed while one of its
/// threads waits on its own mount stays a zombie, holding the mount, until reboot.
fn mount_fuse_control() {
    let mounted = std::fs::read_to_string("/proc/self/mountinfo")
        .is_ok_and(|info| info.lines().any(|l| l.contains(" - fusectl ")));
    if !mounted {
        let _ = Command::new("mount")
            .args(["-t", "fusectl", "fusectl", FUSE_CONNECTIONS])
            .output();
    }
}

/// Watches the FUSE mount on a directory for the length of a test (see the module doc).
pub struct FuseGuard {
    dir: PathBuf,
    stop: Option<mpsc::Sender<()>>,
    watchdog: Option<JoinHandle<()>>,
}

impl FuseGuard {
    /// Starts watching the mount on `dir`: if it is still mounted `limit` from now, its
    /// connection is aborted and it is detached.
    pub fn watch(dir: &Path, limit: Duration) -> Self {
        mount_fuse_control();
        let (stop, stopped) = mpsc::channel::<()>();
        let watched = dir.to_path_buf();
        let watchdog = std::thread::spawn(move || {
            if stopped.recv_timeout(limit) == Err(mpsc::RecvTimeoutError::Timeout)
                && is_mounted(&watched)
            {
                eprintln!(
                    "FUSE mount on {} still up after {limit:?}: aborted",
                    watched.display()
                );
                force_unmount(&watched);
            }
        });
        FuseGuard {
            dir: dir.to_path_buf(),
            stop: Some(stop),
            watchdog: Some(watchdog),
        }
    }
}

impl Drop for FuseGuard {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(w) = self.watchdog.take() {
            let _ = w.join();
        }
        if is_mounted(&self.dir) {
            force_unmount(&self.dir);
        }
    }
}

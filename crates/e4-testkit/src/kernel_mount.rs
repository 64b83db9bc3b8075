//! The kernel's view of an image: a read-only loop mount, when the machine allows one; and
//! loop devices a test attaches and mounts itself, every step bounded by `timeout`.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

/// Reports that a kernel comparison of `what` cannot run. With `E4_REQUIRE_KERNEL=1` (CI
/// sets it wherever loop mounts work) that fails the test, so a comparison is never skipped
/// unnoticed; otherwise it is printed (visible with `--nocapture`).
pub fn kernel_comparison_skipped(what: &str, reason: &str) {
    if std::env::var_os("E4_REQUIRE_KERNEL").is_some_and(|v| v == "1") {
        panic!("E4_REQUIRE_KERNEL=1 but the kernel comparison of {what} cannot run: {reason}");
    }
    eprintln!("{what}: kernel comparison skipped: {reason}");
}

/// A read-only loop mount, unmounted on drop.
pub struct KernelMount {
    dir: tempfile::TempDir,
    /// The image, to wait for its loop device to go after the unmount.
    image: PathBuf,
}

impl KernelMount {
    /// Mounts `image` read-only, or explains why it cannot (not root, no loop devices, no
    /// ext2/3 driver). Callers report the reason and skip only the kernel comparison — unless
    /// `E4_REQUIRE_KERNEL=1` is set (CI sets it wherever loop mounts work), in which case a
    /// failed mount fails the test, so a comparison can never be skipped silently.
    pub fn mount(image: &Path) -> Result<Self, String> {
        Self::mount_with(image, &[])
    }

    /// As [`KernelMount::mount`], with extra mount options (e.g. `sb=8193`).
    pub fn mount_with(image: &Path, options: &[&str]) -> Result<Self, String> {
        let result = Self::try_mount(image, options);
        if let Err(reason) = &result {
            kernel_comparison_skipped(&image.display().to_string(), reason);
        }
        result
    }

    /// Mounts `image` read-write (to let the kernel change an image e4 wrote, or to make one
    /// for e4 to change), or explains why it cannot. Unmounting (drop) writes it back.
    pub fn mount_writable(image: &Path) -> Result<Self, String> {
        let result = (|| {
            let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
            let out = bounded(
                Command::new("mount")
                    .args(["-o", "loop"])
                    .arg(image)
                    .arg(dir.path()),
            )?;
            if out.status.success() {
                Ok(KernelMount {
                    dir,
                    image: image.to_path_buf(),
                })
            } else {
                Err(format!(
                    "loop mount unavailable: {}",
                    String::from_utf8_lossy(&out.stderr).trim()
                ))
            }
        })();
        if let Err(reason) = &result {
            kernel_comparison_skipped(&image.display().to_string(), reason);
        }
        result
    }

    fn try_mount(image: &Path, options: &[&str]) -> Result<Self, String> {
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        // `noload` keeps a read-only mount from replaying a journal; the ext2 driver path
        // refuses it ("Mount option(s) incompatible with ext2"), so without a journal the
        // mount is retried without it.
        let mut last_error = String::new();
        for base in ["loop,ro,noload", "loop,ro"] {
            let mut all = vec![base];
            all.extend_from_slice(options);
            let out = bounded(
                Command::new("mount")
                    .args(["-o", &all.join(",")])
                    .arg(image)
                    .arg(dir.path()),
            )?;
            if out.status.success() {
                return Ok(KernelMount {
                    dir,
                    image: image.to_path_buf(),
                });
            }
            last_error = String::from_utf8_lossy(&out.stderr).trim().to_string();
        }
        Err(format!("loop mount unavailable: {last_error}"))
    }

    pub fn path(&self) -> PathBuf {
        self.dir.path().to_path_buf()
    }
}

impl Drop for KernelMount {
    /// Unmounts, retrying while the mount is briefly busy (another test's process may hold
    /// it for a moment); a mount that cannot be released fails the test, since a read-write
    /// mount's changes are only complete once it is unmounted.
    fn drop(&mut self) {
        let mut last = String::new();
        for _ in 0..50 {
            match bounded(Command::new("umount").arg(self.dir.path())) {
                Ok(out) if out.status.success() => {
                    // `mount -o loop` detaches its loop device when the last user lets
                    // go, which a prober (udev's blkid) may delay; e4 refuses to write an
                    // image a loop device still backs, so the next step waits for that.
                    wait_detached(&self.image);
                    return;
                }
                Ok(out) => last = String::from_utf8_lossy(&out.stderr).trim().to_string(),
                Err(e) => last = e.to_string(),
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        if !std::thread::panicking() {
            panic!("umount {} failed: {last}", self.dir.path().display());
        }
    }
}

/// Waits (up to 10 s) until no loop device is backed by `image`.
fn wait_detached(image: &Path) {
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(10) {
        let attached = bounded(Command::new("losetup").arg("-j").arg(image))
            .is_ok_and(|out| !out.stdout.is_empty());
        if !attached {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// How long one `losetup`, `mount` or `umount` step may take.
const STEP_LIMIT: &str = "20";

/// Runs `command` under `timeout`, so a mount or unmount that hangs (a wedged loop device,
/// a kernel bug) fails the test instead of stopping the run.
fn bounded(command: &mut Command) -> Result<Output, String> {
    let mut timed = Command::new("timeout");
    timed.arg(STEP_LIMIT).arg(command.get_program());
    timed.args(command.get_args());
    timed
        .output()
        .map_err(|e| format!("cannot run timeout: {e}"))
}

/// Runs a step, or says why it failed.
fn step(command: &mut Command) -> Result<String, String> {
    let shown = format!("{command:?}");
    let out = bounded(command)?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
    } else {
        Err(format!(
            "{shown} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// A loop device over an image, detached on drop (also when the test panics). For tests
/// of what happens while the kernel holds an image: attached, or mounted ([`LoopDevice::mount`]).
pub struct LoopDevice {
    device: PathBuf,
}

impl LoopDevice {
    /// Attaches `image` to a free loop device, or says why it cannot (not root, no loop
    /// devices). Callers report the reason with [`kernel_comparison_skipped`] and skip.
    pub fn attach(image: &Path) -> Result<Self, String> {
        let device = step(Command::new("losetup").args(["-f", "--show"]).arg(image))?;
        Ok(LoopDevice {
            device: PathBuf::from(device),
        })
    }

    /// The device, e.g. `/dev/loop3`.
    pub fn path(&self) -> &Path {
        &self.device
    }

    /// Mounts the device with `options` (e.g. `rw` or `ro`) on a new directory; unmounted on
    /// drop, before the device can be detached.
    pub fn mount(&self, options: &str) -> Result<LoopMount<'_>, String> {
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        step(
            Command::new("mount")
                .args(["-o", options])
                .arg(&self.device)
                .arg(dir.path()),
        )?;
        Ok(LoopMount { dir, _device: self })
    }
}

impl Drop for LoopDevice {
    /// Detaches, retrying while the device is briefly busy; a device left attached fails
    /// the test (unless it is already failing).
    fn drop(&mut self) {
        let mut last = String::new();
        for _ in 0..50 {
            match step(Command::new("losetup").arg("-d").arg(&self.device)) {
                Ok(_) => return,
                Err(e) => last = e,
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        if !std::thread::panicking() {
            panic!("{last}");
        }
    }
}

/// A mount of a [`LoopDevice`], unmounted on drop.
pub struct LoopMount<'a> {
    dir: tempfile::TempDir,
    _device: &'a LoopDevice,
}

impl LoopMount<'_> {
    pub fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for LoopMount<'_> {
    fn drop(&mut self) {
        let mut last = String::new();
        for _ in 0..50 {
            match step(Command::new("umount").arg(self.dir.path())) {
                Ok(_) => return,
                Err(e) => last = e,
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        if !std::thread::panicking() {
            panic!("{last}");
        }
    }
}

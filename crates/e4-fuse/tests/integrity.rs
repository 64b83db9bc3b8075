//! Data integrity under concurrency on e4's FUSE mount with the tools users trust: fio
//! writing from four jobs at once and reading every block back against its checksum
//! (`--verify=crc32c`, fatal on the first mismatch), and stress-ng's filesystem stressors
//! (`--verify` where a stressor checks what it wrote: hdd) running side by side, each a
//! few seconds. Then the mount is unmounted, the image must pass `e2fsck -fn`, and the
//! kernel's read-only mount of it must hold the files the mount showed, byte for byte.
//!
//! fio and stress-ng are Debian packages (`scripts/setup.sh` installs them); without one
//! its test says so and passes, unless `E4_REQUIRE_KERNEL=1` (CI), which makes that a
//! failure. Without FUSE, as the other mount tests (`E4_REQUIRE_FUSE=1`).

use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use e4_fuse::{MountError, MountOptions};
use e4_testkit::{
    e2fsck_clean, fuse_skipped, kernel_comparison_skipped, make_empty_image, FuseGuard, KernelMount,
};

/// The longest a mount stays up.
const LIMIT: Duration = Duration::from_secs(120);

/// Whether `tool` runs here; if not, says so (a failure under `E4_REQUIRE_KERNEL=1`).
fn have(tool: &str, what: &str) -> bool {
    let runs = Command::new(tool)
        .arg("--version")
        .output()
        .is_ok_and(|out| out.status.success());
    if !runs {
        kernel_comparison_skipped(
            what,
            &format!(
                "{tool} is not installed (Debian package {tool}; scripts/setup.sh installs it)"
            ),
        );
    }
    runs
}

/// Every regular file under `root`: its path and a hash of its contents.
fn files(root: &Path) -> BTreeMap<String, u64> {
    let mut found = BTreeMap::new();
    let mut dirs = vec![root.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let meta = std::fs::symlink_metadata(&path).unwrap();
            if meta.is_dir() {
                dirs.push(path);
            } else if meta.is_file() {
                let mut h = std::collections::hash_map::DefaultHasher::new();
                std::fs::read(&path).unwrap().hash(&mut h);
                let shown = path.strip_prefix(root).unwrap().display().to_string();
                found.insert(shown, h.finish());
            }
        }
    }
    found
}

/// Mounts a fresh 512 MiB image, runs `work` in the mount with a 60 s limit, and checks
/// what it left: `work`'s exit status, `e2fsck -fn`, and the kernel's view of the files.
fn run_on_mount(what: &str, work: impl FnOnce(&Path) -> Command) {
    let image = make_empty_image(&["-t", "ext4"], 512);
    let dir = tempfile::tempdir().unwrap();
    let mounted = match e4_fuse::mount(&image.path, dir.path(), &MountOptions::default()) {
        Ok(mounted) => mounted,
        Err(e @ MountError::Mount { .. }) => return fuse_skipped(what, &e.to_string()),
        Err(e) => panic!("{what}: {e}"),
    };
    let guard = FuseGuard::watch(dir.path(), LIMIT);
    let mut command = work(dir.path());
    let out = command.output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{what}: {:?}\n{text}", out.status);
    let shown = files(dir.path());
    mounted.unmount().unwrap();
    drop(guard);
    e2fsck_clean(&image.path).unwrap_or_else(|e| panic!("{what}: {e}"));
    match KernelMount::mount(&image.path) {
        Ok(view) => assert_eq!(files(&view.path()), shown, "{what}: the kernel's view"),
        Err(reason) => kernel_comparison_skipped(what, &reason),
    }
}

#[test]
fn fio_verifies_what_four_jobs_wrote_at_once() {
    let what = "fio integrity test";
    if !have("fio", what) {
        return;
    }
    run_on_mount(what, |dir| {
        let mut fio = Command::new("timeout");
        fio.arg("60").arg("fio").args([
            "--name=verify",
            &format!("--directory={}", dir.display()),
            "--numjobs=4",
            "--rw=randwrite",
            "--bs=4k",
            "--size=8m",
            "--ioengine=psync",
            "--fsync=64",
            "--verify=crc32c",
            "--do_verify=1",
            "--verify_fatal=1",
            "--group_reporting",
        ]);
        fio
    });
}

#[test]
fn stress_ngs_filesystem_stressors_leave_a_clean_image() {
    let what = "stress-ng integrity test";
    if !have("stress-ng", what) {
        return;
    }
    run_on_mount(what, |dir| {
        let mut stress = Command::new("timeout");
        stress.arg("60").arg("stress-ng").args([
            "--temp-path",
            dir.to_str().unwrap(),
            "--timeout",
            "3",
            "--verify",
            "--hdd",
            "2",
            "--hdd-bytes",
            "8m",
            "--hdd-opts",
            "wr-rnd,rd-rnd",
            "--dir",
            "1",
            "--rename",
            "1",
            "--link",
            "1",
            "--chmod",
            "1",
            "--xattr",
            "1",
            "--fallocate",
            "1",
            "--fallocate-bytes",
            "8m",
            "--dentry",
            "1",
            "--seek",
            "1",
            "--seek-size",
            "8m",
        ]);
        stress
    });
}

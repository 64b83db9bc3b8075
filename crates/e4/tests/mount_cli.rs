//! `e4 mount` as a user runs it: a bad option is refused in one line; with -f, each of
//! SIGINT, SIGTERM and SIGHUP unmounts and the image is written back clean; without -f
//! the command returns once the mount is up and the daemon writes the image back after
//! `fusermount3 -u`. Skipped where FUSE cannot mount (a failure under `E4_REQUIRE_FUSE=1`);
//! every mount is watched by a `FuseGuard`.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use e4_testkit::{e2fsck_clean, fuse_skipped, is_mounted, make_empty_image, FuseGuard};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

const LIMIT: Duration = Duration::from_secs(60);

fn e4() -> Command {
    Command::new(env!("CARGO_BIN_EXE_e4"))
}

/// Waits up to ten seconds for `done`.
fn eventually(mut done: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(10) {
        if done() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

fn cat(image: &Path, path: &str) -> String {
    let out = e4().arg("cat").arg(image).arg(path).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn an_unknown_option_is_refused_in_one_line() {
    let image = make_empty_image(&["-t", "ext4"], 8);
    let dir = tempfile::tempdir().unwrap();
    let out = e4()
        .args(["mount", "-o", "ro,journal_checksum"])
        .arg(&image.path)
        .arg(dir.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("unknown mount option \"journal_checksum\""),
        "{stderr}"
    );
}

/// Waits for a foreground mount by `child` on `dir`; false (with the skip reported) if
/// it exited first.
fn mounted_by(child: &mut Child, dir: &Path) -> bool {
    let mut exited = None;
    let up = eventually(|| {
        exited = child.try_wait().unwrap();
        exited.is_some() || is_mounted(dir)
    });
    if let Some(status) = exited {
        let mut reason = String::new();
        std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut reason).unwrap();
        fuse_skipped("e4 mount -f", &format!("{status}: {}", reason.trim()));
        return false;
    }
    assert!(up, "e4 mount -f did not mount within ten seconds");
    true
}

#[test]
fn each_unmount_signal_ends_a_foreground_mount_with_a_clean_image() {
    for signal in [Signal::SIGINT, Signal::SIGTERM, Signal::SIGHUP] {
        let image = make_empty_image(&["-t", "ext4"], 16);
        let dir = tempfile::tempdir().unwrap();
        let mut child = e4()
            .args(["mount", "-f", "-o", "threads=2"])
            .arg(&image.path)
            .arg(dir.path())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let _guard = FuseGuard::watch(dir.path(), LIMIT);
        if !mounted_by(&mut child, dir.path()) {
            return;
        }
        std::fs::write(dir.path().join("f"), signal.as_str()).unwrap();
        kill(Pid::from_raw(child.id() as i32), signal).unwrap();
        let mut status = None;
        assert!(
            eventually(|| {
                status = child.try_wait().unwrap();
                status.is_some()
            }),
            "e4 mount -f did not exit after {signal}"
        );
        assert!(status.unwrap().success(), "{signal}: {:?}", status);
        assert!(!is_mounted(dir.path()));
        e2fsck_clean(&image.path).unwrap();
        assert_eq!(cat(&image.path, "/f"), signal.as_str());
    }
}

/// The pid of the daemon serving `dir`, found by its command line.
fn daemon_serving(dir: &Path) -> Option<u32> {
    let dir = dir.to_str().unwrap();
    std::fs::read_dir("/proc").unwrap().find_map(|e| {
        let pid: u32 = e.ok()?.file_name().to_str()?.parse().ok()?;
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
        let args: Vec<&[u8]> = cmdline.split(|&b| b == 0).collect();
        (args.contains(&b"--daemon".as_slice()) && args.contains(&dir.as_bytes())).then_some(pid)
    })
}

#[test]
fn a_background_mount_is_up_when_the_command_returns_and_clean_after_fusermount3() {
    let image = make_empty_image(&["-t", "ext4"], 16);
    let dir = tempfile::tempdir().unwrap();
    let _guard = FuseGuard::watch(dir.path(), LIMIT);
    // Not a pipe: the daemon keeps the command's stderr open, and a reader of the pipe
    // would wait for it to end.
    let errors = tempfile::NamedTempFile::new().unwrap();
    let status = e4()
        .arg("mount")
        .arg(&image.path)
        .arg(dir.path())
        .stderr(errors.reopen().unwrap())
        .status()
        .unwrap();
    if !status.success() {
        let reason = std::fs::read_to_string(errors.path()).unwrap();
        fuse_skipped("e4 mount", reason.trim());
        return;
    }
    assert!(
        is_mounted(dir.path()),
        "e4 mount returned before the mount was up"
    );
    let daemon = daemon_serving(dir.path()).expect("the daemon's process");
    std::fs::create_dir(dir.path().join("d")).unwrap();
    std::fs::write(dir.path().join("d/f"), "background").unwrap();
    let unmounted = Command::new("fusermount3")
        .arg("-u")
        .arg(dir.path())
        .status()
        .unwrap();
    assert!(unmounted.success());
    assert!(
        eventually(|| !Path::new(&format!("/proc/{daemon}")).exists()),
        "the daemon did not exit after fusermount3 -u"
    );
    e2fsck_clean(&image.path).unwrap();
    assert_eq!(cat(&image.path, "/d/f"), "background");
}

#[test]
fn an_image_a_mount_writes_is_refused_to_every_other_open_in_one_line() {
    let image = make_empty_image(&["-t", "ext4"], 16);
    let dir = tempfile::tempdir().unwrap();
    let mut child = e4()
        .args(["mount", "-f"])
        .arg(&image.path)
        .arg(dir.path())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let _guard = FuseGuard::watch(dir.path(), LIMIT);
    if !mounted_by(&mut child, dir.path()) {
        return;
    }
    std::fs::write(dir.path().join("f"), "first").unwrap();
    let refused = |args: &[&str], expected: &str| {
        let second = tempfile::tempdir().unwrap();
        let _guard = FuseGuard::watch(second.path(), LIMIT);
        let errors = tempfile::NamedTempFile::new().unwrap();
        let status = e4()
            .args(args)
            .arg(&image.path)
            .arg(second.path())
            .stderr(errors.reopen().unwrap())
            .status()
            .unwrap();
        let stderr = std::fs::read_to_string(errors.path()).unwrap();
        assert!(
            !is_mounted(second.path()),
            "{args:?} mounted it a second time"
        );
        assert_eq!(status.code(), Some(1), "{args:?}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        assert!(stderr.contains(expected), "{stderr}");
    };
    // A second mount, read-write or read-only, and an editing command.
    refused(&["mount"], "open for writing (one writer at a time)");
    refused(&["mount", "-o", "ro"], "half-written");
    let edit = e4()
        .arg("mkdir")
        .arg(&image.path)
        .arg("/d")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&edit.stderr);
    assert_eq!(edit.status.code(), Some(1), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("one writer at a time"), "{stderr}");
    kill(Pid::from_raw(child.id() as i32), Signal::SIGTERM).unwrap();
    let mut status = None;
    assert!(eventually(|| {
        status = child.try_wait().unwrap();
        status.is_some()
    }));
    assert!(status.unwrap().success());
    e2fsck_clean(&image.path).unwrap();
    assert_eq!(cat(&image.path, "/f"), "first");
}

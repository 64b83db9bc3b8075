//! Ctrl-C during a long edit (issue 23 item 6): `e4 import` and `e4 rm -r` stop at the next
//! entry, say so in one line, exit 1, and leave the image written back and marked clean —
//! not marked in use with the journal to replay — with e2fsck finding nothing.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use e4_testkit::{e2fsck_clean, make_empty_image};
use nix::fcntl::{fcntl, FcntlArg};
use nix::libc;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

/// Waits until some process holds a lock on `image` (e4 takes its OFD lock when it opens the
/// image, after it has set up its signal handling).
fn wait_until_locked(image: &Path) {
    let file = File::open(image).unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let mut probe = libc::flock {
            l_type: libc::F_WRLCK as libc::c_short,
            l_whence: libc::SEEK_SET as libc::c_short,
            l_start: 0,
            l_len: 0,
            l_pid: 0,
        };
        fcntl(file.as_raw_fd(), FcntlArg::F_OFD_GETLK(&mut probe)).unwrap();
        if probe.l_type != libc::F_UNLCK as libc::c_short {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "e4 never opened {}",
            image.display()
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Runs `e4 args`, sends SIGINT once it has the image open, and returns the exit code and
/// stderr.
fn interrupted(image: &Path, args: &[&dyn AsRef<std::ffi::OsStr>]) -> (Option<i32>, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_e4"));
    for a in args {
        cmd.arg(a);
    }
    let child = cmd.stderr(Stdio::piped()).spawn().unwrap();
    wait_until_locked(image);
    kill(Pid::from_raw(child.id() as i32), Signal::SIGINT).unwrap();
    let out = child.wait_with_output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The superblock says clean and nothing is left for the journal to replay.
fn assert_marked_clean(image: &Path) {
    let out = Command::new(e4_testkit::tool("dumpe2fs"))
        .arg("-h")
        .arg(image)
        .output()
        .unwrap();
    let header = String::from_utf8_lossy(&out.stdout);
    assert!(
        header
            .lines()
            .any(|l| l.starts_with("Filesystem state:") && l.ends_with(" clean")),
        "{header}"
    );
    assert!(!header.contains("needs_recovery"), "{header}");
    e2fsck_clean(image).unwrap();
}

/// A one-line stop that names the signal, exit 1.
fn assert_stopped_by_sigint(code: Option<i32>, err: &str) {
    assert_eq!(code, Some(1), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("interrupted by SIGINT"), "{err}");
}

#[test]
fn ctrl_c_stops_import_and_rm_r_with_the_image_clean() {
    let image = make_empty_image(&["-t", "ext4"], 64);
    let host = tempfile::tempdir().unwrap();
    for d in 0..20 {
        let dir = host.path().join(format!("d{d}"));
        std::fs::create_dir(&dir).unwrap();
        for f in 0..100 {
            std::fs::write(dir.join(format!("f{f}")), b"x").unwrap();
        }
    }
    let e4 = |args: &[&dyn AsRef<std::ffi::OsStr>]| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_e4"));
        for a in args {
            cmd.arg(a);
        }
        let out = cmd.output().unwrap();
        assert!(out.status.success(), "{out:?}");
    };

    let (code, err) = interrupted(
        &image.path,
        &[&"import", &image.path, &host.path(), &"/cut"],
    );
    assert_stopped_by_sigint(code, &err);
    // It stopped: the signal came as the import began, long before its 2,020 entries.
    let entries: u64 = err
        .split("stopped after ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no count of entries: {err}"));
    assert!(entries < 2_000, "{err}");
    assert_marked_clean(&image.path);

    e4(&[&"import", &image.path, &host.path(), &"/whole"]);
    let (code, err) = interrupted(&image.path, &[&"rm", &"-r", &image.path, &"/whole"]);
    assert_stopped_by_sigint(code, &err);
    assert_marked_clean(&image.path);
    // What was left is still a tree a plain rm -r removes.
    e4(&[&"rm", &"-r", &image.path, &"/whole"]);
    assert_marked_clean(&image.path);
}

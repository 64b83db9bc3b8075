//! One writer per image, as a user meets it: a second `e4 put` while the first still writes
//! is refused in one line (exit 1) and the image stays `e2fsck -fn` clean with the first
//! file whole; a reader, and `e4 fsck`, are refused while the writer works. Where loop devices work (root;
//! a failure under E4_REQUIRE_KERNEL=1, else skipped with one line), an image file attached
//! to a loop device, or mounted by the kernel through one, is refused, and so is the loop
//! device while mounted.

use std::ffi::OsStr;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use e4_testkit::{e2fsck_clean, kernel_comparison_skipped, make_empty_image, LoopDevice};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

fn e4() -> Command {
    Command::new(env!("CARGO_BIN_EXE_e4"))
}

fn run(args: &[&dyn AsRef<OsStr>]) -> Output {
    let mut cmd = e4();
    for a in args {
        cmd.arg(a);
    }
    cmd.output().unwrap()
}

/// The command failed with exit 1 and one line on stderr containing `expected`.
#[track_caller]
fn assert_refused(out: &Output, expected: &str) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "stderr: {stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains(expected), "{stderr}");
}

#[track_caller]
fn assert_success(out: &Output) {
    assert!(
        out.status.success(),
        "exit {:?}, stderr: {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Whether /proc/locks shows a write lock on `image`: read without touching the lock.
fn write_locked(image: &Path) -> bool {
    let meta = std::fs::metadata(image).unwrap();
    let (major, minor) = (
        nix::sys::stat::major(meta.dev()),
        nix::sys::stat::minor(meta.dev()),
    );
    let file = format!(" {major:02x}:{minor:02x}:{} ", meta.ino());
    std::fs::read_to_string("/proc/locks")
        .unwrap()
        .lines()
        .any(|l| l.contains("WRITE") && l.contains(&file))
}

#[test]
fn a_second_put_while_the_first_writes_is_refused_in_one_line() {
    let image = make_empty_image(&["-t", "ext4"], 128);
    let host = tempfile::tempdir().unwrap();
    let big = host.path().join("big");
    let contents: Vec<u8> = (0..48u32 << 20).map(|i| (i * 7 + i / 4096) as u8).collect();
    std::fs::write(&big, &contents).unwrap();
    let small = host.path().join("small");
    std::fs::write(&small, b"second writer").unwrap();

    // The first put is stopped once it holds the image, so the second surely meets it.
    let mut first = e4()
        .arg("put")
        .arg(&image.path)
        .arg(&big)
        .arg("/big")
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = Pid::from_raw(first.id() as i32);
    let start = Instant::now();
    while !write_locked(&image.path) {
        assert!(
            first.try_wait().unwrap().is_none(),
            "the first put ended without being seen to lock the image"
        );
        assert!(start.elapsed() < Duration::from_secs(20), "no lock seen");
        std::thread::sleep(Duration::from_millis(1));
    }
    kill(pid, Signal::SIGSTOP).unwrap();
    let second = run(&[&"put", &image.path, &small, &"/small"]);
    let reader = run(&[&"ls", &image.path, &"/"]);
    let checker = run(&[&"fsck", &"-n", &image.path]);
    kill(pid, Signal::SIGCONT).unwrap();
    let first = first.wait_with_output().unwrap();
    assert_success(&first);
    assert_refused(
        &second,
        &format!(
            "process {} (e4) has it open for writing (one writer at a time)",
            pid
        ),
    );
    assert_refused(&reader, "half-written");
    // The checker does not read a half-written image either (e2fsck's "operational
    // error", exit 8).
    let stderr = String::from_utf8_lossy(&checker.stderr);
    assert_eq!(checker.status.code(), Some(8), "{stderr}");
    assert!(stderr.contains("open for writing"), "{stderr}");
    let shown = image.path.display().to_string();
    assert_eq!(
        stderr.matches(&shown).count(),
        1,
        "the image named once: {stderr}"
    );

    e2fsck_clean(&image.path).unwrap();
    let cat = run(&[&"cat", &image.path, &"/big"]);
    assert_success(&cat);
    assert!(cat.stdout == contents, "the first put's file is not whole");
    assert!(!run(&[&"stat", &image.path, &"/small"]).status.success());
    // Now that the first has finished, the second may write.
    assert_success(&run(&[&"put", &image.path, &small, &"/small"]));
    e2fsck_clean(&image.path).unwrap();
}

#[test]
fn an_image_the_kernel_holds_is_not_edited() {
    let image = make_empty_image(&["-t", "ext2"], 16);
    let host = tempfile::tempdir().unwrap();
    let file = host.path().join("f");
    std::fs::write(&file, b"e4").unwrap();
    let device = match LoopDevice::attach(&image.path) {
        Ok(device) => device,
        Err(reason) => {
            return kernel_comparison_skipped("e4 put into a loop-attached image", &reason)
        }
    };
    let loop_path = device.path().to_path_buf();
    let shown = loop_path.display().to_string();

    assert_refused(
        &run(&[&"put", &image.path, &file, &"/f"]),
        &format!("backs loop device {shown}"),
    );
    // Attached but not mounted: reading is allowed.
    assert_success(&run(&[&"ls", &image.path, &"/"]));

    let mount = device.mount("rw").unwrap();
    let on = format!("mounted read-write on {}", mount.path().display());
    assert_refused(&run(&[&"mkdir", &image.path, &"/d"]), &on);
    assert_refused(&run(&[&"mkdir", &loop_path, &"/d"]), &on);
    assert_refused(&run(&[&"ls", &image.path, &"/"]), &on);
    // e4 fsck reads it as e2fsck -n does, with one warning line that says what the check
    // can see (issue 23 item 6: it said clean with no word of the mount).
    let fsck = run(&[&"fsck", &"-n", &image.path]);
    let warning = String::from_utf8_lossy(&fsck.stderr);
    assert_eq!(fsck.status.code(), Some(0), "{warning}");
    assert_eq!(warning.lines().count(), 1, "{warning}");
    assert!(
        warning.contains(&format!(
            "is mounted read-write by the kernel at {} through {shown}",
            mount.path().display()
        )) && warning.contains("changes not yet written may show as damage"),
        "{warning}"
    );
    drop(mount);
    drop(device);
    e2fsck_clean(&image.path).unwrap();
    // Nothing refused was made.
    for path in ["/f", "/d"] {
        assert!(
            !run(&[&"stat", &image.path, &path]).status.success(),
            "{path}"
        );
    }
}

//! `e4 mount` as a user runs it: a bad option is refused in one line; with -f, each of
//! SIGINT, SIGTERM and SIGHUP unmounts and the image is written back clean (a busy mount
//! once it is released); without -f the command returns once the mount is up and the
//! daemon writes the image back after an unmount. Skipped where FUSE cannot mount (a failure under `E4_REQUIRE_FUSE=1`);
//! every mount is watched by a `FuseGuard`.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use e4_testkit::{
    e2fsck_clean, e2fsck_problems, fuse_skipped, is_mounted, make_empty_image, FuseGuard,
    KernelMount,
};
use nix::errno::Errno;
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

/// A mount point that is a regular file, or that does not exist, is refused in one line
/// before the image is opened: the image is left byte for byte as it was.
#[test]
fn a_mount_point_that_is_not_a_directory_is_refused_before_the_image_is_opened() {
    let image = make_empty_image(&["-t", "ext4"], 8);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("file");
    std::fs::write(&file, b"not a directory").unwrap();
    let before = std::fs::read(&image.path).unwrap();
    for (point, said) in [
        (file, "Not a directory"),
        (dir.path().join("missing"), "No such file or directory"),
    ] {
        let mut child = e4()
            .args(["mount", "-f"])
            .arg(&image.path)
            .arg(&point)
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        if !eventually(|| child.try_wait().unwrap().is_some()) {
            let _ = child.kill();
            let _ = child.wait();
            let _ = Command::new("fusermount3").arg("-u").arg(&point).status();
            panic!("a mount on {} went on", point.display());
        }
        let out = child.wait_with_output().unwrap();
        let stderr = String::from_utf8(out.stderr).unwrap();
        assert_eq!(out.status.code(), Some(1), "{stderr}");
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        assert!(
            stderr.contains("cannot mount on") && stderr.contains(said),
            "{stderr}"
        );
        assert!(
            std::fs::read(&image.path).unwrap() == before,
            "the image changed"
        );
    }
}

/// A user who may not open /dev/fuse is told that, not "cannot mount on DIR: Permission
/// denied". Runs where /dev/fuse is closed to other users (0600, as on the development VM)
/// and setpriv can become user 65534; elsewhere it says it is skipped.
#[test]
fn a_user_without_dev_fuse_is_told_so() {
    use std::os::unix::fs::PermissionsExt;
    let closed = std::fs::metadata("/dev/fuse").is_ok_and(|m| m.permissions().mode() & 0o006 == 0);
    if !closed || !rustix::process::geteuid().is_root() {
        eprintln!("a_user_without_dev_fuse_is_told_so: skipped, /dev/fuse is open to other users here or the test is not root");
        return;
    }
    // An image and a mount point that user may use: only the device stands in the way.
    let image = make_empty_image(&["-t", "ext4"], 8);
    let dir = tempfile::tempdir().unwrap();
    let point = dir.path().join("mnt");
    std::fs::create_dir(&point).unwrap();
    for (path, mode) in [
        (dir.path(), 0o777),
        (point.as_path(), 0o777),
        (image.path.parent().unwrap(), 0o777),
        (image.path.as_path(), 0o666),
    ] {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
    }
    let out = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(env!("CARGO_BIN_EXE_e4"))
        .args(["mount", "-f"])
        .arg(&image.path)
        .arg(&point)
        .output()
        .unwrap();
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("cannot open /dev/fuse"), "{stderr}");
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

/// `e4 mount -f OPTIONS IMAGE DIR` with its stderr in `errors` (read while it runs), once
/// it has mounted, with the guard that detaches it; `None`, said skipped with its reason,
/// where it cannot mount. The caller's `DIR` outlives the guard (declared before it).
fn mount_reporting_to(
    image: &Path,
    dir: &Path,
    options: &[&str],
    errors: &tempfile::NamedTempFile,
) -> Option<(Child, FuseGuard)> {
    let mut child = e4()
        .args(["mount", "-f"])
        .args(options)
        .arg(image)
        .arg(dir)
        .stderr(errors.reopen().unwrap())
        .spawn()
        .unwrap();
    let guard = FuseGuard::watch(dir, LIMIT);
    let mut exited = None;
    assert!(eventually(|| {
        exited = child.try_wait().unwrap();
        exited.is_some() || is_mounted(dir)
    }));
    if exited.is_some() {
        let reason = std::fs::read_to_string(errors.path()).unwrap();
        fuse_skipped("e4 mount -f", reason.trim());
        return None;
    }
    Some((child, guard))
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

/// An unmount signal while a process holds the mount (EBUSY): the daemon says which
/// process holds it, goes on serving, and unmounts, writing the image back, as soon as
/// it is released. A daemon that tried once would be left mounted, deaf to the next
/// signal (the unmount signals are blocked but for the one thread that waits for them).
#[test]
fn an_unmount_signal_while_the_mount_is_busy_unmounts_once_it_is_released() {
    let image = make_empty_image(&["-t", "ext4"], 16);
    let dir = tempfile::tempdir().unwrap();
    let errors = tempfile::NamedTempFile::new().unwrap();
    let Some((mut child, _guard)) =
        mount_reporting_to(&image.path, dir.path(), &["-o", "threads=2"], &errors)
    else {
        return;
    };
    let mut holder = Command::new("sleep")
        .arg("30")
        .current_dir(dir.path())
        .spawn()
        .unwrap();
    kill(Pid::from_raw(child.id() as i32), Signal::SIGTERM).unwrap();
    let named = format!("pid {} (sleep)", holder.id());
    let said = || std::fs::read_to_string(errors.path()).unwrap();
    assert!(eventually(|| said().contains(&named)), "{}", said());
    assert_eq!(said().lines().count(), 1, "{}", said());
    std::fs::write(dir.path().join("f"), "after the signal").unwrap();
    assert!(child.try_wait().unwrap().is_none(), "{}", said());
    holder.kill().unwrap();
    holder.wait().unwrap();
    let mut status = None;
    assert!(
        eventually(|| {
            status = child.try_wait().unwrap();
            status.is_some()
        }),
        "the daemon did not unmount once the mount was released"
    );
    assert!(status.unwrap().success(), "{status:?}: {}", said());
    assert!(!is_mounted(dir.path()));
    e2fsck_clean(&image.path).unwrap();
    assert_eq!(cat(&image.path, "/f"), "after the signal");
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
fn a_background_mount_is_up_when_the_command_returns_and_clean_after_an_unmount() {
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
    // As `umount DIR` (or `fusermount3 -u DIR` without root), retried while busy.
    e4_fuse::unmount_dir(dir.path(), e4_fuse::UNMOUNT_PATIENCE).unwrap();
    assert!(
        eventually(|| !Path::new(&format!("/proc/{daemon}")).exists()),
        "the daemon did not exit after the unmount"
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

/// What the writers of [`a_mount_killed_in_the_middle_of_work_replays_with_every_fsynced_file`]
/// made durable: files fsync'd (path under the mount, contents) and entries made in a
/// directory that was then fsync'd (path of the entry).
#[derive(Default)]
struct Durable {
    files: Vec<(String, Vec<u8>)>,
    entries: Vec<String>,
}

/// The contents of file `i` of writer `w`: sizes from one byte to tens of KiB, bytes that
/// differ per file, so a block of another file or of an earlier state is noticed.
fn contents(w: usize, i: usize) -> Vec<u8> {
    let len = 1 + (i * 7919 + w * 104_729) % 70_000;
    (0..len).map(|k| (k * 31 + i * 7 + w) as u8).collect()
}

/// Writer `w` until its first error (the daemon's death): files written, every other one
/// fsync'd and recorded once its fsync returned, the rest unlinked a few steps later.
fn fsync_writer(root: &Path, w: usize, durable: &std::sync::Mutex<Durable>) {
    let dir = format!("w{w}");
    if std::fs::create_dir(root.join(&dir)).is_err() {
        return;
    }
    for i in 0.. {
        let name = format!("{dir}/f{i}");
        let data = contents(w, i);
        let written = (|| -> std::io::Result<()> {
            let mut f = std::fs::File::create(root.join(&name))?;
            std::io::Write::write_all(&mut f, &data)?;
            if i % 2 == 0 {
                f.sync_all()?;
                durable.lock().unwrap().files.push((name.clone(), data));
            } else if i >= 5 {
                std::fs::remove_file(root.join(format!("{dir}/f{}", i - 4)))?;
            }
            Ok(())
        })();
        if written.is_err() {
            return;
        }
    }
}

/// A writer of directory entries: each new (empty) file in `dirs` is made durable by an
/// fsync of `dirs` alone, and recorded once that returned. (Only the entry: as on ext4,
/// an fsync commits the transactions that changed the inode it is given.)
fn fsyncdir_writer(root: &Path, durable: &std::sync::Mutex<Durable>) {
    if std::fs::create_dir(root.join("dirs")).is_err() {
        return;
    }
    for i in 0.. {
        let name = format!("dirs/e{i}");
        let made = (|| -> std::io::Result<()> {
            std::fs::File::create(root.join(&name))?;
            std::fs::File::open(root.join("dirs"))?.sync_all()?;
            durable.lock().unwrap().entries.push(name.clone());
            Ok(())
        })();
        if made.is_err() {
            return;
        }
    }
}

/// Every durable file and entry is in the tree under `root`, as written: an `Err` names
/// the first that is not.
fn check_durable(durable: &Durable, read: impl Fn(&str) -> Option<Vec<u8>>) -> Result<(), String> {
    for (path, data) in &durable.files {
        match read(path) {
            Some(found) if found == *data => {}
            Some(found) => {
                return Err(format!(
                    "{path}: {} bytes, not the {} fsync'd",
                    found.len(),
                    data.len()
                ))
            }
            None => return Err(format!("{path}: fsync'd, but gone")),
        }
    }
    for path in &durable.entries {
        if read(path).is_none() {
            return Err(format!("{path}: its directory was fsync'd, but it is gone"));
        }
    }
    Ok(())
}

/// The crash a journal exists for, through the mount: a daemon killed with SIGKILL while
/// four writers work (files fsync'd, directories fsync'd, files unlinked) leaves an
/// image whose log replays — in e4, and in e2fsck (`-E journal_only`) with the kernel
/// reading the result — to an e2fsck-clean tree holding everything an fsync or fsyncdir
/// had returned for. With `commit=0` (even rounds) only those syncs commit, so an fsync
/// that did not commit loses its file; odd rounds add 1 s interval commits racing them.
/// Rounds: 2, or `E4_MOUNT_KILL_ROUNDS`.
#[test]
fn a_mount_killed_in_the_middle_of_work_replays_with_every_fsynced_file() {
    let rounds: usize = std::env::var("E4_MOUNT_KILL_ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(2);
    for round in 0..rounds {
        let image = make_empty_image(&["-t", "ext4", "-b", "4096"], 64);
        let dir = tempfile::tempdir().unwrap();
        let commit = if round % 2 == 0 {
            "commit=0"
        } else {
            "commit=1"
        };
        let mut child = e4()
            .args(["mount", "-f", "-o", &format!("threads=2,{commit}")])
            .arg(&image.path)
            .arg(dir.path())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let guard = FuseGuard::watch(dir.path(), LIMIT);
        if !mounted_by(&mut child, dir.path()) {
            return;
        }
        let durable = std::sync::Mutex::new(Durable::default());
        std::thread::scope(|s| {
            for w in 0..3 {
                let (root, durable) = (dir.path(), &durable);
                s.spawn(move || fsync_writer(root, w, durable));
            }
            s.spawn(|| fsyncdir_writer(dir.path(), &durable));
            // Long enough for dozens of syncs, with the kill landing anywhere in one.
            std::thread::sleep(Duration::from_millis(700 + 300 * round as u64));
            child.kill().unwrap();
        });
        child.wait().unwrap();
        // The connection died with the daemon: detach the mount it leaves.
        drop(guard);
        assert!(!is_mounted(dir.path()));
        let durable = durable.into_inner().unwrap();
        let what = format!(
            "round {round} ({commit}): {} files and {} entries made durable",
            durable.files.len(),
            durable.entries.len()
        );
        assert!(
            durable.files.len() >= 3 && !durable.entries.is_empty(),
            "{what}: too few to test"
        );

        // e2fsck replays a copy, checks it, and the kernel reads it.
        let by_e2fsck = image.path.with_extension("e2fsck");
        std::fs::copy(&image.path, &by_e2fsck).unwrap();
        let replayed = Command::new(e4_testkit::tool("e2fsck"))
            .args(["-y", "-E", "journal_only"])
            .arg(&by_e2fsck)
            .output()
            .unwrap();
        assert!(
            replayed.status.code().unwrap_or(8) < 4,
            "{what}: e2fsck -E journal_only: {replayed:?}"
        );
        e2fsck_clean(&by_e2fsck).unwrap_or_else(|e| panic!("{what}: after e2fsck's replay: {e}"));
        if let Ok(kernel) = KernelMount::mount(&by_e2fsck) {
            let root = kernel.path();
            check_durable(&durable, |p| std::fs::read(root.join(p)).ok())
                .unwrap_or_else(|e| panic!("{what}: the kernel after e2fsck's replay: {e}"));
        }
        std::fs::remove_file(&by_e2fsck).unwrap();

        // e4 replays the image itself (a writable open), reads it, and writes it back.
        let fs = e4_fs::Filesystem::open(&image.path, e4_fs::OpenOptions::writable())
            .unwrap_or_else(|e| panic!("{what}: e4 cannot open the killed mount's image: {e}"));
        assert!(
            fs.journal_note().is_some_and(|n| n.contains("recover")),
            "{what}: e4 found nothing to replay: {:?}",
            fs.journal_note()
        );
        check_durable(&durable, |p| {
            let ino = fs.resolve(&format!("/{p}"), false).ok()?;
            fs.read_file(ino, u64::MAX).ok()
        })
        .unwrap_or_else(|e| panic!("{what}: e4 after its replay: {e}"));
        fs.unmount().unwrap();
        e2fsck_clean(&image.path).unwrap_or_else(|e| panic!("{what}: after e4's replay: {e}"));
        eprintln!("{what}: replayed clean by e4 and by e2fsck");
    }
}

/// Damage the engine finds while serving reaches the mount's standard error in one line,
/// as the CLI's commands show it: the root directory's block freed in its group's bitmap
/// (debugfs `freeb`, the descriptor's count left), then a write that allocates there.
/// The group is not used, and e2fsck finds nothing it did not find before.
#[test]
fn damage_found_while_serving_is_shown_on_standard_error() {
    let image = make_empty_image(&["-t", "ext4", "-b", "1024"], 16);
    let debugfs = |write: bool, request: &str| {
        let mut cmd = Command::new(e4_testkit::tool("debugfs"));
        if write {
            cmd.arg("-w");
        }
        let out = cmd
            .arg("-R")
            .arg(request)
            .arg(&image.path)
            .output()
            .unwrap();
        assert!(out.status.success(), "debugfs -R {request:?}");
        String::from_utf8(out.stdout).unwrap()
    };
    let block: u64 = debugfs(false, "blocks /")
        .split_whitespace()
        .next()
        .unwrap()
        .parse()
        .unwrap();
    debugfs(true, &format!("freeb {block}"));
    let before = e2fsck_problems(&image.path);

    let dir = tempfile::tempdir().unwrap();
    let errors = tempfile::NamedTempFile::new().unwrap();
    let Some((mut child, _guard)) = mount_reporting_to(&image.path, dir.path(), &[], &errors)
    else {
        return;
    };
    std::fs::write(dir.path().join("f"), vec![1u8; 20_000]).unwrap();
    let warned = || std::fs::read_to_string(errors.path()).unwrap();
    assert!(
        eventually(|| warned().contains("group 0")),
        "no warning: {:?}",
        warned()
    );
    kill(Pid::from_raw(child.id() as i32), Signal::SIGTERM).unwrap();
    assert!(eventually(|| child.try_wait().unwrap().is_some()));
    let shown = warned();
    assert_eq!(shown.lines().count(), 1, "{shown}");
    assert!(shown.starts_with("e4: warning: "), "{shown}");
    assert!(shown.contains("block bitmap"), "{shown}");
    assert_eq!(
        e2fsck_problems(&image.path),
        before,
        "e2fsck sees new damage"
    );
}

/// `errors=`: a directory block whose checksum fails (one byte of it changed) is EBADMSG
/// to a listing, and then `continue` goes on writing, `remount-ro` refuses every change
/// (EROFS), `panic` ends the daemon at once (exit status 32); each says so in one line.
/// What e2fsck finds after the first two is what it found before.
#[test]
fn errors_option_decides_what_follows_a_damaged_directory() {
    for policy in ["continue", "remount-ro", "panic"] {
        let image = make_empty_image(&["-t", "ext4", "-b", "4096"], 16);
        let debugfs = |write: bool, request: &str| {
            let mut cmd = Command::new(e4_testkit::tool("debugfs"));
            if write {
                cmd.arg("-w");
            }
            let out = cmd
                .arg("-R")
                .arg(request)
                .arg(&image.path)
                .output()
                .unwrap();
            assert!(out.status.success(), "debugfs -R {request:?}");
            String::from_utf8(out.stdout).unwrap()
        };
        debugfs(true, "mkdir d");
        let block: u64 = debugfs(false, "blocks /d")
            .split_whitespace()
            .next()
            .unwrap()
            .parse()
            .unwrap();
        // The "." entry's name: the block's checksum no longer matches.
        let file = std::fs::OpenOptions::new()
            .write(true)
            .open(&image.path)
            .unwrap();
        std::os::unix::fs::FileExt::write_all_at(&file, b"X", block * 4096 + 8).unwrap();
        drop(file);
        let before = e2fsck_problems(&image.path);

        let dir = tempfile::tempdir().unwrap();
        let errors = tempfile::NamedTempFile::new().unwrap();
        let options = ["-o", &format!("errors={policy}")];
        let Some((mut child, guard)) =
            mount_reporting_to(&image.path, dir.path(), &options, &errors)
        else {
            return;
        };
        let listed = std::fs::read_dir(dir.path().join("d")).and_then(|mut d| d.next().transpose());
        let said = || std::fs::read_to_string(errors.path()).unwrap();
        if policy == "panic" {
            assert!(listed.is_err(), "{policy}: the listing of a damaged block");
            let mut status = None;
            assert!(eventually(|| {
                status = child.try_wait().unwrap();
                status.is_some()
            }));
            assert_eq!(status.unwrap().code(), Some(32), "{}", said());
            drop(guard);
            assert!(said().contains("stopping (errors=panic)"), "{}", said());
            continue;
        }
        let errno = listed.unwrap_err().raw_os_error();
        // A checksum that fails is EBADMSG (ext4's EFSBADCRC).
        assert_eq!(errno, Some(Errno::EBADMSG as i32), "{policy}");
        let written = std::fs::write(dir.path().join("f"), b"after");
        match policy {
            "continue" => assert!(written.is_ok(), "{written:?}"),
            _ => assert_eq!(
                written.unwrap_err().raw_os_error(),
                Some(Errno::EROFS as i32)
            ),
        }
        kill(Pid::from_raw(child.id() as i32), Signal::SIGTERM).unwrap();
        assert!(eventually(|| child.try_wait().unwrap().is_some()));
        let shown = said();
        assert_eq!(shown.lines().count(), 1, "{shown}");
        assert!(shown.starts_with("e4: error: "), "{shown}");
        assert!(shown.contains(&format!("(errors={policy})")), "{shown}");
        assert_eq!(e2fsck_problems(&image.path), before, "{policy}: new damage");
    }
}

//! `e4 chattr`, `e4 lsattr`, `e4 setfacl` and `e4 getfacl` against e2fsprogs' chattr and
//! lsattr and the acl package's setfacl and getfacl on the kernel's ext4: one image is
//! made through a kernel loop mount and copied; the same script of commands runs through
//! e4 on one copy and through the real tools on the kernel's mount of the other. Each
//! command must succeed or fail alike; then e4's listing must be, line for line, what the
//! real tool prints on the kernel's mount of the twin (the flags of every path, the ACLs
//! and modes in `getfacl -n`'s form) and on the kernel's mount of e4's own image. Both
//! images pass `e2fsck -fn`. Where loop mounts or the tools are missing the tests say so
//! and pass, unless `E4_REQUIRE_KERNEL=1`.

use std::ffi::OsStr;
use std::path::Path;
use std::process::{Command, Output};

use e4_testkit::{e2fsck_clean, kernel_comparison_skipped, make_empty_image, Image, KernelMount};

fn e4(args: &[&dyn AsRef<OsStr>]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_e4"));
    for a in args {
        cmd.arg(a);
    }
    cmd.output().unwrap()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// A host tool run in `dir` with at most 20 s (a stuck mount must not hang the test);
/// `None` when the tool is not installed.
fn tool(dir: &Path, program: &str, args: &[String]) -> Option<Output> {
    let out = Command::new("timeout")
        .arg("20")
        .arg(program)
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    // timeout's status for a program it cannot run.
    (out.status.code() != Some(127)).then_some(out)
}

/// A 16 MiB ext4 image holding `/f` (0644), `/x` (0755), `/d/g`, `/d/sub/`, a symlink
/// `/l` to `f` and a FIFO `/p`, made by the kernel; `None` where it cannot mount.
fn made_by_the_kernel(what: &str) -> Option<Image> {
    let image = make_empty_image(&["-t", "ext4", "-b", "4096"], 16);
    let mount = KernelMount::mount_writable(&image.path).ok()?;
    let root = mount.path();
    std::fs::write(root.join("f"), b"file").unwrap();
    std::fs::write(root.join("x"), b"#!/bin/sh\n").unwrap();
    std::fs::create_dir_all(root.join("d/sub")).unwrap();
    std::fs::write(root.join("d/g"), b"g").unwrap();
    std::os::unix::fs::symlink("f", root.join("l")).unwrap();
    let made = Command::new("mkfifo").arg(root.join("p")).status().unwrap();
    assert!(made.success(), "{what}: mkfifo");
    let chmod = |path: &str, mode| {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(root.join(path), std::fs::Permissions::from_mode(mode)).unwrap();
    };
    chmod("f", 0o644);
    chmod("x", 0o755);
    drop(mount);
    Some(image)
}

/// A copy of `image` beside it.
fn twin(image: &Image, dir: &tempfile::TempDir) -> std::path::PathBuf {
    let copy = dir.path().join("twin.img");
    std::fs::copy(&image.path, &copy).unwrap();
    copy
}

/// `args` with every argument that starts with `/` made relative (the real tools run in
/// the mount's directory).
fn relative(args: &[&str]) -> Vec<String> {
    args.iter()
        .map(|a| {
            a.strip_prefix('/')
                .map_or(a.to_string(), |p| format!("./{p}"))
        })
        .collect()
}

/// Runs each command of `script` as `e4 COMMAND IMAGE ARGS` on `image` and as `TOOL ARGS`
/// on the kernel's mount of `kernel_image`; both must succeed or both fail, a failure in
/// as many lines as the tool's. False when the tool is missing.
fn run_script(
    command: &str,
    tool_name: &str,
    script: &[&[&str]],
    image: &Path,
    kernel_image: &Path,
) -> bool {
    let Ok(mount) = KernelMount::mount_writable(kernel_image) else {
        return false;
    };
    for args in script {
        let mut e4_args: Vec<&dyn AsRef<OsStr>> = vec![&command, &image];
        e4_args.extend(args.iter().map(|a| a as &dyn AsRef<OsStr>));
        let ours = e4(&e4_args);
        let Some(theirs) = tool(&mount.path(), tool_name, &relative(args)) else {
            kernel_comparison_skipped(tool_name, "not installed (scripts/setup.sh installs it)");
            return false;
        };
        assert_eq!(
            ours.status.success(),
            theirs.status.success(),
            "{command} {args:?}: e4 said {:?}, {tool_name} said {:?}",
            stderr(&ours),
            stderr(&theirs)
        );
        if !ours.status.success() {
            // One line per path that failed, as the tool's (with -R, per entry met).
            assert_eq!(
                stderr(&ours).lines().count(),
                stderr(&theirs).lines().count().max(1),
                "{args:?}: e4 said {:?}, {tool_name} said {:?}",
                stderr(&ours),
                stderr(&theirs)
            );
        }
        e2fsck_clean(image).unwrap_or_else(|e| panic!("after e4 {command} {args:?}: {e}"));
    }
    true
}

/// What `e4 COMMAND IMAGE TOOL_ARGS ARGS` prints, and what `TOOL TOOL_ARGS ARGS` prints on the
/// kernel's read-only mount of `kernel_image`, with paths made alike.
fn listings(
    command: &str,
    image: &Path,
    tool_name: &str,
    tool_args: &[&str],
    args: &[&str],
    kernel_image: &Path,
) -> (String, String) {
    let mut e4_args: Vec<&dyn AsRef<OsStr>> = vec![&command, &image];
    // getfacl's -n is what e4 always does.
    e4_args.extend(
        tool_args
            .iter()
            .filter(|&&a| a != "-n")
            .map(|a| a as &dyn AsRef<OsStr>),
    );
    e4_args.extend(args.iter().map(|a| a as &dyn AsRef<OsStr>));
    let ours = e4(&e4_args);
    assert!(
        ours.status.success(),
        "e4 {command} {args:?}: {}",
        stderr(&ours)
    );
    let mount = KernelMount::mount(kernel_image).expect("mounted before");
    let mut all: Vec<String> = tool_args.iter().map(|a| a.to_string()).collect();
    all.extend(relative(args));
    let theirs = tool(&mount.path(), tool_name, &all).expect("installed");
    let theirs = String::from_utf8_lossy(&theirs.stdout).replace("./", "/");
    (String::from_utf8_lossy(&ours.stdout).into_owned(), theirs)
}

/// Lines sorted: a directory's listing comes in its own order, which both read from the
/// same image only when it is the same image.
fn sorted(text: &str) -> Vec<&str> {
    let mut lines: Vec<&str> = text.lines().collect();
    lines.sort_unstable();
    lines
}

#[test]
fn chattr_and_lsattr_do_what_e2fsprogs_does_on_the_kernels_ext4() {
    let Some(image) = made_by_the_kernel("chattr") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let kernel = twin(&image, &dir);
    let script: &[&[&str]] = &[
        &["+i", "/f"],
        &["+a", "-i", "/f"],
        &["+dAS", "/d"],
        &["+D", "/d", "/x"],
        &["+s", "-d", "/d/g"],
        &["+T", "/d/sub"],
        &["+i", "/x"],
        // Nothing else changes while immutable: EPERM for both.
        &["+d", "/x"],
        &["-i", "/x"],
        &["=e", "/x"],
        &["+u", "/d/g", "/d/sub"],
        // A symlink and a FIFO have no flags: both refuse.
        &["+i", "/l"],
        &["+d", "/p"],
        &["-a", "/f"],
        &["+c", "/f"],
        // Recursion: a directory, then its entries, depth first; -R alone or among a
        // removal's letters.
        &["-R", "+A", "/d"],
        &["-Rd", "/d/sub"],
        // A symlink met while recursing has no flags: both fail (after the rest).
        &["-R", "+u", "/"],
    ];
    if !run_script("chattr", "chattr", script, &image.path, &kernel) {
        return;
    }
    let paths = ["/f", "/x", "/d", "/d/g", "/d/sub"];
    let (ours, theirs) = listings("lsattr", &image.path, "lsattr", &["-d"], &paths, &kernel);
    assert_eq!(
        ours, theirs,
        "e4 lsattr on e4's image, lsattr on the kernel's twin"
    );
    let (ours, theirs) = listings("lsattr", &image.path, "lsattr", &[], &["/d"], &image.path);
    assert_eq!(sorted(&ours), sorted(&theirs), "a directory's entries");
    // -R: every directory below under its heading, blank lines as lsattr's, on the twin
    // and on e4's own image (sorted: one-block directories come in hash order from the
    // kernel, in block order from e4).
    for on in [&kernel, &image.path] {
        let (ours, theirs) = listings("lsattr", &image.path, "lsattr", &["-R"], &["/d"], on);
        assert_eq!(sorted(&ours), sorted(&theirs), "lsattr -R");
        assert!(ours.contains("\n/d/sub:\n"), "{ours}");
    }
    e2fsck_clean(&kernel).unwrap();
}

#[test]
fn setfacl_and_getfacl_do_what_the_acl_tools_do_on_the_kernels_ext4() {
    let Some(image) = made_by_the_kernel("setfacl") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let kernel = twin(&image, &dir);
    let script: &[&[&str]] = &[
        &["-m", "u:1000:rwx,g:2000:r", "/f"],
        // An explicit mask stays; the next -m recomputes it.
        &["-m", "m::r", "/f"],
        &["-m", "u:1001:rw", "/f"],
        &["-x", "u:1000", "/f"],
        &["-dm", "u:1000:rX", "/d"],
        &["-m", "d:g:3000:rwx,d:o::-", "/d"],
        &["-m", "u::rwx,g::x,o::-", "/x"],
        &["-m", "u:1000:X", "/x"],
        &["-m", "u:5:r", "/d/g"],
        &["-b", "/d/g"],
        &["-d", "-m", "u:9:rwx", "/d/sub"],
        &["-m", "g:4:r", "-k", "/d/sub"],
        // Through a symlink, to its target.
        &["-m", "u:77:w", "/l"],
        // Without the mask's recomputation, a named entry and no mask: both refuse.
        &["-n", "-m", "u:7:rwx", "/d/g"],
        // A default ACL on a file: both refuse.
        &["-m", "d:u:1:r", "/x"],
        &["-x", "g:2000", "/f"],
        // X: execute only for a directory or a file some execute bit is set on.
        &["-m", "u:8:rX", "/f"],
        // -b removes the default ACL too.
        &["-dm", "u:3:r", "/d/sub"],
        &["-b", "/d/sub"],
        // --set replaces the ACL whole (mask recomputed), its default entries the default
        // ACL; -d makes them all default entries; without the base entries, both refuse.
        &["--set", "u::rw,g::r,o::-,u:1000:rwx", "/x"],
        &[
            "--set=u::rwx,g::rx,o::-,d:u::rwx,d:g::r,d:o::-,d:u:4:rw",
            "/d",
        ],
        &["-d", "--set", "u::rwx,g::rx,o::x", "/d/sub"],
        &["--set", "u:1000:r", "/f"],
        // -R: the directory and everything below it (a symlink met is skipped); a default
        // ACL given recursively.
        &["-R", "-m", "u:6:rx", "/d"],
        &["-R", "-m", "u:9:r", "/"],
        &["-Rdm", "g:12:rw", "/d"],
    ];
    if !run_script("setfacl", "setfacl", script, &image.path, &kernel) {
        return;
    }
    let paths = ["/f", "/x", "/d", "/d/g", "/d/sub", "/p"];
    let (ours, theirs) = listings("getfacl", &image.path, "getfacl", &["-n"], &paths, &kernel);
    assert_eq!(
        ours, theirs,
        "e4 getfacl on e4's image, getfacl -n on the kernel's twin"
    );
    let (ours, theirs) = listings(
        "getfacl",
        &image.path,
        "getfacl",
        &["-n"],
        &paths,
        &image.path,
    );
    assert_eq!(ours, theirs, "e4 getfacl and getfacl -n of the same image");
    e2fsck_clean(&kernel).unwrap();
}

#[test]
fn bad_input_is_one_line() {
    let image = make_empty_image(&["-t", "ext4", "-b", "4096"], 16);
    for (args, status, expect) in [
        (vec!["chattr", "IMG", "+Z", "/"], 2, "'Z'"),
        (vec!["chattr", "IMG", "=i", "+a", "/"], 2, "incompatible"),
        (vec!["chattr", "IMG", "/"], 2, "needs a mode"),
        (
            vec!["chattr", "IMG", "+i", "/missing"],
            1,
            "/missing: no such file",
        ),
        (
            vec!["lsattr", "IMG", "/missing"],
            1,
            "/missing: no such file",
        ),
        (
            vec!["setfacl", "IMG", "-m", "u:bob:r", "/"],
            2,
            "not a numeric id",
        ),
        (vec!["setfacl", "IMG", "-P", "-b", "/"], 2, "-P"),
        (vec!["setfacl", "IMG", "-b"], 2, "needs a path"),
        (
            vec!["setfacl", "IMG", "-x", "u::", "/"],
            1,
            "cannot be removed",
        ),
        (
            vec!["getfacl", "IMG", "/missing"],
            1,
            "/missing: no such file",
        ),
    ] {
        let args: Vec<&OsStr> = args
            .iter()
            .map(|a| {
                if *a == "IMG" {
                    image.path.as_os_str()
                } else {
                    OsStr::new(a)
                }
            })
            .collect();
        let out = e4(&args
            .iter()
            .map(|a| a as &dyn AsRef<OsStr>)
            .collect::<Vec<_>>());
        let text = stderr(&out);
        assert_eq!(out.status.code(), Some(status), "{args:?}: {text}");
        assert_eq!(text.lines().count(), 1, "{args:?}: {text}");
        assert!(
            text.starts_with("e4: ") && text.contains(expect),
            "{args:?}: {text}"
        );
        e2fsck_clean(&image.path).unwrap();
    }
}

/// `setfacl -M FILE` and `-X FILE`: entries read from a host file (getfacl's listing, its
/// comments and `#effective:` notes, blank lines), through e4 on one copy and through
/// setfacl on the kernel's mount of the other; the ACLs must then be the same.
#[test]
fn setfacl_takes_entries_from_files_as_setfacl_does() {
    let Some(image) = made_by_the_kernel("setfacl -M") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let kernel = twin(&image, &dir);
    let add = dir.path().join("add.acl");
    std::fs::write(
        &add,
        "# file: f\n# owner: 0\nuser:1000:rwx\ngroup:2000:r-x\t#effective:r-x\n\nmask::r-x\n",
    )
    .unwrap();
    let remove = dir.path().join("remove.acl");
    std::fs::write(&remove, "user:1000\n# and nothing else\n").unwrap();
    let (add, remove) = (add.to_str().unwrap(), remove.to_str().unwrap());
    let whole = dir.path().join("whole.acl");
    std::fs::write(&whole, "user::rw-\ngroup::r--\nother::---\nuser:1000:rwx\n").unwrap();
    let whole = whole.to_str().unwrap();
    let commands: [&[&str]; 4] = [
        &["-M", add, "/f", "/d"],
        &["-X", remove, "/f"],
        &["-dM", add, "/d/sub"],
        &["--set-file", whole, "/d/g"],
    ];
    let Ok(mount) = KernelMount::mount_writable(&kernel) else {
        return;
    };
    for args in commands {
        let mut e4_args: Vec<&dyn AsRef<OsStr>> = vec![&"setfacl", &image.path];
        e4_args.extend(args.iter().map(|a| a as &dyn AsRef<OsStr>));
        let ours = e4(&e4_args);
        assert!(
            ours.status.success(),
            "e4 setfacl {args:?}: {}",
            stderr(&ours)
        );
        let mut theirs_args: Vec<String> = args[..2].iter().map(|a| a.to_string()).collect();
        theirs_args.extend(relative(&args[2..]));
        let Some(theirs) = tool(&mount.path(), "setfacl", &theirs_args) else {
            kernel_comparison_skipped("setfacl", "not installed (scripts/setup.sh installs it)");
            return;
        };
        assert!(
            theirs.status.success(),
            "setfacl {args:?}: {}",
            stderr(&theirs)
        );
    }
    drop(mount);
    e2fsck_clean(&image.path).unwrap();
    let paths = ["/f", "/d", "/d/sub", "/d/g"];
    let (ours, theirs) = listings("getfacl", &image.path, "getfacl", &["-n"], &paths, &kernel);
    assert_eq!(
        ours, theirs,
        "e4 getfacl on e4's image, getfacl -n on the twin"
    );
    e2fsck_clean(&kernel).unwrap();
}

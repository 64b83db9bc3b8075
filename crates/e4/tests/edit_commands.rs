//! The image-editing commands (`import`, `put`, `mkdir`, `rm`, `mv`, `ln`, `chmod`,
//! `chown`, `truncate`), run as the built binary: each command's success and its failures
//! (one line, exit 1; bad arguments exit 2), with `e2fsck -fn` after every command, failed
//! ones included. A generated tree is imported, edited, and compared with the same edits made
//! on the host, through `e4 export` and through the kernel's own mount.

use std::ffi::OsStr;
use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::{Command, Output};

use e4_testkit::{
    compare_trees, e2fsck_clean, generate_tree, make_empty_image, make_image, CompareOptions,
    Image, KernelMount, TreeSpec, PROFILES,
};

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

/// Runs `e4 ARGS` on `image` and checks the image with `e2fsck -fn` afterwards, whatever the
/// command's outcome: every command must leave the image consistent.
fn edit(image: &Path, args: &[&dyn AsRef<OsStr>]) -> Output {
    let out = e4(args);
    if let Err(fsck) = e2fsck_clean(image) {
        panic!(
            "after e4 {:?} (stderr: {}): {fsck}",
            args.iter().map(|a| a.as_ref()).collect::<Vec<_>>(),
            stderr(&out)
        );
    }
    out
}

#[track_caller]
fn assert_success(out: &Output) {
    assert!(
        out.status.success(),
        "exit {:?}, stderr: {}",
        out.status.code(),
        stderr(out)
    );
    assert!(out.stderr.is_empty(), "stderr: {}", stderr(out));
}

/// Exit 1 with exactly one line on stderr, starting "e4: ", containing `expect`.
#[track_caller]
fn assert_one_line_failure(out: &Output, expect: &str) {
    let text = stderr(out);
    assert_eq!(out.status.code(), Some(1), "stderr: {text}");
    assert_eq!(text.lines().count(), 1, "stderr: {text}");
    assert!(text.starts_with("e4: "), "stderr: {text}");
    assert!(!text.contains("internal error"), "stderr: {text}");
    assert!(text.contains(expect), "expected {expect:?} in {text}");
}

/// Bad arguments: clap's exit 2, one line.
#[track_caller]
fn assert_usage_error(out: &Output, expect: &str) {
    let text = stderr(out);
    assert_eq!(out.status.code(), Some(2), "stderr: {text}");
    assert_eq!(text.lines().count(), 1, "stderr: {text}");
    assert!(text.contains(expect), "expected {expect:?} in {text}");
}

fn stat(image: &Path, path: &str) -> String {
    let out = e4(&[&"stat", &image, &path]);
    assert_success(&out);
    String::from_utf8(out.stdout).unwrap()
}

fn cat(image: &Path, path: &str) -> Vec<u8> {
    let out = e4(&[&"cat", &image, &path]);
    assert_success(&out);
    out.stdout
}

fn ext4_image(size_mib: u64) -> Image {
    make_empty_image(&["-t", "ext4"], size_mib)
}

#[test]
fn mkdir_makes_directories_and_refuses_what_exists_or_is_missing() {
    let img = ext4_image(16);
    let i = &img.path;
    let host = tempfile::tempdir().unwrap();
    let file = host.path().join("file");
    fs::write(&file, b"data").unwrap();

    assert_success(&edit(i, &[&"mkdir", i, &"/a"]));
    assert!(stat(i, "/a").contains("(0755/drwxr-xr-x)"));
    assert_one_line_failure(&edit(i, &[&"mkdir", i, &"/a"]), "e4: /a: file exists");
    assert_one_line_failure(
        &edit(i, &[&"mkdir", i, &"/x/y"]),
        "/x/y: no such file or directory",
    );
    assert_success(&edit(i, &[&"mkdir", &"-p", i, &"/x/y/z/"]));
    assert!(stat(i, "/x/y/z").contains("Type: Directory"));
    // -p accepts what exists.
    assert_success(&edit(i, &[&"mkdir", &"-p", i, &"/x/y"]));
    assert_success(&edit(i, &[&"put", i, &file, &"/f"]));
    assert_one_line_failure(
        &edit(i, &[&"mkdir", i, &"/f/sub"]),
        "/f/sub: not a directory",
    );
    assert_one_line_failure(
        &edit(i, &[&"mkdir", &"-p", i, &"/f/sub"]),
        "/f: not a directory",
    );
    assert_one_line_failure(&edit(i, &[&"mkdir", i, &"/"]), "names no entry");
    let long = format!("/{}", "n".repeat(256));
    assert_one_line_failure(&edit(i, &[&"mkdir", i, &long]), "file name too long");
}

#[test]
fn put_copies_data_holes_and_attributes() {
    let img = ext4_image(32);
    let i = &img.path;
    let host = tempfile::tempdir().unwrap();
    let file = host.path().join("data.bin");
    let data: Vec<u8> = (0..3_000_000u32)
        .map(|n| (n * 7 + n / 4096) as u8)
        .collect();
    fs::write(&file, &data).unwrap();
    fs::set_permissions(&file, fs::Permissions::from_mode(0o4751)).unwrap();
    let sparse = host.path().join("sparse");
    let f = fs::File::create(&sparse).unwrap();
    std::os::unix::fs::FileExt::write_all_at(&f, b"middle", 5 << 20).unwrap();
    f.set_len(9 << 20).unwrap();

    assert_success(&edit(i, &[&"put", i, &file, &"/data.bin"]));
    assert_eq!(cat(i, "/data.bin"), data);
    let shown = stat(i, "/data.bin");
    assert!(shown.contains("(4751/-rwsr-x--x)"), "{shown}");
    let mtime = fs::metadata(&file).unwrap().mtime_nsec();
    assert!(shown.contains(&format!(".{mtime:09} ")), "{shown}");

    // Into a directory, under the host name; the hole stays a hole.
    assert_success(&edit(i, &[&"mkdir", i, &"/dir"]));
    assert_success(&edit(i, &[&"put", i, &sparse, &"/dir"]));
    let copied = cat(i, "/dir/sparse");
    assert_eq!(copied.len(), 9 << 20);
    assert_eq!(&copied[5 << 20..(5 << 20) + 6], b"middle");
    assert!(copied[..5 << 20].iter().all(|&b| b == 0));
    let blocks: u64 = stat(i, "/dir/sparse")
        .split("Blocks:")
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .and_then(|s| s.parse().ok())
        .unwrap();
    assert!(
        blocks <= 16,
        "a 9 MiB file with 6 bytes of data uses {blocks} sectors"
    );

    assert_one_line_failure(
        &edit(i, &[&"put", i, &file, &"/data.bin"]),
        "/data.bin: file exists",
    );
    assert_one_line_failure(
        &edit(i, &[&"put", i, &file, &"/missing/dir/f"]),
        "/missing/dir/f: no such file or directory",
    );
    let missing = host.path().join("missing");
    assert_one_line_failure(
        &edit(i, &[&"put", i, &missing, &"/m"]),
        "missing: No such file or directory",
    );
    assert_one_line_failure(
        &edit(i, &[&"put", i, &host.path(), &"/m"]),
        "not a regular file",
    );
}

#[test]
fn rm_removes_files_and_with_r_whole_trees() {
    let src = tempfile::tempdir().unwrap();
    generate_tree(src.path(), &TreeSpec::small());
    let img = make_image(src.path(), profile("ext4-default-4k"), 256, 4096);
    let i = &img.path;

    assert_success(&edit(i, &[&"rm", i, &"/small.txt"]));
    assert_one_line_failure(
        &edit(i, &[&"cat", i, &"/small.txt"]),
        "no such file or directory",
    );
    // The other names of the hard link keep the data.
    assert_eq!(cat(i, "/hardlink_same_dir"), b"hello, e4\n");
    assert_one_line_failure(
        &edit(i, &[&"rm", i, &"/small.txt"]),
        "/small.txt: no such file or directory",
    );
    assert_one_line_failure(&edit(i, &[&"rm", i, &"/deep"]), "/deep: is a directory");
    // A symlink to a directory goes, not the directory.
    assert_success(&edit(i, &[&"rm", i, &"/link_dir"]));
    assert!(stat(i, "/deep/level00").contains("Directory"));
    assert_success(&edit(i, &[&"rm", &"-r", i, &"/deep"]));
    assert_success(&edit(i, &[&"rm", &"-r", i, &"/big_dir"]));
    assert_success(&edit(i, &[&"rm", &"-r", i, &"/fifo"]));
    assert_one_line_failure(
        &edit(i, &[&"rm", &"-r", i, &"/deep/level00"]),
        "/deep/level00: no such file or directory",
    );
    assert_one_line_failure(
        &edit(i, &[&"rm", i, &"/names/x/y"]),
        "/names/x/y: no such file or directory",
    );
    assert_one_line_failure(
        &edit(i, &[&"rm", i, &"/tiny/x"]),
        "/tiny/x: not a directory",
    );
    assert_one_line_failure(&edit(i, &[&"rm", &"-r", i, &"/"]), "names no entry");
    let listing = String::from_utf8(e4(&[&"ls", i, &"/"]).stdout).unwrap();
    for gone in ["deep", "big_dir", "small.txt", "fifo", "link_dir"] {
        assert!(!listing.lines().any(|l| l == gone), "{listing}");
    }
}

#[test]
fn mv_renames_moves_and_replaces_like_rename() {
    let src = tempfile::tempdir().unwrap();
    generate_tree(src.path(), &TreeSpec::small());
    let img = make_image(src.path(), profile("ext4-default-4k"), 256, 4096);
    let i = &img.path;

    assert_success(&edit(i, &[&"mv", i, &"/small.txt", &"/renamed.txt"]));
    assert_eq!(cat(i, "/renamed.txt"), b"hello, e4\n");
    // Into an existing directory, under its own name.
    assert_success(&edit(i, &[&"mv", i, &"/renamed.txt", &"/names"]));
    assert_eq!(cat(i, "/names/renamed.txt"), b"hello, e4\n");
    // A directory moved across directories (its ".." and both link counts change).
    assert_success(&edit(i, &[&"mv", i, &"/deep/level00", &"/names/moved"]));
    assert_eq!(
        cat(i, "/names/moved/level01/level02/level03/level04/level05/level06/level07/level08/level09/level10/level11/level12/level13/level14/level15/level16/level17/level18/level19/level20/level21/level22/level23/bottom.txt"),
        b"deep down"
    );
    // Replacing a file.
    assert_success(&edit(i, &[&"mv", i, &"/tiny", &"/empty"]));
    assert_eq!(cat(i, "/empty"), b"x");

    assert_one_line_failure(
        &edit(i, &[&"mv", i, &"/tiny", &"/t2"]),
        "/tiny: no such file or directory",
    );
    assert_success(&edit(i, &[&"mkdir", &"-p", i, &"/names/deep/inner"]));
    assert_one_line_failure(
        &edit(i, &[&"mv", i, &"/deep", &"/names"]),
        "/names/deep: directory not empty",
    );
    assert_success(&edit(i, &[&"mkdir", i, &"/d"]));
    assert_success(&edit(i, &[&"mkdir", i, &"/d/mode_0000"]));
    assert_one_line_failure(
        &edit(i, &[&"mv", i, &"/d/mode_0000", &"/mode_0000"]),
        "/mode_0000: not a directory",
    );
    assert_one_line_failure(
        &edit(i, &[&"mv", i, &"/names", &"/names/moved"]),
        "into itself",
    );
    assert_one_line_failure(
        &edit(i, &[&"mv", i, &"/block_exact", &"/nowhere/x"]),
        "/nowhere/x: no such file or directory",
    );
}

#[test]
fn ln_makes_hard_and_symbolic_links() {
    let img = ext4_image(16);
    let i = &img.path;
    let host = tempfile::tempdir().unwrap();
    let file = host.path().join("file");
    fs::write(&file, b"linked").unwrap();
    assert_success(&edit(i, &[&"put", i, &file, &"/file"]));
    assert_success(&edit(i, &[&"mkdir", i, &"/dir"]));

    assert_success(&edit(i, &[&"ln", i, &"/file", &"/hard"]));
    assert!(stat(i, "/file").contains("Links: 2"));
    assert_success(&edit(i, &[&"ln", i, &"/file", &"/dir"]));
    assert!(stat(i, "/dir/file").contains("Links: 3"));
    assert_success(&edit(i, &[&"ln", &"-s", i, &"../file", &"/dir/sym"]));
    assert_eq!(cat(i, "/dir/sym"), b"linked");
    let long_target = "t".repeat(300);
    assert_success(&edit(i, &[&"ln", &"-s", i, &long_target, &"/slow"]));
    assert!(stat(i, "/slow").contains("Size: 300"));

    assert_one_line_failure(
        &edit(i, &[&"ln", i, &"/file", &"/hard"]),
        "/hard: file exists",
    );
    assert_one_line_failure(
        &edit(i, &[&"ln", &"-s", i, &"x", &"/hard"]),
        "/hard: file exists",
    );
    assert_one_line_failure(
        &edit(i, &[&"ln", i, &"/missing", &"/m"]),
        "/missing: no such file or directory",
    );
    assert_one_line_failure(
        &edit(i, &[&"ln", i, &"/dir", &"/dir2"]),
        "cannot be hard-linked",
    );
    assert_one_line_failure(
        &edit(i, &[&"ln", i, &"/file", &"/no/such"]),
        "/no/such: no such file or directory",
    );
}

/// A symlink target that does not fit in one block with its NUL is refused as the kernel
/// refuses it (ENAMETOOLONG), by `ln -s` and by `import` (which names the path and goes on);
/// one byte less is taken.
#[test]
fn symlink_targets_longer_than_a_block_are_refused() {
    let img = make_empty_image(&["-t", "ext4", "-b", "1024"], 16);
    let i = &img.path;
    let fits = "t/".repeat(511) + "t";
    let too_long = fits.clone() + "t";
    assert_success(&edit(i, &[&"ln", &"-s", i, &fits, &"/fits"]));
    assert!(stat(i, "/fits").contains("Size: 1023"));
    assert_one_line_failure(
        &edit(i, &[&"ln", &"-s", i, &too_long, &"/long"]),
        "a symlink target of 1024 bytes is too long (at most 1023 on this filesystem)",
    );
    assert_one_line_failure(&e4(&[&"stat", i, &"/long"]), "no such file or directory");

    let host = tempfile::tempdir().unwrap();
    let tree = host.path().join("tree");
    fs::create_dir(&tree).unwrap();
    std::os::unix::fs::symlink(&fits, tree.join("fits")).unwrap();
    std::os::unix::fs::symlink(&too_long, tree.join("long")).unwrap();
    let out = edit(i, &[&"import", i, &tree, &"/tree"]);
    let text = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    let mut lines: Vec<&str> = text.lines().collect();
    lines.sort();
    assert_eq!(
        lines,
        [
            "e4: /tree/long: a symlink target of 1024 bytes is too long (at most 1023 on this \
             filesystem)",
            "e4: 1 entry imported; 1 path could not be (each is named above)",
        ],
        "{text}"
    );
    assert!(stat(i, "/tree/fits").contains("Size: 1023"));
    assert_one_line_failure(
        &e4(&[&"stat", i, &"/tree/long"]),
        "no such file or directory",
    );
}

#[test]
fn chmod_chown_and_truncate_change_one_inode() {
    let img = ext4_image(16);
    let i = &img.path;
    let host = tempfile::tempdir().unwrap();
    let file = host.path().join("file");
    fs::write(&file, vec![7u8; 10_000]).unwrap();
    assert_success(&edit(i, &[&"put", i, &file, &"/file"]));
    assert_success(&edit(i, &[&"ln", &"-s", i, &"file", &"/link"]));

    assert_success(&edit(i, &[&"chmod", i, &"4710", &"/link"]));
    assert!(stat(i, "/file").contains("(4710/-rws--x---)"));
    assert_success(&edit(i, &[&"chmod", i, &"0", &"/"]));
    assert!(stat(i, "/").contains("(0000/d---------)"));
    assert_success(&edit(i, &[&"chown", i, &"1234:567", &"/file"]));
    assert!(stat(i, "/file").contains("Uid:  1234  Gid:   567"));
    assert_success(&edit(i, &[&"chown", i, &":89", &"/file"]));
    assert!(stat(i, "/file").contains("Uid:  1234  Gid:    89"));
    assert_success(&edit(i, &[&"chown", i, &"70000", &"/file"]));
    assert!(stat(i, "/file").contains("Uid: 70000  Gid:    89"));

    assert_success(&edit(i, &[&"truncate", &"-s", &"3000", i, &"/file"]));
    assert_eq!(cat(i, "/file"), vec![7u8; 3000]);
    assert_success(&edit(i, &[&"truncate", &"-s", &"1M", i, &"/link"]));
    let grown = cat(i, "/file");
    assert_eq!(grown.len(), 1 << 20);
    assert!(grown[3000..].iter().all(|&b| b == 0));
    assert_success(&edit(i, &[&"truncate", &"-s", &"0", i, &"/file"]));
    assert!(cat(i, "/file").is_empty());

    assert_usage_error(&e4(&[&"chmod", i, &"9", &"/file"]), "not an octal mode");
    assert_usage_error(&e4(&[&"chmod", i, &"10000", &"/file"]), "not an octal mode");
    assert_usage_error(&e4(&[&"chmod", i, &"u+x", &"/file"]), "not an octal mode");
    assert_usage_error(&e4(&[&"chown", i, &"root", &"/file"]), "numeric owner");
    assert_usage_error(&e4(&[&"truncate", &"-s", &"1X", i, &"/file"]), "not a size");
    assert_one_line_failure(
        &edit(i, &[&"chmod", i, &"755", &"/missing"]),
        "/missing: no such file or directory",
    );
    assert_one_line_failure(
        &edit(i, &[&"chown", i, &"1:1", &"/file/x"]),
        "/file/x: not a directory",
    );
    assert_one_line_failure(
        &edit(i, &[&"truncate", &"-s", &"0", i, &"/lost+found"]),
        "/lost+found: is a directory",
    );
    assert_one_line_failure(
        &edit(i, &[&"truncate", &"-s", &"0", i, &"/nothing"]),
        "/nothing: no such file or directory",
    );
}

/// Sets inode flags with debugfs (`chattr` needs a mount).
fn set_flags(image: &Path, path: &str, flags: u32) {
    let out = Command::new("debugfs")
        .arg("-w")
        .arg("-R")
        .arg(format!("set_inode_field {path} flags {flags:#x}"))
        .arg(image)
        .output()
        .unwrap();
    assert!(out.status.success(), "debugfs: {}", stderr(&out));
}

/// An immutable file refuses every edit, an append-only one every edit but appending,
/// and an append-only directory the removal of its names, each in one line, as the
/// kernel's ext4 refuses them (EPERM); the engine makes the rule, so the commands and
/// the mount agree.
#[test]
fn immutable_and_append_only_inodes_refuse_edits_in_one_line() {
    const EXTENTS: u32 = 0x80000;
    let img = ext4_image(16);
    let i = &img.path;
    let host = tempfile::tempdir().unwrap();
    let file = host.path().join("file");
    fs::write(&file, b"data").unwrap();
    assert_success(&edit(i, &[&"put", i, &file, &"/file"]));
    assert_success(&edit(i, &[&"mkdir", i, &"/dir"]));
    assert_success(&edit(i, &[&"put", i, &file, &"/dir/in"]));

    for flag in [0x10, 0x20] {
        set_flags(i, "/file", EXTENTS | flag);
        for args in [
            &[&"chmod" as &dyn AsRef<OsStr>, i, &"600", &"/file"][..],
            &[&"chown", i, &"1:1", &"/file"],
            &[&"truncate", &"-s", &"0", i, &"/file"],
            &[&"rm", i, &"/file"],
            &[&"mv", i, &"/file", &"/moved"],
            &[&"ln", i, &"/file", &"/link"],
        ] {
            assert_one_line_failure(&edit(i, args), "operation not permitted");
        }
        assert_eq!(cat(i, "/file"), b"data");
        set_flags(i, "/file", EXTENTS);
    }
    set_flags(i, "/dir", EXTENTS | 0x20);
    assert_one_line_failure(&edit(i, &[&"rm", i, &"/dir/in"]), "operation not permitted");
    assert_one_line_failure(
        &edit(i, &[&"mv", i, &"/dir/in", &"/out"]),
        "operation not permitted",
    );
    assert_success(&edit(i, &[&"put", i, &file, &"/dir/new"]));
    set_flags(i, "/dir", EXTENTS | 0x10);
    assert_one_line_failure(
        &edit(i, &[&"put", i, &file, &"/dir/newer"]),
        "operation not permitted",
    );
    assert_one_line_failure(
        &edit(i, &[&"mkdir", i, &"/dir/sub"]),
        "operation not permitted",
    );
}

/// A full filesystem is one line and exit 1, for one file and for a tree; nothing half
/// copied stays behind, and the image is clean.
#[test]
fn a_full_filesystem_is_one_line() {
    let img = ext4_image(8);
    let i = &img.path;
    let host = tempfile::tempdir().unwrap();
    let big = host.path().join("big");
    fs::write(&big, vec![0x5Au8; 12 << 20]).unwrap();
    let out = edit(i, &[&"put", i, &big, &"/big"]);
    assert_one_line_failure(&out, "/big: no space left on the filesystem (blocks)");
    assert_one_line_failure(&e4(&[&"stat", i, &"/big"]), "no such file or directory");

    let tree = host.path().join("tree");
    for d in 0..4 {
        let dir = tree.join(format!("d{d}"));
        fs::create_dir_all(&dir).unwrap();
        for f in 0..40 {
            fs::write(dir.join(format!("f{f}")), vec![d as u8; 100_000]).unwrap();
        }
    }
    let out = edit(i, &[&"import", i, &tree, &"/tree"]);
    assert_one_line_failure(&out, "no space left on the filesystem");
    assert!(
        stderr(&out).contains("the import stopped"),
        "{}",
        stderr(&out)
    );
    // The space is really used up, not refused early. The command writes as whoever runs
    // it: root also fills the 5 % mke2fs reserves for it (409 blocks here), so what is left
    // is the allocator's slack (the kernel's metadata reserve, 2 % or 163 blocks, and blocks
    // too scattered for the last files); anyone else stops at the root reserve.
    let df = e4(&[&"info", i]);
    let info = String::from_utf8_lossy(&df.stdout);
    let free: u64 = info
        .lines()
        .find(|l| l.starts_with("Free blocks:"))
        .and_then(|l| l.split_whitespace().nth(2))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no free-block count in {info}"));
    let most = if rustix::process::geteuid().is_root() {
        400
    } else {
        800
    };
    assert!(free < most, "{free} blocks still free after ENOSPC");
}

/// In a set-group-ID directory of the image, `mkdir` and `ln -s` make inodes of the
/// directory's group (a directory also set-group-ID), as the kernel does; `put` and
/// `import` copy the host's owner and mode all the same, as `cp -a` does.
#[test]
fn setgid_directories_give_their_group_and_copies_keep_the_hosts() {
    let img = ext4_image(16);
    let i = &img.path;
    assert_success(&edit(i, &[&"mkdir", i, &"/shared"]));
    assert_success(&edit(i, &[&"chown", i, &":777", &"/shared"]));
    assert_success(&edit(i, &[&"chmod", i, &"2775", &"/shared"]));
    assert_success(&edit(i, &[&"mkdir", i, &"/shared/made"]));
    assert!(stat(i, "/shared/made").contains("(2755/drwxr-sr-x)"));
    assert!(stat(i, "/shared/made").contains("Gid:   777"));
    assert_success(&edit(i, &[&"ln", &"-s", i, &"made", &"/shared/link"]));
    assert!(stat(i, "/shared/link").contains("Gid:   777"));

    let host = tempfile::tempdir().unwrap();
    let tree = host.path().join("tree");
    fs::create_dir_all(tree.join("sub")).unwrap();
    fs::write(tree.join("sub/file"), b"copied").unwrap();
    let host_gid = fs::metadata(&tree).unwrap().gid();
    let gid = format!("Gid: {host_gid:>5}");
    assert_success(&edit(i, &[&"import", i, &tree, &"/shared/tree"]));
    assert_success(&edit(
        i,
        &[&"put", i, &tree.join("sub/file"), &"/shared/put"],
    ));
    for path in [
        "/shared/tree",
        "/shared/tree/sub",
        "/shared/tree/sub/file",
        "/shared/put",
    ] {
        let shown = stat(i, path);
        assert!(shown.contains(&gid), "{path}: {shown}");
        assert!(!shown.contains("(2"), "{path} is set-group-ID: {shown}");
    }
}

/// Import goes on past paths that fail, names each on one line, and fails at the end with
/// the count; a directory that exists is merged into.
#[test]
fn import_reports_each_failed_path_and_goes_on() {
    let img = ext4_image(16);
    let i = &img.path;
    let host = tempfile::tempdir().unwrap();
    let tree = host.path().join("tree");
    fs::create_dir_all(tree.join("clash")).unwrap();
    fs::write(tree.join("clash/inner"), b"inner").unwrap();
    fs::create_dir_all(tree.join("merged")).unwrap();
    fs::write(tree.join("merged/new"), b"new").unwrap();
    fs::write(tree.join("file"), b"file").unwrap();
    let local = host.path().join("local");
    fs::write(&local, b"old").unwrap();
    assert_success(&edit(i, &[&"put", i, &local, &"/clash"]));
    assert_success(&edit(i, &[&"mkdir", i, &"/merged"]));
    assert_success(&edit(i, &[&"put", i, &local, &"/merged/old"]));
    assert_success(&edit(i, &[&"put", i, &local, &"/file"]));

    let out = edit(i, &[&"import", i, &tree]);
    let text = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    let mut lines: Vec<&str> = text.lines().collect();
    lines.sort();
    assert_eq!(
        lines,
        [
            "e4: /clash: file exists",
            "e4: /file: file exists",
            "e4: 2 entries imported; 2 paths could not be (each is named above)",
        ],
        "{text}"
    );
    assert_eq!(cat(i, "/merged/new"), b"new");
    assert_eq!(cat(i, "/merged/old"), b"old");
    assert_eq!(cat(i, "/file"), b"old");

    assert_one_line_failure(
        &edit(i, &[&"import", i, &tree, &"/file"]),
        "/file: not a directory",
    );
    assert_one_line_failure(
        &edit(i, &[&"import", i, &tree, &"/a/b"]),
        "/a/b: no such file or directory",
    );
    assert_one_line_failure(
        &edit(i, &[&"import", i, &host.path().join("none"), &"/x"]),
        "none: No such file or directory",
    );
    assert_usage_error(&e4(&[&"import", &"-j", &"0", i, &tree]), "0");

    // The image inside the tree it imports is not copied into itself.
    let beside = host.path().join("beside");
    fs::create_dir(&beside).unwrap();
    fs::write(beside.join("other"), b"other").unwrap();
    let inside = beside.join("self.img");
    fs::copy(i, &inside).unwrap();
    let out = edit(&inside, &[&"import", &inside, &beside, &"/beside"]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        stderr(&out),
        format!(
            "e4: {}: skipped: it is the image being written\n\
             e4: 1 entry imported; 1 path could not be (each is named above)\n",
            inside.display()
        )
    );
    assert_eq!(cat(&inside, "/beside/other"), b"other");
}

fn profile(name: &str) -> &'static e4_testkit::Profile {
    PROFILES.iter().find(|p| p.name == name).unwrap()
}

/// ext2 and ext3 (no extents: block-mapped files and directories) take every command too.
#[test]
fn every_command_on_ext2_and_ext3() {
    for kind in ["ext2", "ext3"] {
        let img = make_empty_image(&["-t", kind], 16);
        let i = &img.path;
        let host = tempfile::tempdir().unwrap();
        let file = host.path().join("file");
        fs::write(&file, vec![1u8; 70_000]).unwrap();
        fs::create_dir_all(host.path().join("tree/sub")).unwrap();
        fs::write(host.path().join("tree/sub/f"), b"f").unwrap();
        for args in [
            vec![&"mkdir" as &dyn AsRef<OsStr>, &"-p", i, &"/a/b"],
            vec![&"put", i, &file, &"/a/b/file"],
            vec![&"import", i, &host.path().join("tree"), &"/imported"],
            vec![&"ln", i, &"/a/b/file", &"/hard"],
            vec![&"ln", &"-s", i, &"b/file", &"/soft"],
            vec![&"mv", i, &"/a/b", &"/b"],
            vec![&"chmod", i, &"600", &"/hard"],
            vec![&"chown", i, &"5:6", &"/soft"],
            vec![&"truncate", &"-s", &"100", i, &"/b/file"],
            vec![&"rm", i, &"/hard"],
            vec![&"rm", &"-r", i, &"/a"],
        ] {
            let out = edit(i, &args);
            assert!(
                out.status.success(),
                "{kind}: {:?}: {}",
                args.iter().map(|a| a.as_ref()).collect::<Vec<_>>(),
                stderr(&out)
            );
        }
        assert_eq!(cat(i, "/soft"), vec![1u8; 100], "{kind}");
        assert_eq!(cat(i, "/b/file"), vec![1u8; 100], "{kind}");
        assert_eq!(cat(i, "/imported/sub/f"), b"f", "{kind}");
    }
}

/// Inline directories (an inline_data image) are edited like any other: a new directory
/// starts inline, and an import fills a kernel-layout inline directory until it becomes a
/// block. `edit` checks the image with e2fsck after each command.
#[test]
fn inline_directories_are_edited() {
    let src = tempfile::tempdir().unwrap();
    fs::create_dir_all(src.path().join("inline/sub")).unwrap();
    let img = make_image(src.path(), profile("ext4-inline-data"), 16, 256);
    let i = &img.path;
    assert_success(&edit(i, &[&"mkdir", i, &"/inline/new"]));
    let host = tempfile::tempdir().unwrap();
    for n in 0..20 {
        fs::write(host.path().join(format!("file-{n}")), b"small").unwrap();
    }
    import_succeeded(&edit(i, &[&"import", i, &host.path(), &"/inline/sub"]));
    assert_eq!(cat(i, "/inline/sub/file-19"), b"small");
}

/// Checks that `import` succeeded with nothing on stderr.
fn import_succeeded(out: &Output) {
    assert!(out.status.success(), "stderr: {}", stderr(out));
    assert!(out.stderr.is_empty(), "stderr: {}", stderr(out));
}

/// Differences between two trees.
fn differences(expected: &Path, actual: &Path) -> Vec<String> {
    let options = CompareOptions {
        mtime_nanoseconds: true,
        ignore_at_root: vec!["lost+found".into()],
        skip_paths: Vec::new(),
        root_times: false,
    };
    compare_trees(expected, actual, &options)
}

/// Copies the modification and access times of `from` to `to` (for directories whose times
/// an edit set to "now" on both sides, a moment apart).
fn copy_times(from: &Path, to: &Path) {
    use nix::sys::stat::{utimensat, UtimensatFlags};
    use nix::sys::time::TimeSpec;
    let m = fs::symlink_metadata(from).unwrap();
    utimensat(
        None,
        to,
        &TimeSpec::new(m.atime(), m.atime_nsec()),
        &TimeSpec::new(m.mtime(), m.mtime_nsec()),
        UtimensatFlags::NoFollowSymlink,
    )
    .unwrap();
}

/// The generated tree (every file kind, holes, 255-byte and UTF-8 names, hard links,
/// xattrs, odd modes, an indexed directory) imported into a fresh `mke2fs -t ext4` image
/// (compared with the source through `e4 export`), then edited with `rm -r`, `rm`, `mv` and `mkdir -p`; the same edits are made to a copy
/// on the host, and the image must equal that copy through `e4 export` and through the
/// kernel's mount (run as root with E4_REQUIRE_KERNEL=1 so that part cannot be skipped).
#[test]
fn generated_tree_imported_edited_and_compared() {
    use nix::sys::stat::{utimensat, UtimensatFlags};
    use nix::sys::time::TimeSpec;

    let work = tempfile::tempdir().unwrap();
    let src = work.path().join("src");
    fs::create_dir(&src).unwrap();
    generate_tree(&src, &TreeSpec::small());
    // A known atime with nanoseconds (the tree comparison checks mtime only).
    utimensat(
        None,
        &src.join("block_exact"),
        &TimeSpec::new(1_500_000_000, 123_456_789),
        &TimeSpec::new(1_600_000_000, 987_654_321),
        UtimensatFlags::NoFollowSymlink,
    )
    .unwrap();
    let img = ext4_image(256);
    let i = &img.path;
    let out = edit(i, &[&"import", i, &src]);
    import_succeeded(&out);
    // The import alone: the image is the source (directory times included, which the edits
    // below change in both trees).
    let imported = work.path().join("imported");
    assert_success(&e4(&[&"export", i, &imported]));
    let diffs = differences(&src, &imported);
    assert!(
        diffs.is_empty(),
        "the import differs:\n{}",
        diffs.join("\n")
    );
    // Copied after the import, since reading a file may move its atime (relatime), and the
    // import must have recorded the one set above.
    let expected = work.path().join("expected");
    let copied = Command::new("cp")
        .arg("-a")
        .arg(&src)
        .arg(&expected)
        .status()
        .unwrap();
    assert!(copied.success());

    assert_success(&edit(i, &[&"rm", &"-r", i, &"/deep/level00/level01"]));
    fs::remove_dir_all(expected.join("deep/level00/level01")).unwrap();
    assert_success(&edit(i, &[&"mv", i, &"/names", &"/deep/renamed"]));
    fs::rename(expected.join("names"), expected.join("deep/renamed")).unwrap();
    assert_success(&edit(i, &[&"mv", i, &"/big_dir/needle", &"/found"]));
    fs::rename(expected.join("big_dir/needle"), expected.join("found")).unwrap();
    assert_success(&edit(i, &[&"rm", i, &"/hardlink_same_dir"]));
    fs::remove_file(expected.join("hardlink_same_dir")).unwrap();
    assert_success(&edit(i, &[&"mkdir", &"-p", i, &"/new/sub"]));
    fs::create_dir_all(expected.join("new/sub")).unwrap();
    for dir in ["new", "new/sub"] {
        fs::set_permissions(expected.join(dir), fs::Permissions::from_mode(0o755)).unwrap();
    }

    let exported = work.path().join("exported");
    let out = e4(&[&"export", i, &exported]);
    assert_success(&out);
    let atime = fs::symlink_metadata(exported.join("block_exact")).unwrap();
    assert_eq!(
        (atime.atime(), atime.atime_nsec()),
        (1_500_000_000, 123_456_789)
    );
    // The directories the edits changed got "now" on each side, a moment apart.
    for dir in ["deep", "deep/level00", "big_dir", "new", "new/sub"] {
        copy_times(&exported.join(dir), &expected.join(dir));
    }
    let diffs = differences(&expected, &exported);
    assert!(diffs.is_empty(), "e4 export differs:\n{}", diffs.join("\n"));

    match KernelMount::mount(i) {
        Ok(mount) => {
            let kernel = mount.path();
            let atime = fs::symlink_metadata(kernel.join("block_exact")).unwrap();
            assert_eq!(
                (atime.atime(), atime.atime_nsec()),
                (1_500_000_000, 123_456_789)
            );
            let diffs = differences(&expected, &kernel);
            assert!(
                diffs.is_empty(),
                "the kernel's mount differs:\n{}",
                diffs.join("\n")
            );
        }
        Err(reason) => eprintln!("kernel comparison skipped: {reason}"),
    }
}

/// Every editing command on something that is not an image, or not there: one line naming
/// the file, exit 1, and the file untouched.
#[test]
fn every_command_names_a_bad_image() {
    let tmp = tempfile::tempdir().unwrap();
    let garbage = tmp.path().join("garbage.img");
    let bytes = vec![0xA5u8; 1 << 20];
    fs::write(&garbage, &bytes).unwrap();
    let missing = tmp.path().join("missing.img");
    let host_file = tmp.path().join("host_file");
    fs::write(&host_file, b"x").unwrap();
    let host_dir = tmp.path().join("host_dir");
    fs::create_dir(&host_dir).unwrap();
    for (image, expect) in [
        (
            &garbage,
            "garbage.img: not an ext2/ext3/ext4 filesystem: bad magic number 0xa5a5",
        ),
        (&missing, "missing.img: cannot open the image: No such file"),
    ] {
        for args in [
            vec![&"import" as &dyn AsRef<OsStr>, image, &host_dir],
            vec![&"put", image, &host_file, &"/f"],
            vec![&"mkdir", &"-p", image, &"/d"],
            vec![&"rm", &"-r", image, &"/d"],
            vec![&"mv", image, &"/a", &"/b"],
            vec![&"ln", &"-s", image, &"a", &"/b"],
            vec![&"chmod", image, &"755", &"/"],
            vec![&"chown", image, &"0:0", &"/"],
            vec![&"truncate", &"-s", &"0", image, &"/f"],
        ] {
            assert_one_line_failure(&e4(&args), expect);
        }
    }
    assert_eq!(fs::read(&garbage).unwrap(), bytes);
    assert!(!missing.exists());
}

/// The progress line is drawn on a terminal (here a pseudo-terminal from script(1)) and
/// cleared at the end; without a terminal stderr holds failures only, which every other
/// test checks.
#[test]
fn import_shows_progress_only_on_a_terminal() {
    let img = ext4_image(16);
    let host = tempfile::tempdir().unwrap();
    for n in 0..50 {
        fs::write(host.path().join(format!("f{n}")), vec![n as u8; 10_000]).unwrap();
    }
    let command = format!(
        "{} import {} {}",
        env!("CARGO_BIN_EXE_e4"),
        img.path.display(),
        host.path().display()
    );
    let out = match Command::new("script")
        .args(["-qec", &command, "/dev/null"])
        .output()
    {
        Ok(out) => out,
        Err(e) => return eprintln!("script(1) is not available ({e}); progress test skipped"),
    };
    let terminal = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{terminal}");
    assert!(
        terminal.contains(" entries, "),
        "no progress line in {terminal:?}"
    );
    assert!(
        terminal.contains("\x1b[2K"),
        "the progress line is not cleared: {terminal:?}"
    );
    e2fsck_clean(&img.path).unwrap();
    assert_eq!(cat(&img.path, "/f49"), vec![49u8; 10_000]);
}

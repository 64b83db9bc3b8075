//! Untrusted allocator input (issue 22, item 2): an image made by mke2fs, one bitmap bit
//! cleared with debugfs so the bitmap and its group descriptor disagree (or the bitmap frees
//! a metadata block), then an edit that allocates. The group must be refused, not believed:
//! the edit goes elsewhere, nothing that was there is lost, `e2fsck -fn` reports exactly
//! what it reported before, and the user sees one line naming the group.

use std::ffi::OsStr;
use std::fs;
use std::path::Path;
use std::process::{Command, Output};

use e4_testkit::{e2fsck_clean, e2fsck_problems, make_image, Image, RawImage, PROFILES};

/// Files in the directory whose block or inode is damaged (the reproduction had 26).
const ENTRIES: usize = 26;

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

/// `debugfs [-w] -R request image`, its stdout.
fn debugfs(image: &Path, write: bool, request: &str) -> String {
    let mut cmd = Command::new(e4_testkit::tool("debugfs"));
    if write {
        cmd.arg("-w");
    }
    let out = cmd
        .arg("-R")
        .arg(request)
        .arg(image)
        .output()
        .expect("debugfs must be installed (e2fsprogs)");
    assert!(out.status.success(), "debugfs -R {request:?} failed");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn content(i: usize) -> String {
    format!("file {i} of the damaged directory\n").repeat(i + 1)
}

/// A 16 MiB ext4 image of 1 KiB blocks (two groups, flex_bg, metadata_csum: debugfs
/// reseals what it changes, so only the allocator's own checks can notice), holding `/d`
/// with [`ENTRIES`] files; e2fsck-clean.
fn image_with_directory() -> (tempfile::TempDir, Image) {
    let source = tempfile::tempdir().unwrap();
    fs::create_dir(source.path().join("d")).unwrap();
    for i in 0..ENTRIES {
        fs::write(source.path().join(format!("d/f{i:02}")), content(i)).unwrap();
    }
    let profile = PROFILES.iter().find(|p| p.name == "ext4-1k").unwrap();
    let image = make_image(source.path(), profile, 16, 4096);
    e2fsck_clean(&image.path).unwrap();
    (source, image)
}

/// Every file of `/d` is still there with its contents.
#[track_caller]
fn assert_directory_intact(image: &Path) {
    let listed = e4(&[&"ls", &image, &"/d"]);
    assert!(listed.status.success(), "{}", stderr(&listed));
    let names = String::from_utf8_lossy(&listed.stdout).into_owned();
    for i in 0..ENTRIES {
        let name = format!("f{i:02}");
        assert!(names.lines().any(|l| l == name), "{name} is gone: {names}");
        let out = e4(&[&"cat", &image, &format!("/d/{name}")]);
        assert!(out.status.success(), "{}", stderr(&out));
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            content(i),
            "/d/{name}"
        );
    }
}

/// The edit succeeded with exactly one line on stderr, a warning naming group 0 and
/// containing each of `expect`.
#[track_caller]
fn assert_one_warning(out: &Output, expect: &[&str]) {
    let text = stderr(out);
    assert!(out.status.success(), "exit {:?}: {text}", out.status.code());
    assert_eq!(text.lines().count(), 1, "stderr: {text}");
    assert!(text.starts_with("e4: warning: "), "stderr: {text}");
    assert!(text.contains("group 0:"), "stderr: {text}");
    for e in expect {
        assert!(text.contains(e), "expected {e:?} in {text}");
    }
}

/// The reproduction: the bit of `/d`'s only block cleared (`freeb`), the
/// descriptor's count left, then `e4 mkdir`. Planted bug: believing the bitmap (correcting
/// the free count by the difference, as e4 did) gives that block to the new directory,
/// and `/d`'s entries are gone.
#[test]
fn mkdir_does_not_take_a_block_the_bitmap_lost() {
    let (_source, image) = image_with_directory();
    let path = &image.path;
    let blocks = debugfs(path, false, "blocks /d");
    let block: u64 = blocks.split_whitespace().next().unwrap().parse().unwrap();
    debugfs(path, true, &format!("freeb {block}"));
    let before = e2fsck_problems(path);
    assert!(
        before.iter().any(|l| l.contains(&format!("+{block}"))),
        "{before:?}"
    );

    let out = e4(&[&"mkdir", path, &"/newdir"]);
    assert_directory_intact(path);
    let made = debugfs(path, false, "blocks /newdir");
    assert!(
        !made.split_whitespace().any(|b| b == block.to_string()),
        "/newdir got block {block}"
    );
    assert_eq!(e2fsck_problems(path), before, "e2fsck sees new damage");
    // The kernel's words: "block bitmap and bg descriptor inconsistent: X vs Y free".
    assert_one_warning(&out, &["block bitmap", " vs ", "free blocks"]);
}

/// The inode side: the bit of `/d/f00`'s inode cleared (`freei`), then `e4 put` of a new
/// file into `/d` (whose inode would be placed in group 0). Planted bug: believing the
/// inode bitmap hands out f00's inode number again, and f00 is overwritten.
#[test]
fn put_does_not_take_an_inode_the_bitmap_lost() {
    let (source, image) = image_with_directory();
    let path = &image.path;
    debugfs(path, true, "freei /d/f00");
    let before = e2fsck_problems(path);
    assert!(
        before
            .iter()
            .any(|l| l.starts_with("Inode bitmap differences")),
        "{before:?}"
    );

    let host = source.path().join("new");
    fs::write(&host, b"a new file\n").unwrap();
    let out = e4(&[&"put", path, &host, &"/d/new"]);
    assert_directory_intact(path);
    let made = e4(&[&"cat", path, &"/d/new"]);
    assert_eq!(made.stdout, b"a new file\n");
    assert_eq!(e2fsck_problems(path), before, "e2fsck sees new damage");
    assert_one_warning(&out, &["inode bitmap", " vs ", "free inodes"]);
}

/// The system zone: the bit of group 0's first inode-table block cleared. The group is
/// refused as the kernel's `ext4_valid_block_bitmap` refuses it, and said once. Planted
/// bug: refusing the group silently (as e4 did: an error kept only in case nothing else
/// was found) leaves the user without the line.
#[test]
fn a_bitmap_that_frees_the_inode_table_is_refused_and_said() {
    let (_source, image) = image_with_directory();
    let path = &image.path;
    let raw = RawImage::read(path).unwrap();
    let table = raw.group_descriptor(0).unwrap().inode_table();
    debugfs(path, true, &format!("freeb {table}"));
    let before = e2fsck_problems(path);

    let out = e4(&[&"mkdir", path, &"/newdir"]);
    assert_directory_intact(path);
    assert_eq!(e2fsck_problems(path), before, "e2fsck sees new damage");
    assert_one_warning(&out, &[&format!("metadata block {table} free")]);
}

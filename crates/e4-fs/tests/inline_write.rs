//! Writing inline data (write-path.md §4): each transition of an inline file (first write
//! into the inode, growth into `system.data`, shrinking, fallocate, moving out to a block)
//! and of an inline directory (created inline, value grown, converted to a block, entries
//! removed, renamed, reparented, removed), with `e2fsck -fn` after each step and the kernel
//! reading the result back (with `E4_REQUIRE_KERNEL=1` a failed mount fails the test).
//! Kernel-made inline files and directories are changed by e4 too.

use std::collections::BTreeMap;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use e4_format::inode::Inode;
use e4_format::xattr::{parse_inode_xattrs, XattrValue};
use e4_format::Location;
use e4_fs::{Creator, FallocateMode, Filesystem, OpenOptions, RenameMode};
use e4_testkit::{e2fsck_clean, kernel_comparison_skipped, make_empty_image, KernelMount};

const ROOT: u32 = 2;
/// `EXT4_INLINE_DATA_FL`, `EXT4_EXTENTS_FL`.
const INLINE_FL: u32 = 0x1000_0000;
const EXTENTS_FL: u32 = 0x80000;
/// 256-byte inodes (mke2fs's default) hold 60 bytes in i_block plus a 68-byte value.
const CAPACITY: usize = 128;
const ME: Creator = Creator {
    permissions: 0o755,
    uid: 0,
    gid: 0,
    umask: 0,
};

fn inline_image() -> e4_testkit::Image {
    make_empty_image(&["-t", "ext4", "-b", "1024", "-O", "inline_data"], 32)
}

/// Unmounts, requires `e2fsck -fn` to pass, and opens the image again.
fn checked(fs: Filesystem, image: &Path, step: &str) -> Filesystem {
    fs.unmount().unwrap();
    e2fsck_clean(image).unwrap_or_else(|e| panic!("after {step}: {e}"));
    Filesystem::open(image, OpenOptions::writable()).unwrap()
}

/// The `system.data` value in the inode (the API does not show it, as the kernel's does not).
fn system_data(fs: &Filesystem, ino: u32) -> Option<Vec<u8>> {
    let inode = fs.read_inode(ino).unwrap();
    parse_inode_xattrs(&inode.xattr_area, Location::Inode(ino))
        .unwrap()
        .into_iter()
        .find(|x| x.name == b"system.data")
        .map(|x| match x.value {
            XattrValue::Inline(v) => v,
            other => panic!("system.data stored as {other:?}"),
        })
}

fn is_inline(inode: &Inode) -> bool {
    inode.flags() & INLINE_FL != 0
}

/// An inline inode: the flag, no extents flag, no blocks.
fn assert_inline(fs: &Filesystem, ino: u32, size: u64, what: &str) {
    let inode = fs.read_inode(ino).unwrap();
    assert!(is_inline(&inode), "{what}: not inline");
    assert_eq!(
        inode.flags() & EXTENTS_FL,
        0,
        "{what}: EXTENTS_FL on an inline inode"
    );
    assert_eq!(inode.blocks_512(false, 1024), 0, "{what}: i_blocks");
    assert_eq!(inode.size(), size, "{what}: size");
}

/// Moved out of the inode: extents, no system.data, `blocks` blocks of 1 KiB.
fn assert_extents(fs: &Filesystem, ino: u32, blocks: u64, what: &str) {
    let inode = fs.read_inode(ino).unwrap();
    assert!(!is_inline(&inode), "{what}: still inline");
    assert_ne!(inode.flags() & EXTENTS_FL, 0, "{what}: no EXTENTS_FL");
    assert_eq!(
        inode.blocks_512(false, 1024),
        blocks * 2,
        "{what}: i_blocks"
    );
    assert_eq!(system_data(fs, ino), None, "{what}");
}

/// The kernel's reading of the files and directory listings in `expect` (path → content,
/// or `None` for a directory, whose listing is every path directly below it).
fn kernel_reads(image: &Path, expect: &BTreeMap<String, Option<Vec<u8>>>) {
    let mount = match KernelMount::mount(image) {
        Ok(m) => m,
        Err(reason) => return kernel_comparison_skipped("inline data", &reason),
    };
    for (path, content) in expect {
        let p = mount.path().join(path);
        match content {
            Some(bytes) => assert!(
                std::fs::read(&p).unwrap() == *bytes,
                "kernel reads {path} differently"
            ),
            None => {
                let mut listed: Vec<String> = std::fs::read_dir(&p)
                    .unwrap()
                    .map(|e| {
                        let name = e.unwrap().file_name();
                        format!("{path}/{}", String::from_utf8_lossy(name.as_bytes()))
                            .trim_start_matches('/')
                            .to_string()
                    })
                    .collect();
                listed.sort();
                let prefix = if path.is_empty() {
                    String::new()
                } else {
                    format!("{path}/")
                };
                let want: Vec<String> = expect
                    .keys()
                    .filter(|k| {
                        k.strip_prefix(&prefix)
                            .is_some_and(|rest| !rest.is_empty() && !rest.contains('/'))
                    })
                    .cloned()
                    .collect();
                assert_eq!(listed, want, "kernel listing of {path:?}");
            }
        }
    }
}

#[test]
fn an_inline_file_stays_in_the_inode_while_it_fits_then_moves_to_a_block() {
    let img = inline_image();
    let mut fs = Filesystem::open(&img.path, OpenOptions::writable()).unwrap();
    let ino = fs.create(ROOT, b"small", ME).unwrap();
    let mut model: Vec<u8> = Vec::new();
    let write = |fs: &Filesystem, model: &mut Vec<u8>, offset: usize, data: &[u8]| {
        assert_eq!(fs.write_at(ino, offset as u64, data).unwrap(), data.len());
        if model.len() < offset + data.len() {
            model.resize(offset + data.len(), 0);
        }
        model[offset..offset + data.len()].copy_from_slice(data);
    };
    // A new file starts extent-mapped; its first write that fits goes inline.
    assert_ne!(fs.read_inode(ino).unwrap().flags() & EXTENTS_FL, 0);
    write(&fs, &mut model, 0, b"0123456789");
    assert_inline(&fs, ino, 10, "first write");
    fs = checked(fs, &img.path, "first write");
    // Past i_block: the rest goes to system.data.
    write(&fs, &mut model, 50, &[b'v'; 40]);
    assert_inline(&fs, ino, 90, "write into the value");
    assert_eq!(system_data(&fs, ino).map(|v| v.len()), Some(30));
    fs = checked(fs, &img.path, "write into the value");
    // Shrinking drops the value and zeroes the rest of i_block; growing reads zeros.
    fs.truncate(ino, 20).unwrap();
    model.truncate(20);
    assert_inline(&fs, ino, 20, "truncate down");
    fs.truncate(ino, 100).unwrap();
    model.resize(100, 0);
    assert_inline(&fs, ino, 100, "truncate up");
    fs = checked(fs, &img.path, "truncates");
    assert_eq!(fs.read_file(ino, u64::MAX).unwrap(), model);
    // fallocate inside what fits stays inline.
    fs.fallocate(ino, FallocateMode::PunchHole, 2, 5).unwrap();
    model[2..7].fill(0);
    fs.fallocate(ino, FallocateMode::ZeroRange, 95, 20).unwrap();
    model.resize(115, 0);
    model[95..115].fill(0);
    fs.fallocate(ino, FallocateMode::Allocate, 0, CAPACITY as u64)
        .unwrap();
    model.resize(CAPACITY, 0);
    fs.fallocate(ino, FallocateMode::KeepSize, 0, 4096).unwrap();
    assert_inline(&fs, ino, CAPACITY as u64, "fallocate");
    write(&fs, &mut model, 0, b"full");
    assert_inline(&fs, ino, CAPACITY as u64, "a write that exactly fits");
    fs = checked(fs, &img.path, "fallocate");
    assert_eq!(fs.read_file(ino, u64::MAX).unwrap(), model);
    // One byte more moves it to a block, with what it held.
    write(&fs, &mut model, CAPACITY, b"!");
    assert_extents(&fs, ino, 1, "outgrown");
    fs = checked(fs, &img.path, "outgrown");
    assert_eq!(fs.read_file(ino, u64::MAX).unwrap(), model);

    // Each other way out of the inode: truncate and fallocate past what fits.
    let by_truncate = fs.create(ROOT, b"by-truncate", ME).unwrap();
    fs.write_at(by_truncate, 0, b"abc").unwrap();
    fs.truncate(by_truncate, 5000).unwrap();
    assert_extents(&fs, by_truncate, 1, "truncated past the inode");
    let by_fallocate = fs.create(ROOT, b"by-fallocate", ME).unwrap();
    fs.write_at(by_fallocate, 0, b"xyz").unwrap();
    fs.fallocate(by_fallocate, FallocateMode::Allocate, 0, 3000)
        .unwrap();
    assert_extents(&fs, by_fallocate, 3, "fallocated past the inode");
    // A first write too large for the inode never goes inline.
    let big = fs.create(ROOT, b"big", ME).unwrap();
    fs.write_at(big, 0, &[7; 200]).unwrap();
    assert_extents(&fs, big, 1, "large first write");
    // An empty file that owns blocks (fallocated past its size) keeps them: no inline.
    let reserved = fs.create(ROOT, b"reserved", ME).unwrap();
    fs.fallocate(reserved, FallocateMode::KeepSize, 0, 3000)
        .unwrap();
    fs.write_at(reserved, 0, b"small").unwrap();
    assert_extents(&fs, reserved, 3, "small write into reserved blocks");
    // An empty file stays as created.
    let empty = fs.create(ROOT, b"empty", ME).unwrap();
    fs = checked(fs, &img.path, "other ways out");
    let mut truncated = b"abc".to_vec();
    truncated.resize(5000, 0);
    let mut fallocated = b"xyz".to_vec();
    fallocated.resize(3000, 0);
    assert_eq!(fs.read_file(by_truncate, u64::MAX).unwrap(), truncated);
    assert_eq!(fs.read_file(by_fallocate, u64::MAX).unwrap(), fallocated);
    assert!(!is_inline(&fs.read_inode(empty).unwrap()));
    fs.unmount().unwrap();
    let expect: BTreeMap<String, Option<Vec<u8>>> = [
        ("small", Some(model)),
        ("by-truncate", Some(truncated)),
        ("by-fallocate", Some(fallocated)),
        ("big", Some(vec![7; 200])),
        ("reserved", Some(b"small".to_vec())),
        ("empty", Some(Vec::new())),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    kernel_reads(&img.path, &expect);
}

#[test]
fn an_inline_directory_grows_its_value_then_becomes_a_block() {
    let img = inline_image();
    let mut fs = Filesystem::open(&img.path, OpenOptions::writable()).unwrap();
    let dir = fs.mkdir(ROOT, b"d", ME).unwrap();
    assert_inline(&fs, dir, 60, "new directory");
    assert_eq!(system_data(&fs, dir), Some(Vec::new()));
    assert_eq!(fs.parent(dir).unwrap(), ROOT);
    fs = checked(fs, &img.path, "mkdir");
    // i_block's 56 bytes take four short entries.
    let mut names = Vec::new();
    for i in 0..4 {
        let name = format!("f{i}");
        fs.create(dir, name.as_bytes(), ME).unwrap();
        names.push(name);
    }
    assert_inline(&fs, dir, 60, "i_block full");
    // The next one grows the value to all the in-inode space (68 bytes).
    fs.create(dir, b"f4", ME).unwrap();
    names.push("f4".into());
    assert_inline(&fs, dir, CAPACITY as u64, "value grown");
    fs = checked(fs, &img.path, "value grown");
    for n in &names {
        assert!(fs.lookup(dir, n.as_bytes()).unwrap().is_some(), "{n}");
    }
    // The 68-byte value holds f4 and four more 12-byte entries, with an 8-byte remnant.
    for i in 5..9 {
        let name = format!("f{i}");
        fs.create(dir, name.as_bytes(), ME).unwrap();
        names.push(name);
    }
    assert_inline(&fs, dir, CAPACITY as u64, "value full");
    fs = checked(fs, &img.path, "value full");
    // The next converts the directory to one block holding everything.
    let sub = fs.mkdir(dir, b"sub", ME).unwrap();
    assert_extents(&fs, dir, 1, "converted");
    assert_eq!(fs.read_inode(dir).unwrap().size(), 1024);
    assert_eq!(fs.read_inode(dir).unwrap().links_count(), 3);
    fs = checked(fs, &img.path, "converted");
    let mut listed: Vec<String> = fs
        .read_dir(dir)
        .unwrap()
        .into_iter()
        .map(|e| String::from_utf8(e.name).unwrap())
        .collect();
    listed.sort();
    let mut want = names.clone();
    want.push("sub".into());
    want.sort();
    assert_eq!(listed, want);
    assert_inline(&fs, sub, 60, "subdirectory");
    fs.unmount().unwrap();
    let mut expect: BTreeMap<String, Option<Vec<u8>>> = BTreeMap::new();
    expect.insert(String::new(), None);
    expect.insert("lost+found".into(), None);
    expect.insert("d".into(), None);
    expect.insert("d/sub".into(), None);
    for n in &names {
        expect.insert(format!("d/{n}"), Some(Vec::new()));
    }
    kernel_reads(&img.path, &expect);
}

#[test]
fn names_in_inline_directories_are_removed_renamed_and_reparented() {
    let img = inline_image();
    let mut fs = Filesystem::open(&img.path, OpenOptions::writable()).unwrap();
    let a = fs.mkdir(ROOT, b"a", ME).unwrap();
    let b = fs.mkdir(ROOT, b"b", ME).unwrap();
    let x = fs.create(a, b"x", ME).unwrap();
    fs.write_at(x, 0, b"x's bytes").unwrap();
    let y = fs.create(a, b"y-with-a-longer-name", ME).unwrap();
    let inner = fs.mkdir(a, b"inner", ME).unwrap();
    // A name in the value region: a's i_block is full after these three.
    let z = fs.create(a, b"zz-in-the-value", ME).unwrap();
    assert!(fs.read_inode(a).unwrap().size() > 60);
    assert_inline(&fs, a, fs.read_inode(a).unwrap().size(), "a");
    fs = checked(fs, &img.path, "setup");
    // Rename within the directory, over an existing name (retarget), across directories.
    fs.rename(a, b"x", a, b"x2", RenameMode::Replace).unwrap();
    fs.rename(a, b"x2", a, b"zz-in-the-value", RenameMode::Replace)
        .unwrap();
    assert_eq!(fs.lookup(a, b"zz-in-the-value").unwrap(), Some(x));
    fs = checked(fs, &img.path, "renames in a");
    // z was replaced: its inode is free again.
    assert!(fs.read_inode(z).unwrap().links_count() == 0);
    // A subdirectory moves: its ".." (i_block[0..4)) follows, link counts too.
    fs.rename(a, b"inner", b, b"moved", RenameMode::Replace)
        .unwrap();
    assert_eq!(fs.parent(inner).unwrap(), b);
    assert_eq!(fs.read_inode(a).unwrap().links_count(), 2);
    assert_eq!(fs.read_inode(b).unwrap().links_count(), 3);
    fs = checked(fs, &img.path, "reparent");
    // Exchange between inline directories.
    fs.rename(
        a,
        b"y-with-a-longer-name",
        b,
        b"moved",
        RenameMode::Exchange,
    )
    .unwrap();
    assert_eq!(fs.parent(inner).unwrap(), a);
    fs = checked(fs, &img.path, "exchange");
    // A directory renamed over an empty inline one; removals; rmdir of an inline directory.
    let empty = fs.mkdir(b, b"empty", ME).unwrap();
    fs.rename(a, b"y-with-a-longer-name", b, b"empty", RenameMode::Replace)
        .unwrap();
    assert_eq!(fs.read_inode(empty).unwrap().links_count(), 0);
    fs.unlink(b, b"moved").unwrap();
    assert_eq!(fs.read_inode(y).unwrap().links_count(), 0);
    fs = checked(fs, &img.path, "replace and unlink");
    assert!(fs.rmdir(ROOT, b"b").is_err(), "b is not empty");
    fs.rmdir(b, b"empty").unwrap();
    fs.rmdir(ROOT, b"b").unwrap();
    fs.unlink(a, b"zz-in-the-value").unwrap();
    assert!(fs.read_dir(a).unwrap().is_empty());
    fs = checked(fs, &img.path, "removals");
    let free_before = fs.statfs().free_inodes;
    fs.rmdir(ROOT, b"a").unwrap();
    assert_eq!(fs.statfs().free_inodes, free_before + 1);
    fs = checked(fs, &img.path, "rmdir a");
    fs.unmount().unwrap();
    let mut expect: BTreeMap<String, Option<Vec<u8>>> = BTreeMap::new();
    expect.insert(String::new(), None);
    expect.insert("lost+found".into(), None);
    kernel_reads(&img.path, &expect);
}

#[test]
fn kernel_made_inline_files_and_directories_are_changed_by_e4() {
    let img = inline_image();
    match KernelMount::mount_writable(&img.path) {
        Ok(mount) => {
            let root = mount.path();
            std::fs::write(root.join("k-file"), b"kernel inline").unwrap();
            std::fs::create_dir(root.join("k-dir")).unwrap();
            for i in 0..3 {
                std::fs::write(root.join(format!("k-dir/e{i}")), b"").unwrap();
            }
        }
        Err(reason) => return kernel_comparison_skipped("kernel-made inline data", &reason),
    }
    e2fsck_clean(&img.path).unwrap();
    let mut fs = Filesystem::open(&img.path, OpenOptions::writable()).unwrap();
    let file = fs.lookup(ROOT, b"k-file").unwrap().unwrap();
    let dir = fs.lookup(ROOT, b"k-dir").unwrap().unwrap();
    assert!(is_inline(&fs.read_inode(file).unwrap()));
    assert!(is_inline(&fs.read_inode(dir).unwrap()));
    let mut content = b"kernel inline".to_vec();
    fs.write_at(file, content.len() as u64, b", then e4")
        .unwrap();
    content.extend_from_slice(b", then e4");
    assert_inline(&fs, file, content.len() as u64, "kernel file appended");
    fs.unlink(dir, b"e1").unwrap();
    fs = checked(fs, &img.path, "small changes");
    let mut names: Vec<String> = vec!["e0".into(), "e2".into()];
    for i in 0..20 {
        let name = format!("e4-made-{i}");
        fs.create(dir, name.as_bytes(), ME).unwrap();
        names.push(name);
    }
    assert_extents(&fs, dir, 1, "kernel directory converted");
    fs.write_at(file, 1000, b"end").unwrap();
    content.resize(1000, 0);
    content.extend_from_slice(b"end");
    assert_extents(&fs, file, 1, "kernel file moved out");
    fs = checked(fs, &img.path, "conversions");
    fs.unmount().unwrap();
    let mut expect: BTreeMap<String, Option<Vec<u8>>> = BTreeMap::new();
    expect.insert(String::new(), None);
    expect.insert("lost+found".into(), None);
    expect.insert("k-file".into(), Some(content));
    expect.insert("k-dir".into(), None);
    for n in &names {
        expect.insert(format!("k-dir/{n}"), Some(Vec::new()));
    }
    kernel_reads(&img.path, &expect);
}

#[test]
fn threads_sharing_inline_directories_keep_them_consistent() {
    let img = inline_image();
    let fs = Filesystem::open(&img.path, OpenOptions::writable()).unwrap();
    // Several small directories, each shared by all threads: they fill, grow their value and
    // convert while other threads add and remove names in them.
    let dirs: Vec<u32> = (0..4)
        .map(|i| fs.mkdir(ROOT, format!("shared{i}").as_bytes(), ME).unwrap())
        .collect();
    let threads = 8;
    let per_thread = 30;
    std::thread::scope(|s| {
        for t in 0..threads {
            let (fs, dirs) = (&fs, &dirs);
            s.spawn(move || {
                for i in 0..per_thread {
                    let dir = dirs[(t + i) % dirs.len()];
                    let name = format!("t{t}-{i}");
                    let ino = fs.create(dir, name.as_bytes(), ME).unwrap();
                    // Every third file grows out of its inode.
                    let len = if i % 3 == 0 { 300 } else { 1 + i };
                    fs.write_at(ino, 0, &vec![t as u8; len]).unwrap();
                    if i % 4 == 0 {
                        fs.unlink(dir, name.as_bytes()).unwrap();
                    }
                }
            });
        }
    });
    let fs = checked(fs, &img.path, "concurrent edits");
    let mut seen = 0;
    for &dir in &dirs {
        for e in fs.read_dir(dir).unwrap() {
            let name = String::from_utf8(e.name).unwrap();
            let (t, i) = name[1..].split_once('-').unwrap();
            let (t, i): (u8, usize) = (t.parse().unwrap(), i.parse().unwrap());
            let len = if i % 3 == 0 { 300 } else { 1 + i };
            assert_eq!(
                fs.read_file(e.ino, u64::MAX).unwrap(),
                vec![t; len],
                "{name}"
            );
            seen += 1;
        }
    }
    assert_eq!(seen, threads * (per_thread - per_thread.div_ceil(4)));
}

#[test]
fn inline_bytes_past_the_size_never_reappear() {
    // Another writer may leave an inline region longer than i_size (e2fsck accepts it);
    // growing the file again must read zeros there, inline and after moving out.
    let img = inline_image();
    let fs = Filesystem::open(&img.path, OpenOptions::writable()).unwrap();
    let ino = fs.create(ROOT, b"f", ME).unwrap();
    fs.write_at(ino, 0, &[b'A'; 100]).unwrap();
    let other = fs.create(ROOT, b"g", ME).unwrap();
    fs.write_at(other, 0, &[b'B'; 100]).unwrap();
    fs.unmount().unwrap();
    for name in ["f", "g"] {
        let out = std::process::Command::new(e4_testkit::tool("debugfs"))
            .args(["-w", "-R", &format!("sif /{name} size 10")])
            .arg(&img.path)
            .output()
            .expect("debugfs must be installed (e2fsprogs)");
        assert!(out.status.success(), "{out:?}");
    }
    e2fsck_clean(&img.path).unwrap();
    let mut fs = Filesystem::open(&img.path, OpenOptions::writable()).unwrap();
    fs.truncate(ino, 100).unwrap();
    assert_inline(&fs, ino, 100, "grown inline");
    // Moving out writes only the bytes below the size.
    fs.write_at(other, 500, b"end").unwrap();
    assert_extents(&fs, other, 1, "moved out");
    fs = checked(fs, &img.path, "regrown");
    let mut want = vec![b'A'; 10];
    want.resize(100, 0);
    assert_eq!(fs.read_file(ino, u64::MAX).unwrap(), want);
    let mut want = vec![b'B'; 10];
    want.resize(500, 0);
    want.extend_from_slice(b"end");
    assert_eq!(fs.read_file(other, u64::MAX).unwrap(), want);
}

//! Images passed back and forth between the kernel's ext4 and e4: the kernel writes, e4
//! changes, the kernel changes again; e2fsck passes after each step and each side reads what
//! the other wrote. Skipped (or, with E4_REQUIRE_KERNEL=1, failed) where loop mounts do not
//! work.

use std::collections::BTreeMap;
use std::path::Path;

use e4_fs::{Creator, Filesystem, OpenOptions, RenameMode};
use e4_testkit::{e2fsck_clean, make_empty_image, KernelMount};

const ROOT: u32 = 2;
const ME: Creator = Creator {
    permissions: 0o644,
    uid: 0,
    gid: 0,
    umask: 0,
};

fn content(i: usize) -> Vec<u8> {
    (0..(i * 997) % 70_000)
        .map(|k| (k * 31 + i) as u8)
        .collect()
}

/// Every regular file under `dir` (relative path → bytes), read by the kernel.
fn host_files(dir: &Path, prefix: &str, out: &mut BTreeMap<String, Vec<u8>>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let e = e.unwrap();
        let name = format!("{prefix}/{}", e.file_name().to_string_lossy());
        if name == "/lost+found" {
            continue;
        }
        let t = e.file_type().unwrap();
        if t.is_dir() {
            host_files(&e.path(), &name, out);
        } else if t.is_file() {
            out.insert(name, std::fs::read(e.path()).unwrap());
        }
    }
}

/// The same, read by e4.
fn e4_files(fs: &Filesystem, dir: u32, prefix: &str, out: &mut BTreeMap<String, Vec<u8>>) {
    for e in fs.read_dir(dir).unwrap() {
        let name = format!("{prefix}/{}", String::from_utf8_lossy(&e.name));
        if name == "/lost+found" {
            continue;
        }
        let m = fs.metadata(e.ino).unwrap();
        match m.file_type {
            e4_fs::FileType::Directory => e4_files(fs, e.ino, &name, out),
            e4_fs::FileType::Regular => {
                out.insert(name, fs.read_file(e.ino, 1 << 30).unwrap());
            }
            _ => {}
        }
    }
}

#[test]
fn kernel_then_e4_then_kernel() {
    for args in [
        &["-t", "ext4"][..],
        &["-t", "ext3"],
        &["-t", "ext4", "-b", "1024", "-O", "^metadata_csum,uninit_bg"],
    ] {
        let img = make_empty_image(args, 64);
        let mut expected = BTreeMap::new();
        // 1. The kernel writes a tree, including a directory big enough to be indexed.
        {
            let Ok(mount) = KernelMount::mount_writable(&img.path) else {
                return;
            };
            let root = mount.path();
            std::fs::create_dir_all(root.join("k/big")).unwrap();
            for i in 0..600 {
                let name = format!("/k/big/file-{i}");
                std::fs::write(root.join(&name[1..]), content(i)).unwrap();
                expected.insert(name, content(i));
            }
        }
        e2fsck_clean(&img.path).unwrap();
        // 2. e4 changes it: appends, removes, renames across directories, new files.
        {
            let fs = Filesystem::open(&img.path, OpenOptions::writable()).unwrap();
            let k = fs.resolve("/k", true).unwrap();
            let big = fs.resolve("/k/big", true).unwrap();
            let e4dir = fs.mkdir(ROOT, b"e4", ME).unwrap();
            for i in (0..600).step_by(3) {
                let name = format!("file-{i}");
                let ino = fs.lookup(big, name.as_bytes()).unwrap().unwrap();
                let size = fs.metadata(ino).unwrap().size;
                fs.write_at(ino, size, b"+e4").unwrap();
                expected
                    .get_mut(&format!("/k/big/{name}"))
                    .unwrap()
                    .extend_from_slice(b"+e4");
            }
            for i in (1..600).step_by(3) {
                fs.unlink(big, format!("file-{i}").as_bytes()).unwrap();
                expected.remove(&format!("/k/big/file-{i}"));
            }
            for i in (2..600).step_by(6) {
                let from = format!("file-{i}");
                fs.rename(
                    big,
                    from.as_bytes(),
                    e4dir,
                    from.as_bytes(),
                    RenameMode::Replace,
                )
                .unwrap();
                let data = expected.remove(&format!("/k/big/{from}")).unwrap();
                expected.insert(format!("/e4/{from}"), data);
            }
            for i in 0..300 {
                let ino = fs.create(k, format!("new-{i}").as_bytes(), ME).unwrap();
                fs.write_at(ino, 0, &content(i + 1000)).unwrap();
                expected.insert(format!("/k/new-{i}"), content(i + 1000));
            }
            fs.unmount().unwrap();
        }
        e2fsck_clean(&img.path).unwrap_or_else(|e| panic!("{args:?} after e4: {e}"));
        // 3. The kernel reads e4's changes and changes the image again.
        {
            let mount = KernelMount::mount_writable(&img.path).unwrap();
            let mut seen = BTreeMap::new();
            host_files(&mount.path(), "", &mut seen);
            assert!(
                seen == expected,
                "{args:?}: the kernel reads another tree after e4's changes"
            );
            let root = mount.path();
            for i in (0..300).step_by(2) {
                std::fs::remove_file(root.join(format!("k/new-{i}"))).unwrap();
                expected.remove(&format!("/k/new-{i}"));
            }
            std::fs::write(root.join("e4/from-kernel"), b"kernel").unwrap();
            expected.insert("/e4/from-kernel".into(), b"kernel".to_vec());
        }
        e2fsck_clean(&img.path).unwrap_or_else(|e| panic!("{args:?} after the kernel: {e}"));
        // 4. e4 reads the kernel's changes, and changes the image once more.
        let fs = Filesystem::open(&img.path, OpenOptions::writable()).unwrap();
        let mut seen = BTreeMap::new();
        e4_files(&fs, ROOT, "", &mut seen);
        assert!(
            seen == expected,
            "{args:?}: e4 reads another tree after the kernel's changes"
        );
        let e4dir = fs.resolve("/e4", true).unwrap();
        let ino = fs.lookup(e4dir, b"from-kernel").unwrap().unwrap();
        fs.write_at(ino, 6, b" and e4").unwrap();
        fs.unmount().unwrap();
        e2fsck_clean(&img.path).unwrap();
    }
}

//! What the kernel writes, e4 reads identically: mount an image read-write with the kernel's
//! ext4, create files with nanosecond and extended-epoch times (before 1970, after 2038),
//! xattrs and a growing htree directory, unmount, and check every value through e4.
//! Skipped, with the reason printed, where loop mounts are unavailable.

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::Command;

use e4_fs::{Filesystem, OpenOptions};
use e4_testkit::{e2fsck_clean, make_empty_image};
use filetime::FileTime;
use nix::fcntl::{fallocate, FallocateFlags};
use std::os::fd::AsRawFd;

fn mount_rw(image: &Path, at: &Path) -> Result<(), String> {
    let out = Command::new("mount")
        .args(["-o", "loop"])
        .arg(image)
        .arg(at)
        .output()
        .map_err(|e| e.to_string())?;
    if out.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).trim().to_string())
    }
}

#[test]
fn reads_what_the_kernel_wrote() {
    let dir = tempfile::tempdir().unwrap();
    let img = make_empty_image(&["-t", "ext4", "-b", "4096"], 64);
    let image = img.path.clone();
    let mnt = dir.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    if let Err(reason) = mount_rw(&image, &mnt) {
        e4_testkit::kernel_comparison_skipped("a kernel-written image", &reason);
        return;
    }
    let times = [
        (-86_400 * 365 - 7, 123_456_789u32),
        (4_102_444_800 + 17, 999_999_999),
        (1_700_000_000, 1),
    ];
    let mut expected = Vec::new();
    for (i, (secs, nanos)) in times.iter().enumerate() {
        let p = mnt.join(format!("t{i}"));
        std::fs::write(&p, format!("file {i}")).unwrap();
        let ft = FileTime::from_unix_time(*secs, *nanos);
        filetime::set_file_times(&p, ft, ft).unwrap();
        xattr::set(&p, "user.index", i.to_string().as_bytes()).unwrap();
        expected.push((format!("/t{i}"), *secs, *nanos));
    }
    let big = mnt.join("grown");
    std::fs::create_dir(&big).unwrap();
    for i in 0..3000 {
        std::fs::write(big.join(format!("kernel-file-{i}")), i.to_string()).unwrap();
    }
    // A file fragmented by punching every other block: 1500 extents, more than the inode's
    // four root slots can index in one level (4 x 340 leaves), so the tree is two deep.
    let holes = mnt.join("punched");
    let data: Vec<u8> = (0..4096 * 3000).map(|i| (i * 7 % 251) as u8).collect();
    std::fs::write(&holes, &data).unwrap();
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(&holes)
        .unwrap();
    for block in (0..3000).step_by(2) {
        fallocate(
            f.as_raw_fd(),
            FallocateFlags::FALLOC_FL_PUNCH_HOLE | FallocateFlags::FALLOC_FL_KEEP_SIZE,
            block * 4096,
            4096,
        )
        .unwrap();
    }
    // Preallocated (unwritten) space with a little data written into it.
    let prealloc = mnt.join("prealloc");
    let g = std::fs::File::create(&prealloc).unwrap();
    fallocate(g.as_raw_fd(), FallocateFlags::empty(), 0, 1 << 20).unwrap();
    use std::os::unix::fs::FileExt;
    g.write_all_at(b"written inside an unwritten extent", 300_000)
        .unwrap();
    drop((f, g));
    let kernel_punched = std::fs::read(&holes).unwrap();
    let kernel_prealloc = std::fs::read(&prealloc).unwrap();
    let kernel_meta: Vec<_> = expected
        .iter()
        .map(|(p, ..)| std::fs::metadata(mnt.join(&p[1..])).unwrap())
        .collect();
    assert!(Command::new("umount").arg(&mnt).status().unwrap().success());
    e2fsck_clean(&image).unwrap();

    let fs = Filesystem::open(&image, OpenOptions::default()).unwrap();
    for ((path, secs, nanos), k) in expected.iter().zip(&kernel_meta) {
        let ino = fs.resolve(path, true).unwrap();
        assert_eq!(u64::from(ino), k.ino());
        let m = fs.metadata(ino).unwrap();
        assert_eq!(
            (m.mtime.seconds, m.mtime.nanoseconds),
            (*secs, *nanos),
            "{path} mtime"
        );
        assert_eq!(
            (m.atime.seconds, m.atime.nanoseconds),
            (*secs, *nanos),
            "{path} atime"
        );
        assert_eq!(
            (m.ctime.seconds, i64::from(m.ctime.nanoseconds)),
            (k.ctime(), k.ctime_nsec()),
            "{path} ctime"
        );
        let index = path[2..].to_string();
        assert_eq!(
            fs.get_xattr(ino, b"user.index").unwrap().unwrap(),
            index.as_bytes()
        );
    }
    let punched = fs
        .read_inode(fs.resolve("/punched", true).unwrap())
        .unwrap();
    let root = e4_format::extent::ExtentNode::parse(
        &punched.record.block,
        e4_format::Location::Inode(punched.ino),
    )
    .unwrap();
    assert_eq!(
        root.header.depth, 2,
        "1500 extents overflow four leaves of 340"
    );
    assert_eq!(fs.read_file(punched.ino, 1 << 30).unwrap(), kernel_punched);
    let pre = fs
        .read_inode(fs.resolve("/prealloc", true).unwrap())
        .unwrap();
    assert_eq!(fs.read_file(pre.ino, 1 << 30).unwrap(), kernel_prealloc);
    let grown = fs.read_inode(fs.resolve("/grown", true).unwrap()).unwrap();
    assert!(
        grown.has_flag(e4_format::inode::flags::INDEX),
        "the kernel indexes a 3000-entry directory"
    );
    assert_eq!(fs.read_dir(grown.ino).unwrap().len(), 3000);
    for i in (0..3000).step_by(7) {
        let ino = fs
            .lookup(grown.ino, format!("kernel-file-{i}").as_bytes())
            .unwrap()
            .unwrap();
        assert_eq!(fs.read_file(ino, 16).unwrap(), i.to_string().as_bytes());
    }
}

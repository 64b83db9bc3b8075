//! `Filesystem::copy_range` (copy_file_range) on its own: what it copies, where the source
//! ends, and the refusals the kernel's VFS makes before a FUSE server sees the request
//! (overlapping ranges of one file, directories, other kinds of file), which the engine
//! makes too for its other callers; and the write rules it meets (immutable,
//! append-only). The image ends `e2fsck -fn` clean.

use e4_fs::{Creator, Error, FileType, Filesystem, OpenOptions};
use e4_testkit::{e2fsck_clean, make_empty_image};

const ROOT: u32 = 2;
const IMMUTABLE: u32 = 0x10;
const APPEND: u32 = 0x20;

fn creator() -> Creator {
    Creator {
        permissions: 0o644,
        uid: 0,
        gid: 0,
        umask: 0,
    }
}

#[test]
fn copies_data_and_refuses_what_the_kernel_refuses() {
    let image = make_empty_image(&["-t", "ext4"], 16);
    let fs = Filesystem::open(&image.path, OpenOptions::writable()).unwrap();
    let data: Vec<u8> = (0..20_000u32).map(|i| (i % 251) as u8).collect();
    let a = fs.create(ROOT, b"a", creator()).unwrap();
    fs.write_at(a, 0, &data).unwrap();
    let b = fs.create(ROOT, b"b", creator()).unwrap();

    assert_eq!(fs.copy_range(a, 1_000, b, 5_000, 8_000).unwrap(), 8_000);
    let mut copied = vec![0; 8_000];
    fs.read_at(b, 5_000, &mut copied).unwrap();
    assert_eq!(copied, data[1_000..9_000]);
    assert_eq!(fs.metadata(b).unwrap().size, 13_000);
    // The source's end stops the copy.
    assert_eq!(fs.copy_range(a, 19_000, b, 0, 5_000).unwrap(), 1_000);
    assert_eq!(fs.copy_range(a, 30_000, b, 0, 5_000).unwrap(), 0);
    // Within one file: apart is fine, overlapping is EINVAL.
    assert_eq!(fs.copy_range(a, 0, a, 10_000, 10_000).unwrap(), 10_000);
    assert!(matches!(
        fs.copy_range(a, 0, a, 5_000, 10_000),
        Err(Error::Invalid(_))
    ));

    let dir = fs.mkdir(ROOT, b"d", creator()).unwrap();
    let fifo = fs
        .mknod(ROOT, b"p", FileType::Fifo, (0, 0), creator())
        .unwrap();
    assert!(matches!(
        fs.copy_range(dir, 0, b, 0, 10),
        Err(Error::IsADirectory(_))
    ));
    assert!(matches!(
        fs.copy_range(a, 0, dir, 0, 10),
        Err(Error::IsADirectory(_))
    ));
    assert!(matches!(
        fs.copy_range(a, 0, fifo, 0, 10),
        Err(Error::Invalid(_))
    ));

    // Immutable takes nothing; append-only only at its end.
    let extents = fs.user_flags(b).unwrap();
    fs.set_user_flags(b, extents | IMMUTABLE, true).unwrap();
    assert!(matches!(
        fs.copy_range(a, 0, b, 0, 10),
        Err(Error::NotPermitted(_))
    ));
    fs.set_user_flags(b, extents | APPEND, true).unwrap();
    assert!(matches!(
        fs.copy_range(a, 0, b, 0, 10),
        Err(Error::NotPermitted(_))
    ));
    let end = fs.metadata(b).unwrap().size;
    assert_eq!(fs.copy_range(a, 0, b, end, 10).unwrap(), 10);
    fs.set_user_flags(b, extents, true).unwrap();

    fs.unmount().unwrap();
    e2fsck_clean(&image.path).unwrap();
}

use e4_fs::{Filesystem, OpenOptions};
use e4_testkit::{e2fsck_clean, make_image, PROFILES};

#[test]
fn smoke() {
    let src = std::path::Path::new("/tmp/smoke/src");
    for profile in PROFILES
        .iter()
        .filter(|p| !p.name.starts_with("ext2") && !p.name.starts_with("ext3"))
    {
        let img = make_image(src, profile, 16, 0);
        let fs = Filesystem::open(&img.path, OpenOptions::writable()).unwrap();
        let ino = fs.resolve("/f", true).unwrap();
        let data: Vec<u8> = (0..300_000u32).map(|i| (i * 7) as u8).collect();
        assert_eq!(fs.write_at(ino, 5000, &data).unwrap(), data.len());
        fs.write_at(ino, 10 << 20, b"far").unwrap();
        fs.truncate(ino, 200_000).unwrap();
        fs.sync().unwrap();
        let mut back = vec![0u8; 195_000];
        fs.read_at(ino, 5000, &mut back).unwrap();
        assert_eq!(&back[..], &data[..195_000]);
        fs.unmount().unwrap();
        e2fsck_clean(&img.path).unwrap_or_else(|e| panic!("{}: {e}", profile.name));
        let fs = Filesystem::open(&img.path, OpenOptions::default()).unwrap();
        let inode = fs.read_inode(ino).unwrap();
        assert_eq!(inode.size(), 200_000);
        fs.read_at(ino, 5000, &mut back).unwrap();
        assert_eq!(&back[..], &data[..195_000], "{}", profile.name);
    }
}

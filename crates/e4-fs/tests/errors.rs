//! What the engine's errors say: damage is reported as damage, with the errno the kernel's
//! ext4 would answer, never as a full filesystem.

use e4_fs::{Creator, Error, Filesystem, OpenOptions};
use e4_testkit::{e2fsck_clean, make_empty_image, RawImage};

const CREATOR: Creator = Creator {
    permissions: 0o644,
    uid: 0,
    gid: 0,
    umask: 0,
};

/// A block bitmap that shows one of the group's own metadata blocks (the bitmap block
/// itself) as free is damage: a write that needs a block from that group fails with
/// `BitmapUnusable` (EUCLEAN), not `NoSpace`, nothing is written over the metadata, and
/// e2fsck finds exactly the damage it found before.
#[test]
fn a_bitmap_that_frees_metadata_is_damage_not_a_full_filesystem() {
    // One group, no checksums: the bitmap is read as it is and checked against the system
    // zone (a checksum would catch the edit first, which is the other unusable case).
    let img = make_empty_image(&["-t", "ext4", "-b", "4096", "-O", "^metadata_csum"], 8);
    // The file exists first (an inode needs no block): the failing write is then the
    // only operation on the damaged image.
    let fs = Filesystem::open(&img.path, OpenOptions::writable()).unwrap();
    let ino = fs.create(2, b"f", CREATOR).unwrap();
    fs.unmount().unwrap();
    let raw = RawImage::read(&img.path).unwrap();
    let bitmap_block = raw.group_descriptor(0).unwrap().block_bitmap();
    let offset = bitmap_block * raw.block_size() as u64;
    let mut bytes = std::fs::read(&img.path).unwrap();
    let bit = bitmap_block as usize; // group 0 starts at block 0 with 4 KiB blocks
    bytes[offset as usize + bit / 8] &= !(1 << (bit % 8));
    std::fs::write(&img.path, &bytes).unwrap();
    let damage = e2fsck_clean(&img.path).expect_err("e2fsck must see the cleared bit");

    let fs = Filesystem::open(&img.path, OpenOptions::writable()).unwrap();
    let written = fs.write_at(ino, 0, &[7u8; 65536]);
    match written {
        Err(e @ Error::BitmapUnusable { .. }) => {
            assert_eq!(e.errno(), rustix::io::Errno::UCLEAN.raw_os_error(), "{e}")
        }
        other => panic!("expected the bitmap to be reported unusable, got {other:?}"),
    }
    drop(fs);
    let after = std::fs::read(&img.path).unwrap();
    let bs = raw.block_size();
    let range = offset as usize..offset as usize + bs;
    assert_eq!(
        after[range.clone()],
        bytes[range],
        "the bitmap block was written over"
    );
    assert_eq!(
        e2fsck_clean(&img.path).unwrap_err(),
        damage,
        "e2fsck sees new damage"
    );
}

/// Each kind of error a caller meets answers the errno the kernel gives for it.
#[test]
fn errors_carry_the_kernels_errno() {
    use rustix::io::Errno;
    let cases = [
        (Error::NotFound("x".into()), Errno::NOENT),
        (Error::Exists("x".into()), Errno::EXIST),
        (Error::NotEmpty("x".into()), Errno::NOTEMPTY),
        (Error::NoSpace(e4_fs::Shortage::Inodes), Errno::NOSPC),
        (Error::NotPermitted("x".into()), Errno::PERM),
        (Error::ReadOnly("x".into()), Errno::ROFS),
        (Error::Internal("x".into()), Errno::IO),
        (
            Error::Format(e4_format::FormatError::Incompatible("x".into())),
            Errno::OPNOTSUPP,
        ),
    ];
    for (error, errno) in cases {
        assert_eq!(error.errno(), errno.raw_os_error(), "{error}");
    }
    let io = Error::Io {
        context: "read".into(),
        source: std::io::Error::from_raw_os_error(Errno::NXIO.raw_os_error()),
    };
    assert_eq!(io.errno(), Errno::NXIO.raw_os_error());
}

//! `Filesystem::reserve_data` and `DataReservation::fill`: blocks chosen before their data is
//! written (how `e4 mkfs -d` fills a reproducible image on every core). A fill puts the data
//! where a read finds it, holes stay holes, a file truncated since its reservation refuses
//! the fill (so no fill writes into blocks another file took), and blocks a fill did not
//! reach read as zeros, never as what the disk held before: the reservation zeroes them
//! before the commit that maps them, so a crash before the fill shows zeros too. Images end `e2fsck -fn` clean.

// A slice of one byte range is what `reserve_data` takes for a file that is all data.
#![allow(clippy::single_range_in_vec_init)]

use e4_fs::device::MemoryDevice;
use e4_fs::{Creator, Error, Filesystem, OpenOptions};
use e4_testkit::{e2fsck_clean, make_empty_image};

const ROOT: u32 = 2;
const BLOCK: u64 = 4096;

fn creator() -> Creator {
    Creator {
        permissions: 0o644,
        uid: 0,
        gid: 0,
        umask: 0,
    }
}

/// What a removed file left on the free blocks: a byte [`pattern`] never gives.
const OLD: u8 = 0xfe;

/// The byte a test file holds at `offset` (1 to 251).
fn pattern(offset: u64) -> u8 {
    (offset % 251) as u8 + 1
}

fn pattern_reader(offset: u64, buf: &mut [u8]) -> Result<(), Error> {
    for (i, b) in buf.iter_mut().enumerate() {
        *b = pattern(offset + i as u64);
    }
    Ok(())
}

fn contents(fs: &Filesystem, ino: u32) -> Vec<u8> {
    let size = fs.metadata(ino).unwrap().size;
    let mut buf = vec![0; size as usize];
    assert_eq!(fs.read_at(ino, 0, &mut buf).unwrap(), buf.len());
    buf
}

#[test]
fn a_fill_puts_the_data_in_the_reserved_blocks_and_holes_stay_holes() {
    // Extents, and block pointers with indirect blocks (ext3).
    for kind in ["ext4", "ext3"] {
        let image = make_empty_image(&["-t", kind, "-b", "4096"], 32);
        let fs = Filesystem::open(&image.path, OpenOptions::writable()).unwrap();
        let mut buf = Vec::new();
        // Data at 0..10,000 and from 200,000 to the end (past 12 blocks: an indirect
        // block under ext3); the blocks between are a hole.
        let size = 5 << 20;
        let file = fs.create(ROOT, b"sparse", creator()).unwrap();
        let reservation = fs
            .reserve_data(file, size, &[0..10_000, 200_000..size])
            .unwrap();
        let written = reservation.fill(&mut buf, pattern_reader).unwrap();
        assert_eq!(
            written,
            3 * BLOCK + (size - 200_000 / BLOCK * BLOCK),
            "{kind}"
        );
        let got = contents(&fs, file);
        for (offset, &byte) in got.iter().enumerate() {
            let offset = offset as u64;
            let in_data = !(3 * BLOCK..200_000 / BLOCK * BLOCK).contains(&offset);
            let want = if in_data { pattern(offset) } else { 0 };
            assert_eq!(byte, want, "{kind}: byte {offset}");
        }
        let meta = fs.metadata(file).unwrap();
        assert_eq!(meta.size, size);
        // The hole owns no blocks: 3 + the blocks from 48 on, and ext3's mapping blocks.
        let data_blocks = 3 + (size / BLOCK - 48);
        assert!(
            meta.blocks * 512 >= data_blocks * BLOCK
                && meta.blocks * 512 <= (data_blocks + 4) * BLOCK,
            "{kind}: {} sectors for {data_blocks} data blocks",
            meta.blocks
        );
        // A small file and an empty one.
        let small = fs.create(ROOT, b"small", creator()).unwrap();
        let reservation = fs.reserve_data(small, 100, &[0..100]).unwrap();
        assert_eq!(reservation.fill(&mut buf, pattern_reader).unwrap(), 100);
        assert_eq!(
            contents(&fs, small),
            (0..100).map(pattern).collect::<Vec<_>>()
        );
        let empty = fs.create(ROOT, b"empty", creator()).unwrap();
        let reservation = fs.reserve_data(empty, 0, &[]).unwrap();
        assert_eq!(reservation.fill(&mut buf, pattern_reader).unwrap(), 0);
        // Only an empty file takes a reservation; regions must ascend within the size.
        assert!(matches!(
            fs.reserve_data(small, 100, &[0..100]),
            Err(Error::Invalid(_))
        ));
        let other = fs.create(ROOT, b"other", creator()).unwrap();
        assert!(matches!(
            fs.reserve_data(other, 100, &[0..200]),
            Err(Error::Invalid(_))
        ));
        assert!(matches!(
            fs.reserve_data(other, 100, &[50..60, 0..10]),
            Err(Error::Invalid(_))
        ));
        fs.unmount().unwrap();
        e2fsck_clean(&image.path).unwrap_or_else(|e| panic!("{kind}: {e}"));
    }
}

#[test]
fn a_fill_never_writes_blocks_its_file_gave_up() {
    let image = make_empty_image(&["-t", "ext4", "-b", "4096"], 32);
    let fs = Filesystem::open(&image.path, OpenOptions::writable()).unwrap();
    let mut buf = Vec::new();
    let file = fs.create(ROOT, b"given-up", creator()).unwrap();
    let reservation = fs.reserve_data(file, 64 * BLOCK, &[0..64 * BLOCK]).unwrap();
    // The file lets its blocks go, and another file takes them.
    fs.truncate(file, 0).unwrap();
    fs.sync().unwrap();
    let taker = fs.create(ROOT, b"taker", creator()).unwrap();
    let theirs = vec![0x5a; (64 * BLOCK) as usize];
    fs.write_at(taker, 0, &theirs).unwrap();
    assert!(matches!(
        reservation.fill(&mut buf, pattern_reader),
        Err(Error::Invalid(_))
    ));
    assert_eq!(contents(&fs, taker), theirs);
    // Removed, and its number reused: the new file's blocks are not the reservation's.
    let removed = fs.create(ROOT, b"removed", creator()).unwrap();
    let reservation = fs
        .reserve_data(removed, 8 * BLOCK, &[0..8 * BLOCK])
        .unwrap();
    fs.unlink(ROOT, b"removed").unwrap();
    fs.sync().unwrap();
    let reused = fs.create(ROOT, b"reused", creator()).unwrap();
    let theirs = vec![0xa5; (8 * BLOCK) as usize];
    fs.write_at(reused, 0, &theirs).unwrap();
    assert!(reservation.fill(&mut buf, pattern_reader).is_err());
    assert_eq!(contents(&fs, reused), theirs);
    fs.unmount().unwrap();
    e2fsck_clean(&image.path).unwrap();
}

/// Also with [`OpenOptions::skip_zeroing_holes`], which skips the zeroing where the image
/// file is a hole: the removed file's blocks were written since the open, so they are
/// zeroed still.
#[test]
fn blocks_a_fill_did_not_reach_read_as_zeros() {
    for skip_zeroing_holes in [false, true] {
        let options = OpenOptions {
            skip_zeroing_holes,
            ..OpenOptions::writable()
        };
        unreached_blocks_read_as_zeros(options);
    }
}

/// A file written and removed in one session, then, with
/// [`OpenOptions::skip_zeroing_holes`] on, a reservation dropped unfilled in the next: the
/// blocks it got hold the old bytes on disk (data, not holes, at the open), and read as
/// zeros.
#[test]
fn skipping_holes_still_zeroes_what_was_data_at_the_open() {
    let image = make_empty_image(&["-t", "ext4", "-b", "4096"], 32);
    let fs = Filesystem::open(&image.path, OpenOptions::writable()).unwrap();
    let old = fs.create(ROOT, b"old", creator()).unwrap();
    fs.write_at(old, 0, &vec![OLD; 4 << 20]).unwrap();
    fs.unlink(ROOT, b"old").unwrap();
    fs.unmount().unwrap();
    let options = OpenOptions {
        skip_zeroing_holes: true,
        ..OpenOptions::writable()
    };
    let fs = Filesystem::open(&image.path, options).unwrap();
    let size = 4 << 20;
    let dropped = fs.create(ROOT, b"dropped", creator()).unwrap();
    drop(fs.reserve_data(dropped, size, &[0..size]).unwrap());
    assert!(
        !contents(&fs, dropped).contains(&OLD),
        "a reserved file shows what the disk held before the open"
    );
    fs.unmount().unwrap();
    e2fsck_clean(&image.path).unwrap();
}

fn unreached_blocks_read_as_zeros(options: OpenOptions) {
    let image = make_empty_image(&["-t", "ext4", "-b", "4096"], 32);
    let fs = Filesystem::open(&image.path, options).unwrap();
    let mut buf = Vec::new();
    // Old contents on the free blocks: a file written and removed (a byte no pattern has).
    let old = fs.create(ROOT, b"old", creator()).unwrap();
    fs.write_at(old, 0, &vec![OLD; 4 << 20]).unwrap();
    fs.unlink(ROOT, b"old").unwrap();
    fs.sync().unwrap();
    let size = 4 << 20;
    // A read that fails after the first MiB, and a reservation dropped unfilled.
    let failed = fs.create(ROOT, b"failed", creator()).unwrap();
    let reservation = fs.reserve_data(failed, size, &[0..size]).unwrap();
    let result = reservation.fill(&mut buf, |offset, buf: &mut [u8]| {
        if offset >= 1 << 20 {
            return Err(Error::Invalid("the source failed".into()));
        }
        pattern_reader(offset, buf)
    });
    assert!(result.is_err());
    let dropped = fs.create(ROOT, b"dropped", creator()).unwrap();
    drop(fs.reserve_data(dropped, size, &[0..size]).unwrap());
    // A crash between a reservation and its fill: the image as committed, recovered.
    let pending = fs.create(ROOT, b"pending", creator()).unwrap();
    let reservation = fs.reserve_data(pending, size, &[0..size]).unwrap();
    fs.sync().unwrap();
    let crashed = std::sync::Arc::new(MemoryDevice::new(std::fs::read(&image.path).unwrap()));
    let crashed = Filesystem::open_device(crashed, OpenOptions::default()).unwrap();
    assert!(
        !contents(&crashed, pending).contains(&OLD),
        "a reserved file shows what the disk held before, after a crash"
    );
    drop(crashed);
    drop(reservation);
    for ino in [failed, dropped, pending] {
        let got = contents(&fs, ino);
        assert!(
            !got.contains(&OLD),
            "inode {ino} shows what the disk held before"
        );
    }
    fs.unmount().unwrap();
    e2fsck_clean(&image.path).unwrap();
}

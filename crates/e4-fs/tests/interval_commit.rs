//! Interval commits: an idle filesystem with changes is committed by the commit thread
//! (seen through a second, read-only open of the image and `e2fsck -fn`), a zero interval
//! never commits on its own, the commit thread commits a busy filesystem on time without
//! holding its operations, and the end-of-operation check adds no lock and no shared write.

use std::time::Duration;

use e4_fs::{Creator, Filesystem, OpenOptions};
use e4_testkit::{e2fsck_clean, make_empty_image};

const ROOT: u32 = 2;
const ME: Creator = Creator {
    permissions: 0o644,
    uid: 0,
    gid: 0,
    umask: 0,
};

fn with_interval(interval: Duration) -> OpenOptions {
    OpenOptions {
        commit_interval: interval,
        ..OpenOptions::writable()
    }
}

/// What the image at `path` holds on disk at `/name`, if anything: a copy of its bytes,
/// opened in memory (a second open of the file is refused while the writer has it).
fn read_back(path: &std::path::Path, name: &str) -> Option<Vec<u8>> {
    let bytes = std::fs::read(path).unwrap();
    let fs = Filesystem::open_bytes(bytes, OpenOptions::default()).unwrap();
    let ino = fs.resolve(name, true).ok()?;
    Some(fs.read_file(ino, 1 << 30).unwrap())
}

/// Creates `/f` with 300 KiB in it (blocks allocated, an inode and a directory changed).
fn write_file(fs: &Filesystem) -> Vec<u8> {
    let data: Vec<u8> = (0..300 * 1024u32).map(|i| (i % 251) as u8).collect();
    let ino = fs.create(ROOT, b"f", ME).unwrap();
    fs.write_at(ino, 0, &data).unwrap();
    data
}

#[test]
fn an_idle_filesystem_with_changes_commits_within_the_interval() {
    let img = make_empty_image(&["-t", "ext4"], 32);
    // Intervals are long enough that a loaded machine still writes the file well within one.
    let fs = Filesystem::open(&img.path, with_interval(Duration::from_secs(1))).unwrap();
    let data = write_file(&fs);
    assert_eq!(
        read_back(&img.path, "/f"),
        None,
        "committed before the interval"
    );
    assert_eq!(fs.lock_stats().commits, 0);
    // No operation from here on: only the commit thread's timer can commit.
    let started = std::time::Instant::now();
    while fs.lock_stats().commits == 0 {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "no commit in 20 s"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    assert!(started.elapsed() >= Duration::from_millis(500));
    assert_eq!(read_back(&img.path, "/f"), Some(data.clone()));
    // Metadata too: bitmaps, counts, directory and inode are consistent on disk while the
    // writer still holds the image.
    e2fsck_clean(&img.path).unwrap();
    // A change right after that commit, well inside the next interval, then idle again: the
    // timer, rearmed by the commit, commits it.
    let ino = fs.resolve("/f", true).unwrap();
    fs.write_at(ino, 0, b"more").unwrap();
    assert_eq!(fs.lock_stats().commits, 1);
    std::thread::sleep(Duration::from_millis(2500));
    assert_eq!(fs.lock_stats().commits, 2);
    let mut expected = data;
    expected[..4].copy_from_slice(b"more");
    assert_eq!(read_back(&img.path, "/f"), Some(expected));
    // Idle without changes: nothing more to commit.
    std::thread::sleep(Duration::from_millis(2000));
    assert_eq!(fs.lock_stats().commits, 2);
    drop(fs);
    e2fsck_clean(&img.path).unwrap();
}

#[test]
fn a_zero_interval_never_commits_on_its_own() {
    let img = make_empty_image(&["-t", "ext4"], 32);
    let fs = Filesystem::open(&img.path, with_interval(Duration::ZERO)).unwrap();
    let data = write_file(&fs);
    std::thread::sleep(Duration::from_millis(1500));
    let ino = fs.resolve("/f", true).unwrap();
    fs.write_at(ino, 0, b"more").unwrap();
    assert_eq!(fs.lock_stats().commits, 0);
    assert_eq!(read_back(&img.path, "/f"), None);
    fs.sync().unwrap();
    let mut expected = data;
    expected[..4].copy_from_slice(b"more");
    assert_eq!(read_back(&img.path, "/f"), Some(expected));
    drop(fs);
    e2fsck_clean(&img.path).unwrap();
}

/// A busy filesystem: operations go on through the interval (one every 10 ms), and the
/// commit thread commits what they did on time; none of them makes the commit or waits for
/// it (that time would be counted).
#[test]
fn the_commit_thread_commits_a_busy_filesystem_on_time() {
    let img = make_empty_image(&["-t", "ext4"], 32);
    let fs = Filesystem::open(&img.path, with_interval(Duration::from_millis(500))).unwrap();
    let data = write_file(&fs);
    let dir = fs.mkdir(ROOT, b"d", ME).unwrap();
    let started = std::time::Instant::now();
    let mut n = 0u32;
    while fs.lock_stats().commits == 0 {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "no commit 30 s into a 0.5 s interval"
        );
        fs.create(dir, format!("f{n}").as_bytes(), ME).unwrap();
        n += 1;
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(
        fs.lock_stats().commit_wait_nanos,
        0,
        "an operation made or waited for the interval's commit"
    );
    assert_eq!(read_back(&img.path, "/f"), Some(data));
    fs.unmount().unwrap();
    e2fsck_clean(&img.path).unwrap();
}

#[test]
fn the_interval_check_takes_no_lock_and_writes_nothing_shared() {
    // The same operations on copies of one image (same hash seed, so the same directory
    // layout) with the interval off and with one that never passes: the same lock
    // acquisitions and shared-atomic writes.
    let original = make_empty_image(&["-t", "ext4"], 32);
    let stats = |interval| {
        let copy = original.path.with_extension("copy");
        std::fs::copy(&original.path, &copy).unwrap();
        let fs = Filesystem::open(&copy, with_interval(interval)).unwrap();
        let dir = fs.mkdir(ROOT, b"d", ME).unwrap();
        for i in 0..200 {
            let ino = fs.create(dir, format!("f{i}").as_bytes(), ME).unwrap();
            fs.write_at(ino, 0, &[i as u8; 5000]).unwrap();
        }
        let report = fs.lock_stats();
        fs.unmount().unwrap();
        e2fsck_clean(&copy).unwrap();
        std::fs::remove_file(&copy).unwrap();
        report
    };
    assert_eq!(stats(Duration::ZERO), stats(Duration::from_secs(3600)));
}

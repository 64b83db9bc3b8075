//! fsync: a file's changes are on disk when it returns (seen through a second, read-only
//! open of the image, and e2fsck), an fsync with nothing new to write commits nothing, and
//! threads that fsync at once share commits.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use e4_fs::device::MemoryDevice;
use e4_fs::{Creator, Filesystem, OpenOptions};
use e4_testkit::{e2fsck_clean, make_empty_image};

const ROOT: u32 = 2;
const ME: Creator = Creator {
    permissions: 0o644,
    uid: 0,
    gid: 0,
    umask: 0,
};

/// No interval commits: only fsync (and the commit threshold) write anything back.
fn no_interval() -> OpenOptions {
    OpenOptions {
        commit_interval: Duration::ZERO,
        ..OpenOptions::writable()
    }
}

/// Files `/f0`, `/f1`, ..., one per thread, made and committed before the threads start.
fn one_file_per_thread(fs: &Filesystem, threads: usize) -> Vec<u32> {
    let inos = (0..threads)
        .map(|t| fs.create(ROOT, format!("f{t}").as_bytes(), ME).unwrap())
        .collect();
    fs.sync().unwrap();
    inos
}

/// What the image at `path` holds on disk at `/name`, if anything: a copy of its bytes,
/// opened in memory (a second open of the file is refused while the writer has it).
fn read_back(path: &std::path::Path, name: &str) -> Option<Vec<u8>> {
    let bytes = std::fs::read(path).unwrap();
    let fs = Filesystem::open_bytes(bytes, OpenOptions::default()).unwrap();
    let ino = fs.resolve(name, true).ok()?;
    Some(fs.read_file(ino, 1 << 30).unwrap())
}

#[test]
fn fsync_writes_the_file_back_and_commits_nothing_when_nothing_changed() {
    let img = make_empty_image(&["-t", "ext4"], 32);
    let fs = Filesystem::open(&img.path, no_interval()).unwrap();
    let ino = fs.create(ROOT, b"f", ME).unwrap();
    let data: Vec<u8> = (0..100 * 1024u32).map(|i| (i % 253) as u8).collect();
    fs.write_at(ino, 0, &data).unwrap();
    assert_eq!(
        read_back(&img.path, "/f"),
        None,
        "written back before the fsync"
    );
    fs.fsync(ino).unwrap();
    assert_eq!(fs.lock_stats().commits, 1);
    assert_eq!(read_back(&img.path, "/f"), Some(data.clone()));
    e2fsck_clean(&img.path).unwrap();

    // Nothing changed since: no commit. Another file's change is not this file's.
    fs.fsync(ino).unwrap();
    let other = fs.create(ROOT, b"g", ME).unwrap();
    fs.fsync(ino).unwrap();
    assert_eq!(fs.lock_stats().commits, 1, "a clean file's fsync committed");
    fs.fsync(other).unwrap();
    assert_eq!(fs.lock_stats().commits, 2);
    assert_eq!(read_back(&img.path, "/g"), Some(Vec::new()));

    // A change through another path than a write (a rename's ctime, a truncate) counts.
    fs.truncate(ino, 10).unwrap();
    fs.fsync(ino).unwrap();
    assert_eq!(fs.lock_stats().commits, 3);
    assert_eq!(read_back(&img.path, "/f"), Some(data[..10].to_vec()));

    assert!(fs.fsync(0).is_err(), "inode 0 accepted");
    fs.unmount().unwrap();
    e2fsck_clean(&img.path).unwrap();
}

#[test]
fn threads_that_fsync_at_once_share_commits() {
    let img = make_empty_image(&["-t", "ext4"], 64);
    let fs = Filesystem::open(&img.path, no_interval()).unwrap();
    let threads = 8;
    let rounds = 40;
    let inos = one_file_per_thread(&fs, threads);
    let before = fs.lock_stats().commits;
    // Each round, every thread writes, then every thread fsyncs: the first fsync's commit
    // takes all eight files' changes, and the other seven find theirs written (or wait
    // for that commit and then find them written).
    let written = std::sync::Barrier::new(threads);
    std::thread::scope(|s| {
        for (t, &ino) in inos.iter().enumerate() {
            let (fs, written) = (&fs, &written);
            s.spawn(move || {
                for round in 0..rounds {
                    let block = vec![(t * rounds + round) as u8; 4096];
                    fs.write_at(ino, (round * 4096) as u64, &block).unwrap();
                    written.wait();
                    fs.fsync(ino).unwrap();
                    written.wait();
                }
            });
        }
    });
    let commits = fs.lock_stats().commits - before;
    let fsyncs = (threads * rounds) as u64;
    // One commit per fsync would be `fsyncs`, one per round `rounds`. A thread may still
    // commit an empty transaction when a commit starts between its two reads in `fsync`,
    // so the bound is loose; without sharing, every fsync commits.
    assert!(
        commits <= fsyncs / 2,
        "{commits} commits for {fsyncs} fsyncs"
    );
    for t in 0..threads {
        let back = read_back(&img.path, &format!("/f{t}")).unwrap();
        assert_eq!(back.len(), rounds * 4096, "file {t} on disk");
        for round in 0..rounds {
            assert!(back[round * 4096..(round + 1) * 4096]
                .iter()
                .all(|&b| b == (t * rounds + round) as u8));
        }
    }
    fs.unmount().unwrap();
    e2fsck_clean(&img.path).unwrap();
}

/// Many more fsyncing threads than CPUs: most of them sleep while another commits, and each
/// commit's end must wake them (a sleeper nobody wakes hangs the storm, which the watchdog
/// turns into a failure), and one commit must answer many of them.
#[test]
fn an_fsync_storm_wakes_every_sleeper_and_shares_commits() {
    let img = make_empty_image(&["-t", "ext4"], 64);
    let fs = Arc::new(Filesystem::open(&img.path, no_interval()).unwrap());
    let threads = 64;
    let rounds = 8;
    let inos = one_file_per_thread(&fs, threads);
    let before = fs.lock_stats().commits;
    let (done, finished) = std::sync::mpsc::channel();
    let workers: Vec<_> = inos
        .iter()
        .enumerate()
        .map(|(t, &ino)| {
            let (fs, done) = (Arc::clone(&fs), done.clone());
            std::thread::spawn(move || {
                for round in 0..rounds {
                    let block = vec![(t * rounds + round) as u8; 4096];
                    fs.write_at(ino, (round * 4096) as u64, &block).unwrap();
                    fs.fsync(ino).unwrap();
                }
                done.send(()).unwrap();
            })
        })
        .collect();
    for _ in 0..threads {
        finished
            .recv_timeout(Duration::from_secs(120))
            .expect("an fsync never returned: a commit's end did not wake its waiters");
    }
    for worker in workers {
        worker.join().unwrap();
    }
    let commits = fs.lock_stats().commits - before;
    let fsyncs = (threads * rounds) as u64;
    assert!(
        commits <= fsyncs / 2,
        "{commits} commits for {fsyncs} fsyncs"
    );
    for (t, &ino) in inos.iter().enumerate() {
        let back = read_back(&img.path, &format!("/f{t}")).unwrap();
        assert_eq!(back.len(), rounds * 4096, "file {t} (inode {ino}) on disk");
    }
    Arc::into_inner(fs).unwrap().unmount().unwrap();
    e2fsck_clean(&img.path).unwrap();
}

/// Every fsync, however many threads wait on each other's commits, returns only once the
/// file's data and size are in the image as of the last flush.
#[test]
fn every_fsync_returns_with_its_file_durable() {
    let img = make_empty_image(&["-t", "ext4"], 16);
    // The image as of the last flush: what a crash would leave.
    let durable = Arc::new(Mutex::new(Arc::new(Vec::new())));
    let kept = Arc::clone(&durable);
    let device = Arc::new(MemoryDevice::watching_flushes(
        std::fs::read(&img.path).unwrap(),
        move |image| *kept.lock().unwrap() = Arc::new(image.to_vec()),
    ));
    let fs = Filesystem::open_device(device.clone(), no_interval()).unwrap();
    let threads = 6;
    let rounds = 25;
    let inos: Vec<u32> = (0..threads)
        .map(|t| fs.create(ROOT, format!("f{t}").as_bytes(), ME).unwrap())
        .collect();
    std::thread::scope(|s| {
        for (t, &ino) in inos.iter().enumerate() {
            let (fs, durable) = (&fs, &durable);
            s.spawn(move || {
                for round in 0..rounds {
                    let fill = (t * rounds + round) as u8;
                    fs.write_at(ino, (round * 4096) as u64, &[fill; 4096])
                        .unwrap();
                    fs.fsync(ino).unwrap();
                    let durable = durable.lock().unwrap().clone();
                    let crashed = Filesystem::open_device(
                        Arc::new(MemoryDevice::new(durable.to_vec())),
                        OpenOptions::default(),
                    )
                    .unwrap();
                    let on_disk = crashed.resolve(&format!("/f{t}"), true).unwrap();
                    let data = crashed.read_file(on_disk, 1 << 20).unwrap();
                    assert!(
                        data.len() >= (round + 1) * 4096,
                        "thread {t}, round {round}: {} bytes durable",
                        data.len()
                    );
                    assert!(data[round * 4096..(round + 1) * 4096]
                        .iter()
                        .all(|&b| b == fill));
                }
            });
        }
    });
    fs.unmount().unwrap();
    std::fs::write(&img.path, device.bytes()).unwrap();
    e2fsck_clean(&img.path).unwrap();
}

//! A commit writes while the next transaction's operations go on (the commit gate is closed
//! only while it gathers what to write). What it writes must still be exactly its own
//! transaction, so that the image as of each commit's flush is consistent: a device keeps a
//! copy of the image at every flush, and `e2fsck -fn` checks the copies.

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use e4_fs::device::{Device, MemoryDevice};
use e4_fs::{Creator, Filesystem, OpenOptions};
use e4_testkit::{e2fsck_clean, make_empty_image};

const ROOT: u32 = 2;
const FILE: Creator = Creator {
    permissions: 0o644,
    uid: 0,
    gid: 0,
};
const DIR: Creator = Creator {
    permissions: 0o755,
    uid: 0,
    gid: 0,
};

/// A memory device whose writes take 50 µs (as a disk's do, against memory), so that a
/// commit's write-out overlaps many of the next transaction's operations.
struct SlowWrites(MemoryDevice);

impl Device for SlowWrites {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.0.read_exact_at(buf, offset)
    }
    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        std::thread::sleep(Duration::from_micros(50));
        self.0.write_all_at(buf, offset)
    }
    fn flush(&self) -> io::Result<()> {
        self.0.flush()
    }
    fn size(&self) -> u64 {
        self.0.size()
    }
}

#[test]
fn the_image_at_every_commit_is_consistent_while_operations_go_on() {
    let img = make_empty_image(&["-t", "ext4"], 64);
    // The image at every flush.
    let copies = Arc::new(Mutex::new(Vec::new()));
    let kept = Arc::clone(&copies);
    let device = Arc::new(SlowWrites(MemoryDevice::watching_flushes(
        std::fs::read(&img.path).unwrap(),
        move |image| kept.lock().unwrap().push(image.to_vec()),
    )));
    let options = OpenOptions {
        commit_interval: Duration::ZERO,
        ..OpenOptions::writable()
    };
    let fs = Filesystem::open_device(device, options).unwrap();
    let workers_done = AtomicBool::new(false);
    std::thread::scope(|s| {
        let (fs, workers_done) = (&fs, &workers_done);
        // Commits, back to back, while the workers change directories, inode tables,
        // bitmaps and extent trees that every commit has just gathered.
        let committer = s.spawn(move || {
            while !workers_done.load(Ordering::Acquire) {
                fs.sync().unwrap();
                std::thread::sleep(Duration::from_millis(10));
            }
        });
        let workers: Vec<_> = (0..2)
            .map(|t| {
                s.spawn(move || {
                    let dir = fs.mkdir(ROOT, format!("d{t}").as_bytes(), DIR).unwrap();
                    let data = vec![t as u8 + 1; 6000];
                    for i in 0..2500u32 {
                        let ino = fs.create(dir, format!("f{i}").as_bytes(), FILE).unwrap();
                        fs.write_at(ino, 0, &data[..(i as usize % 6000) + 1])
                            .unwrap();
                        if i % 3 == 2 {
                            fs.unlink(dir, format!("f{}", i - 1).as_bytes()).unwrap();
                        }
                        if i % 500 == 499 {
                            let sub = format!("s{i}");
                            fs.mkdir(dir, sub.as_bytes(), DIR).unwrap();
                        }
                    }
                })
            })
            .collect();
        for w in workers {
            w.join().unwrap();
        }
        workers_done.store(true, Ordering::Release);
        committer.join().unwrap();
    });
    fs.unmount().unwrap();
    let copies = std::mem::take(&mut *copies.lock().unwrap());
    assert!(copies.len() >= 4, "only {} flushes", copies.len());
    let dir = tempfile::tempdir().unwrap();
    // Every copy when there are few; otherwise 12 spread over the run, the last included.
    let step = copies.len().div_ceil(12);
    for (n, copy) in copies.iter().enumerate().rev().step_by(step) {
        let path = dir.path().join(format!("flush-{n}.img"));
        std::fs::write(&path, copy).unwrap();
        if let Err(e) = e2fsck_clean(&path) {
            panic!("the image at flush {n} of {}: {e}", copies.len());
        }
    }
}

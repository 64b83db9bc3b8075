//! The journal, against recoveries e4 did not write: e4 logs every commit, and the image a
//! crash leaves right after a commit (the device as of its last flush) is brought back to
//! that commit by e4 (in place, and read-only in memory), by `e2fsck -E journal_only`, and
//! by the kernel's mount — all to the same tree, e2fsck-clean; e4's replay equals e2fsck's
//! block for block outside the superblock and the journal. A clean unmount leaves the log
//! empty and `needs_recovery` clear. Each journal format e4 writes is covered: checksums v3
//! with 64-bit tags (mke2fs's ext4 default), no checksums with 32-bit tags, and ext3.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use e4_format::features::IncompatFeatures;
use e4_format::inode::JOURNAL_INO;
use e4_format::journal::JournalSuperblock;
use e4_format::superblock::Superblock;
use e4_fs::device::MemoryDevice;
use e4_fs::{Creator, FileType, Filesystem, OpenOptions, RenameMode};
use e4_testkit::{e2fsck_clean, make_empty_image, KernelMount, RawImage};

const ROOT: u32 = 2;
const FILE: Creator = Creator {
    permissions: 0o644,
    uid: 0,
    gid: 0,
    umask: 0,
};
const DIR: Creator = Creator {
    permissions: 0o755,
    uid: 0,
    gid: 0,
    umask: 0,
};

/// The journal formats: mke2fs arguments and what the log must use.
const FORMATS: &[(&str, &[&str])] = &[
    ("ext4, checksums v3, 64-bit tags", &["-t", "ext4"]),
    (
        "ext4 without metadata_csum or 64bit",
        &["-t", "ext4", "-O", "^metadata_csum,^64bit"],
    ),
    ("ext3, 1 KiB blocks", &["-t", "ext3", "-b", "1024"]),
];

fn no_interval() -> OpenOptions {
    OpenOptions {
        commit_interval: Duration::ZERO,
        ..OpenOptions::writable()
    }
}

fn superblock(image: &[u8]) -> Superblock {
    Superblock::decode(image[1024..2048].try_into().unwrap())
}

fn journal_superblock(path: &Path) -> JournalSuperblock {
    let raw = RawImage::read(path).unwrap();
    let block0 = raw.file_block(JOURNAL_INO, 0).unwrap().unwrap();
    JournalSuperblock::decode_checked(raw.block(block0).unwrap()).unwrap()
}

/// Every path with its type and contents (files) or target (symlinks).
fn tree(fs: &Filesystem) -> BTreeMap<String, (FileType, Vec<u8>)> {
    let mut out = BTreeMap::new();
    let mut dirs = vec![("".to_string(), ROOT)];
    while let Some((path, ino)) = dirs.pop() {
        for entry in fs.read_dir(ino).unwrap() {
            if entry.name == b"." || entry.name == b".." {
                continue;
            }
            let name = format!("{path}/{}", String::from_utf8_lossy(&entry.name));
            let inode = fs.read_inode(entry.ino).unwrap();
            let file_type = inode.file_type().unwrap();
            let bytes = match file_type {
                FileType::Directory => {
                    dirs.push((name.clone(), entry.ino));
                    Vec::new()
                }
                FileType::Regular => fs.read_file(entry.ino, 1 << 24).unwrap(),
                FileType::Symlink => fs.read_link(entry.ino).unwrap(),
                _ => Vec::new(),
            };
            out.insert(name, (file_type, bytes));
        }
    }
    out
}

fn tree_of_image(image: &[u8]) -> BTreeMap<String, (FileType, Vec<u8>)> {
    tree(&Filesystem::open_bytes(image.to_vec(), OpenOptions::default()).unwrap())
}

/// Changes of every kind, then a sync; returns the image as of the sync's last flush (what
/// a crash right after it leaves) and the filesystem, still open.
fn crash_after_sync(mke2fs: &[&str]) -> (Vec<u8>, Filesystem, Arc<MemoryDevice>) {
    let img = make_empty_image(mke2fs, 32);
    let durable = Arc::new(Mutex::new(Vec::new()));
    let kept = Arc::clone(&durable);
    let device = Arc::new(MemoryDevice::watching_flushes(
        std::fs::read(&img.path).unwrap(),
        move |image| *kept.lock().unwrap() = image.to_vec(),
    ));
    let fs = Filesystem::open_device(device.clone(), no_interval()).unwrap();
    let dir = fs.mkdir(ROOT, b"dir", DIR).unwrap();
    for i in 0..300u32 {
        let ino = fs
            .create(dir, format!("file-{i:03}").as_bytes(), FILE)
            .unwrap();
        fs.write_at(ino, 0, &vec![i as u8; 100 + i as usize * 37])
            .unwrap();
    }
    fs.symlink(ROOT, b"link", b"dir/file-007", FILE).unwrap();
    let big = fs.create(ROOT, b"big", FILE).unwrap();
    fs.write_at(big, 0, &vec![0xB1; 3 << 20]).unwrap();
    fs.sync().unwrap();
    for i in (0..300u32).step_by(3) {
        fs.unlink(dir, format!("file-{i:03}").as_bytes()).unwrap();
    }
    fs.rename(dir, b"file-001", ROOT, b"moved", RenameMode::Replace)
        .unwrap();
    fs.truncate(big, 1 << 20).unwrap();
    fs.sync().unwrap();
    let image = durable.lock().unwrap().clone();
    (image, fs, device)
}

fn e2fsck_journal_only(path: &Path) {
    let out = Command::new(e4_testkit::tool("e2fsck"))
        .args(["-fy", "-E", "journal_only"])
        .arg(path)
        .output()
        .unwrap();
    assert!(
        out.status.code().unwrap_or(8) < 4,
        "e2fsck -E journal_only: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn a_clean_unmount_leaves_the_log_empty_and_needs_recovery_clear() {
    for (what, mke2fs) in FORMATS {
        let img = make_empty_image(mke2fs, 32);
        let fs = Filesystem::open(&img.path, no_interval()).unwrap();
        for i in 0..50u32 {
            let ino = fs.create(ROOT, format!("f{i}").as_bytes(), FILE).unwrap();
            fs.write_at(ino, 0, b"journaled").unwrap();
            fs.sync().unwrap();
        }
        let stats = fs.journal_stats().expect("a journal");
        assert!(stats.commits >= 50, "{what}: {stats:?}");
        assert!(stats.log_blocks > stats.commits * 2, "{what}: {stats:?}");
        assert_eq!(stats.unjournaled, 0, "{what}");
        fs.unmount().unwrap();
        let bytes = std::fs::read(&img.path).unwrap();
        assert!(
            !superblock(&bytes)
                .incompat()
                .contains(IncompatFeatures::RECOVER),
            "{what}"
        );
        let jsb = journal_superblock(&img.path);
        assert_eq!(jsb.start, 0, "{what}: the log is empty");
        assert!(jsb.sequence > 50, "{what}: tids went on ({})", jsb.sequence);
        e2fsck_clean(&img.path).unwrap();
    }
}

#[test]
fn a_crash_after_a_commit_recovers_to_it_in_e4_e2fsck_and_the_kernel() {
    for (what, mke2fs) in FORMATS {
        let (crashed, fs, _device) = crash_after_sync(mke2fs);
        let expected = tree(&fs);
        drop(fs);
        assert!(
            superblock(&crashed)
                .incompat()
                .contains(IncompatFeatures::RECOVER),
            "{what}: the crashed image needs recovery"
        );
        let dir = tempfile::tempdir().unwrap();
        let path = |name: &str| dir.path().join(name);
        std::fs::write(path("crashed"), &crashed).unwrap();
        assert_ne!(journal_superblock(&path("crashed")).start, 0, "{what}");

        // e4, read-only: the committed tree, in memory; the image untouched.
        let reader = Filesystem::open_bytes(crashed.clone(), OpenOptions::default()).unwrap();
        assert!(
            reader
                .journal_note()
                .unwrap()
                .contains("replayed in memory"),
            "{what}"
        );
        assert_eq!(tree(&reader), expected, "{what}: read-only view");
        drop(reader);

        // e2fsck's replay.
        std::fs::write(path("e2fsck"), &crashed).unwrap();
        e2fsck_journal_only(&path("e2fsck"));
        e2fsck_clean(&path("e2fsck")).unwrap();
        let by_e2fsck = std::fs::read(path("e2fsck")).unwrap();
        assert_eq!(
            tree_of_image(&by_e2fsck),
            expected,
            "{what}: e2fsck's replay"
        );

        // e4's replay, in place.
        std::fs::write(path("e4"), &crashed).unwrap();
        let fs = Filesystem::open(path("e4"), no_interval()).unwrap();
        assert!(
            fs.journal_note().unwrap().starts_with("recovered"),
            "{what}"
        );
        fs.unmount().unwrap();
        e2fsck_clean(&path("e4")).unwrap();
        let by_e4 = std::fs::read(path("e4")).unwrap();
        assert_eq!(tree_of_image(&by_e4), expected, "{what}: e4's replay");
        assert_same_outside_superblock_and_journal(&by_e4, &by_e2fsck, &path("e4"), what);

        // The kernel's replay, where loop mounts work.
        std::fs::write(path("kernel"), &crashed).unwrap();
        if let Ok(mount) = KernelMount::mount_writable(&path("kernel")) {
            drop(mount);
            e2fsck_clean(&path("kernel")).unwrap();
            let by_kernel = std::fs::read(path("kernel")).unwrap();
            assert_eq!(
                tree_of_image(&by_kernel),
                expected,
                "{what}: the kernel's replay"
            );
        }
    }
}

/// Every block but the primary superblock's and the journal's is equal.
fn assert_same_outside_superblock_and_journal(a: &[u8], b: &[u8], image: &Path, what: &str) {
    let sb = superblock(a);
    let block_size = sb.block_size() as usize;
    let raw = RawImage::read(image).unwrap();
    let journal_blocks = u64::from(journal_superblock(image).maxlen);
    let journal: std::collections::BTreeSet<u64> = (0..journal_blocks)
        .map(|i| raw.file_block(JOURNAL_INO, i).unwrap().unwrap())
        .collect();
    let superblock_block = 1024 / block_size as u64;
    let differing: Vec<u64> = (0..a.len() / block_size)
        .map(|b| b as u64)
        .filter(|b| *b != superblock_block && !journal.contains(b))
        .filter(|&nr| {
            let r = nr as usize * block_size..(nr as usize + 1) * block_size;
            a[r.clone()] != b[r]
        })
        .collect();
    assert!(
        differing.is_empty(),
        "{what}: e4's replay and e2fsck's differ in blocks {differing:?}"
    );
}

/// Operations that leave many dirty inodes and blocks commit before their transaction
/// outgrows the log: on a small journal (4,096 1 KiB blocks for 32 MiB), two rounds of
/// thousands of creates and unlinks without a sync never need a commit written around the
/// journal. Committing in the operations' threads, where the threshold alone decides
/// (more than two commits before the unmount), and on the commit thread, which lets a
/// transaction grow to what one may log while it catches up.
#[test]
fn every_transaction_fits_the_log() {
    for commit_thread in [false, true] {
        for (what, mke2fs) in FORMATS {
            let img = make_empty_image(mke2fs, 32);
            let options = OpenOptions {
                commit_thread,
                ..no_interval()
            };
            let fs = Filesystem::open(&img.path, options).unwrap();
            let dir = fs.mkdir(ROOT, b"d", DIR).unwrap();
            for round in 0..2 {
                for i in 0..7500u32 {
                    fs.create(dir, format!("{i:05}").as_bytes(), FILE).unwrap();
                }
                for i in (round..7500u32).step_by(1 + round as usize) {
                    fs.unlink(dir, format!("{i:05}").as_bytes()).unwrap();
                }
            }
            let stats = fs.journal_stats().unwrap();
            fs.unmount().unwrap();
            let least = if commit_thread { 1 } else { 3 };
            assert!(
                stats.commits >= least,
                "{what}, thread {commit_thread}: {stats:?}"
            );
            assert_eq!(
                stats.unjournaled, 0,
                "{what}, thread {commit_thread}: {stats:?}"
            );
            e2fsck_clean(&img.path).unwrap();
        }
    }
}

/// A log that cannot be replayed (the first block of the live log damaged, so its checksum
/// fails before a commit that is not stale): a reader gets the image as it is on disk with
/// a warning saying so; a writer is refused and the image left as it was.
#[test]
fn a_log_that_cannot_be_replayed_is_read_as_it_is_and_never_written() {
    let (mut crashed, fs, _device) = crash_after_sync(&["-t", "ext4"]);
    drop(fs);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("crashed");
    std::fs::write(&path, &crashed).unwrap();
    let start = u64::from(journal_superblock(&path).start);
    let raw = RawImage::read(&path).unwrap();
    let block_size = raw.superblock().block_size() as usize;
    let first = raw.file_block(JOURNAL_INO, start).unwrap().unwrap() as usize;
    crashed[first * block_size + 100] ^= 0xFF;
    std::fs::write(&path, &crashed).unwrap();

    let reader = Filesystem::open_bytes(crashed.clone(), OpenOptions::default()).unwrap();
    assert!(
        reader
            .warnings()
            .iter()
            .any(|w| w.contains("cannot be replayed")),
        "{:?}",
        reader.warnings()
    );
    assert!(reader.journal_note().is_none());
    drop(reader);
    assert!(Filesystem::open(&path, no_interval()).is_err());
    assert_eq!(
        std::fs::read(&path).unwrap(),
        crashed,
        "the image is untouched"
    );
}

/// A journal with an empty log that recorded an error (`s_errno`: the kernel aborted it):
/// a writable open moves the error to the superblock (errors, not clean), clears the
/// journal's, and refuses to write in one line; the next open writes, and the next tid is
/// past the journal's.
#[test]
fn an_aborted_journal_passes_its_error_to_the_superblock() {
    use e4_format::MetadataBlock;
    let img = make_empty_image(&["-t", "ext4"], 32);
    let raw = RawImage::read(&img.path).unwrap();
    let block_size = u64::from(raw.superblock().block_size());
    let at = raw.file_block(JOURNAL_INO, 0).unwrap().unwrap() * block_size;
    let mut bytes = std::fs::read(&img.path).unwrap();
    let block0 = &mut bytes[at as usize..(at + block_size) as usize];
    let mut jsb = JournalSuperblock::decode_checked(block0).unwrap();
    let sequence = jsb.sequence;
    jsb.errno = (-5i32) as u32;
    let mut encoded = [0u8; JournalSuperblock::SIZE];
    jsb.encode(&mut encoded);
    block0[..JournalSuperblock::SIZE].copy_from_slice(&encoded);
    JournalSuperblock::seal(block0, ());
    std::fs::write(&img.path, &bytes).unwrap();

    let refused = Filesystem::open(&img.path, no_interval()).err().unwrap();
    assert!(
        refused.to_string().contains("recorded error -5"),
        "{refused}"
    );
    let after = std::fs::read(&img.path).unwrap();
    assert_eq!(superblock(&after).state & 0x3, 0x2, "errors, not clean");
    let jsb = journal_superblock(&img.path);
    assert_eq!((jsb.errno, jsb.start), (0, 0));
    assert!(jsb.sequence > sequence);

    let fs = Filesystem::open(&img.path, no_interval()).unwrap();
    fs.create(ROOT, b"after", FILE).unwrap();
    fs.unmount().unwrap();
}

//! Journal recovery on damaged logs. A few base images whose jbd2 log needs recovery are
//! made once, at the first run: by debugfs's journal commands (`jo`, `jw`, `jc`: logged
//! copies of real metadata blocks, revoke records, three journal formats, checksums v3 or
//! none) and by e4 itself (the image a crash right after a commit leaves). The input picks
//! a base (its first byte) and is then a list of patches to its journal: a logical journal
//! block (one byte, so the first 256 blocks, where the logs are), an offset in it (two
//! bytes), a length of 1 to 4 (the low bits of a byte) and that many bytes. The patched
//! image is opened read-only (recovery in memory, checksums off) and walked, opened
//! writable (recovery in place), written a little and unmounted, and what is left is
//! checked by `e4_fsck::check`. Every result may be an error; none may panic or hang.
//! Seed with `scripts/fuzz-seed-journal.sh` (one input per base, no patches).
#![no_main]

use std::io::Write;
use std::path::Path;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use e4_fs::device::MemoryDevice;
use e4_fs::{Creator, FileType, Filesystem, OpenOptions, RenameMode};
use e4_testkit::{debugfs_script, make_empty_image, RawImage};
use libfuzzer_sys::fuzz_target;

const ROOT: u32 = 2;
const CREATOR: Creator = Creator {
    permissions: 0o755,
    uid: 0,
    gid: 0,
    umask: 0o022,
};

/// An image whose log needs recovery, and where its journal's first blocks are.
struct Base {
    bytes: Vec<u8>,
    block_size: usize,
    /// Byte offsets in the image of the journal's first (up to 256) logical blocks.
    journal_blocks: Vec<u64>,
}

/// Logs copies of real metadata blocks (their own contents) in three transactions: the
/// first with the group descriptors, the root directory's block and inode table block, both
/// bitmaps, an xattr block and an extent tree's leaf; the second another directory block
/// and revoke records; the third nothing but revokes. `jo_args` may ask for checksums v3.
fn debugfs_base(mke2fs: &[&str], jo_args: &str) -> Vec<u8> {
    let img = make_empty_image(mke2fs, 2);
    let dir = img.path.parent().unwrap();
    let file = dir.join("f");
    std::fs::write(&file, vec![b'x'; 40_000]).unwrap();
    let value = dir.join("v");
    std::fs::write(&value, vec![b'v'; 300]).unwrap();
    // `frag` keeps every other block of its first 32: more extents than its inode holds.
    let punches: String = (1..32)
        .step_by(2)
        .map(|b| format!("punch frag {b} {b}\n"))
        .collect();
    let (file, value) = (file.display(), value.display());
    debugfs_script(
        &img.path,
        &format!("mkdir d\nwrite {file} d/f\nwrite {file} g\nea_set g user.a 1234\nea_set -f {value} g user.big\nwrite {file} frag\n{punches}"),
    );
    let raw = RawImage::read(&img.path).unwrap();
    let bs = raw.block_size() as u64;
    let root_dir = raw.file_block(ROOT, 0).unwrap().unwrap();
    let root_inode = raw.inode_offset(ROOT).unwrap() / bs;
    let gd = raw.group_descriptor(0).unwrap();
    let descriptors = u64::from(raw.superblock().first_data_block) + 1;
    let xattr_block = raw.inode(e4_ino(&img.path, "g")).unwrap().file_acl();
    let stat = debugfs_script(&img.path, "stat frag\n");
    // The extent tree's leaf, or (block maps) the indirect block.
    let leaf: u64 = ["(ETB0):", "(IND):"]
        .iter()
        .find_map(|tag| stat.split(tag).nth(1))
        .and_then(|s| s.split([',', '\n']).next())
        .unwrap()
        .parse()
        .unwrap();
    let d_dir = raw.file_block(e4_ino(&img.path, "d"), 0).unwrap().unwrap();
    let copy = |blocks: &[u64], name: &str| {
        let path = dir.join(name);
        let mut out = Vec::new();
        for &b in blocks {
            out.extend_from_slice(raw.block(b).unwrap());
        }
        std::fs::write(&path, out).unwrap();
        let list: Vec<String> = blocks.iter().map(u64::to_string).collect();
        format!("-b {} {}", list.join(","), path.display())
    };
    let t1 = copy(
        &[
            descriptors,
            root_dir,
            root_inode,
            gd.block_bitmap(),
            gd.inode_bitmap(),
            xattr_block,
            leaf,
        ],
        "t1",
    );
    let t2 = copy(&[d_dir], "t2");
    let bitmap = gd.block_bitmap();
    debugfs_script(
        &img.path,
        &format!(
            "jo {jo_args}\njw {t1}\njc\njo\njw {t2} -r {bitmap}\njc\njo\njw -r {root_inode} /dev/null\njc\n"
        ),
    );
    std::fs::read(&img.path).unwrap()
}

fn e4_ino(image: &Path, path: &str) -> u32 {
    let fs = Filesystem::open(image, OpenOptions::default()).unwrap();
    fs.resolve(path, false).unwrap()
}

/// The image as of e4's last flush after a few changes and a sync: a crash right after a
/// commit, whose log recovery replays.
fn e4_base(mke2fs: &[&str]) -> Vec<u8> {
    let img = make_empty_image(mke2fs, 2);
    let durable = Arc::new(Mutex::new(Vec::new()));
    let kept = Arc::clone(&durable);
    let device = Arc::new(MemoryDevice::watching_flushes(
        std::fs::read(&img.path).unwrap(),
        move |image| *kept.lock().unwrap() = image.to_vec(),
    ));
    let options = OpenOptions {
        commit_interval: Duration::ZERO,
        commit_thread: false,
        ..OpenOptions::writable()
    };
    let fs = Filesystem::open_device(device, options).unwrap();
    let dir = fs.mkdir(ROOT, b"dir", CREATOR).unwrap();
    for i in 0..20u32 {
        let ino = fs
            .create(dir, format!("file-{i:02}").as_bytes(), CREATOR)
            .unwrap();
        fs.write_at(ino, 0, &vec![i as u8; 100 + i as usize * 300])
            .unwrap();
    }
    fs.set_xattr(dir, b"user.x", b"value", Default::default())
        .unwrap();
    fs.sync().unwrap();
    fs.unlink(dir, b"file-03").unwrap();
    fs.truncate(fs.lookup(dir, b"file-07").unwrap().unwrap(), 10)
        .unwrap();
    fs.sync().unwrap();
    let image = durable.lock().unwrap().clone();
    drop(fs);
    image
}

fn bases() -> &'static [Base] {
    static BASES: OnceLock<Vec<Base>> = OnceLock::new();
    BASES.get_or_init(|| {
        // Small 1 KiB-block images, with and without metadata checksums and 64-bit tags.
        const EXT4: &[&str] = &["-t", "ext4", "-b", "1024", "-N", "64"];
        const EXT4_PLAIN: &[&str] = &[
            "-t",
            "ext4",
            "-b",
            "1024",
            "-N",
            "64",
            "-O",
            "^metadata_csum,^64bit",
        ];
        const EXT3: &[&str] = &["-t", "ext3", "-b", "1024", "-N", "64"];
        let images = vec![
            debugfs_base(EXT4, "-c"),
            debugfs_base(EXT4_PLAIN, ""),
            debugfs_base(EXT3, ""),
            debugfs_base(EXT4, ""),
            e4_base(EXT4),
            e4_base(EXT4_PLAIN),
        ];
        images
            .into_iter()
            .map(|bytes| {
                let fs = Filesystem::open_bytes(bytes.clone(), OpenOptions::default()).unwrap();
                let on_disk = fs.journal_on_disk().unwrap().unwrap();
                assert!(
                    on_disk.recovery.transactions() > 0,
                    "a base image's log needs recovery"
                );
                let block_size = fs.block_size() as usize;
                let journal = &on_disk.journal;
                let journal_blocks = (0..256u32.min(journal.layout().blocks() as u32))
                    .map(|b| journal.physical(b).unwrap() * block_size as u64)
                    .collect();
                Base {
                    bytes,
                    block_size,
                    journal_blocks,
                }
            })
            .collect()
    })
}

/// A few changes of every kind in the root and the directories it holds, on whatever the
/// replay left: creates, writes, an xattr, a link, a rename, removals and truncates.
fn write_a_little(fs: &Filesystem) {
    let mut dirs = vec![ROOT];
    let mut files = Vec::new();
    if let Ok(entries) = fs.read_dir(ROOT) {
        for entry in entries
            .into_iter()
            .filter(|e| e.name != b"." && e.name != b"..")
            .take(16)
        {
            match fs.read_inode(entry.ino).map(|i| i.file_type()) {
                Ok(Some(FileType::Directory)) => dirs.push(entry.ino),
                Ok(_) => files.push((ROOT, entry.name)),
                Err(_) => {}
            }
        }
    }
    for &dir in &dirs {
        if let Ok(ino) = fs.create(dir, b"new", CREATOR) {
            let _ = fs.write_at(ino, 0, &[7; 3000]);
            let _ = fs.write_at(ino, 20 << 10, &[8; 1500]);
            let _ = fs.set_xattr(ino, b"user.new", &[9; 200], Default::default());
            let _ = fs.link(ino, dir, b"new-link");
        }
        let _ = fs.mkdir(dir, b"newdir", CREATOR);
        let _ = fs.symlink(dir, b"newlink", b"some/where", CREATOR);
        if let Ok(entries) = fs.read_dir(dir) {
            for entry in entries
                .into_iter()
                .filter(|e| e.name != b"." && e.name != b"..")
                .take(8)
            {
                if dir != ROOT {
                    files.push((dir, entry.name));
                }
            }
        }
    }
    for (i, (dir, name)) in files.into_iter().enumerate() {
        match i % 4 {
            0 => {
                let _ = fs.unlink(dir, &name);
            }
            1 => {
                let _ = fs.rename(dir, &name, ROOT, b"renamed", RenameMode::Replace);
            }
            2 => {
                if let Ok(Some(ino)) = fs.lookup(dir, &name) {
                    let _ = fs.truncate(ino, 1);
                    let _ = fs.set_xattr(ino, b"user.a", b"changed", Default::default());
                }
            }
            _ => {
                let _ = fs.rmdir(dir, &name);
            }
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&which, mut patches)) = data.split_first() else {
        return;
    };
    let bases = bases();
    let base = &bases[which as usize % bases.len()];
    let mut image = base.bytes.clone();
    // At most 64 patches.
    for _ in 0..64 {
        let [block, lo, hi, kind, rest @ ..] = patches else {
            break;
        };
        let len = (*kind as usize & 3) + 1;
        let bytes = &rest[..len.min(rest.len())];
        patches = &rest[bytes.len()..];
        let block = base.journal_blocks[*block as usize % base.journal_blocks.len()] as usize;
        let at = block + (u16::from_le_bytes([*lo, *hi]) as usize % base.block_size);
        let end = (at + bytes.len()).min(block + base.block_size);
        image[at..end].copy_from_slice(&bytes[..end - at]);
    }
    let read_only = OpenOptions {
        verify_checksums: false,
        cache_bytes: 1 << 20,
        ..OpenOptions::default()
    };
    if let Ok(fs) = Filesystem::open_bytes(image.clone(), read_only) {
        let _ = fs.journal_on_disk();
        e4_testkit::walk_everything(&fs);
    }
    let device = Arc::new(MemoryDevice::new(image.clone()));
    let writable = OpenOptions {
        cache_bytes: 1 << 20,
        commit_interval: Duration::ZERO,
        commit_thread: false,
        ..OpenOptions::writable()
    };
    if let Ok(fs) = Filesystem::open_device(device.clone(), writable) {
        write_a_little(&fs);
        if fs.unmount().is_ok() {
            image = device.bytes();
        }
    }
    let mut file = tempfile::NamedTempFile::new().unwrap();
    file.write_all(&image).unwrap();
    let options = e4_fsck::Options {
        threads: Some(1),
        force: true,
        ..e4_fsck::Options::default()
    };
    if let Ok(report) = e4_fsck::check(file.path(), &options) {
        let _ = report.exit_code();
    }
});

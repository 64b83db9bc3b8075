//! Untrusted allocator input (issue 22, item 2): a group whose bitmap disagrees with its
//! descriptor is refused, never allocated from, and said once (`take_new_warnings`); a
//! healthy image made by mke2fs has no such group in any profile, however much is loaded.

use std::process::Command;

use e4_fs::{Creator, Error, Filesystem, Mapping, OpenOptions, Shortage};
use e4_testkit::{debugfs_script, e2fsck_clean, e2fsck_problems, make_empty_image, PROFILES};

/// ext4's root directory.
const ROOT_DIR: u32 = 2;

const CREATOR: Creator = Creator {
    permissions: 0o644,
    uid: 0,
    gid: 0,
    umask: 0,
};

/// Every group of every profile loaded (inodes claimed until none is left, then blocks
/// written until none is left): no group is refused. BLOCK_UNINIT and INODE_UNINIT groups
/// are computed, so this also checks that e4's idea of a group's metadata matches the
/// counts mke2fs wrote. Planted bug: a system zone that misses the reserved GDT blocks
/// (or counts another group's metadata) refuses healthy groups here.
#[test]
fn a_healthy_image_has_no_corrupt_group_in_any_profile() {
    for profile in PROFILES {
        let mut args = profile.mke2fs_args.to_vec();
        args.extend(["-g", "2048", "-N", "600"]);
        let image = make_empty_image(&args, 24);
        let fs = Filesystem::open(&image.path, OpenOptions::writable()).unwrap();
        let mut files = Vec::new();
        loop {
            match fs.create(2, format!("f{}", files.len()).as_bytes(), CREATOR) {
                Ok(ino) => files.push(ino),
                Err(Error::NoSpace(_)) => break,
                Err(e) => panic!("{}: {e}", profile.name),
            }
        }
        let chunk = vec![0x5Au8; 1 << 20];
        let mut offset = 0u64;
        loop {
            match fs.write_at(files[0], offset, &chunk) {
                Ok(n) if n > 0 => offset += n as u64,
                Ok(_) | Err(Error::NoSpace(Shortage::Blocks)) => break,
                Err(e) => panic!("{}: {e}", profile.name),
            }
        }
        assert!(offset > 16 << 20, "{}: only {offset} bytes", profile.name);
        assert_eq!(
            fs.take_new_warnings(),
            Vec::<String>::new(),
            "{}",
            profile.name
        );
        fs.unmount().unwrap();
        e2fsck_clean(&image.path).unwrap_or_else(|e| panic!("{}: {e}", profile.name));
    }
}

/// Eight threads fill an image of 8 groups whose group 5 descriptor counts 40 more free
/// blocks than its bitmap has (debugfs `set_bg`): no file gets a block of group 5, every
/// file reads back what was written, the group is said once, and `e2fsck -fn` reports what
/// it reported before (the superblock keeps the disagreement it had). Planted bug:
/// believing the bitmap (the old correction by the difference) gives group 5's blocks to
/// the files; summing the refused group's count into the superblock adds an e2fsck line.
#[test]
fn racing_writers_never_get_a_block_of_a_corrupt_group() {
    const CORRUPT: u64 = 5;
    let image = make_empty_image(&["-t", "ext4", "-b", "1024"], 64);
    let out = Command::new(e4_testkit::tool("debugfs"))
        .args(["-R", "stats"])
        .arg(&image.path)
        .output()
        .unwrap();
    let stats = String::from_utf8_lossy(&out.stdout).into_owned();
    let free: u64 = stats
        .lines()
        .skip_while(|l| !l.trim_start().starts_with(&format!("Group  {CORRUPT}:")))
        .find_map(|l| {
            let at = l.find(" free blocks")?;
            l[..at]
                .rsplit(|c: char| !c.is_ascii_digit())
                .next()?
                .parse()
                .ok()
        })
        .unwrap_or_else(|| panic!("no free count for group {CORRUPT} in {stats}"));
    // One session: the descriptor's count, then its checksum (metadata_csum).
    debugfs_script(
        &image.path,
        &format!(
            "set_bg {CORRUPT} free_blocks_count {}\nset_bg {CORRUPT} checksum calc\n",
            free + 40
        ),
    );
    let before = e2fsck_problems(&image.path);
    assert!(!before.is_empty(), "e2fsck must see the changed count");

    let fs = Filesystem::open(&image.path, OpenOptions::writable()).unwrap();
    let pattern = |t: usize, at: u64| (t as u64 * 31 + at / 4096) as u8;
    let files: Vec<(u32, u64)> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..8usize)
            .map(|t| {
                let fs = &fs;
                s.spawn(move || {
                    let ino = fs.create(2, format!("t{t}").as_bytes(), CREATOR).unwrap();
                    let mut at = 0u64;
                    loop {
                        // Each byte's value follows its place in the file, so a write
                        // that stops short part-way through a 4 KiB unit (1 KiB blocks)
                        // is continued with the same values.
                        let chunk: Vec<u8> = (0..16 * 4096).map(|k| pattern(t, at + k)).collect();
                        match fs.write_at(ino, at, &chunk) {
                            Ok(n) if n > 0 => at += n as u64,
                            Ok(_) | Err(Error::NoSpace(_)) => break,
                            Err(e) => panic!("thread {t}: {e}"),
                        }
                    }
                    (ino, at)
                })
            })
            .collect();
        workers.into_iter().map(|w| w.join().unwrap()).collect()
    });
    // 1 KiB blocks: group g holds blocks 1 + 8192 g onwards.
    let group_of = |b: u64| (b - 1) / 8192;
    for (t, &(ino, size)) in files.iter().enumerate() {
        let inode = fs.read_inode(ino).unwrap();
        let blocks = size.div_ceil(1024);
        let mut logical = 0;
        while logical < blocks {
            match fs.map_block(&inode, logical, blocks - logical).unwrap() {
                Mapping::Data { physical, len, .. } => {
                    for b in physical..physical + len {
                        assert_ne!(group_of(b), CORRUPT, "thread {t}'s file got block {b}");
                    }
                    logical += len;
                }
                Mapping::Hole { len } => logical += len,
            }
        }
        let data = fs.read_file(ino, size).unwrap();
        for (i, block) in data.chunks(4096).enumerate() {
            assert!(block.iter().all(|&b| b == pattern(t, i as u64 * 4096)));
        }
    }
    let warnings = fs.take_new_warnings();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(
        warnings[0].contains(&format!("group {CORRUPT}:")),
        "{warnings:?}"
    );
    fs.unmount().unwrap();
    assert_eq!(
        e2fsck_problems(&image.path),
        before,
        "e2fsck sees new damage"
    );
}

/// A group whose bitmap shows inodes in use past its `bg_itable_unused` (a descriptor that
/// lost count: e2fsck repairs it). A commit makes a table block of new inodes from zeros
/// instead of reading it, but only when the bitmap shows no other inode of it in use: a
/// new file whose inode shares a table block with such inodes must leave their records
/// as they were, and the commit, lowering `bg_itable_unused` over them, leaves the image
/// e2fsck-clean. Planted bug: trusting the descriptor's boundary alone (as the first cut
/// of the made blocks did) zeroes inode 21's record ("f9 has deleted/unused inode 21").
#[test]
fn inodes_in_use_past_itable_unused_keep_their_records_through_a_create() {
    // 1 KiB blocks, 256-byte inodes: four records a table block; 128 inodes a group.
    let image = make_empty_image(&["-t", "ext4", "-O", "^has_journal", "-N", "1024"], 64);
    let fs = Filesystem::open(&image.path, OpenOptions::writable()).unwrap();
    let files: Vec<u32> = (0..10)
        .map(|i| {
            fs.create(ROOT_DIR, format!("f{i}").as_bytes(), CREATOR)
                .unwrap()
        })
        .collect();
    fs.unmount().unwrap();
    assert_eq!(files, (12..22).collect::<Vec<_>>());
    // Inodes 1-16 inside the used part; 17-21 (f5-f9) past it, in use.
    debugfs_script(
        &image.path,
        "set_bg 0 itable_unused 112\nset_bg 0 checksum calc\n",
    );
    assert!(
        !e2fsck_problems(&image.path).is_empty(),
        "e2fsck must see the lowered count"
    );

    let fs = Filesystem::open(&image.path, OpenOptions::writable()).unwrap();
    // Inode 22: the table block of 21-24.
    assert_eq!(fs.create(ROOT_DIR, b"new", CREATOR).unwrap(), 22);
    fs.unmount().unwrap();
    e2fsck_clean(&image.path).unwrap();
    let fs = Filesystem::open(&image.path, OpenOptions::default()).unwrap();
    for (i, ino) in files.iter().enumerate() {
        assert_eq!(
            fs.lookup(ROOT_DIR, format!("f{i}").as_bytes()).unwrap(),
            Some(*ino)
        );
        assert_eq!(fs.read_inode(*ino).unwrap().links_count(), 1, "f{i}");
    }
}

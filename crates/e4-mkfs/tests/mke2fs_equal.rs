//! The oracle for e4 mkfs's geometry is mke2fs 1.47 itself: for each profile, both tools
//! make an image with the same UUID, hash seed and time (`E2FSPROGS_FAKE_TIME` for
//! mke2fs), and the images must be equal byte for byte, everywhere but each superblock
//! copy's `s_kbytes_written` (what mke2fs counts of its own writes) and the checksum
//! that covers it. That covers every field `dumpe2fs` prints (groups, bitmaps and inode
//! tables, flex_bg packing, reserved GDT blocks, backups, journal size and place, features,
//! mount options, hash algorithm) and everything it does not (inodes, directory blocks,
//! the resize inode's block lists, the journal superblock). Each e4 image must also pass
//! `e2fsck -fn`, and one is mounted by the kernel.

use std::fs::File;
use std::os::unix::io::AsRawFd;
use std::path::Path;
use std::process::Command;

use e4_mkfs::{make_filesystem_with, MkfsOptions, Profile, BUILT_IN_PROFILE};
use e4_testkit::{e2fsck_clean, KernelMount};

const UUID: &str = "01234567-89ab-cdef-0123-456789abcdef";
const HASH_SEED: &str = "11111111-2222-3333-4444-555555555555";
const TIME: i64 = 1_000_000_000;

/// Offsets inside a superblock copy that are allowed to differ: `s_kbytes_written`, and
/// `s_checksum`, which covers it.
const KBYTES_WRITTEN: std::ops::Range<usize> = 0x178..0x180;
const CHECKSUM: std::ops::Range<usize> = 0x3FC..0x400;

/// mke2fs's image for `args` (the profile given as MKE2FS_CONFIG, so both tools read the
/// same one), at `path`.
fn mke2fs(dir: &Path, path: &Path, size: &str, args: &[&str]) {
    let config = dir.join("mke2fs.conf");
    std::fs::write(&config, BUILT_IN_PROFILE).unwrap();
    let out = Command::new(e4_testkit::tool("mke2fs"))
        .env("E2FSPROGS_FAKE_TIME", TIME.to_string())
        .env("MKE2FS_CONFIG", &config)
        .args([
            "-q",
            "-F",
            "-U",
            UUID,
            "-E",
            &format!("hash_seed={HASH_SEED}"),
        ])
        .args(args)
        .arg(path)
        .arg(size)
        .output()
        .expect("mke2fs must be installed (e2fsprogs)");
    assert!(
        out.status.success(),
        "mke2fs {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The options `args` mean to mke2fs, for e4 mkfs (the few the profiles below use).
fn options(size: &str, args: &[&str]) -> MkfsOptions {
    let mut opts = MkfsOptions {
        size: Some(size.into()),
        uuid: Some(UUID.into()),
        extended: Some(format!("hash_seed={HASH_SEED}")),
        source_date_epoch: Some(TIME),
        ..Default::default()
    };
    for pair in args.chunks(2) {
        let value = pair[1].to_string();
        match pair[0] {
            "-t" => opts.fs_type = Some(value),
            "-T" => opts.usage_types = Some(value),
            "-O" => opts.features = Some(value),
            "-b" => opts.block_size = Some(value.parse().unwrap()),
            "-I" => opts.inode_size = Some(value.parse().unwrap()),
            "-N" => opts.inodes = Some(value.parse().unwrap()),
            "-m" => opts.reserved_percent = Some(value.parse().unwrap()),
            "-L" => opts.label = Some(value),
            "-J" => opts.journal = Some(value),
            "-e" => opts.errors_behavior = Some(value),
            "-G" => opts.flex_bg_size = Some(value.parse().unwrap()),
            "-g" => opts.blocks_per_group = Some(value.parse().unwrap()),
            "-M" => opts.last_mounted = Some(value),
            other => panic!("option {other} not mapped"),
        }
    }
    opts
}

/// Where `file` has data at or after `from` (`SEEK_DATA`), or `None` past the last.
fn next_data(file: &File, from: u64) -> Option<u64> {
    // SAFETY: lseek on an open descriptor has no memory effects.
    let at = unsafe { libc::lseek(file.as_raw_fd(), from as libc::off_t, libc::SEEK_DATA) };
    (at >= 0).then_some(at as u64)
}

/// Byte offsets where the two images differ outside the allowed superblock fields,
/// reading only where either file has data (both are sparse).
fn differences(
    a: &Path,
    b: &Path,
    block_size: u64,
    blocks_per_group: u64,
    first_data_block: u64,
) -> Vec<u64> {
    use std::os::unix::fs::FileExt;
    let (fa, fb) = (File::open(a).unwrap(), File::open(b).unwrap());
    let len = fa.metadata().unwrap().len();
    assert_eq!(len, fb.metadata().unwrap().len(), "image sizes differ");
    // A superblock copy: the primary at byte 1024, a backup at the start of a group.
    let allowed = |offset: u64| {
        let block = offset / block_size;
        let in_copy = if (1024..2048).contains(&offset) {
            Some(offset - 1024)
        } else if block >= first_data_block
            && (block - first_data_block) % blocks_per_group == 0
            && offset % block_size < 1024
        {
            Some(offset % block_size)
        } else {
            None
        };
        in_copy.is_some_and(|o| {
            KBYTES_WRITTEN.contains(&(o as usize)) || CHECKSUM.contains(&(o as usize))
        })
    };
    let mut out = Vec::new();
    let chunk = 1 << 20;
    let mut at = 0;
    while at < len {
        let next = match (next_data(&fa, at), next_data(&fb, at)) {
            (None, None) => break,
            (x, y) => x.unwrap_or(u64::MAX).min(y.unwrap_or(u64::MAX)),
        };
        let start = next / chunk * chunk;
        let n = chunk.min(len - start) as usize;
        let (mut ba, mut bb) = (vec![0u8; n], vec![0u8; n]);
        fa.read_exact_at(&mut ba, start).unwrap();
        fb.read_exact_at(&mut bb, start).unwrap();
        for i in 0..n {
            if ba[i] != bb[i] && !allowed(start + i as u64) {
                out.push(start + i as u64);
            }
        }
        at = start + n as u64;
    }
    out
}

fn le32(bytes: &[u8], at: usize) -> u64 {
    u64::from(u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap()))
}

/// Makes the image both ways and compares them; returns e4's image path.
fn check(dir: &Path, name: &str, size: &str, args: &[&str]) -> std::path::PathBuf {
    let theirs = dir.join(format!("{name}.mke2fs"));
    let ours = dir.join(format!("{name}.e4"));
    mke2fs(dir, &theirs, size, args);
    make_filesystem_with(&ours, &options(size, args), &Profile::built_in())
        .unwrap_or_else(|e| panic!("e4 mkfs {name}: {e}"));
    let mut sb = [0u8; 1024];
    std::os::unix::fs::FileExt::read_exact_at(&File::open(&theirs).unwrap(), &mut sb, 1024)
        .unwrap();
    let sb = &sb[..];
    let block_size = 1024 << le32(sb, 0x18);
    let diffs = differences(&theirs, &ours, block_size, le32(sb, 0x20), le32(sb, 0x14));
    assert!(
        diffs.is_empty(),
        "{name} ({size} {args:?}): {} bytes differ from mke2fs's, first at {:?} (block, offset)",
        diffs.len(),
        diffs
            .iter()
            .take(8)
            .map(|d| (d / block_size, d % block_size))
            .collect::<Vec<_>>()
    );
    e2fsck_clean(&ours).unwrap();
    ours
}

#[test]
fn empty_filesystems_equal_mke2fs_byte_for_byte() {
    let dir = tempfile::tempdir().unwrap();
    let mut cases: Vec<(&str, &str, &[&str])> = vec![
        // 1 KiB blocks ("small"), 8 groups, journal in the middle.
        ("ext4-small", "64M", &["-t", "ext4"]),
        // 37 groups of 1 KiB blocks: flex_bg packing spans three flex groups.
        ("ext4-300m", "300M", &["-t", "ext4", "-L", "e4-label"]),
        (
            "no-metadata-csum",
            "600M",
            &["-t", "ext4", "-b", "4096", "-O", "^metadata_csum"],
        ),
        (
            "no-64bit",
            "300M",
            &["-t", "ext4", "-b", "4096", "-O", "^64bit"],
        ),
        ("no-flex-bg", "300M", &["-t", "ext4", "-O", "^flex_bg"]),
        // lost+found starts inline, so it is a block smaller.
        ("inline-data", "64M", &["-t", "ext4", "-O", "inline_data"]),
        // A 200 MiB journal in 1 KiB blocks crossing groups with backups: more extents than
        // the inode holds, so an extent leaf block, placed just before the journal.
        (
            "journal-tree",
            "600M",
            &["-t", "ext4", "-b", "1024", "-J", "size=200"],
        ),
        (
            "csum-seed-news",
            "200M",
            &[
                "-t",
                "ext4",
                "-b",
                "4096",
                "-O",
                "metadata_csum_seed",
                "-T",
                "news",
            ],
        ),
        (
            "small-inodes",
            "100M",
            &["-t", "ext4", "-I", "128", "-N", "5000", "-m", "1"],
        ),
        // Block-mapped journal with indirect blocks between its data.
        ("ext3", "300M", &["-t", "ext3"]),
        (
            "ext3-4k",
            "600M",
            &["-t", "ext3", "-b", "4096", "-J", "size=40"],
        ),
        ("ext2", "300M", &["-t", "ext2"]),
        // -g, -G, -e, -M.
        (
            "groups-and-errors",
            "200M",
            &[
                "-t",
                "ext4",
                "-g",
                "4096",
                "-G",
                "4",
                "-e",
                "remount-ro",
                "-M",
                "/srv",
            ],
        ),
        // A last group too small for its tables is dropped.
        ("ext2-trimmed", "8195K", &["-t", "ext2"]),
        // Eight inodes a group: lost+found (11) is the second group's first directory.
        ("few-inodes", "100M", &["-t", "ext4", "-N", "100"]),
        ("few-inodes-ext3", "64M", &["-t", "ext3", "-N", "20"]),
        // Under 2048 blocks there is no journal, even one asked for.
        (
            "tiny-asking-a-journal",
            "1M",
            &["-t", "ext4", "-J", "size=4"],
        ),
    ];
    // Larger ones (seconds each): with E4_MKFS_LARGE=1.
    if std::env::var_os("E4_MKFS_LARGE").is_some_and(|v| v == "1") {
        // 4 KiB blocks, flex groups of 16 over 40 groups, 64 MiB journal mid-filesystem.
        cases.push(("ext4-5g", "5G", &["-t", "ext4"]));
        cases.push(("ext4-1g", "1G", &["-t", "ext4", "-O", "^64bit"]));
        cases.push(("ext4-20g", "20G", &["-t", "ext4"]));
        // The default 1 GiB journal: eight extents in a leaf block.
        cases.push(("ext4-200g", "200G", &["-t", "ext4"]));
    }
    for (name, size, args) in &cases {
        let started = std::time::Instant::now();
        check(dir.path(), name, size, args);
        eprintln!("{name}: {:?}", started.elapsed());
    }
}

#[test]
fn the_kernel_mounts_what_e4_mkfs_made() {
    let dir = tempfile::tempdir().unwrap();
    let cases: [(&str, &[&str]); 4] = [
        ("mount-ext4", &["-t", "ext4"]),
        ("mount-inline", &["-t", "ext4", "-O", "inline_data"]),
        ("mount-ext3", &["-t", "ext3"]),
        ("mount-ext2", &["-t", "ext2"]),
    ];
    for (name, args) in cases {
        let image = check(dir.path(), name, "64M", args);
        let Ok(mount) = KernelMount::mount(&image) else {
            return;
        };
        let names: Vec<String> = std::fs::read_dir(mount.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, vec!["lost+found".to_string()], "{name}");
    }
}

/// `dumpe2fs`'s report without the lines that differ by design (times, checksums, writes).
fn layout_report(image: &Path) -> String {
    let out = Command::new(e4_testkit::tool("dumpe2fs"))
        .arg(image)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| {
            ![
                "Lifetime writes",
                "Checksum:",
                "created",
                "time:",
                "checked",
            ]
            .iter()
            .any(|skip| l.contains(skip))
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// On a block device full of an earlier life's bytes (every byte 0xAA), e4 mkfs keeps the
/// device's size, zeroes what must read as zeros (without group checksums, every inode
/// table; always the journal), and makes the layout mke2fs makes on a fresh file of that
/// size; e2fsck and the kernel find it clean and empty.
#[test]
fn a_block_device_with_old_contents() {
    use e4_testkit::{kernel_comparison_skipped, LoopDevice};
    let dir = tempfile::tempdir().unwrap();
    for (name, args) in [
        ("device-ext4", &["-t", "ext4"][..]),
        ("device-ext2", &["-t", "ext2"]),
    ] {
        let backing = dir.path().join(format!("{name}.backing"));
        std::fs::write(&backing, vec![0xAAu8; 64 << 20]).unwrap();
        let device = match LoopDevice::attach(&backing) {
            Ok(device) => device,
            Err(reason) => return kernel_comparison_skipped(name, &reason),
        };
        let mut opts = options("64M", args);
        opts.size = None;
        make_filesystem_with(device.path(), &opts, &Profile::built_in())
            .unwrap_or_else(|e| panic!("e4 mkfs on {}: {e}", device.path().display()));
        e2fsck_clean(device.path()).unwrap();
        let fresh = dir.path().join(format!("{name}.mke2fs"));
        mke2fs(dir.path(), &fresh, "64M", args);
        assert_eq!(
            layout_report(&fresh),
            layout_report(device.path()),
            "{name}"
        );
        if args[1] == "ext4" {
            let journal = dir.path().join("journal");
            let out = Command::new(e4_testkit::tool("debugfs"))
                .arg("-R")
                .arg(format!("dump <8> {}", journal.display()))
                .arg(device.path())
                .output()
                .unwrap();
            assert!(out.status.success());
            let log = std::fs::read(&journal).unwrap();
            assert!(
                log[1024..].iter().all(|&b| b == 0),
                "{name}: the journal kept old bytes"
            );
        }
        let mount = device.mount("ro").unwrap();
        let names: Vec<_> = std::fs::read_dir(mount.path()).unwrap().collect();
        assert_eq!(names.len(), 1, "{name}: more than lost+found");
    }
}

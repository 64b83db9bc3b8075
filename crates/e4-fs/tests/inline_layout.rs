//! Inline data written by e4 is byte for byte what the kernel writes for the same changes
//! (issue 22, item 6; docs/INLINE-DATA.md). The same steps run through a read-write loop
//! mount of one image and through e4 on a copy: files written in one write with sizes around
//! the 60 bytes of `i_block` and the inode's inline capacity, files grown by appends across
//! both limits, overwritten inside, shrunk; directories from 0 entries to one past what fits
//! inline, thinned and emptied; symlinks around 60 bytes. Then every inode's raw record is
//! compared field by field: mode, size, link count, `i_blocks`, `i_flags`, `i_block`,
//! `i_file_acl`, `i_extra_isize`, the whole in-inode xattr area (the `system.data` entry
//! with its `e_value_offs`, `e_value_size` and `e_hash`, its value, what follows), and the
//! first block of what moved out of the inode.
//! Times, generation and checksum differ by nature (the checksum is checked by `e2fsck -fn`
//! on both images); inode numbers in directory entries are normalised, and of an extent
//! tree only the header and the first extent's logical range are compared, since the two
//! allocate differently. Without root or loop devices the comparison is skipped with the
//! reason printed.

use std::path::Path;

use e4_fs::{Creator, Filesystem, OpenOptions, XattrSet};
use e4_testkit::{e2fsck_clean, make_empty_image, KernelMount, RawImage};

const ROOT: u32 = 2;
const ME: Creator = Creator {
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
/// `EXT4_INLINE_DATA_FL`, `EXT4_EXTENTS_FL`.
const INLINE_FL: u32 = 0x1000_0000;
const EXTENTS_FL: u32 = 0x0008_0000;
/// Where `i_block` lies in the record, and its length.
const I_BLOCK: std::ops::Range<usize> = 40..100;
/// The bytes of a fast symlink's `i_block` past its target's NUL.
const PAST_TARGET: &str = "i_block past the target";
/// The in-inode xattr area starts after the 128-byte record and `i_extra_isize`.
const GOOD_OLD_INODE_SIZE: usize = 128;

/// File contents: `len` bytes no two files share at the same offset.
fn contents(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 7 + len) as u8 | 1).collect()
}

/// The inline capacity of an inode of `inode_size` bytes with the usual 32-byte extra
/// fields: 60 bytes of `i_block` plus what the xattr area leaves for `system.data`'s value
/// (its 4-byte header, the 20-byte entry, the 4-byte end marker).
fn capacity(inode_size: usize) -> usize {
    60 + inode_size - GOOD_OLD_INODE_SIZE - 32 - 4 - 20 - 4
}

fn file_sizes(inode_size: usize) -> Vec<usize> {
    let cap = capacity(inode_size);
    vec![0, 1, 59, 60, 61, 64, 100, cap - 1, cap, cap + 1]
}

/// Entry counts of the directories, from empty to one past what fits inline: entries of
/// [`ENTRY_SIZE`] bytes, 3 in `i_block` (56 bytes after the parent's number), the rest in
/// `system.data`'s value.
fn directory_entries(inode_size: usize) -> std::ops::RangeInclusive<usize> {
    let inline = 56 / ENTRY_SIZE + (capacity(inode_size) - 60) / ENTRY_SIZE;
    0..=inline + 1
}

/// The size of an entry named by [`entry_name`] below 100: 8 bytes of header, 5 of name,
/// rounded up to 4.
const ENTRY_SIZE: usize = 16;

fn entry_name(i: usize) -> String {
    format!("name{i}")
}

/// One change, made the same way through the kernel and through e4.
enum Step {
    /// Creates a file with these contents in one write (none for an empty file).
    Write(String, Vec<u8>),
    /// Appends to a file in one write.
    Append(String, Vec<u8>),
    /// Overwrites bytes inside a file.
    Overwrite(String, usize, Vec<u8>),
    /// Shrinks a file (through an open descriptor on the kernel's side: a growing truncate
    /// by path is what oopsed the kernel, and is not run here).
    Shrink(String, u64),
    Mkdir(String),
    Symlink(String, Vec<u8>),
    Unlink(String),
    /// Sets a `user.` attribute, which shares the in-inode area with `system.data`.
    SetXattr(String, String, Vec<u8>),
}

/// What each image holds after the steps, and the steps.
fn steps(inode_size: usize) -> (Vec<String>, Vec<Step>) {
    let cap = capacity(inode_size);
    let mut paths = Vec::new();
    let mut steps = Vec::new();
    for size in file_sizes(inode_size) {
        let path = format!("/f{size}");
        steps.push(Step::Write(path.clone(), contents(size)));
        paths.push(path);
    }
    // Grown by appends across i_block's end and up to the capacity.
    steps.push(Step::Write("/grown".into(), contents(10)));
    for len in [51, 1, 38, cap - 100] {
        steps.push(Step::Append("/grown".into(), contents(len)));
    }
    steps.push(Step::Write("/spilled".into(), contents(cap - 3)));
    steps.push(Step::Append("/spilled".into(), contents(10)));
    steps.push(Step::Write("/patched".into(), contents(cap - 8)));
    steps.push(Step::Overwrite("/patched".into(), 55, contents(20)));
    for (name, from, to) in [
        ("/cut_to_61", 100, 61),
        ("/cut_to_30", 100, 30),
        ("/cut_to_0", cap, 0),
    ] {
        steps.push(Step::Write(name.into(), contents(from)));
        steps.push(Step::Shrink(name.into(), to));
    }
    paths.extend(
        [
            "/grown",
            "/spilled",
            "/patched",
            "/cut_to_61",
            "/cut_to_30",
            "/cut_to_0",
        ]
        .map(String::from),
    );
    for n in directory_entries(inode_size) {
        let dir = format!("/d{n}");
        steps.push(Step::Mkdir(dir.clone()));
        for i in 0..n {
            steps.push(Step::Write(format!("{dir}/{}", entry_name(i)), Vec::new()));
        }
        paths.push(dir);
    }
    // Entries removed from i_block and from system.data; all removed.
    steps.push(Step::Mkdir("/thinned".into()));
    for i in 0..7 {
        steps.push(Step::Write(
            format!("/thinned/{}", entry_name(i)),
            Vec::new(),
        ));
    }
    for i in [0, 4, 6] {
        steps.push(Step::Unlink(format!("/thinned/{}", entry_name(i))));
    }
    steps.push(Step::Mkdir("/emptied".into()));
    for i in 0..5 {
        steps.push(Step::Write(
            format!("/emptied/{}", entry_name(i)),
            Vec::new(),
        ));
    }
    for i in 0..5 {
        steps.push(Step::Unlink(format!("/emptied/{}", entry_name(i))));
    }
    paths.extend(["/thinned", "/emptied"].map(String::from));
    // Other attributes in the inode: set before the first write (less room for the value),
    // after it (the value keeps its room), and on a directory before its entries.
    steps.push(Step::Write("/attr_first".into(), Vec::new()));
    steps.push(Step::SetXattr(
        "/attr_first".into(),
        "user.a".into(),
        contents(8),
    ));
    steps.push(Step::Append("/attr_first".into(), contents(cap - 40)));
    steps.push(Step::Write("/attr_after".into(), contents(30)));
    steps.push(Step::SetXattr(
        "/attr_after".into(),
        "user.b".into(),
        contents(16),
    ));
    steps.push(Step::Append("/attr_after".into(), contents(40)));
    // A value replaced by one of the same padded size, then by a longer one.
    steps.push(Step::SetXattr(
        "/attr_after".into(),
        "user.b".into(),
        contents(15),
    ));
    steps.push(Step::Write("/attr_resized".into(), contents(70)));
    steps.push(Step::SetXattr(
        "/attr_resized".into(),
        "user.d".into(),
        contents(4),
    ));
    steps.push(Step::SetXattr(
        "/attr_resized".into(),
        "user.e".into(),
        contents(4),
    ));
    steps.push(Step::SetXattr(
        "/attr_resized".into(),
        "user.d".into(),
        contents(9),
    ));
    steps.push(Step::Mkdir("/attr_dir".into()));
    steps.push(Step::SetXattr(
        "/attr_dir".into(),
        "user.c".into(),
        contents(12),
    ));
    for i in 0..5 {
        steps.push(Step::Write(
            format!("/attr_dir/{}", entry_name(i)),
            Vec::new(),
        ));
    }
    paths.extend(["/attr_first", "/attr_after", "/attr_resized", "/attr_dir"].map(String::from));
    for len in [1, 59, 60, 61, 100] {
        let path = format!("/s{len}");
        steps.push(Step::Symlink(path.clone(), contents(len)));
        paths.push(path);
    }
    (paths, steps)
}

/// Makes the changes under `root` through the kernel.
fn kernel_writes(root: &Path, steps: &[Step]) {
    use std::io::{Seek, SeekFrom, Write};
    let at = |path: &str| root.join(path.trim_start_matches('/'));
    for step in steps {
        match step {
            Step::Write(path, data) => std::fs::write(at(path), data).unwrap(),
            Step::Append(path, data) => std::fs::OpenOptions::new()
                .append(true)
                .open(at(path))
                .unwrap()
                .write_all(data)
                .unwrap(),
            Step::Overwrite(path, offset, data) => {
                let mut f = std::fs::OpenOptions::new()
                    .write(true)
                    .open(at(path))
                    .unwrap();
                f.seek(SeekFrom::Start(*offset as u64)).unwrap();
                f.write_all(data).unwrap();
            }
            Step::Shrink(path, size) => std::fs::OpenOptions::new()
                .write(true)
                .open(at(path))
                .unwrap()
                .set_len(*size)
                .unwrap(),
            Step::Mkdir(path) => std::fs::create_dir(at(path)).unwrap(),
            Step::Symlink(path, target) => std::os::unix::fs::symlink(
                <std::ffi::OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(target),
                at(path),
            )
            .unwrap(),
            Step::Unlink(path) => std::fs::remove_file(at(path)).unwrap(),
            Step::SetXattr(path, name, value) => xattr::set(at(path), name, value).unwrap(),
        }
    }
}

/// Makes the same changes through e4.
fn e4_writes(fs: &Filesystem, steps: &[Step]) {
    let split = |path: &str| {
        let (dir, name) = path.rsplit_once('/').unwrap();
        let dir = if dir.is_empty() {
            ROOT
        } else {
            fs.resolve(dir, true).unwrap()
        };
        (dir, name.as_bytes().to_vec())
    };
    for step in steps {
        match step {
            Step::Write(path, data) => {
                let (dir, name) = split(path);
                let ino = fs.create(dir, &name, ME).unwrap();
                if !data.is_empty() {
                    assert_eq!(fs.write_at(ino, 0, data).unwrap(), data.len());
                }
            }
            Step::Append(path, data) => {
                let ino = fs.resolve(path, true).unwrap();
                let end = fs.metadata(ino).unwrap().size;
                assert_eq!(fs.write_at(ino, end, data).unwrap(), data.len());
            }
            Step::Overwrite(path, offset, data) => {
                let ino = fs.resolve(path, true).unwrap();
                assert_eq!(fs.write_at(ino, *offset as u64, data).unwrap(), data.len());
            }
            Step::Shrink(path, size) => {
                let ino = fs.resolve(path, true).unwrap();
                fs.truncate(ino, *size).unwrap();
            }
            Step::Mkdir(path) => {
                let (dir, name) = split(path);
                fs.mkdir(dir, &name, DIR).unwrap();
            }
            Step::Symlink(path, target) => {
                let (dir, name) = split(path);
                let link = Creator {
                    permissions: 0o777,
                    ..ME
                };
                fs.symlink(dir, &name, target, link).unwrap();
            }
            Step::Unlink(path) => {
                let (dir, name) = split(path);
                fs.unlink(dir, &name).unwrap();
            }
            Step::SetXattr(path, name, value) => {
                let ino = fs.resolve(path, true).unwrap();
                fs.set_xattr(ino, name.as_bytes(), value, XattrSet::Either)
                    .unwrap();
            }
        }
    }
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap())
}

/// Directory entries in `bytes` with their inode numbers replaced by 1 (0 stays 0: an
/// unused entry).
fn normalise_entries(bytes: &mut [u8]) {
    let mut at = 0;
    while at + 8 <= bytes.len() {
        if u32_at(bytes, at) != 0 {
            bytes[at..at + 4].copy_from_slice(&1u32.to_le_bytes());
        }
        let rec_len = usize::from(u16_at(bytes, at + 4));
        if rec_len < 8 {
            return;
        }
        at += rec_len;
    }
}

/// The parts of inode `path`'s raw record that must agree, by name, with a directory's
/// entries normalised.
fn layout(image: &RawImage, fs: &Filesystem, path: &str) -> Vec<(&'static str, Vec<u8>)> {
    let ino = fs.resolve(path, false).unwrap();
    let raw = image.inode_bytes(ino).unwrap().to_vec();
    let is_dir = u16_at(&raw, 0) & 0o170000 == 0o040000;
    let inline = u32_at(&raw, 32) & INLINE_FL != 0;
    let extra = usize::from(u16_at(&raw, 128));
    let xattr_start = GOOD_OLD_INODE_SIZE + extra;
    let mut i_block = raw[I_BLOCK].to_vec();
    let mut xattrs = raw[xattr_start..].to_vec();
    let fast_symlink = u16_at(&raw, 0) & 0o170000 == 0o120000 && u32_at(&raw, 32) & EXTENTS_FL == 0;
    let mut past_target = Vec::new();
    let mut first_block = Vec::new();
    if fast_symlink {
        // The target and its NUL; the kernel leaves what was there before past them (of the
        // extent header a new inode starts with, `eh_max` survives a target under 5 bytes),
        // e4 zeros: compared separately.
        let end = u32_at(&raw, 4) as usize + 1;
        past_target = i_block.split_off(end);
    } else if u32_at(&raw, 32) & EXTENTS_FL != 0 {
        // Block numbers are the allocator's: keep the extent header and the first extent's
        // logical start and length.
        i_block.truncate(12 + 6);
        // What moved out of the inode: a file's first block (data, then zeros), a
        // converted directory's (entries normalised, the checksum left out).
        if let Some(block) = image.file_block(ino, 0).unwrap() {
            first_block = image.block(block).unwrap().to_vec();
            if is_dir {
                normalise_entries(&mut first_block);
                let len = first_block.len();
                first_block.truncate(len - 4);
            }
        }
    } else if inline && is_dir {
        // The parent's number stays (always the root here); the entries are normalised.
        normalise_entries(&mut i_block[4..]);
        if u32_at(&xattrs, 0) == 0xEA02_0000 {
            let entry = 4;
            let value_offs = usize::from(u16_at(&xattrs, entry + 2));
            let value_size = u32_at(&xattrs, entry + 8) as usize;
            let value = entry + value_offs;
            normalise_entries(&mut xattrs[value..value + value_size]);
        }
    }
    vec![
        ("i_mode", raw[0..2].to_vec()),
        ("i_size_lo", raw[4..8].to_vec()),
        ("i_links_count", raw[26..28].to_vec()),
        ("i_blocks_lo", raw[28..32].to_vec()),
        ("i_flags", raw[32..36].to_vec()),
        ("i_block", i_block),
        (PAST_TARGET, past_target),
        ("i_file_acl_lo", raw[104..108].to_vec()),
        ("i_size_high", raw[108..112].to_vec()),
        ("i_blocks_high", raw[116..118].to_vec()),
        ("i_extra_isize", raw[128..130].to_vec()),
        ("in-inode xattrs", xattrs),
        ("first data block", first_block),
    ]
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn compare(kernel: &Path, e4: &Path, paths: &[String]) -> Vec<String> {
    let (kernel_raw, e4_raw) = (RawImage::read(kernel).unwrap(), RawImage::read(e4).unwrap());
    let kernel_fs = Filesystem::open(kernel, OpenOptions::default()).unwrap();
    let e4_fs = Filesystem::open(e4, OpenOptions::default()).unwrap();
    // The comparison reaches the blocks of what moved out: a directory past the inline
    // capacity has one, as the file one byte past it has.
    let last_dir = paths.iter().rfind(|p| p.starts_with("/d")).unwrap().clone();
    for path in [last_dir.as_str(), "/spilled"] {
        let moved = layout(&kernel_raw, &kernel_fs, path);
        assert!(!moved.last().unwrap().1.is_empty(), "{path} has no block");
    }
    let mut differences = Vec::new();
    for path in paths {
        let want = layout(&kernel_raw, &kernel_fs, path);
        let got = layout(&e4_raw, &e4_fs, path);
        for ((field, k), (_, e)) in want.iter().zip(&got) {
            if *field == PAST_TARGET {
                if e.iter().any(|&b| b != 0) {
                    differences.push(format!("{path} {field}: e4 {}, not zeros", hex(e)));
                }
            } else if k != e {
                differences.push(format!("{path} {field}: kernel {} e4 {}", hex(k), hex(e)));
            }
        }
    }
    differences
}

#[test]
fn inline_files_and_directories_are_laid_out_as_the_kernel_lays_them_out() {
    for (inode_size, block_size) in [(256usize, 1024u32), (512, 4096)] {
        let kernel = make_empty_image(
            &[
                "-t",
                "ext4",
                "-O",
                "inline_data",
                "-I",
                &inode_size.to_string(),
                "-b",
                &block_size.to_string(),
            ],
            16,
        );
        let (paths, steps) = steps(inode_size);
        let e4 = kernel.path.with_file_name("e4.img");
        std::fs::copy(&kernel.path, &e4).unwrap();
        {
            let Ok(mount) = KernelMount::mount_writable(&kernel.path) else {
                return;
            };
            kernel_writes(&mount.path(), &steps);
        }
        let fs = Filesystem::open(&e4, OpenOptions::writable()).unwrap();
        e4_writes(&fs, &steps);
        fs.unmount().unwrap();
        e2fsck_clean(&kernel.path).unwrap();
        e2fsck_clean(&e4).unwrap();
        let differences = compare(&kernel.path, &e4, &paths);
        assert!(
            differences.is_empty(),
            "{inode_size}-byte inodes: e4 lays out inline data differently:\n{}",
            differences.join("\n")
        );
    }
}

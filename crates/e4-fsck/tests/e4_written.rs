//! Agreement with e2fsck on images written by e4's own write path (issue 9 §4): mke2fs makes
//! an empty filesystem in each feature profile, e4-fs fills it (files written, extended and
//! punched, directories grown into hash trees, hard links, symlinks, xattr blocks, renames,
//! unlinks), and `e2fsck -fn` and e4 fsck must then agree: clean as written, and on clean
//! versus errors and the set of problem classes after each targeted damage. These are the
//! structures e4 fsck exists to give a second opinion on: its parsers are e4-format's, but
//! the layouts (allocator placement, extent splits, htree splits) are e4-fs's, not mke2fs's.

mod common;

use e4_fs::{Creator, Error, FallocateMode, Filesystem, OpenOptions, RenameMode, XattrSet};
use e4_fsck::{check, Options};
use e4_testkit::{make_empty_image, Image, Profile, PROFILES};

use common::damages::{assert_damages_agree, assert_every_damage_ran_on, DAMAGES};
use common::flips::assert_random_flips_agree;
use common::{assert_agreement, forced_check};

const ROOT: u32 = 2;
const OWNER: Creator = Creator {
    permissions: 0o644,
    uid: 1000,
    gid: 1000,
    umask: 0,
};

/// An empty image of `profile` filled through e4-fs, unmounted cleanly.
fn e4_written_image(profile: &Profile) -> Image {
    let mut args = profile.mke2fs_args.to_vec();
    args.extend(["-N", "2048"]);
    let image = make_empty_image(&args, 16);
    let fs = Filesystem::open(&image.path, OpenOptions::writable())
        .unwrap_or_else(|e| panic!("{}: open for writing: {e}", profile.name));
    fill(&fs, profile.name);
    fs.unmount().unwrap();
    image
}

/// The tree the damages below expect, written the way an application would.
fn fill(fs: &Filesystem, profile: &str) {
    let bs = u64::from(fs.block_size());
    let file = |parent: u32, name: &str, data: &[u8]| -> u32 {
        let ino = fs.create(parent, name.as_bytes(), OWNER).unwrap();
        if !data.is_empty() {
            fs.write_at(ino, 0, data).unwrap();
        }
        ino
    };
    let small = file(ROOT, "small", b"hello");
    file(ROOT, "medium", &[7u8; 20 * 1024]);
    let other = file(ROOT, "other", &[9u8; 12 * 1024]);
    // A value too large for the inode goes to an xattr block.
    for ino in [small, other] {
        fs.set_xattr(ino, b"user.big", &[b'x'; 700], XattrSet::Either)
            .unwrap();
    }
    let sparse = file(ROOT, "sparse", &[1u8; 4096]);
    fs.write_at(sparse, 256 * 1024, &[2u8; 4096]).unwrap();
    let dir1 = fs.mkdir(ROOT, b"dir1", OWNER).unwrap();
    let sub = fs.mkdir(dir1, b"sub", OWNER).unwrap();
    let dir2 = fs.mkdir(ROOT, b"dir2", OWNER).unwrap();
    let a = file(dir1, "a", b"a");
    file(dir1, "b", b"b");
    file(dir1, "c", b"c");
    fs.link(a, dir2, b"a_link").unwrap();
    // Sixty-four blocks written, then every other one punched: 32 extents, more than the
    // inode holds, so the tree has a leaf block (block maps keep the written file).
    let fragmented = file(ROOT, "fragmented", &vec![3u8; 64 * bs as usize]);
    for b in (0..64).step_by(2) {
        match fs.fallocate(fragmented, FallocateMode::PunchHole, b * bs, bs) {
            Ok(()) | Err(Error::NotSupported(_)) => {}
            Err(e) => panic!("{profile}: punch block {b}: {e}"),
        }
    }
    let big = fs.mkdir(ROOT, b"big", OWNER).unwrap();
    for i in 0..400 {
        file(big, &format!("entry_with_a_longish_name_{i:04}"), b"");
    }
    fs.symlink(ROOT, b"short_link", b"small", OWNER).unwrap();
    fs.symlink(ROOT, b"long_link", "dir1/".repeat(60).as_bytes(), OWNER)
        .unwrap();
    // Frees and moves, so the bitmaps and counts are the write path's, not mke2fs's.
    let doomed = file(ROOT, "doomed", &[4u8; 40 * 1024]);
    fs.truncate(doomed, 4096).unwrap();
    fs.unlink(ROOT, b"doomed").unwrap();
    let moving = fs.mkdir(ROOT, b"moving", OWNER).unwrap();
    file(moving, "inside", b"inside");
    fs.rename(ROOT, b"moving", sub, b"moved", RenameMode::Replace)
        .unwrap();
    for i in 0..20 {
        file(dir2, &format!("gone{i}"), &[5u8; 3000]);
    }
    for i in (0..20).step_by(2) {
        fs.unlink(dir2, format!("gone{i}").as_bytes()).unwrap();
    }
}

/// e4-written images of every profile are clean to both checkers, and e4 reports nothing.
#[test]
fn e4_written_images_of_every_profile_are_clean() {
    for profile in PROFILES {
        let image = e4_written_image(profile);
        let classes = assert_agreement(&image.path, profile.name);
        assert!(classes.is_empty(), "{}: {classes:?}", profile.name);
        let report = forced_check(&image.path, None);
        assert!(
            report.problems.is_empty(),
            "{}: {:?}",
            profile.name,
            report.problems
        );
    }
}

/// Every damage on the e4-written image of every profile where it applies.
#[test]
fn damaged_e4_written_images_agree_in_every_profile() {
    let mut applied = vec![Vec::new(); DAMAGES.len()];
    for profile in PROFILES {
        let image = e4_written_image(profile);
        let ran = assert_damages_agree(&image.path, &format!("e4-written {}", profile.name));
        for (k, ran) in ran.into_iter().enumerate() {
            if ran {
                applied[k].push(profile.name);
            }
        }
    }
    assert_every_damage_ran_on(PROFILES[0].name, &applied);
}

/// Random bit flips in the metadata of an e4-written image (deep extent tree, hash tree,
/// xattr blocks placed by e4's allocator): e4 fsck neither panics nor hangs, and agrees with
/// e2fsck on clean, errors, or cannot check.
#[test]
fn random_flips_in_e4_written_metadata() {
    let image = e4_written_image(&PROFILES[0]);
    let damaged = assert_random_flips_agree(
        &image.path,
        &["/big", "/dir1", "/dir1/sub", "/fragmented", "/small", "/"],
        64,
        150,
        0xe4_0f11,
    );
    assert!(damaged >= 10, "only {damaged} rounds damaged");
}

/// Many small groups whose used parts of the inode table differ in length (e4 spreads the
/// directories over groups, each holding a different number of files): one thread scans
/// them in turn, a long piece before a shorter one, so a piece reading past its own end
/// (stale inodes from the buffer of an earlier piece) would show as problems here.
#[test]
fn groups_of_different_fill_are_clean_at_one_thread() {
    let image = make_empty_image(&["-t", "ext4", "-b", "1024", "-g", "1024", "-N", "512"], 16);
    let fs = Filesystem::open(&image.path, OpenOptions::writable()).unwrap();
    for d in 0..10u32 {
        let dir = fs.mkdir(ROOT, format!("d{d}").as_bytes(), OWNER).unwrap();
        for f in 0..d * 3 {
            let ino = fs.create(dir, format!("f{f}").as_bytes(), OWNER).unwrap();
            fs.write_at(ino, 0, b"x").unwrap();
        }
    }
    fs.unmount().unwrap();
    let classes = assert_agreement(&image.path, "groups of different fill");
    assert!(classes.is_empty(), "{classes:?}");
    let options = Options {
        threads: Some(1),
        force: true,
        ..Options::default()
    };
    let report = check(&image.path, &options).unwrap();
    assert!(report.problems.is_empty(), "{:?}", report.problems);
}

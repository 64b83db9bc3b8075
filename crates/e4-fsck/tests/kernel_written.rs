//! Agreement with e2fsck on images written by the Linux kernel (issue 9 §1): mke2fs makes an
//! empty filesystem in each feature profile, the kernel's ext4 driver fills it through a
//! read-write loop mount (files written and punched into a fragmented extent tree, a
//! directory grown by the kernel into a hash tree, deep enough for a second index level
//! with 1 KiB blocks, hard links, fast and slow symlinks, xattrs in the inode and in
//! blocks the kernel shares between files, renames, unlinks), and after the unmount
//! `e2fsck -fn` and e4 fsck must both find it clean; then the damages of
//! `common/damages.rs` must give the same verdict and class set on it.
//!
//! The kernel's layouts are neither mke2fs's nor e4's: its allocator's placement, its
//! htree splits, its inline-data and xattr sharing decisions, its orphan handling on
//! unlink. Where a loop mount is impossible (not root, no loop devices) the tests are
//! skipped with a message, unless `E4_REQUIRE_KERNEL=1` makes that a failure.

mod common;

use std::fs;
use std::os::unix::fs::{symlink, FileExt};
use std::path::Path;
use std::process::Command;
use std::sync::OnceLock;

use e4_fsck::{ProblemClass, ProblemCode};
use e4_testkit::{make_empty_image, Image, KernelMount, Profile, PROFILES};

use common::damages::{
    assert_damages_agree, assert_every_damage_ran_on, flip_first_extent_leaf_checksum, DAMAGES,
};
use common::flips::assert_random_flips_agree;
use common::{assert_agreement, forced_check};

/// Entries in the directory the kernel grows into a hash tree: with 1 KiB blocks (124
/// leaves under the root at most) more than one index level is needed.
const BIG_DIR_ENTRIES: usize = 3000;

/// An empty image of `profile` filled by the kernel and unmounted, or `None` where the
/// machine cannot loop-mount (reported by the testkit, fatal under `E4_REQUIRE_KERNEL=1`).
fn kernel_written_image(profile: &Profile) -> Option<Image> {
    let mut args = profile.mke2fs_args.to_vec();
    // Inode tables zeroed now, so the kernel's lazy-init thread writes nothing while the
    // tree is written.
    args.extend(["-N", "4096", "-E", "lazy_itable_init=0,lazy_journal_init=0"]);
    let image = make_empty_image(&args, 16);
    let mount = KernelMount::mount_writable(&image.path).ok()?;
    fill(&mount.path(), profile.name);
    // Unmounting writes everything back and marks the filesystem clean.
    drop(mount);
    Some(image)
}

/// A profile and the bytes of the image the kernel wrote in it.
type WrittenImage = (Profile, Vec<u8>);

/// The kernel-written image of each profile, made once per test process: the tests copy
/// it before they damage it. `None` where the kernel cannot mount.
fn kernel_written_images() -> Option<&'static [WrittenImage]> {
    static IMAGES: OnceLock<Option<Vec<WrittenImage>>> = OnceLock::new();
    IMAGES
        .get_or_init(|| {
            PROFILES
                .iter()
                .map(|profile| {
                    let image = kernel_written_image(profile)?;
                    Some((*profile, fs::read(&image.path).unwrap()))
                })
                .collect()
        })
        .as_deref()
}

/// The tree `common/damages.rs` expects, written through the kernel as an application
/// would write it.
fn fill(root: &Path, profile: &str) {
    let write = |path: &str, data: &[u8]| fs::write(root.join(path), data).unwrap();
    let set_xattr = |path: &str, name: &str, value: &[u8]| {
        xattr::set(root.join(path), name, value)
            .unwrap_or_else(|e| panic!("{profile}: setxattr {name} on {path}: {e}"))
    };
    write("small", b"hello");
    write("medium", &[7u8; 20 * 1024]);
    write("other", &[9u8; 12 * 1024]);
    // Too large for the inode: an xattr block, which the kernel shares between the two
    // files since the attributes are equal (mbcache), so its refcount is 2.
    set_xattr("small", "user.big", &[b'x'; 700]);
    set_xattr("other", "user.big", &[b'x'; 700]);
    let sparse = fs::File::create(root.join("sparse")).unwrap();
    sparse.write_all_at(&[1u8; 4096], 0).unwrap();
    sparse.write_all_at(&[2u8; 4096], 256 * 1024).unwrap();
    drop(sparse);
    fs::create_dir_all(root.join("dir1/sub")).unwrap();
    fs::create_dir(root.join("dir2")).unwrap();
    for name in ["a", "b", "c"] {
        write(&format!("dir1/{name}"), name.as_bytes());
    }
    // A small attribute stays in the inode (in i_block's neighbour, the extra space).
    set_xattr("dir1/a", "user.color", b"blue");
    fs::hard_link(root.join("dir1/a"), root.join("dir2/a_link")).unwrap();
    // Sixty-four 4 KiB pieces written, then every other one punched: 32 extents, more
    // than the inode holds, so the tree gets a leaf block.
    write("fragmented", &vec![3u8; 64 * 4096]);
    for piece in (0..64u64).step_by(2) {
        let out = Command::new("fallocate")
            .args(["--punch-hole", "--offset"])
            .arg((piece * 4096).to_string())
            .args(["--length", "4096"])
            .arg(root.join("fragmented"))
            .output()
            .expect("fallocate must be installed (util-linux)");
        assert!(
            out.status.success(),
            "{profile}: punch piece {piece}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    fs::create_dir(root.join("big")).unwrap();
    for i in 0..BIG_DIR_ENTRIES {
        write(&format!("big/entry_with_a_longish_name_{i:04}"), b"");
    }
    symlink("small", root.join("short_link")).unwrap();
    symlink("dir1/".repeat(60), root.join("long_link")).unwrap();
    // Frees and moves, so bitmaps and counts are the kernel's, not mke2fs's.
    write("doomed", &[4u8; 40 * 1024]);
    fs::File::options()
        .write(true)
        .open(root.join("doomed"))
        .unwrap()
        .set_len(4096)
        .unwrap();
    fs::remove_file(root.join("doomed")).unwrap();
    fs::create_dir(root.join("moving")).unwrap();
    write("moving/inside", b"inside");
    fs::rename(root.join("moving"), root.join("dir1/sub/moved")).unwrap();
    for i in 0..20 {
        write(&format!("dir2/gone{i}"), &[5u8; 3000]);
    }
    for i in (0..20).step_by(2) {
        fs::remove_file(root.join(format!("dir2/gone{i}"))).unwrap();
    }
}

/// Kernel-written images of every profile are clean to both checkers, and e4 reports
/// nothing.
#[test]
fn kernel_written_images_of_every_profile_are_clean() {
    let Some(images) = kernel_written_images() else {
        return;
    };
    let scratch = tempfile::tempdir().unwrap();
    for (profile, bytes) in images {
        let path = scratch.path().join(format!("{}.img", profile.name));
        fs::write(&path, bytes).unwrap();
        let what = format!("kernel-written {}", profile.name);
        let classes = assert_agreement(&path, &what);
        assert!(classes.is_empty(), "{what}: {classes:?}");
        let report = forced_check(&path, None);
        assert!(report.problems.is_empty(), "{what}: {:?}", report.problems);
    }
}

/// Every damage on the kernel-written image of every profile where it applies.
#[test]
fn damaged_kernel_written_images_agree_in_every_profile() {
    let Some(images) = kernel_written_images() else {
        return;
    };
    let scratch = tempfile::tempdir().unwrap();
    let mut applied = vec![Vec::new(); DAMAGES.len()];
    for (profile, bytes) in images {
        let path = scratch.path().join(format!("{}.img", profile.name));
        fs::write(&path, bytes).unwrap();
        let ran = assert_damages_agree(&path, &format!("kernel-written {}", profile.name));
        for (k, ran) in ran.into_iter().enumerate() {
            if ran {
                applied[k].push(profile.name);
            }
        }
    }
    assert_every_damage_ran_on(PROFILES[0].name, &applied);
}

/// The primary superblock of a kernel-written image does not validate: both checkers fall
/// back to the backup in group 1, whose descriptors are mke2fs's (the kernel never
/// rewrites backup descriptors outside a resize), so every count the kernel changed since
/// is stale there. They must agree on what that backup says. Profiles whose image has a
/// single group (no backup) are skipped.
#[test]
fn corrupt_primary_superblock_falls_back_to_stale_backups() {
    let Some(images) = kernel_written_images() else {
        return;
    };
    let scratch = tempfile::tempdir().unwrap();
    let mut fell_back = Vec::new();
    for (profile, bytes) in images {
        let path = scratch.path().join(format!("{}.img", profile.name));
        fs::write(&path, bytes).unwrap();
        let block_size = 1024u64 << read_u32(&path, 1024 + 0x18);
        let groups = read_u32(&path, 1024 + 0x04).div_ceil(read_u32(&path, 1024 + 0x20));
        if groups < 2 {
            continue;
        }
        // s_inodes_per_group far past what a bitmap block can hold.
        common::write_bytes(&path, 1024 + 0x28, &0x2000_0800u32.to_le_bytes());
        let what = format!(
            "kernel-written {} / corrupt primary superblock",
            profile.name
        );
        assert_agreement(&path, &what);
        let report = forced_check(&path, None);
        assert!(
            report
                .problems
                .iter()
                .any(|p| p.code == ProblemCode::PR_0_SB_CORRUPT),
            "{what}: {:?}",
            report.problems
        );
        fell_back.push((profile.name, block_size));
    }
    assert!(fell_back.len() >= 4, "only {fell_back:?} had a backup");
}

fn read_u32(path: &Path, offset: u64) -> u32 {
    u32::from_le_bytes(common::read_bytes(path, offset, 4).try_into().unwrap())
}

/// Random bit flips in the metadata of the kernel-written images with 1 KiB and 4 KiB
/// blocks (the kernel's two-level hash tree, its shared xattr block, its extent leaf):
/// e4 fsck neither panics nor hangs, and agrees with e2fsck on clean, errors, or cannot
/// check. Exploring this way (2,400 rounds over all profiles) found the checks of
/// `htree_depth::index_entry_past_the_directory`, `agreement::extra_isize_past_the_inode`,
/// `agreement::dot_and_dotdot_not_nul_terminated` and `agreement::quota_inode_slots`.
#[test]
fn random_flips_in_kernel_written_metadata() {
    let Some(images) = kernel_written_images() else {
        return;
    };
    let scratch = tempfile::tempdir().unwrap();
    let paths = [
        "/big",
        "/dir1",
        "/dir1/sub",
        "/dir2",
        "/fragmented",
        "/small",
        "/",
    ];
    let mut damaged = 0;
    for (profile, bytes) in images.iter().take(2) {
        let path = scratch.path().join(format!("{}.img", profile.name));
        fs::write(&path, bytes).unwrap();
        damaged += assert_random_flips_agree(&path, &paths, 64, 60, 0x6e72_6e6c);
    }
    assert!(damaged >= 20, "only {damaged} rounds damaged");
}

/// The kernel spreads its 3,000-entry directory's blocks so that its extent tree has a
/// leaf block; a bad checksum there, on the path to logical block 0, makes libext2fs's
/// `ext2fs_bmap2` of block 0 fail, and e2fsck's `handle_htree` then calls the root invalid
/// (`PR_1_HTREE_BADROOT`) besides the checksum (found by random flips).
#[test]
fn htree_directory_whose_first_extent_leaf_fails_its_checksum() {
    let Some(images) = kernel_written_images() else {
        return;
    };
    let scratch = tempfile::tempdir().unwrap();
    let (profile, bytes) = &images[0];
    let path = scratch.path().join(format!("{}.img", profile.name));
    fs::write(&path, bytes).unwrap();
    assert!(
        flip_first_extent_leaf_checksum(&path, "/big"),
        "{}: /big has no extent leaf to damage",
        profile.name
    );
    let classes = assert_agreement(&path, "first extent leaf of an htree directory");
    assert!(classes.contains(&ProblemClass::Htree), "{classes:?}");
    let report = forced_check(&path, None);
    for code in [
        ProblemCode::PR_1_EXTENT_ONLY_CSUM_INVALID,
        ProblemCode::PR_1_HTREE_BADROOT,
    ] {
        assert!(
            report.problems.iter().any(|p| p.code == code),
            "{code} not in {:?}",
            report.problems
        );
    }
}

//! Where the answer is the kernel's to give, e4 gives the same one: the same operations run
//! through a read-write loop mount of one image and through e4 on a copy of it, and the
//! results (errors, modes, owners) are compared. Symlink targets too long for a block,
//! inodes made in set-group-ID directories, and chown clearing setuid and setgid. Without
//! root or loop devices the comparison is skipped with the reason printed (with
//! `E4_REQUIRE_KERNEL=1` that fails the test). Both images end `e2fsck -fn` clean.

use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::Path;

use e4_fs::{Creator, Filesystem, OpenOptions, SetAttributes};
use e4_testkit::{e2fsck_clean, make_empty_image, Image, KernelMount};

const ROOT: u32 = 2;
/// `S_ISGID` on a directory.
const SETGID: u32 = 0o2000;
/// A group the test process is not in (the kernel side runs as root).
const GROUP: u32 = 4321;

/// An empty image and a copy of it, for the kernel and for e4.
fn image_pair(mke2fs_args: &[&str]) -> (Image, std::path::PathBuf) {
    let kernel = make_empty_image(mke2fs_args, 16);
    let copy = kernel.path.with_file_name("e4.img");
    std::fs::copy(&kernel.path, &copy).unwrap();
    (kernel, copy)
}

fn both_clean(kernel: &Path, e4: &Path) {
    e2fsck_clean(kernel).unwrap_or_else(|e| panic!("kernel-written image: {e}"));
    e2fsck_clean(e4).unwrap_or_else(|e| panic!("e4-written image: {e}"));
}

/// The errno of a result, 0 for success.
fn errno_of<T>(result: &Result<T, std::io::Error>) -> i32 {
    result
        .as_ref()
        .err()
        .map_or(0, |e| e.raw_os_error().unwrap_or(-1))
}

fn e4_errno<T>(result: &e4_fs::Result<T>) -> i32 {
    result.as_ref().err().map_or(0, |e| e.errno())
}

#[test]
fn symlink_targets_the_kernel_refuses_are_refused_with_its_errno() {
    for block_size in [1024u32, 2048, 4096] {
        let bs = block_size as usize;
        let (kernel_img, e4_img) = image_pair(&["-t", "ext4", "-b", &block_size.to_string()]);
        let lengths = [59, 60, bs - 2, bs - 1, bs, bs + 1, 4095, 4096];
        let target = |len: usize| -> Vec<u8> {
            let mut t: Vec<u8> = (0..len).map(|i| b'a' + (i % 26) as u8).collect();
            // Slashes every so often keep each component under NAME_MAX.
            for i in (100..len).step_by(100) {
                t[i] = b'/';
            }
            t
        };
        let kernel: Vec<i32> = {
            let Ok(mount) = KernelMount::mount_writable(&kernel_img.path) else {
                return;
            };
            lengths
                .iter()
                .map(|&len| {
                    let t = target(len);
                    let t = std::ffi::OsStr::from_bytes(&t);
                    let link = mount.path().join(format!("l{len}"));
                    errno_of(&std::os::unix::fs::symlink(t, link))
                })
                .collect()
        };
        let fs = Filesystem::open(&e4_img, OpenOptions::writable()).unwrap();
        let e4: Vec<i32> = lengths
            .iter()
            .map(|&len| {
                let name = format!("l{len}");
                let made = fs.symlink(ROOT, name.as_bytes(), &target(len), creator(0o777));
                if let Ok(ino) = made {
                    assert_eq!(fs.read_link(ino).unwrap(), target(len), "{name} reads back");
                }
                e4_errno(&made)
            })
            .collect();
        fs.unmount().unwrap();
        assert_eq!(
            e4, kernel,
            "errnos for targets of {lengths:?} bytes on {block_size}-byte blocks"
        );
        both_clean(&kernel_img.path, &e4_img);
    }
}

fn creator(permissions: u16) -> Creator {
    Creator {
        permissions,
        uid: 0,
        gid: 0,
        umask: 0,
    }
}

/// Mode bits (with setuid, setgid, sticky), uid and gid of a path under a kernel mount.
fn kernel_owner(path: &Path) -> (u32, u32, u32) {
    let m = std::fs::symlink_metadata(path).unwrap();
    (m.mode() & 0o7777, m.uid(), m.gid())
}

#[test]
fn inodes_made_in_a_setgid_directory_take_its_group_and_directories_its_bit() {
    let (kernel_img, e4_img) = image_pair(&["-t", "ext4", "-b", "1024"]);
    // Each entry: a path below the setgid directory, and what it is.
    let made = ["sub", "sub/deeper", "file", "sub/file", "link", "sub/link"];
    let kernel: Vec<(u32, u32, u32)> = {
        let Ok(mount) = KernelMount::mount_writable(&kernel_img.path) else {
            return;
        };
        let top = mount.path().join("shared");
        std::fs::DirBuilder::new().mode(0o755).create(&top).unwrap();
        std::os::unix::fs::chown(&top, None, Some(GROUP)).unwrap();
        std::fs::set_permissions(&top, std::fs::Permissions::from_mode(0o2775)).unwrap();
        for path in made {
            let p = top.join(path);
            match path.rsplit('/').next().unwrap() {
                "sub" | "deeper" => std::fs::DirBuilder::new().mode(0o755).create(&p).unwrap(),
                "file" => drop(std::fs::File::create(&p).unwrap()),
                _ => std::os::unix::fs::symlink("target", &p).unwrap(),
            }
        }
        let mut owners = vec![kernel_owner(&top)];
        owners.extend(made.iter().map(|p| kernel_owner(&top.join(p))));
        owners
    };
    let fs = Filesystem::open(&e4_img, OpenOptions::writable()).unwrap();
    let top = fs.mkdir(ROOT, b"shared", creator(0o755)).unwrap();
    fs.setattr(
        top,
        &SetAttributes {
            gid: Some(GROUP),
            ..Default::default()
        },
    )
    .unwrap();
    fs.setattr(
        top,
        &SetAttributes {
            permissions: Some(0o2775),
            ..Default::default()
        },
    )
    .unwrap();
    for (i, path) in made.iter().enumerate() {
        let (dir, name) = match path.rsplit_once('/') {
            Some((dir, name)) => (fs.resolve(&format!("/shared/{dir}"), true).unwrap(), name),
            None => (top, *path),
        };
        // The permissions the kernel's umask left, without the bits under test.
        let permissions = (kernel[i + 1].0 & 0o777) as u16;
        let name = name.as_bytes();
        match path.rsplit('/').next().unwrap() {
            "sub" | "deeper" => fs.mkdir(dir, name, creator(permissions)),
            "file" => fs.create(dir, name, creator(permissions)),
            _ => fs.symlink(dir, name, b"target", creator(permissions)),
        }
        .unwrap();
    }
    let mut e4 = vec![top];
    e4.extend(
        made.iter()
            .map(|p| fs.resolve(&format!("/shared/{p}"), false).unwrap()),
    );
    let e4: Vec<(u32, u32, u32)> = e4
        .into_iter()
        .map(|ino| {
            let m = fs.metadata(ino).unwrap();
            (u32::from(m.permissions), m.uid, m.gid)
        })
        .collect();
    fs.unmount().unwrap();
    let mut paths = vec!["shared"];
    paths.extend(made);
    for ((path, k), e) in paths.iter().zip(&kernel).zip(&e4) {
        assert_eq!(
            (format!("{:o}", e.0), e.1, e.2),
            (format!("{:o}", k.0), k.1, k.2),
            "{path}: e4 (mode, uid, gid) against the kernel's"
        );
    }
    // The comparison is only worth something if the kernel did what inode_init_owner says.
    assert!(kernel.iter().all(|k| k.2 == GROUP), "{kernel:?}");
    assert_ne!(kernel[1].0 & SETGID, 0, "the kernel's sub is setgid");
    both_clean(&kernel_img.path, &e4_img);
}

/// A chown case: name, whether a directory, mode before, new uid, new gid.
type ChownCase = (&'static str, bool, u32, Option<u32>, Option<u32>);

#[test]
fn chown_clears_setuid_and_setgid_of_files_as_the_kernel_does() {
    let (kernel_img, e4_img) = image_pair(&["-t", "ext4", "-b", "1024"]);
    // (name, is a directory, mode before, new uid, new gid): to another owner, to the same
    // owner (the kernel clears the bits even then), group only.
    let cases: &[ChownCase] = &[
        ("suid_sgid", false, 0o6755, Some(1000), Some(1000)),
        ("suid", false, 0o4755, Some(1000), None),
        ("sgid", false, 0o2755, None, Some(1000)),
        ("sgid_no_group_exec", false, 0o2745, Some(1000), Some(1000)),
        ("same_owner", false, 0o6755, Some(0), Some(0)),
        ("sticky", false, 0o1755, Some(1000), None),
        ("plain", false, 0o755, Some(1000), Some(1000)),
        ("dir", true, 0o6755, Some(1000), Some(1000)),
        ("dir_same_owner", true, 0o3775, Some(0), None),
    ];
    let kernel: Vec<(u32, u32, u32)> = {
        let Ok(mount) = KernelMount::mount_writable(&kernel_img.path) else {
            return;
        };
        cases
            .iter()
            .map(|&(name, dir, mode, uid, gid)| {
                let p = mount.path().join(name);
                if dir {
                    std::fs::create_dir(&p).unwrap();
                } else {
                    std::fs::File::create(&p).unwrap();
                }
                std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
                std::os::unix::fs::chown(&p, uid, gid).unwrap();
                kernel_owner(&p)
            })
            .collect()
    };
    let fs = Filesystem::open(&e4_img, OpenOptions::writable()).unwrap();
    let e4: Vec<(u32, u32, u32)> = cases
        .iter()
        .map(|&(name, dir, mode, uid, gid)| {
            let ino = if dir {
                fs.mkdir(ROOT, name.as_bytes(), creator(0o755))
            } else {
                fs.create(ROOT, name.as_bytes(), creator(0o644))
            }
            .unwrap();
            fs.setattr(
                ino,
                &SetAttributes {
                    permissions: Some(mode as u16),
                    ..Default::default()
                },
            )
            .unwrap();
            let m = fs
                .setattr(
                    ino,
                    &SetAttributes {
                        uid,
                        gid,
                        ..Default::default()
                    },
                )
                .unwrap();
            (u32::from(m.permissions), m.uid, m.gid)
        })
        .collect();
    fs.unmount().unwrap();
    for ((case, k), e) in cases.iter().zip(&kernel).zip(&e4) {
        assert_eq!(
            (format!("{:o}", e.0), e.1, e.2),
            (format!("{:o}", k.0), k.1, k.2),
            "{}: e4 (mode, uid, gid) after chown against the kernel's",
            case.0
        );
    }
    both_clean(&kernel_img.path, &e4_img);
}

/// Multigrain timestamps, as the kernel's ext4 stamps them since 6.13: a change right after
/// a stat shows in the next stat (its times move although the clock's tick has not), a
/// change nobody looked at takes the tick's time, and no change ever carries a time earlier
/// than one made before it, in the same file or another (plants: `read_inode` not
/// recording that the times were read: the write's mtime equals the stat's, caught here;
/// the floor dropped: a tick time behind the fine one just handed out, caught here).
#[test]
fn a_change_after_a_stat_shows_and_times_never_go_back() {
    let img = make_empty_image(&["-t", "ext4"], 16);
    let fs = Filesystem::open(&img.path, OpenOptions::writable()).unwrap();
    let mut last_change = None;
    for round in 0..50 {
        let name = format!("f{round}");
        let file = fs.create(ROOT, name.as_bytes(), creator(0o644)).unwrap();
        let other = fs
            .create(ROOT, format!("g{round}").as_bytes(), creator(0o644))
            .unwrap();
        let seen = fs.metadata(file).unwrap();
        fs.write_at(file, 0, b"x").unwrap();
        let after = fs.metadata(file).unwrap();
        assert!(
            after.mtime > seen.mtime,
            "round {round}: {seen:?} then {after:?}"
        );
        assert!(after.ctime > seen.ctime, "round {round}");
        // `other` was never looked at: its change takes the tick's time, which may not be
        // earlier than the fine time `file` just got.
        fs.write_at(other, 0, b"y").unwrap();
        let other_after = fs.metadata(other).unwrap();
        assert!(other_after.mtime >= after.mtime, "round {round}");
        if let Some(last) = last_change {
            assert!(after.ctime >= last, "round {round}: went back");
        }
        last_change = Some(other_after.ctime);
    }
    fs.unmount().unwrap();
    e2fsck_clean(&img.path).unwrap();
}

//! Images made by mke2fs from a directory, in every feature set e4 must read.

use std::path::{Path, PathBuf};
use std::process::Command;

/// A feature set to test: how mke2fs is asked to make it.
#[derive(Debug, Clone, Copy)]
pub struct Profile {
    pub name: &'static str,
    pub mke2fs_args: &'static [&'static str],
    /// Generated paths that mke2fs 1.47.0 copies wrongly with this profile, so the image
    /// itself differs from the source (the kernel agrees with e4 on them; that comparison
    /// still covers them). With inline_data, a file ending in a hole gets size 1024.
    pub mke2fs_miscopies: &'static [&'static str],
}

/// The feature matrix every read-path test runs over.
pub const PROFILES: &[Profile] = &[
    Profile {
        name: "ext4-default-4k",
        mke2fs_args: &["-t", "ext4", "-b", "4096", "-O", "orphan_file"],
        mke2fs_miscopies: &[],
    },
    Profile {
        name: "ext4-1k",
        mke2fs_args: &["-t", "ext4", "-b", "1024"],
        mke2fs_miscopies: &[],
    },
    Profile {
        name: "ext4-uninit-bg",
        mke2fs_args: &["-t", "ext4", "-O", "^metadata_csum,uninit_bg"],
        mke2fs_miscopies: &[],
    },
    Profile {
        name: "ext4-inline-data",
        mke2fs_args: &["-t", "ext4", "-O", "inline_data"],
        mke2fs_miscopies: &["sparse_trailing"],
    },
    Profile {
        name: "ext4-meta-bg",
        mke2fs_args: &["-t", "ext4", "-O", "meta_bg,^resize_inode"],
        mke2fs_miscopies: &[],
    },
    Profile {
        name: "ext4-128-byte-inodes",
        mke2fs_args: &["-t", "ext4", "-I", "128"],
        mke2fs_miscopies: &[],
    },
    Profile {
        name: "ext3",
        mke2fs_args: &["-t", "ext3"],
        mke2fs_miscopies: &[],
    },
    Profile {
        name: "ext2",
        mke2fs_args: &["-t", "ext2"],
        mke2fs_miscopies: &[],
    },
];

/// An image file in its own temporary directory, removed on drop.
pub struct Image {
    _dir: tempfile::TempDir,
    pub path: PathBuf,
}

/// Runs `mke2fs -d source` with the profile's options, `size_mib` MiB and `inodes` inodes,
/// then indexes large directories with `e2fsck -fyD`.
pub fn make_image(source: &Path, profile: &Profile, size_mib: u64, inodes: u64) -> Image {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(format!("{}.img", profile.name));
    let out = Command::new(crate::tool("mke2fs"))
        .args([
            "-q",
            "-F",
            "-E",
            "lazy_itable_init=0,lazy_journal_init=0",
            "-N",
        ])
        .arg(inodes.to_string())
        .args(profile.mke2fs_args)
        .arg("-d")
        .arg(source)
        .arg(&path)
        .arg(format!("{size_mib}M"))
        .output()
        .expect("mke2fs must be installed (e2fsprogs)");
    assert!(
        out.status.success(),
        "mke2fs for {} failed: {}",
        profile.name,
        String::from_utf8_lossy(&out.stderr)
    );
    // mke2fs -d writes every directory linearly; `e2fsck -D` rebuilds large ones as hash
    // trees, as the kernel would have grown them. Exit 1 means "changed", which is expected.
    let fsck = Command::new(crate::tool("e2fsck"))
        .arg("-fyD")
        .arg(&path)
        .output()
        .unwrap();
    assert!(
        matches!(fsck.status.code(), Some(0 | 1)),
        "e2fsck -fyD for {} failed: {}",
        profile.name,
        String::from_utf8_lossy(&fsck.stdout)
    );
    Image { _dir: dir, path }
}

/// `e2fsck -fn`: the image must be clean (exit 0).
pub fn e2fsck_clean(image: &Path) -> Result<(), String> {
    let out = Command::new(crate::tool("e2fsck"))
        .arg("-fn")
        .arg(image)
        .output()
        .expect("e2fsck must be installed (e2fsprogs)");
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "e2fsck -fn {} exited {:?}:\n{}{}",
            image.display(),
            out.status.code(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

/// The problems `e2fsck -fn` reports, one line each, for comparing an image before and
/// after an edit of an image that was damaged to begin with: the pass headers, "Fix? no",
/// the closing summary and the whole-filesystem free counts' values are left out (the
/// counts move with any allocation anywhere; what they are wrong by is kept).
pub fn e2fsck_problems(image: &Path) -> Vec<String> {
    let out = Command::new(crate::tool("e2fsck"))
        .arg("-fn")
        .arg(image)
        .output()
        .expect("e2fsck must be installed (e2fsprogs)");
    let name = image.display().to_string();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with("Pass ") && *l != "Fix? no")
        .filter(|l| !l.starts_with(&format!("{name}:")))
        .map(|l| {
            for what in ["Free blocks count wrong (", "Free inodes count wrong ("] {
                if let Some(counts) = l.strip_prefix(what) {
                    let numbers: Vec<i64> = counts
                        .split(|c: char| !c.is_ascii_digit())
                        .filter_map(|n| n.parse().ok())
                        .collect();
                    if let [found, counted] = numbers[..] {
                        return format!("{what}by {})", counted - found);
                    }
                }
            }
            l.to_string()
        })
        .collect()
}

/// mke2fs arguments for ext4 with 4 KiB blocks in groups of 256 (1 MiB), no resize inode:
/// an image of a few dozen MiB then has as many groups as a large volume has per log, so
/// a small `OpenOptions::transaction_limit` makes operations over many groups go in steps.
pub const ONE_MIB_GROUPS: &[&str] = &[
    "-t",
    "ext4",
    "-b",
    "4096",
    "-g",
    "256",
    "-O",
    "^resize_inode",
];

/// An image with nothing but what mke2fs puts there, for tests of single structures.
pub fn make_empty_image(mke2fs_args: &[&str], size_mib: u64) -> Image {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("empty.img");
    let out = Command::new(crate::tool("mke2fs"))
        .args(["-q", "-F"])
        .args(mke2fs_args)
        .arg(&path)
        .arg(format!("{size_mib}M"))
        .output()
        .expect("mke2fs must be installed (e2fsprogs)");
    assert!(
        out.status.success(),
        "mke2fs failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Image { _dir: dir, path }
}

/// Runs debugfs `script` (one request a line, in one session) on the image at `image`,
/// opened for writing, and returns what it printed; a failing debugfs fails the test.
pub fn debugfs_script(image: &Path, script: &str) -> String {
    let script_path = image.with_extension("debugfs");
    std::fs::write(&script_path, script).unwrap();
    let out = Command::new(crate::tool("debugfs"))
        .arg("-w")
        .arg("-f")
        .arg(&script_path)
        .arg(image)
        .output()
        .expect("debugfs must be installed (e2fsprogs)");
    assert!(
        out.status.success(),
        "debugfs {script:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

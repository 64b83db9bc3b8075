//! `e4 export` of an image made by mke2fs from a generated tree must equal that tree, for
//! every feature set in the matrix; where loop mounts work, the kernel's view of the image
//! must equal e4's, down to inode numbers and nanosecond times.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use e4_fs::{Filesystem, OpenOptions};
use e4_testkit::{
    compare_trees, e2fsck_clean, generate_tree, make_image, CompareOptions, KernelMount, Profile,
    TreeSpec, PROFILES,
};

/// Entries of the source tree's large directory: enough for an htree in every profile.
/// `TreeSpec::full()`'s 20,000 (which the read-path tests keep) made mke2fs -d, which
/// inserts entries one by one into an unindexed directory, most of this test's two minutes.
const LARGE_DIRECTORY_ENTRIES: usize = 4_000;

/// The source tree every profile's image is made from, generated once per test run.
fn source_tree() -> &'static Path {
    static TREE: std::sync::OnceLock<tempfile::TempDir> = std::sync::OnceLock::new();
    TREE.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let spec = TreeSpec {
            big_dir_entries: LARGE_DIRECTORY_ENTRIES,
            ..TreeSpec::full()
        };
        generate_tree(dir.path(), &spec);
        dir
    })
    .path()
}

fn profile(name: &str) -> &'static Profile {
    PROFILES.iter().find(|p| p.name == name).unwrap()
}

/// Every path under `root`, relative, sorted.
fn all_paths(root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![PathBuf::new()];
    while let Some(rel) = stack.pop() {
        let full = root.join(&rel);
        if std::fs::symlink_metadata(&full).unwrap().is_dir() {
            for e in std::fs::read_dir(&full).unwrap() {
                stack.push(rel.join(e.unwrap().file_name()));
            }
        }
        out.push(rel);
    }
    out.sort();
    out
}

/// Compares e4's statfs, metadata and directory listings with the kernel's for every path.
fn compare_with_kernel(fs: &Filesystem, mount: &Path) -> Vec<String> {
    use std::os::unix::ffi::OsStrExt;
    let mut diffs = Vec::new();
    let k = nix::sys::statvfs::statvfs(mount).unwrap();
    let s = fs.statfs();
    // f_blocks is not compared: the kernel subtracts metadata overhead, e4 reports the total.
    let kernel = (
        k.block_size(),
        k.blocks_free(),
        k.blocks_available(),
        k.files(),
        k.files_free(),
        k.name_max(),
    );
    let ours = (
        u64::from(s.block_size),
        s.free_blocks,
        s.available_blocks,
        s.inodes,
        s.free_inodes,
        u64::from(s.name_max),
    );
    if kernel != ours {
        diffs.push(format!("statfs: kernel {kernel:?} vs e4 {ours:?}"));
    }
    for rel in all_paths(mount) {
        let k = std::fs::symlink_metadata(mount.join(&rel)).unwrap();
        let path = format!("/{}", rel.display());
        let ino = match fs.resolve_bytes(format!("/{}", rel.to_string_lossy()).as_bytes(), false) {
            Ok(ino) => ino,
            Err(e) => {
                diffs.push(format!("{path}: e4 cannot resolve: {e}"));
                continue;
            }
        };
        let m = fs.metadata(ino).unwrap();
        let kernel = (
            k.ino(),
            k.mode(),
            k.nlink(),
            k.uid(),
            k.gid(),
            k.size(),
            k.blocks(),
            (k.mtime(), k.mtime_nsec()),
            (k.ctime(), k.ctime_nsec()),
            (k.atime(), k.atime_nsec()),
        );
        let mode = (m.file_type_bits() as u32) | u32::from(m.permissions);
        let ours = (
            u64::from(m.ino),
            mode,
            u64::from(m.nlink),
            m.uid,
            m.gid,
            m.size,
            m.blocks,
            (m.mtime.seconds, i64::from(m.mtime.nanoseconds)),
            (m.ctime.seconds, i64::from(m.ctime.nanoseconds)),
            (m.atime.seconds, i64::from(m.atime.nanoseconds)),
        );
        if kernel != ours {
            diffs.push(format!("{path}: kernel {kernel:?} vs e4 {ours:?}"));
        }
        if k.is_dir() {
            let mut names: Vec<Vec<u8>> = std::fs::read_dir(mount.join(&rel))
                .unwrap()
                .map(|e| e.unwrap().file_name().as_bytes().to_vec())
                .collect();
            names.sort();
            let mut ours: Vec<Vec<u8>> = fs
                .read_dir(ino)
                .unwrap()
                .into_iter()
                .map(|e| e.name)
                .collect();
            ours.sort();
            if names != ours {
                diffs.push(format!("{path}: directory listing differs"));
            }
        }
    }
    diffs
}

trait ModeBits {
    fn file_type_bits(&self) -> u16;
}

impl ModeBits for e4_fs::Metadata {
    fn file_type_bits(&self) -> u16 {
        use e4_fs::FileType::*;
        match self.file_type {
            Fifo => 0x1000,
            CharDevice => 0x2000,
            Directory => 0x4000,
            BlockDevice => 0x6000,
            Regular => 0x8000,
            Symlink => 0xA000,
            Socket => 0xC000,
        }
    }
}

fn check_profile(name: &str) {
    let src = source_tree();
    let image = make_image(src, profile(name), 256, 32768);
    e2fsck_clean(&image.path).unwrap();

    let out = tempfile::tempdir().unwrap();
    let dest = out.path().join("export");
    let run = Command::new(env!("CARGO_BIN_EXE_e4"))
        .arg("export")
        .arg(&image.path)
        .arg(&dest)
        .output()
        .unwrap();
    assert!(
        run.status.success(),
        "e4 export failed: {}",
        String::from_utf8_lossy(&run.stderr)
    );
    let opts = CompareOptions {
        ignore_at_root: vec!["lost+found".into()],
        skip_paths: profile(name)
            .mke2fs_miscopies
            .iter()
            .map(|s| s.to_string())
            .collect(),
        ..Default::default()
    };
    let diffs = compare_trees(src, &dest, &opts);
    assert!(
        diffs.is_empty(),
        "{name}: export differs from the source:\n{}",
        diffs.join("\n")
    );

    // A mount that cannot be made is reported (or fails, with E4_REQUIRE_KERNEL=1) by
    // KernelMount::mount itself.
    if let Ok(mount) = KernelMount::mount(&image.path) {
        let fs = Filesystem::open(&image.path, OpenOptions::default()).unwrap();
        let diffs = compare_with_kernel(&fs, &mount.path());
        assert!(
            diffs.is_empty(),
            "{name}: e4 differs from the kernel:\n{}",
            diffs.join("\n")
        );
        let opts = CompareOptions {
            mtime_nanoseconds: true,
            root_times: true,
            ..Default::default()
        };
        let diffs = compare_trees(&mount.path(), &dest, &opts);
        assert!(
            diffs.is_empty(),
            "{name}: export differs from the kernel's tree:\n{}",
            diffs.join("\n")
        );
    }
    // Reading must not have changed the image.
    e2fsck_clean(&image.path).unwrap();
}

macro_rules! profile_tests {
    ($($test:ident => $name:expr),* $(,)?) => {
        $( #[test] fn $test() { check_profile($name); } )*

        #[test]
        fn every_profile_is_tested() {
            let tested = [$($name),*];
            for p in PROFILES {
                assert!(tested.contains(&p.name), "profile {} has no test", p.name);
            }
        }
    };
}

profile_tests! {
    ext4_default_4k => "ext4-default-4k",
    ext4_1k => "ext4-1k",
    ext4_uninit_bg => "ext4-uninit-bg",
    ext4_inline_data => "ext4-inline-data",
    ext4_meta_bg => "ext4-meta-bg",
    ext4_128_byte_inodes => "ext4-128-byte-inodes",
    ext3 => "ext3",
    ext2 => "ext2",
}

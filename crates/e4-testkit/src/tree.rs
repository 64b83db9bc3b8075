//! Generated source trees covering what the read path must get right.

use std::fs;
use std::os::unix::fs::symlink;
use std::path::Path;

use rand::{Rng, SeedableRng};

/// What to put in a generated tree.
#[derive(Debug, Clone)]
pub struct TreeSpec {
    /// Entries in the large (htree) directory.
    pub big_dir_entries: usize,
    /// Size of the large file in bytes.
    pub large_file_bytes: usize,
    /// Seed for file contents and names.
    pub seed: u64,
}

impl TreeSpec {
    /// Everything the foundation issue lists: a directory of 20,000 entries, a 12 MiB file.
    pub fn full() -> Self {
        TreeSpec {
            big_dir_entries: 20_000,
            large_file_bytes: 12 << 20,
            seed: 1,
        }
    }

    /// The same shapes at a size that fits a 1 MiB image, for mutation tests.
    pub fn small() -> Self {
        TreeSpec {
            big_dir_entries: 120,
            large_file_bytes: 100 << 10,
            seed: 2,
        }
    }
}

fn random_bytes(rng: &mut impl Rng, len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    rng.fill(&mut v[..]);
    v
}

/// Fills `root` (which must exist and be empty) with: empty files, small and large files,
/// sparse files with holes (leading, middle and trailing), a deep path, 255-byte and UTF-8
/// names, fast and slow symlinks (absolute, relative, dangling), hard links, user xattrs
/// (small, and too large for the inode), special files, odd permissions, and a large
/// directory that mke2fs indexes with an htree.
pub fn generate_tree(root: &Path, spec: &TreeSpec) {
    let mut rng = rand::rngs::StdRng::seed_from_u64(spec.seed);
    let w = |p: &str, data: &[u8]| fs::write(root.join(p), data).unwrap();
    w("empty", b"");
    w("small.txt", b"hello, e4\n");
    w("tiny", b"x");
    w("large.bin", &random_bytes(&mut rng, spec.large_file_bytes));
    w("block_exact", &random_bytes(&mut rng, 4096));

    // Sparse files: a hole in the middle, a leading hole, a trailing hole.
    let sparse = fs::File::create(root.join("sparse_middle")).unwrap();
    use std::os::unix::fs::FileExt;
    sparse.write_all_at(b"start", 0).unwrap();
    sparse.write_all_at(b"middle", 3 << 20).unwrap();
    sparse.write_all_at(b"end", (7 << 20) + 5).unwrap();
    let lead = fs::File::create(root.join("sparse_leading")).unwrap();
    lead.write_all_at(&random_bytes(&mut rng, 5000), 1 << 20)
        .unwrap();
    // Far enough out that a 1 KiB-block map needs its triple-indirect level.
    let far = fs::File::create(root.join("sparse_far")).unwrap();
    far.write_all_at(b"beyond 64 MiB", 100 << 20).unwrap();
    let trail = fs::File::create(root.join("sparse_trailing")).unwrap();
    trail.write_all_at(b"data", 0).unwrap();
    trail.set_len(2 << 20).unwrap();

    // A deep path.
    let mut deep = root.join("deep");
    for level in 0..24 {
        deep = deep.join(format!("level{level:02}"));
    }
    fs::create_dir_all(&deep).unwrap();
    fs::write(deep.join("bottom.txt"), b"deep down").unwrap();

    // Names: 255 bytes, UTF-8, spaces and punctuation.
    let names = root.join("names");
    fs::create_dir(&names).unwrap();
    fs::write(names.join("n".repeat(255)), b"long name").unwrap();
    let utf8_long: String = "é".repeat(127); // 254 bytes
    fs::write(names.join(&utf8_long), b"long utf-8").unwrap();
    for name in [
        "héllo wörld",
        "日本語のファイル",
        "emoji 🎉.txt",
        "with space",
        "-dash",
        ".hidden",
        "a:b;c'd\"e",
    ] {
        fs::write(names.join(name), name.as_bytes()).unwrap();
    }

    // Symlinks: fast (< 60 bytes), slow (>= 60), absolute, dangling, into a directory.
    symlink("small.txt", root.join("link_fast")).unwrap();
    let long_target = format!("names/{}", "n".repeat(255));
    symlink(&long_target, root.join("link_slow")).unwrap();
    symlink("/small.txt", root.join("link_absolute")).unwrap();
    symlink("does/not/exist", root.join("link_dangling")).unwrap();
    symlink("deep/level00", root.join("link_dir")).unwrap();
    symlink("x".repeat(59), root.join("link_59")).unwrap();
    symlink("y".repeat(60), root.join("link_60")).unwrap();
    symlink("loop_b", root.join("loop_a")).unwrap();
    symlink("loop_a", root.join("loop_b")).unwrap();

    // Hard links, within and across directories.
    fs::hard_link(root.join("small.txt"), root.join("hardlink_same_dir")).unwrap();
    fs::hard_link(root.join("small.txt"), names.join("hardlink_other_dir")).unwrap();

    // Extended attributes: small ones fit in the inode, a large one needs a block.
    let xpath = root.join("with_xattrs");
    fs::write(&xpath, b"attributes").unwrap();
    xattr::set(&xpath, "user.color", b"blue").unwrap();
    xattr::set(&xpath, "user.empty", b"").unwrap();
    xattr::set(&xpath, "user.large", &random_bytes(&mut rng, 700)).unwrap();
    xattr::set(root.join("names"), "user.on_dir", b"dir attr").unwrap();

    // Special files and permissions.
    let fifo = root.join("fifo");
    let status = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(status.success());
    use std::os::unix::fs::PermissionsExt;
    for (name, mode) in [
        ("mode_4755", 0o4755),
        ("mode_1777", 0o1777),
        ("mode_0000", 0o000),
        ("mode_2711", 0o2711),
    ] {
        let p = root.join(name);
        fs::write(&p, name.as_bytes()).unwrap();
        fs::set_permissions(&p, fs::Permissions::from_mode(mode)).unwrap();
    }

    // A directory large enough for an htree index.
    let big = root.join("big_dir");
    fs::create_dir(&big).unwrap();
    for i in 0..spec.big_dir_entries {
        let name = format!("entry_{i:06}_{}", "z".repeat(i % 40));
        fs::write(big.join(name), []).unwrap();
    }
    fs::write(big.join("needle"), b"found me").unwrap();
}

/// The [`TreeSpec::full`] tree, generated once per test process and shared by its tests.
pub fn full_source_tree() -> &'static Path {
    static TREE: std::sync::OnceLock<tempfile::TempDir> = std::sync::OnceLock::new();
    TREE.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        generate_tree(dir.path(), &TreeSpec::full());
        dir
    })
    .path()
}

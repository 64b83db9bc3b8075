//! `e4 mkfs` from the command line: `-d` puts a tree in (e2fsck clean; `e4 export` and a
//! kernel mount give the source back), a tree that does not fit leaves no image and one
//! line, unsupported options are named, and SOURCE_DATE_EPOCH makes an empty image
//! reproducible. The geometry against mke2fs is e4-mkfs's own test (mke2fs_equal.rs).

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use e4_testkit::{
    compare_trees, e2fsck_clean, generate_tree, CompareOptions, KernelMount, TreeSpec,
};

fn e4(args: &[&dyn AsRef<std::ffi::OsStr>], epoch: Option<&str>) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_e4"));
    for a in args {
        cmd.arg(a);
    }
    match epoch {
        Some(e) => cmd.env("SOURCE_DATE_EPOCH", e),
        None => cmd.env_remove("SOURCE_DATE_EPOCH"),
    };
    cmd.output().unwrap()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn tree_options() -> CompareOptions {
    CompareOptions {
        mtime_nanoseconds: true,
        ignore_at_root: vec!["lost+found".into()],
        ..Default::default()
    }
}

#[test]
fn a_tree_goes_in_and_comes_back_out() {
    let dir = tempfile::tempdir().unwrap();
    let source = dir.path().join("source");
    std::fs::create_dir(&source).unwrap();
    generate_tree(&source, &TreeSpec::small());
    // ext4 (extents, flex_bg, metadata_csum) and ext3 (block-mapped files), each also
    // reproducible (blocks reserved in the walk, data filled by other threads), at an
    // epoch later than every host time so that none is clamped.
    for (fs_type, epoch) in [
        ("ext4", None),
        ("ext3", None),
        ("ext4", Some("4000000000")),
        ("ext3", Some("4000000000")),
    ] {
        let name = format!("{fs_type}{}", if epoch.is_some() { "-epoch" } else { "" });
        let image = dir.path().join(format!("{name}.img"));
        let out = e4(
            &[
                &"mkfs", &"-q", &"-t", &fs_type, &"-j", &"3", &"-d", &source, &image, &"32M",
            ],
            epoch,
        );
        assert!(
            out.status.success(),
            "e4 mkfs -d ({name}): {}",
            stderr(&out)
        );
        e2fsck_clean(&image).unwrap();
        let exported = dir.path().join(format!("{name}-exported"));
        let out = e4(&[&"export", &image, &exported], None);
        assert!(out.status.success(), "e4 export: {}", stderr(&out));
        let diffs = compare_trees(&source, &exported, &tree_options());
        assert!(
            diffs.is_empty(),
            "{name}: export differs from the source: {diffs:#?}"
        );
        if let Ok(mount) = KernelMount::mount(&image) {
            let diffs = compare_trees(&source, &mount.path(), &tree_options());
            assert!(diffs.is_empty(), "{name}: kernel mount differs: {diffs:#?}");
        }
    }
}

#[test]
fn a_tree_that_does_not_fit_leaves_no_image() {
    let dir = tempfile::tempdir().unwrap();
    let source = dir.path().join("source");
    std::fs::create_dir(&source).unwrap();
    std::fs::write(source.join("big"), vec![7u8; 12 << 20]).unwrap();
    let image = dir.path().join("fs.img");
    let out = e4(&[&"mkfs", &"-q", &"-d", &source, &image, &"8M"], None);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(err.contains("no space left"), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(!image.exists(), "a half-filled image was left behind");

    // A block device cannot be removed: its primary superblock is wiped instead.
    let backing = dir.path().join("device.backing");
    std::fs::write(&backing, vec![0u8; 8 << 20]).unwrap();
    let device = match e4_testkit::LoopDevice::attach(&backing) {
        Ok(device) => device,
        Err(reason) => {
            return e4_testkit::kernel_comparison_skipped("mkfs -d on a device", &reason)
        }
    };
    let out = e4(&[&"mkfs", &"-q", &"-d", &source, &device.path()], None);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(device.path().exists(), "the device node was removed");
    let bytes = read(device.path());
    assert!(
        bytes[..4096].iter().all(|&b| b == 0),
        "the device still looks like a filesystem"
    );
}

#[test]
fn bad_and_unsupported_options_get_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let image = dir.path().join("fs.img");
    for (args, expect) in [
        (vec!["-O", "bigalloc"], "bigalloc"),
        (vec!["-O", "quota,orphan_file"], "quota"),
        (vec!["-E", "stride=8"], "-E stride"),
        (vec!["-b", "3000"], "block size"),
        (vec!["-t", "xfs"], "xfs"),
        (vec!["-O", "frobnicate"], "frobnicate"),
        (vec!["-n", "-S"], "mke2fs option -n, -S"),
        (vec!["-G", "16", "-O", "^flex_bg"], "flex_bg"),
        (vec!["-g", "1001"], "blocks per group"),
        // Options mke2fs takes only once.
        (
            vec!["-t", "ext4", "-t", "ext2"],
            "-t option may only be used once",
        ),
        (
            vec!["-T", "news", "-T", "small"],
            "-T option may only be used once",
        ),
        // Feature pairs mke2fs refuses.
        (vec!["-O", "^extent"], "64bit needs extent"),
        (vec!["-t", "ext2", "-O", "64bit"], "64bit needs extent"),
        (
            vec!["-O", "metadata_csum_seed,^metadata_csum"],
            "metadata_csum_seed needs metadata_csum",
        ),
    ] {
        let mut all: Vec<&dyn AsRef<std::ffi::OsStr>> = vec![&"mkfs", &"-q"];
        for a in &args {
            all.push(a);
        }
        all.push(&image);
        all.push(&"16M");
        let out = e4(&all, None);
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        let err = stderr(&out);
        assert!(
            err.contains(expect) && err.lines().count() == 1,
            "{args:?}: {err}"
        );
    }
    // Too few inodes for lost+found, from a tiny size or from -N: one line, no image.
    for (args, size) in [(vec![], "100K"), (vec!["-N", "5"], "1M")] {
        let _ = std::fs::remove_file(&image);
        let mut all: Vec<&dyn AsRef<std::ffi::OsStr>> = vec![&"mkfs", &"-q"];
        for a in &args {
            all.push(a);
        }
        all.push(&image);
        all.push(&size);
        let out = e4(&all, None);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(1), "{args:?} {size}: {err}");
        assert!(
            err.contains("lost+found") && err.lines().count() == 1,
            "{args:?} {size}: {err}"
        );
        assert!(
            std::fs::metadata(&image).map_or(true, |m| m.len() == 0),
            "{args:?} {size}: an image was left"
        );
    }
    let out = e4(&[&"mkfs", &image, &"1Q"], None);
    assert!(stderr(&out).contains("unknown suffix"), "{}", stderr(&out));
}

/// `--fs-config`: every entry takes the owner, mode and capabilities of its line (the last
/// line for a path wins; `selabel=` ignored); `--file-contexts`: every entry, the root and
/// lost+found take the label of the line libselinux would pick (the last match, an exact
/// path over a pattern, a typed line only for its type, `<<none>>` none). Seen through the
/// kernel's mount (stat, and the xattrs as getfattr reads them) or, without one, the
/// engine. An entry the fs_config file does not name is one line, exit 1 and no image; a
/// bad line is one line, exit 2.
#[test]
fn fs_config_gives_owners_modes_and_capabilities() {
    use std::os::unix::fs::MetadataExt;
    let dir = tempfile::tempdir().unwrap();
    let source = dir.path().join("source");
    std::fs::create_dir_all(source.join("bin")).unwrap();
    std::fs::write(source.join("bin/sh"), b"#!sh\n").unwrap();
    std::fs::write(source.join("bin/ping"), b"ping").unwrap();
    std::os::unix::fs::symlink("sh", source.join("bin/ash")).unwrap();
    let config = dir.path().join("fs_config");
    std::fs::write(
        &config,
        " 0 0 0755\nbin 0 2000 0751\n/bin/sh 0 2000 0755 selabel=u:object_r:shell_exec:s0\n\
         bin/ping 0 3003 02750 capabilities=0x2000\nbin/ash 0 2000 0777\n\
         bin/sh 1000 2000 04750\n",
    )
    .unwrap();
    let contexts = dir.path().join("file_contexts");
    std::fs::write(
        &contexts,
        "# labels\n/(.*)?  u:object_r:rootfs:s0\n/bin/sh  u:object_r:shell_exec:s0\n\
         /bin(/.*)?  u:object_r:bin_file:s0\n/bin  -d  u:object_r:bin_dir:s0\n\
         /bin/ash  <<none>>\n",
    )
    .unwrap();
    let image = dir.path().join("fs.img");
    let out = e4(
        &[
            &"mkfs",
            &"-q",
            &"-j",
            &"2",
            &"--fs-config",
            &config,
            &"--file-contexts",
            &contexts,
            &"-d",
            &source,
            &image,
            &"32M",
        ],
        Some("1700000000"),
    );
    assert!(out.status.success(), "{}", stderr(&out));
    e2fsck_clean(&image).unwrap();
    // OK to compare with what e2fsdroid writes: revision 2 with the effective flag, bit 13
    // (CAP_NET_RAW) permitted.
    let capability = [
        1, 0, 0, 2, 0, 0x20, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    ];
    let want = [
        ("bin", (0, 2000, 0o751), None),
        ("bin/sh", (1000, 2000, 0o4750), None),
        ("bin/ping", (0, 3003, 0o2750), Some(&capability[..])),
        ("bin/ash", (0, 2000, 0o777), None),
    ];
    let labels = [
        ("", Some("u:object_r:rootfs:s0")),
        ("lost+found", Some("u:object_r:rootfs:s0")),
        ("bin", Some("u:object_r:bin_dir:s0")),
        ("bin/sh", Some("u:object_r:shell_exec:s0")),
        ("bin/ping", Some("u:object_r:bin_file:s0")),
        ("bin/ash", None),
    ];
    let label_value = |label: Option<&str>| label.map(|l| format!("{l}\0").into_bytes());
    match KernelMount::mount(&image) {
        Ok(mount) => {
            for (path, owner, caps) in want {
                let path = mount.path().join(path);
                let meta = std::fs::symlink_metadata(&path).unwrap();
                let got = (meta.uid(), meta.gid(), meta.mode() & 0o7777);
                assert_eq!(got, owner, "{}", path.display());
                let got = xattr::get(&path, "security.capability").unwrap();
                assert_eq!(got.as_deref(), caps, "{}", path.display());
            }
            for (path, label) in labels {
                let path = mount.path().join(path);
                let got = xattr::get(&path, "security.selinux").unwrap();
                assert_eq!(got, label_value(label), "{}", path.display());
            }
        }
        Err(reason) => {
            e4_testkit::kernel_comparison_skipped("--fs-config", &reason);
            let fs = e4_fs::Filesystem::open(&image, e4_fs::OpenOptions::default()).unwrap();
            for (path, owner, caps) in want {
                let ino = fs
                    .resolve_bytes(format!("/{path}").as_bytes(), false)
                    .unwrap();
                let meta = fs.metadata(ino).unwrap();
                let got = (meta.uid, meta.gid, u32::from(meta.permissions));
                assert_eq!(got, owner, "{path}");
                let got = fs.get_xattr(ino, b"security.capability").unwrap();
                assert_eq!(got.as_deref(), caps, "{path}");
            }
            for (path, label) in labels {
                let ino = fs
                    .resolve_bytes(format!("/{path}").as_bytes(), false)
                    .unwrap();
                let got = fs.get_xattr(ino, b"security.selinux").unwrap();
                assert_eq!(got, label_value(label), "{path}");
            }
        }
    }
    // A path with no line: one line naming it, exit 1, no image.
    std::fs::write(source.join("bin/extra"), b"").unwrap();
    std::fs::remove_file(&image).unwrap();
    let args: [&dyn AsRef<OsStr>; 9] = [
        &"mkfs",
        &"-q",
        &"--fs-config",
        &config,
        &"-d",
        &source,
        &image,
        &"32M",
        &"-F",
    ];
    let out = e4(&args, None);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.lines()
            .next()
            .unwrap()
            .contains("/bin/extra: not in the fs_config file"),
        "{err}"
    );
    assert!(!image.exists(), "a failed fill left its image");
    // A bad line: one line with its number, exit 2.
    std::fs::write(&config, "bin 0 0 0755\nbin/sh root 0 0755\n").unwrap();
    let out = e4(&args, None);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("line 2: UID is not a number"), "{err}");
}

fn read(path: &Path) -> Vec<u8> {
    std::fs::read(path).unwrap()
}

/// As with mke2fs, -O, -E and -J given more than once add up, and any other option given
/// twice takes its last value: the image is the one the combined options make.
#[test]
fn repeated_options_add_up_or_take_the_last_as_in_mke2fs() {
    let dir = tempfile::tempdir().unwrap();
    let (repeated, combined) = (dir.path().join("repeated"), dir.path().join("combined"));
    let out = e4(
        &[
            &"mkfs",
            &"-q",
            &"-O",
            &"^64bit",
            &"-O",
            &"^extent",
            &"-E",
            &"lazy_itable_init=0",
            &"-E",
            &"root_owner=5:6",
            &"-m",
            &"7",
            &"-m",
            &"1",
            &"-J",
            &"size=8",
            &"-J",
            &"size=4",
            &repeated,
            &"32M",
        ],
        Some("1700000000"),
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let out = e4(
        &[
            &"mkfs",
            &"-q",
            &"-O",
            &"^64bit,^extent",
            &"-E",
            &"lazy_itable_init=0,root_owner=5:6",
            &"-m",
            &"1",
            &"-J",
            &"size=4",
            &combined,
            &"32M",
        ],
        Some("1700000000"),
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        read(&repeated) == read(&combined),
        "repeated options made another image than their combined form"
    );
    e2fsck_clean(&repeated).unwrap();
}

#[test]
fn source_date_epoch_makes_the_same_empty_image() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b, c) = (
        dir.path().join("a"),
        dir.path().join("b"),
        dir.path().join("c"),
    );
    for path in [&a, &b] {
        let out = e4(&[&"mkfs", &"-q", path, &"16M"], Some("1700000000"));
        assert!(out.status.success(), "{}", stderr(&out));
    }
    assert!(
        read(&a) == read(&b),
        "the same SOURCE_DATE_EPOCH made different images"
    );
    let out = e4(&[&"mkfs", &"-q", &c, &"16M"], Some("1700000001"));
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        read(&a) != read(&c),
        "a different epoch made the same image (UUID not derived)"
    );
    e2fsck_clean(&a).unwrap();
}

/// The same tree made in name order (`forward`, under `dir`, which also holds the images)
/// and in reverse (`backward`), the second on tmpfs where there is one: its directories
/// list entries in creation order, where ext4's list them by hash, so the two walks meet
/// names in other orders.
struct Trees {
    dir: tempfile::TempDir,
    forward: PathBuf,
    backward: PathBuf,
    _other: tempfile::TempDir,
}

fn trees_in_both_orders() -> Trees {
    let dir = tempfile::tempdir().unwrap();
    let other = tempfile::tempdir_in("/dev/shm").unwrap_or_else(|_| tempfile::tempdir().unwrap());
    let (forward, backward) = (dir.path().join("forward"), other.path().join("backward"));
    std::fs::create_dir(&forward).unwrap();
    std::fs::create_dir(&backward).unwrap();
    ordered_tree(&forward, false);
    ordered_tree(&backward, true);
    Trees {
        dir,
        forward,
        backward,
        _other: other,
    }
}

/// A tree of directories, files (one sparse), a hard link, a symlink, a fifo and an xattr,
/// created in name order or in reverse (so the host's directory order and inode numbers
/// differ between the two).
fn ordered_tree(root: &Path, reverse: bool) {
    use std::os::unix::fs::FileExt;
    let mut dirs: Vec<usize> = (0..12).collect();
    if reverse {
        dirs.reverse();
    }
    for d in dirs {
        let dir = root.join(format!("d{d:02}"));
        std::fs::create_dir(&dir).unwrap();
        let mut files: Vec<usize> = (0..25).collect();
        if reverse {
            files.reverse();
        }
        for f in files {
            let len = (d * 7919 + f * 104_729) % 30_000;
            let bytes: Vec<u8> = (0..len).map(|i| (i * 31 + d + f) as u8).collect();
            std::fs::write(dir.join(format!("f{f:02}")), bytes).unwrap();
        }
    }
    let sparse = std::fs::File::create(root.join("sparse")).unwrap();
    sparse.write_all_at(b"end", 5 << 20).unwrap();
    std::fs::hard_link(root.join("d01/f01"), root.join("hard")).unwrap();
    std::os::unix::fs::symlink("d01/f02", root.join("sym")).unwrap();
    nix::unistd::mkfifo(
        &root.join("fifo"),
        nix::sys::stat::Mode::from_bits_truncate(0o644),
    )
    .unwrap();
    xattr::set(root.join("d02/f03"), "user.e4", b"value").unwrap();
    // Larger than one fill's write (1 MiB).
    let large: Vec<u8> = (0..3_000_000u32).map(|i| (i % 253) as u8).collect();
    std::fs::write(root.join("large"), large).unwrap();
    // More subdirectories in one directory than the helpers read ahead of the walk, each
    // a level deeper, with a symlink and an xattr read ahead.
    let mut nested: Vec<usize> = (0..70).collect();
    if reverse {
        nested.reverse();
    }
    for n in nested {
        let dir = root.join("nested").join(format!("n{n:02}")).join("inner");
        std::fs::create_dir_all(&dir).unwrap();
        std::os::unix::fs::symlink(format!("../{n}"), dir.join("link")).unwrap();
        std::fs::write(dir.join("file"), format!("{n}")).unwrap();
        xattr::set(dir.join("file"), "user.n", format!("{n}").as_bytes()).unwrap();
    }
    // A chain of directories deeper than the read-ahead's work list keeps directories
    // with subdirectories left to read (64), with a sibling directory at each level: the
    // work list drops the shallowest levels' siblings, which the walk reads itself.
    let mut level = root.join("chain");
    for depth in 0..70 {
        std::fs::create_dir_all(level.join("sibling")).unwrap();
        std::fs::write(level.join("sibling").join("file"), format!("{depth}")).unwrap();
        level.push("c");
    }
    std::fs::create_dir(&level).unwrap();
}

#[test]
fn source_date_epoch_makes_the_same_image_from_a_tree() {
    let Trees {
        dir,
        forward,
        backward,
        _other,
    } = trees_in_both_orders();
    let epoch = Some("1700000000");
    let images: Vec<_> = [
        (&forward, "1"),
        (&forward, "2"),
        (&forward, "4"),
        (&backward, "3"),
    ]
    .iter()
    .enumerate()
    .map(|(i, (source, threads))| {
        let image = dir.path().join(format!("{i}.img"));
        let out = e4(
            &[
                &"mkfs", &"-q", &"-j", threads, &"-d", source, &image, &"32M",
            ],
            epoch,
        );
        assert!(out.status.success(), "{}", stderr(&out));
        image
    })
    .collect();
    e2fsck_clean(&images[0]).unwrap();
    let first = read(&images[0]);
    assert!(
        first == read(&images[1]),
        "-j 1 and -j 2 made different images"
    );
    assert!(
        first == read(&images[2]),
        "-j 1 and -j 4 made different images"
    );
    assert!(
        first == read(&images[3]),
        "the same tree created in another order made a different image"
    );
}

/// Each path of `image` below its root with its inode number and, for a regular file, the
/// block its data starts at, in directory order (depth first).
fn placement(image: &Path) -> Vec<(Vec<u8>, u32, Option<u64>)> {
    let fs = e4_fs::Filesystem::open(image, e4_fs::OpenOptions::default()).unwrap();
    let mut placed = Vec::new();
    let mut stack = vec![(Vec::new(), 2)];
    while let Some((path, dir)) = stack.pop() {
        for entry in fs.read_dir(dir).unwrap() {
            if entry.name == b"." || entry.name == b".." {
                continue;
            }
            let child = [&path[..], b"/", &entry.name].concat();
            let meta = fs.metadata(entry.ino).unwrap();
            let first_block = match meta.file_type {
                e4_fs::FileType::Regular => {
                    let inode = fs.read_inode(entry.ino).unwrap();
                    match fs.map_block(&inode, 0, 1).unwrap() {
                        e4_fs::Mapping::Data { physical, .. } => Some(physical),
                        _ => None,
                    }
                }
                e4_fs::FileType::Directory => {
                    stack.push((child.clone(), entry.ino));
                    None
                }
                _ => None,
            };
            placed.push((child, entry.ino, first_block));
        }
    }
    placed
}

/// `e4 mkfs -d` without `SOURCE_DATE_EPOCH` walks in name order too, with helpers reading
/// ahead and filling (`ImportPolicy::ordered`: on two CPUs faster than parallel walkers):
/// whatever `-j` and the host's directory order, each path gets the same inode number and
/// its data the same blocks (the UUID and hash seed given, so directories list alike).
#[test]
fn without_source_date_epoch_the_walk_still_places_in_name_order() {
    let Trees {
        dir,
        forward,
        backward,
        _other,
    } = trees_in_both_orders();
    let uuid = "6f1d3c52-9a0e-4b7e-8c1a-2d4f5e6a7b8c";
    let seed = format!("hash_seed={uuid}");
    let placements: Vec<_> = [(&forward, "1"), (&forward, "3"), (&backward, "2")]
        .iter()
        .enumerate()
        .map(|(i, (source, threads))| {
            let image = dir.path().join(format!("{i}.img"));
            mkfs_from(source, &image, &["-j", threads, "-U", uuid, "-E", &seed]);
            placement(&image)
        })
        .collect();
    assert!(placements[0].len() > 500, "{} placed", placements[0].len());
    assert!(
        placements[0] == placements[1],
        "-j 1 and -j 3 placed entries apart"
    );
    assert!(
        placements[0] == placements[2],
        "the tree created in another order was placed apart"
    );
}

/// The (uid, gid) pairs of every entry of `image` but its root and lost+found, exported
/// under `dir` (as root, export gives each file its owner), and how many entries there were.
fn exported_owners(image: &Path, dir: &Path) -> (std::collections::BTreeSet<(u32, u32)>, usize) {
    use std::os::unix::fs::MetadataExt;
    let exported = dir.join("exported");
    let _ = std::fs::remove_dir_all(&exported);
    let out = e4(&[&"export", &image, &exported], None);
    assert!(out.status.success(), "e4 export: {}", stderr(&out));
    let mut stack = vec![exported.clone()];
    let mut owners = std::collections::BTreeSet::new();
    let mut seen = 0;
    while let Some(path) = stack.pop() {
        let meta = std::fs::symlink_metadata(&path).unwrap();
        if path != exported && !path.ends_with("lost+found") {
            owners.insert((meta.uid(), meta.gid()));
            seen += 1;
        }
        if meta.is_dir() && !path.ends_with("lost+found") {
            stack.extend(std::fs::read_dir(&path).unwrap().map(|e| e.unwrap().path()));
        }
    }
    (owners, seen)
}

/// `e4 mkfs -q -d source OPTIONS image 32M`, which must succeed, and its image e2fsck-clean.
fn mkfs_from(source: &Path, image: &Path, options: &[&str]) {
    let mut args: Vec<&dyn AsRef<OsStr>> = vec![&"mkfs", &"-q"];
    args.extend(options.iter().map(|o| o as &dyn AsRef<OsStr>));
    args.extend([&"-d" as &dyn AsRef<OsStr>, &source, &image, &"32M"]);
    let out = e4(&args, None);
    assert!(out.status.success(), "{options:?}: {}", stderr(&out));
    e2fsck_clean(image).unwrap();
}

#[test]
fn owner_gives_every_entry_one_owner() {
    let dir = tempfile::tempdir().unwrap();
    let source = dir.path().join("source");
    std::fs::create_dir(&source).unwrap();
    ordered_tree(&source, false);
    let image = dir.path().join("fs.img");
    mkfs_from(&source, &image, &["--owner", "1234:5678"]);
    let (owners, seen) = exported_owners(&image, dir.path());
    assert_eq!(owners, [(1234, 5678)].into());
    assert!(seen > 300, "only {seen} entries checked");
    let out = e4(&[&"mkfs", &"--owner", &"me", &image, &"32M"], None);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
}

/// `--uid-map` / `--gid-map` map host owners as a user namespace does: this process's
/// ids, inside a range, become the range's image ids; outside every range, 65534. A bad
/// map, or one beside `--owner`, is one line and exit 2.
#[test]
fn id_maps_give_owners_as_a_user_namespace_sees_them() {
    use std::os::unix::fs::MetadataExt;
    let dir = tempfile::tempdir().unwrap();
    let source = dir.path().join("source");
    std::fs::create_dir(&source).unwrap();
    ordered_tree(&source, false);
    let host = std::fs::metadata(&source).unwrap();
    let (uid, gid) = (host.uid(), host.gid());
    let image = dir.path().join("fs.img");
    let uid_map = format!("7:{}:3,1000:{uid}:1", u64::from(uid) + 1);
    let gid_map = format!("2000:{gid}:1");
    mkfs_from(
        &source,
        &image,
        &["--uid-map", &uid_map, "--gid-map", &gid_map],
    );
    let (owners, seen) = exported_owners(&image, dir.path());
    assert_eq!(owners, [(1000, 2000)].into());
    assert!(seen > 300, "only {seen} entries checked");
    // This process's uid in no range, its gid kept (no gid map).
    let unmapped = format!("0:{}:5", u64::from(uid) + 1);
    mkfs_from(&source, &image, &["-F", "--uid-map", &unmapped]);
    assert_eq!(exported_owners(&image, dir.path()).0, [(65534, gid)].into());
    for (bad, with_source, said) in [
        (
            &["--uid-map", "0:1000"][..],
            true,
            "is not INSIDE:OUTSIDE:COUNT",
        ),
        (&["--gid-map", "0:100:10,5:200:1"], true, "overlap"),
        (
            &["--owner", "1:1", "--uid-map", "0:0:1"],
            true,
            "cannot be used with",
        ),
        (&["--uid-map", "0:0:1"], false, "-d <SOURCE>"),
    ] {
        let mut args: Vec<&dyn AsRef<OsStr>> = vec![&"mkfs", &"-q", &"-F"];
        args.extend(bad.iter().map(|o| o as &dyn AsRef<OsStr>));
        if with_source {
            args.extend([&"-d" as &dyn AsRef<OsStr>, &source]);
        }
        args.extend([&image as &dyn AsRef<OsStr>, &"32M"]);
        let out = e4(&args, None);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{bad:?}: {err}");
        assert!(err.contains(said), "{bad:?}: {err}");
    }
}

#[test]
fn without_size_the_image_is_sized_to_the_tree() {
    let dir = tempfile::tempdir().unwrap();
    let source = dir.path().join("source");
    std::fs::create_dir(&source).unwrap();
    ordered_tree(&source, false);
    std::fs::write(source.join("large"), vec![3u8; 6 << 20]).unwrap();
    for margin in ["0", "10"] {
        let image = dir.path().join(format!("fit-{margin}.img"));
        let out = e4(
            &[&"mkfs", &"-q", &"--margin", &margin, &"-d", &source, &image],
            None,
        );
        assert!(out.status.success(), "--margin {margin}: {}", stderr(&out));
        e2fsck_clean(&image).unwrap();
        let exported = dir.path().join(format!("exported-{margin}"));
        let out = e4(&[&"export", &image, &exported], None);
        assert!(out.status.success(), "e4 export: {}", stderr(&out));
        let diffs = compare_trees(&source, &exported, &tree_options());
        assert!(diffs.is_empty(), "--margin {margin}: {diffs:#?}");
        // The tree holds about 10 MiB of data; the image is not many times that.
        let size = std::fs::metadata(&image).unwrap().len();
        assert!(size <= 32 << 20, "--margin {margin}: a {size}-byte image");
    }
}

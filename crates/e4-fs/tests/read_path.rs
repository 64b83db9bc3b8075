//! The read path under load: htree lookups read O(depth) blocks, many threads share one
//! handle and read the same bytes the source tree holds, and feature gating refuses what
//! e4 cannot read.

use std::path::Path;
use std::sync::Arc;

use e4_format::superblock::{Superblock, SUPERBLOCK_OFFSET};
use e4_format::MetadataBlock;
use e4_fs::device::{Fault, FaultyDevice, FileDevice};
use e4_fs::{Error, Filesystem, OpenOptions};
use e4_testkit::{e2fsck_clean, full_source_tree, make_image, Image, TreeSpec, PROFILES};
use rand::{Rng, SeedableRng};

fn image(profile: &str) -> Image {
    let p = PROFILES.iter().find(|p| p.name == profile).unwrap();
    make_image(full_source_tree(), p, 256, 32768)
}

#[test]
fn htree_lookup_reads_depth_blocks_and_finds_every_name() {
    // 1 KiB blocks make the 20,000-entry directory a two-level htree.
    let img = image("ext4-1k");
    let device = Arc::new(FaultyDevice::new(
        FileDevice::open(&img.path, false).unwrap(),
        Fault::Never,
    ));
    let fs = Filesystem::open_device(device.clone(), OpenOptions::default()).unwrap();
    let reads = || device.counts().0;
    let dir_ino = fs.resolve("/big_dir", true).unwrap();
    let dir = fs.read_inode(dir_ino).unwrap();
    assert!(
        dir.has_flag(e4_format::inode::flags::INDEX),
        "big_dir should be indexed"
    );
    let dir_blocks = dir.size() / u64::from(fs.block_size());
    assert!(dir_blocks > 500, "big_dir has only {dir_blocks} blocks");

    let before = reads();
    assert!(fs.lookup(dir.ino, b"needle").unwrap().is_some());
    let used = reads() - before;
    // Root, one interior node, one leaf, and at most two extent-tree blocks.
    assert!(
        used <= 5,
        "lookup read {used} blocks of a {dir_blocks}-block directory"
    );

    // Every listed name is found by the index, with the same inode.
    let entries = fs.read_dir(dir.ino).unwrap();
    assert_eq!(entries.len(), TreeSpec::full().big_dir_entries + 1);
    for entry in &entries {
        assert_eq!(
            fs.lookup(dir.ino, &entry.name).unwrap(),
            Some(entry.ino),
            "{:?}",
            String::from_utf8_lossy(&entry.name)
        );
    }
    for missing in [&b"entry_999999_"[..], b"needle2", b"x"] {
        assert_eq!(fs.lookup(dir.ino, missing).unwrap(), None);
    }
    let names: Vec<Vec<u8>> = entries.into_iter().map(|e| e.name).collect();
    for node in [false, true] {
        index_hashes_out_of_order_fail_lookups(&img, &fs, &dir, node, &names);
    }
}

/// With two hashes of an index block (the root, or with `node` the root's first child, an
/// interior node of this two-level tree) swapped and its checksum sealed again, so that only the order is
/// wrong: a lookup whose way passes the block would binary-search entries out of order and
/// could miss a name that is there (and a create then add it twice). Every such lookup
/// fails naming the block instead, on the first look and on every look after (the order is
/// checked once per block read, when the cache verifies it); none answers wrongly.
fn index_hashes_out_of_order_fail_lookups(
    img: &Image,
    fs: &Filesystem,
    dir: &e4_format::inode::Inode,
    node: bool,
    names: &[Vec<u8>],
) {
    use e4_format::dir_htree::DxNode;
    let bs = fs.block_size() as usize;
    let mut bytes = std::fs::read(&img.path).unwrap();
    let physical_of = |logical| match fs.map_block(dir, logical, 1).unwrap() {
        e4_fs::Mapping::Data { physical, .. } => physical,
        hole => panic!("directory block {logical} is {hole:?}"),
    };
    let root = physical_of(0) as usize * bs;
    // The root's entries start after ".", ".." and dx_root_info (0x20), with the first
    // entry's block at 0x24; a node's after its empty record (8).
    assert_eq!(bytes[root + 0x1e], 1, "the root has one interior level");
    let first_child = u32::from_le_bytes(bytes[root + 0x24..root + 0x28].try_into().unwrap());
    let (logical, entries) = if node {
        (u64::from(first_child & 0x0fff_ffff), 8)
    } else {
        (0, 0x20)
    };
    let physical = physical_of(logical);
    let block = &mut bytes[physical as usize * bs..][..bs];
    // Entries 2 and 3 (hash and block) trade places.
    let count = u16::from_le_bytes([block[entries + 2], block[entries + 3]]) as usize;
    assert!(count >= 4, "index block {logical} has {count} entries");
    let (second, third) = (entries + 16, entries + 24);
    let mut swapped = [0u8; 8];
    swapped.copy_from_slice(&block[second..second + 8]);
    block.copy_within(third..third + 8, second);
    block[third..third + 8].copy_from_slice(&swapped);
    let seed = e4_format::checksum::inode_csum_seed(
        fs.superblock().csum_seed(),
        dir.ino,
        dir.record.generation,
    );
    DxNode::seal(block, seed);
    let damaged = img.path.with_extension(format!("order{logical}.img"));
    std::fs::write(&damaged, &bytes).unwrap();

    // Checked with and without checksums (the verifier's two ways).
    for verify_checksums in [true, false] {
        let options = OpenOptions {
            verify_checksums,
            ..OpenOptions::default()
        };
        let fs = Filesystem::open(&damaged, options).unwrap();
        refuses_or_finds(&fs, dir.ino, physical, names);
    }
    std::fs::remove_file(&damaged).unwrap();
}

/// Looks every name up twice in `dir`: found, or refused for index block `physical`'s
/// order; at least one refused.
fn refuses_or_finds(fs: &Filesystem, dir: u32, physical: u64, names: &[Vec<u8>]) {
    let mut refused = 0;
    for _pass in 0..2 {
        for name in names {
            match fs.lookup(dir, name) {
                Ok(found) => assert!(
                    found.is_some(),
                    "{:?} missed",
                    String::from_utf8_lossy(name)
                ),
                Err(e) => {
                    let text = e.to_string();
                    assert!(text.contains("hashes out of order"), "{text}");
                    assert!(text.contains(&physical.to_string()), "{text}");
                    refused += 1;
                }
            }
        }
    }
    assert!(refused > 0, "no lookup passed index block {physical}");
}

/// Three claims on one image of the default profile, made once: each image takes about 30 s
/// to make (mke2fs -d fills its 20,000-entry directory one entry at a time), and CI's budget
/// is short. Each claim is its own function, named in a failure's backtrace.
#[test]
fn the_default_profile_image_under_load() {
    let img = image("ext4-default-4k");
    path_resolution(&img);
    caller_mistakes_are_not_corruption(&img);
    many_threads_share_one_handle(&img);
}

fn path_resolution(img: &Image) {
    let fs = Filesystem::open(&img.path, OpenOptions::default()).unwrap();
    let small = fs.resolve("/small.txt", true).unwrap();
    assert_eq!(fs.resolve("small.txt", true).unwrap(), small);
    assert_eq!(fs.resolve("//names/../small.txt", true).unwrap(), small);
    assert_eq!(fs.resolve("/link_fast", true).unwrap(), small);
    assert_eq!(fs.resolve("/link_absolute", true).unwrap(), small);
    assert_ne!(fs.resolve("/link_fast", false).unwrap(), small);
    let deep = fs.resolve("/link_dir/level01/level02", true).unwrap();
    assert_eq!(
        fs.resolve("/deep/level00/level01/level02", true).unwrap(),
        deep
    );
    assert!(matches!(
        fs.resolve("/loop_a", true),
        Err(Error::SymlinkLoop(_))
    ));
    assert!(fs.resolve("/loop_a", false).is_ok());
    assert!(matches!(
        fs.resolve("/link_dangling", true),
        Err(Error::NotFound(_))
    ));
    assert!(matches!(
        fs.resolve("/small.txt/x", true),
        Err(Error::NotADirectory(_))
    ));
    assert_eq!(fs.resolve("/", true).unwrap(), e4_format::inode::ROOT_INO);
}

/// A caller's mistake is an errno-style error, never a report of a corrupt image: the checker
/// and the CLI must be able to tell "you asked wrongly" from "the disk is damaged".
fn caller_mistakes_are_not_corruption(img: &Image) {
    let fs = Filesystem::open(&img.path, OpenOptions::default()).unwrap();
    let small = fs.resolve("/small.txt", true).unwrap();
    let dir = fs.resolve("/names", true).unwrap();
    assert!(matches!(fs.read_link(small), Err(Error::WrongType { .. })));
    assert!(matches!(fs.read_link(dir), Err(Error::WrongType { .. })));
    assert!(matches!(fs.read_dir(small), Err(Error::NotADirectory(_))));
    assert!(matches!(
        fs.lookup(small, b"x"),
        Err(Error::NotADirectory(_))
    ));
    assert!(matches!(fs.read_file(small, 1), Err(Error::FileTooBig(_))));
    let past_the_end = fs.superblock().inodes_count + 1;
    for ino in [0, past_the_end, u32::MAX] {
        assert!(matches!(fs.metadata(ino), Err(Error::Invalid(_))), "{ino}");
        assert!(matches!(fs.read_link(ino), Err(Error::Invalid(_))), "{ino}");
        assert!(matches!(fs.read_dir(ino), Err(Error::Invalid(_))), "{ino}");
        assert!(matches!(
            fs.get_xattr(ino, b"user.x"),
            Err(Error::Invalid(_))
        ));
    }
    e2fsck_clean(&img.path).unwrap();
}

fn many_threads_share_one_handle(img: &Image) {
    let fs = Arc::new(
        Filesystem::open(
            &img.path,
            OpenOptions {
                cache_bytes: 1 << 20,
                ..Default::default()
            },
        )
        .unwrap(),
    );
    let files = [
        "large.bin",
        "small.txt",
        "sparse_middle",
        "sparse_leading",
        "block_exact",
        "names/héllo wörld",
    ];
    std::thread::scope(|s| {
        for t in 0..32u64 {
            let fs = Arc::clone(&fs);
            s.spawn(move || {
                let mut rng = rand::rngs::StdRng::seed_from_u64(t);
                for _ in 0..40 {
                    let name = files[rng.gen_range(0..files.len())];
                    let expected = std::fs::read(full_source_tree().join(name)).unwrap();
                    let inode = fs
                        .read_inode(fs.resolve(&format!("/{name}"), true).unwrap())
                        .unwrap();
                    let start = rng.gen_range(0..=expected.len());
                    let mut buf = vec![0u8; rng.gen_range(0..200_000)];
                    let n = fs.read_at(inode.ino, start as u64, &mut buf).unwrap();
                    assert_eq!(
                        &buf[..n],
                        &expected[start..(start + n).min(expected.len())],
                        "{name} at {start}"
                    );
                    assert_eq!(n, buf.len().min(expected.len() - start));
                    let i = rng.gen_range(0..TreeSpec::full().big_dir_entries);
                    let entry = format!("/big_dir/entry_{i:06}_{}", "z".repeat(i % 40));
                    fs.resolve(&entry, true).unwrap();
                }
            });
        }
    });
}

/// Rewrites the superblock of a copy of `image` with `edit` applied.
fn with_superblock_edit(image: &Path, edit: impl FnOnce(&mut Superblock)) -> Vec<u8> {
    let mut bytes = std::fs::read(image).unwrap();
    let at = SUPERBLOCK_OFFSET as usize;
    let raw = &mut bytes[at..at + Superblock::SIZE];
    let mut sb = Superblock::decode_checked(raw).unwrap();
    edit(&mut sb);
    // OK to unwrap: the slice is the superblock's size.
    sb.encode(raw.try_into().unwrap());
    Superblock::seal(raw, ());
    bytes
}

#[test]
fn feature_gating() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("f"), b"x").unwrap();
    let p = PROFILES
        .iter()
        .find(|p| p.name == "ext4-default-4k")
        .unwrap();
    let img = make_image(dir.path(), p, 8, 128);
    e2fsck_clean(&img.path).unwrap();

    let unknown_incompat = with_superblock_edit(&img.path, |sb| sb.feature_incompat |= 1 << 24);
    let err = Filesystem::open_bytes(unknown_incompat, OpenOptions::default())
        .err()
        .unwrap();
    assert!(matches!(err, Error::Format(_)));
    assert!(err.to_string().contains("FEATURE_I24"), "{err}");

    let casefold = with_superblock_edit(&img.path, |sb| sb.feature_incompat |= 0x20000);
    let err = Filesystem::open_bytes(casefold, OpenOptions::default())
        .err()
        .unwrap();
    assert!(err.to_string().contains("casefold"), "{err}");

    // needs_recovery with an empty log: nothing to replay, as the kernel finds it (a log
    // to replay is the journal tests' subject, crates/e4-fs/tests/journal_recovery.rs).
    let recover = with_superblock_edit(&img.path, |sb| sb.feature_incompat |= 0x4);
    let fs = Filesystem::open_bytes(recover, OpenOptions::default()).unwrap();
    assert_eq!(
        fs.read_file(fs.resolve("/f", true).unwrap(), 10).unwrap(),
        b"x"
    );

    let unknown_ro = with_superblock_edit(&img.path, |sb| sb.feature_ro_compat |= 1 << 30);
    let fs = Filesystem::open_bytes(unknown_ro, OpenOptions::default()).unwrap();
    assert!(fs.read_only_reason().unwrap().contains("FEATURE_R30"));
    assert_eq!(
        fs.read_file(fs.resolve("/f", true).unwrap(), 10).unwrap(),
        b"x"
    );

    let mut bad_csum = std::fs::read(&img.path).unwrap();
    bad_csum[SUPERBLOCK_OFFSET as usize + 0x78] ^= 1; // volume name, covered by the checksum
    let err = Filesystem::open_bytes(bad_csum, OpenOptions::default())
        .err()
        .unwrap();
    assert_eq!(
        err.to_string().split(" (").next().unwrap(),
        "superblock at byte 1024 has an invalid checksum"
    );
}

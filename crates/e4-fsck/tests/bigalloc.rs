//! bigalloc (issue 24) against `e2fsck -fn`: images made with `mke2fs -O bigalloc -C 16384`
//! (4 KiB blocks, 4 to a cluster; 1 KiB blocks, 16 to a cluster) and filled with debugfs,
//! clean and then damaged in each of the ways cluster accounting can go wrong: a block
//! bitmap bit, a group's free cluster count, the superblock's free block count, a cluster
//! claimed by two files (at the same block and at another block of it), `i_blocks`, the
//! kernel's allowed sharing of a cluster between extents of one file, a logical cluster
//! spread over two physical ones, and a block map. Both checkers must give the same exit
//! status and the same problem classes, at 1 and 4 threads alike.

mod common;

use std::path::Path;
use std::process::Command;

use e4_fsck::ProblemCode;
use e4_testkit::{make_empty_image, Image, KernelMount};

use common::flips::assert_random_flips_agree;
use common::{assert_exit, bmap, debugfs, forced_check, run_debugfs};

/// Bytes in a cluster of the images here.
const CLUSTER_BYTES: usize = 16384;

/// Makes a bigalloc image of `block_size` bytes per block and fills it: `/f1` of three
/// clusters and a block (a partly used last cluster), `/f2` of one block with an xattr
/// block, `/d` holding 40 files, `/frag`, whose extents fill the holes left between
/// files (an extent tree with an index node), `/four`, one whole cluster, and `/sl`, a
/// fast symlink with an xattr block (its `i_blocks` a whole cluster, so not a sign of a
/// block map).
fn filled_image(block_size: u32) -> Image {
    filled_image_with(block_size, "bigalloc")
}

/// As [`filled_image`], with the features `features` (bigalloc among them).
fn filled_image_with(block_size: u32, features: &str) -> Image {
    let image = make_empty_image(
        &[
            "-t",
            "ext4",
            "-b",
            &block_size.to_string(),
            "-O",
            features,
            "-C",
            &CLUSTER_BYTES.to_string(),
        ],
        32,
    );
    let host = tempfile::tempdir().unwrap();
    let file = |name: &str, len: usize| {
        let path = host.path().join(name);
        let bytes: Vec<u8> = (0..len).map(|i| (i * 7 + len) as u8).collect();
        std::fs::write(&path, bytes).unwrap();
        path.display().to_string()
    };
    let cluster = file("cluster", CLUSTER_BYTES);
    let f1 = file("f1", 3 * CLUSTER_BYTES + block_size as usize);
    let f2 = file("f2", 3000);
    let frag = file("frag", 12 * CLUSTER_BYTES);
    let xattr = file("xattr", 600);
    let mut commands = vec![
        format!("write {f1} f1"),
        format!("write {f2} f2"),
        format!("ea_set -f {f2} f2 user.big"),
        "mkdir d".to_string(),
        format!("write {cluster} four"),
        "symlink sl target".to_string(),
        format!("ea_set -f {xattr} sl user.big"),
    ];
    commands.extend((0..40).map(|i| format!("write {f2} d/file{i}")));
    commands.extend((0..24).map(|i| format!("write {cluster} hole{i}")));
    commands.extend((0..24).step_by(2).map(|i| format!("rm hole{i}")));
    commands.push(format!("write {frag} frag"));
    run_debugfs(&image.path, &commands);
    image
}

/// Rewrites the extent tree in `path`'s `i_block` as the leaf `extents` (logical,
/// length, physical), through debugfs so that the inode's checksum stays right.
fn set_extents(image: &Path, path: &str, extents: &[(u32, u32, u64)]) {
    let mut words = vec![
        0xF30A | (extents.len() as u32) << 16,
        4, // eh_max 4, depth 0
        0,
    ];
    for &(logical, len, physical) in extents {
        words.extend([
            logical,
            len | ((physical >> 32) as u32) << 16,
            physical as u32,
        ]);
    }
    let commands: Vec<String> = (0..15)
        .map(|i| {
            let word = words.get(i).copied().unwrap_or(0);
            format!("sif {path} block[{i}] {word}")
        })
        .collect();
    run_debugfs(image, &commands);
}

#[test]
fn clean_bigalloc_images_agree() {
    for block_size in [4096, 1024] {
        let image = filled_image(block_size);
        let what = format!("{block_size}-byte blocks");
        assert!(assert_exit(&image.path, &what, 0).is_empty(), "{what}");
        let depth = debugfs(&image.path, "ex frag");
        assert!(
            depth.contains("1/ 1"),
            "{what}: /frag has no index node:\n{depth}"
        );
    }
    // meta_bg with 1 KiB blocks: group 0's descriptor block follows the boot block and
    // the superblock.
    let image = filled_image_with(1024, "bigalloc,^resize_inode,meta_bg");
    assert!(assert_exit(&image.path, "meta_bg", 0).is_empty());
    // Quota usage is counted in whole clusters. debugfs does not keep the quota files,
    // so e2fsck brings them up to date before the comparison.
    let image = filled_image_with(4096, "bigalloc,quota,project");
    let out = Command::new("timeout")
        .arg("60")
        .arg(e4_testkit::tool("e2fsck"))
        .arg("-fy")
        .arg(&image.path)
        .output()
        .unwrap();
    assert!(
        out.status.code().is_some_and(|c| c <= 1),
        "e2fsck -fy: {out:?}"
    );
    assert!(assert_exit(&image.path, "quota", 0).is_empty());
}

#[test]
fn cluster_accounting_damage_agrees() {
    use ProblemCode::*;
    // (what, damage, e2fsck's exit status, a code e4 must report)
    type Damage = fn(&Path, u32);
    let cases: &[(&str, Damage, i32, ProblemCode)] = &[
        (
            "a used cluster's bitmap bit cleared",
            |img, _| {
                let block = bmap(img, "f1", 4);
                debugfs(img, &format!("freeb {block}"));
            },
            4,
            PR_5_BLOCK_USED,
        ),
        (
            "a group's free cluster count",
            |img, _| {
                debugfs(img, "set_bg 0 free_blocks_count 17");
            },
            4,
            PR_5_FREE_BLOCK_COUNT_GROUP,
        ),
        (
            "the superblock's free block count",
            |img, _| {
                debugfs(img, "ssv free_blocks_count 1000");
            },
            0,
            PR_5_FREE_BLOCK_COUNT,
        ),
        (
            "a cluster claimed by two files at its first block",
            |img, _| {
                let block = bmap(img, "f1", 0);
                set_extents(img, "f2", &[(0, 1, block)]);
            },
            4,
            PR_1B_DUP_BLOCK,
        ),
        (
            "the unused blocks of a file's last cluster claimed by another",
            |img, _| {
                // f1's block 12 (or 48) opens its last cluster; the next block is free
                // within that cluster, but the cluster is f1's.
                let ratio = CLUSTER_BYTES as u64 / u64::from(block_size_of(img));
                let block = bmap(img, "f1", 3 * ratio) + 1;
                set_extents(img, "f2", &[(1, 1, block)]);
            },
            4,
            PR_1B_DUP_BLOCK,
        ),
        (
            "i_blocks one block short",
            |img, block_size| {
                let sectors = 4 * CLUSTER_BYTES as u32 / 512 - block_size / 512;
                debugfs(img, &format!("sif f1 blocks {sectors}"));
            },
            4,
            PR_1_BAD_I_BLOCKS,
        ),
        (
            "a logical cluster spread over two physical clusters",
            |img, _| {
                let ratio = CLUSTER_BYTES as u64 / u64::from(block_size_of(img));
                let first = bmap(img, "four", 0);
                let other = bmap(img, "f1", 0);
                set_extents(
                    img,
                    "four",
                    &[(0, 1, first), (1, 1, other + 1), (2, 2, first + 2)],
                );
                assert!(ratio >= 4);
            },
            4,
            PR_1_MISALIGNED_CLUSTER,
        ),
        (
            "a block map under bigalloc",
            |img, _| {
                let first = bmap(img, "four", 0);
                run_debugfs(
                    img,
                    &[
                        "sif four flags 0".to_string(),
                        format!("sif four block[0] {first}"),
                        format!("sif four block[1] {}", first + 1),
                        format!("sif four block[2] {}", first + 2),
                        format!("sif four block[3] {}", first + 3),
                        "sif four block[4] 0".to_string(),
                        "sif four block[5] 0".to_string(),
                    ],
                );
            },
            4,
            PR_1_NO_BIGALLOC_BLOCKMAP_FILES,
        ),
    ];
    for block_size in [4096, 1024] {
        for &(what, damage, expected, code) in cases {
            let image = filled_image(block_size);
            damage(&image.path, block_size);
            let what = format!("{what} ({block_size}-byte blocks)");
            let codes = assert_exit(&image.path, &what, expected);
            assert!(codes.contains(&code), "{what}: {code:?} not in {codes:?}");
        }
    }
}

/// Extents of one file sharing clusters as the kernel makes them: two extents in one
/// cluster, and a hole inside a cluster. Both are sound.
#[test]
fn extents_sharing_a_cluster_are_sound() {
    for block_size in [4096, 1024] {
        let image = filled_image(block_size);
        let first = bmap(&image.path, "four", 0);
        set_extents(&image.path, "four", &[(0, 2, first), (2, 2, first + 2)]);
        assert_exit(&image.path, "one cluster in two extents", 0);
        set_extents(&image.path, "four", &[(0, 1, first), (3, 1, first + 3)]);
        assert_exit(&image.path, "a hole inside a cluster", 0);
    }
}

fn block_size_of(image: &Path) -> u32 {
    common::block_size(image) as u32
}

/// Random bit flips in the tables, bitmaps and the files' blocks (extent nodes included)
/// of both bigalloc images: the same verdict as e2fsck, no panic, no hang.
#[test]
fn random_flips_in_bigalloc_images() {
    for (block_size, seed) in [(4096, 24), (1024, 25)] {
        let image = filled_image(block_size);
        let damaged =
            assert_random_flips_agree(&image.path, &["f1", "f2", "d", "frag"], 48, 40, seed);
        assert!(damaged > 0, "{block_size}: no round damaged anything");
    }
}

/// Images the kernel wrote, where its cluster rules matter: files written at scattered
/// offsets (several extents in one cluster, holes inside clusters), holes punched,
/// files truncated and unlinked, a directory of 200 files, under 4 KiB blocks with
/// 16 KiB clusters and 1 KiB blocks with 64 KiB clusters. Both checkers find each clean.
#[test]
fn kernel_written_bigalloc_images_are_clean() {
    use rand::{Rng, SeedableRng};
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::FileExt;
    for (block_size, cluster) in [("4096", "16384"), ("1024", "65536")] {
        let image = make_empty_image(
            &[
                "-t", "ext4", "-b", block_size, "-O", "bigalloc", "-C", cluster,
            ],
            64,
        );
        let mut rng = rand::rngs::StdRng::seed_from_u64(29);
        {
            let Ok(mount) = KernelMount::mount_writable(&image.path) else {
                return;
            };
            let root = mount.path();
            for i in 0..40 {
                let path = root.join(format!("f{i}"));
                let file = std::fs::File::create(&path).unwrap();
                for _ in 0..rng.gen_range(1..12) {
                    let data = vec![i as u8; rng.gen_range(1..20_000)];
                    file.write_all_at(&data, rng.gen_range(0..400_000)).unwrap();
                }
                if rng.gen_bool(0.5) {
                    file.sync_all().unwrap();
                    for _ in 0..rng.gen_range(1..4) {
                        // SAFETY: an open descriptor and plain integers.
                        let rc = unsafe {
                            libc::fallocate(
                                file.as_raw_fd(),
                                libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                                rng.gen_range(0..300_000),
                                rng.gen_range(1..50_000),
                            )
                        };
                        assert_eq!(rc, 0, "punching a hole");
                    }
                }
                if rng.gen_bool(0.3) {
                    file.set_len(rng.gen_range(0..200_000)).unwrap();
                }
            }
            std::fs::create_dir(root.join("dir")).unwrap();
            for i in 0..200 {
                let data = vec![b'z'; rng.gen_range(0..5000)];
                std::fs::write(root.join("dir").join(format!("n{i}")), data).unwrap();
            }
            for i in (0..40).step_by(3) {
                std::fs::remove_file(root.join(format!("f{i}"))).unwrap();
            }
        }
        let what = format!("kernel-written, {block_size}-byte blocks, {cluster}-byte clusters");
        // e2fsck may suggest a shallower extent tree after the punches (pass 1E's notes,
        // "could be shorter", not an error): e4 must note the same trees.
        let out = Command::new("timeout")
            .arg("60")
            .arg(e4_testkit::tool("e2fsck"))
            .arg("-fn")
            .arg(&image.path)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        let is_note = |l: &str| l.contains("could be shorter") || l.contains("could be narrower");
        let findings: Vec<&str> = text
            .lines()
            .filter(|l| !l.starts_with("Pass ") && !l.trim().is_empty())
            .filter(|l| !is_note(l))
            .filter(|l| !l.contains(" files ("))
            .collect();
        assert_eq!(out.status.code(), Some(0), "{what}: e2fsck\n{text}");
        assert!(findings.is_empty(), "{what}: e2fsck found\n{text}");
        // "Inode 37 extent tree (at level 1) could be shorter.  Optimize? no"
        let theirs: Vec<String> = text
            .lines()
            .filter(|l| is_note(l))
            .map(|l| l.split('.').next().unwrap().to_lowercase())
            .collect();
        let report = forced_check(&image.path, Some(2));
        assert_eq!(report.exit_code(), 0, "{what}: e4");
        let ours: Vec<String> = report
            .problems
            .iter()
            .map(|p| p.message.to_string())
            .collect();
        assert_eq!(ours, theirs, "{what}: e4's notes against e2fsck's\n{text}");
    }
}

//! Corrupted images are bad input, never a crash: flip random bytes in the metadata of small
//! images made by mke2fs, thousands of times, and walk each result completely (every
//! directory, lookup, attribute, link and file). Errors are expected; a panic fails the test.
//! Half the cases open with checksum verification off, so the parsers behind the checksums
//! see the damage too.

use std::collections::HashSet;
use std::panic::{catch_unwind, AssertUnwindSafe};

use e4_fs::{FileType, Filesystem, Mapping, OpenOptions};
use e4_testkit::{generate_tree, make_image, walk_everything, TreeSpec, PROFILES};
use rand::{Rng, SeedableRng};

/// Mutated images in total, spread over the profiles. `E4_CORRUPTION_CASES` raises it for
/// longer local runs.
fn mutations() -> usize {
    std::env::var("E4_CORRUPTION_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000)
}
/// Profiles mutated: checksummed ext4 (1 KiB blocks, so the big directory has an htree),
/// inline data, block-mapped ext3 with a journal, and ext2.
const PROFILE_NAMES: &[&str] = &["ext4-1k", "ext4-inline-data", "ext3", "ext2"];

/// Blocks holding metadata: every non-zero block that is not regular-file data.
fn metadata_blocks(image: &[u8], block_size: usize) -> Vec<usize> {
    let fs = Filesystem::open_bytes(image.to_vec(), OpenOptions::default()).unwrap();
    let mut data = HashSet::new();
    let mut queue = vec![e4_format::inode::ROOT_INO];
    let mut seen = HashSet::new();
    while let Some(ino) = queue.pop() {
        if !seen.insert(ino) {
            continue;
        }
        let inode = fs.read_inode(ino).unwrap();
        match inode.file_type() {
            Some(FileType::Directory) => {
                queue.extend(fs.read_dir(ino).unwrap().into_iter().map(|e| e.ino));
            }
            Some(FileType::Regular) if !inode.has_flag(e4_format::inode::flags::INLINE_DATA) => {
                let blocks = inode.size().div_ceil(block_size as u64);
                let mut logical = 0;
                while logical < blocks {
                    match fs.map_block(&inode, logical, blocks - logical).unwrap() {
                        Mapping::Data { physical, len, .. } => {
                            data.extend(physical..physical + len);
                            logical += len;
                        }
                        Mapping::Hole { len } => logical += len,
                    }
                }
            }
            _ => {}
        }
    }
    (0..image.len() / block_size)
        .filter(|b| !data.contains(&(*b as u64)))
        .filter(|b| {
            image[b * block_size..(b + 1) * block_size]
                .iter()
                .any(|&x| x != 0)
        })
        .collect()
}

#[test]
fn mutated_images_never_panic() {
    let src = tempfile::tempdir().unwrap();
    generate_tree(src.path(), &TreeSpec::small());
    let mut panics = Vec::new();
    let mut walked_clean = 0;
    let per_profile = mutations() / PROFILE_NAMES.len();
    for (p, name) in PROFILE_NAMES.iter().enumerate() {
        let profile = PROFILES.iter().find(|x| x.name == *name).unwrap();
        let image = make_image(src.path(), profile, 16, 1024);
        let pristine = std::fs::read(&image.path).unwrap();
        let block_size = Filesystem::open_bytes(pristine.clone(), OpenOptions::default())
            .unwrap()
            .block_size() as usize;
        let targets = metadata_blocks(&pristine, block_size);
        assert!(targets.len() > 10, "{name}: too few metadata blocks found");
        // Keep panics quiet while they are being counted.
        std::panic::set_hook(Box::new(|_| {}));
        for case in 0..per_profile {
            let seed = (p * per_profile + case) as u64;
            let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
            let mut bytes = pristine.clone();
            for _ in 0..rng.gen_range(1..=8) {
                let block = targets[rng.gen_range(0..targets.len())];
                let at = block * block_size + rng.gen_range(0..block_size);
                bytes[at] = match rng.gen_range(0..3) {
                    0 => bytes[at] ^ (1 << rng.gen_range(0..8)),
                    1 => rng.gen(),
                    _ => [0x00, 0xFF, 0x7F, 0x80][rng.gen_range(0..4)],
                };
            }
            let options = OpenOptions {
                verify_checksums: case % 2 == 0,
                cache_bytes: 1 << 20,
                ..OpenOptions::default()
            };
            let outcome = catch_unwind(AssertUnwindSafe(|| {
                Filesystem::open_bytes(bytes, options).map(|fs| walk_everything(&fs))
            }));
            match outcome {
                Err(payload) => {
                    let msg = payload
                        .downcast_ref::<String>()
                        .cloned()
                        .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
                        .unwrap_or_default();
                    panics.push(format!("{name} seed {seed}: {msg}"));
                }
                Ok(Ok(n)) if n > 1 => walked_clean += 1,
                Ok(_) => {}
            }
        }
        let _ = std::panic::take_hook();
    }
    assert!(
        panics.is_empty(),
        "{} panics:\n{}",
        panics.len(),
        panics.join("\n")
    );
    // The walk must actually reach into the images, not fail at the superblock every time.
    assert!(
        walked_clean > mutations() / 4,
        "only {walked_clean} images were walked"
    );
}

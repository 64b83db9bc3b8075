//! Issue 24's sweep: random bit flips in the metadata of an image of every profile (the
//! first 64 blocks, and the blocks of a few files, directories and the journal), each
//! checked by `e2fsck -fn` (under `timeout`) and e4, comparing exit statuses. e4 must
//! never call clean what e2fsck calls damaged, nor the reverse; the statuses must be
//! equal but where e2fsck stops on an error e4 does not yet know to be fatal (e4 4,
//! e2fsck 12: docs/FSCK.md lists the kinds). The rate is printed.

mod common;

use std::collections::BTreeMap;
use std::fs;
use std::process::Command;

use rand::{Rng, SeedableRng};

use e4_fsck::{check, Options};
use e4_testkit::{make_image, PROFILES};

/// Rounds per profile.
const ROUNDS: usize = 40;

#[test]
fn exit_status_agrees_under_random_flips() {
    let source = tempfile::tempdir().unwrap();
    let root = source.path();
    fs::write(root.join("small"), b"hello").unwrap();
    fs::write(root.join("medium"), vec![7u8; 20 * 1024]).unwrap();
    fs::create_dir_all(root.join("dir1/sub")).unwrap();
    for i in 0..40 {
        fs::write(root.join(format!("dir1/f{i}")), b"x").unwrap();
    }
    let scratch = tempfile::tempdir().unwrap();
    let flipped = scratch.path().join("flipped.img");
    // (e4's status, e2fsck's) and how often.
    let mut pairs: BTreeMap<(i32, i32), usize> = BTreeMap::new();
    for profile in PROFILES {
        let image = make_image(root, profile, 16, 2048);
        let mut hot: Vec<u64> = (0..64).collect();
        for path in ["/", "/dir1", "/dir1/sub", "/medium", "/small", "<8>"] {
            let text = common::debugfs(&image.path, &format!("blocks {path}"));
            let blocks = text
                .split_whitespace()
                .filter_map(|b| b.parse::<u64>().ok());
            hot.extend(blocks.take(40));
        }
        let pristine = fs::read(&image.path).unwrap();
        let bs = common::block_size(&image.path) as usize;
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        for round in 0..ROUNDS {
            let mut bytes = pristine.clone();
            for _ in 0..rng.gen_range(1..8) {
                let block = hot[rng.gen_range(0..hot.len())] as usize;
                let at = block * bs + rng.gen_range(0..bs);
                if (1024..bytes.len()).contains(&at) {
                    bytes[at] ^= 1 << rng.gen_range(0..8);
                }
            }
            fs::write(&flipped, &bytes).unwrap();
            let options = Options {
                threads: Some(2),
                force: true,
                ..Options::default()
            };
            let ours = check(&flipped, &options).map_or(8, |r| i32::from(r.exit_code()));
            let out = Command::new("timeout")
                .arg("60")
                .arg(e4_testkit::tool("e2fsck"))
                .arg("-fn")
                .arg(&flipped)
                .output()
                .unwrap();
            let text = format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            let theirs = out.status.code().unwrap_or(-1);
            assert_ne!(
                theirs, 124,
                "{} round {round}: e2fsck timed out",
                profile.name
            );
            // e2fsck 1.47.0 crashes on some htree damage; nothing to compare then.
            if text.contains("Signal (11)") {
                continue;
            }
            *pairs.entry((ours, theirs)).or_default() += 1;
            assert!(
                ours == theirs || (ours == 4 && theirs == 12),
                "{} round {round}: e4 exit {ours}, e2fsck exit {theirs}:\n{text}",
                profile.name
            );
        }
    }
    let total: usize = pairs.values().sum();
    let equal: usize = pairs
        .iter()
        .filter(|((a, b), _)| a == b)
        .map(|(_, n)| n)
        .sum();
    println!("exit status equal in {equal} of {total} rounds: {pairs:?}");
}

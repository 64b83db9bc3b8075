//! Random bit flips in an image's metadata, compared with e2fsck on the verdict alone
//! (clean, errors, cannot check): class sets are not compared, since e2fsck stops early
//! on some damage where e4 goes on. e4 must neither panic nor hang.

use std::fs;
use std::path::Path;
use std::process::Command;

use rand::{Rng, SeedableRng};

use e4_fsck::{check, Options};

use super::{block_size, debugfs};

/// Flips 1 to 7 random bits per round, for `rounds` rounds, in the first `table_blocks`
/// blocks (the first groups' tables) and every block debugfs lists for `paths` (extent
/// nodes, directory blocks, xattr blocks, data) of `image`, which is left as it was.
/// Returns how many rounds e4 found damaged. A round where e2fsck itself crashed (it
/// prints "Signal (11)" and exits 8; 1.47.0 does on some htree damage) is not compared.
pub fn assert_random_flips_agree(
    image: &Path,
    paths: &[&str],
    table_blocks: usize,
    rounds: usize,
    seed: u64,
) -> usize {
    let mut hot: Vec<u64> = (0..table_blocks as u64).collect();
    for path in paths {
        let text = debugfs(image, &format!("blocks {path}"));
        hot.extend(
            text.split_whitespace()
                .filter_map(|b| b.parse::<u64>().ok()),
        );
    }
    assert_flips_in_blocks_agree(image, &hot, rounds, seed)
}

/// The same over the blocks `hot` only (by number), for structures debugfs cannot list
/// or an image it cannot open quickly (an mmp image makes `debugfs -w` wait).
pub fn assert_flips_in_blocks_agree(image: &Path, hot: &[u64], rounds: usize, seed: u64) -> usize {
    let pristine = fs::read(image).unwrap();
    let bs = block_size(image) as usize;
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let scratch = tempfile::tempdir().unwrap();
    let path = scratch.path().join("flipped.img");
    let mut damaged_rounds = 0;
    for round in 0..rounds {
        let mut bytes = pristine.clone();
        for _ in 0..rng.gen_range(1..8) {
            let block = hot[rng.gen_range(0..hot.len())] as usize;
            let at = block * bs + rng.gen_range(0..bs);
            if (1024..bytes.len()).contains(&at) {
                bytes[at] ^= 1 << rng.gen_range(0..8);
            }
        }
        fs::write(&path, &bytes).unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let p = path.clone();
        std::thread::spawn(move || {
            let result = std::panic::catch_unwind(|| {
                let options = Options {
                    threads: Some(2),
                    force: true,
                    ..Options::default()
                };
                // An image that cannot be checked at all is exit 8, as e2fsck's.
                check(&p, &options).map_or(8, |report| report.exit_code())
            });
            let _ = tx.send(result.ok());
        });
        let ours = rx
            .recv_timeout(std::time::Duration::from_secs(60))
            .unwrap_or_else(|_| panic!("round {round}: hung"))
            .unwrap_or_else(|| panic!("round {round}: panicked"));
        damaged_rounds += usize::from(ours != 0);
        let oracle = Command::new(e4_testkit::tool("e2fsck"))
            .arg("-fn")
            .arg(&path)
            .output()
            .unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&oracle.stdout),
            String::from_utf8_lossy(&oracle.stderr)
        );
        if text.contains("Signal (11)") {
            continue;
        }
        // 0 clean, 4 errors (12: errors, then e2fsck stopped early), 8 cannot check.
        let verdict = |code: i32| match code {
            0 => "clean",
            8 => "cannot check",
            c if c & 4 != 0 => "errors",
            _ => "other",
        };
        let theirs = oracle.status.code().unwrap_or(-1);
        assert_eq!(
            verdict(i32::from(ours)),
            verdict(theirs),
            "round {round}: e4 exit {ours}, e2fsck exit {theirs}:\n{text}"
        );
    }
    fs::write(image, &pristine).unwrap();
    damaged_rounds
}

//! Bad input gets one clear line on stderr and a non-zero exit, never a panic: missing and
//! garbage images, bad paths, wrong file types, and a few hundred corrupted images run
//! through every command.

use std::path::Path;
use std::process::{Command, Output};

use e4_testkit::{generate_tree, make_image, TreeSpec, PROFILES};
use rand::{Rng, SeedableRng};

fn e4(args: &[&dyn AsRef<std::ffi::OsStr>]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_e4"));
    for a in args {
        cmd.arg(a);
    }
    cmd.output().unwrap()
}

/// Exit 1 with exactly one line on stderr, starting "e4: ", and no internal error.
fn assert_clean_failure(out: &Output, expect: &str) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "stderr: {stderr}");
    assert_eq!(stderr.lines().count(), 1, "stderr: {stderr}");
    assert!(stderr.starts_with("e4: "), "stderr: {stderr}");
    assert!(!stderr.contains("internal error"), "stderr: {stderr}");
    assert!(stderr.contains(expect), "expected {expect:?} in {stderr}");
}

fn small_image() -> (tempfile::TempDir, e4_testkit::Image) {
    let src = tempfile::tempdir().unwrap();
    generate_tree(src.path(), &TreeSpec::small());
    let p = PROFILES.iter().find(|p| p.name == "ext4-1k").unwrap();
    let img = make_image(src.path(), p, 16, 1024);
    (src, img)
}

#[test]
fn bad_arguments_and_paths() {
    let (_src, img) = small_image();
    let tmp = tempfile::tempdir().unwrap();
    let missing = tmp.path().join("missing.img");
    assert_clean_failure(&e4(&[&"info", &missing]), "missing.img");

    let garbage = tmp.path().join("garbage.img");
    std::fs::write(&garbage, vec![0xA5u8; 1 << 20]).unwrap();
    assert_clean_failure(
        &e4(&[&"ls", &garbage]),
        "superblock at byte 1024 is corrupt: bad magic",
    );

    let empty = tmp.path().join("empty.img");
    std::fs::write(&empty, b"").unwrap();
    assert_clean_failure(&e4(&[&"info", &empty]), "cannot read the superblock");

    assert_clean_failure(
        &e4(&[&"cat", &img.path, &"/no/such/file"]),
        "no such file or directory",
    );
    assert_clean_failure(&e4(&[&"cat", &img.path, &"/names"]), "not a regular file");
    assert_clean_failure(&e4(&[&"ls", &img.path, &"/small.txt/x"]), "not a directory");
    let nonempty = tmp.path().join("nonempty");
    std::fs::create_dir(&nonempty).unwrap();
    std::fs::write(nonempty.join("x"), b"").unwrap();
    assert_clean_failure(&e4(&[&"export", &img.path, &nonempty]), "not empty");

    let bad_flag = e4(&[&"ls", &"--no-such-flag"]);
    assert_eq!(
        bad_flag.status.code(),
        Some(2),
        "clap reports usage errors with exit 2"
    );

    let cat = e4(&[&"cat", &img.path, &"/link_fast"]);
    assert!(cat.status.success());
    assert_eq!(cat.stdout, b"hello, e4\n");
}

fn run_all_commands(image: &Path, out_dir: &Path) -> Vec<Output> {
    vec![
        e4(&[&"info", &"--groups", &image]),
        e4(&[&"ls", &"-l", &image, &"/names"]),
        e4(&[&"stat", &image, &"/link_slow"]),
        e4(&[&"cat", &image, &"/large.bin"]),
        e4(&[&"export", &image, &out_dir]),
    ]
}

#[test]
fn corrupted_images_through_every_command() {
    let (_src, img) = small_image();
    let pristine = std::fs::read(&img.path).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let mutated = tmp.path().join("mutated.img");
    // Metadata sits in the first few hundred KiB of a small flex_bg image.
    let hot = 400 << 10;
    for seed in 0..150u64 {
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let mut bytes = pristine.clone();
        for _ in 0..rng.gen_range(1..=6) {
            let at = rng.gen_range(1024..hot);
            bytes[at] ^= rng.gen_range(1..=255u8);
        }
        std::fs::write(&mutated, &bytes).unwrap();
        let out_dir = tmp.path().join(format!("out{seed}"));
        for out in run_all_commands(&mutated, &out_dir) {
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(
                matches!(out.status.code(), Some(0 | 1)),
                "seed {seed}: {stderr}"
            );
            assert!(stderr.lines().count() <= 1, "seed {seed}: {stderr}");
            assert!(!stderr.contains("internal error"), "seed {seed}: {stderr}");
        }
        let _ = std::fs::remove_dir_all(&out_dir);
    }
}

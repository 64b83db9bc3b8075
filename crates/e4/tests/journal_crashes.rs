//! Journals left by a crash, both ways: the kernel's (an image copied while mounted, after
//! an fsync: it needs recovery, and its log holds metadata not yet written home) replayed by `e4 journal --recover` to the
//! block of `e2fsck -y -E journal_only`, and e2fsck-clean; and e4's (an `e4 import` killed
//! with SIGKILL at random moments) brought back e2fsck-clean by `e4 journal --recover` and,
//! on another copy, by the kernel's mount. Every kernel step is bounded and unmounted
//! (e4-testkit's `KernelMount`); without loop mounts those steps are skipped and said so.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Instant;

use e4_format::inode::JOURNAL_INO;
use e4_testkit::{e2fsck_clean, make_empty_image, KernelMount, RawImage};
use rand::Rng;

fn e4(args: &[&str]) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_e4"))
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr),
    )
}

/// Whether `e4 journal` finds the log of `image` non-empty and asked for.
fn needs_recovery(image: &Path) -> bool {
    let (code, shown) = e4(&["journal", image.to_str().unwrap()]);
    assert_eq!(code, 0, "{shown}");
    shown.contains("Recovery needed:          yes")
}

/// Blocks in which the two images differ, outside the primary superblock's and the
/// journal's (e4's unmount commits through the log, so its blocks differ).
fn differing_outside_journal(a: &Path, b: &Path) -> Vec<u64> {
    let raw = RawImage::read(a).unwrap();
    let block_size = raw.block_size();
    let journal: std::collections::BTreeSet<u64> = (0..)
        .map_while(|j| raw.file_block(JOURNAL_INO, j).ok().flatten())
        .collect();
    let (a, b) = (std::fs::read(a).unwrap(), std::fs::read(b).unwrap());
    let superblock_block = 1024 / block_size as u64;
    (0..(a.len() / block_size) as u64)
        .filter(|nr| *nr != superblock_block && !journal.contains(nr))
        .filter(|&nr| {
            let r = nr as usize * block_size..(nr as usize + 1) * block_size;
            a[r.clone()] != b[r]
        })
        .collect()
}

/// `e4 fsck -fn` checks an image whose journal needs recovery as it is on disk, as
/// `e2fsck -fn` does, and exits as e2fsck does.
fn assert_fsck_statuses_agree(image: &Path, what: &str) {
    let (e4_status, said) = e4(&["fsck", "-fn", image.to_str().unwrap()]);
    let e2fsck = Command::new(e4_testkit::tool("e2fsck"))
        .arg("-fn")
        .arg(image)
        .output()
        .unwrap();
    assert_eq!(
        Some(e4_status),
        e2fsck.status.code(),
        "{what}: e4 fsck -fn said {said}\ne2fsck -fn said {}",
        String::from_utf8_lossy(&e2fsck.stdout)
    );
}

fn write_files(dir: &Path, round: u32) {
    let sub = dir.join(format!("round-{round}"));
    std::fs::create_dir(&sub).unwrap();
    for i in 0..150u32 {
        let len = (i as usize * 97 + round as usize * 31) % 9000;
        std::fs::write(sub.join(format!("f{i}")), vec![(i + round) as u8; len]).unwrap();
    }
    std::fs::write(sub.join("big"), vec![round as u8 ^ 0x5A; 2 << 20]).unwrap();
}

#[test]
fn kernel_left_journals_replay_in_e4_as_in_e2fsck() {
    const FORMATS: &[&[&str]] = &[
        &["-t", "ext4", "-b", "4096"],
        &["-t", "ext4", "-b", "4096", "-O", "^metadata_csum,^64bit"],
        &["-t", "ext3", "-b", "1024"],
    ];
    for mke2fs in FORMATS {
        let img = make_empty_image(mke2fs, 64);
        let dir = tempfile::tempdir().unwrap();
        let mut copies = Vec::new();
        {
            let Ok(mount) = KernelMount::mount_writable(&img.path) else {
                return;
            };
            for round in 0..3 {
                write_files(&mount.path(), round);
                if round > 0 {
                    // Frees blocks and metadata an earlier commit logged: revoke records.
                    std::fs::remove_dir_all(mount.path().join(format!("round-{}", round - 1)))
                        .unwrap();
                }
                // fsync commits the running transaction (the ordered data first) but leaves
                // the metadata's home writes to writeback, long after: the copy's log holds
                // what its home blocks do not, so both replays have work to do.
                std::fs::File::open(mount.path().join(format!("round-{round}/big")))
                    .unwrap()
                    .sync_all()
                    .unwrap();
                let copy = dir.path().join(format!("copy-{round}"));
                std::fs::copy(&img.path, &copy).unwrap();
                copies.push(copy);
            }
        }
        let mut replayed_any = false;
        for copy in &copies {
            let what = format!("{mke2fs:?} {}", copy.display());
            if !needs_recovery(copy) {
                continue;
            }
            replayed_any = true;
            assert_fsck_statuses_agree(copy, &what);
            let by_e2fsck = copy.with_extension("e2fsck");
            std::fs::copy(copy, &by_e2fsck).unwrap();
            // Without -f: with it, e2fsck goes on from the replay to a full check, whose
            // pass 5 recounts each group's unused inodes (bg_itable_unused) where the
            // kernel left it low after freeing inodes: a check's change, not the replay's.
            let out = Command::new(e4_testkit::tool("e2fsck"))
                .args(["-y", "-E", "journal_only"])
                .arg(&by_e2fsck)
                .output()
                .unwrap();
            assert!(
                out.status.code().unwrap_or(8) < 4,
                "{what}: e2fsck: {out:?}"
            );
            let (code, said) = e4(&["journal", "--recover", copy.to_str().unwrap()]);
            assert_eq!(code, 0, "{what}: {said}");
            e2fsck_clean(copy).unwrap();
            let differing = differing_outside_journal(copy, &by_e2fsck);
            assert!(
                differing.is_empty(),
                "{what}: e4's replay and e2fsck's differ in blocks {differing:?}"
            );
        }
        assert!(
            replayed_any,
            "{mke2fs:?}: no copy taken while mounted needed recovery"
        );
    }
}

/// A tree whose import writes much metadata (many small files in many directories) and
/// runs for a while.
fn source_tree(root: &Path) {
    for d in 0..150 {
        let sub = root.join(format!("d{d}"));
        std::fs::create_dir(&sub).unwrap();
        for f in 0..100 {
            std::fs::write(sub.join(format!("f{f}")), vec![f as u8; f * 10]).unwrap();
        }
    }
}

fn import(image: &Path, src: &Path) -> std::process::Child {
    Command::new(env!("CARGO_BIN_EXE_e4"))
        .args(["import", "-j", "2"])
        .arg(image)
        .arg(src)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

/// With `E4_CRASH_KEEP=DIR`, keeps the killed image `image` (as it was before recovery) in
/// DIR for a failure to be looked at; says where.
fn keep(image: &Path, round: u32) -> String {
    let Some(dir) = std::env::var_os("E4_CRASH_KEEP") else {
        return "\n(E4_CRASH_KEEP=DIR keeps the killed image)".into();
    };
    let kept = Path::new(&dir).join(format!("killed-import-{round}.img"));
    match std::fs::copy(image, &kept) {
        Ok(_) => format!("\nthe killed image is kept in {}", kept.display()),
        Err(e) => format!(
            "\ncould not keep the killed image in {}: {e}",
            kept.display()
        ),
    }
}

#[test]
fn an_import_killed_at_any_moment_recovers_clean_in_e4_and_the_kernel() {
    let src = tempfile::tempdir().unwrap();
    source_tree(src.path());
    // A small log (1024 blocks), so the import's metadata passes through it more than once.
    let pristine = make_empty_image(&["-t", "ext4", "-b", "1024", "-J", "size=1"], 128);
    let dir = tempfile::tempdir().unwrap();
    // How long a whole import takes here: the kills are spread over it, and past its end.
    let whole = dir.path().join("whole");
    std::fs::copy(&pristine.path, &whole).unwrap();
    let started = Instant::now();
    assert!(import(&whole, src.path()).wait().unwrap().success());
    let run = started.elapsed();
    e2fsck_clean(&whole).unwrap();

    let mut rng = rand::thread_rng();
    let mut states = Vec::new();
    // 8 kills in CI; `E4_KILLS=N` for a long run.
    let kills = std::env::var("E4_KILLS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(8);
    for round in 0..kills {
        let delay = run.mul_f64(rng.gen_range(0.1..1.1));
        let image = dir.path().join(format!("killed-{round}"));
        std::fs::copy(&pristine.path, &image).unwrap();
        let mut child = import(&image, src.path());
        std::thread::sleep(delay);
        // SIGKILL; an import that already ended is fine too.
        let _ = child.kill();
        child.wait().unwrap();
        let (_, shown) = e4(&["journal", image.to_str().unwrap()]);
        let state = shown
            .lines()
            .filter(|l| l.starts_with("Recovery needed") || l.starts_with("Transactions"))
            .collect::<Vec<_>>()
            .join("; ");
        states.push(format!("killed after {delay:?} of {run:?}: {state}"));
        let what = states.join("\n");
        assert_fsck_statuses_agree(&image, &what);
        let for_kernel = image.with_extension("kernel");
        std::fs::copy(&image, &for_kernel).unwrap();

        let (code, said) = e4(&["journal", "--recover", image.to_str().unwrap()]);
        assert_eq!(code, 0, "{what}: {said}");
        e2fsck_clean(&image).unwrap_or_else(|e| {
            panic!(
                "{what}\nafter e4's recovery: {e}{}",
                keep(&for_kernel, round)
            )
        });

        if let Ok(mount) = KernelMount::mount_writable(&for_kernel) {
            drop(mount);
            e2fsck_clean(&for_kernel)
                .unwrap_or_else(|e| panic!("{what}\nafter the kernel's recovery: {e}"));
        }
    }
    // e4 import runs as one transaction, committed at its unmount: most kills leave a log
    // whose transaction never committed (nothing to replay) or the finished image; a kill
    // inside the unmount's commit leaves committed transactions to replay.
    eprintln!("{}", states.join("\n"));
    assert!(
        states
            .iter()
            .any(|s| s.contains("Recovery needed:          yes")),
        "no kill left a journal to recover:\n{}",
        states.join("\n")
    );
}

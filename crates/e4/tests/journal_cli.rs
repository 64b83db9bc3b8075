//! `e4 journal`, `e4 journal --recover`, and what `e4 info` and `e4 fsck -n` say about a
//! journal that needs recovery: the summary reads the log without changing the image; the
//! recovery replays it once; journals e4 does not handle are refused in one line with the
//! image untouched; `e4 fsck -n` checks the image as it is on disk, with e2fsck -n's exit
//! statuses.

use std::path::Path;
use std::process::Command;

use e4_format::inode::JOURNAL_INO;
use e4_testkit::{make_empty_image, RawImage};

fn e4(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_e4"))
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn debugfs(image: &Path, commands: &[String]) {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("script");
    std::fs::write(&script, commands.join("\n") + "\n").unwrap();
    let out = Command::new(e4_testkit::tool("debugfs"))
        .arg("-w")
        .arg("-f")
        .arg(&script)
        .arg(image)
        .output()
        .unwrap();
    assert!(out.status.success(), "debugfs {commands:?}");
}

fn e2fsck_status(args: &str, image: &Path) -> i32 {
    Command::new(e4_testkit::tool("e2fsck"))
        .arg(args)
        .arg(image)
        .output()
        .unwrap()
        .status
        .code()
        .unwrap_or(-1)
}

/// An image whose root directory's link count on disk is wrong (9), with a journal whose
/// one committed transaction logs the inode-table block as it was (right), and a second
/// that logs a free block and revokes it again. `open` is debugfs's `jo` command; checksum
/// v1 is left out, as debugfs seals a revoke-only transaction with a v1 checksum jbd2
/// rejects (tests/journal_interop.rs).
fn journal_that_repairs_the_root(mke2fs: &[&str], open: &str) -> e4_testkit::Image {
    let img = make_empty_image(mke2fs, 16);
    let raw = RawImage::read(&img.path).unwrap();
    let block_size = raw.block_size() as u64;
    let table_block = raw.inode_offset(2).unwrap() / block_size;
    let saved = img.path.with_extension("table");
    std::fs::write(&saved, raw.block(table_block).unwrap()).unwrap();
    let free = raw.superblock().blocks_count() - 10;
    let filler = img.path.with_extension("filler");
    std::fs::write(&filler, vec![0xAB; block_size as usize]).unwrap();
    debugfs(
        &img.path,
        &[
            "sif <2> links_count 9".into(),
            open.into(),
            format!("jw -b {table_block} {}", saved.display()),
            format!("jw -b {free} {}", filler.display()),
            format!("jw -r {free}"),
            "jc".into(),
        ],
    );
    img
}

#[test]
fn the_summary_reads_the_log_and_recover_replays_it_once() {
    let img = journal_that_repairs_the_root(&["-t", "ext4", "-b", "4096"], "jo -c");
    let path = img.path.to_str().unwrap();
    let before = std::fs::read(&img.path).unwrap();

    let (code, shown, err) = e4(&["journal", path]);
    assert_eq!(code, 0, "{err}");
    for line in [
        "Journal inode:            8",
        "Journal features:         revoke 64bit csum_v3",
        "Journal sequence:         1 (s_sequence)",
        "Journal start:            1 (s_start)",
        "Recovery needed:          yes",
        "Transactions:             3 committed, 1..3 (ending before 4)",
        "Log blocks:               8",
        "Blocks to replay:         1",
        "Revoke records:           1 (1 logged copies revoked)",
    ] {
        assert!(shown.contains(line), "{line:?} in:\n{shown}");
    }
    let (code, info, _) = e4(&["info", path]);
    assert_eq!(code, 0);
    assert!(
        info.contains("Journal state:            needs recovery; shown as recovery would leave it"),
        "{info}"
    );
    assert!(
        std::fs::read(&img.path).unwrap() == before,
        "reading changed the image"
    );

    let (code, out, err) = e4(&["journal", "--recover", path]);
    assert_eq!((code, err.as_str()), (0, ""), "{out}");
    assert!(
        out.contains("recovered 3 journal transactions (1 blocks)"),
        "{out}"
    );
    assert_eq!(e2fsck_status("-fn", &img.path), 0, "the replay repaired it");
    let (_, shown, _) = e4(&["journal", path]);
    assert!(
        shown.contains("Journal start:            0 (s_start: the log is empty)")
            && shown.contains("Recovery needed:          no\n"),
        "{shown}"
    );
    assert!(!shown.contains("Transactions:"), "{shown}");
    let (_, info, _) = e4(&["info", path]);
    assert!(
        info.contains("Journal state:            recovery needed: no"),
        "{info}"
    );

    let recovered = std::fs::read(&img.path).unwrap();
    let (code, out, _) = e4(&["journal", "--recover", path]);
    assert_eq!(code, 0);
    assert!(out.contains("nothing to recover"), "{out}");
    assert!(
        std::fs::read(&img.path).unwrap() == recovered,
        "a second recovery changed the image"
    );
}

#[test]
fn fsck_checks_the_image_as_it_is_on_disk_with_e2fsck_statuses() {
    for (mke2fs, open) in [
        (&["-t", "ext4", "-b", "4096"][..], "jo -c"),
        (&["-t", "ext3", "-b", "1024"][..], "jo"),
    ] {
        let img = journal_that_repairs_the_root(mke2fs, open);
        let path = img.path.to_str().unwrap();
        let note =
            "the journal needs recovery; checked the image as it is on disk, without replaying it";
        for args in ["-n", "-fn"] {
            let (code, out, _) = e4(&["fsck", args, path]);
            assert_eq!(
                code,
                e2fsck_status(args, &img.path),
                "{mke2fs:?} fsck {args}: {out}"
            );
            assert_eq!(
                out.matches(note).count(),
                1,
                "{mke2fs:?} fsck {args}: {out}"
            );
        }
        // On disk the root's link count is wrong: both find it.
        assert_eq!(e4(&["fsck", "-fn", path]).0, 4, "{mke2fs:?}");
        assert_eq!(e4(&["journal", "--recover", path]).0, 0, "{mke2fs:?}");
        let (code, out, _) = e4(&["fsck", "-fn", path]);
        assert_eq!(code, 0, "{mke2fs:?}: {out}");
        assert!(!out.contains(note), "{out}");
    }
}

/// Journal superblock byte `at` of `image` or-ed with `bits` (a journal without checksums,
/// so nothing else needs to change).
fn set_journal_superblock_bits(image: &Path, at: usize, bits: u8) {
    let raw = RawImage::read(image).unwrap();
    let block0 = raw.file_block(JOURNAL_INO, 0).unwrap().unwrap();
    let mut bytes = std::fs::read(image).unwrap();
    bytes[block0 as usize * raw.block_size() + at] |= bits;
    std::fs::write(image, bytes).unwrap();
}

/// A journal e4 does not handle: what it is, what the refusal names, and how to make it
/// from a journal debugfs wrote.
type Unsupported = (&'static str, &'static str, fn(&Path));

#[test]
fn journals_e4_does_not_handle_are_refused_in_one_line_untouched() {
    // s_feature_incompat (be32 at 0x28): bit 0x100 is unknown, 0x20 is fast_commit.
    const INCOMPAT_BYTE_1: usize = 0x2A;
    const INCOMPAT_BYTE_0: usize = 0x2B;
    let cases: [Unsupported; 3] = [
        ("external journal", "external journal", |image: &Path| {
            debugfs(
                image,
                &[
                    "ssv journal_inum 0".into(),
                    "ssv journal_dev 2049".into(),
                    "ssv journal_uuid 0b0e3c4a-6a64-4d0c-9b3c-1f6f0a3a1e10".into(),
                ],
            )
        }),
        (
            "unknown incompatible journal feature",
            "journal incompatible feature bits 0x100",
            |image: &Path| set_journal_superblock_bits(image, INCOMPAT_BYTE_1, 0x01),
        ),
        ("fast commits to replay", "fast commits", |image: &Path| {
            set_journal_superblock_bits(image, INCOMPAT_BYTE_0, 0x20)
        }),
    ];
    for (what, says, make_unsupported) in cases {
        let img = make_empty_image(&["-t", "ext4", "-O", "^metadata_csum,^64bit"], 16);
        let block = img.path.with_extension("block");
        std::fs::write(&block, vec![7u8; 1024]).unwrap();
        debugfs(
            &img.path,
            &[
                "jo".into(),
                format!("jw -b 15000 {}", block.display()),
                "jc".into(),
            ],
        );
        make_unsupported(&img.path);
        let before = std::fs::read(&img.path).unwrap();
        let path = img.path.to_str().unwrap();
        for args in [&["journal", path][..], &["journal", "--recover", path][..]] {
            let (code, out, err) = e4(args);
            assert_eq!(code, 1, "{what} {args:?}: {out}{err}");
            assert_eq!(err.lines().count(), 1, "{what}: {err}");
            assert!(err.contains(says), "{what}: {err}");
            assert!(
                std::fs::read(&img.path).unwrap() == before,
                "{what} {args:?}: the image was changed"
            );
        }
    }
}

//! Journals e4 did not write, made by debugfs (`jo`, `jw`, `jw -r`, `jc`) on every tag
//! format and checksum version it makes, some of them damaged afterwards: each is replayed
//! by `e4 journal --recover` and, on a copy, by `e2fsck -fy -E journal_only`, and the two
//! images must be equal block for block outside the primary superblock's block and the
//! journal (e4's unmount commits its superblock through the log, so the log blocks differ;
//! docs/JOURNAL.md). Each case also states what the replay must leave in the blocks it
//! wrote, and whether e4 succeeds, so a recovery that agrees with e2fsck by accident (both
//! replaying nothing) is still caught. Where e4 and e2fsck part on purpose (a damaged
//! journal superblock: e2fsck clears the journal, e4 refuses and leaves the image as it was)
//! the case says so and checks e4's side.

use std::path::{Path, PathBuf};
use std::process::Command;

use e4_format::inode::JOURNAL_INO;
use e4_format::journal::JOURNAL_MAGIC;
use e4_testkit::RawImage;

/// Transactions a case writes through debugfs, in order (each `jw` is one transaction).
#[derive(Clone, Copy)]
enum Step {
    /// `jw -b` the given target blocks (indices into the case's free blocks), with the
    /// contents numbered `content` (the first word the journal magic when `escaped`).
    Write {
        targets: &'static [usize],
        content: u8,
        escaped: bool,
    },
    /// `jw -r` the given target blocks.
    Revoke(&'static [usize]),
    /// `jw -b ... -c`: logged, never committed.
    Uncommitted {
        targets: &'static [usize],
        content: u8,
    },
}

/// What a target block holds after a correct replay.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Expect {
    /// Never written (free space reads zero).
    Untouched,
    /// The contents numbered so.
    Content(u8),
}

/// Where damage goes, found by walking the log's headers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Damage {
    None,
    /// A byte of the commit block's checksum of transaction `n` (1-based in the case).
    CommitChecksum(u32),
    /// The descriptor block's tail checksum of transaction `n`.
    DescriptorChecksum(u32),
    /// The commit block of transaction `n` says another tid.
    CommitTid(u32),
    /// The descriptor of transaction `n` says another tid.
    DescriptorTid(u32),
    /// The revoke block of transaction `n` claims more bytes than a block holds.
    RevokeCount(u32),
    /// A byte of the first logged copy of transaction `n`.
    LoggedCopy(u32),
    /// The journal superblock's magic.
    SuperblockMagic,
    /// The journal superblock's checksum.
    SuperblockChecksum,
    /// The journal superblock records an error (`s_errno` -ESHUTDOWN, as a kernel
    /// shutdown leaves it), in a journal without checksums.
    SuperblockErrno,
}

/// How e4's `journal --recover` must end, and how it must relate to e2fsck's result.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Outcome {
    /// Exit 0; the image equals e2fsck's (outside the superblock and the journal).
    Replayed,
    /// Exit 1 after replaying what could be (the replay met damage, the filesystem is
    /// marked with errors, as e2fsck marks it); the image still equals e2fsck's.
    ReplayedWithDamage,
    /// Exit 1 with the image untouched: e4 refuses where e2fsck repairs the journal
    /// itself (docs/JOURNAL.md says why).
    RefusedUntouched,
}

struct Format {
    name: &'static str,
    mke2fs: &'static [&'static str],
    /// The `jo` command (`-c`: checksums; `-v 2`: version 2 instead of 3).
    open: &'static str,
    /// The features `e4 journal` must report once debugfs opened the journal.
    features: &'static str,
    /// Checksum v1: debugfs seals a transaction with no descriptor (a revoke alone) with a
    /// commit checksum that jbd2's recovery (the kernel's, e2fsck's and e4's) rejects, so
    /// the undamaged workload ends at its revoke, as a failed commit.
    v1: bool,
}

const FORMATS: &[Format] = &[
    Format {
        name: "ext4, checksum v3, 64-bit tags",
        mke2fs: &["-t", "ext4", "-b", "4096"],
        open: "jo -c",
        features: "revoke 64bit csum_v3",
        v1: false,
    },
    Format {
        name: "ext4, checksum v2, 64-bit tags",
        mke2fs: &["-t", "ext4", "-b", "4096"],
        open: "jo -c -v 2",
        features: "revoke 64bit csum_v2",
        v1: false,
    },
    Format {
        name: "ext4 without 64bit, checksum v3, 32-bit tags",
        mke2fs: &["-t", "ext4", "-b", "4096", "-O", "^64bit"],
        open: "jo -c",
        features: "revoke csum_v3",
        v1: false,
    },
    Format {
        name: "ext4 without 64bit, checksum v2, 32-bit tags",
        mke2fs: &["-t", "ext4", "-b", "4096", "-O", "^64bit"],
        open: "jo -c -v 2",
        features: "revoke csum_v2",
        v1: false,
    },
    Format {
        name: "ext4 without metadata_csum, checksum v1, 64-bit tags",
        mke2fs: &["-t", "ext4", "-b", "4096", "-O", "^metadata_csum"],
        open: "jo -c",
        features: "revoke 64bit csum_v1",
        v1: true,
    },
    Format {
        name: "ext4 without metadata_csum or 64bit, no checksum, 32-bit tags",
        mke2fs: &["-t", "ext4", "-b", "4096", "-O", "^metadata_csum,^64bit"],
        open: "jo",
        features: "revoke",
        v1: false,
    },
    Format {
        name: "ext3, 1 KiB blocks, no checksum",
        mke2fs: &["-t", "ext3", "-b", "1024"],
        open: "jo",
        features: "revoke",
        v1: false,
    },
    Format {
        name: "ext3, 1 KiB blocks, checksum v1",
        mke2fs: &["-t", "ext3", "-b", "1024"],
        open: "jo -c",
        features: "revoke csum_v1",
        v1: true,
    },
];

/// The workload every format gets: several transactions, a revoke of an earlier block
/// and a rewrite after it, an escaped block, and a transaction left without its commit.
const WORKLOAD: &[Step] = &[
    Step::Write {
        targets: &[0, 1, 2],
        content: 1,
        escaped: false,
    },
    Step::Write {
        targets: &[3],
        content: 2,
        escaped: true,
    },
    Step::Revoke(&[1, 2]),
    Step::Write {
        targets: &[2, 4],
        content: 3,
        escaped: false,
    },
    Step::Uncommitted {
        targets: &[0, 5],
        content: 4,
    },
];

/// After the whole workload: 0 from transaction 1; 1 revoked; 2 revoked then rewritten;
/// 3 escaped; 4 from transaction 4; 5 only in the uncommitted transaction.
const WORKLOAD_RESULT: &[Expect] = &[
    Expect::Content(1),
    Expect::Untouched,
    Expect::Content(3),
    Expect::Content(2),
    Expect::Content(3),
    Expect::Untouched,
];

/// Transactions 1 and 2 only (everything from 3 on is past the log's end).
const FIRST_TWO: &[Expect] = &[
    Expect::Content(1),
    Expect::Content(1),
    Expect::Content(1),
    Expect::Content(2),
    Expect::Untouched,
    Expect::Untouched,
];

/// Transactions 1 to 3: the revoke drops two of transaction 1's copies.
const FIRST_THREE: &[Expect] = &[
    Expect::Content(1),
    Expect::Untouched,
    Expect::Untouched,
    Expect::Content(2),
    Expect::Untouched,
    Expect::Untouched,
];

/// Transaction 1 only.
const FIRST_ONE: &[Expect] = &[
    Expect::Content(1),
    Expect::Content(1),
    Expect::Content(1),
    Expect::Untouched,
    Expect::Untouched,
    Expect::Untouched,
];

const NOTHING: &[Expect] = &[Expect::Untouched; 6];

/// The free blocks the workload writes, found with debugfs's `ffb` past the middle of the
/// filesystem, so e2fsck's passes (run by `-f`) have no reason to touch them.
fn free_blocks(image: &Path) -> Vec<u64> {
    let raw = RawImage::read(image).unwrap();
    let from = raw.superblock().blocks_count() / 2;
    let out = debugfs(image, false, &[format!("ffb 6 {from}")]);
    let found = out.split("Free blocks found:").nth(1).unwrap_or("");
    let blocks: Vec<u64> = found
        .split_whitespace()
        .filter_map(|w| w.parse().ok())
        .filter(|&b| b >= from)
        .collect();
    assert_eq!(blocks.len(), 6, "ffb: {out}");
    blocks
}

fn debugfs(image: &Path, write: bool, commands: &[String]) -> String {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("script");
    std::fs::write(&script, commands.join("\n") + "\n").unwrap();
    let mut cmd = Command::new(e4_testkit::tool("debugfs"));
    if write {
        cmd.arg("-w");
    }
    let out = cmd.arg("-f").arg(&script).arg(image).output().unwrap();
    assert!(out.status.success(), "debugfs {commands:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The contents numbered `n`: every byte `n`, a block-specific second word (so copies of
/// different blocks differ), and the journal magic first when `escaped`.
fn contents(block_size: usize, n: u8, block: u64, escaped: bool) -> Vec<u8> {
    let mut bytes = vec![n; block_size];
    // OK to cast: test block numbers fit 32 bits.
    bytes[4..8].copy_from_slice(&(block as u32).to_be_bytes());
    if escaped {
        bytes[..4].copy_from_slice(&JOURNAL_MAGIC.to_be_bytes());
    }
    bytes
}

/// Makes the image, opens its journal with debugfs and writes `steps` (debugfs leaves
/// needs_recovery set and the log full). Returns the target blocks.
fn make_journal(format: &Format, steps: &[Step], dir: &Path) -> (PathBuf, Vec<u64>) {
    let image = dir.join("debugfs.img");
    let out = Command::new(e4_testkit::tool("mke2fs"))
        .args(["-q", "-F"])
        .args(format.mke2fs)
        .arg(&image)
        .arg("32M")
        .output()
        .unwrap();
    assert!(out.status.success());
    let targets = free_blocks(&image);
    let block_size = RawImage::read(&image).unwrap().block_size();
    let mut script = vec![format.open.to_string()];
    for (i, step) in steps.iter().enumerate() {
        let list = |t: &[usize]| {
            t.iter()
                .map(|&i| targets[i].to_string())
                .collect::<Vec<_>>()
                .join(",")
        };
        let file = |t: &[usize], content: u8, escaped: bool| {
            let path = dir.join(format!("step-{i}"));
            let bytes: Vec<u8> = t
                .iter()
                .flat_map(|&k| contents(block_size, content, targets[k], escaped))
                .collect();
            std::fs::write(&path, bytes).unwrap();
            path.display().to_string()
        };
        script.push(match *step {
            Step::Write {
                targets: t,
                content,
                escaped,
            } => format!("jw -b {} {}", list(t), file(t, content, escaped)),
            Step::Revoke(t) => format!("jw -r {}", list(t)),
            Step::Uncommitted {
                targets: t,
                content,
            } => format!("jw -b {} -c {}", list(t), file(t, content, false)),
        });
    }
    script.push("jc".into());
    debugfs(&image, true, &script);
    (image, targets)
}

/// The log's blocks as debugfs wrote them from `s_first`: (journal block, type, tid) of
/// each block with the magic, in order.
fn log_headers(image: &Path) -> Vec<(u64, u32, u32)> {
    let raw = RawImage::read(image).unwrap();
    let mut headers = Vec::new();
    for j in 1..64 {
        let nr = raw.file_block(JOURNAL_INO, j).unwrap().unwrap();
        let b = raw.block(nr).unwrap();
        let word = |at: usize| u32::from_be_bytes(b[at..at + 4].try_into().unwrap());
        if word(0) == JOURNAL_MAGIC {
            headers.push((j, word(4), word(8)));
        }
    }
    headers
}

/// Damages the log of `image` (made with `s_sequence` 1, so case transaction `n` has
/// tid `n`) in place.
fn damage(image: &Path, what: Damage) {
    const DESCRIPTOR: u32 = 1;
    const COMMIT: u32 = 2;
    const REVOKE: u32 = 5;
    let raw = RawImage::read(image).unwrap();
    let block_size = raw.block_size() as u64;
    let headers = log_headers(image);
    let find = |kind: u32, tid: u32| {
        headers
            .iter()
            .find(|&&(_, k, t)| k == kind && t == tid)
            .map(|&(j, _, _)| j)
            .unwrap_or_else(|| panic!("no block of type {kind} in transaction {tid}"))
    };
    let (journal_block, offset, xor): (u64, u64, u8) = match what {
        Damage::None => return,
        // h_chksum[0], at 0x10.
        Damage::CommitChecksum(n) => (find(COMMIT, n), 0x10, 0xFF),
        // The tail's last byte.
        Damage::DescriptorChecksum(n) => (find(DESCRIPTOR, n), block_size - 1, 0xFF),
        // h_sequence's low byte, at 0x0B.
        Damage::CommitTid(n) => (find(COMMIT, n), 0x0B, 0x40),
        Damage::DescriptorTid(n) => (find(DESCRIPTOR, n), 0x0B, 0x40),
        // r_count's high byte, at 0x0C: far past the block.
        Damage::RevokeCount(n) => (find(REVOKE, n), 0x0C, 0x01),
        // The second word of the first copy after the descriptor.
        Damage::LoggedCopy(n) => (find(DESCRIPTOR, n) + 1, 5, 0xFF),
        Damage::SuperblockMagic => (0, 0, 0xFF),
        Damage::SuperblockChecksum => (0, 0xFC, 0xFF),
        // -ESHUTDOWN in s_errno (be32 at 0x20, zero before): 0xFFFFFF94.
        Damage::SuperblockErrno => {
            for at in 0x20..0x23 {
                damage_byte(image, 0, at, 0xFF);
            }
            (0, 0x23, 0x94)
        }
    };
    damage_byte(image, journal_block, offset, xor);
}

/// Flips the bits `xor` of byte `offset` of journal block `journal_block` of `image`.
fn damage_byte(image: &Path, journal_block: u64, offset: u64, xor: u8) {
    let raw = RawImage::read(image).unwrap();
    let nr = raw.file_block(JOURNAL_INO, journal_block).unwrap().unwrap();
    let mut bytes = std::fs::read(image).unwrap();
    bytes[(nr * raw.block_size() as u64 + offset) as usize] ^= xor;
    std::fs::write(image, bytes).unwrap();
}

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

/// Blocks in which `a` and `b` differ, outside the primary superblock's and `excluded`.
fn differing_blocks(a: &[u8], b: &[u8], block_size: usize, excluded: &[u64]) -> Vec<u64> {
    let superblock_block = 1024 / block_size as u64;
    (0..(a.len() / block_size) as u64)
        .filter(|b| *b != superblock_block && !excluded.contains(b))
        .filter(|&nr| {
            let r = nr as usize * block_size..(nr as usize + 1) * block_size;
            a[r.clone()] != b[r]
        })
        .collect()
}

/// The journal's blocks, by the inode's map.
fn journal_blocks(image: &Path) -> Vec<u64> {
    let raw = RawImage::read(image).unwrap();
    (0..)
        .map_while(|j| raw.file_block(JOURNAL_INO, j).ok().flatten())
        .take(1 << 20)
        .collect()
}

/// One journal made by debugfs, damaged as `damage` says: e4's replay against e2fsck's
/// and against `expect`.
fn check_case(
    format: &Format,
    damage_at: Damage,
    expect: &[Expect],
    outcome: Outcome,
) -> Result<(), String> {
    let result =
        std::panic::catch_unwind(|| check_case_or_panic(format, damage_at, expect, outcome));
    result.map_err(|e| {
        e.downcast_ref::<String>()
            .cloned()
            .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default()
    })
}

fn check_case_or_panic(format: &Format, damage_at: Damage, expect: &[Expect], outcome: Outcome) {
    let what = format!("{} / {damage_at:?}", format.name);
    let dir = tempfile::tempdir().unwrap();
    let (image, targets) = make_journal(format, WORKLOAD, dir.path());
    damage(&image, damage_at);
    let before = std::fs::read(&image).unwrap();
    let block_size = RawImage::read(&image).unwrap().block_size();
    let journal = journal_blocks(&image);
    let path = image.to_str().unwrap();

    if damage_at == Damage::None || outcome != Outcome::RefusedUntouched {
        let (code, shown, err) = e4(&["journal", path]);
        assert_eq!(code, 0, "{what}: e4 journal: {err}");
        assert!(
            shown.contains(&format!("Journal features:         {}\n", format.features)),
            "{what}: {shown}"
        );
        assert!(shown.contains("Recovery needed:          yes"), "{what}");
    }

    let by_e2fsck = dir.path().join("e2fsck.img");
    std::fs::copy(&image, &by_e2fsck).unwrap();
    let e2fsck = Command::new(e4_testkit::tool("e2fsck"))
        .args(["-fy", "-E", "journal_only"])
        .arg(&by_e2fsck)
        .output()
        .unwrap();
    let e2fsck_said = String::from_utf8_lossy(&e2fsck.stdout).into_owned()
        + &String::from_utf8_lossy(&e2fsck.stderr);

    let (code, out, err) = e4(&["journal", "--recover", path]);
    let after = std::fs::read(&image).unwrap();
    match outcome {
        Outcome::Replayed => assert_eq!(code, 0, "{what}: {out}{err}"),
        Outcome::ReplayedWithDamage | Outcome::RefusedUntouched => {
            assert_eq!(code, 1, "{what}: {out}{err}");
            assert_eq!(err.lines().count(), 1, "{what}: one line: {err}");
        }
    }
    if outcome == Outcome::RefusedUntouched {
        assert!(after == before, "{what}: the image was changed");
        // e2fsck replays nothing either: it stops at the damage (a descriptor or revoke
        // block), or clears the journal and its log (a damaged journal superblock), and
        // with a bad magic makes the journal inode again.
        let e2fsck_image = std::fs::read(&by_e2fsck).unwrap();
        let raw = RawImage::read(&image).unwrap();
        let journal_inode_block = raw.inode_offset(JOURNAL_INO).unwrap() / block_size as u64;
        let excluded: Vec<u64> = journal
            .iter()
            .copied()
            .chain([journal_inode_block])
            .collect();
        let changed = differing_blocks(&before, &e2fsck_image, block_size, &excluded);
        assert!(
            changed.is_empty(),
            "{what}: e2fsck changed blocks {changed:?}; it said: {e2fsck_said}"
        );
        return;
    }
    let replayed: Vec<Expect> = targets
        .iter()
        .map(|&b| {
            let bytes = &after[b as usize * block_size..(b as usize + 1) * block_size];
            if bytes.iter().all(|&x| x == 0) {
                return Expect::Untouched;
            }
            let expected = contents(block_size, bytes[8], b, bytes[0] == 0xC0);
            assert_eq!(bytes, &expected[..], "{what}: block {b} is no logged copy");
            Expect::Content(bytes[8])
        })
        .collect();
    assert_eq!(replayed, expect, "{what}: what e4 replayed");
    let e2fsck_image = std::fs::read(&by_e2fsck).unwrap();
    let differing = differing_blocks(&after, &e2fsck_image, block_size, &journal);
    assert!(
        differing.is_empty(),
        "{what}: e4's replay and e2fsck's differ in blocks {differing:?}; e2fsck said: {e2fsck_said}"
    );
    if outcome == Outcome::ReplayedWithDamage {
        // Both mark the filesystem as having errors, for a full check.
        let state = |img: &[u8]| u16::from_le_bytes([img[1024 + 0x3A], img[1024 + 0x3B]]);
        assert_eq!(state(&after) & 2, 2, "{what}: e4 marks errors");
        if damage_at == Damage::SuperblockErrno {
            // Moved to the filesystem's superblock, as e2fsck and the kernel move it.
            let raw = RawImage::read(&image).unwrap();
            let block0 = raw.file_block(JOURNAL_INO, 0).unwrap().unwrap();
            let errno = &raw.block(block0).unwrap()[0x20..0x24];
            assert_eq!(errno, [0; 4], "{what}: s_errno is cleared");
        }
    }
}

/// Runs every case, then fails with all the failures at once.
fn check_all(cases: &[(&Format, Damage, &[Expect], Outcome)]) {
    let failures: Vec<String> = cases
        .iter()
        .filter_map(|&(format, damage, expect, outcome)| {
            check_case(format, damage, expect, outcome).err()
        })
        .collect();
    assert!(failures.is_empty(), "{}", failures.join("\n---\n"));
}

fn format(name_starts: &str) -> &'static Format {
    FORMATS
        .iter()
        .find(|f| f.name.starts_with(name_starts))
        .unwrap()
}

#[test]
fn every_format_replays_as_e2fsck_replays_it() {
    let cases: Vec<_> = FORMATS
        .iter()
        .map(|f| match f.v1 {
            false => (f, Damage::None, WORKLOAD_RESULT, Outcome::Replayed),
            true => (f, Damage::None, FIRST_TWO, Outcome::ReplayedWithDamage),
        })
        .collect();
    check_all(&cases);
}

const V3: &str = "ext4, checksum v3";
const V2_32: &str = "ext4 without 64bit, checksum v2";
const V1: &str = "ext4 without metadata_csum, checksum v1";
const PLAIN_32: &str = "ext4 without metadata_csum or 64bit";

#[test]
fn a_damaged_commit_ends_the_log_as_in_e2fsck() {
    use Damage::*;
    check_all(&[
        (
            format(V3),
            CommitChecksum(2),
            FIRST_ONE,
            Outcome::ReplayedWithDamage,
        ),
        (
            format(V2_32),
            CommitChecksum(2),
            FIRST_ONE,
            Outcome::ReplayedWithDamage,
        ),
        (
            format(V1),
            CommitChecksum(1),
            NOTHING,
            Outcome::ReplayedWithDamage,
        ),
        (format(V3), CommitTid(2), FIRST_ONE, Outcome::Replayed),
        (format(PLAIN_32), CommitTid(2), FIRST_ONE, Outcome::Replayed),
        (format(V3), DescriptorTid(4), FIRST_THREE, Outcome::Replayed),
        (
            format(PLAIN_32),
            DescriptorTid(4),
            FIRST_THREE,
            Outcome::Replayed,
        ),
    ]);
}

#[test]
fn damaged_descriptors_revokes_and_copies_as_in_e2fsck() {
    use Damage::*;
    use Expect::*;
    check_all(&[
        (
            format(V3),
            DescriptorChecksum(2),
            NOTHING,
            Outcome::RefusedUntouched,
        ),
        (
            format(V2_32),
            DescriptorChecksum(4),
            NOTHING,
            Outcome::RefusedUntouched,
        ),
        (
            format(PLAIN_32),
            RevokeCount(3),
            NOTHING,
            Outcome::RefusedUntouched,
        ),
        (
            format(V3),
            RevokeCount(3),
            NOTHING,
            Outcome::RefusedUntouched,
        ),
        (
            format(V3),
            LoggedCopy(1),
            &[
                Untouched,
                Untouched,
                Content(3),
                Content(2),
                Content(3),
                Untouched,
            ],
            Outcome::ReplayedWithDamage,
        ),
        (
            format(V2_32),
            LoggedCopy(4),
            &[
                Content(1),
                Untouched,
                Untouched,
                Content(2),
                Content(3),
                Untouched,
            ],
            Outcome::ReplayedWithDamage,
        ),
    ]);
}

#[test]
fn a_damaged_journal_superblock_is_refused_and_left_alone_an_error_recorded_is_kept() {
    use Damage::*;
    check_all(&[
        (
            format(V3),
            SuperblockMagic,
            NOTHING,
            Outcome::RefusedUntouched,
        ),
        (
            format(PLAIN_32),
            SuperblockMagic,
            NOTHING,
            Outcome::RefusedUntouched,
        ),
        (
            format(PLAIN_32),
            SuperblockErrno,
            WORKLOAD_RESULT,
            Outcome::ReplayedWithDamage,
        ),
        (
            format(V3),
            SuperblockChecksum,
            NOTHING,
            Outcome::RefusedUntouched,
        ),
    ]);
}

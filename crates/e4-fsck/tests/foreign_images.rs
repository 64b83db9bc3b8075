//! Issue 24: images as others make them, each built here with mke2fs, debugfs and byte
//! pokes, must get e2fsck's exit status (0, 4, or 8 and 12 where e2fsck stops) from
//! `e4 fsck`, and e4 the problem code named. Every external command is bounded by
//! `timeout`.

use std::fs::OpenOptions;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use e4_format::journal::JournalSuperblock;
use e4_format::superblock::Superblock;
use e4_format::MetadataBlock;
use e4_fsck::{check, Options, ProblemCode, Report};

/// Seconds any one external command may run.
const COMMAND_SECONDS: &str = "60";

/// Runs `program` with `args` under `timeout`.
fn bounded(program: &str, args: &[&str], image: &Path) -> Output {
    let out = Command::new("timeout")
        .arg(COMMAND_SECONDS)
        .arg(e4_testkit::tool(program))
        .args(args)
        .arg(image)
        .output()
        .unwrap_or_else(|e| panic!("running {program}: {e}"));
    assert_ne!(out.status.code(), Some(124), "{program} {args:?} timed out");
    out
}

/// A fresh image made by `mke2fs -q -F ARGS IMAGE SIZE`, in its own temporary folder.
struct TestImage {
    _dir: tempfile::TempDir,
    path: PathBuf,
}

impl TestImage {
    fn new(mke2fs_args: &[&str], size: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("fs.img");
        let mut args = vec!["-q", "-F"];
        args.extend_from_slice(mke2fs_args);
        let out = Command::new("timeout")
            .arg(COMMAND_SECONDS)
            .arg(e4_testkit::tool("mke2fs"))
            .args(&args)
            .arg(&path)
            .arg(size)
            .output()
            .expect("mke2fs must be installed (e2fsprogs)");
        assert!(
            out.status.success(),
            "mke2fs {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        TestImage { _dir: dir, path }
    }

    fn debugfs(&self, command: &str) -> String {
        let out = bounded("debugfs", &["-w", "-R", command], &self.path);
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn block_size(&self) -> u64 {
        let text = self.debugfs("stats");
        let line = text
            .lines()
            .find(|l| l.starts_with("Block size:"))
            .expect("debugfs stats names the block size");
        line["Block size:".len()..].trim().parse().unwrap()
    }

    /// The physical block of logical block `logical` of inode `ino`.
    fn bmap(&self, ino: u32, logical: u64) -> u64 {
        let text = self.debugfs(&format!("bmap <{ino}> {logical}"));
        text.trim()
            .parse()
            .unwrap_or_else(|_| panic!("bmap <{ino}> {logical}: {text}"))
    }

    fn read(&self, offset: u64, len: usize) -> Vec<u8> {
        let mut buf = vec![0; len];
        let file = OpenOptions::new().read(true).open(&self.path).unwrap();
        file.read_exact_at(&mut buf, offset).unwrap();
        buf
    }

    fn write(&self, offset: u64, bytes: &[u8]) {
        let file = OpenOptions::new().write(true).open(&self.path).unwrap();
        file.write_all_at(bytes, offset).unwrap();
    }

    /// e2fsck -fn's exit status and output.
    fn e2fsck(&self) -> (i32, String) {
        let out = bounded("e2fsck", &["-fn"], &self.path);
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        (out.status.code().unwrap_or(-1), text)
    }

    /// e4's report (a forced check on two threads) and exit status; 8 where the image
    /// cannot be checked.
    fn e4(&self) -> (i32, Option<Report>) {
        let options = Options {
            threads: Some(2),
            force: true,
            ..Options::default()
        };
        match check(&self.path, &options) {
            Ok(report) => (i32::from(report.exit_code()), Some(report)),
            Err(_) => (8, None),
        }
    }

    /// Asserts that both checkers exit with `expected` and that e4 reports `code` (when
    /// given); returns e4's report.
    fn assert_exit(&self, what: &str, expected: i32, code: Option<ProblemCode>) {
        let (oracle, oracle_text) = self.e2fsck();
        let (ours, report) = self.e4();
        let mut our_text = Vec::new();
        if let Some(report) = &report {
            report.write_text(&mut our_text, "fs.img").unwrap();
        }
        let our_text = String::from_utf8_lossy(&our_text);
        assert!(
            oracle == expected && ours == expected,
            "{what}: expected exit {expected}, e2fsck {oracle}, e4 {ours}\n--- e2fsck -fn:\n{oracle_text}\n--- e4 fsck:\n{our_text}"
        );
        if let Some(code) = code {
            assert!(
                report.is_some_and(|r| r.problems.iter().any(|p| p.code == code)),
                "{what}: {code} not reported\n{our_text}"
            );
        }
    }
}

/// A 1 KiB-block ext4 image with the smallest journal jbd2 takes (1,024 blocks).
fn journaled() -> TestImage {
    TestImage::new(&["-t", "ext4", "-b", "1024"], "4M")
}

/// Writes big-endian `value` of `size` bytes at `offset` of the journal superblock of
/// `img`, then seals it when `seal` (so that only the field is wrong, not the checksum).
fn poke_journal(img: &TestImage, fields: &[(usize, u32, usize)], seal: bool) {
    let at = img.bmap(8, 0) * img.block_size();
    let mut raw = img.read(at, 1024);
    for &(offset, value, size) in fields {
        raw[offset..offset + size].copy_from_slice(&value.to_be_bytes()[4 - size..]);
    }
    if seal {
        JournalSuperblock::seal(&mut raw, ());
    }
    img.write(at, &raw);
}

/// Journal superblock fields to write: (byte offset, big-endian value, size in bytes).
type Fields = &'static [(usize, u32, usize)];

/// Journal superblock fields, as `e2fsck_journal_load` checks them: each damage is
/// called damaged (exit 12: e2fsck cannot go on), and what it accepts is clean.
#[test]
fn journal_superblock_checked_as_e2fsck_loads_it() {
    use ProblemCode::*;
    // (what, fields (offset, value, size), seal, e2fsck's exit, e4's code)
    type Case = (
        &'static str,
        &'static [(usize, u32, usize)],
        bool,
        i32,
        ProblemCode,
    );
    let cases: &[Case] = &[
        (
            "no magic",
            &[(0x0, 0, 4)],
            false,
            12,
            PR_0_JOURNAL_BAD_INODE,
        ),
        (
            "a descriptor block's type",
            &[(0x4, 1, 4)],
            false,
            12,
            PR_0_JOURNAL_BAD_SUPER,
        ),
        (
            "an unknown block type",
            &[(0x4, 9, 4)],
            false,
            12,
            PR_0_JOURNAL_UNSUPP_VERSION,
        ),
        (
            "v1 with v2 fields",
            &[(0x4, 3, 4), (0x24, 1, 4), (0x40, 2, 4)],
            false,
            0,
            PR_0_CLEAR_V2_JOURNAL,
        ),
        (
            "two users",
            &[(0x40, 2, 4)],
            false,
            12,
            PR_0_JOURNAL_UNSUPP_MULTIFS,
        ),
        (
            "an unknown incompatible feature",
            &[(0x28, 0x40, 4)],
            false,
            12,
            PR_0_JOURNAL_UNSUPP_INCOMPAT,
        ),
        (
            "a read-only compatible feature",
            &[(0x2C, 0x2, 4)],
            false,
            12,
            PR_0_JOURNAL_UNSUPP_ROCOMPAT,
        ),
        (
            "checksums v2 and v3",
            &[(0x28, 0x18, 4), (0x50, 4, 1)],
            true,
            12,
            PR_0_JOURNAL_BAD_SUPER,
        ),
        (
            "checksums v1 and v3",
            &[(0x24, 1, 4), (0x28, 0x10, 4), (0x50, 4, 1)],
            true,
            12,
            PR_0_JOURNAL_BAD_SUPER,
        ),
        (
            "checksum type not crc32c",
            &[(0x28, 0x10, 4), (0x50, 1, 1)],
            true,
            12,
            PR_0_JOURNAL_BAD_SUPER,
        ),
        (
            "block size not the filesystem's",
            &[(0xC, 2048, 4)],
            false,
            12,
            PR_0_JOURNAL_BAD_SUPER,
        ),
        (
            "longer than its inode",
            &[(0x10, 8192, 4)],
            false,
            12,
            PR_0_JOURNAL_BAD_SUPER,
        ),
        (
            "no room for fast commits",
            &[(0x28, 0x20, 4)],
            false,
            12,
            PR_0_JOURNAL_BAD_SUPER,
        ),
    ];
    for &(what, fields, seal, exit, code) in cases {
        let img = journaled();
        poke_journal(&img, fields, seal);
        img.assert_exit(what, exit, Some(code));
    }
    // The journal inode as `e2fsck_get_journal` wants it: a regular file with links, of
    // at least 1,024 blocks.
    for command in [
        "sif <8> mode 0",
        "sif <8> mode 040600",
        "sif <8> links_count 0",
        "sif <8> size 4096",
    ] {
        let img = journaled();
        img.debugfs(command);
        img.assert_exit(command, 12, Some(PR_0_JOURNAL_BAD_INODE));
    }
    // What e2fsck accepts: shorter than its inode, a log starting at 0 or past the end
    // (`s_first` is not checked), an unknown compatible feature.
    let accepted: &[(&str, Fields)] = &[
        ("shorter than its inode", &[(0x10, 100, 4)]),
        ("log start 0", &[(0x14, 0, 4)]),
        ("log start past the end", &[(0x14, 5000, 4)]),
        ("an unknown compatible feature", &[(0x24, 0x80, 4)]),
    ];
    for &(what, fields) in accepted {
        let img = journaled();
        poke_journal(&img, fields, false);
        img.assert_exit(what, 0, None);
    }
}

/// The bad blocks inode's block map, walked as pass 1's `process_bad_block` sees it.
#[test]
fn bad_blocks_inode_checked_as_pass_1_walks_it() {
    use ProblemCode::*;
    let cases: &[(&str, &[&str], i32, Option<ProblemCode>)] = &[
        (
            "a listed block past the end",
            &["sif <1> block[0] 99999999"],
            4,
            Some(PR_1_BB_ILLEGAL_BLOCK_NUM),
        ),
        (
            "an indirect block past the end",
            &["sif <1> block[IND] 99999999"],
            12,
            Some(PR_1_BLOCK_ITERATE),
        ),
        (
            "both",
            &["sif <1> block[0] 99999999", "sif <1> block[IND] 99999999"],
            12,
            Some(PR_1_BB_ILLEGAL_BLOCK_NUM),
        ),
        // A free block listed as bad is in use: the bitmap differs.
        ("a free block listed", &["sif <1> block[0] 5000"], 4, None),
        (
            "a mode",
            &["sif <1> mode 0100644"],
            4,
            Some(PR_1_INVALID_BAD_INODE),
        ),
        (
            "links",
            &["sif <1> links_count 1"],
            4,
            Some(PR_1_INVALID_BAD_INODE),
        ),
    ];
    for &(what, commands, exit, code) in cases {
        let img = TestImage::new(&["-t", "ext4", "-O", "^has_journal", "-b", "1024"], "8M");
        for command in commands {
            img.debugfs(command);
        }
        img.assert_exit(what, exit, code);
    }
}

/// A listed block inside a sound indirect block: the indirect block is claimed, and
/// the illegal block it lists is reported with its number in the map.
#[test]
fn bad_blocks_inode_with_an_indirect_block() {
    let img = TestImage::new(&["-t", "ext4", "-O", "^has_journal", "-b", "1024"], "8M");
    let bs = img.block_size();
    // Free blocks near the end of the 8 MiB image: 6000 as the indirect block, listing
    // 6001 and an illegal block.
    img.debugfs("sif <1> block[IND] 6000");
    img.debugfs("setb 6000 2");
    let mut list = vec![0u8; bs as usize];
    list[..4].copy_from_slice(&6001u32.to_le_bytes());
    list[4..8].copy_from_slice(&99_999_999u32.to_le_bytes());
    img.write(6000 * bs, &list);
    img.assert_exit(
        "an indirect block listing an illegal block",
        4,
        Some(ProblemCode::PR_1_BB_ILLEGAL_BLOCK_NUM),
    );
}

/// Runs each debugfs command on `img` in order.
fn debugfs_all(img: &TestImage, commands: &[&str]) {
    for command in commands {
        img.debugfs(command);
    }
}

/// Good filesystems e4 called damaged: each is clean to both (or, without the feature or
/// flag that allows it, damaged to both).
#[test]
fn sound_images_are_clean() {
    let ext4 = || TestImage::new(&["-t", "ext4", "-b", "1024"], "8M");
    // The EA_INODE flag on the root (e2fsck 1.47.0 asks nothing of it on a directory).
    let img = ext4();
    img.debugfs("sif <2> flags 0x280000");
    img.assert_exit("EA_INODE on the root", 0, None);
    let img = ext4();
    debugfs_all(&img, &["mkdir d", "sif d flags 0x280000"]);
    img.assert_exit("EA_INODE on a directory", 0, None);
    // No lost+found: `e2fsck -n` never looks it up (only a repair needs it), with or
    // without something to reconnect.
    let img = ext4();
    img.debugfs("rmdir lost+found");
    img.assert_exit("no lost+found", 0, None);
    debugfs_all(&img, &["write /dev/null f", "unlink f"]);
    img.assert_exit(
        "no lost+found, an unattached file",
        4,
        Some(ProblemCode::PR_4_UNATTACHED_INODE),
    );
    // Entries with file type 0 under the filetype feature, as the Hurd writes them.
    let img = TestImage::new(&["-t", "ext2", "-o", "hurd", "-b", "1024"], "8M");
    debugfs_all(&img, &["mkdir d", "feature filetype"]);
    img.assert_exit("the Hurd's entries under filetype", 0, None);
    // Without the feature, a type is a type (libext2fs reads `name_len` as one byte).
    let img = TestImage::new(&["-t", "ext2", "-O", "^filetype", "-b", "1024"], "8M");
    // The file type byte of `lost+found`, the third entry of the root, at byte 24.
    let at = img.bmap(2, 0) * img.block_size() + 24 + 7;
    img.write(at, &[2]);
    img.assert_exit(
        "a file type without the feature",
        4,
        Some(ProblemCode::PR_2_CLEAR_FILETYPE),
    );
}

/// A block in two files: multiply claimed, unless the shared_blocks feature allows it.
#[test]
fn shared_blocks_feature() {
    let img = TestImage::new(&["-t", "ext2", "-b", "1024"], "8M");
    let source = img._dir.path().join("hello");
    std::fs::write(&source, "hello\n").unwrap();
    debugfs_all(
        &img,
        &[
            &format!("write {} a", source.display()),
            "write /dev/null b",
        ],
    );
    let block = img.bmap(12, 0);
    debugfs_all(
        &img,
        &[
            &format!("sif b block[0] {block}"),
            "sif b size 6",
            "sif b blocks 2",
        ],
    );
    img.assert_exit(
        "a block in two files",
        4,
        Some(ProblemCode::PR_1B_DUP_BLOCK),
    );
    img.debugfs("feature shared_blocks");
    img.assert_exit("a block in two files under shared_blocks", 0, None);
}

/// Uninitialized flags and `bg_itable_unused` without group checksums: asked in
/// `check_super_block`, after which e2fsck marks the filesystem valid again.
#[test]
fn uninit_descriptor_fields_without_the_feature() {
    for (what, command) in [
        ("INODE_UNINIT", "set_bg 1 flags 1"),
        ("BLOCK_UNINIT on the last group", "set_bg 1 flags 2"),
        ("itable_unused", "set_bg 1 itable_unused 5"),
    ] {
        let img = TestImage::new(
            &[
                "-t",
                "ext4",
                "-O",
                "^metadata_csum,^uninit_bg",
                "-b",
                "1024",
            ],
            "16M",
        );
        img.debugfs(command);
        img.assert_exit(what, 0, Some(ProblemCode::PR_0_GDT_UNINIT));
    }
}

/// A primary superblock that does not validate, with a sound backup: `e2fsck -n` checks
/// from the backup and exits 0; e4 does too, and keeps exit 4 for the primary, which the
/// kernel reads (it mounts nothing else without `sb=`).
#[test]
fn bad_primary_superblock_with_a_sound_backup() {
    let img = TestImage::new(&["-t", "ext2", "-b", "1024"], "16M");
    // `s_magic` at byte 56 of the superblock.
    img.write(1024 + 56, &[0, 0]);
    let (oracle, text) = img.e2fsck();
    assert_eq!(oracle, 0, "{text}");
    let (ours, report) = img.e4();
    assert_eq!(ours, 4);
    let codes: Vec<ProblemCode> = report.unwrap().problems.iter().map(|p| p.code).collect();
    assert_eq!(codes, [ProblemCode::PR_0_SB_CORRUPT]);
}

/// A primary superblock whose cluster size differs from its block size without bigalloc
/// (`s_log_cluster_size`, at byte 28): libext2fs's `ext2fs_open2` calls it corrupt, so
/// `e2fsck -n` checks from the backup in group 1, and e4 does as for any primary that
/// does not validate: it reports `PR_0_SB_CORRUPT`, an error (the kernel refuses to mount
/// such a primary, "fragment/cluster size != block size"), and what the backup's stale
/// descriptors show, as e2fsck does (mke2fs never writes group 1's uninitialized inode
/// bitmap with metadata_csum). With one group there is no backup: both stop, exit 8.
#[test]
fn cluster_size_without_bigalloc() {
    type Case = (
        &'static str,
        &'static [&'static str],
        bool,
        i32,
        &'static [ProblemCode],
    );
    let cases: [Case; 2] = [
        ("ext2", &["-t", "ext2", "-b", "1024"], false, 0, &[]),
        (
            "ext4 with metadata_csum",
            &["-t", "ext4", "-b", "1024"],
            true,
            4,
            &[
                ProblemCode::PR_5_INODE_BMAP_PADDING,
                ProblemCode::PR_5_INODE_BITMAP_CSUM_INVALID,
            ],
        ),
    ];
    for (what, mke2fs_args, sealed, oracle_exit, backup_codes) in cases {
        let img = TestImage::new(mke2fs_args, "16M");
        set_log_cluster_size(&img, 1, sealed);
        let (oracle, text) = img.e2fsck();
        assert!(
            oracle == oracle_exit && text.contains("Superblock invalid, trying backup blocks"),
            "{what}: e2fsck {oracle}\n{text}"
        );
        let (ours, report) = img.e4();
        assert_eq!(ours, 4, "{what}");
        let codes: Vec<ProblemCode> = report.unwrap().problems.iter().map(|p| p.code).collect();
        assert_eq!(codes[0], ProblemCode::PR_0_SB_CORRUPT, "{what}");
        assert_eq!(&codes[1..], backup_codes, "{what}");
    }
    let img = TestImage::new(&["-t", "ext4", "-b", "4096"], "8M");
    set_log_cluster_size(&img, 3, true);
    img.assert_exit("one group, no backup", 8, None);
}

/// Writes `s_log_cluster_size` of the primary superblock of `img`, resealing its checksum
/// when `sealed` (so that the field alone is wrong).
fn set_log_cluster_size(img: &TestImage, log: u32, sealed: bool) {
    let mut raw = img.read(1024, 1024);
    raw[28..32].copy_from_slice(&log.to_le_bytes());
    if sealed {
        Superblock::seal(&mut raw, ());
    }
    img.write(1024, &raw);
}

/// Issue 23: a superblock claiming 2^16 groups (of 32,768 4 KiB blocks: a sparse 8 TiB
/// file) over a 32 MiB image, whose descriptor table then holds zeros (no inode table,
/// skipped) and, from group 256 on, the bytes of the block bitmap that follows (0xff:
/// tables far past the end). e2fsck reports each descriptor in pass 0 and stops where
/// its inode scan meets group 256 (exit 12, 67,767 lines); e4 printed 11 million lines
/// (every block of every later group in pass 5). It must stop there too, with no more
/// lines than e2fsck.
#[test]
fn claimed_groups_of_garbage_descriptors_stop_where_e2fsck_stops() {
    const GROUPS: u64 = 1 << 16;
    let img = TestImage::new(&["-t", "ext4", "-b", "4096", "-O", "64bit"], "32M");
    // One debugfs run: the image does not open between these.
    let script = img._dir.path().join("claims.debugfs");
    std::fs::write(
        &script,
        format!(
            "ssv blocks_count {}\nssv inodes_per_group 16\nssv inodes_count {}\n",
            GROUPS * 32768,
            GROUPS * 16
        ),
    )
    .unwrap();
    let script = script.to_str().unwrap();
    bounded("debugfs", &["-w", "-f", script], &img.path);
    // What a table at block 0 would hold first, were it read: a regular file in use (in
    // the boot block, which ext4 leaves alone with 4 KiB blocks).
    let mut inode = [0u8; 256];
    inode[..2].copy_from_slice(&0o100_644u16.to_le_bytes());
    inode[26] = 1;
    img.write(0, &inode);
    OpenOptions::new()
        .write(true)
        .open(&img.path)
        .unwrap()
        .set_len(GROUPS * 32768 * 4096)
        .unwrap();
    let (oracle, text) = img.e2fsck();
    let (ours, report) = img.e4();
    let report = report.expect("e4 checks it");
    let mut our_text = Vec::new();
    report.write_text(&mut our_text, "fs.img").unwrap();
    let our_lines = our_text.split(|&b| b == b'\n').count();
    let their_lines = text.lines().count();
    assert_eq!(
        (oracle, ours),
        (12, 12),
        "{}",
        &text[..text.len().min(2000)]
    );
    assert!(
        our_lines <= their_lines,
        "e4 {our_lines} lines, e2fsck {their_lines}"
    );
    // Past pass 0, only the stop: no group before it has an inode table e2fsck reads
    // (group 0's inodes are sound, the others' tables are at block 0, none), and nothing
    // runs after it.
    let past_pass_0: Vec<(ProblemCode, e4_fsck::Location)> = report
        .problems
        .iter()
        .filter(|p| p.code.pass() > 0)
        .map(|p| (p.code, p.location))
        .collect();
    assert_eq!(
        past_pass_0,
        // At the first inode of group 256, where e2fsck's scan meets it.
        [(
            ProblemCode::PR_1_ISCAN_ERROR,
            e4_fsck::Location::Inode(256 * 16 + 1)
        )]
    );
}

/// Where `e2fsck -n` stops because going on would need a write, e4 goes on (it reports
/// what follows) but exits as e2fsck does.
#[test]
fn exit_status_where_e2fsck_stops() {
    let img = TestImage::new(&["-t", "ext4", "-b", "1024"], "8M");
    img.debugfs("clri <2>");
    img.assert_exit("no root", 12, Some(ProblemCode::PR_3_NO_ROOT_INODE));
    let img = TestImage::new(&["-t", "ext4", "-O", "^metadata_csum", "-b", "1024"], "8M");
    img.debugfs("mkdir d");
    // `..`'s rec_len, at byte 16 of the block: 5, not a multiple of 4.
    let at = img.bmap(12, 0) * img.block_size() + 16;
    img.write(at, &5u16.to_le_bytes());
    img.assert_exit(
        "a directory to salvage",
        12,
        Some(ProblemCode::PR_2_DIR_CORRUPTED),
    );
}

/// Flips a bit of inode `ino`'s stored checksum (`i_checksum_lo`, at byte 0x7C).
fn break_inode_checksum(img: &TestImage, ino: u32) {
    let raw = e4_testkit::RawImage::read(&img.path).unwrap();
    let at = raw.inode_offset(ino).unwrap() + 0x7C;
    let byte = img.read(at, 1)[0];
    img.write(at, &[byte ^ 1]);
}

/// Where libext2fs's own walks end in an error, e2fsck stops: a block map naming an
/// indirect block outside the filesystem (any inode), the bad blocks inode failing its
/// checksum, pass 1B's scan meeting an inode that fails its checksum, pass 2's
/// `process_bad_inode` or pass 4 reading one, and a journal whose map stops short of its
/// size.
#[test]
fn walks_that_stop_e2fsck() {
    use ProblemCode::*;
    let img = TestImage::new(&["-t", "ext2", "-b", "1024"], "8M");
    debugfs_all(&img, &["write /dev/null f", "sif f block[IND] 99999999"]);
    img.assert_exit(
        "a file's indirect block past the end",
        12,
        Some(PR_1_BLOCK_ITERATE),
    );

    let csum = ["-t", "ext4", "-O", "^extent,^64bit", "-b", "1024"];
    let img = TestImage::new(&csum, "8M");
    break_inode_checksum(&img, 1);
    img.assert_exit(
        "the bad blocks inode's checksum",
        12,
        Some(PR_1_BLOCK_ITERATE),
    );

    let img = TestImage::new(&csum, "8M");
    let source = img._dir.path().join("hello");
    std::fs::write(&source, "hello\n").unwrap();
    debugfs_all(
        &img,
        &[
            &format!("write {} a", source.display()),
            "write /dev/null b",
        ],
    );
    let block = img.bmap(12, 0);
    debugfs_all(
        &img,
        &[
            &format!("sif b block[0] {block}"),
            "sif b size 6",
            "sif b blocks 2",
        ],
    );
    img.assert_exit("a block in two files", 4, Some(PR_1B_DUP_BLOCK));
    break_inode_checksum(&img, 13);
    img.assert_exit("pass 1B meeting a checksum", 12, Some(PR_1B_ISCAN_ERROR));

    // An inode pass 1 marks bad (a mode of no file type), read again by pass 2's
    // `process_bad_inode` for the entry naming it.
    let img = TestImage::new(&["-t", "ext4", "-b", "1024"], "8M");
    debugfs_all(&img, &["write /dev/null f", "sif f mode 0170644"]);
    img.assert_exit("a bad mode", 4, Some(PR_2_BAD_MODE));
    break_inode_checksum(&img, 12);
    img.assert_exit(
        "a bad mode and a checksum",
        12,
        Some(EXT2_ET_BAD_INODE_CSUM_INVALID),
    );

    // Pass 4 reads an inode again when its references differ from its links count, or
    // when nothing names it (`check_ea_inode`).
    for (what, command, code) in [
        (
            "a links count off",
            "sif f links_count 2",
            PR_4_BAD_REF_COUNT,
        ),
        ("an unattached inode", "unlink f", PR_4_UNATTACHED_INODE),
    ] {
        let img = TestImage::new(&["-t", "ext4", "-b", "1024"], "8M");
        debugfs_all(&img, &["write /dev/null f", "sif f size 1", command]);
        img.assert_exit(what, 4, Some(code));
        break_inode_checksum(&img, 12);
        img.assert_exit(
            &format!("{what} and a checksum"),
            12,
            Some(EXT2_ET_PASS4_INODE_CSUM_INVALID),
        );
    }

    // ext3's journal is block-mapped: a block of it past the end ends the walk short.
    let img = TestImage::new(&["-t", "ext3", "-b", "1024"], "8M");
    // The first pointer of the single indirect block: logical block 12.
    let ind = img
        .debugfs("blocks <8>")
        .split_whitespace()
        .nth(12)
        .and_then(|b| b.parse::<u64>().ok())
        .expect("the journal's 13th block is its indirect block");
    img.write(ind * img.block_size() + 40, &99_999_999u32.to_le_bytes());
    img.assert_exit(
        "a journal block past the end",
        12,
        Some(PR_0_JOURNAL_BAD_INODE),
    );
}

/// The resize inode's map, walked by pass 1 as `check_blocks` walks any block map (the
/// double indirect block owned, the rest counted), after `check_resize_inode` has looked
/// at its layout: a reserved descriptor block (an indirect block here) outside the
/// filesystem ends libext2fs's walk, which stops e2fsck; a copy of one outside is an
/// illegal block. And the inode is read as libext2fs reads it, whatever its
/// `i_extra_isize` (found by random flips in an ext3 resize inode: e4 took it for
/// unreadable and stopped, e2fsck found it sound).
#[test]
fn resize_inode_map_walked_as_any_block_map() {
    use ProblemCode::*;
    let resize_inode_word = |img: &TestImage, at: u64| {
        let bytes = img.read(at, 4);
        u64::from(u32::from_le_bytes(bytes.try_into().unwrap()))
    };
    let inode_at = |img: &TestImage| {
        e4_testkit::RawImage::read(&img.path)
            .unwrap()
            .inode_offset(7)
            .unwrap()
    };
    let cases: [(&str, u64, i32, Option<ProblemCode>); 3] = [
        // Entry 1 of the double indirect block names reserved block 0 (one
        // descriptor block before it), entry 2 reserved block 1.
        (
            "a reserved block past the end",
            1,
            12,
            Some(PR_1_BLOCK_ITERATE),
        ),
        (
            "the last reserved block past the end",
            2,
            12,
            Some(PR_1_BLOCK_ITERATE),
        ),
        // u64::MAX: the first word of reserved block 0, its first copy.
        (
            "a copy past the end",
            u64::MAX,
            4,
            Some(PR_1_ILLEGAL_BLOCK_NUM),
        ),
    ];
    for (what, entry, status, code) in cases {
        let img = TestImage::new(&["-t", "ext4", "-b", "1024"], "8M");
        let dind = resize_inode_word(&img, inode_at(&img) + 0x28 + 4 * 13);
        let at = if entry == u64::MAX {
            resize_inode_word(&img, dind * 1024 + 4) * 1024
        } else {
            dind * 1024 + 4 * entry
        };
        img.write(at, &99_999_999u32.to_le_bytes());
        img.assert_exit(what, status, code);
    }
    let img = TestImage::new(&["-t", "ext3", "-b", "1024"], "8M");
    img.write(inode_at(&img) + 0x80, &32_800u16.to_le_bytes());
    img.assert_exit("an i_extra_isize past the resize inode", 0, None);
}

/// A journal UUID in the superblock names an external journal, which e2fsck looks for
/// whatever the features say (on ext2 too) and does not find for an image: "Can't find
/// external journal", exit 12. With a null UUID, `s_journal_dev` does not matter: the
/// internal journal is checked. Found by the sweep (a flipped bit of `s_journal_uuid`).
#[test]
fn external_journal_named_by_uuid() {
    for fs in ["ext2", "ext4"] {
        let img = TestImage::new(&["-t", fs], "8M");
        debugfs_all(
            &img,
            &["ssv journal_uuid 11111111-2222-3333-4444-555555555555"],
        );
        img.assert_exit(
            &format!("{fs} naming an external journal"),
            12,
            Some(ProblemCode::PR_0_CANT_FIND_JOURNAL),
        );
    }
    let img = TestImage::new(&["-t", "ext4"], "8M");
    debugfs_all(&img, &["ssv journal_dev 0x801"]);
    img.assert_exit("a journal device beside the inode", 0, None);
}

/// A reserved inode (other than the root) whose fields `process_bad_inode` would report
/// is never reported by e2fsck: no entry it follows names one and its pass 4 skips
/// them. Found by the sweep: the boot loader inode's xattr block number flipped past
/// the filesystem.
#[test]
fn bad_fields_of_a_reserved_inode() {
    let img = TestImage::new(&["-t", "ext4", "-b", "1024"], "8M");
    debugfs_all(&img, &["sif <5> file_acl 4194304"]);
    img.assert_exit("the boot loader inode's xattr block past the end", 0, None);
}

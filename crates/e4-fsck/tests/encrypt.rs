//! encrypt (issue 24) against `e2fsck -fn`: an image made with `mke2fs -O encrypt`
//! whose encrypted directory, files and symlink are made without a key, as debugfs can:
//! the encrypt flag, an fscrypt context in attribute index 9 named `c` (version 1, as the
//! kernel stores it; debugfs writes index 0, moved to 9 here and the inode checksum
//! computed again) and ciphertext-like names. Names are opaque bytes (a `/` or NUL in
//! one is no damage), but their length, the policy of every file an entry names and the
//! context itself are checked. Both checkers must give the same exit status and classes.

mod common;

use std::path::Path;
use std::process::Command;

use e4_format::inode::{Inode, InodeSeed};
use e4_format::MetadataBlock;
use e4_fsck::ProblemCode;
use e4_testkit::{make_empty_image, Image, RawImage};

use common::flips::assert_random_flips_agree;
use common::{
    assert_agreement, debugfs, edit_dir_block, entry_offset, forced_check, inode_of, inode_offset,
    read_bytes, write_bytes,
};

/// The encrypted directory and the names of what it holds (32 and 16 bytes, as
/// ciphertext names are whole cipher blocks).
const DIR: &str = "e";
const FILE: &str = "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA";
const SECOND: &str = "BBBBBBBBBBBBBBBB";
const SYMLINK: &str = "SSSSSSSSSSSSSSSSSSSSSSSS";
/// `EXT4_ENCRYPT_FL`, with `EXT4_EXTENTS_FL` for what debugfs maps by extents.
const ENCRYPT_FL: u32 = 0x800;
const EXTENTS_FL: u32 = 0x80000;
/// Byte offset of `i_block` in an inode record.
const I_BLOCK: usize = 0x28;
/// fscrypt's name index for the context (`EXT4_XATTR_INDEX_ENCRYPTION`).
const ENCRYPTION_INDEX: u8 = 9;

/// A version-1 fscrypt context: AES-256-XTS contents, AES-256-CTS names, no flags, the
/// 8-byte key descriptor `key`, then a 16-byte nonce from `nonce` (each file has its
/// own; it is not part of the policy).
fn context_v1(key: u8, nonce: u8) -> Vec<u8> {
    let mut context = vec![1, 1, 4, 0];
    context.extend((0..8).map(|i| key + i));
    context.extend((0..16).map(|i| nonce + i));
    context
}

/// Runs `commands` in one debugfs session, bounded in time; returns what it printed.
fn run_debugfs(image: &Path, commands: &[String]) -> String {
    let script = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(script.path(), commands.join("\n")).unwrap();
    let out = Command::new("timeout")
        .args(["60", "debugfs", "-w", "-f"])
        .arg(script.path())
        .arg(image)
        .output()
        .unwrap();
    assert!(out.status.success(), "debugfs: {out:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Host files the debugfs commands read: contexts by name, and a small file.
struct HostFiles(tempfile::TempDir);

impl HostFiles {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("small"), b"hello\n").unwrap();
        std::fs::write(dir.path().join("ctx1"), context_v1(0, 100)).unwrap();
        std::fs::write(dir.path().join("ctx1-file"), context_v1(0, 200)).unwrap();
        std::fs::write(dir.path().join("ctx2"), context_v1(10, 100)).unwrap();
        std::fs::write(dir.path().join("ctx-short"), &context_v1(0, 100)[..20]).unwrap();
        let mut v3 = context_v1(0, 100);
        v3[0] = 3;
        std::fs::write(dir.path().join("ctx-v3"), v3).unwrap();
        HostFiles(dir)
    }

    fn path(&self, name: &str) -> String {
        self.0.path().join(name).display().to_string()
    }
}

/// Commands making `path` encrypted with the context in host file `context`.
fn encrypt(host: &HostFiles, path: &str, flags: u32, context: &str) -> Vec<String> {
    vec![
        format!("sif {path} flags {:#x}", flags | ENCRYPT_FL),
        format!("ea_set -f {} {path} c", host.path(context)),
    ]
}

/// Applies `edit` to inode `ino`'s record and seals its checksum again (through
/// e4-format), so that only the edit is left to find.
fn edit_inode(image: &Path, ino: u32, edit: impl FnOnce(&mut [u8])) {
    let raw = RawImage::read(image).unwrap();
    let sb = raw.superblock();
    let at = inode_offset(image, ino);
    let mut record = read_bytes(image, at, sb.inode_size() as usize);
    edit(&mut record);
    let fs_seed = sb.csum_seed();
    Inode::seal(&mut record, InodeSeed { fs_seed, ino });
    write_bytes(image, at, &record);
}

/// Moves inode `ino`'s context attribute from debugfs's index 0 to the kernel's 9.
fn move_context_to_index_nine(image: &Path, ino: u32) {
    edit_inode(image, ino, |record| {
        let extra = usize::from(u16::from_le_bytes([record[128], record[129]]));
        // After the 4-byte magic: e_name_len, then e_name_index of the first entry.
        let index_at = 128 + extra + 4 + 1;
        assert_eq!(
            record[index_at - 1..=index_at],
            [1, 0],
            "<{ino}>: entry `c`"
        );
        record[index_at] = ENCRYPTION_INDEX;
    });
}

/// The image and the inode of `/e/BBBBBBBBBBBBBBBB` (debugfs finds no name inside an
/// encrypted directory, so later commands name it by number).
struct Tree {
    image: Image,
    second: u32,
}

/// The inode debugfs's `write` or `mknod` reports allocating.
fn allocated(output: &str) -> u32 {
    let rest = output
        .split("Allocated inode: ")
        .nth(1)
        .expect("an inode was allocated");
    rest.split_whitespace().next().unwrap().parse().unwrap()
}

/// The encrypted directory `/e` holding two encrypted files and an encrypted fast
/// symlink (a 2-byte length, then 16 bytes of ciphertext), all of one policy. The
/// directory is encrypted last, once its entries are made.
fn encrypted_image(host: &HostFiles) -> Tree {
    let image = make_empty_image(&["-t", "ext4", "-O", "encrypt"], 8);
    let small = host.path("small");
    let mut commands = vec![format!("mkdir {DIR}")];
    for name in [FILE, SECOND] {
        commands.push(format!("write {small} {DIR}/{name}"));
        commands.extend(encrypt(
            host,
            &format!("{DIR}/{name}"),
            EXTENTS_FL,
            "ctx1-file",
        ));
    }
    commands.push(format!("symlink {DIR}/{SYMLINK} xxxxxxxxxxxxxxxxxx"));
    commands.extend(encrypt(host, &format!("{DIR}/{SYMLINK}"), 0, "ctx1-file"));
    run_debugfs(&image.path, &commands);
    let inodes: Vec<u32> = [
        DIR.to_string(),
        format!("{DIR}/{FILE}"),
        format!("{DIR}/{SECOND}"),
    ]
    .iter()
    .chain([format!("{DIR}/{SYMLINK}")].iter())
    .map(|path| inode_of(&image.path, path))
    .collect();
    run_debugfs(&image.path, &encrypt(host, DIR, EXTENTS_FL, "ctx1"));
    // i_block: the ciphertext's length (16), then the ciphertext.
    edit_inode(&image.path, inodes[3], |record| {
        record[I_BLOCK..I_BLOCK + 2].copy_from_slice(&16u16.to_le_bytes())
    });
    for &ino in &inodes {
        move_context_to_index_nine(&image.path, ino);
    }
    Tree {
        second: inodes[2],
        image,
    }
}

/// e2fsck -fn's exit status.
fn e2fsck_exit(image: &Path) -> i32 {
    let out = Command::new("timeout")
        .args(["60", "e2fsck", "-fn"])
        .arg(image)
        .output()
        .unwrap();
    out.status.code().unwrap_or(-1)
}

/// Asserts both checkers exit with `expected` and agree on the classes; returns e4's
/// problem codes.
fn assert_exit(image: &Path, what: &str, expected: i32) -> Vec<ProblemCode> {
    assert_agreement(image, what);
    let report = forced_check(image, Some(2));
    assert_eq!(
        (e2fsck_exit(image), i32::from(report.exit_code())),
        (expected, expected),
        "{what}: exit statuses (e2fsck, e4)"
    );
    report.problems.iter().map(|p| p.code).collect()
}

/// Replaces the first two bytes of `/e`'s entry `name` with `/` and NUL.
fn slash_and_nul_in(image: &Path, name: &str) {
    edit_dir_block(image, DIR, 0, |block| {
        let at = entry_offset(block, name.as_bytes()) + 8;
        block[at] = b'/';
        block[at + 1] = 0;
    });
}

#[test]
fn encrypted_directory_is_clean() {
    let host = HostFiles::new();
    let image = encrypted_image(&host).image;
    assert!(assert_exit(&image.path, "encrypted tree", 0).is_empty());
    // Ciphertext may hold any byte.
    slash_and_nul_in(&image.path, FILE);
    assert!(assert_exit(&image.path, "`/` and NUL in a ciphertext name", 0).is_empty());
    // Files that need no encryption need no policy.
    // (debugfs's mknod makes the entry in its current directory.)
    run_debugfs(
        &image.path,
        &[format!("cd {DIR}"), "mknod FFFFFFFFFFFFFFFF p".to_string()],
    );
    assert!(assert_exit(&image.path, "an unencrypted fifo", 0).is_empty());
}

#[test]
fn encryption_damage_agrees() {
    use ProblemCode::*;
    type Damage = fn(&Path, &HostFiles, u32);
    let cases: &[(&str, Damage, ProblemCode)] = &[
        (
            "an unencrypted file in the encrypted directory",
            |img, host, _| {
                let small = host.path("small");
                run_debugfs(img, &[format!("write {small} {DIR}/CCCCCCCCCCCCCCCC")]);
            },
            PR_2_UNENCRYPTED_FILE,
        ),
        (
            "a name shorter than a cipher block",
            |img, host, _| {
                let small = host.path("small");
                let ino = allocated(&run_debugfs(img, &[format!("write {small} {DIR}/short")]));
                run_debugfs(img, &encrypt(host, &format!("<{ino}>"), EXTENTS_FL, "ctx1"));
            },
            PR_2_BAD_ENCRYPTED_NAME,
        ),
        (
            "a file of another key",
            |img, host, second| {
                let path = format!("<{second}>");
                run_debugfs(img, &[format!("ea_set -f {} {path} c", host.path("ctx2"))]);
            },
            PR_2_INCONSISTENT_ENCRYPTION_POLICY,
        ),
        (
            "a file of a context version e2fsck does not know",
            |img, host, second| {
                let path = format!("<{second}>");
                run_debugfs(
                    img,
                    &[format!("ea_set -f {} {path} c", host.path("ctx-v3"))],
                );
            },
            PR_2_INCONSISTENT_ENCRYPTION_POLICY,
        ),
        (
            "the encrypt flag without a context",
            |img, _, second| {
                debugfs(img, &format!("ea_rm <{second}> c"));
            },
            PR_1_MISSING_ENCRYPTION_XATTR,
        ),
        (
            "a context of the wrong size",
            |img, host, second| {
                let path = format!("<{second}>");
                run_debugfs(
                    img,
                    &[format!("ea_set -f {} {path} c", host.path("ctx-short"))],
                );
            },
            PR_1_CORRUPT_ENCRYPTION_XATTR,
        ),
        (
            "a directory whose context is corrupt: its names are plain names",
            |img, host, _| {
                run_debugfs(
                    img,
                    &[format!("ea_set -f {} {DIR} c", host.path("ctx-short"))],
                );
                slash_and_nul_in(img, FILE);
            },
            PR_2_BAD_NAME,
        ),
    ];
    let host = HostFiles::new();
    for &(what, damage, code) in cases {
        let Tree { image, second } = encrypted_image(&host);
        damage(&image.path, &host, second);
        let codes = assert_exit(&image.path, what, 4);
        assert!(codes.contains(&code), "{what}: {code:?} not in {codes:?}");
    }
}

/// Random bit flips in the inode table (where the contexts and the symlink live) and the
/// encrypted directory's block: the same verdict as e2fsck, no panic, no hang.
#[test]
fn random_flips_in_an_encrypted_tree() {
    let host = HostFiles::new();
    let image = encrypted_image(&host).image;
    let table = common::inode_offset(&image.path, 12) / 1024;
    let table_blocks = usize::try_from(table + 2).unwrap();
    let damaged = assert_random_flips_agree(&image.path, &[DIR], table_blocks, 40, 26);
    assert!(damaged > 0, "no round damaged anything");
}

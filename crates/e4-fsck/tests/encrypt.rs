//! encrypt (issue 24) against `e2fsck -fn`: an image made with `mke2fs -O encrypt`
//! whose encrypted directory, files and symlink are made without a key, as debugfs can:
//! the encrypt flag, an fscrypt context in attribute index 9 named `c` (version 1, as the
//! kernel stores it; debugfs writes index 0, moved to 9 here and the inode checksum
//! computed again) and ciphertext-like names. Names are opaque bytes (a `/` or NUL in
//! one is no damage), but their length, the policy of every file an entry names and the
//! context itself are checked. Both checkers must give the same exit status and classes.

mod common;

use std::path::Path;

use e4_fsck::ProblemCode;
use e4_testkit::{kernel_comparison_skipped, make_empty_image, Image, KernelMount};

use common::flips::assert_random_flips_agree;
use common::fscrypt::{context_v1, edit_inode, move_context_to_index_nine, ENCRYPT_FL, EXTENTS_FL};
use common::{assert_exit, debugfs, edit_dir_block, entry_offset, inode_of, run_debugfs};

/// The encrypted directory and the names of what it holds (32 and 16 bytes, as
/// ciphertext names are whole cipher blocks).
const DIR: &str = "e";
const FILE: &str = "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA";
const SECOND: &str = "BBBBBBBBBBBBBBBB";
const SYMLINK: &str = "SSSSSSSSSSSSSSSSSSSSSSSS";
/// Byte offset of `i_block` in an inode record.
const I_BLOCK: usize = 0x28;

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

/// `FS_IOC_ADD_ENCRYPTION_KEY`: `_IOWR('f', 23, struct fscrypt_add_key_arg)` (80 bytes).
const FS_IOC_ADD_ENCRYPTION_KEY: libc::c_ulong = 0xC050_6617;
/// `FS_IOC_SET_ENCRYPTION_POLICY`: `_IOR('f', 19, struct fscrypt_policy_v1)`; a version-2
/// policy goes through it too.
const FS_IOC_SET_ENCRYPTION_POLICY: libc::c_ulong = 0x800C_6613;
/// `FSCRYPT_KEY_SPEC_TYPE_IDENTIFIER`.
const KEY_SPEC_TYPE_IDENTIFIER: u32 = 2;

/// `struct fscrypt_add_key_arg` with a 64-byte raw key after it.
#[repr(C)]
struct AddKey {
    spec_type: u32,
    spec_reserved: u32,
    /// The key's identifier, filled in by the kernel.
    identifier: [u8; 32],
    raw_size: u32,
    key_id: u32,
    reserved: [u32; 8],
    raw: [u8; 64],
}

/// Adds a key to the filesystem mounted at `root` and makes the empty directory `dir`
/// encrypted with it (a version-2 policy: AES-256-XTS contents, AES-256-CTS names).
fn encrypt_with_a_new_key(root: &Path, dir: &Path) -> Result<(), String> {
    use std::os::fd::AsRawFd;
    let ioctl = |path: &Path, request: libc::c_ulong, arg: *mut u8| {
        let file = std::fs::File::open(path).map_err(|e| e.to_string())?;
        // SAFETY: `arg` points to a live struct of the size the request encodes, and the
        // descriptor is open for the call.
        let rc = unsafe { libc::ioctl(file.as_raw_fd(), request, arg) };
        if rc == 0 {
            Ok(())
        } else {
            Err(std::io::Error::last_os_error().to_string())
        }
    };
    let mut key = AddKey {
        spec_type: KEY_SPEC_TYPE_IDENTIFIER,
        spec_reserved: 0,
        identifier: [0; 32],
        raw_size: 64,
        key_id: 0,
        reserved: [0; 8],
        raw: std::array::from_fn(|i| i as u8 ^ 0x5A),
    };
    ioctl(
        root,
        FS_IOC_ADD_ENCRYPTION_KEY,
        (&mut key as *mut AddKey).cast(),
    )
    .map_err(|e| format!("adding a key: {e}"))?;
    let mut policy = [0u8; 24];
    policy[..4].copy_from_slice(&[2, 1, 4, 0]);
    policy[8..].copy_from_slice(&key.identifier[..16]);
    ioctl(dir, FS_IOC_SET_ENCRYPTION_POLICY, policy.as_mut_ptr())
        .map_err(|e| format!("setting the policy: {e}"))
}

/// A tree the kernel encrypted with a real key: 300 files (an htree over ciphertext
/// names), a subdirectory, fast and slow symlinks, a fifo. Both checkers find it clean,
/// and give the same verdict on random bit flips in the directory's blocks.
#[test]
fn kernel_encrypted_tree_is_clean() {
    let image = make_empty_image(&["-t", "ext4", "-O", "encrypt"], 16);
    {
        let Ok(mount) = KernelMount::mount_writable(&image.path) else {
            return;
        };
        let root = mount.path();
        let dir = root.join(DIR);
        std::fs::create_dir(&dir).unwrap();
        if let Err(why) = encrypt_with_a_new_key(&root, &dir) {
            kernel_comparison_skipped("an encrypted tree", &why);
            return;
        }
        for i in 0..300 {
            std::fs::write(dir.join(format!("file-{i:03}-with-a-longer-name")), b"x").unwrap();
        }
        std::fs::create_dir(dir.join("sub")).unwrap();
        std::fs::write(dir.join("sub").join("inner"), b"y").unwrap();
        std::os::unix::fs::symlink("short", dir.join("fast")).unwrap();
        std::os::unix::fs::symlink("a".repeat(200), dir.join("slow")).unwrap();
        let fifo =
            std::ffi::CString::new(dir.join("fifo").into_os_string().into_encoded_bytes()).unwrap();
        // SAFETY: a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o644) }, 0);
    }
    let htree = debugfs(&image.path, &format!("htree {DIR}"));
    assert!(htree.contains("Indirect levels"), "not indexed:\n{htree}");
    assert!(assert_exit(&image.path, "a kernel-encrypted tree", 0).is_empty());
    let damaged = assert_random_flips_agree(&image.path, &[DIR], 0, 40, 28);
    assert!(damaged > 0, "no round damaged anything");
}

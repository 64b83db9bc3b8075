//! fscrypt pieces the encrypt tests and the sweep share: contexts as the kernel stores
//! them, the inode edits that turn what debugfs writes into what the kernel would have,
//! and a tree of encrypted files (casefolded or not) built that way.

use std::hash::Hasher;
use std::path::Path;

use e4_format::dir_entry::{
    encode_entry, file_type, hashed_entry_size, init_leaf_tail, DirEntryIter, EntryHashes,
    TAIL_SIZE,
};
use e4_format::inode::{Inode, InodeSeed};
use e4_format::MetadataBlock;
use e4_testkit::{make_empty_image, Image, RawImage};

use super::{
    bmap, debugfs, e2fsck_exit, edit_dir_block, inode_of, inode_offset, read_bytes, run_debugfs,
    write_bytes,
};

/// `EXT4_ENCRYPT_FL`, with `EXT4_EXTENTS_FL` for what debugfs maps by extents.
pub const ENCRYPT_FL: u32 = 0x800;
pub const EXTENTS_FL: u32 = 0x80000;
/// fscrypt's name index for the context (`EXT4_XATTR_INDEX_ENCRYPTION`).
pub const ENCRYPTION_INDEX: u8 = 9;
/// A version-1 fscrypt context: AES-256-XTS contents, AES-256-CTS names, no flags, the
/// 8-byte key descriptor `key`, then a 16-byte nonce from `nonce` (each file has its
/// own; it is not part of the policy).
pub fn context_v1(key: u8, nonce: u8) -> Vec<u8> {
    let mut context = vec![1, 1, 4, 0];
    context.extend((0..8).map(|i| key + i));
    context.extend((0..16).map(|i| nonce + i));
    context
}

/// Applies `edit` to inode `ino`'s record and seals its checksum again (through
/// e4-format), so that only the edit is left to find.
pub fn edit_inode(image: &Path, ino: u32, edit: impl FnOnce(&mut [u8])) {
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
pub fn move_context_to_index_nine(image: &Path, ino: u32) {
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

/// The encrypted directory of [`encrypted_tree_image`].
pub const DIR: &str = "e";
/// Files in it: with 32-byte names (48-byte entries with their hashes when casefolded),
/// three leaves of 1 KiB once indexed.
pub const FILES: usize = 40;
/// Blocks debugfs adds to the directory, so that the longer entries fit it.
pub const SPARE_BLOCKS: usize = 2;
/// `EXT4_CASEFOLD_FL`.
pub const CASEFOLD_FL: u32 = 0x4000_0000;

/// The `i`th name, 32 bytes, as ciphertext names are whole cipher blocks.
pub fn name(i: usize) -> String {
    format!("F{i:03}{}", "x".repeat(28))
}

/// The hashes the kernel would store for `name`, with a made-up key standing for the
/// one fscrypt derives (`fscrypt_fname_siphash`, then `__ext4fs_dirhash`'s split).
pub fn hashes(name: &[u8]) -> EntryHashes {
    #[allow(deprecated)]
    let mut siphash =
        std::hash::SipHasher::new_with_keys(0x0706_0504_0302_0100, 0x0f0e_0d0c_0b0a_0908);
    siphash.write(name);
    let combined = siphash.finish();
    EntryHashes {
        hash: (combined >> 32) as u32 & !1,
        minor_hash: combined as u32,
    }
}

/// An entry: inode, file type, name.
pub type Entry = (u32, u8, Vec<u8>);

/// The live entries of directory `path` but `.` and `..`, block by block in order.
pub fn entries_of(image: &Path, path: &str, blocks: usize) -> Vec<Entry> {
    let raw = RawImage::read(image).unwrap();
    let bs = raw.block_size();
    let mut entries = Vec::new();
    for logical in 0..blocks as u64 {
        let block = raw.block(bmap(image, path, logical)).unwrap();
        let region = &block[..bs - TAIL_SIZE];
        for entry in DirEntryIter::new(region, bs, true, e4_format::Location::Block(0)) {
            let entry = entry.unwrap();
            if entry.inode != 0 && entry.name != b"." && entry.name != b".." {
                entries.push((entry.inode, entry.file_type, entry.name.to_vec()));
            }
        }
    }
    entries
}

/// Lays `entries` out as the kernel would in a directory keeping hashes in its entries:
/// `.` and `..` (without hashes) first, then as many entries as fit in each block (less
/// its checksum tail), the last of a block spanning the rest; blocks left over hold one
/// empty entry. Returns `count` blocks of `bs` bytes.
pub fn hashed_layout(
    dot: u32,
    parent: u32,
    entries: &[Entry],
    bs: usize,
    count: usize,
) -> Vec<Vec<u8>> {
    let room = bs - TAIL_SIZE;
    let mut blocks = Vec::new();
    let mut block = vec![0u8; bs];
    encode_entry(&mut block, dot, 12, file_type::DIRECTORY, b".");
    encode_entry(
        &mut block[12..],
        parent,
        room - 12,
        file_type::DIRECTORY,
        b"..",
    );
    let (mut used, mut last) = (24, 12);
    for (ino, ft, name) in entries {
        let size = hashed_entry_size(name.len());
        if used + size > room {
            init_leaf_tail(&mut block);
            blocks.push(std::mem::replace(&mut block, vec![0u8; bs]));
            (used, last) = (0, 0);
        }
        // The entry before gives up its slack.
        if used > 0 {
            block[last + 4..last + 6].copy_from_slice(&((used - last) as u16).to_le_bytes());
        }
        encode_entry(&mut block[used..], *ino, room - used, *ft, name);
        hashes(name).write(&mut block[used..], name.len());
        (last, used) = (used, used + size);
    }
    init_leaf_tail(&mut block);
    blocks.push(block);
    while blocks.len() < count {
        let mut empty = vec![0u8; bs];
        encode_entry(&mut empty, 0, room, 0, b"");
        init_leaf_tail(&mut empty);
        blocks.push(empty);
    }
    assert_eq!(blocks.len(), count, "the entries need more blocks");
    blocks
}

/// A 1 KiB-block image with encrypt whose `/e` holds [`FILES`] encrypted files; with
/// `casefold` (the `encoding_flags`: "" or ",encoding_flags=strict") the feature too, and
/// the directory casefolded, its entries keeping their hashes. Indexed by `e2fsck -fyD`
/// when `indexed` (over the ciphertext names, or by their stored hashes).
pub fn encrypted_tree_image(casefold: Option<&str>, indexed: bool) -> Image {
    let mut args = vec!["-t", "ext4", "-b", "1024", "-O"];
    let encoding = casefold.map(|flags| format!("encoding=utf8{flags}"));
    match &encoding {
        Some(encoding) => args.extend(["encrypt,casefold", "-E", encoding]),
        None => args.push("encrypt"),
    }
    let image = make_empty_image(&args, 8);
    let host = tempfile::tempdir().unwrap();
    let file = |name: &str| host.path().join(name).display().to_string();
    std::fs::write(file("small"), b"x").unwrap();
    std::fs::write(file("ctx"), context_v1(0, 100)).unwrap();
    std::fs::write(file("ctx-file"), context_v1(0, 200)).unwrap();
    let mut commands = vec![format!("mkdir {DIR}")];
    for i in 0..FILES {
        let path = format!("{DIR}/{}", name(i));
        commands.push(format!("write {} {path}", file("small")));
        commands.push(format!("sif {path} flags {:#x}", ENCRYPT_FL | EXTENTS_FL));
        commands.push(format!("ea_set -f {} {path} c", file("ctx-file")));
    }
    commands.extend((0..SPARE_BLOCKS).map(|_| format!("expand_dir {DIR}")));
    run_debugfs(&image.path, &commands);
    let blocks = debugfs(&image.path, &format!("blocks {DIR}"))
        .split_whitespace()
        .count();
    let entries = entries_of(&image.path, DIR, blocks);
    assert_eq!(entries.len(), FILES);
    let dir = inode_of(&image.path, DIR);
    let bs = RawImage::read(&image.path).unwrap().block_size();
    let mut flags = ENCRYPT_FL | EXTENTS_FL;
    if casefold.is_some() {
        flags |= CASEFOLD_FL;
        for (logical, bytes) in hashed_layout(dir, 2, &entries, bs, blocks)
            .into_iter()
            .enumerate()
        {
            edit_dir_block(&image.path, DIR, logical as u64, |block| {
                block.copy_from_slice(&bytes)
            });
        }
    }
    run_debugfs(
        &image.path,
        &[
            format!("sif {DIR} flags {flags:#x}"),
            format!("ea_set -f {} {DIR} c", file("ctx")),
        ],
    );
    for ino in entries.iter().map(|e| e.0).chain([dir]) {
        move_context_to_index_nine(&image.path, ino);
    }
    if indexed {
        let status = e2fsck_exit(&image.path, &["-fyD"]);
        assert!(status <= 1, "e2fsck -fyD exited {status}");
    }
    image
}

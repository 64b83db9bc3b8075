//! fscrypt pieces the encrypt tests share: contexts as the kernel stores them, and the
//! inode edits that turn what debugfs writes into what the kernel would have.

use std::path::Path;

use e4_format::inode::{Inode, InodeSeed};
use e4_format::MetadataBlock;
use e4_testkit::RawImage;

use super::{inode_offset, read_bytes, write_bytes};

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

//! POSIX ACLs as ext4 stores them (`ext4_acl_header`, version 1, with 4-byte short entries
//! for the owner/group/mask/other tags) and as the `system.posix_acl_*` xattr interface
//! presents them (`posix_acl_xattr_header`, version 2, every entry 8 bytes).

use crate::codec::{le16, le32};
use crate::error::{FormatError, Location, Result};

const EXT4_ACL_VERSION: u32 = 1;
const VFS_ACL_VERSION: u32 = 2;
/// Tags whose entries carry an id (`ACL_USER`, `ACL_GROUP`).
const TAG_USER: u16 = 0x02;
const TAG_GROUP: u16 = 0x08;
/// `ACL_UNDEFINED_ID`, written for tags without an id.
const UNDEFINED_ID: u32 = u32::MAX;

/// Converts an ext4 on-disk ACL to the form `getxattr` returns.
pub fn acl_to_xattr(disk: &[u8], loc: Location) -> Result<Vec<u8>> {
    let bad = |reason: &str| FormatError::corrupt("POSIX ACL", loc, reason.to_string());
    if le32(disk, 0) != Some(EXT4_ACL_VERSION) {
        return Err(bad("unknown version"));
    }
    let mut out = VFS_ACL_VERSION.to_le_bytes().to_vec();
    let mut at = 4;
    while at < disk.len() {
        let (Some(tag), Some(perm)) = (le16(disk, at), le16(disk, at + 2)) else {
            return Err(bad("truncated entry"));
        };
        let id = if tag == TAG_USER || tag == TAG_GROUP {
            let id = le32(disk, at + 4).ok_or_else(|| bad("truncated entry"))?;
            at += 8;
            id
        } else {
            at += 4;
            UNDEFINED_ID
        };
        out.extend_from_slice(&tag.to_le_bytes());
        out.extend_from_slice(&perm.to_le_bytes());
        out.extend_from_slice(&id.to_le_bytes());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_and_long_entries() {
        let mut disk = 1u32.to_le_bytes().to_vec();
        disk.extend_from_slice(&[1, 0, 6, 0]); // USER_OBJ rw
        disk.extend_from_slice(&[2, 0, 4, 0, 0xE8, 3, 0, 0]); // USER 1000 r
        disk.extend_from_slice(&[0x20, 0, 4, 0]); // OTHER r
        let vfs = acl_to_xattr(&disk, Location::Inode(12)).unwrap();
        assert_eq!(vfs.len(), 4 + 3 * 8);
        assert_eq!(&vfs[12..20], &[2, 0, 4, 0, 0xE8, 3, 0, 0]);
        assert_eq!(&vfs[20..28], &[0x20, 0, 4, 0, 0xFF, 0xFF, 0xFF, 0xFF]);
    }
}

//! POSIX ACLs as ext4 stores them (`ext4_acl_header`, version 1, with 4-byte short entries
//! for the owner/group/mask/other tags) and as the `system.posix_acl_*` xattr interface
//! presents them (`posix_acl_xattr_header`, version 2, every entry 8 bytes). Both forms go
//! through [`PosixAcl`]: `fs/ext4/acl.c` converts between the disk form and the kernel's
//! `struct posix_acl`, `fs/posix_acl.c` between that and the xattr form.

use crate::codec::{le16, le32};
use crate::error::{FormatError, Location, Result};
use crate::problem::{Problem, Structure};

const EXT4_ACL_VERSION: u32 = 1;
const XATTR_ACL_VERSION: u32 = 2;
/// Bytes of an entry that carries an id, in either form; short disk entries have 4.
const LONG_ENTRY_SIZE: usize = 8;
const SHORT_ENTRY_SIZE: usize = 4;
/// Bytes of the version header, in either form.
const HEADER_SIZE: usize = 4;
/// `ACL_UNDEFINED_ID`, written for tags without an id.
const UNDEFINED_ID: u32 = u32::MAX;
/// The permission bits an entry may have (`ACL_READ | ACL_WRITE | ACL_EXECUTE`).
const PERM_BITS: u16 = 0o7;

/// `e_tag` values.
pub mod tag {
    /// `ACL_USER_OBJ`: the file's owner.
    pub const USER_OBJ: u16 = 0x01;
    /// `ACL_USER`: a named user (has an id).
    pub const USER: u16 = 0x02;
    /// `ACL_GROUP_OBJ`: the file's group.
    pub const GROUP_OBJ: u16 = 0x04;
    /// `ACL_GROUP`: a named group (has an id).
    pub const GROUP: u16 = 0x08;
    /// `ACL_MASK`: the most a named entry or the group may be granted.
    pub const MASK: u16 = 0x10;
    /// `ACL_OTHER`: everyone else.
    pub const OTHER: u16 = 0x20;
}

/// One entry of an ACL.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AclEntry {
    /// `e_tag`: one of [`tag`].
    pub tag: u16,
    /// `e_perm`: read 4, write 2, execute 1.
    pub perm: u16,
    /// `e_id`: the user or group for [`tag::USER`] and [`tag::GROUP`]; unused otherwise.
    pub id: u32,
}

impl AclEntry {
    fn has_id(&self) -> bool {
        self.tag == tag::USER || self.tag == tag::GROUP
    }
}

/// Why an ACL passed to `setxattr` was refused (the kernel's EINVAL or EOPNOTSUPP).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid POSIX ACL: {0}")]
pub struct InvalidAcl(pub &'static str);

/// A POSIX ACL: its entries in the order they are stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PosixAcl {
    pub entries: Vec<AclEntry>,
}

impl PosixAcl {
    /// Parses the ext4 on-disk form.
    pub fn from_disk(disk: &[u8], loc: Location) -> Result<Self> {
        let bad = |problem| FormatError::corrupt(Structure::PosixAcl, loc, problem);
        let version = le32(disk, 0);
        if version != Some(EXT4_ACL_VERSION) {
            return Err(bad(match version {
                Some(found) => Problem::UnknownVersion { found },
                None => Problem::TooShort {
                    len: disk.len(),
                    need: HEADER_SIZE,
                },
            }));
        }
        let mut entries = Vec::new();
        let mut at = HEADER_SIZE;
        while at < disk.len() {
            let (Some(tag), Some(perm)) = (le16(disk, at), le16(disk, at + 2)) else {
                return Err(bad(Problem::TruncatedEntry { offset: at }));
            };
            let mut entry = AclEntry {
                tag,
                perm,
                id: UNDEFINED_ID,
            };
            if entry.has_id() {
                entry.id = le32(disk, at + 4)
                    .ok_or_else(|| bad(Problem::TruncatedEntry { offset: at }))?;
                at += LONG_ENTRY_SIZE;
            } else {
                at += SHORT_ENTRY_SIZE;
            }
            entries.push(entry);
        }
        Ok(PosixAcl { entries })
    }

    /// The ext4 on-disk form (`ext4_acl_to_disk`): version 1, short entries for the tags
    /// without an id.
    pub fn to_disk(&self) -> Vec<u8> {
        let mut out = EXT4_ACL_VERSION.to_le_bytes().to_vec();
        for entry in &self.entries {
            out.extend_from_slice(&entry.tag.to_le_bytes());
            out.extend_from_slice(&entry.perm.to_le_bytes());
            if entry.has_id() {
                out.extend_from_slice(&entry.id.to_le_bytes());
            }
        }
        out
    }

    /// Parses the form `setxattr` passes (`posix_acl_from_xattr`) and checks it as the
    /// kernel does before storing it (`posix_acl_valid`). `None` for an ACL with no entries,
    /// which removes the ACL.
    pub fn from_xattr(value: &[u8]) -> Result<Option<Self>, InvalidAcl> {
        if le32(value, 0) != Some(XATTR_ACL_VERSION) {
            return Err(InvalidAcl("not version 2 of the xattr form"));
        }
        let body = &value[HEADER_SIZE..];
        if body.len() % LONG_ENTRY_SIZE != 0 {
            return Err(InvalidAcl("size is not a whole number of entries"));
        }
        if body.is_empty() {
            return Ok(None);
        }
        let entries = body
            .chunks_exact(LONG_ENTRY_SIZE)
            .map(|raw| {
                let mut entry = AclEntry {
                    tag: u16::from_le_bytes([raw[0], raw[1]]),
                    perm: u16::from_le_bytes([raw[2], raw[3]]),
                    id: u32::from_le_bytes([raw[4], raw[5], raw[6], raw[7]]),
                };
                if !entry.has_id() {
                    entry.id = UNDEFINED_ID;
                }
                entry
            })
            .collect();
        let acl = PosixAcl { entries };
        acl.validate()?;
        Ok(Some(acl))
    }

    /// Refuses a named user or group whose id is `(uid_t)-1`, which is no id: the kernel's
    /// `posix_acl_from_xattr` refuses to set such an ACL. (Only for setting: an ACL stored
    /// with one still reads, so that it can be shown and the entry removed.)
    pub fn check_ids(&self) -> Result<(), InvalidAcl> {
        if self
            .entries
            .iter()
            .any(|e| e.has_id() && e.id == UNDEFINED_ID)
        {
            return Err(InvalidAcl(
                "a named entry with id 4294967295, which is no id",
            ));
        }
        Ok(())
    }

    /// The form `getxattr` returns: version 2, every entry 8 bytes.
    pub fn to_xattr(&self) -> Vec<u8> {
        let mut out = XATTR_ACL_VERSION.to_le_bytes().to_vec();
        for entry in &self.entries {
            out.extend_from_slice(&entry.tag.to_le_bytes());
            out.extend_from_slice(&entry.perm.to_le_bytes());
            out.extend_from_slice(&entry.id.to_le_bytes());
        }
        out
    }

    /// `posix_acl_valid`: permissions within rwx; one owner entry, named users, one group
    /// entry, named groups, a mask (required when there are named entries), one other
    /// entry, in that order.
    fn validate(&self) -> Result<(), InvalidAcl> {
        #[derive(PartialEq)]
        enum Expect {
            UserObj,
            Users,
            Groups,
            Other,
            Done,
        }
        let mut state = Expect::UserObj;
        let mut needs_mask = false;
        for entry in &self.entries {
            if entry.perm & !PERM_BITS != 0 {
                return Err(InvalidAcl("permission bits other than rwx"));
            }
            state = match (entry.tag, state) {
                (tag::USER_OBJ, Expect::UserObj) => Expect::Users,
                (tag::USER, Expect::Users) => {
                    needs_mask = true;
                    Expect::Users
                }
                (tag::GROUP_OBJ, Expect::Users) => Expect::Groups,
                (tag::GROUP, Expect::Groups) => {
                    needs_mask = true;
                    Expect::Groups
                }
                (tag::MASK, Expect::Groups) => Expect::Other,
                (tag::OTHER, Expect::Other) => Expect::Done,
                (tag::OTHER, Expect::Groups) if !needs_mask => Expect::Done,
                _ => return Err(InvalidAcl("entries missing, repeated or out of order")),
            };
        }
        if state == Expect::Done {
            Ok(())
        } else {
            Err(InvalidAcl("entries missing, repeated or out of order"))
        }
    }

    /// `posix_acl_create_masq`: makes this (a directory's default ACL) the access ACL of a
    /// new inode asked for with permission bits `mode` (`rwxrwxrwx`): the owner, other,
    /// and mask (or, without one, group) entries keep only what `mode` grants, and the
    /// mode only what they grant. Returns the new inode's permission bits and whether the
    /// ACL says no more than they do (then it is not stored). Error: an ACL with neither
    /// a group nor a mask entry (the kernel's EIO).
    pub fn create_masq(&mut self, mode: u16) -> Result<(u16, bool), InvalidAcl> {
        let mut mode = mode & 0o777;
        let mut equivalent = true;
        let (mut group, mut mask) = (None, None);
        for (i, entry) in self.entries.iter_mut().enumerate() {
            match entry.tag {
                tag::USER_OBJ => {
                    entry.perm &= (mode >> 6) & PERM_BITS;
                    mode &= (entry.perm << 6) | !0o700;
                }
                tag::OTHER => {
                    entry.perm &= mode & PERM_BITS;
                    mode &= entry.perm | !0o007;
                }
                tag::GROUP_OBJ => group = Some(i),
                tag::MASK => {
                    mask = Some(i);
                    equivalent = false;
                }
                _ => equivalent = false,
            }
        }
        let limit = mask
            .or(group)
            .ok_or(InvalidAcl("neither a group nor a mask entry"))?;
        let entry = &mut self.entries[limit];
        entry.perm &= (mode >> 3) & PERM_BITS;
        mode &= (entry.perm << 3) | !0o070;
        Ok((mode, equivalent))
    }

    /// `posix_acl_chmod_masq`: this access ACL after a chmod to permission bits `mode`:
    /// the owner and other entries, and the mask (or, without one, the group) entry, take
    /// the mode's bits; named entries stay. Error as [`PosixAcl::create_masq`].
    pub fn chmod_masq(&mut self, mode: u16) -> Result<(), InvalidAcl> {
        let (mut group, mut mask) = (None, None);
        for (i, entry) in self.entries.iter_mut().enumerate() {
            match entry.tag {
                tag::USER_OBJ => entry.perm = (mode >> 6) & PERM_BITS,
                tag::OTHER => entry.perm = mode & PERM_BITS,
                tag::GROUP_OBJ => group = Some(i),
                tag::MASK => mask = Some(i),
                _ => {}
            }
        }
        let limit = mask
            .or(group)
            .ok_or(InvalidAcl("neither a group nor a mask entry"))?;
        self.entries[limit].perm = (mode >> 3) & PERM_BITS;
        Ok(())
    }

    /// The permission bits (`rwxrwxrwx`) a file with this access ACL has
    /// (`posix_acl_equiv_mode`): owner, mask (or group when there is no mask), other; and
    /// whether the ACL says no more than those bits, so the kernel does not store it.
    pub fn equivalent_mode(&self) -> (u16, bool) {
        let mut mode = 0;
        let mut mask = None;
        let mut equivalent = true;
        for entry in &self.entries {
            let perm = entry.perm & PERM_BITS;
            match entry.tag {
                tag::USER_OBJ => mode |= perm << 6,
                tag::GROUP_OBJ => mode |= perm << 3,
                tag::OTHER => mode |= perm,
                tag::MASK => {
                    mask = Some(perm);
                    equivalent = false;
                }
                _ => equivalent = false,
            }
        }
        if let Some(mask) = mask {
            mode = (mode & !0o070) | (mask << 3);
        }
        (mode, equivalent)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn xattr_form(entries: &[(u16, u16, u32)]) -> Vec<u8> {
        let mut out = 2u32.to_le_bytes().to_vec();
        for &(tag, perm, id) in entries {
            out.extend_from_slice(&tag.to_le_bytes());
            out.extend_from_slice(&perm.to_le_bytes());
            out.extend_from_slice(&id.to_le_bytes());
        }
        out
    }

    const NO_ID: u32 = UNDEFINED_ID;

    fn acl(entries: &[(u16, u16, u32)]) -> PosixAcl {
        PosixAcl::from_xattr(&xattr_form(entries)).unwrap().unwrap()
    }

    #[test]
    fn a_default_acl_masks_a_new_inodes_mode_as_the_kernel_does() {
        // user::rwx user:1000:rwx group::r-x mask::rwx other::r-x, created with 0640.
        let mut with_mask = acl(&[
            (tag::USER_OBJ, 7, NO_ID),
            (tag::USER, 7, 1000),
            (tag::GROUP_OBJ, 5, NO_ID),
            (tag::MASK, 7, NO_ID),
            (tag::OTHER, 5, NO_ID),
        ]);
        assert_eq!(with_mask.create_masq(0o640).unwrap(), (0o640, false));
        let perms: Vec<u16> = with_mask.entries.iter().map(|e| e.perm).collect();
        // The group entry keeps r-x: the mask, not it, takes the mode's group bits.
        assert_eq!(perms, [6, 7, 5, 4, 0]);
        // Only the three base entries: equivalent to the mode, which they narrow.
        let mut base = acl(&[
            (tag::USER_OBJ, 6, NO_ID),
            (tag::GROUP_OBJ, 4, NO_ID),
            (tag::OTHER, 0, NO_ID),
        ]);
        assert_eq!(base.create_masq(0o777).unwrap(), (0o640, true));
    }

    #[test]
    fn chmod_moves_the_base_entries_and_the_mask() {
        let mut named = acl(&[
            (tag::USER_OBJ, 7, NO_ID),
            (tag::GROUP_OBJ, 5, NO_ID),
            (tag::GROUP, 7, 50),
            (tag::MASK, 7, NO_ID),
            (tag::OTHER, 5, NO_ID),
        ]);
        named.chmod_masq(0o751).unwrap();
        let perms: Vec<u16> = named.entries.iter().map(|e| e.perm).collect();
        assert_eq!(perms, [7, 5, 7, 5, 1]);
        assert_eq!(named.equivalent_mode(), (0o751, false));
    }

    #[test]
    fn short_and_long_entries() {
        let mut disk = 1u32.to_le_bytes().to_vec();
        disk.extend_from_slice(&[1, 0, 6, 0]); // USER_OBJ rw
        disk.extend_from_slice(&[2, 0, 4, 0, 0xE8, 3, 0, 0]); // USER 1000 r
        disk.extend_from_slice(&[0x20, 0, 4, 0]); // OTHER r
        let acl = PosixAcl::from_disk(&disk, Location::Inode(12)).unwrap();
        let vfs = acl.to_xattr();
        assert_eq!(vfs.len(), 4 + 3 * 8);
        assert_eq!(&vfs[12..20], &[2, 0, 4, 0, 0xE8, 3, 0, 0]);
        assert_eq!(&vfs[20..28], &[0x20, 0, 4, 0, 0xFF, 0xFF, 0xFF, 0xFF]);
        assert_eq!(acl.to_disk(), disk);
    }

    #[test]
    fn xattr_form_converts_to_disk_and_back() {
        let value = xattr_form(&[
            (tag::USER_OBJ, 6, NO_ID),
            (tag::USER, 4, 1000),
            (tag::GROUP_OBJ, 4, NO_ID),
            (tag::GROUP, 5, 50),
            (tag::MASK, 7, NO_ID),
            (tag::OTHER, 0, NO_ID),
        ]);
        let acl = PosixAcl::from_xattr(&value).unwrap().unwrap();
        let disk = acl.to_disk();
        // 4 header + 4 short entries of 4 + 2 long entries of 8.
        assert_eq!(disk.len(), 4 + 4 * 4 + 2 * 8);
        assert_eq!(&disk[..4], &[1, 0, 0, 0]);
        assert_eq!(&disk[8..16], &[2, 0, 4, 0, 0xE8, 3, 0, 0]);
        let back = PosixAcl::from_disk(&disk, Location::Inode(12)).unwrap();
        assert_eq!(back.to_xattr(), value);
    }

    #[test]
    fn ids_of_short_tags_are_ignored() {
        let value = xattr_form(&[
            (tag::USER_OBJ, 6, 7),
            (tag::GROUP_OBJ, 4, 7),
            (tag::OTHER, 4, 7),
        ]);
        let acl = PosixAcl::from_xattr(&value).unwrap().unwrap();
        assert!(acl.entries.iter().all(|e| e.id == UNDEFINED_ID));
    }

    #[test]
    fn invalid_acls_are_refused() {
        let base = [
            (tag::USER_OBJ, 6, NO_ID),
            (tag::GROUP_OBJ, 4, NO_ID),
            (tag::OTHER, 4, NO_ID),
        ];
        assert!(PosixAcl::from_xattr(&xattr_form(&base)).unwrap().is_some());
        // Named user without a mask.
        let no_mask = [base[0], (tag::USER, 4, 1), base[1], (tag::OTHER, 4, NO_ID)];
        assert!(PosixAcl::from_xattr(&xattr_form(&no_mask)).is_err());
        // Out of order, missing, repeated, bad permission, unknown tag.
        for bad in [
            vec![base[1], base[0], base[2]],
            vec![base[0], base[2]],
            vec![base[0], base[0], base[1], base[2]],
            vec![base[0], base[1], base[2], base[2]],
            vec![base[0], (tag::GROUP_OBJ, 8, NO_ID), base[2]],
            vec![base[0], base[1], (0x40, 4, NO_ID)],
        ] {
            assert!(PosixAcl::from_xattr(&xattr_form(&bad)).is_err(), "{bad:?}");
        }
        // A named user or group whose id is (uid_t)-1, no id: read, but not set.
        for no_id in [
            vec![
                base[0],
                (tag::USER, 4, NO_ID),
                base[1],
                (tag::MASK, 4, NO_ID),
                base[2],
            ],
            vec![
                base[0],
                base[1],
                (tag::GROUP, 4, NO_ID),
                (tag::MASK, 4, NO_ID),
                base[2],
            ],
        ] {
            let acl = PosixAcl::from_xattr(&xattr_form(&no_id)).unwrap().unwrap();
            assert!(acl.check_ids().is_err(), "{no_id:?}");
        }
        let acl = PosixAcl::from_xattr(&xattr_form(&base)).unwrap().unwrap();
        assert_eq!(acl.check_ids(), Ok(()));
        let mut wrong_version = xattr_form(&base);
        wrong_version[0] = 1;
        assert!(PosixAcl::from_xattr(&wrong_version).is_err());
        let mut ragged = xattr_form(&base);
        ragged.push(0);
        assert!(PosixAcl::from_xattr(&ragged).is_err());
        assert_eq!(PosixAcl::from_xattr(&2u32.to_le_bytes()), Ok(None));
    }

    #[test]
    fn equivalent_mode_uses_the_mask_for_group_bits() {
        let plain = PosixAcl::from_xattr(&xattr_form(&[
            (tag::USER_OBJ, 7, NO_ID),
            (tag::GROUP_OBJ, 5, NO_ID),
            (tag::OTHER, 1, NO_ID),
        ]))
        .unwrap()
        .unwrap();
        assert_eq!(plain.equivalent_mode(), (0o751, true));
        let masked = PosixAcl::from_xattr(&xattr_form(&[
            (tag::USER_OBJ, 6, NO_ID),
            (tag::GROUP_OBJ, 6, NO_ID),
            (tag::MASK, 4, NO_ID),
            (tag::OTHER, 0, NO_ID),
        ]))
        .unwrap()
        .unwrap();
        assert_eq!(masked.equivalent_mode(), (0o640, false));
    }
}

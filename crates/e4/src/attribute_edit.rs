//! The commands that change one inode's attributes: `e4 chmod`, `e4 chown` and
//! `e4 truncate`. Each follows a symlink at the end of the path, as its host namesake does.
//! Their arguments are parsed here too (clap calls the parsers), so a bad mode, owner or
//! size is a usage error (exit 2) before the image is opened.

use e4_fs::{Filesystem, SetAttributes};

use crate::edit_session::{describe, ImagePath};
use crate::output::CliError;

/// Permission bits as `chmod` takes them in octal: up to 7777 (setuid, setgid, sticky and
/// rwx for owner, group, others).
pub fn parse_mode(text: &str) -> Result<u16, String> {
    u16::from_str_radix(text, 8)
        .ok()
        .filter(|&mode| mode <= 0o7777 && !text.starts_with('+'))
        .ok_or_else(|| format!("{text:?} is not an octal mode from 0 to 7777"))
}

/// A new owner, `UID:GID`, `UID`, `UID:` or `:GID`, numeric (the image's user database is
/// not the host's, so names would mean the wrong users).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Owner {
    pub uid: Option<u32>,
    pub gid: Option<u32>,
}

pub fn parse_owner(text: &str) -> Result<Owner, String> {
    let bad = || format!("{text:?} is not a numeric owner UID:GID (or UID, or :GID)");
    let id = |part: &str| -> Result<Option<u32>, String> {
        if part.is_empty() {
            Ok(None)
        } else if part.bytes().all(|b| b.is_ascii_digit()) {
            parse_id(part)
                .map(Some)
                .map_err(|why| format!("{}: {why}", bad()))
        } else {
            Err(bad())
        }
    };
    let (uid, gid) = match text.split_once(':') {
        Some((uid, gid)) => (id(uid)?, id(gid)?),
        None => (id(text)?, None),
    };
    if uid.is_none() && gid.is_none() {
        return Err(bad());
    }
    Ok(Owner { uid, gid })
}

/// A user or group id, decimal. 4294967295 is refused: it is `(uid_t)-1`, which
/// chown(2) reads as "leave it" and the kernel holds for no id at all (a file owned by it
/// shows as 65534, an ACL entry naming it is refused), as chown(1) and setfacl refuse it.
pub fn parse_id(text: &str) -> Result<u32, String> {
    match text.parse::<u32>() {
        Ok(u32::MAX) => Err(format!("{text} is (uid_t)-1, which is no id")),
        Ok(id) => Ok(id),
        Err(_) => Err(format!("id {text} is too large")),
    }
}

/// A size in bytes, with an optional K, M, G or T suffix (powers of 1024, as truncate(1)).
pub fn parse_size(text: &str) -> Result<u64, String> {
    let bad = || format!("{text:?} is not a size (bytes, or a number with K, M, G or T)");
    let (digits, shift) = match text.as_bytes().last() {
        Some(b'K' | b'k') => (&text[..text.len() - 1], 10),
        Some(b'M' | b'm') => (&text[..text.len() - 1], 20),
        Some(b'G' | b'g') => (&text[..text.len() - 1], 30),
        Some(b'T' | b't') => (&text[..text.len() - 1], 40),
        _ => (text, 0),
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad());
    }
    let value: u64 = digits.parse().map_err(|_| bad())?;
    value.checked_mul(1 << shift).ok_or_else(bad)
}

fn set(fs: &Filesystem, path: ImagePath<'_>, attributes: &SetAttributes) -> Result<(), CliError> {
    let ino = path.resolve(fs, true)?;
    fs.setattr(ino, attributes)
        .map_err(|e| describe(path, &e))?;
    Ok(())
}

/// `e4 chmod IMG MODE PATH`.
pub fn chmod(fs: &Filesystem, mode: u16, path: ImagePath<'_>) -> Result<(), CliError> {
    set(
        fs,
        path,
        &SetAttributes {
            permissions: Some(mode),
            ..SetAttributes::default()
        },
    )
}

/// `e4 chown IMG UID:GID PATH`.
pub fn chown(fs: &Filesystem, owner: Owner, path: ImagePath<'_>) -> Result<(), CliError> {
    set(
        fs,
        path,
        &SetAttributes {
            uid: owner.uid,
            gid: owner.gid,
            ..SetAttributes::default()
        },
    )
}

/// `e4 truncate -s SIZE IMG PATH`: the file must exist (unlike truncate(1), which makes it:
/// `e4 put` makes files).
pub fn truncate(fs: &Filesystem, size: u64, path: ImagePath<'_>) -> Result<(), CliError> {
    let ino = path.resolve(fs, true)?;
    fs.truncate(ino, size).map_err(|e| describe(path, &e))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_are_octal_up_to_7777() {
        assert_eq!(parse_mode("755"), Ok(0o755));
        assert_eq!(parse_mode("04755"), Ok(0o4755));
        assert_eq!(parse_mode("7777"), Ok(0o7777));
        assert_eq!(parse_mode("0"), Ok(0));
        for bad in ["10000", "8", "u+x", "", "+7", "-1", "rwx"] {
            assert!(parse_mode(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn owners_are_numeric_with_either_part_optional() {
        let owner = |uid, gid| Ok(Owner { uid, gid });
        assert_eq!(parse_owner("1000:100"), owner(Some(1000), Some(100)));
        assert_eq!(parse_owner("0"), owner(Some(0), None));
        assert_eq!(parse_owner("5:"), owner(Some(5), None));
        assert_eq!(parse_owner(":7"), owner(None, Some(7)));
        assert_eq!(
            parse_owner("4294967294:0"),
            owner(Some(u32::MAX - 1), Some(0))
        );
        for bad in [
            ":",
            "",
            "root:root",
            "1:2:3",
            "4294967296",
            "-1:0",
            "+1",
            "4294967295",
            "0:4294967295",
        ] {
            assert!(parse_owner(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn sizes_take_binary_suffixes() {
        assert_eq!(parse_size("0"), Ok(0));
        assert_eq!(parse_size("1234"), Ok(1234));
        assert_eq!(parse_size("4K"), Ok(4096));
        assert_eq!(parse_size("3m"), Ok(3 << 20));
        assert_eq!(parse_size("2G"), Ok(2 << 30));
        assert_eq!(parse_size("1T"), Ok(1 << 40));
        for bad in [
            "",
            "K",
            "-1",
            "1.5M",
            "12X",
            "99999999999999999999",
            "16777216T",
        ] {
            assert!(parse_size(bad).is_err(), "{bad}");
        }
    }
}

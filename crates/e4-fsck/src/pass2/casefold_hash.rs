//! What e2fsck hashes and compares for a name in a casefolded directory
//! (`ext2fs_dirhash2` and `ext2fs_casefold_cmp` with the utf8 charset), which differs
//! from the kernel for names that are not UTF-8. The kernel's `utf8_casefold` fails on
//! any such name and the kernel hashes it as it is. e2fsprogs 1.47.0's folding
//! (lib/ext2fs/nls_utf8.c, utf8-norm.c) goes byte by byte, as found against
//! `debugfs dx_hash -c`:
//!
//! - a name beginning with a continuation byte is refused at once (`utf8ncursor`:
//!   `-EINVAL`) and hashed as it is;
//! - a stray continuation byte later on is kept as it is, a starter, and the characters
//!   around it are folded;
//! - a lead byte without all its continuation bytes, one whose sequence is no character
//!   (a surrogate, an overlong form, past U+10FFFF), and bytes 0xF5 to 0xFF make
//!   `utf8byte` fail: `ext2fs_dirhash2` returns `-ENAMETOOLONG` and no hash, and pass 2
//!   keeps the hash it had (the previous entry's);
//! - the folding ends at a NUL.
//!
//! `utf8_casefold_cmp` folds both names the same way and calls them different (-1) as
//! soon as either is refused or fails, so such a name equals no name, not even its own
//! bytes.

use std::borrow::Cow;

use e4_format::casefold::casefold;

/// What e2fsprogs's folding makes of a name.
enum Folding {
    /// The name folded.
    Folded(Vec<u8>),
    /// Refused at its first byte, a continuation byte (`utf8ncursor`).
    Refused,
    /// `utf8byte` failed on a sequence that is no character.
    Failed,
}

/// The bytes e2fsck hashes for a name of a casefolded directory.
#[derive(Debug, PartialEq, Eq)]
pub enum HashedName<'a> {
    /// These bytes: the folded name, or the name as it is.
    Bytes(Cow<'a, [u8]>),
    /// None: `ext2fs_dirhash2` fails and the entry adds nothing to its leaf's range.
    Unhashed,
}

/// What e2fsck hashes for `name` in a casefolded directory.
pub fn hashed_name(name: &[u8]) -> HashedName<'_> {
    match fold(name) {
        Folding::Folded(folded) => HashedName::Bytes(Cow::Owned(folded)),
        Folding::Refused => HashedName::Bytes(Cow::Borrowed(name)),
        Folding::Failed => HashedName::Unhashed,
    }
}

/// What `ext2fs_casefold_cmp` compares for `name`: its folded bytes, or none when the
/// folding is refused or fails (the name then equals no other).
pub fn compared_name(name: &[u8]) -> Option<Vec<u8>> {
    match fold(name) {
        Folding::Folded(folded) => Some(folded),
        Folding::Refused | Folding::Failed => None,
    }
}

/// Folds `name` as e2fsprogs 1.47.0 does (the module's rules).
fn fold(name: &[u8]) -> Folding {
    if name.first().is_some_and(|&b| is_continuation(b)) {
        return Folding::Refused;
    }
    let name = name.split(|&b| b == 0).next().unwrap_or(name);
    let mut folded = Vec::with_capacity(name.len());
    let fold_run = |folded: &mut Vec<u8>, run: &[u8]| {
        // A run between stray bytes is UTF-8: it was checked character by character.
        folded.extend(casefold(run).unwrap_or_else(|| run.to_vec()));
    };
    let (mut run_start, mut at) = (0, 0);
    while at < name.len() {
        let lead = name[at];
        if is_continuation(lead) {
            fold_run(&mut folded, &name[run_start..at]);
            folded.push(lead);
            at += 1;
            run_start = at;
            continue;
        }
        // `utf8clen`: the length a lead byte announces.
        let len =
            1 + usize::from(lead >= 0xC0) + usize::from(lead >= 0xE0) + usize::from(lead >= 0xF0);
        match name.get(at..at + len).map(std::str::from_utf8) {
            Some(Ok(_)) => at += len,
            _ => return Folding::Failed,
        }
    }
    fold_run(&mut folded, &name[run_start..]);
    Folding::Folded(folded)
}

fn is_continuation(b: u8) -> bool {
    b & 0xC0 == 0x80
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes(name: &[u8]) -> Vec<u8> {
        match hashed_name(name) {
            HashedName::Bytes(b) => b.into_owned(),
            HashedName::Unhashed => panic!("no hash for {name:?}"),
        }
    }

    #[test]
    fn names_as_e2fsprogs_folds_them() {
        assert_eq!(bytes("Straße".as_bytes()), b"strasse");
        // A stray continuation byte is kept, the rest folded (the hash of
        // "C\x85ngström-0051" is that of "c\x85ngstro\u{308}m-0051" in `dx_hash -c`).
        assert_eq!(
            bytes(b"C\x85ngstr\xc3\xb6m-0051"),
            b"c\x85ngstro\xcc\x88m-0051"
        );
        // Refused at the first byte: as it is, not folded.
        assert_eq!(bytes(b"\x85ABC"), b"\x85ABC");
        // Folding stops at a NUL.
        assert_eq!(bytes(b"AB\0C\xff"), b"ab");
        for unhashed in [&b"A\xffB"[..], b"AB\xe2\x82", b"A\xed\xa0\x80B", b"A\xc3A"] {
            assert_eq!(hashed_name(unhashed), HashedName::Unhashed, "{unhashed:?}");
        }
    }

    #[test]
    fn names_as_e2fsprogs_compares_them() {
        assert_eq!(
            compared_name("STRASSE".as_bytes()),
            compared_name("Straße".as_bytes())
        );
        assert_eq!(compared_name(b"C\x85A"), Some(b"c\x85a".to_vec()));
        // Refused or failed: equal to no name.
        assert_eq!(compared_name(b"\x85ABC"), None);
        assert_eq!(compared_name(b"A\xffB"), None);
    }
}

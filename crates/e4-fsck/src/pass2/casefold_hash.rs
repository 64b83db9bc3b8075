//! What e2fsck hashes for a name in a casefolded directory (`ext2fs_dirhash2` with the
//! utf8 charset), which differs from the kernel for names that are not UTF-8. The
//! kernel's `utf8_casefold` fails on any such name and the kernel hashes it as it is.
//! e2fsprogs 1.47.0's folding (lib/ext2fs/nls_utf8.c, utf8-norm.c) goes byte by byte,
//! as found against `debugfs dx_hash -c`:
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

use std::borrow::Cow;

use e4_format::casefold::casefold;

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
    if name.first().is_some_and(|&b| is_continuation(b)) {
        return HashedName::Bytes(Cow::Borrowed(name));
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
            _ => return HashedName::Unhashed,
        }
    }
    fold_run(&mut folded, &name[run_start..]);
    HashedName::Bytes(Cow::Owned(folded))
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
}

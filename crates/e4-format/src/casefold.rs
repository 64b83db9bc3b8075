//! Case-folded names, for directories with `EXT4_CASEFOLD_FL` on a filesystem with the
//! casefold feature and the utf8 encoding: the kernel's and e2fsprogs' `utf8_casefold`
//! (`utf8nfdicf`), which the htree hash of such a directory is computed over and under
//! which two names are the same. Each character is folded by full case folding
//! (Unicode's `CaseFolding.txt`, statuses C and F) and the result put in canonical
//! decomposition (NFD), combining marks ordered by the folded characters' classes (so
//! `α` + ypogegrammeni + acute folds to `α` `ι` acute, as `utf8nfdicf` maps each
//! character before ordering); default-ignorable code points are dropped, as e2fsprogs
//! 1.47 drops them (the kernel did too until 6.12). A name that is not UTF-8 is not folded: it is hashed and
//! compared as its bytes.
//!
//! The tables are those of the `caseless` and `unicode-normalization` crates (Unicode 16
//! and later), not the kernel's Unicode 12.1: a character assigned after 12.1 that has a
//! case folding or a decomposition is folded here and kept as it is there (the 12.1 tables
//! leave unassigned code points alone). Names holding such characters may hash
//! differently; no other name does.

use caseless::Caseless;
use unicode_normalization::UnicodeNormalization;

/// `s_encoding` for utf8 at Unicode 12.1, the only encoding ext4 defines
/// (`EXT4_ENC_UTF8_12_1`).
pub const ENCODING_UTF8_12_1: u16 = 1;
/// `s_encoding_flags`: names that are not valid in the encoding are refused
/// (`EXT4_ENC_STRICT_MODE_FL`).
pub const ENCODING_STRICT_MODE: u16 = 0x1;

/// Default_Ignorable_Code_Point of Unicode 12.1 (`DerivedCoreProperties.txt`), unassigned
/// code points of the property included, which `utf8nfdicf` maps to nothing. A small
/// fixed list of the version the on-disk hashes were made with; no crate carries the
/// property at that version.
const DEFAULT_IGNORABLE_12_1: &[(u32, u32)] = &[
    (0x00AD, 0x00AD),
    (0x034F, 0x034F),
    (0x061C, 0x061C),
    (0x115F, 0x1160),
    (0x17B4, 0x17B5),
    (0x180B, 0x180E),
    (0x200B, 0x200F),
    (0x202A, 0x202E),
    (0x2060, 0x206F),
    (0x3164, 0x3164),
    (0xFE00, 0xFE0F),
    (0xFEFF, 0xFEFF),
    (0xFFA0, 0xFFA0),
    (0xFFF0, 0xFFF8),
    (0x1BCA0, 0x1BCA3),
    (0x1D173, 0x1D17A),
    (0xE0000, 0xE0FFF),
];

fn is_default_ignorable(c: char) -> bool {
    let c = u32::from(c);
    DEFAULT_IGNORABLE_12_1
        .iter()
        .any(|&(first, last)| (first..=last).contains(&c))
}

/// `name` case-folded as `utf8_casefold` folds it, as UTF-8 bytes; `None` when it is not
/// UTF-8 (the kernel and e2fsck then use the name as it is).
pub fn casefold(name: &[u8]) -> Option<Vec<u8>> {
    let name = std::str::from_utf8(name).ok()?;
    let folded: String = name
        .chars()
        .filter(|&c| !is_default_ignorable(c))
        .default_case_fold()
        .nfd()
        .collect();
    Some(folded.into_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn folds_case_decomposes_and_drops_ignorables() {
        assert_eq!(casefold(b"ABC").unwrap(), b"abc");
        assert_eq!(casefold("Straße".as_bytes()).unwrap(), b"strasse");
        // U+00C5 and U+212B (Angstrom sign) fold to a, ring above.
        assert_eq!(casefold("Å".as_bytes()), casefold("\u{212B}".as_bytes()));
        assert_eq!(
            casefold("A\u{030A}".as_bytes()).unwrap(),
            "a\u{030A}".as_bytes()
        );
        assert_eq!(
            casefold("zero\u{200B}width".as_bytes()).unwrap(),
            b"zerowidth"
        );
        assert_eq!(casefold(b"A\xffb"), None);
    }
}

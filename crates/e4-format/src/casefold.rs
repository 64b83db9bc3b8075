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
//! The tables are those of the `caseless` (Unicode 16) and `unicode-normalization`
//! (Unicode 18) crates, and the on-disk folding is Unicode 12.1's, whose tables leave a
//! code point 12.1 had not assigned as it is: not folded, not decomposed, and a starter
//! (combining class 0), so marks are not reordered across it. Unicode's stability
//! policies keep the folding, decomposition and class of every character 12.1 assigned
//! unchanged since, so the two differ only on the later characters the crates touch,
//! which [`TOUCHED_SINCE_12_1`] lists (generated from the crates' tables and Perl's
//! Unicode data by `scripts/casefold-12-1-table.sh`): those are kept as they are here
//! too, and the result is 12.1's.

use caseless::Caseless;
use unicode_normalization::UnicodeNormalization;

use crate::casefold_12_1::TOUCHED_SINCE_12_1;

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

/// Whether `c` is a character Unicode 12.1 had not assigned that the crates' tables would
/// fold, decompose or class: 12.1's tables leave it alone.
fn unassigned_in_12_1(c: char) -> bool {
    let c = u32::from(c);
    // Below the first such character (every ASCII and Latin name): no search.
    c >= TOUCHED_SINCE_12_1[0].0
        && TOUCHED_SINCE_12_1
            .binary_search_by(|&(first, last)| {
                if last < c {
                    std::cmp::Ordering::Less
                } else if first > c {
                    std::cmp::Ordering::Greater
                } else {
                    std::cmp::Ordering::Equal
                }
            })
            .is_ok()
}

/// Appends `piece`, which holds no character [`unassigned_in_12_1`], folded, decomposed
/// and without its default-ignorable code points.
fn fold_into(out: &mut String, piece: &str) {
    out.extend(
        piece
            .chars()
            .filter(|&c| !is_default_ignorable(c))
            .default_case_fold()
            .nfd(),
    );
}

/// `name` case-folded as `utf8_casefold` folds it, as UTF-8 bytes; `None` when it is not
/// UTF-8 (the kernel then hashes the name as it is; e2fsprogs folds some such names, see
/// e4-fsck's `pass2/casefold_hash.rs`). The folding stops at a NUL, as `utf8byte` ends
/// the name there. A character
/// 12.1 had not assigned is kept as it is, and the pieces on either side are folded apart
/// (it is a starter to 12.1, so nothing is reordered across it); a default-ignorable one
/// is dropped all the same.
pub fn casefold(name: &[u8]) -> Option<Vec<u8>> {
    let upto_nul = name.split(|&b| b == 0).next().unwrap_or(name);
    let name = std::str::from_utf8(upto_nul).ok()?;
    let mut folded = String::with_capacity(name.len());
    let mut start = 0;
    let kept = name
        .char_indices()
        .filter(|&(_, c)| unassigned_in_12_1(c) && !is_default_ignorable(c));
    for (at, c) in kept {
        fold_into(&mut folded, &name[start..at]);
        folded.push(c);
        start = at + c.len_utf8();
    }
    fold_into(&mut folded, &name[start..]);
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
        // The folding ends at a NUL, whatever follows it.
        assert_eq!(casefold(b"AB\0C\xff").unwrap(), b"ab");
    }

    #[test]
    fn characters_12_1_had_not_assigned_are_kept() {
        // U+A7C7 (Unicode 13) folds to U+A7C8 in the crates' tables.
        assert_eq!(
            casefold("X\u{A7C7}".as_bytes()).unwrap(),
            "x\u{A7C7}".as_bytes()
        );
        // U+1AC0 (Unicode 14, class 220) is a starter to 12.1: the acute (230) before
        // it stays there, and the Angstrom sign after it is still folded.
        assert_eq!(
            casefold("e\u{301}\u{1AC0}\u{212B}".as_bytes()).unwrap(),
            "e\u{301}\u{1AC0}a\u{30A}".as_bytes()
        );
        // U+11938 (Unicode 13) decomposes canonically in the crates' tables.
        assert_eq!(
            casefold("\u{11938}".as_bytes()).unwrap(),
            "\u{11938}".as_bytes()
        );
    }

    /// The table of characters 12.1 had not assigned was made from the crates' tables
    /// of these versions: after a bump, run `scripts/casefold-12-1-table.sh` again.
    #[test]
    fn the_table_matches_the_crates_versions() {
        use crate::casefold_12_1::{CASE_FOLDING_VERSION, NORMALIZATION_VERSION};
        assert_eq!(
            unicode_normalization::UNICODE_VERSION,
            NORMALIZATION_VERSION
        );
        assert_eq!(caseless::UNICODE_VERSION, CASE_FOLDING_VERSION);
    }
}

//! The names seen so far in one directory block, for `PR_2_DUPLICATE_DIRENT`.
//!
//! Pass 2 asks this once per entry of every directory block, so it is on the hot path of
//! trees of small directories: the names are borrowed from the block (no copy per entry)
//! and hashed with FNV-1a rather than SipHash (names are short, and a directory block is
//! not adversarial input to a table this small: at most block_size / 12 entries). With
//! copies and SipHash this was about 15% of the instructions of checking 300,000 small
//! files and directories. A casefolded directory under strict mode keeps its folded
//! names, owned, in a second set that other directories never allocate.

use std::collections::HashSet;
use std::hash::{BuildHasherDefault, Hasher};

/// Names of one directory block (or inline directory), borrowed from its bytes.
pub struct DirNames<'r> {
    seen: HashSet<&'r [u8], BuildHasherDefault<Fnv1a>>,
    folded: HashSet<Vec<u8>, BuildHasherDefault<Fnv1a>>,
}

impl<'r> DirNames<'r> {
    pub fn new() -> Self {
        DirNames {
            // Most blocks of small directories hold tens of names: start with room for
            // them instead of growing through several rehashes.
            seen: HashSet::with_capacity_and_hasher(32, BuildHasherDefault::default()),
            folded: HashSet::default(),
        }
    }

    /// Records `name`; false if the block already had it.
    pub fn insert(&mut self, name: &'r [u8]) -> bool {
        self.seen.insert(name)
    }

    /// Records a name by its case-folded form; false if the block already had one that
    /// folds alike.
    pub fn insert_folded(&mut self, folded: Vec<u8>) -> bool {
        self.folded.insert(folded)
    }
}

/// 64-bit FNV-1a, finished with murmur3's mix.
#[derive(Default)]
struct Fnv1a(u64);

impl Hasher for Fnv1a {
    /// FNV-1a leaves the high bits, which the hash table keys on, barely mixed for names
    /// that differ only in their last bytes (`f00`..`f63`); the murmur3 finaliser spreads
    /// every bit over all of them.
    fn finish(&self) -> u64 {
        let mut h = self.0;
        h ^= h >> 33;
        h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
        h ^= h >> 33;
        h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
        h ^ (h >> 33)
    }

    fn write(&mut self, bytes: &[u8]) {
        const OFFSET_BASIS: u64 = 0xcbf2_9ce4_8422_2325;
        const PRIME: u64 = 0x0000_0100_0000_01b3;
        let mut hash = if self.0 == 0 { OFFSET_BASIS } else { self.0 };
        for &b in bytes {
            hash = (hash ^ u64::from(b)).wrapping_mul(PRIME);
        }
        self.0 = hash;
    }
}

#[cfg(test)]
mod tests {
    use super::DirNames;

    #[test]
    fn a_repeated_name_is_found_and_distinct_names_are_not() {
        let block = b"alphabetaalphaalphx";
        let mut names = DirNames::new();
        assert!(names.insert(&block[0..5]));
        assert!(names.insert(&block[5..9]));
        assert!(!names.insert(&block[9..14]), "alpha a second time");
        assert!(
            names.insert(&block[14..19]),
            "alphx differs in its last byte"
        );
        assert!(names.insert(b""));
        assert!(!names.insert(b""));
    }

    #[test]
    fn folded_names_are_compared_among_themselves() {
        let mut names = DirNames::new();
        assert!(names.insert_folded(b"strasse".to_vec()));
        assert!(!names.insert_folded(b"strasse".to_vec()));
        assert!(names.insert(b"strasse"), "a raw name is another set");
    }
}

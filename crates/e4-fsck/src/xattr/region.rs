//! e2fsck's region allocator (`e2fsck/region.c`), with which both of its xattr walks
//! (`check_ea_in_inode` over an inode's area, `check_ext_attr` over an xattr block) find
//! pieces that overlap: the header, each entry record with its name, each value and the
//! four zero bytes that end the list are taken in turn, and a piece that overlaps one
//! taken before, or passes the end, is an allocation collision.

/// Pieces of `[0, len)` handed out, none twice (e2fsck's `region_t`). e2fsck keeps a
/// sorted list that merges neighbours; the answers are those of a plain overlap test.
#[derive(Debug)]
pub struct Regions {
    len: usize,
    taken: Vec<(usize, usize)>,
}

impl Regions {
    /// Nothing of `[0, len)` taken yet.
    pub fn new(len: usize) -> Self {
        Regions {
            len,
            taken: Vec::new(),
        }
    }

    /// Takes `[start, start + n)`; false (a collision) when it passes the end, overlaps a
    /// piece taken before or is empty (`region_allocate` answers 1 for `n == 0`; both
    /// walks only ask for an empty piece that way).
    pub fn allocate(&mut self, start: usize, n: usize) -> bool {
        let end = start.saturating_add(n);
        if n == 0 || end > self.len || self.taken.iter().any(|&(s, e)| start < e && s < end) {
            return false;
        }
        self.taken.push((start, end));
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The steps of region.c's own test program: taken unless they overlap.
    #[test]
    fn answers_of_e2fsck_test_program() {
        // region_create(1, 1001): an offset of 1, so every start here is one less.
        let mut r = Regions::new(1000);
        let steps = [
            (10, 10, true),
            (30, 10, true),
            (1, 15, false),
            (15, 8, false),
            (1, 20, false),
            (1, 8, true),
            (40, 10, true),
            (22, 5, true),
            (27, 3, true),
            (20, 2, true),
            (49, 1, false),
            (50, 5, true),
            (9, 2, false),
            (9, 1, true),
        ];
        for (start, n, taken) in steps {
            assert_eq!(r.allocate(start - 1, n), taken, "allocate({start}, {n})");
        }
        assert!(!r.allocate(995, 10), "past the end");
        assert!(!r.allocate(500, 0), "empty");
    }
}

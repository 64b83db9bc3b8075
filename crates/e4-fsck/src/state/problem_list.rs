//! The problems found, in the order found, kept in pages of a fixed size: a list that
//! grows never copies what it holds. A vector grown by doubling held its old and its new
//! buffer at once while it copied one into the other: on an image claiming 2^16 groups of
//! garbage descriptors, 65,535 problems of 48 bytes, that copy was 3 MiB of the check's
//! peak (`e4/tests/bounded.rs::fsck_of_garbage_descriptors_in_every_group_is_bounded`).
//! Every page is reserved fallibly: an image with a problem in each of millions of
//! claimed groups has more than memory holds, and that is one error line, not an abort.
//! A page is taken only while [`HEADROOM`] more could be had beside it, so the list stops
//! growing while the small allocations around it (texts, the descriptor batches) still
//! fit: pages alone filled memory to its last bytes under `ulimit -v`, and the next
//! descriptor batch aborted (`e4/tests/bounded.rs::a_claimed_group_count_too_large_for_memory_is_one_line`).

use e4_format::table::TableTooLarge;

use crate::report::problem::Problem;

/// Problems a page holds: 48 KiB of records, small beside a list that matters for memory
/// and large enough that the page pointers are nothing beside the records.
const PAGE: usize = 1 << 10;

/// Memory that must still be available beside a new page: enough for the check to end
/// with its one line (a descriptor batch is 0.5 MiB). It is reserved and given back at
/// once, never written, so it costs address space for a moment, not resident memory.
const HEADROOM: usize = 8 << 20;

/// Problems in the order found (not yet the order they are printed in).
#[derive(Debug, Default)]
pub struct ProblemList {
    /// Full pages, then the page being filled.
    pages: Vec<Vec<Problem>>,
    /// Problems in all the pages.
    len: usize,
}

impl ProblemList {
    /// Adds `problem`, or says that the list cannot grow.
    pub fn push(&mut self, problem: Problem) -> Result<(), TableTooLarge> {
        match self.pages.last_mut() {
            Some(page) if page.len() < page.capacity() => page.push(problem),
            _ => {
                let entries = self.len as u64 + 1;
                let too_large = || too_large(entries);
                let mut page = Vec::new();
                page.try_reserve_exact(PAGE).map_err(|_| too_large())?;
                Vec::<u8>::new()
                    .try_reserve_exact(HEADROOM)
                    .map_err(|_| too_large())?;
                page.push(problem);
                self.pages.try_reserve(1).map_err(|_| too_large())?;
                self.pages.push(page);
            }
        }
        self.len += 1;
        Ok(())
    }

    /// Moves every problem of `other` to this list, without copying them.
    pub fn append(&mut self, other: ProblemList) -> Result<(), TableTooLarge> {
        let entries = self.len as u64 + other.len as u64;
        self.pages
            .try_reserve(other.pages.len())
            .map_err(|_| too_large(entries))?;
        self.pages.extend(other.pages);
        self.len += other.len;
        Ok(())
    }

    /// How many problems the list holds.
    pub fn len(&self) -> usize {
        self.len
    }

    /// The problems, in the order found.
    pub fn iter(&self) -> impl Iterator<Item = &Problem> {
        self.pages.iter().flatten()
    }

    /// The problems in one vector, each page freed as soon as it is moved: the vector's
    /// memory is taken as it is filled, so the two together hold the list about once.
    pub fn into_vec(self) -> Result<Vec<Problem>, TableTooLarge> {
        let len = self.len;
        let mut all = Vec::new();
        all.try_reserve_exact(len)
            .map_err(|_| too_large(len as u64))?;
        for page in self.pages {
            all.extend(page);
        }
        Ok(all)
    }
}

/// The error for a list that cannot hold `entries` problems.
pub fn too_large(entries: u64) -> TableTooLarge {
    TableTooLarge {
        table: "the problems found",
        claimed: e4_format::Location::Superblock,
        entries,
        bytes: entries.saturating_mul(size_of::<Problem>() as u64),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::problem::{Location, ProblemCode};

    fn problem(group: u32) -> Problem {
        Problem::new(ProblemCode::PR_0_GDT_CSUM, Location::Group(group), "x")
    }

    /// Problems across several pages, and a list appended after a partly filled page,
    /// come out once each in the order pushed.
    #[test]
    fn pages_keep_every_problem_in_order() {
        let mut list = ProblemList::default();
        for g in 0..(PAGE as u32 * 2 + 5) {
            list.push(problem(g)).unwrap();
        }
        let mut more = ProblemList::default();
        for g in 0..3 {
            more.push(problem(100_000 + g)).unwrap();
        }
        list.append(more).unwrap();
        list.push(problem(200_000)).unwrap();
        assert_eq!(list.len(), PAGE * 2 + 9);
        let groups: Vec<u32> = list
            .into_vec()
            .unwrap()
            .iter()
            .map(|p| match p.location {
                Location::Group(g) => g,
                _ => unreachable!(),
            })
            .collect();
        let expected: Vec<u32> = (0..(PAGE as u32 * 2 + 5))
            .chain(100_000..100_003)
            .chain([200_000])
            .collect();
        assert_eq!(groups, expected);
    }
}

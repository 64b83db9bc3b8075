//! Tables whose length an image decides (one entry per group, per inode or per block of
//! what the superblock claims), reserved fallibly: a length this process cannot hold is
//! an error naming the table and the claim, never an abort ("memory allocation of N bytes
//! failed") as an infallible `Vec::with_capacity` gives under a `ulimit -v` or on a sparse
//! file whose superblock claims petabytes.

use std::fmt;

use crate::error::Location;

/// A table an image asks for that this process cannot reserve.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableTooLarge {
    /// What the table holds, as a noun phrase ("the group descriptors").
    pub table: &'static str,
    /// Where the length was claimed (the superblock, for a count of groups or inodes).
    pub claimed: Location,
    /// Entries the claim asks for.
    pub entries: u64,
    /// Bytes those entries take.
    pub bytes: u64,
}

impl fmt::Display for TableTooLarge {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: {} entries, as the superblock {} claims, need {} bytes of memory, more than can be reserved",
            self.table, self.entries, self.claimed, self.bytes
        )
    }
}

impl std::error::Error for TableTooLarge {}

/// An empty vector with room for `entries` entries of `T`, or [`TableTooLarge`] when that
/// much memory cannot be reserved (or `entries` does not fit an address).
pub fn try_table<T>(
    entries: u64,
    table: &'static str,
    claimed: Location,
) -> Result<Vec<T>, TableTooLarge> {
    let too_large = || TableTooLarge {
        table,
        claimed,
        entries,
        bytes: entries.saturating_mul(size_of::<T>() as u64),
    };
    let len = usize::try_from(entries).map_err(|_| too_large())?;
    let mut out = Vec::new();
    out.try_reserve_exact(len).map_err(|_| too_large())?;
    Ok(out)
}

/// A table of `entries` entries made by `entry`, reserved fallibly as [`try_table`] does
/// and then filled without growing.
pub fn try_table_from<T>(
    entries: u64,
    table: &'static str,
    claimed: Location,
    entry: impl FnMut(u64) -> T,
) -> Result<Box<[T]>, TableTooLarge> {
    let mut out = try_table(entries, table, claimed)?;
    out.extend((0..entries).map(entry));
    Ok(out.into_boxed_slice())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_length_past_any_address_space_is_an_error_naming_the_table() {
        let err =
            try_table::<u64>(u64::MAX / 4, "the test entries", Location::Superblock).unwrap_err();
        assert_eq!(err.bytes, u64::MAX);
        let line = err.to_string();
        assert!(
            line.starts_with("the test entries: 4611686018427387903 entries"),
            "{line}"
        );
        assert!(line.contains("at byte 1024"), "{line}");
    }

    #[test]
    fn a_length_that_fits_is_reserved_and_filled() {
        let table = try_table_from(5, "five", Location::Superblock, |i| i * 2).unwrap();
        assert_eq!(&*table, &[0, 2, 4, 6, 8]);
    }
}

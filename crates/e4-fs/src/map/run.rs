//! What a lookup of a file's mapping answers: a run of data blocks or of a hole.

/// What a run of logical blocks starting at the requested one maps to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mapping {
    /// Not allocated: reads as zeros. `len` blocks until the next mapped block (`u64::MAX`
    /// when nothing follows).
    Hole { len: u64 },
    /// `len` blocks at `physical`; unwritten blocks read as zeros.
    Data {
        physical: u64,
        len: u64,
        unwritten: bool,
    },
}

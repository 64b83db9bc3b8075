//! Transactions: the handles operations hold, the block access they make through them,
//! commits, and write-back, the one place metadata goes home.

pub(crate) mod interval;
pub(crate) mod txn_io;
pub(crate) mod write_back;
pub(crate) mod writer;

//! Where bytes come from and go to, and the interface the on-disk mechanisms see. Nothing
//! here imports anything else of e4-fs.

pub(crate) mod credits;
pub mod device;
pub(crate) mod meta_io;

//! Where bytes come from and go to, and the interface the on-disk mechanisms see. Nothing
//! here imports anything else of e4-fs but its errors.

pub(crate) mod credits;
pub(crate) mod derived;
pub mod device;
mod hole_map;
mod image_lock;
pub use image_lock::kernel_mount;
pub(crate) mod meta_io;
pub mod recording_device;

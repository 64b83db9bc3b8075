//! Test support shared by e4's crates. Everything an oracle needs is built at test time:
//! trees are generated, images are made from them by `mke2fs -d`, and results are checked
//! with `e2fsck -fn` and, where the machine allows, the kernel's own ext4 on a loop device.
//! FUSE mounts made by tests are watched so a stuck one cannot outlive its test.
//! Structures are found in an image file with e4-format alone ([`RawImage`]), so e4-format's
//! own tests and the checker's do not depend on the engine.

mod compare;
mod fuse_mount;
mod image;
mod io_gate;
mod kernel_mount;
mod layers;
mod raw_image;
mod tree;
#[cfg(feature = "walk")]
mod walk;

pub use compare::{compare_trees, CompareOptions};
pub use e4_host_tools::{has_tool, tool};
pub use fuse_mount::{fuse_skipped, is_mounted, FuseGuard};
pub use image::{
    debugfs_script, e2fsck_clean, e2fsck_problems, make_empty_image, make_image, Image, Profile,
    ONE_MIB_GROUPS, PROFILES,
};
pub use io_gate::IoGate;
pub use kernel_mount::{kernel_comparison_skipped, KernelMount, LoopDevice, LoopMount};
pub use layers::layering_problems;
pub use raw_image::RawImage;
pub use tree::{full_source_tree, generate_tree, TreeSpec};
#[cfg(feature = "walk")]
pub use walk::walk_everything;

//! Extended attributes as pass 1 checks them: the entries of a list wherever it lies
//! (`entries`), the in-inode area (`inode_area`), xattr blocks (`block`, with the region
//! allocator of `region`) and their sharing (`refs`), values held in inodes
//! (`ea_inode`), and one attribute looked up by name as libext2fs reads it (`lookup`). Imports only `state/` and `report/`.

pub mod block;
pub mod ea_inode;
pub mod entries;
pub mod inode_area;
pub mod lookup;
pub mod refs;
pub mod region;

use e4_format::xattr::Xattr;

use crate::report::problem::{Location, ProblemCode};
use crate::state::context::Context;

/// `PR_1_ATTR_HASH` for `xattr`, an entry of inode `owner`, named so that two bad
/// entries of one block stay two reports.
pub fn report_bad_hash(ctx: &Context, owner: u32, xattr: &Xattr, loc: Location) {
    ctx.report(
        ProblemCode::PR_1_ATTR_HASH,
        loc,
        format!(
            "extended attribute {} in inode {owner} has a hash ({}) which is invalid",
            String::from_utf8_lossy(&xattr.name),
            xattr.hash
        ),
    );
}

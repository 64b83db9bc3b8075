//! Walking a file's blocks: extent trees (`extent`) and block maps (`block_map`) as pass
//! 1 walks them, claiming each block, with the count limit past which a block is too big
//! (`too_big`); and mapping one logical block (`file_map`) for the few readers of a
//! file's content. Imports only `state/` and `report/`.

pub mod block_map;
pub mod extent;
pub mod file_map;
pub mod too_big;

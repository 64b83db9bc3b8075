//! An inode's logical-to-physical mapping for writing, whichever kind it has: an extent
//! tree (ext4) or an indirect block map (ext2/ext3, and ext4 inodes without EXTENTS_FL). The
//! file and directory code is written once against this.

use e4_format::extent::Extent;
use e4_format::features::IncompatFeatures;
use e4_format::inode::{flags, Inode, I_BLOCK_SIZE};
use e4_format::superblock::Superblock;

use crate::error::{Error, Result};
use crate::io::meta_io::MetaIo;
use crate::io::meta_io::Owner;
use crate::map::block_map::BlockMapTree;
use crate::map::extent_tree::{ExtentTree, Lookup, Previous, ShiftDirection};
use crate::map::run::Mapping;

/// Longest written extent.
const MAX_EXTENT: u64 = 32768;

/// A mapped run starting at the block asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct MappedRun {
    pub physical: u64,
    /// Blocks from the one asked for to the end of the run.
    pub len: u64,
    pub unwritten: bool,
}

/// What lies at a logical block: the mapped run from there, or the hole's length.
pub(crate) enum RunOrHole {
    Run(MappedRun),
    /// Unmapped blocks from there on, up to the length asked for, and what the walk saw of
    /// the block before (for [`FileMapping::after_previous`]).
    Hole {
        len: u64,
        previous: Previous,
    },
}

pub(crate) enum FileMapping<'a> {
    Extents(ExtentTree<'a>),
    Blocks(BlockMapTree<'a>),
}

impl<'a> FileMapping<'a> {
    /// The mapping of `inode` (its `i_block` is borrowed until this is dropped).
    pub fn of(inode: &'a mut Inode, io: &'a dyn MetaIo) -> Self {
        let owner = Owner::of(inode);
        let extents = inode.has_flag(flags::EXTENTS);
        Self::over(&mut inode.record.block, extents, io, owner)
    }

    /// The mapping of `inode` for lookups only: its `i_block` is copied into `root`, so the
    /// inode itself stays shared with other readers.
    pub fn reading(inode: &Inode, root: &'a mut [u8; I_BLOCK_SIZE], io: &'a dyn MetaIo) -> Self {
        *root = inode.record.block;
        Self::over(root, inode.has_flag(flags::EXTENTS), io, Owner::of(inode))
    }

    fn over(
        root: &'a mut [u8; I_BLOCK_SIZE],
        extents: bool,
        io: &'a dyn MetaIo,
        owner: Owner,
    ) -> Self {
        if extents {
            FileMapping::Extents(ExtentTree::new(root, io, owner))
        } else {
            FileMapping::Blocks(BlockMapTree::new(root, io, owner))
        }
    }

    /// One past the last logical block this mapping can address.
    pub fn logical_limit(&self) -> u64 {
        match self {
            // `ee_block` is 32 bits; the last block stays unused (EXT_MAX_BLOCKS).
            FileMapping::Extents(_) => (1 << 32) - 1,
            FileMapping::Blocks(t) => t.logical_limit(),
        }
    }

    /// Longest run one insert may map.
    pub fn max_run(&self) -> u64 {
        match self {
            FileMapping::Extents(_) => MAX_EXTENT,
            FileMapping::Blocks(_) => u64::MAX,
        }
    }

    /// What the blocks from `logical` on are, as one run of at most `max_len` blocks (at
    /// least one): mapped data, or a hole. The one lookup of a file's mapping, for reads
    /// and writes alike.
    pub fn run_at(&self, logical: u64, max_len: u64) -> Result<Mapping> {
        let max_len = max_len.max(1);
        if logical >= self.logical_limit() {
            return Ok(Mapping::Hole { len: max_len });
        }
        let run = match self {
            FileMapping::Extents(t) => Self::extent_run(logical, t.lookup(logical)?).0,
            FileMapping::Blocks(t) => t.lookup_run(logical, max_len)?,
        };
        self.check_run(&run)?;
        Ok(match run {
            Mapping::Hole { len } => Mapping::Hole {
                len: len.min(max_len),
            },
            Mapping::Data {
                physical,
                len,
                unwritten,
            } => Mapping::Data {
                physical,
                len: len.min(max_len),
                unwritten,
            },
        })
    }

    /// The run holding `logical`, if it is mapped.
    pub fn lookup(&self, logical: u64) -> Result<Option<MappedRun>> {
        Ok(match self.run_at(logical, u64::MAX)? {
            Mapping::Data {
                physical,
                len,
                unwritten,
            } => Some(MappedRun {
                physical,
                len,
                unwritten,
            }),
            Mapping::Hole { .. } => None,
        })
    }

    /// Checks a run of data the mapping names before anyone reads or writes it as the
    /// file's ([`MetaIo::check_mapped`]).
    fn check_run(&self, run: &Mapping) -> Result<()> {
        let (io, owner) = match self {
            FileMapping::Extents(t) => t.io_and_owner(),
            FileMapping::Blocks(t) => t.io_and_owner(),
        };
        match *run {
            Mapping::Data { physical, len, .. } => io.check_mapped(physical, len, owner),
            Mapping::Hole { .. } => Ok(()),
        }
    }

    /// An extent tree's lookup at `logical` as a run, with what it saw of the block before.
    fn extent_run(logical: u64, found: Lookup) -> (Mapping, Previous) {
        match found {
            Lookup::Extent(e) => {
                let offset = logical - u64::from(e.logical);
                let run = Mapping::Data {
                    physical: e.physical + offset,
                    len: u64::from(e.len) - offset,
                    unwritten: e.unwritten,
                };
                (run, Previous::Unknown)
            }
            Lookup::Hole { next, previous } => {
                let len = next.saturating_sub(logical).max(1);
                (Mapping::Hole { len }, previous)
            }
        }
    }

    /// How many blocks from `logical` on are unmapped, up to `max`.
    pub fn hole_len(&self, logical: u64, max: u64) -> Result<u64> {
        Ok(match self.run_or_hole(logical, max)? {
            RunOrHole::Hole { len, .. } => len,
            RunOrHole::Run(_) => 0,
        })
    }

    /// The physical block right after the one mapping `logical - 1`, if that one is mapped:
    /// where data filling a hole at `logical` goes best. `previous` is what a walk to
    /// `logical` saw of it ([`RunOrHole::Hole`]); where it could not see, this looks.
    pub fn after_previous(&self, logical: u64, previous: Previous) -> Result<Option<u64>> {
        Ok(match (logical.checked_sub(1), previous) {
            (None, _) | (Some(_), Previous::Unmapped) => None,
            (Some(_), Previous::Mapped { after }) => Some(after),
            (Some(prev), Previous::Unknown) => self.lookup(prev)?.map(|r| r.physical + 1),
        })
    }

    /// What lies at `logical`, in one walk of the mapping: the run [`FileMapping::lookup`]
    /// finds, or the hole [`FileMapping::hole_len`] measures (up to `max`, and never past
    /// the last logical block), for a loop that skips runs and fills holes.
    pub fn run_or_hole(&self, logical: u64, max: u64) -> Result<RunOrHole> {
        let max = max.min(self.logical_limit().saturating_sub(logical));
        let (run, previous) = match self {
            FileMapping::Extents(t) if logical < self.logical_limit() => {
                let (run, previous) = Self::extent_run(logical, t.lookup(logical)?);
                self.check_run(&run)?;
                (run, previous)
            }
            _ => (self.run_at(logical, u64::MAX)?, Previous::Unknown),
        };
        Ok(match run {
            Mapping::Data {
                physical,
                len,
                unwritten,
            } => RunOrHole::Run(MappedRun {
                physical,
                len,
                unwritten,
            }),
            Mapping::Hole { len } => RunOrHole::Hole {
                len: len.min(max),
                previous,
            },
        })
    }

    /// Maps `len` blocks from `logical` (all unmapped) to `physical..`, written or not.
    pub fn insert(&mut self, logical: u64, physical: u64, len: u64, unwritten: bool) -> Result<()> {
        match self {
            FileMapping::Extents(t) => t.insert(Extent {
                logical: logical as u32,
                len: len as u32,
                physical,
                unwritten,
            }),
            FileMapping::Blocks(t) => t.insert(logical, physical, len),
        }
    }

    /// Unmaps `len` blocks from `start`; returns the data runs for the caller to free.
    pub fn remove(&mut self, start: u64, len: u64) -> Result<Vec<(u64, u64)>> {
        match self {
            FileMapping::Extents(t) => {
                if start >= 1 << 32 {
                    return Ok(Vec::new());
                }
                t.remove(start as u32, len.min((1 << 32) - start))
            }
            FileMapping::Blocks(t) => t.remove(start, len),
        }
    }

    /// Marks unwritten blocks written (block maps have no unwritten state).
    pub fn mark_written(&mut self, logical: u64, len: u64) -> Result<()> {
        match self {
            FileMapping::Extents(t) => t.mark_written(logical as u32, len),
            FileMapping::Blocks(_) => Ok(()),
        }
    }

    /// Moves every mapped block that starts in `from..until` (`None`: to the end) by
    /// `distance` blocks (see [`ExtentTree::shift`]); block maps cannot (the kernel's
    /// EOPNOTSUPP).
    pub fn shift(
        &mut self,
        from: u64,
        until: Option<u64>,
        distance: u64,
        direction: ShiftDirection,
    ) -> Result<()> {
        let too_far = || Error::Invalid(format!("a shift of {distance} blocks from block {from}"));
        let block = |b: u64| u32::try_from(b).map_err(|_| too_far());
        match self {
            FileMapping::Extents(t) => t.shift(
                block(from)?,
                until.map(block).transpose()?,
                block(distance)?,
                direction,
            ),
            FileMapping::Blocks(_) => Err(Error::NotSupported(
                "moving the blocks of a block-mapped file".into(),
            )),
        }
    }

    /// Where a shift from `from` on can be cut into pieces of whole tree leaves
    /// ([`ExtentTree::leaf_starts`]); empty for a block map or a one-leaf tree.
    pub fn leaf_starts(&self, from: u64) -> Result<Vec<u64>> {
        match self {
            FileMapping::Extents(t) => Ok(t
                .leaf_starts(u32::try_from(from).unwrap_or(u32::MAX))?
                .into_iter()
                .map(u64::from)
                .collect()),
            FileMapping::Blocks(_) => Ok(Vec::new()),
        }
    }

    /// Tree blocks allocated minus freed since this mapping was made.
    pub fn node_blocks_change(&self) -> i64 {
        match self {
            FileMapping::Extents(t) => t.node_blocks_change(),
            FileMapping::Blocks(t) => t.node_blocks_change(),
        }
    }
}

/// Gives an inode leaving inline data the mapping a new file of its kind has: EXTENTS_FL and
/// an empty extent root on an extents filesystem, else zeroed block pointers.
pub(crate) fn give_empty_mapping(sb: &Superblock, inode: &mut Inode) {
    inode.record.block = [0; I_BLOCK_SIZE];
    if sb.incompat().contains(IncompatFeatures::EXTENTS) {
        inode.record.flags |= flags::EXTENTS;
        ExtentTree::init_empty(&mut inode.record.block);
    }
}

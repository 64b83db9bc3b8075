//! The `Filesystem` handle: opening an image, its geometry, and reading metadata blocks and
//! inodes. `Filesystem` is `Send + Sync` and every operation takes `&self`; the only shared
//! mutable state is the sharded block cache.

use std::path::Path;
use std::sync::Arc;

use e4_format::features::{feature_names, FeatureKind, IncompatFeatures, READABLE_INCOMPAT};
use e4_format::geometry::Geometry;
use e4_format::group_descriptor::{GroupChecksum, GroupDescriptor, GroupSeed, BG_INODE_UNINIT};
use e4_format::inode::Inode;
use e4_format::superblock::{
    Superblock, SUPERBLOCK_MAGIC, SUPERBLOCK_MAGIC_OFFSET, SUPERBLOCK_OFFSET,
};
use e4_format::{FormatError, Location, MetadataBlock, Problem, Structure};
use parking_lot::Mutex;

use crate::buffer::store::BlockStore;
use crate::buffer::verifier::BlockVerifier;
use crate::error::{Error, Result};
use crate::inode::cache::{InodeCache, InodeHandle};
use crate::io::device::{Device, FileDevice, MemoryDevice};
use crate::names::dentry_cache::DentryCache;
use crate::space::caller::Caller;
use crate::txn::writer::Writer;

/// How to open a filesystem.
#[derive(Debug, Clone)]
pub struct OpenOptions {
    /// Verify metadata checksums (metadata_csum, gdt_csum) when blocks are first read.
    /// On by default; turning it off lets a damaged image be salvaged (read-only).
    pub verify_checksums: bool,
    /// Bytes of clean metadata the block cache may hold. Default 64 MiB.
    pub cache_bytes: usize,
    /// Open for writing. The image is marked "not clean" until [`Filesystem::unmount`].
    pub writable: bool,
    /// Commit the running transaction once this long has passed since the last commit
    /// (ext4's `commit=`, 5 s by default); zero turns interval commits off (commits then
    /// come only from pressure, [`Filesystem::sync`] and unmount). The check runs at the end
    /// of every operation; a filesystem that goes idle with changes is committed by the
    /// thread [`Filesystem::into_shared`] starts.
    pub commit_interval: std::time::Duration,
    /// Who writes: decides whether writes may use the blocks kept back for the superuser
    /// (see [`Caller`]). An ordinary user by default; a tool acting for the user who runs
    /// it passes [`Caller::of_this_process`].
    pub caller: Caller,
}

impl Default for OpenOptions {
    fn default() -> Self {
        OpenOptions {
            verify_checksums: true,
            cache_bytes: 64 << 20,
            writable: false,
            commit_interval: std::time::Duration::from_secs(5),
            caller: Caller::ordinary(),
        }
    }
}

impl OpenOptions {
    /// The defaults, for writing.
    pub fn writable() -> Self {
        OpenOptions {
            writable: true,
            ..Self::default()
        }
    }
}

/// An open ext2/3/4 filesystem.
pub struct Filesystem {
    /// The device, the metadata cache and the verifier.
    pub(crate) store: BlockStore,
    superblock: Superblock,
    pub(crate) geometry: Geometry,
    /// The group descriptors as they are now (write-back changes counts and flags).
    pub(crate) descriptors: Box<[Mutex<GroupDescriptor>]>,
    /// Each group's inode table (fixed: read once, without the descriptor's lock).
    inode_tables: Box<[u64]>,
    pub(crate) inodes: InodeCache,
    pub(crate) dentries: DentryCache,
    /// Why the filesystem may only be read, if it may not be written.
    read_only_reason: Option<String>,
    /// What was damaged but could be read around (see [`Filesystem::warnings`]).
    warnings: Vec<String>,
    /// Allocators and the running transaction, when open for writing.
    pub(crate) writer: Option<Writer>,
}

impl Drop for Filesystem {
    fn drop(&mut self) {
        if let Some(w) = &self.writer {
            if w.is_open() {
                // Nowhere to report a failure: the next e2fsck will.
                let _ = w.unmount(self);
            }
        }
    }
}

/// Where a backup superblock of a filesystem with `block_size`-byte blocks and the default
/// 8 x block_size blocks per group sits: at the start of group 1 (e2fsck's guesses for `-b`).
fn backup_superblock_block(block_size: u64) -> u64 {
    u64::from(block_size == 1024) + 8 * block_size
}

/// Decodes a superblock and verifies its checksum: e4 opens only a superblock it can trust,
/// and turns to a backup otherwise.
fn trusted_superblock(raw: &[u8], loc: Location) -> std::result::Result<Superblock, FormatError> {
    let sb = Superblock::decode_checked(raw)?;
    Superblock::verify(raw, (), loc)?;
    Ok(sb)
}

/// Reads the primary superblock; if it is unusable but a backup in group 1 is good, uses
/// that one (as e2fsck and the kernel's `sb=` do) and says so. Returns the superblock, the
/// block its descriptor table follows, and the warnings.
fn read_superblock(device: &dyn Device) -> Result<(Superblock, u64, Vec<String>)> {
    let read_at = |offset: u64| -> Result<Option<[u8; 1024]>> {
        let mut raw = [0u8; 1024];
        if device.size() < offset + raw.len() as u64 {
            return Ok(None);
        }
        device
            .read_exact_at(&mut raw, offset)
            .map_err(|e| Error::io(format!("cannot read a superblock at byte {offset}"), e))?;
        Ok(Some(raw))
    };
    let needed = SUPERBLOCK_OFFSET + 1024;
    let Some(raw) = read_at(SUPERBLOCK_OFFSET)? else {
        return Err(Error::NotAFilesystem(format!(
            "{} bytes is too small to hold a superblock (it ends at byte {needed})",
            device.size()
        )));
    };
    let primary_error = match trusted_superblock(&raw, Location::Superblock) {
        Ok(sb) => {
            // The descriptor table starts in the block after the superblock's: block 2 with
            // 1 KiB blocks (block 1 under bigalloc, whose first data block is 0), else block 1.
            let superblock_block = SUPERBLOCK_OFFSET / u64::from(sb.block_size());
            return Ok((sb, superblock_block, Vec::new()));
        }
        Err(e) => e,
    };
    for log in 0..=6 {
        let block_size = 1024u64 << log;
        let block = backup_superblock_block(block_size);
        let Some(raw) = read_at(block * block_size)? else {
            continue;
        };
        let Ok(sb) = trusted_superblock(&raw, Location::Block(block)) else {
            continue;
        };
        if u64::from(sb.block_size()) == block_size
            && u64::from(sb.first_data_block) + u64::from(sb.blocks_per_group) == block
        {
            let warning = format!(
                "the primary superblock is unusable ({primary_error}); using the backup in block {block}"
            );
            return Ok((sb, block, vec![warning]));
        }
    }
    let magic = u16::from_le_bytes([
        raw[SUPERBLOCK_MAGIC_OFFSET],
        raw[SUPERBLOCK_MAGIC_OFFSET + 1],
    ]);
    if magic != SUPERBLOCK_MAGIC {
        return Err(Error::NotAFilesystem(format!(
            "bad magic number {magic:#06x} in the superblock at byte {SUPERBLOCK_OFFSET} (ext2/3/4 has 0xef53), and no backup superblock was found"
        )));
    }
    Err(primary_error.into())
}

impl Filesystem {
    /// Opens the image file or block device at `path`.
    pub fn open(path: impl AsRef<Path>, options: OpenOptions) -> Result<Self> {
        let path = path.as_ref();
        let device = FileDevice::open(path, options.writable)
            .map_err(|e| Error::io("cannot open the image", e))?;
        Self::open_device(Arc::new(device), options)
    }

    /// Opens an image held in memory.
    pub fn open_bytes(bytes: Vec<u8>, options: OpenOptions) -> Result<Self> {
        Self::open_device(Arc::new(MemoryDevice::new(bytes)), options)
    }

    /// Opens a filesystem on any device.
    pub fn open_device(device: Arc<dyn Device>, options: OpenOptions) -> Result<Self> {
        let (superblock, descriptors_after, mut warnings) = read_superblock(device.as_ref())?;
        let incompat = superblock.incompat();
        let unsupported = incompat.bits() & !READABLE_INCOMPAT.bits();
        if unsupported != 0 {
            return Err(FormatError::Incompatible(
                feature_names(FeatureKind::Incompat, unsupported).join(", "),
            )
            .into());
        }
        if incompat.contains(IncompatFeatures::RECOVER) {
            return Err(FormatError::Incompatible(
                "a journal that needs recovery (needs_recovery); replay it with e2fsck first"
                    .into(),
            )
            .into());
        }
        let ro_unknown =
            superblock.ro_compat().bits() & !e4_format::features::RoCompatFeatures::all().bits();
        let read_only_reason = (ro_unknown != 0).then(|| {
            format!(
                "unknown read-only-compatible features {}",
                feature_names(FeatureKind::RoCompat, ro_unknown).join(", ")
            )
        });
        let block_size = superblock.block_size();
        let blocks = superblock.blocks_count();
        if device.size() < blocks.saturating_mul(u64::from(block_size)) {
            return Err(FormatError::corrupt(
                Structure::Superblock,
                Location::Superblock,
                Problem::DeviceTooSmall {
                    blocks,
                    block_size,
                    device_bytes: device.size(),
                },
            )
            .into());
        }
        let csum_seed = (options.verify_checksums && superblock.has_metadata_csum())
            .then(|| superblock.csum_seed());
        let cache_blocks = options.cache_bytes / block_size as usize;
        let verifier = BlockVerifier::new(
            csum_seed,
            superblock.incompat().contains(IncompatFeatures::FILETYPE),
        );
        let store = BlockStore::new(device, block_size, blocks, cache_blocks.max(64), verifier);
        let mut fs = Filesystem {
            store,
            geometry: Geometry::with_descriptors_after(&superblock, descriptors_after),
            superblock,
            descriptors: Box::new([]),
            inode_tables: Box::new([]),
            inodes: InodeCache::new(),
            dentries: DentryCache::new(),
            read_only_reason,
            warnings: Vec::new(),
            writer: None,
        };
        let descriptors = fs.read_group_descriptors(options.verify_checksums, &mut warnings)?;
        fs.inode_tables = descriptors.iter().map(|d| d.inode_table()).collect();
        fs.descriptors = descriptors.into_iter().map(Mutex::new).collect();
        if !warnings.is_empty() && fs.read_only_reason.is_none() {
            fs.read_only_reason = Some(warnings.join("; "));
        }
        if !options.verify_checksums && fs.read_only_reason.is_none() {
            fs.read_only_reason = Some("checksums are not verified".into());
        }
        fs.warnings = warnings;
        if options.writable {
            if let Some(reason) = &fs.read_only_reason {
                return Err(Error::ReadOnly(format!(
                    "the filesystem can only be read: {reason}"
                )));
            }
            fs.writer = Some(Writer::start(
                &fs,
                options.commit_interval,
                &options.caller,
            )?);
        }
        Ok(fs)
    }

    /// Reads every group descriptor. A descriptor whose checksum is wrong is still used (its
    /// fields are checked as usual) and recorded in `warnings`: the kernel mounts such a
    /// filesystem read-only (`ext4_check_descriptors`), and so reading goes on.
    fn read_group_descriptors(
        &self,
        verify: bool,
        warnings: &mut Vec<String>,
    ) -> Result<Vec<GroupDescriptor>> {
        let sb = &self.superblock;
        let desc_size = sb.desc_size() as usize;
        let checksum = if verify {
            GroupChecksum::for_superblock(sb)
        } else {
            GroupChecksum::None
        };
        let count = sb.group_count() as u32;
        let mut groups = Vec::with_capacity(count as usize);
        let blocks = sb.blocks_count();
        for group in 0..count {
            let block = self.store.read(self.geometry.descriptor_block(group))?;
            let at = self.geometry.descriptor_offset(group);
            let bytes = &block.bytes()[at..at + desc_size];
            let desc = GroupDescriptor::from_bytes(bytes, group)?;
            let seed = GroupSeed { checksum, group };
            match GroupDescriptor::verify(bytes, seed, Location::Group(group)) {
                Err(e @ FormatError::Checksum { .. }) => warnings.push(e.to_string()),
                verified => verified?,
            }
            for (what, nr) in [
                (Structure::BlockBitmap, desc.block_bitmap()),
                (Structure::InodeBitmap, desc.inode_bitmap()),
                (Structure::InodeTable, desc.inode_table()),
            ] {
                if nr == 0 || nr >= blocks {
                    return Err(FormatError::corrupt(
                        what,
                        Location::Group(group),
                        Problem::OutsideFilesystem { block: nr },
                    )
                    .into());
                }
            }
            groups.push(desc);
        }
        Ok(groups)
    }

    pub fn superblock(&self) -> &Superblock {
        &self.superblock
    }

    /// The group descriptors as they stand (a copy: write-back changes them).
    pub fn group_descriptors(&self) -> Vec<GroupDescriptor> {
        self.descriptors.iter().map(|d| d.lock().clone()).collect()
    }

    /// The layout arithmetic of this filesystem.
    pub fn geometry(&self) -> &Geometry {
        &self.geometry
    }

    /// Writes everything changed so far to the image (a commit of the running transaction).
    pub fn sync(&self) -> Result<()> {
        match &self.writer {
            Some(w) => w.commit(self),
            None => Ok(()),
        }
    }

    /// Makes everything done to inode `ino` so far durable (`fsync`): the transaction its
    /// changes joined is committed, with everything else in it, as ext4 commits the whole
    /// running transaction (`ext4_sync_file`). Threads that fsync at once share a commit:
    /// one that finds its transaction written by another thread's commit returns without
    /// one, and an inode with no change since the last commit needs none.
    pub fn fsync(&self, ino: u32) -> Result<()> {
        self.check_caller_ino(ino)?;
        let Some(w) = &self.writer else {
            return Ok(());
        };
        // Every change to a file marks its inode dirty in the transaction it joins, and a
        // commit takes the dirty inodes after it has started the next transaction. So,
        // read in this order: a clean inode's changes were taken by a commit of a
        // transaction before the running one; a dirty inode's are in the running one or
        // an earlier one (an operation that finished before this call joined no later).
        let clean = !self.inodes.is_dirty(ino);
        let running = w.running_txn();
        w.commit_through(self, if clean { running - 1 } else { running })
    }

    /// Writes everything back, gives back every reservation and marks the filesystem clean.
    /// Dropping a writable `Filesystem` does the same but cannot report a failure.
    pub fn unmount(self) -> Result<()> {
        match &self.writer {
            // A failed commit left the image needing e2fsck: say so.
            Some(w) => w.check_open().and_then(|()| w.unmount(&self)),
            None => Ok(()),
        }
    }

    /// Whether the filesystem was opened for writing.
    pub fn is_writable(&self) -> bool {
        self.writer.is_some()
    }

    pub fn block_size(&self) -> u32 {
        self.store.block_size()
    }

    /// Damage that was read around at open (a bad primary superblock, descriptor
    /// checksums): the filesystem is readable, but should be checked with e2fsck.
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// Why the filesystem can only be opened read-only, if so.
    pub fn read_only_reason(&self) -> Option<&str> {
        self.read_only_reason.as_deref()
    }

    /// Inode `ino` as it is now (a copy: it may change as soon as it is returned; writers
    /// work under the inode's handle). An inode that holds an xattr value (the EA_INODE
    /// flag) is not a file and is refused, as the kernel's `__ext4_iget` refuses it
    /// ("unexpected EA_INODE flag"); such values are read by the xattr code.
    pub fn read_inode(&self, ino: u32) -> Result<Inode> {
        let inode = self.inode_handle(ino)?.read(&self.inodes).inode.clone();
        refuse_ea_inode(&inode)?;
        Ok(inode)
    }

    /// Runs `read` on inode `ino`, named by a caller, under the inode's lock shared with
    /// other readers: no write, truncate, punch or directory edit can change the mapping
    /// or the entries while the read follows them, so a read never lands in blocks the
    /// file has given up (which a commit may already have handed to another file) and
    /// never sees a directory half-way through a split.
    pub(crate) fn read_caller_inode<T>(
        &self,
        ino: u32,
        read: impl FnOnce(&Inode) -> Result<T>,
    ) -> Result<T> {
        self.check_caller_ino(ino)?;
        let handle = self.inode_handle(ino)?;
        let state = handle.read(&self.inodes);
        refuse_ea_inode(&state.inode)?;
        read(&state.inode)
    }

    /// Inode `ino`, named by a caller: as [`Filesystem::read_inode`], but a number that
    /// names no inode is the caller's mistake (see [`Filesystem::check_caller_ino`]).
    pub(crate) fn caller_inode(&self, ino: u32) -> Result<Inode> {
        self.check_caller_ino(ino)?;
        self.read_inode(ino)
    }

    /// Checks an inode number a caller passed to a public operation: one outside
    /// 1..=`s_inodes_count` is the caller's mistake (EINVAL), not damage in the image. Numbers
    /// read from the disk (directory entries, xattr value inodes) are not checked here, and
    /// stay corrupt when out of range.
    pub(crate) fn check_caller_ino(&self, ino: u32) -> Result<()> {
        if self.geometry.inode_location(ino).is_none() {
            return Err(Error::Invalid(format!(
                "inode {ino} does not exist (inode numbers run from 1 to {})",
                self.superblock.inodes_count
            )));
        }
        Ok(())
    }

    /// The shared handle of inode `ino`, reading the inode on first use.
    pub(crate) fn inode_handle(&self, ino: u32) -> Result<Arc<InodeHandle>> {
        self.inodes.get_or_load(ino, || self.read_inode_record(ino))
    }

    /// Where inode `ino`'s record is: its inode-table block and the byte offset there.
    pub(crate) fn inode_slot(&self, ino: u32) -> Result<(u64, usize)> {
        let loc = self.geometry.inode_location(ino).ok_or_else(|| {
            FormatError::corrupt(
                Structure::InodeNumber,
                Location::Inode(ino),
                Problem::NumberOutOfRange,
            )
        })?;
        let table = self.inode_tables[loc.group as usize];
        let bs = u64::from(self.block_size());
        Ok((
            table + loc.table_offset / bs,
            (loc.table_offset % bs) as usize,
        ))
    }

    /// Reads and parses inode `ino` from the disk (or the cached table block), whatever it
    /// holds.
    pub(crate) fn read_inode_record(&self, ino: u32) -> Result<Inode> {
        let loc = Location::Inode(ino);
        let (block_nr, at) = self.inode_slot(ino)?;
        let location = self
            .geometry
            .inode_location(ino)
            .expect("checked by inode_slot");
        let desc = self.descriptors[location.group as usize].lock().clone();
        if self.past_itable_used(&desc, location.index) {
            return Err(FormatError::corrupt(
                Structure::Inode,
                loc,
                Problem::InUninitializedInodeTable {
                    group: location.group,
                },
            )
            .into());
        }
        let block = self.store.read(block_nr)?;
        let inode_size = self.superblock.inode_size() as usize;
        let raw = &block.bytes()[at..at + inode_size];
        Ok(Inode::parse(raw, ino, self.store.csum_seed())?)
    }

    /// With group descriptor checksums, `bg_itable_unused` marks the tail of the inode
    /// table as never written; such inodes are not in use.
    fn past_itable_used(&self, desc: &GroupDescriptor, index: u32) -> bool {
        let sb = &self.superblock;
        let checksummed = sb.has_metadata_csum()
            || sb
                .ro_compat()
                .contains(e4_format::features::RoCompatFeatures::GDT_CSUM);
        checksummed
            && (desc.flags & BG_INODE_UNINIT != 0
                || index >= sb.inodes_per_group.saturating_sub(desc.itable_unused()))
    }

    /// Checks that a run of physical blocks lies inside the filesystem.
    pub(crate) fn check_extent_bounds(&self, start: u64, len: u64, loc: Location) -> Result<()> {
        let end = start.checked_add(len);
        let first = u64::from(self.superblock.first_data_block);
        match end {
            Some(end) if start >= first && end <= self.superblock.blocks_count() => Ok(()),
            _ => Err(FormatError::corrupt(
                Structure::BlockMapping,
                loc,
                Problem::RunOutsideFilesystem { start, len },
            )
            .into()),
        }
    }
}

/// An inode that holds an extended attribute's value is not a file a caller may name.
pub(crate) fn refuse_ea_inode(inode: &Inode) -> Result<()> {
    if inode.has_flag(e4_format::inode::flags::EA_INODE) {
        return Err(FormatError::corrupt(
            Structure::Inode,
            Location::Inode(inode.ino),
            Problem::UnexpectedEaInodeFlag,
        )
        .into());
    }
    Ok(())
}

//! The `Filesystem` handle: its parts, opening an image, and what concerns the whole
//! filesystem (sync, fsync, unmount, the commit thread). `Filesystem` is `Send + Sync` and
//! every operation takes `&self`. Its parts ([`OpenFilesystem`]) sit behind an `Arc` it
//! shares with its commit thread only; it lends each layer below only the parts it needs
//! ([`CommitParts`], [`TxnIo`]); the operations are in `ops/`.

use std::ops::Deref;
use std::path::Path;
use std::sync::{Arc, OnceLock};

use e4_format::features::{feature_names, FeatureKind, IncompatFeatures, READABLE_INCOMPAT};
use e4_format::geometry::Geometry;
use e4_format::group_descriptor::GroupDescriptor;
use e4_format::inode::Inode;
use e4_format::superblock::{
    Superblock, SUPERBLOCK_MAGIC, SUPERBLOCK_MAGIC_OFFSET, SUPERBLOCK_OFFSET,
};
use e4_format::{FormatError, Location, MetadataBlock, Problem, Structure};
use e4_journal::{Journal, Recovery};
use parking_lot::Mutex;

use crate::buffer::store::BlockStore;
use crate::buffer::verifier::{BlockVerifier, DirectoryLayout};
use crate::dir::entry::DirFormat;
use crate::error::{Error, Result};
use crate::inode::cache::{InodeCache, InodeHandle};
use crate::inode::table::InodeTable;
use crate::io::device::{Device, FileDevice, MemoryDevice};
use crate::journal::log::{JournalLog, JournalStats};
use crate::journal::recovery;
use crate::journal::replayed_device::ReplayedDevice;
use crate::journal::JournalOnDisk;
use crate::names::dentry_cache::DentryCache;
use crate::space::caller::Caller;
use crate::space::descriptors::GroupDescriptors;
use crate::space::fixed_metadata::FixedMetadata;
use crate::space::Space;
use crate::txn::committer::{Committer, Next};
use crate::txn::txn_io::TxnIo;
use crate::txn::CommitParts;
use crate::txn::{write_back, Transactions, TxnHandle, SLOTS};
use crate::xattr::block_locks::XattrBlockLocks;

/// How to open a filesystem.
#[derive(Debug, Clone)]
pub struct OpenOptions {
    /// Verify metadata checksums (metadata_csum, gdt_csum) when blocks are first read.
    /// On by default; turning it off lets a damaged image be salvaged (read-only).
    pub verify_checksums: bool,
    /// Bytes of clean metadata the block cache may hold. Default 64 MiB. A directory leaf
    /// that creates have indexed (`dir/leaf_index.rs`) holds up to as much again beside
    /// it (its table is at most half full, four bytes a record).
    pub cache_bytes: usize,
    /// Open for writing. The image is marked "not clean" until [`Filesystem::unmount`].
    pub writable: bool,
    /// Commit the running transaction once this long has passed since the last commit
    /// (ext4's `commit=`, 5 s by default); zero turns interval commits off (commits then
    /// come only from pressure, [`Filesystem::sync`] and unmount). The filesystem's commit
    /// thread makes them, busy or idle.
    pub commit_interval: std::time::Duration,
    /// Who writes: decides whether writes may use the blocks kept back for the superuser
    /// (see [`Caller`]). An ordinary user by default; a tool acting for the user who runs
    /// it passes [`Caller::of_this_process`].
    pub caller: Caller,
    /// Replay a journal that needs recovery (on by default). Off, a read-only open reads
    /// the image as it is on disk, without the log, as the kernel's `norecovery` mount
    /// does, and says so in [`Filesystem::warnings`]; a writable open refuses, since
    /// writing over a log that was not replayed would lose what it holds.
    pub replay_journal: bool,
    /// With a journal, commit once the running transaction holds about this many changed
    /// metadata blocks, if that is below what the log allows (three quarters of half of
    /// it). `None`: the log decides. Smaller
    /// transactions commit more often and split large operations into more steps; tests
    /// use it to see on small images what only large volumes do otherwise.
    pub transaction_limit: Option<usize>,
    /// Commit on a thread of the filesystem's own (on by default): an operation that leaves
    /// the transaction past its threshold, or finds the commit interval passed, asks for a
    /// commit and goes on while the thread writes it out, and an idle filesystem commits
    /// on time. Off, operations commit in their own threads, at points the transactions'
    /// sizes decide — the same on every run, which a reproducible image (the journal's log
    /// keeps each transaction's blocks) and an enumeration of crash states need — and an
    /// idle filesystem commits only at `sync` or unmount.
    pub commit_thread: bool,
    /// On an image file, remember which ranges read as zeros (its holes at the open, less
    /// everything written since) and skip zeroing them when blocks are reserved
    /// ([`Filesystem::reserve_data`]): a fresh image from mkfs is almost all holes, and
    /// each punch skipped is a system call and a wait on the image file's lock, which data
    /// writes on other threads hold (`io/hole_map.rs`). Off by default: an old image's
    /// data regions cost a scan at the open and memory, for few punches saved.
    pub skip_zeroing_holes: bool,
}

impl Default for OpenOptions {
    fn default() -> Self {
        OpenOptions {
            verify_checksums: true,
            cache_bytes: 64 << 20,
            writable: false,
            commit_interval: std::time::Duration::from_secs(5),
            caller: Caller::ordinary(),
            replay_journal: true,
            transaction_limit: None,
            commit_thread: true,
            skip_zeroing_holes: false,
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

/// An open ext2/3/4 filesystem. Open for writing, it has a commit thread (see
/// `txn/committer.rs`), which it stops, and commits, before it lets go of the image.
pub struct Filesystem {
    open: Arc<OpenFilesystem>,
    /// The commit thread, while it runs (none when read-only, or if it could not start).
    committer: Option<Committer>,
}

/// A handle is its parts to every operation: `fs.store`, `fs.writer`. It derefs to them
/// rather than naming them at each of the hundreds of places they are used, as they are
/// the handle's own, shared with its commit thread alone.
impl Deref for Filesystem {
    type Target = OpenFilesystem;

    fn deref(&self) -> &OpenFilesystem {
        &self.open
    }
}

/// An open filesystem's parts: a composition of owned parts, each with its own state and
/// locks, shared by its [`Filesystem`] handle and its commit thread. `pub` only so that the
/// handle may deref to it: the module is private, and nothing outside the crate can name
/// it or reach a field of it.
pub struct OpenFilesystem {
    /// The device, the metadata cache and the verifier.
    pub(crate) store: BlockStore,
    superblock: Superblock,
    pub(crate) geometry: Geometry,
    /// The group descriptors as they are now (commits change counts and flags).
    pub(crate) descriptors: GroupDescriptors,
    pub(crate) inode_table: InodeTable,
    pub(crate) inodes: InodeCache,
    pub(crate) dentries: DentryCache,
    /// Why the filesystem may only be read, if it may not be written.
    read_only_reason: Option<String>,
    /// What was damaged but could be read around (see [`Filesystem::warnings`]).
    warnings: Vec<String>,
    /// Allocators and transactions, when open for writing.
    pub(crate) writer: Option<Writer>,
    /// What opening did to the journal: a recovery, in place or (read-only) in memory.
    journal_note: Option<String>,
    /// The journal as the open found it on disk, before any recovery, or why it cannot be
    /// used (a read-only open goes on without it).
    journal_on_disk: std::result::Result<Option<JournalOnDisk>, Error>,
    /// Where the fixed metadata lies, made at its first use (a journal's check at open, a
    /// file's first mapped run).
    fixed_metadata: OnceLock<FixedMetadata>,
}

/// What a filesystem open for writing has besides its reader.
pub(crate) struct Writer {
    pub space: Space,
    pub txns: Transactions,
    /// Serialises renames that move something to another directory (as the kernel's
    /// `s_vfs_rename_mutex` does), so two of them cannot make a directory its own ancestor.
    pub rename_lock: Mutex<()>,
    /// Locks for xattr blocks' reference counts (see [`XattrBlockLocks`]).
    pub xattr_block_locks: XattrBlockLocks,
    /// The log every commit goes through, when the filesystem has a journal.
    pub journal: Option<JournalLog>,
}

impl Writer {
    /// Joins the running transaction, declaring that the operation may dirty up to
    /// `credits` metadata blocks ([`crate::io::credits`]).
    /// `fs` is the filesystem this writer belongs to.
    pub(crate) fn begin<'a>(&'a self, fs: &'a Filesystem, credits: u32) -> Result<TxnHandle<'a>> {
        self.txns.begin(&fs.commit_parts(self), credits, 0)
    }

    /// [`Self::begin`] for a step of an operation in steps (`ops/steps.rs`) or a piece of a
    /// large write: with log room for the whole step, which declares its credits as it goes.
    pub(crate) fn begin_step<'a>(
        &'a self,
        fs: &'a Filesystem,
        credits: u32,
    ) -> Result<TxnHandle<'a>> {
        self.begin_with_room(fs, credits, fs.step_credits().unwrap_or(0))
    }

    /// [`Self::begin`] with log room for at least `room` credits, for an operation that
    /// will declare that many as it runs and cannot stop part-way for room.
    pub(crate) fn begin_with_room<'a>(
        &'a self,
        fs: &'a Filesystem,
        credits: u32,
        room: u64,
    ) -> Result<TxnHandle<'a>> {
        self.txns.begin(&fs.commit_parts(self), credits, room)
    }

    /// Block access inside the transaction `txn` joined.
    pub(crate) fn io<'a>(&'a self, fs: &'a Filesystem, txn: &'a TxnHandle<'a>) -> TxnIo<'a> {
        TxnIo::new(&fs.store, &self.space, &self.txns, txn)
    }
}

impl Drop for Filesystem {
    fn drop(&mut self) {
        self.stop_committer();
        if let Some(w) = &self.writer {
            if w.txns.is_open() {
                // Nowhere to report a failure: the next e2fsck will.
                let _ = self.write_back_and_close();
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
    /// Opens the image file or block device at `path`, locked for as long as the filesystem
    /// is open: a writer has it to itself, and an image another e4 writes or the kernel
    /// uses is refused with [`Error::InUse`] (the rules: docs/WRITE-PATH.md, "One writer per
    /// image").
    pub fn open(path: impl AsRef<Path>, options: OpenOptions) -> Result<Self> {
        let path = path.as_ref();
        let mut device = FileDevice::open(path, options.writable)?;
        if options.skip_zeroing_holes {
            device = device.tracking_holes()?;
        }
        Self::open_device(Arc::new(device), options)
    }

    /// Opens an image held in memory.
    pub fn open_bytes(bytes: Vec<u8>, options: OpenOptions) -> Result<Self> {
        Self::open_device(Arc::new(MemoryDevice::new(bytes)), options)
    }

    /// Opens a filesystem on any device. A journal that needs recovery is recovered first:
    /// in place for writing (as the kernel's mount and `e2fsck` do), in memory for reading
    /// (the image untouched; [`Filesystem::journal_note`] says so).
    pub fn open_device(device: Arc<dyn Device>, options: OpenOptions) -> Result<Self> {
        let commit_thread = options.commit_thread;
        let open = OpenFilesystem::open_recovered(device, options, None, None)?;
        let mut fs = Filesystem {
            open: Arc::new(open),
            committer: None,
        };
        if let Some(w) = &fs.writer {
            // The image says "being written" before anything else changes.
            write_back::write_superblock(&fs.store, &w.space.superblock.encode(&fs.descriptors))?;
            fs.store.flush("after marking the filesystem in use")?;
            if fs.superblock.last_orphan != 0 {
                fs.clean_up_orphans(fs.superblock.last_orphan)?;
            }
        }
        if commit_thread {
            fs.start_committer();
        }
        Ok(fs)
    }
}

impl OpenFilesystem {
    /// The open, once any recovery is done (`note` says what it did, `on_disk` what the
    /// journal held before it).
    fn open_recovered(
        device: Arc<dyn Device>,
        options: OpenOptions,
        note: Option<String>,
        on_disk: Option<JournalOnDisk>,
    ) -> Result<Self> {
        let (superblock, descriptors_after, mut warnings) = read_superblock(device.as_ref())?;
        let incompat = superblock.incompat();
        let unsupported = incompat.bits() & !READABLE_INCOMPAT.bits();
        if unsupported != 0 {
            return Err(FormatError::Incompatible(
                feature_names(FeatureKind::Incompat, unsupported).join(", "),
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
        let dir_format = DirFormat::from_superblock(&superblock);
        let directories = DirectoryLayout {
            filetype: dir_format.filetype,
            metadata_csum: dir_format.metadata_csum,
            max_index_levels: dir_format.max_index_levels(),
        };
        let verifier = BlockVerifier::new(csum_seed, directories);
        let store = BlockStore::new(device, block_size, blocks, cache_blocks.max(64), verifier);
        let geometry = Geometry::with_descriptors_after(&superblock, descriptors_after);
        let descriptors = GroupDescriptors::read(
            &store,
            &superblock,
            &geometry,
            options.verify_checksums,
            &mut warnings,
        )?;
        let inode_table =
            InodeTable::new(&geometry, &descriptors, superblock.inode_size() as usize)?;
        let mut read_only_reason = read_only_reason;
        if !warnings.is_empty() && read_only_reason.is_none() {
            read_only_reason = Some(warnings.join("; "));
        }
        if !options.verify_checksums && read_only_reason.is_none() {
            read_only_reason = Some("checksums are not verified".into());
        }
        if options.writable {
            if let Some(reason) = &read_only_reason {
                return Err(Error::ReadOnly(format!(
                    "the filesystem can only be read: {reason}"
                )));
            }
        }
        let inodes = InodeCache::new(&geometry);
        let mut fs = OpenFilesystem {
            store,
            geometry,
            superblock,
            descriptors,
            inode_table,
            inodes,
            dentries: DentryCache::new(),
            read_only_reason,
            warnings,
            writer: None,
            journal_note: note,
            journal_on_disk: Ok(on_disk),
            fixed_metadata: OnceLock::new(),
        };
        let journal = crate::journal::journal_inode(&fs.superblock).and_then(|ino| {
            ino.map(|ino| {
                let inode = fs.read_inode_record(ino)?;
                let journal = crate::journal::locate(&fs.store, &fs.superblock, &inode)?;
                fs.check_journal_clear_of_metadata(ino, &journal)?;
                Ok(journal)
            })
            .transpose()
        });
        let journal = match journal {
            Ok(journal) => journal,
            // A reader goes on without the journal (its state is the image as it is).
            Err(e) if !options.writable => {
                fs.warnings.push(format!("the journal cannot be used: {e}"));
                fs.journal_on_disk = Err(e);
                None
            }
            Err(e) => return Err(e),
        };
        let found = matches!(fs.journal_on_disk, Ok(Some(_)));
        if let Some(journal) = journal.as_ref().filter(|_| !found) {
            let recovery_wanted = fs.superblock.incompat().contains(IncompatFeatures::RECOVER);
            let recovery = journal.recover(
                &crate::journal::device_blocks::DeviceBlocks {
                    device: fs.store.device().as_ref(),
                    block_size: u64::from(fs.store.block_size()),
                },
                fs.geometry.blocks(),
            );
            let recovery = match recovery {
                Ok(recovery) => recovery,
                // A reader goes on with the image as it is on disk, and says so; a writer
                // must not write over a log it cannot replay.
                Err(e) if !options.writable => {
                    let e = Error::from(e);
                    fs.warnings.push(format!(
                        "the journal's log cannot be replayed ({e}); read as it is on disk"
                    ));
                    fs.journal_on_disk = Err(e);
                    return Ok(fs);
                }
                Err(e) => return Err(e.into()),
            };
            let on_disk = JournalOnDisk {
                journal: journal.clone(),
                recovery: recovery.clone(),
                recovery_wanted,
            };
            if !journal.needs_recovery() {
                fs.journal_on_disk = Ok(Some(on_disk));
            } else if !options.replay_journal {
                if options.writable {
                    return Err(Error::ReadOnly(
                        "the journal needs recovery and replaying it was turned off; \
                         open read-only to read the image without it"
                            .into(),
                    ));
                }
                fs.warnings.push(format!(
                    "the journal needs recovery ({} transactions) but was not replayed: \
                     the image is read as it is on disk, without them",
                    recovery.transactions()
                ));
                fs.journal_on_disk = Ok(Some(on_disk));
            } else {
                return Self::recover_then_open(fs, options, journal, recovery, on_disk);
            }
        }
        if options.writable {
            if let Some(j) = journal.as_ref().filter(|j| j.recorded_error().is_some()) {
                let line = recovery::record_journal_error(fs.store.device().as_ref(), j)?;
                return Err(Error::ReadOnly(format!("{line}; run e2fsck")));
            }
            // The journal's blocks are the filesystem's, never a file's.
            let journal_runs = journal
                .as_ref()
                .map(|j| j.layout().runs().to_vec())
                .unwrap_or_default();
            let journal = journal
                .map(|j| JournalLog::start(&fs.store, &j, &fs.superblock))
                .transpose()?;
            let space = Space::load(
                &fs.store,
                &fs.superblock,
                &fs.geometry,
                &fs.descriptors.snapshot(),
                &journal_runs,
                &options.caller,
                SLOTS,
            )?;
            if journal.is_some() {
                space.superblock.set_needs_recovery();
            }
            // With a journal a transaction must fit its log: past three quarters of what
            // one transaction may log (half the log) an operation asks for a commit, and
            // past all of it commits itself; the rest of the log is for what operations
            // still running add before the commit stops them, and the log's descriptor,
            // revoke and commit blocks.
            let log_limit = journal.as_ref().map(|j| {
                let limit = usize::try_from(j.max_transaction() * 3 / 4).unwrap_or(usize::MAX);
                options
                    .transaction_limit
                    .map_or(limit, |l| limit.min(l.max(1)))
            });
            // What operations in flight may add beyond that ([`crate::txn::log_room`]):
            // three quarters of the other half; the last eighth of the log is for the
            // descriptor and revoke blocks, and credits declared inside handles when the
            // room had none left.
            let log_room = journal.as_ref().map(|j| j.max_transaction() * 3 / 4);
            fs.writer = Some(Writer {
                space,
                txns: Transactions::new(&fs.geometry, options.commit_interval, log_limit, log_room),
                rename_lock: Mutex::new(()),
                xattr_block_locks: XattrBlockLocks::default(),
                journal,
            });
        }
        Ok(fs)
    }

    /// Refuses a journal (inode `ino`) whose blocks overlap the fixed metadata: its log
    /// would be written over the descriptors, a bitmap or the inode table.
    fn check_journal_clear_of_metadata(&self, ino: u32, journal: &Journal) -> Result<()> {
        journal
            .layout()
            .runs()
            .iter()
            .try_for_each(|run| self.check_clear_of_metadata(run.physical, run.len, ino))
    }

    /// The fixed metadata's runs ([`FixedMetadata`]), made at the first call.
    fn fixed_metadata(&self) -> &FixedMetadata {
        self.fixed_metadata
            .get_or_init(|| FixedMetadata::new(&self.geometry, &self.descriptors.snapshot()))
    }

    /// Refuses a run of `len` blocks from `start` that inode `ino`'s mapping names on the
    /// fixed metadata.
    fn check_clear_of_metadata(&self, start: u64, len: u64, ino: u32) -> Result<()> {
        match self.fixed_metadata().first_in(start, len) {
            Some(block) => Err(FormatError::corrupt(
                Structure::BlockMapping,
                Location::Inode(ino),
                Problem::RunInMetadata { start, len, block },
            )
            .into()),
            None => Ok(()),
        }
    }

    /// Recovers the journal `fs` found needing it, then opens again: in place for writing,
    /// through an in-memory overlay for reading. A log the superblock does not ask to replay
    /// is dropped, as the kernel's mount drops it (`jbd2_journal_wipe`).
    fn recover_then_open(
        fs: OpenFilesystem,
        options: OpenOptions,
        journal: &Journal,
        recovery: Recovery,
        on_disk: JournalOnDisk,
    ) -> Result<Self> {
        let device = fs.store.device();
        drop(fs);
        if !on_disk.recovery_wanted {
            let note = "the journal held transactions but the filesystem did not need recovery; they were ignored".to_string();
            return match options.writable {
                true => {
                    recovery::empty_journal(device.as_ref(), journal, &recovery)?;
                    Self::open_recovered(device, options, Some(note), Some(on_disk))
                }
                false => Self::open_recovered(
                    Arc::new(ReplayedDevice::new(device, journal, Default::default())),
                    options,
                    Some(note),
                    Some(on_disk),
                ),
            };
        }
        let summary = format!(
            "{} journal transactions ({} blocks)",
            recovery.transactions(),
            recovery.replay.len()
        );
        if options.writable {
            let damage = recovery::replay_in_place(device.as_ref(), journal, &recovery)?;
            if let Some(damage) = damage {
                return Err(Error::ReadOnly(format!(
                    "the journal was replayed but {damage}; run e2fsck"
                )));
            }
            Self::open_recovered(
                device,
                options,
                Some(format!("recovered {summary}")),
                Some(on_disk),
            )
        } else {
            let mut note = format!("read as recovery would leave it: {summary} replayed in memory");
            if let Some(damage) = recovery::damage_line(journal, &recovery) {
                note.push_str(&format!("; {damage}"));
            }
            Self::open_recovered(
                Arc::new(ReplayedDevice::new(device, journal, recovery)),
                options,
                Some(note),
                Some(on_disk),
            )
        }
    }

    /// Reads and parses inode `ino` from the disk (or the cached table block), whatever it
    /// holds.
    pub(crate) fn read_inode_record(&self, ino: u32) -> Result<Inode> {
        let location = self.geometry.inode_location(ino);
        let unwritten = location.is_some_and(|l| {
            self.descriptors
                .past_itable_used(l.group, l.index, self.geometry.inodes_per_group())
        });
        self.inode_table.read_record(&self.store, ino, unwritten)
    }

    /// The parts a commit works on, lent to it.
    pub(crate) fn commit_parts<'a>(&'a self, writer: &'a Writer) -> CommitParts<'a> {
        CommitParts {
            store: &self.store,
            superblock: &self.superblock,
            geometry: &self.geometry,
            descriptors: &self.descriptors,
            inode_table: &self.inode_table,
            inodes: &self.inodes,
            space: &writer.space,
            journal: writer.journal.as_ref(),
        }
    }

    /// The commit thread's visit: a commit if an operation asked for one and the running
    /// transaction is still past its threshold, or if the commit interval has passed and
    /// the transaction holds changes. Says how long to sleep next: until the interval
    /// after the last commit, or a whole interval when that has passed with nothing to
    /// commit; `Stop` once the filesystem takes no more changes.
    fn commit_for_the_thread(&self) -> Next {
        let Some(w) = self.writer.as_ref().filter(|w| w.txns.is_open()) else {
            return Next::Stop;
        };
        let parts = self.commit_parts(w);
        // An interval passed counts as pressure does (operations leave the interval to
        // this thread).
        let wanted = w
            .txns
            .wants_commit_with(&self.store, &self.inodes, &w.space)
            || w.txns.interval_passed();
        if wanted && w.txns.has_changes(&parts) {
            if let Err(e) = w.txns.commit_unwaited(&parts) {
                // The filesystem now refuses changes; the next caller reports why.
                w.txns.keep_thread_failure(e);
                return Next::Stop;
            }
        }
        Next::Wait(w.txns.commit_interval().map(|i| {
            let since = w.txns.since_last_commit();
            if since >= i {
                i
            } else {
                i - since
            }
        }))
    }
}

impl Filesystem {
    pub fn superblock(&self) -> &Superblock {
        &self.superblock
    }

    /// The group descriptors as they stand (a copy: write-back changes them).
    pub fn group_descriptors(&self) -> Vec<GroupDescriptor> {
        self.descriptors.snapshot()
    }

    /// The layout arithmetic of this filesystem.
    pub fn geometry(&self) -> &Geometry {
        &self.geometry
    }

    /// Writes everything changed so far to the image (a commit of the running transaction).
    pub fn sync(&self) -> Result<()> {
        match &self.writer {
            Some(w) => w.txns.commit(&self.commit_parts(w)),
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
        let running = w.txns.running_txn();
        w.txns.commit_through(
            &self.commit_parts(w),
            if clean { running - 1 } else { running },
        )
    }

    /// Writes everything back, gives back every reservation and marks the filesystem clean.
    /// Dropping a writable `Filesystem` does the same but cannot report a failure.
    pub fn unmount(mut self) -> Result<()> {
        self.stop_committer();
        match &self.writer {
            // A failed commit left the image needing e2fsck: say so.
            Some(w) => w
                .txns
                .check_open()
                .and_then(|()| self.write_back_and_close()),
            None => Ok(()),
        }
    }

    /// What opening did to the journal, if anything: a recovery in place, or (read-only)
    /// the image read as recovery would leave it, untouched.
    pub fn journal_note(&self) -> Option<&str> {
        self.journal_note.as_deref()
    }

    /// The journal as this open found it on disk, before any recovery: its superblock and
    /// what its log held (`None` without a journal). A journal that cannot be used (an
    /// external one, a damaged superblock) fails a writable open; a read-only open goes on
    /// without it, and this says why. `e4 journal` prints it.
    pub fn journal_on_disk(&self) -> std::result::Result<Option<&JournalOnDisk>, &Error> {
        self.journal_on_disk.as_ref().map(Option::as_ref)
    }

    /// The journal's work so far (`None` without a journal, or read-only).
    pub fn journal_stats(&self) -> Option<JournalStats> {
        let writer = self.writer.as_ref()?;
        let (room_waits, room_overdrafts) = writer.txns.room_stats();
        writer.journal.as_ref().map(|j| JournalStats {
            room_waits,
            room_overdrafts,
            ..j.stats()
        })
    }

    /// Makes the allocation of blocks or an inode after the next `succeed` fail as if the
    /// filesystem were full, and every one after it; `None` ends that (fault-injection
    /// tests).
    #[cfg(feature = "testing")]
    pub fn fail_allocations_after(&self, succeed: Option<u64>) {
        if let Some(w) = &self.writer {
            w.space.faults.arm(succeed);
        }
    }

    /// Allocations of blocks or inodes asked for so far (a dry run counts an operation's
    /// allocation points).
    #[cfg(feature = "testing")]
    pub fn allocations_seen(&self) -> u64 {
        self.writer.as_ref().map_or(0, |w| w.space.faults.seen())
    }

    /// The commits so far that wrote more metadata blocks than their transactions'
    /// handles declared (none, unless an operation under-declares its credits).
    #[cfg(feature = "testing")]
    pub fn credit_overruns(&self) -> Vec<crate::testing::CreditOverrun> {
        self.writer
            .as_ref()
            .map_or_else(Vec::new, |w| w.txns.credit_overruns())
    }

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

    /// Damage found while working, since the last call, one line each: a group whose block
    /// or inode bitmap disagrees with its descriptor, or shows its own metadata free, and
    /// so is not used for the rest of this open (e4-alloc's `group_damage`: nothing is
    /// allocated there, frees into it leave the blocks in use, nothing of it is written
    /// back). Each group is said once; a caller shows these as it shows [`Self::warnings`].
    pub fn take_new_warnings(&self) -> Vec<String> {
        let Some(w) = &self.writer else {
            return Vec::new();
        };
        let blocks = w.space.blocks.take_damage();
        let inodes = w.space.inodes.take_damage();
        blocks
            .iter()
            .chain(&inodes)
            .map(|damage| damage.to_string())
            .collect()
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
        let handle = self.inode_handle(ino)?;
        let state = handle.read(&self.inodes);
        refuse_ea_inode(&state.inode)?;
        // The caller sees the times: the next change must show against them.
        state.show_times();
        Ok(state.inode.clone())
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

    /// Checks a run of physical blocks inode `ino`'s mapping names before it is read as the
    /// inode's: inside the filesystem, and, for a file (not a reserved inode: the resize
    /// inode's blocks are the reserved GDT blocks), clear of the fixed metadata, as the
    /// kernel checks every mapped run (a damaged mapping would show the inode table as a
    /// file's data). Writes check again in their transaction, against the journal's blocks
    /// too (`MetaIo::check_mapped`).
    pub(crate) fn check_mapped_run(&self, start: u64, len: u64, ino: u32) -> Result<()> {
        if !self.geometry.contains_run(start, len) {
            return Err(FormatError::corrupt(
                Structure::BlockMapping,
                Location::Inode(ino),
                Problem::RunOutsideFilesystem { start, len },
            )
            .into());
        }
        if ino < self.superblock.first_ino() {
            return Ok(());
        }
        self.check_clear_of_metadata(start, len, ino)
    }

    /// Asks for a commit if the operation that just ended left enough behind (dirty
    /// blocks, pending frees, the commit interval passed): the commit thread makes it, or
    /// this thread when far past the threshold or without a commit thread
    /// ([`Transactions::commit_for_pressure`]).
    pub(crate) fn commit_if_needed(&self) -> Result<()> {
        match &self.writer {
            Some(w)
                if w.txns
                    .wants_commit_with(&self.store, &self.inodes, &w.space) =>
            {
                w.txns
                    .commit_for_pressure(&self.commit_parts(w), &self.inodes)
            }
            _ => Ok(()),
        }
    }

    /// The unmount: commits, frees the orphans nobody can close any more, gives back every
    /// reservation, commits what that changed, and marks the filesystem clean. After it the
    /// filesystem refuses changes.
    fn write_back_and_close(&self) -> Result<()> {
        let Some(w) = &self.writer else {
            return Ok(());
        };
        let parts = self.commit_parts(w);
        w.txns.commit(&parts)?;
        for ino in w.space.orphans.chain() {
            // Whoever had it open can no longer close it. One with links is a truncate in
            // steps that failed part-way.
            self.inode_handle(ino)?.lock(&self.inodes).open_count = 0;
            self.finish_orphan(ino)?;
        }
        {
            let _closed = w.txns.close_gate();
            for handle in self.inodes.all() {
                let mut state = handle.lock(&self.inodes);
                w.space.blocks.release_window(&mut state.window, 0);
            }
            w.space.blocks.release_small_file_windows();
        }
        w.txns.commit(&parts)?;
        w.txns.write_clean_superblock(&parts)
    }

    /// Starts the commit thread ([`Committer`]), which shares the parts; it waits first
    /// for the commit interval or a request. Without it (no thread to be had) operations
    /// commit for themselves.
    fn start_committer(&mut self) {
        let Some(w) = &self.writer else { return };
        let open = Arc::clone(&self.open);
        self.committer = Committer::start(
            Arc::clone(w.txns.commit_requests()),
            w.txns.commit_interval(),
            move || open.commit_for_the_thread(),
        );
    }

    /// Stops the commit thread, once its commit, if it is making one, has ended.
    fn stop_committer(&mut self) {
        if let Some(committer) = self.committer.take() {
            committer.stop();
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

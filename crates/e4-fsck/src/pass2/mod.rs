//! Pass 2, "Checking directory structure": every directory block, in parallel, in
//! physical block order (as e2fsck sorts its list). Each block's entries are parsed
//! (rec_len, name_len), `.` and `..` checked in the first block, every entry's target
//! checked against what pass 1 found (in range, in use, not `.` or the root again, file
//! type matching the mode), names checked for `/` and NUL and for duplicates, leaf
//! checksums verified, and each reference counted on an atomic counter for pass 4.
//! Entries naming directories are returned for pass 3.

mod casefold_hash;
mod htree;
mod names;

use std::collections::BTreeSet;
use std::sync::Mutex;

use rayon::prelude::*;

use e4_format::casefold::ENCODING_STRICT_MODE;
use e4_format::checksum::inode_csum_seed;
use e4_format::dir_entry::{
    file_type, has_tail, hashed_entry_size, DirEntry, DirEntryIter, DirLeafBlock, TAIL_SIZE,
};
use e4_format::features::IncompatFeatures;
use e4_format::inline_data::inline_dir_parent;
use e4_format::inode::ROOT_INO;
use e4_format::{FormatError, MetadataBlock};

use crate::pass2::casefold_hash::compared_name;
use crate::pass2::htree::{HtreeLayout, LeafRange};
use crate::pass2::names::DirNames;
use crate::report::problem::{Location, ProblemCode};
use crate::report::progress::{PassMeter, Progress};
use crate::state::context::Context;
use crate::state::directories::{
    DirBlock, Directories, Directory, InlineContents, Pass2Result, SubdirLink,
};
use crate::state::encryption_policies::EncryptionPolicy;
use crate::state::inode_state::InodeKind;

/// Byte offset of the name in a directory entry (after inode, rec_len, name_len, type).
const NAME_OFFSET: usize = 8;

/// One directory block to check.
struct BlockTask<'a> {
    dir: &'a Directory,
    logical: u32,
    physical: u64,
    htree: Option<&'a HtreeLayout>,
}

/// Directory blocks a worker checks before another may take the rest of its share. Blocks
/// cost unequally (a leaf of long names in a large hash-tree directory is hashed name by
/// name, a small directory's block holds a few entries), and costly ones lie together in
/// physical order; without a cap, rayon left a run of them to one of two workers: on the
/// fsck benchmark's full mixed image, 3,557 million instructions against 2,619 million
/// (callgrind), pass 2 1.56x faster at two threads than at one.
const BLOCKS_PER_TASK: usize = 256;

/// Runs pass 2.
/// Takes the directories' blocks (checked and dropped here; passes 3 on read the records).
pub fn run(ctx: &Context, dirs: &mut Directories, progress: Option<&Progress>) -> Pass2Result {
    // Only the htree directories', by inode number: most directories have none.
    let layouts: Vec<(u32, HtreeLayout)> = dirs
        .records()
        .par_iter()
        .filter(|dir| dir.htree())
        .map(|dir| {
            (
                dir.ino,
                HtreeLayout::check(ctx, dir, dirs.blocks_of(dir.ino)),
            )
        })
        .collect();
    let layout_of = |ino: u32| {
        layouts
            .binary_search_by_key(&ino, |&(dir, _)| dir)
            .ok()
            .map(|i| &layouts[i].1)
    };
    // In physical order, as e2fsck sorts its list (each block read once, near the last),
    // then by directory and logical block. Sorted in place rather than through a list of
    // tasks or of indexes (32 or 4 bytes a block).
    let mut blocks = dirs.take_blocks();
    blocks.par_sort_unstable_by_key(|b| (b.physical, b.ino, b.logical));
    let dirs = &*dirs;
    // Read once here, so that no entry takes a lock (damage only: usually empty).
    let unreadable = unreadable_bad_inodes(ctx);
    let meter = PassMeter::start(progress, 2, blocks.len() as u64);
    let check = |block: &DirBlock| {
        meter.advance(1);
        // Every block's directory is in the list: both come from one pass 1 record.
        let Some(dir) = dirs.record(block.ino) else {
            return Vec::new();
        };
        let task = BlockTask {
            dir,
            logical: block.logical,
            physical: block.physical,
            htree: layout_of(block.ino),
        };
        check_block(ctx, &task, &unreadable)
    };
    // One vector sized for a link to every directory, which a healthy tree has: collected
    // per worker and joined, the links took twice their size at the end of the pass.
    let found = Mutex::new(Vec::with_capacity(dirs.records().len()));
    let keep = |links: Vec<SubdirLink>| {
        if !links.is_empty() {
            found
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .extend(links);
        }
    };
    blocks
        .par_iter()
        .with_max_len(BLOCKS_PER_TASK)
        .for_each(|block| keep(check(block)));
    drop(blocks);
    dirs.inline().par_iter().for_each(|(ino, contents)| {
        if let Some(dir) = dirs.record(*ino) {
            keep(check_inline(ctx, dir, contents, &unreadable));
        }
    });
    let mut subdir_links = found.into_inner().unwrap_or_else(|e| e.into_inner());
    subdir_links.par_sort_unstable();
    layouts
        .par_iter()
        .for_each(|(ino, layout)| layout.check_node_hashes(ctx, *ino));
    for (ino, layout) in &layouts {
        if layout.is_invalid() {
            ctx.report(
                ProblemCode::PR_2_HTREE_CLEAR,
                Location::Inode(*ino),
                format!("invalid HTREE directory inode {ino}"),
            );
        }
    }
    Pass2Result { subdir_links }
}

/// Checks one directory block.
fn check_block(ctx: &Context, task: &BlockTask<'_>, unreadable: &BTreeSet<u32>) -> Vec<SubdirLink> {
    let dir = task.dir;
    let bs = ctx.block_size() as usize;
    let bytes = match ctx.image.read_blocks(task.physical, 1, ctx.block_size()) {
        Ok(bytes) => bytes,
        Err(e) => {
            ctx.report(
                ProblemCode::PR_2_DIR_CORRUPTED,
                Location::DirEntry {
                    dir: dir.ino,
                    logical: task.logical,
                    offset: 0,
                },
                format!(
                    "directory inode {} block {} cannot be read: {e}",
                    dir.ino, task.physical
                ),
            );
            return Vec::new();
        }
    };
    let index_block = task.htree.is_some_and(|h| h.is_index_block(task.logical));
    let csum = ctx
        .csum_seed
        .map(|s| inode_csum_seed(s, dir.ino, dir.generation));
    let tail = csum.is_some() && !index_block && has_tail(&bytes);
    let region = if tail {
        &bytes[..bs - TAIL_SIZE]
    } else {
        &bytes[..]
    };
    let range = task.htree.and_then(|h| h.leaf_range(task.logical));
    let mut entries = EntryChecker::new(ctx, dir, task.logical, task.physical, range, unreadable);
    entries.check_region(region, 0, task.logical == 0);
    if let Some(seed) = csum.filter(|_| !index_block) {
        let loc = Location::DirEntry {
            dir: dir.ino,
            logical: task.logical,
            offset: 0,
        };
        if !tail {
            ctx.report(
                ProblemCode::PR_2_LEAF_NODE_MISSING_CSUM,
                loc,
                format!(
                    "directory inode {}, block #{}: directory has no checksum",
                    dir.ino, task.logical
                ),
            );
        } else if let Err(FormatError::Checksum { .. }) = DirLeafBlock::verify(
            &bytes,
            seed,
            e4_format::Location::InodeBlock {
                inode: dir.ino,
                block: task.physical,
            },
        ) {
            if !entries.corrupted {
                ctx.report(
                    ProblemCode::PR_2_LEAF_NODE_ONLY_CSUM_INVALID,
                    loc,
                    format!(
                        "directory inode {}, block #{}: directory passes checks but fails checksum",
                        dir.ino, task.logical
                    ),
                );
            }
        }
    }
    let problem = entries.finish();
    if let Some(layout) = task.htree {
        if let Some(code) = problem {
            layout.note(code);
        }
        if range.is_some() {
            layout.record_leaf_hashes(task.logical, entries.hash_bounds);
        }
    }
    entries.links
}

/// Checks an inline directory: the parent in `i_block[0..4]`, then entries in the rest of
/// `i_block` and in `system.data`.
fn check_inline(
    ctx: &Context,
    dir: &Directory,
    (i_block, system_data): &InlineContents,
    unreadable: &BTreeSet<u32>,
) -> Vec<SubdirLink> {
    let mut block = [0u8; 60];
    block.copy_from_slice(&i_block[..60]);
    let parent = inline_dir_parent(&block);
    // The inline form has no "." entry and stores ".." as the parent number.
    ctx.inodes.add_ref(dir.ino);
    ctx.inodes.set_dotdot(dir.ino, parent);
    if parent != 0 {
        ctx.inodes.add_ref(parent);
    }
    let mut entries = EntryChecker::new(ctx, dir, 0, 0, None, unreadable);
    entries.check_region(&block[4..], 4, false);
    if !system_data.is_empty() {
        entries.check_region(system_data, 60, false);
    }
    entries.links
}

/// The fscrypt cipher block: an encrypted name is at least this long
/// (`EXT4_CRYPTO_BLOCK_SIZE`).
const CIPHER_BLOCK_SIZE: usize = 16;

/// e2fsck's `needs_encryption`: an entry's file type when it has one, else the mode of
/// the inode it names, says whether the file must be encrypted in an encrypted
/// directory (regular files, directories and symlinks).
fn needs_encryption(entry_type: u8, kind: InodeKind) -> bool {
    if entry_type != file_type::UNKNOWN {
        return matches!(
            entry_type,
            file_type::REGULAR | file_type::DIRECTORY | file_type::SYMLINK
        );
    }
    matches!(
        kind,
        InodeKind::Regular | InodeKind::Directory | InodeKind::Symlink
    )
}

/// Checks the entries of one block (or inline region) of one directory.
struct EntryChecker<'a, 'r> {
    ctx: &'a Context,
    dir: &'a Directory,
    logical: u32,
    physical: u64,
    htree_range: Option<LeafRange>,
    /// The directory's encryption policy, when it is encrypted (its names are then
    /// ciphertext).
    encryption: Option<EncryptionPolicy>,
    /// A casefolded directory: the rehash that follows a duplicate found in it compares
    /// names folded.
    casefold: bool,
    /// A casefolded directory under the encoding's strict mode (e2fsck's `cf_dir`): its
    /// names must be UTF-8 and are compared folded.
    strict_casefold: bool,
    /// A casefolded directory with an encryption policy (e2fsck's `hash_in_dirent`):
    /// every entry but `.` and `..` keeps its name's hashes after the name, and its
    /// `rec_len` must hold them.
    hashes_in_entries: bool,
    /// Inodes `process_bad_inode` cannot read again ([`unreadable_bad_inodes`]).
    unreadable: &'a BTreeSet<u32>,
    names: DirNames<'r>,
    links: Vec<SubdirLink>,
    /// The entries stopped parsing: e2fsck then salvages the block rather than calling
    /// its checksum the only problem.
    corrupted: bool,
    hash_bounds: Option<(u32, u32)>,
}

impl<'a, 'r> EntryChecker<'a, 'r> {
    fn new(
        ctx: &'a Context,
        dir: &'a Directory,
        logical: u32,
        physical: u64,
        htree_range: Option<LeafRange>,
        unreadable: &'a BTreeSet<u32>,
    ) -> Self {
        let encryption = ctx.encryption.of(dir.ino);
        EntryChecker {
            ctx,
            dir,
            logical,
            physical,
            htree_range,
            hashes_in_entries: dir.casefold() && encryption.is_some(),
            encryption,
            casefold: dir.casefold(),
            strict_casefold: dir.casefold() && ctx.sb.encoding_flags & ENCODING_STRICT_MODE != 0,
            unreadable,
            names: DirNames::new(),
            links: Vec::new(),
            corrupted: false,
            hash_bounds: None,
        }
    }

    fn report(&mut self, code: ProblemCode, offset: usize, message: String) {
        self.corrupted |= code == ProblemCode::PR_2_DIR_CORRUPTED;
        self.ctx.report(
            code,
            Location::DirEntry {
                dir: self.dir.ino,
                logical: self.logical,
                offset: offset as u32,
            },
            message,
        );
    }

    /// Checks the entries of `region`, which starts at byte `base` of the block; `first`
    /// says whether it begins the directory (so starts with `.` and `..`).
    fn check_region(&mut self, region: &'r [u8], base: usize, first: bool) {
        let ctx = self.ctx;
        let ino = self.dir.ino;
        let filetype = ctx.sb.incompat().contains(IncompatFeatures::FILETYPE);
        let loc = e4_format::Location::InodeBlock {
            inode: ino,
            block: self.physical,
        };
        let bs = ctx.block_size() as usize;
        let mut offset = base;
        // libext2fs reads `name_len` as one byte and the next as the file type whatever
        // the feature says (`ext2fs_dirent_name_len`), so a type without the feature is
        // a type, not a long name.
        for (index, entry) in DirEntryIter::new(region, bs, true, loc).enumerate() {
            let entry = match entry {
                Ok(entry) => entry,
                Err(e) => {
                    let reason = match &e {
                        FormatError::Corrupt { problem, .. } => problem.to_string(),
                        other => other.to_string(),
                    };
                    self.report(
                        ProblemCode::PR_2_DIR_CORRUPTED,
                        offset,
                        format!(
                            "directory inode {ino}, block #{}: directory corrupted ({reason})",
                            self.logical
                        ),
                    );
                    return;
                }
            };
            let at = offset;
            offset += entry.rec_len;
            let record = &region[at - base..];
            let dot_entry = first && index < 2;
            if self.hashes_in_entries && !dot_entry {
                // `name_len` as stored: e2fsck asks an unused entry to hold its name and
                // hashes too.
                let needed = hashed_entry_size(usize::from(record[6]));
                if entry.rec_len < hashed_entry_size(1) || entry.rec_len < needed {
                    self.report(
                        ProblemCode::PR_2_DIR_CORRUPTED,
                        at,
                        format!(
                            "directory inode {ino}, block #{}: directory corrupted (rec_len {} at offset {at} holds no name hashes: {needed} needed)",
                            self.logical, entry.rec_len
                        ),
                    );
                    return;
                }
            }
            let name = entry.name;
            let shown = String::from_utf8_lossy(name).into_owned();
            // The byte after the name (inside the entry's padding): `.` and `..` must be
            // NUL-terminated there (e2fsck's `check_dot`, `check_dotdot`).
            let terminated = region.get(at - base + NAME_OFFSET + name.len()) == Some(&0);
            // `.` and `..` (e2fsck's `check_dot`, `check_dotdot`): declined, an entry
            // with an inode then goes through the checks any entry does (those of
            // later entries only excepted), and its reference is counted.
            if first && index == 0 {
                let problem = if entry.inode == 0 {
                    Some((
                        ProblemCode::PR_2_MISSING_DOT,
                        format!("missing '.' in directory inode {ino}"),
                    ))
                } else if name != b"." {
                    Some((ProblemCode::PR_2_1ST_NOT_DOT, format!("first entry '{shown}' (inode={}) in directory inode {ino} should be '.'", entry.inode)))
                } else if !terminated {
                    Some((
                        ProblemCode::PR_2_DOT_NULL_TERM,
                        format!(
                            "'.' directory entry in directory inode {ino} is not NULL terminated"
                        ),
                    ))
                } else {
                    None
                };
                if let Some((code, message)) = problem {
                    self.report(code, at, message);
                }
                if entry.inode != ino {
                    self.report(
                        ProblemCode::PR_2_BAD_INODE_DOT,
                        at,
                        format!("invalid inode number for '.' in directory inode {ino}"),
                    );
                }
            } else if first && index == 1 {
                if entry.inode == 0 {
                    self.report(
                        ProblemCode::PR_2_MISSING_DOT_DOT,
                        at,
                        format!("missing '..' in directory inode {ino}"),
                    );
                } else if name != b".." {
                    self.report(
                        ProblemCode::PR_2_2ND_NOT_DOT_DOT,
                        at,
                        format!("second entry '{shown}' (inode={}) in directory inode {ino} should be '..'", entry.inode),
                    );
                } else if !terminated {
                    // Declined, e2fsck records no `..` for the directory (pass 3 then
                    // finds it wrong) but still counts the reference.
                    self.report(
                        ProblemCode::PR_2_DOT_DOT_NULL_TERM,
                        at,
                        format!(
                            "'..' directory entry in directory inode {ino} is not NULL terminated"
                        ),
                    );
                } else {
                    ctx.inodes.set_dotdot(ino, entry.inode);
                }
            }
            if entry.inode == 0 {
                continue;
            }
            if !dot_entry {
                self.check_hash(name, record);
                if name == b"." || name == b".." {
                    let code = if name == b"." {
                        ProblemCode::PR_2_DUP_DOT
                    } else {
                        ProblemCode::PR_2_DUP_DOT_DOT
                    };
                    self.report(
                        code,
                        at,
                        format!(
                            "entry '{shown}' in directory {ino} is a duplicate '{shown}' entry"
                        ),
                    );
                    continue;
                }
            }
            let target = entry.inode;
            if (target != ROOT_INO && target < ctx.sb.first_ino()) || target > ctx.sb.inodes_count {
                self.report(
                    ProblemCode::PR_2_BAD_INO,
                    at,
                    format!("entry '{shown}' in directory {ino} has invalid inode #: {target}"),
                );
                continue;
            }
            // e2fsck's chain of entry problems (`check_dir_block`) names one: a link to
            // the root before a zero-length name; declined, the entry is still counted.
            if !dot_entry && name.is_empty() && target != ROOT_INO {
                self.report(
                    ProblemCode::PR_2_NULL_NAME,
                    at,
                    format!("entry '' in directory {ino} ({target}) has a zero-length name"),
                );
            }
            let kind = ctx.inodes.kind(target);
            if kind.in_use() && target != ino && self.unreadable.contains(&target) {
                ctx.report(
                    ProblemCode::EXT2_ET_BAD_INODE_CSUM_INVALID,
                    Location::Inode(target),
                    format!("inode checksum does not match inode while reading inode {target} in process_bad_inode"),
                );
            }
            if !dot_entry && target == ino {
                self.report(
                    ProblemCode::PR_2_LINK_DOT,
                    at,
                    format!("entry '{shown}' in directory {ino} is a link to '.'"),
                );
            } else if !kind.in_use() {
                self.report(
                    ProblemCode::PR_2_UNUSED_INODE,
                    at,
                    format!("entry '{shown}' in directory {ino} has deleted/unused inode {target}"),
                );
            } else if !dot_entry && target == ROOT_INO {
                self.report(
                    ProblemCode::PR_2_LINK_ROOT,
                    at,
                    format!("entry '{shown}' in directory {ino} is a link to the root inode"),
                );
            }
            if self.encryption.is_some() {
                if !dot_entry {
                    self.check_encrypted_entry(&entry, kind, at);
                }
                // e2fsck's `encoded_check_name`: strict mode refuses a name that is not
                // in the encoding, then checks it as any name.
            } else if self.strict_casefold && std::str::from_utf8(name).is_err() {
                self.report(
                    ProblemCode::PR_2_BAD_ENCODED_NAME,
                    at,
                    format!("entry '{shown}' in directory {ino} has illegal UTF-8 characters in its name"),
                );
            }
            if self.encryption.is_none() && name.iter().any(|&b| b == b'/' || b == 0) {
                self.report(
                    ProblemCode::PR_2_BAD_NAME,
                    at,
                    format!(
                        "entry '{shown}' in directory {ino} has illegal characters in its name"
                    ),
                );
            }
            // A type of 0 is `PR_2_SET_FILETYPE`, which `-n` neither prints nor counts
            // (`PR_NO_OK | PR_NO_NOMSG`): images the Hurd made with the feature hold none.
            if !filetype && entry.file_type != 0 {
                self.report(
                    ProblemCode::PR_2_CLEAR_FILETYPE,
                    at,
                    format!("entry '{shown}' in directory {ino} has filetype set"),
                );
            } else if filetype && entry.file_type != 0 {
                if let Some(expected) = kind.dirent_file_type().filter(|&t| t != entry.file_type) {
                    self.report(
                        ProblemCode::PR_2_BAD_FILETYPE,
                        at,
                        format!(
                            "entry '{shown}' in directory {ino} has an incorrect filetype (was {}, should be {expected})",
                            entry.file_type
                        ),
                    );
                }
            }
            if let Some(code) = self.duplicate(name) {
                self.report(
                    code,
                    at,
                    format!("duplicate entry '{shown}' in directory {ino} found"),
                );
            }
            if !dot_entry && kind == InodeKind::Directory && target != ino {
                self.links
                    .push(SubdirLink::new(target, self.physical, at as u32, ino));
            }
            ctx.inodes.add_ref(target);
        }
    }

    /// Records `name` among the block's names; a name the block already had is a
    /// duplicate, as e2fsck's pass 2 and its rehash find one. Pass 2 compares the names
    /// of a block as bytes, or folded under strict mode (`dict_de_cf_cmp`, encrypted or
    /// not: a name that does not fold, see [`compared_name`], equals none), and its own
    /// report, `PR_2_REPORT_DUP_DIRENT`, leaves the filesystem valid; the error is the
    /// rehash's (pass 3A's `duplicate_search_and_fix`), which compares a casefolded
    /// directory's names folded in either mode. So in a casefolded directory without
    /// strict mode, two names of the same bytes that do not fold are the report alone.
    fn duplicate(&mut self, name: &'r [u8]) -> Option<ProblemCode> {
        if self.strict_casefold {
            let folded = compared_name(name)?;
            return (!self.names.insert_folded(folded))
                .then_some(ProblemCode::PR_2_DUPLICATE_DIRENT);
        }
        if self.names.insert(name) {
            None
        } else if self.casefold && compared_name(name).is_none() {
            Some(ProblemCode::PR_2_REPORT_DUP_DIRENT)
        } else {
            Some(ProblemCode::PR_2_DUPLICATE_DIRENT)
        }
    }

    /// e2fsck's `check_encrypted_dirent` for an entry (not `.` or `..`) of an encrypted
    /// directory: its name is ciphertext, any bytes but at least one cipher block
    /// long, and a regular file, directory or symlink it names must have the
    /// directory's policy. Checked after the file type, as e2fsck does.
    fn check_encrypted_entry(&mut self, entry: &DirEntry<'_>, kind: InodeKind, at: usize) {
        let ino = self.dir.ino;
        let target = entry.inode;
        if entry.name.len() < CIPHER_BLOCK_SIZE {
            self.report(
                ProblemCode::PR_2_BAD_ENCRYPTED_NAME,
                at,
                format!("encrypted entry in directory {ino} ({target}) is too short"),
            );
        }
        let (code, what) = match self.ctx.encryption.of(target) {
            found if found == self.encryption => return,
            Some(_) => (
                ProblemCode::PR_2_INCONSISTENT_ENCRYPTION_POLICY,
                "a different encryption policy",
            ),
            None if needs_encryption(entry.file_type, kind) => {
                (ProblemCode::PR_2_UNENCRYPTED_FILE, "no encryption")
            }
            None => return,
        };
        self.report(
            code,
            at,
            format!("entry in encrypted directory {ino} names inode {target}, which has {what}"),
        );
    }

    /// Widens the range of name hashes seen in an htree leaf with the hash of the entry
    /// that `record` begins with, whose name is `name`.
    fn check_hash(&mut self, name: &[u8], record: &[u8]) {
        if let Some(hash) = self.htree_range.and_then(|range| range.hash(name, record)) {
            self.hash_bounds = Some(match self.hash_bounds {
                None => (hash, hash),
                Some((lo, hi)) => (lo.min(hash), hi.max(hash)),
            });
        }
    }

    /// Compares the hashes seen with the leaf's range in the index; returns a problem
    /// found (either: both count alike against the index).
    fn finish(&mut self) -> Option<ProblemCode> {
        let (Some(range), Some((lo, hi))) = (self.htree_range, self.hash_bounds) else {
            return None;
        };
        let mut found = None;
        let ino = self.dir.ino;
        if lo < range.min {
            found = Some(ProblemCode::PR_2_HTREE_MIN_HASH);
            self.report(
                ProblemCode::PR_2_HTREE_MIN_HASH,
                0,
                format!(
                    "problem in HTREE directory inode {ino}: block #{} has bad min hash",
                    self.logical
                ),
            );
        }
        if hi > range.max {
            found = Some(ProblemCode::PR_2_HTREE_MAX_HASH);
            self.report(
                ProblemCode::PR_2_HTREE_MAX_HASH,
                0,
                format!(
                    "problem in HTREE directory inode {ino}: block #{} has bad max hash",
                    self.logical
                ),
            );
        }
        found
    }
}

/// The inodes pass 1 marked bad whose checksum fails: reading one again for
/// `process_bad_inode` stops e2fsck.
fn unreadable_bad_inodes(ctx: &Context) -> BTreeSet<u32> {
    let bad = ctx.bad_inodes.lock().unwrap_or_else(|e| e.into_inner());
    let failed = ctx
        .checksum_failed
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    bad.intersection(&failed).copied().collect()
}

//! Listing a directory in pieces, as readdir does: each entry comes with a cookie, the
//! position just after it, and a later listing resumes from a cookie. Cookies stay valid
//! while the directory changes, as the kernel's do:
//!
//! - In a linear directory a cookie is a byte position (block × block size + offset + 1).
//!   Records never move there: an insertion takes free space after a live record, and a
//!   removal merges a record into the one before it. Resuming lists the records at or
//!   past the position, so no entry is listed twice, and every entry that stayed in the
//!   directory is listed once.
//! - In an indexed directory, where a split moves half a leaf to a new block, a cookie is a
//!   hash position (`(major >> 1) << 32 | minor`, the kernel's `hash2pos`), and entries are
//!   listed in hash order: resuming probes the index for the cookie's hash. A run of leaves
//!   that continue one hash (their keys carry the collision bit) is sorted as one. Like
//!   the kernel's, the cookie cannot tell apart two names whose major and minor hashes are
//!   both equal: a listing that stops between them skips the second.

use e4_format::dir_hash::dir_hash;

use crate::dir::editor::{check_dot_entries, DirectoryEditor, DOTDOT_OFFSET};
use crate::dir::leaf::LeafEntry;
use crate::error::Result;
use crate::io::meta_io::look_at;

impl DirectoryEditor<'_> {
    /// The directory's parent: its ".." entry, the second record of block 0.
    pub(crate) fn parent(&self) -> Result<u32> {
        let physical = self.physical(0)?;
        let loc = self.loc(physical);
        look_at(
            self.io(),
            physical,
            self.block_zero_kind(),
            self.owner(),
            |bytes| {
                check_dot_entries(bytes, self.format(), loc)?;
                // OK to unwrap: check_dot_entries read a whole ".." record there.
                Ok(e4_format::codec::le32(bytes, DOTDOT_OFFSET).unwrap())
            },
        )
    }

    /// Calls `visit` with each live entry but "." and ".." from cookie `from` on (0: the
    /// start), in listing order, and the cookie that resumes after it, until `visit`
    /// returns false.
    pub(crate) fn list_from(
        &self,
        from: u64,
        visit: &mut dyn FnMut(LeafEntry, u64) -> bool,
    ) -> Result<()> {
        if self.is_indexed() {
            self.list_indexed_from(from, visit)
        } else {
            self.list_linear_from(from, visit)
        }
    }

    fn list_linear_from(
        &self,
        from: u64,
        visit: &mut dyn FnMut(LeafEntry, u64) -> bool,
    ) -> Result<()> {
        let bs = self.format().block_size as u64;
        let count = self.block_count()?;
        let (mut logical, mut start) = (from / bs, (from % bs) as usize);
        while logical < count {
            let (_, go_on) = self.look_leaf(logical, |physical, leaf| {
                // Block 0 of a linear directory starts with "." and "..".
                let skip = if logical == 0 {
                    check_dot_entries(leaf.leaf().bytes(), self.format(), self.loc(physical))?;
                    2
                } else {
                    0
                };
                Ok(leaf
                    .leaf()
                    .entries()
                    .skip(skip)
                    .filter(|e| e.offset >= start)
                    .all(|e| {
                        let cookie = logical * bs + e.offset as u64 + 1;
                        visit(e, cookie)
                    }))
            })?;
            if !go_on {
                break;
            }
            logical += 1;
            start = 0;
        }
        Ok(())
    }

    fn list_indexed_from(
        &self,
        from: u64,
        visit: &mut dyn FnMut(LeafEntry, u64) -> bool,
    ) -> Result<()> {
        // OK to cast: the cookie's high half is a major hash shifted right by one.
        let mut path = self.probe(|_| ((from >> 32) as u32) << 1)?;
        let (version, seed) = (path.version, self.format().hash_seed);
        let position = |name: &[u8]| {
            let hash = dir_hash(version, name, &seed);
            (u64::from(hash.major >> 1) << 32) | u64::from(hash.minor)
        };
        loop {
            // The leaf the path is at, and the leaves that continue its last hash.
            let mut run: Vec<(u64, LeafEntry)> = Vec::new();
            loop {
                let bottom = path.bottom();
                let logical = self.index_target(bottom.followed(), bottom.logical)?;
                let (_, entries) = self.look_leaf(logical, |_, leaf| {
                    Ok(leaf.leaf().entries().collect::<Vec<_>>())
                })?;
                run.extend(entries.into_iter().map(|e| (position(&e.name), e)));
                match path.next_key() {
                    Some(key) if key & 1 == 1 => {
                        self.advance(&mut path)?;
                    }
                    _ => break,
                }
            }
            run.sort_by_key(|(pos, _)| *pos);
            for (pos, entry) in run {
                if pos >= from && !visit(entry, pos + 1) {
                    return Ok(());
                }
            }
            if self.advance(&mut path)?.is_none() {
                return Ok(());
            }
        }
    }
}

//! An exhaustive, bounded walk of a filesystem through the public read API, for tests and
//! fuzzing that feed e4 damaged images: every error is fine, a panic or a hang is not.

use std::collections::HashSet;

use e4_fs::{FileType, Filesystem};

/// Walks everything reachable; returns how many inodes were visited. Bounded, so a corrupt
/// image cannot make it run long.
pub fn walk_everything(fs: &Filesystem) -> usize {
    let _ = fs.statfs();
    let mut seen = HashSet::new();
    let mut queue = vec![e4_format::inode::ROOT_INO];
    let mut buf = vec![0u8; 64 << 10];
    while let Some(ino) = queue.pop() {
        if !seen.insert(ino) || seen.len() > 2_000 {
            continue;
        }
        let Ok(inode) = fs.read_inode(ino) else {
            continue;
        };
        let _ = fs.metadata(ino);
        if let Ok(names) = fs.list_xattrs(ino) {
            for name in names {
                let _ = fs.get_xattr(ino, &name);
            }
        }
        match inode.file_type() {
            Some(FileType::Directory) => {
                let _ = fs.parent(ino);
                if let Ok(entries) = fs.read_dir(ino) {
                    for entry in entries.into_iter().take(500) {
                        let _ = fs.lookup(ino, &entry.name);
                        queue.push(entry.ino);
                    }
                }
                let _ = fs.lookup(ino, b"no-such-name");
            }
            Some(FileType::Regular) => {
                let mut offset = 0u64;
                while offset < (1 << 20) {
                    match fs.read_at(ino, offset, &mut buf) {
                        Ok(n) if n > 0 => offset += n as u64,
                        _ => break,
                    }
                }
                let _ = fs.map_block(&inode, u64::from(u32::MAX), 8);
            }
            Some(FileType::Symlink) => {
                let _ = fs.read_link(ino);
            }
            _ => {}
        }
    }
    let _ = fs.resolve("/link_dir/level01/../level01/level02", true);
    let _ = fs.resolve("/big_dir/needle", true);
    seen.len()
}

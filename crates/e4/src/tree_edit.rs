//! The commands that change the tree of names: `e4 mkdir [-p]`, `e4 rm [-r]`, `e4 mv` and
//! `e4 ln [-s]`, with the semantics of their POSIX namesakes where those are clear:
//! `mv` and `ln` put their source into an existing directory under its own name, `mv`
//! replaces an existing file or empty directory, `ln` never replaces anything.
//!
//! New directories and symlinks belong to the user running `e4` (as with the host tools);
//! directories get mode 755.

use std::collections::HashMap;

use e4_fs::{Creator, Error, FileType, Filesystem, RenameMode};
use rayon::prelude::*;

use crate::edit_session::{describe, last_name, ImagePath};
use crate::output::CliError;

/// Permission bits of a directory made by `e4 mkdir` (mkdir(1) with the usual umask 022).
const NEW_DIRECTORY_PERMISSIONS: u16 = 0o755;
/// Permission bits of a symlink (they are never checked; Linux always shows 777).
const SYMLINK_PERMISSIONS: u16 = 0o777;

fn creator(permissions: u16) -> Creator {
    Creator {
        permissions,
        uid: rustix::process::geteuid().as_raw(),
        gid: rustix::process::getegid().as_raw(),
        umask: 0,
    }
}

/// `e4 mkdir [-p] IMG PATH`.
pub fn mkdir(fs: &Filesystem, path: ImagePath<'_>, parents: bool) -> Result<(), CliError> {
    let new = creator(NEW_DIRECTORY_PERMISSIONS);
    if !parents {
        let (parent, name) = path.parent_and_name(fs)?;
        fs.mkdir(parent, name, new)
            .map_err(|e| describe(path, &e))?;
        return Ok(());
    }
    // Each prefix in turn: an existing directory (symlinks followed) is used, a missing one
    // is made, anything else is an error naming the prefix. Below a directory this made,
    // nothing exists but what `.` or `..` name, so a plain name is made there at once:
    // resolving each prefix from the root made a tree of 20,000 levels cost 20,000^2 / 2
    // lookups (19 s of CPU; 0.3 s now).
    let mut made: Option<u32> = None;
    let bytes = path.bytes();
    let mut ends: Vec<usize> = bytes
        .iter()
        .enumerate()
        .filter(|&(at, &b)| b == b'/' && at > 0 && bytes[at - 1] != b'/')
        .map(|(at, _)| at)
        .collect();
    ends.push(bytes.len());
    for end in ends {
        let prefix = ImagePath::from_bytes(&bytes[..end]);
        if let (Some(parent), Some(name)) = (made, last_name(prefix.bytes())) {
            made = Some(
                fs.mkdir(parent, name, new)
                    .map_err(|e| describe(prefix, &e))?,
            );
            continue;
        }
        made = None;
        match fs.resolve_bytes(prefix.bytes(), true) {
            Ok(ino) => {
                if fs
                    .metadata(ino)
                    .map_err(|e| describe(prefix, &e))?
                    .file_type
                    != FileType::Directory
                {
                    return Err(describe(prefix, &Error::NotADirectory(String::new())).into());
                }
            }
            Err(Error::NotFound(_)) => {
                let (parent, name) = prefix.parent_and_name(fs)?;
                made = Some(
                    fs.mkdir(parent, name, new)
                        .map_err(|e| describe(prefix, &e))?,
                );
            }
            Err(e) => return Err(describe(prefix, &e).into()),
        }
    }
    Ok(())
}

/// `e4 rm [-r] IMG PATH`: a symlink is removed, not what it points to.
pub fn rm(fs: &Filesystem, path: ImagePath<'_>, recursive: bool) -> Result<(), CliError> {
    let (parent, name) = path.parent_and_name(fs)?;
    let ino = fs
        .lookup(parent, name)
        .map_err(|e| describe(path, &e))?
        .ok_or_else(|| describe(path, &Error::NotFound(String::new())))?;
    let is_dir = fs.metadata(ino).map_err(|e| describe(path, &e))?.file_type == FileType::Directory;
    if !is_dir {
        return fs
            .unlink(parent, name)
            .map_err(|e| describe(path, &e).into());
    }
    if !recursive {
        return Err(describe(path, &Error::IsADirectory(String::new())).into());
    }
    remove_contents(fs, ino, path.bytes())?;
    fs.rmdir(parent, name)
        .map_err(|e| describe(path, &e).into())
}

/// Removes everything inside directory `dir` (at `dir_path`): the trees of its
/// subdirectories in parallel, so threads work in different directories; stops at the first
/// failure, naming its path.
fn remove_contents(fs: &Filesystem, dir: u32, dir_path: &[u8]) -> Result<(), String> {
    remove_files(fs, dir, &|| dir_path.to_vec())?
        .par_iter()
        .try_for_each(|subdirectory| {
            remove_tree(fs, (dir, dir_path), subdirectory)?;
            fs.rmdir(dir, &subdirectory.name).map_err(|e| {
                let path = path_under(dir_path, [&subdirectory.name[..]]);
                describe(ImagePath::from_bytes(&path), &e)
            })
        })
}

/// A directory met in a walk, not yet removed.
struct Subdirectory {
    ino: u32,
    name: Vec<u8>,
}

/// A directory being emptied, with the subdirectories it still holds.
struct Level {
    directory: Subdirectory,
    left: Vec<Subdirectory>,
}

/// Empties `top`, a subdirectory of `parent` (its inode and path). Depth is the image's to
/// choose (tens of thousands of levels are legal), so the walk keeps an explicit stack of
/// levels instead of recursing, each level holding its name only (a path per level would make
/// memory grow with the square of the depth); paths are built for messages. A directory that
/// is its own ancestor (a hard-linked directory in a damaged image) stops the walk with one
/// error naming both paths rather than looping.
fn remove_tree(
    fs: &Filesystem,
    (parent, parent_path): (u32, &[u8]),
    top: &Subdirectory,
) -> Result<(), String> {
    // Each ancestor's depth: 0 for `parent`, i + 1 for `stack[i]`.
    let mut ancestors = HashMap::from([(parent, 0)]);
    let mut stack: Vec<Level> = Vec::new();
    let mut entering = Some(Subdirectory {
        ino: top.ino,
        name: top.name.clone(),
    });
    // The path of a directory `name` in the one at the top of `stack`, built only for a
    // message.
    let path_to = |stack: &[Level], name: &[u8]| {
        let names = stack.iter().map(|l| &l.directory.name[..]);
        path_under(parent_path, names.chain([name]))
    };
    loop {
        if let Some(signal) = crate::interrupt::received() {
            return Err(format!(
                "{}: interrupted by {signal}; the removal stopped part-way (what it had not \
                 reached is still there)",
                ImagePath::from_bytes(&path_under(parent_path, [&top.name[..]])).shown(),
            ));
        }
        if let Some(directory) = entering.take() {
            if let Some(&depth) = ancestors.get(&directory.ino) {
                let ancestor = stack[..depth].iter().map(|l| &l.directory.name[..]);
                return Err(format!(
                    "{}: directory inode {} is also its own ancestor {} (a directory cycle in a \
                     damaged image); run e4 fsck",
                    ImagePath::from_bytes(&path_to(&stack, &directory.name)).shown(),
                    directory.ino,
                    ImagePath::from_bytes(&path_under(parent_path, ancestor)).shown(),
                ));
            }
            ancestors.insert(directory.ino, stack.len() + 1);
            let left = remove_files(fs, directory.ino, &|| path_to(&stack, &directory.name))?;
            stack.push(Level { directory, left });
        }
        // OK to unwrap: a level was pushed above or is still waiting to be removed.
        let level = stack.last_mut().unwrap();
        if let Some(next) = level.left.pop() {
            entering = Some(next);
            continue;
        }
        // OK to unwrap: `level` was on the stack.
        let done = stack.pop().unwrap();
        ancestors.remove(&done.directory.ino);
        let Some(up) = stack.last() else {
            return Ok(());
        };
        fs.rmdir(up.directory.ino, &done.directory.name)
            .map_err(|e| {
                let path = path_to(&stack, &done.directory.name);
                describe(ImagePath::from_bytes(&path), &e)
            })?;
    }
}

/// `base` with `names` appended, one `/` between each.
fn path_under<'n>(base: &[u8], names: impl IntoIterator<Item = &'n [u8]>) -> Vec<u8> {
    let mut path = base.to_vec();
    for name in names {
        if path.last() != Some(&b'/') {
            path.push(b'/');
        }
        path.extend_from_slice(name);
    }
    path
}

/// Unlinks every entry of `dir` but its subdirectories, which it returns. `dir_path` is
/// called for a message only, so a deep walk does not build a path per level.
fn remove_files(
    fs: &Filesystem,
    dir: u32,
    dir_path: &dyn Fn() -> Vec<u8>,
) -> Result<Vec<Subdirectory>, String> {
    let entries = fs
        .read_dir(dir)
        .map_err(|e| describe(ImagePath::from_bytes(&dir_path()), &e))?;
    let mut subdirectories = Vec::new();
    for entry in entries {
        let shown = || path_under(&dir_path(), [&entry.name[..]]);
        let file_type = fs
            .metadata(entry.ino)
            .map_err(|e| describe(ImagePath::from_bytes(&shown()), &e))?
            .file_type;
        if file_type == FileType::Directory {
            subdirectories.push(Subdirectory {
                ino: entry.ino,
                name: entry.name,
            });
        } else {
            fs.unlink(dir, &entry.name)
                .map_err(|e| describe(ImagePath::from_bytes(&shown()), &e))?;
        }
    }
    Ok(subdirectories)
}

/// Where `mv`, `ln` and `put` put `source`: into `path` under the source's last name if
/// `path` is an existing directory (symlinks followed), else at `path` itself. Returns the
/// directory, the name, and the path to name in messages.
pub fn destination<'p>(
    fs: &Filesystem,
    path: ImagePath<'p>,
    source: &'p [u8],
) -> Result<(u32, &'p [u8], Vec<u8>), String> {
    if let Ok(ino) = fs.resolve_bytes(path.bytes(), true) {
        if fs
            .metadata(ino)
            .is_ok_and(|m| m.file_type == FileType::Directory)
        {
            let source_name = last_name(source).ok_or_else(|| {
                format!(
                    "{}: names no entry to put into {}",
                    String::from_utf8_lossy(source),
                    path.shown()
                )
            })?;
            let mut shown = path.bytes().to_vec();
            if shown.last() != Some(&b'/') {
                shown.push(b'/');
            }
            shown.extend_from_slice(source_name);
            return Ok((ino, source_name, shown));
        }
    }
    let (parent, name) = path.parent_and_name(fs)?;
    Ok((parent, name, path.bytes().to_vec()))
}

/// `e4 mv IMG FROM TO`.
pub fn mv(fs: &Filesystem, from: ImagePath<'_>, to: ImagePath<'_>) -> Result<(), CliError> {
    let (from_parent, from_name) = from.parent_and_name(fs)?;
    if fs
        .lookup(from_parent, from_name)
        .map_err(|e| describe(from, &e))?
        .is_none()
    {
        return Err(describe(from, &Error::NotFound(String::new())).into());
    }
    let (to_parent, to_name, shown) = destination(fs, to, from.bytes())?;
    fs.rename(
        from_parent,
        from_name,
        to_parent,
        to_name,
        RenameMode::Replace,
    )
    .map_err(|e| describe(ImagePath::from_bytes(&shown), &e).into())
}

/// `e4 ln [-s] IMG TARGET PATH`: a hard link to the inode TARGET names (a symlink itself,
/// not what it points to), or with `symbolic` a symlink whose target is TARGET as written.
pub fn ln(
    fs: &Filesystem,
    target: ImagePath<'_>,
    path: ImagePath<'_>,
    symbolic: bool,
) -> Result<(), CliError> {
    let (parent, name, shown) = destination(fs, path, target.bytes())?;
    let shown = ImagePath::from_bytes(&shown);
    if symbolic {
        fs.symlink(parent, name, target.bytes(), creator(SYMLINK_PERMISSIONS))
            .map_err(|e| describe(shown, &e))?;
        return Ok(());
    }
    let ino = target.resolve(fs, false)?;
    fs.link(ino, parent, name)
        .map_err(|e| describe(shown, &e).into())
}

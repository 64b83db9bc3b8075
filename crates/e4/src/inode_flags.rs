//! `e4 lsattr` and `e4 chattr`: the inode flags of files in an image, shown and changed
//! with e2fsprogs' letters and syntax (`lsattr [-a] [-d] PATH...`, `chattr +i -a =e
//! PATH...`). The rules of what may change are the engine's (`Filesystem::set_user_flags`,
//! ext4's `ext4_fileattr_set`), so a refusal here is the one the kernel's ext4 gives.
//!
//! As e2fsprogs' `fgetflags`, only regular files and directories have flags to show or set
//! (anything else: "operation not supported"), and a symlink named on the command line is
//! not followed. Whoever runs e4 may change immutable and append-only: whoever can write
//! the image holds every file in it (the kernel asks for CAP_LINUX_IMMUTABLE).

use std::ffi::OsString;

use e4_format::inode::{flags, FileType};
use e4_fs::Filesystem;

use crate::edit_session::{describe, entry_names, ImagePath};
use crate::outln;
use crate::output::{after_paths, report_path, CliError, Output};

/// `FS_NOCOW_FL`: btrfs's, in the generic flag space; ext4 never sets it, but lsattr has a
/// column for it.
const NOCOW: u32 = 0x0080_0000;

/// lsattr's columns, in e2fsprogs 1.47's order (`lib/e2p/pf.c`, `flags_array`): a flag's
/// letter where it is set, `-` where not.
const COLUMNS: [(u32, char); 22] = [
    (flags::SECRM, 's'),
    (flags::UNRM, 'u'),
    (flags::SYNC, 'S'),
    (flags::DIRSYNC, 'D'),
    (flags::IMMUTABLE, 'i'),
    (flags::APPEND, 'a'),
    (flags::NODUMP, 'd'),
    (flags::NOATIME, 'A'),
    (flags::COMPR, 'c'),
    (flags::ENCRYPT, 'E'),
    (flags::JOURNAL_DATA, 'j'),
    (flags::INDEX, 'I'),
    (flags::NOTAIL, 't'),
    (flags::TOPDIR, 'T'),
    (flags::EXTENTS, 'e'),
    (NOCOW, 'C'),
    (flags::DAX, 'x'),
    (flags::CASEFOLD, 'F'),
    (flags::INLINE_DATA, 'N'),
    (flags::PROJINHERIT, 'P'),
    (flags::VERITY, 'V'),
    (flags::NOCOMPR, 'm'),
];

/// The letters chattr takes (its `flags_array`: `aAcCdDeijPsStTuFxm`).
const SETTABLE: &str = "aAcCdDeijPsStTuFxm";

/// `flags` as lsattr's 22 columns.
fn columns(flags: u32) -> String {
    COLUMNS
        .iter()
        .map(|&(flag, letter)| if flags & flag != 0 { letter } else { '-' })
        .collect()
}

/// The flag of chattr letter `letter`.
fn flag_of(letter: char) -> Option<u32> {
    SETTABLE
        .contains(letter)
        .then(|| COLUMNS.iter().find(|&&(_, l)| l == letter).map(|&(f, _)| f))
        .flatten()
}

/// What chattr's modes ask for: flags to add and remove, or (`=`) exactly a set; and
/// whether (`-R`) a directory's entries change too, recursively.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct FlagChange {
    add: u32,
    remove: u32,
    set: Option<u32>,
    recursive: bool,
}

impl FlagChange {
    /// `old` after the change. As chattr, `-`/`+` leave the other flags, and DIRSYNC is
    /// dropped from anything but a directory (chattr clears it before asking).
    fn apply(&self, old: u32, is_directory: bool) -> u32 {
        match self.set {
            Some(set) => set,
            None => {
                let new = (old & !self.remove) | self.add;
                if is_directory {
                    new
                } else {
                    new & !flags::DIRSYNC
                }
            }
        }
    }
}

/// Splits chattr's arguments into the modes (`+FLAGS`, `-FLAGS`, `=FLAGS`, as many as
/// given, before the first path; `-R` among them for recursion) and the paths (at least
/// one).
pub fn parse_chattr(args: &[OsString]) -> Result<(FlagChange, &[OsString]), String> {
    let mut change = FlagChange::default();
    let mut modes = 0;
    let mut taken = 0;
    for arg in args {
        let Some(text) = arg.to_str().filter(|t| t.starts_with(['+', '-', '='])) else {
            break;
        };
        taken += 1;
        let (sign, letters) = text.split_at(1);
        // As chattr, R among a `-`'s letters is the option, not a flag ("-R", "-Ri").
        let letters = if sign == "-" && letters.contains('R') {
            change.recursive = true;
            let rest = letters.replace('R', "");
            if rest.is_empty() {
                continue;
            }
            rest
        } else {
            letters.to_string()
        };
        if letters.is_empty() {
            return Err(format!("{text:?}: a mode needs flag letters ({SETTABLE})"));
        }
        let mut mask = 0;
        for letter in letters.chars() {
            mask |= flag_of(letter).ok_or_else(|| {
                format!("{text:?}: '{letter}' is not a flag chattr sets ({SETTABLE})")
            })?;
        }
        match sign {
            "+" => change.add |= mask,
            "-" => change.remove |= mask,
            _ => change.set = Some(change.set.unwrap_or(0) | mask),
        }
        modes += 1;
    }
    if modes == 0 {
        return Err("chattr needs a mode (+FLAGS, -FLAGS or =FLAGS) before the paths".into());
    }
    if change.set.is_some() && (change.add | change.remove) != 0 {
        return Err("= is incompatible with - and +".into());
    }
    if taken == args.len() {
        return Err("chattr needs a path after its modes".into());
    }
    Ok((change, &args[taken..]))
}

/// The inode `path` names (not following a last symlink) if it is a regular file or a
/// directory, with whether it is a directory; else the line to show.
fn flagged_inode(fs: &Filesystem, path: ImagePath<'_>, doing: &str) -> Result<(u32, bool), String> {
    let ino = path.resolve(fs, false)?;
    let meta = fs.metadata(ino).map_err(|e| describe(path, &e))?;
    match meta.file_type {
        FileType::Regular => Ok((ino, false)),
        FileType::Directory => Ok((ino, true)),
        _ => Err(format!(
            "{}: operation not supported while {doing} flags (only regular files and \
             directories have them)",
            path.shown()
        )),
    }
}

/// `e4 chattr IMG MODE... PATH...`: every path is tried (with `-R`, a directory's entries
/// after it, depth first, as chattr's `iterate_on_dir`); each failure is one line, and
/// the command fails if any did.
pub fn chattr(fs: &Filesystem, change: &FlagChange, paths: &[OsString]) -> Result<(), CliError> {
    let mut failed = 0;
    for path in paths.iter().map(|p| ImagePath(p)) {
        change_flags(fs, change, path, &mut failed)?;
    }
    after_paths(failed)
}

/// chattr of one path, and with `-R` of a directory's entries.
fn change_flags(
    fs: &Filesystem,
    change: &FlagChange,
    path: ImagePath<'_>,
    failed: &mut usize,
) -> Result<(), CliError> {
    let changed = flagged_inode(fs, path, "setting").and_then(|(ino, is_directory)| {
        let old = fs.user_flags(ino).map_err(|e| describe(path, &e))?;
        fs.set_user_flags(ino, change.apply(old, is_directory), true)
            .map_err(|e| describe(path, &e))?;
        Ok((ino, is_directory))
    });
    let Some((ino, true)) = report_path(changed, failed) else {
        return Ok(());
    };
    if change.recursive {
        for name in entry_names(fs, ino, path, true)? {
            let joined = path.joined(&name);
            change_flags(fs, change, ImagePath::from_bytes(&joined), failed)?;
        }
    }
    Ok(())
}

/// How `e4 lsattr` lists.
#[derive(Debug, Clone, Copy)]
pub struct LsattrOptions {
    /// `-d`: a directory's own flags, not its entries'.
    pub directories: bool,
    /// `-a`: entries whose names start with `.` too.
    pub all: bool,
    /// `-R`: a listed directory's entries too, under a `PATH:` heading, as lsattr prints
    /// them.
    pub recursive: bool,
}

/// `e4 lsattr IMG [-a] [-d] [-R] PATH...`: `FLAGS PATH` per line, a directory's entries (in
/// the directory's own order, as lsattr reads them) unless `-d`. What has no flags (a
/// symlink, a device), named or listed, is one line on stderr, and the command fails.
pub fn lsattr(fs: &Filesystem, options: LsattrOptions, paths: &[OsString]) -> Result<(), CliError> {
    let mut out = Output::new();
    let mut failed = 0;
    for path in paths.iter().map(|p| ImagePath(p)) {
        let Some(found) = report_path(flags_of(fs, path), &mut failed) else {
            continue;
        };
        if !found.is_directory || options.directories {
            outln!(out, "{} {}", columns(found.flags), path.shown())?;
            continue;
        }
        list_entries(fs, options, found.ino, path, &mut out, &mut failed)?;
    }
    out.finish()?;
    after_paths(failed)
}

/// lsattr's lines for the entries of directory `ino` at `path` (`lsattr_dir_proc`): names
/// starting with `.` only with `-a`; with `-R`, after a directory's own line, a blank line,
/// `PATH:`, its entries, and a blank line.
fn list_entries(
    fs: &Filesystem,
    options: LsattrOptions,
    ino: u32,
    path: ImagePath<'_>,
    out: &mut Output,
    failed: &mut usize,
) -> Result<(), CliError> {
    for name in entry_names(fs, ino, path, options.all)? {
        let joined = path.joined(&name);
        let entry_path = ImagePath::from_bytes(&joined);
        let Some(listed) = report_path(flags_of(fs, entry_path), failed) else {
            continue;
        };
        outln!(out, "{} {}", columns(listed.flags), entry_path.shown())?;
        if options.recursive && listed.is_directory {
            outln!(out, "\n{}:", entry_path.shown())?;
            list_entries(fs, options, listed.ino, entry_path, out, failed)?;
            outln!(out, "")?;
        }
    }
    Ok(())
}

/// An inode lsattr shows.
struct Flagged {
    ino: u32,
    flags: u32,
    is_directory: bool,
}

/// The inode `path` names, with its flags.
fn flags_of(fs: &Filesystem, path: ImagePath<'_>) -> Result<Flagged, String> {
    let (ino, is_directory) = flagged_inode(fs, path, "reading")?;
    let flags = fs.user_flags(ino).map_err(|e| describe(path, &e))?;
    Ok(Flagged {
        ino,
        flags,
        is_directory,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<(FlagChange, usize), String> {
        let args: Vec<OsString> = args.iter().map(OsString::from).collect();
        parse_chattr(&args).map(|(change, paths)| (change, paths.len()))
    }

    #[test]
    fn modes_then_paths() {
        let (change, paths) = parse(&["+i", "-a", "+dA", "/f", "/g"]).unwrap();
        assert_eq!(
            change.add,
            flags::IMMUTABLE | flags::NODUMP | flags::NOATIME
        );
        assert_eq!(change.remove, flags::APPEND);
        assert_eq!(paths, 2);
        assert_eq!(parse(&["=e", "/f"]).unwrap().0.set, Some(flags::EXTENTS));
    }

    #[test]
    fn r_among_a_removal_is_recursion() {
        let (change, paths) = parse(&["-R", "+i", "/d"]).unwrap();
        assert!(change.recursive);
        assert_eq!((change.add, change.remove, paths), (flags::IMMUTABLE, 0, 1));
        let (change, _) = parse(&["-Ri", "/d"]).unwrap();
        assert!(change.recursive);
        assert_eq!(change.remove, flags::IMMUTABLE);
        assert!(!parse(&["+i", "/d"]).unwrap().0.recursive);
        // An option is not a mode, and a mode still needs a path.
        assert!(parse(&["-R", "/d"]).is_err());
        assert!(parse(&["-R", "+i"]).is_err());
    }

    #[test]
    fn bad_modes_are_one_line_each() {
        assert!(parse(&["+Z", "/f"]).unwrap_err().contains("'Z'"));
        assert!(parse(&["=i", "+a", "/f"])
            .unwrap_err()
            .contains("incompatible"));
        assert!(parse(&["/f"]).unwrap_err().contains("needs a mode"));
        assert!(parse(&["+i"]).unwrap_err().contains("needs a path"));
        assert!(parse(&["+", "/f"])
            .unwrap_err()
            .contains("needs flag letters"));
        // Letters lsattr shows but chattr does not set.
        assert!(parse(&["+I", "/f"]).is_err());
        assert!(parse(&["+N", "/f"]).is_err());
    }

    #[test]
    fn columns_are_e2fsprogs_1_47s() {
        assert_eq!(columns(flags::EXTENTS), "--------------e-------");
        assert_eq!(
            columns(
                flags::SECRM
                    | flags::UNRM
                    | flags::SYNC
                    | flags::IMMUTABLE
                    | flags::NODUMP
                    | flags::NOATIME
                    | flags::COMPR
                    | flags::EXTENTS
            ),
            "suS-i-dAc-----e-------"
        );
        assert_eq!(
            columns(flags::DAX | flags::EXTENTS),
            "--------------e-x-----"
        );
    }

    #[test]
    fn dirsync_only_stays_on_directories() {
        let change = FlagChange {
            add: flags::DIRSYNC | flags::SYNC,
            ..FlagChange::default()
        };
        assert_eq!(change.apply(0, false), flags::SYNC);
        assert_eq!(change.apply(0, true), flags::DIRSYNC | flags::SYNC);
    }
}

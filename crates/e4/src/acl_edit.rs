//! `e4 getfacl` and `e4 setfacl`: POSIX ACLs of files in an image, shown and changed as
//! the acl package's tools do (`getfacl -n`'s listing; `setfacl -m`, `-x`, `-M`, `-X`,
//! `--set`, `--set-file`, `-b`, `-k`, `-d`, `-n` in command-line order, `-R`). The ACLs go through the engine's
//! `system.posix_acl_*` attributes, so the engine's rules apply as on the kernel's ext4
//! (`fs/posix_acl.c`): an access ACL sets the permission bits, one the bits express is not
//! stored, a malformed one is refused.
//!
//! What setfacl itself does before it calls `setxattr` is done here, as acl 2.3 does it:
//! a new access ACL starts from the permission bits; a default ACL created by `-m` starts
//! from the access ACL's owner, group and other entries; after `-m` or `-x` the mask is
//! recomputed as the union of the group class (named users, the group, named groups)
//! unless the same command gave a mask or `-n` (then a mask that named entries need is made
//! from the group entry); `-b` removes both ACLs, `-k` the default.

use std::ffi::OsString;

use e4_format::posix_acl::{tag, AclEntry, PosixAcl};
use e4_fs::{Error, FileType, Filesystem, Metadata, XattrSet};

use crate::acl_text::{listing, parse_spec, resolve_x, SpecEntry, SpecKind};
use crate::edit_session::{describe, entry_names, ImagePath};
use crate::outln;
use crate::output::{after_paths, report_path, CliError, Output};

const ACCESS: &[u8] = b"system.posix_acl_access";
const DEFAULT: &[u8] = b"system.posix_acl_default";

/// One of setfacl's operations, in command-line order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AclOp {
    /// `-m`: add or change entries.
    Modify(Vec<SpecEntry>),
    /// `-x`: remove entries.
    Remove(Vec<SpecEntry>),
    /// `-b`: remove every extended entry and the default ACL.
    RemoveAll,
    /// `-k`: remove the default ACL.
    RemoveDefault,
    /// `--set`, `--set-file`: the access ACL becomes the spec's access entries and, if it
    /// has default entries, the default ACL its default entries.
    Set(Vec<SpecEntry>),
}

/// A parsed setfacl command line.
#[derive(Debug, PartialEq, Eq)]
pub struct SetfaclArgs {
    pub ops: Vec<AclOp>,
    /// `-n`: the mask is left as it is.
    pub keep_mask: bool,
    /// `-R`: a directory's entries too, recursively; symlinks met on the way are skipped
    /// (setfacl's default walk, `-P` for what is found, a named symlink followed).
    pub recursive: bool,
    pub paths: Vec<OsString>,
}

/// Parses setfacl's options as getopt does: clusters of `b`, `k`, `d`, `n`, where `m` and
/// `x` take the rest of the cluster or the next argument (`-dm u:1:rx`), and `M` and `X`
/// likewise a host file of entries (`-M FILE`); `--` ends them; `-d` makes every later
/// `-m`/`-x` entry a default ACL's.
pub fn parse_setfacl(args: &[OsString]) -> Result<SetfaclArgs, String> {
    let mut parsed = SetfaclArgs {
        ops: Vec::new(),
        keep_mask: false,
        recursive: false,
        paths: Vec::new(),
    };
    let mut default = false;
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        let text = arg.to_str().unwrap_or("");
        if text == "--" {
            parsed.paths.extend(args.cloned());
            break;
        }
        if !text.starts_with('-') || text == "-" {
            parsed.paths.push(arg.clone());
            continue;
        }
        if let Some(long) = text.strip_prefix("--") {
            let (name, inline) = match long.split_once('=') {
                Some((name, value)) => (name, Some(OsString::from(value))),
                None => (long, None),
            };
            let from_file = match name {
                "set" => false,
                "set-file" => true,
                _ => {
                    return Err(format!(
                        "--{name} is not a setfacl option e4 knows (--set, --set-file)"
                    ))
                }
            };
            let argument = match inline {
                Some(value) => value,
                None => args
                    .next()
                    .ok_or(format!("--{name} needs an argument"))?
                    .clone(),
            };
            let entries = entries_of(&argument, from_file, SpecKind::WithPerms, default)?;
            parsed.ops.push(AclOp::Set(entries));
            continue;
        }
        let cluster = &text[1..];
        for (at, option) in cluster.char_indices() {
            match option {
                'b' => parsed.ops.push(AclOp::RemoveAll),
                'k' => parsed.ops.push(AclOp::RemoveDefault),
                'd' => default = true,
                'n' => parsed.keep_mask = true,
                'R' => parsed.recursive = true,
                'm' | 'x' | 'M' | 'X' => {
                    let rest = &cluster[at + 1..];
                    let argument = if rest.is_empty() {
                        let wanted = match option {
                            'm' | 'x' => "an ACL spec",
                            _ => "a file of ACL entries",
                        };
                        let next = args.next().ok_or(format!("-{option} needs {wanted}"))?;
                        next.clone()
                    } else {
                        OsString::from(rest)
                    };
                    let kind = match option {
                        'm' | 'M' => SpecKind::WithPerms,
                        _ => SpecKind::NamesOnly,
                    };
                    let from_file = matches!(option, 'M' | 'X');
                    let entries = entries_of(&argument, from_file, kind, default)?;
                    parsed.ops.push(match kind {
                        SpecKind::WithPerms => AclOp::Modify(entries),
                        SpecKind::NamesOnly => AclOp::Remove(entries),
                    });
                    break;
                }
                other => {
                    return Err(format!(
                        "-{other} is not a setfacl option e4 knows (-m, -x, -M, -X, -b, -k, -d, -n, -R)"
                    ))
                }
            }
        }
    }
    if parsed.ops.is_empty() {
        return Err("setfacl needs an operation (-m, -x, -b or -k)".into());
    }
    if parsed.paths.is_empty() {
        return Err("setfacl needs a path".into());
    }
    Ok(parsed)
}

/// The entries an option names: its argument as a spec, or (`from_file`) the entries of
/// the host file it names; every one a default ACL's after `-d`.
fn entries_of(
    argument: &std::ffi::OsStr,
    from_file: bool,
    kind: SpecKind,
    default: bool,
) -> Result<Vec<SpecEntry>, String> {
    let spec = if from_file {
        spec_of_file(argument)?
    } else {
        argument
            .to_str()
            .ok_or("an ACL spec must be text")?
            .to_string()
    };
    let mut entries = parse_spec(&spec, kind)?;
    for entry in &mut entries {
        entry.default |= default;
    }
    Ok(entries)
}

/// The entries of an ACL file (`setfacl -M`/`-X`, as acl 2.3 reads them): one or more
/// per line, `#` to the end of a line a comment (so `getfacl`'s listing, its headers and
/// `#effective:` notes included, can be given as it is), as one comma-separated spec.
fn spec_of_file(path: &std::ffi::OsStr) -> Result<String, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("{}: {e}", std::path::Path::new(path).display()))?;
    let entries: Vec<&str> = text
        .lines()
        .map(|line| line.split('#').next().unwrap_or("").trim())
        .filter(|entry| !entry.is_empty())
        .collect();
    Ok(entries.join(","))
}

/// An ACL being edited: its entries, and what the command did to it.
#[derive(Default)]
struct Edited {
    entries: Vec<AclEntry>,
    /// Changed by `-m`, `-x`, `-b` or `-k`: written back.
    changed: bool,
    /// A `-m` named the mask: it is not recomputed.
    mask_given: bool,
}

/// `ino`'s ACL stored as `name`, if any.
fn stored(fs: &Filesystem, ino: u32, name: &[u8]) -> Result<Option<Vec<AclEntry>>, Error> {
    let Some(value) = fs.get_xattr(ino, name)? else {
        return Ok(None);
    };
    let acl = PosixAcl::from_xattr(&value)
        .map_err(|e| Error::Invalid(format!("inode {ino}: stored ACL: {e}")))?;
    Ok(acl.map(|acl| acl.entries))
}

/// The owner, group and other entries the permission bits `mode` express.
fn base_entries(mode: u16) -> Vec<AclEntry> {
    [(tag::USER_OBJ, 6), (tag::GROUP_OBJ, 3), (tag::OTHER, 0)]
        .iter()
        .map(|&(tag, shift)| AclEntry {
            tag,
            perm: (mode >> shift) & 0o7,
            id: u32::MAX,
        })
        .collect()
}

/// `ino`'s access ACL: the stored one, or the one its permission bits express.
fn access_acl(fs: &Filesystem, ino: u32, meta: &Metadata) -> Result<Vec<AclEntry>, Error> {
    Ok(stored(fs, ino, ACCESS)?.unwrap_or_else(|| base_entries(meta.permissions)))
}

fn same_entry(a: &AclEntry, b: &AclEntry) -> bool {
    a.tag == b.tag && (a.id == b.id || !matches!(a.tag, tag::USER | tag::GROUP))
}

/// `entries` with the mask recomputed as setfacl does: the union of the group class, kept
/// only where a mask is needed (named entries) or was there.
fn recompute_mask(entries: &mut Vec<AclEntry>) {
    let named = entries
        .iter()
        .any(|e| matches!(e.tag, tag::USER | tag::GROUP));
    let has_mask = entries.iter().any(|e| e.tag == tag::MASK);
    if !named && !has_mask {
        return;
    }
    let union = entries
        .iter()
        .filter(|e| matches!(e.tag, tag::USER | tag::GROUP_OBJ | tag::GROUP))
        .fold(0, |perm, e| perm | e.perm);
    entries.retain(|e| e.tag != tag::MASK);
    entries.push(AclEntry {
        tag: tag::MASK,
        perm: union,
        id: u32::MAX,
    });
}

/// Applies `args` to one file; an error is the line to show. `named`: the path was given
/// on the command line; below it (`-R`), default entries are left out for what is not a
/// directory, as setfacl's walk leaves them, instead of refused.
fn set_one(
    fs: &Filesystem,
    args: &SetfaclArgs,
    path: ImagePath<'_>,
    named: bool,
) -> Result<(), String> {
    let ino = path.resolve(fs, true)?;
    let why = |e: &Error| describe(path, e);
    let meta = fs.metadata(ino).map_err(|e| why(&e))?;
    let is_directory = meta.file_type == FileType::Directory;
    let mut access = Edited {
        entries: access_acl(fs, ino, &meta).map_err(|e| why(&e))?,
        ..Edited::default()
    };
    let mut default = Edited {
        entries: stored(fs, ino, DEFAULT)
            .map_err(|e| why(&e))?
            .unwrap_or_default(),
        ..Edited::default()
    };
    for op in &args.ops {
        match op {
            AclOp::RemoveAll => {
                access.entries = base_entries(meta.permissions);
                access.changed = true;
                default.entries.clear();
                default.changed = true;
            }
            AclOp::RemoveDefault => {
                default.entries.clear();
                default.changed = true;
            }
            AclOp::Set(entries) => {
                if named && entries.iter().any(|spec| spec.default) && !is_directory {
                    return Err(format!(
                        "{}: only directories can have default ACLs",
                        path.shown()
                    ));
                }
                for (target, of_default) in [(&mut access, false), (&mut default, true)] {
                    let given: Vec<AclEntry> = entries
                        .iter()
                        .filter(|spec| spec.default == of_default)
                        .filter(|spec| is_directory || !spec.default)
                        .map(|spec| AclEntry {
                            perm: resolve_x(spec.entry.perm, is_directory, meta.permissions),
                            ..spec.entry
                        })
                        .collect();
                    if !given.is_empty() {
                        target.mask_given = given.iter().any(|e| e.tag == tag::MASK);
                        target.entries = given;
                        target.changed = true;
                    }
                }
            }
            AclOp::Modify(entries) | AclOp::Remove(entries) => {
                let modify = matches!(op, AclOp::Modify(_));
                for spec in entries {
                    if spec.default && !is_directory && !named {
                        continue;
                    }
                    if spec.default && !is_directory {
                        return Err(format!(
                            "{}: only directories can have default ACLs",
                            path.shown()
                        ));
                    }
                    if modify && spec.default && default.entries.is_empty() {
                        // A new default ACL starts from the access ACL's base entries.
                        default.entries = access
                            .entries
                            .iter()
                            .filter(|e| {
                                matches!(e.tag, tag::USER_OBJ | tag::GROUP_OBJ | tag::OTHER)
                            })
                            .copied()
                            .collect();
                    }
                    let target = if spec.default {
                        &mut default
                    } else {
                        &mut access
                    };
                    target.changed = true;
                    target.entries.retain(|e| !same_entry(e, &spec.entry));
                    if modify {
                        let perm = resolve_x(spec.entry.perm, is_directory, meta.permissions);
                        target.entries.push(AclEntry { perm, ..spec.entry });
                        target.mask_given |= spec.entry.tag == tag::MASK;
                    } else if matches!(spec.entry.tag, tag::USER_OBJ | tag::GROUP_OBJ | tag::OTHER)
                    {
                        return Err(format!(
                            "{}: the owner, group and other entries cannot be removed",
                            path.shown()
                        ));
                    }
                }
            }
        }
    }
    for (edited, name) in [(&mut access, ACCESS), (&mut default, DEFAULT)] {
        if !edited.changed {
            continue;
        }
        let needs_mask = edited
            .entries
            .iter()
            .any(|e| matches!(e.tag, tag::USER | tag::GROUP))
            && !edited.entries.iter().any(|e| e.tag == tag::MASK);
        if !args.keep_mask && !edited.mask_given {
            recompute_mask(&mut edited.entries);
        } else if needs_mask {
            // -n keeps a mask as it is; one that named entries need and that is missing is
            // made from the group entry (what setfacl does: nothing gains rights).
            let group = edited.entries.iter().find(|e| e.tag == tag::GROUP_OBJ);
            let perm = group.map_or(0, |e| e.perm);
            edited.entries.push(AclEntry {
                tag: tag::MASK,
                perm,
                id: u32::MAX,
            });
        }
        edited.entries.sort_by_key(|e| (e.tag, e.id));
        let written = if edited.entries.is_empty() {
            match fs.remove_xattr(ino, name) {
                Err(Error::NoAttribute(_)) => Ok(()),
                other => other,
            }
        } else {
            let acl = PosixAcl {
                entries: std::mem::take(&mut edited.entries),
            };
            fs.set_xattr(ino, name, &acl.to_xattr(), XattrSet::Either)
        };
        written.map_err(|e| why(&e))?;
    }
    Ok(())
}

/// `e4 setfacl IMG OPTIONS... PATH...`: every path is tried; each failure is one line,
/// and the command fails if any did.
pub fn setfacl(fs: &Filesystem, args: &SetfaclArgs) -> Result<(), CliError> {
    let mut failed = 0;
    for path in &args.paths {
        set_tree(fs, args, ImagePath(path), true, &mut failed)?;
    }
    after_paths(failed)
}

/// setfacl of one path and, with `-R`, of a directory's entries after it (symlinks among
/// them skipped, as setfacl's walk skips them).
fn set_tree(
    fs: &Filesystem,
    args: &SetfaclArgs,
    path: ImagePath<'_>,
    named: bool,
    failed: &mut usize,
) -> Result<(), CliError> {
    report_path(set_one(fs, args, path, named), failed);
    if !args.recursive {
        return Ok(());
    }
    let directory = path.resolve(fs, true).ok().filter(|&ino| {
        fs.metadata(ino)
            .is_ok_and(|meta| meta.file_type == FileType::Directory)
    });
    let Some(ino) = directory else {
        return Ok(());
    };
    for name in entry_names(fs, ino, path, true)? {
        let joined = path.joined(&name);
        let entry = ImagePath::from_bytes(&joined);
        let is_symlink = entry
            .resolve(fs, false)
            .and_then(|ino| fs.metadata(ino).map_err(|e| describe(entry, &e)))
            .is_ok_and(|meta| meta.file_type == FileType::Symlink);
        if !is_symlink {
            set_tree(fs, args, entry, false, failed)?;
        }
    }
    Ok(())
}

/// `e4 getfacl IMG PATH...`: what `getfacl -n` prints, for each path (a symlink is
/// followed): `# file:` (without a leading `/`, as getfacl), owner, group, the
/// set-user-ID, set-group-ID and sticky bits when any is set, the access ACL (the
/// permission bits' when none is stored), the default ACL, and a blank line.
pub fn getfacl(fs: &Filesystem, paths: &[OsString]) -> Result<(), CliError> {
    let mut out = Output::new();
    let mut failed = 0;
    for path in paths {
        if let Some(lines) = report_path(facl_lines(fs, ImagePath(path)), &mut failed) {
            for line in lines {
                outln!(out, "{line}")?;
            }
        }
    }
    out.finish()?;
    after_paths(failed)
}

fn facl_lines(fs: &Filesystem, path: ImagePath<'_>) -> Result<Vec<String>, String> {
    let ino = path.resolve(fs, true)?;
    let why = |e: &Error| describe(path, e);
    let meta = fs.metadata(ino).map_err(|e| why(&e))?;
    let shown = path.shown();
    let file = match shown.trim_start_matches('/') {
        "" => "/",
        relative => relative,
    };
    let mut lines = vec![
        format!("# file: {file}"),
        format!("# owner: {}", meta.uid),
        format!("# group: {}", meta.gid),
    ];
    let special = meta.permissions >> 9;
    if special != 0 {
        let bit = |mask: u16, c: char| if special & mask != 0 { c } else { '-' };
        lines.push(format!(
            "# flags: {}{}{}",
            bit(4, 's'),
            bit(2, 's'),
            bit(1, 't')
        ));
    }
    lines.extend(listing(
        &access_acl(fs, ino, &meta).map_err(|e| why(&e))?,
        "",
    ));
    if let Some(default) = stored(fs, ino, DEFAULT).map_err(|e| why(&e))? {
        lines.extend(listing(&default, "default:"));
    }
    lines.push(String::new());
    Ok(lines)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(args: &[&str]) -> Vec<OsString> {
        args.iter().map(OsString::from).collect()
    }

    #[test]
    fn options_in_order_as_getopt_reads_them() {
        let parsed = parse_setfacl(&os(&["-b", "-dm", "u:1:rx", "-x", "g:2", "/a", "/b"])).unwrap();
        assert_eq!(parsed.ops.len(), 3);
        assert_eq!(parsed.ops[0], AclOp::RemoveAll);
        let AclOp::Modify(entries) = &parsed.ops[1] else {
            panic!("{parsed:?}")
        };
        assert!(entries[0].default);
        let AclOp::Remove(entries) = &parsed.ops[2] else {
            panic!("{parsed:?}")
        };
        assert!(entries[0].default, "-d applies to every later entry");
        assert_eq!(parsed.paths, os(&["/a", "/b"]));
        let glued = parse_setfacl(&os(&["-mu:1:r", "--", "-odd"])).unwrap();
        assert_eq!(glued.paths, os(&["-odd"]));
    }

    #[test]
    fn bad_command_lines_say_why() {
        assert!(parse_setfacl(&os(&["/a"]))
            .unwrap_err()
            .contains("needs an operation"));
        assert!(parse_setfacl(&os(&["-b"]))
            .unwrap_err()
            .contains("needs a path"));
        assert!(parse_setfacl(&os(&["-m"]))
            .unwrap_err()
            .contains("needs an ACL spec"));
        assert!(parse_setfacl(&os(&["-M"]))
            .unwrap_err()
            .contains("needs a file of ACL entries"));
        assert!(parse_setfacl(&os(&["--set"]))
            .unwrap_err()
            .contains("--set needs an argument"));
        assert!(parse_setfacl(&os(&["--restore=x", "/f"]))
            .unwrap_err()
            .contains("--restore"));
        let missing = parse_setfacl(&os(&["-X", "/no/such/e4/acl/file", "/f"])).unwrap_err();
        assert!(missing.starts_with("/no/such/e4/acl/file: "), "{missing}");
        assert!(parse_setfacl(&os(&["-R", "-b", "/a"])).unwrap().recursive);
        assert!(parse_setfacl(&os(&["-P", "-b", "/a"]))
            .unwrap_err()
            .contains("-P"));
        assert!(parse_setfacl(&os(&["-m", "q:1:r", "/a"])).is_err());
    }

    #[test]
    fn the_mask_is_the_union_of_the_group_class() {
        let mut entries = base_entries(0o640);
        entries.push(AclEntry {
            tag: tag::USER,
            perm: 7,
            id: 5,
        });
        recompute_mask(&mut entries);
        let mask = entries.iter().find(|e| e.tag == tag::MASK).unwrap();
        assert_eq!(mask.perm, 7 | 4);
        let mut plain = base_entries(0o640);
        recompute_mask(&mut plain);
        assert_eq!(plain, base_entries(0o640), "no mask where none is needed");
    }
}

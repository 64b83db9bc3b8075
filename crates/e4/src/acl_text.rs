//! POSIX ACLs as text, in the acl package's forms: the entries `setfacl -m`/`-x` take
//! (`u:1000:rwx`, `g::r-x`, `m::rw`, `o::-`, `d:u:1000:rx`, comma-separated) and the
//! listing `getfacl -n` prints (numeric ids: the image's users are not the host's). The
//! ACLs themselves are e4-format's [`PosixAcl`] entries, whose tag values sort in the order
//! the kernel requires (`posix_acl_valid`).

use e4_format::posix_acl::{tag, AclEntry};

/// One entry of a `setfacl` spec: whether it is for the default ACL, and the entry (its
/// permissions 0 for `-x`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpecEntry {
    pub default: bool,
    pub entry: AclEntry,
}

/// Whether the spec carries permissions (`-m`) or names entries only (`-x`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpecKind {
    WithPerms,
    NamesOnly,
}

/// Parses a setfacl ACL spec: entries separated by commas, each
/// `[d[efault]:]TAG:[ID][:PERMS]` with TAG `u[ser]`, `g[roup]`, `m[ask]` or `o[ther]`
/// (mask and other take no id: `m::rw` or `m:rw`), ID numeric, PERMS letters of `rwxX-`.
/// `X` is kept as the execute bit's request and resolved per file ([`resolve_x`]): it is
/// returned as bit 0o10, outside `rwx`.
pub fn parse_spec(spec: &str, kind: SpecKind) -> Result<Vec<SpecEntry>, String> {
    let mut entries: Vec<&str> = spec.split(',').map(str::trim).collect();
    // One trailing comma is allowed, as setfacl allows it; an empty spec or an empty
    // entry elsewhere is refused, as setfacl refuses it.
    if entries.len() > 1 && entries.last() == Some(&"") {
        entries.pop();
    }
    entries
        .into_iter()
        .map(|text| {
            if text.is_empty() {
                return Err(format!("{spec:?} has an empty ACL entry"));
            }
            parse_entry(text, kind).map_err(|why| format!("{text:?} is not an ACL entry: {why}"))
        })
        .collect()
}

/// Execute requested only where it makes sense (`X`).
pub const EXECUTE_IF_SEARCHABLE: u16 = 0o10;

fn parse_entry(text: &str, kind: SpecKind) -> Result<SpecEntry, String> {
    let mut parts: Vec<&str> = text.split(':').collect();
    let default = matches!(parts.first(), Some(&("d" | "default")));
    if default {
        parts.remove(0);
    }
    let (tag, has_id) = match parts.first().copied() {
        Some("u" | "user") => (tag::USER_OBJ, true),
        Some("g" | "group") => (tag::GROUP_OBJ, true),
        Some("m" | "mask") => (tag::MASK, false),
        Some("o" | "other") => (tag::OTHER, false),
        _ => return Err("it starts with none of u, g, m, o (or d: before them)".into()),
    };
    let rest = &parts[1..];
    // mask and other: "m::rw", "m:rw", "m::" and "m" (for -x) all name the one entry.
    let (id, perms) = match (has_id, rest) {
        (true, [id] | [id, ""]) if kind == SpecKind::NamesOnly => (*id, None),
        (true, [id, perms]) => (*id, Some(*perms)),
        (false, []) if kind == SpecKind::NamesOnly => ("", None),
        (false, [""]) if kind == SpecKind::NamesOnly => ("", None),
        (false, ["", ""]) if kind == SpecKind::NamesOnly => ("", None),
        (false, [perms]) | (false, ["", perms]) => ("", Some(*perms)),
        _ => return Err("wrong number of ':' fields".into()),
    };
    let (tag, id) = if id.is_empty() {
        (tag, u32::MAX)
    } else if id.bytes().all(|b| b.is_ascii_digit()) {
        // `-x` may name (uid_t)-1, no id, to take out an entry a damaged or foreign ACL
        // stores with it; `-m` may not give it one (the kernel refuses such an ACL).
        let n = match kind {
            SpecKind::WithPerms => crate::attribute_edit::parse_id(id)?,
            SpecKind::NamesOnly => id.parse().map_err(|_| format!("id {id} is too large"))?,
        };
        (
            if tag == tag::USER_OBJ {
                tag::USER
            } else {
                tag::GROUP
            },
            n,
        )
    } else {
        return Err(format!(
            "{id:?} is not a numeric id (names would be the host's users)"
        ));
    };
    let perm = match (kind, perms) {
        (SpecKind::NamesOnly, Some(_)) => return Err("-x takes no permissions".into()),
        (SpecKind::NamesOnly, None) => 0,
        (SpecKind::WithPerms, None) => return Err("no permissions".into()),
        (SpecKind::WithPerms, Some(perms)) => parse_perms(perms)?,
    };
    Ok(SpecEntry {
        default,
        entry: AclEntry { tag, perm, id },
    })
}

fn parse_perms(text: &str) -> Result<u16, String> {
    if text.is_empty() {
        return Err("no permissions".into());
    }
    // Each letter at most once, as setfacl takes them ('-' as often as wanted).
    text.chars().try_fold(0, |perm, c| {
        let bit = match c {
            'r' => 4,
            'w' => 2,
            'x' => 1,
            'X' => EXECUTE_IF_SEARCHABLE,
            '-' => return Ok(perm),
            _ => return Err(format!("'{c}' is not one of r, w, x, X, -")),
        };
        if perm & bit != 0 {
            return Err(format!("'{c}' is given twice"));
        }
        Ok(perm | bit)
    })
}

/// `perm` with a requested `X` made execute when the file is a directory or some execute
/// bit of `mode` is set (setfacl's rule), and dropped otherwise.
pub fn resolve_x(perm: u16, is_directory: bool, mode: u16) -> u16 {
    let searchable = is_directory || mode & 0o111 != 0;
    match perm & EXECUTE_IF_SEARCHABLE {
        0 => perm,
        _ => (perm & 0o7) | u16::from(searchable),
    }
}

/// `rwx` with `-` for what is not granted.
pub fn perms_text(perm: u16) -> String {
    [(4, 'r'), (2, 'w'), (1, 'x')]
        .iter()
        .map(|&(bit, c)| if perm & bit != 0 { c } else { '-' })
        .collect()
}

/// The lines `getfacl -n` prints for `entries` (prefixed `default:` for a default ACL):
/// `user::rw-`, `user:1000:rwx\t#effective:r--` where the mask takes permissions away.
pub fn listing(entries: &[AclEntry], prefix: &str) -> Vec<String> {
    let mask = entries.iter().find(|e| e.tag == tag::MASK).map(|e| e.perm);
    entries
        .iter()
        .map(|e| {
            let (name, id) = match e.tag {
                tag::USER_OBJ => ("user", String::new()),
                tag::USER => ("user", e.id.to_string()),
                tag::GROUP_OBJ => ("group", String::new()),
                tag::GROUP => ("group", e.id.to_string()),
                tag::MASK => ("mask", String::new()),
                _ => ("other", String::new()),
            };
            let line = format!("{prefix}{name}:{id}:{}", perms_text(e.perm));
            let masked = matches!(e.tag, tag::USER | tag::GROUP_OBJ | tag::GROUP);
            match mask {
                Some(mask) if masked && e.perm & !mask != 0 => {
                    format!("{line}\t#effective:{}", perms_text(e.perm & mask))
                }
                _ => line,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(tag: u16, perm: u16, id: u32) -> AclEntry {
        AclEntry { tag, perm, id }
    }

    #[test]
    fn specs_in_setfacls_forms() {
        let parsed = parse_spec("u:1000:rwx,g::r-x,m::rw,o::-,d:u:7:rX", SpecKind::WithPerms);
        let parsed: Vec<_> = parsed
            .unwrap()
            .iter()
            .map(|s| (s.default, s.entry))
            .collect();
        assert_eq!(
            parsed,
            vec![
                (false, entry(tag::USER, 7, 1000)),
                (false, entry(tag::GROUP_OBJ, 5, u32::MAX)),
                (false, entry(tag::MASK, 6, u32::MAX)),
                (false, entry(tag::OTHER, 0, u32::MAX)),
                (true, entry(tag::USER, 4 | EXECUTE_IF_SEARCHABLE, 7)),
            ]
        );
        assert_eq!(
            parse_spec("m:r,other:w", SpecKind::WithPerms).unwrap()[1].entry,
            entry(tag::OTHER, 2, u32::MAX)
        );
        let removed = parse_spec("u:5,default:g:6,m::", SpecKind::NamesOnly).unwrap();
        assert_eq!(removed[1].entry, entry(tag::GROUP, 0, 6));
        assert!(removed[1].default);
    }

    #[test]
    fn bad_specs_say_why() {
        for (spec, why) in [
            ("z:1:r", "starts with none"),
            ("u:bob:r", "not a numeric id"),
            ("u:1:rq", "'q'"),
            ("u:1", "wrong number"),
            ("u:1:", "no permissions"),
            ("u:1:rwxx", "'x' is given twice"),
            ("u:1:XX", "'X' is given twice"),
            ("u:4294967295:r", "no id"),
            ("g:4294967296:r", "too large"),
            ("", "empty ACL entry"),
            ("u:1:r,,u:2:w", "empty ACL entry"),
            (",u:1:r", "empty ACL entry"),
        ] {
            let error = parse_spec(spec, SpecKind::WithPerms).unwrap_err();
            assert!(error.contains(why), "{spec}: {error}");
        }
        assert_eq!(
            parse_spec("u:1:r-w,", SpecKind::WithPerms).unwrap()[0].entry,
            entry(tag::USER, 6, 1),
            "a trailing comma and repeated '-' are setfacl's"
        );
        assert_eq!(
            parse_spec("u:4294967295", SpecKind::NamesOnly).unwrap()[0].entry,
            entry(tag::USER, 0, u32::MAX),
            "-x names an entry stored with no id"
        );
        assert!(parse_spec("u:1:r", SpecKind::NamesOnly)
            .unwrap_err()
            .contains("-x"));
    }

    #[test]
    fn execute_if_searchable() {
        assert_eq!(resolve_x(4 | EXECUTE_IF_SEARCHABLE, true, 0o644), 5);
        assert_eq!(resolve_x(4 | EXECUTE_IF_SEARCHABLE, false, 0o644), 4);
        assert_eq!(resolve_x(4 | EXECUTE_IF_SEARCHABLE, false, 0o744), 5);
    }

    #[test]
    fn listing_as_getfacl_shows_it() {
        let acl = [
            entry(tag::USER_OBJ, 6, u32::MAX),
            entry(tag::USER, 7, 1000),
            entry(tag::GROUP_OBJ, 4, u32::MAX),
            entry(tag::MASK, 4, u32::MAX),
            entry(tag::OTHER, 0, u32::MAX),
        ];
        assert_eq!(
            listing(&acl, "default:"),
            [
                "default:user::rw-",
                "default:user:1000:rwx\t#effective:r--",
                "default:group::r--",
                "default:mask::r--",
                "default:other::---",
            ]
        );
    }
}

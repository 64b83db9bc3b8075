//! `--file-contexts FILE`: SELinux labels (`security.selinux`) per path from the
//! file_contexts format libselinux reads (`selabel_open(SELABEL_CTX_FILE)`, e2fsdroid's
//! `-S`), so an unprivileged build labels the image as a root build of the same Android or
//! SELinux image would.
//!
//! Each line is `REGEX [TYPE] CONTEXT`: REGEX matched against the whole absolute path in the
//! image (libselinux anchors it as `^(?:REGEX)$`), TYPE one of `--` (regular file), `-d`,
//! `-l`, `-c`, `-b`, `-s`, `-p` (any type when absent), CONTEXT the label, or `<<none>>` for
//! none. Blank lines and `#` comments are skipped. Which line wins is libselinux's rule
//! (`label_file.c`): the last matching line, except that lines whose REGEX holds no regex
//! meta character (`spec_hasMetaChars`: `. ^ $ ? * + | [ ( {`, a backslash escaping the
//! next) are moved after the others, so an exact path beats any pattern.
//!
//! Differences from libselinux: the regex dialect is the `regex-automata` crate's (Perl-like,
//! as PCRE2's for the patterns file_contexts use; no backreferences or lookaround, refused
//! with the line's number); no `.bin` compiled files and no substitution files.

use std::sync::Arc;

use regex_automata::meta::Regex;
use regex_automata::util::syntax;

/// A file's type as a TYPE field names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileKind {
    Regular,
    Directory,
    Symlink,
    CharDevice,
    BlockDevice,
    Socket,
    Fifo,
}

impl FileKind {
    /// The kind of host file type `file_type`.
    pub fn of(file_type: rustix::fs::FileType) -> FileKind {
        use rustix::fs::FileType;
        match file_type {
            FileType::Directory => FileKind::Directory,
            FileType::Symlink => FileKind::Symlink,
            FileType::CharacterDevice => FileKind::CharDevice,
            FileType::BlockDevice => FileKind::BlockDevice,
            FileType::Socket => FileKind::Socket,
            FileType::Fifo => FileKind::Fifo,
            FileType::RegularFile | FileType::Unknown => FileKind::Regular,
        }
    }

    fn parse(field: &str) -> Option<FileKind> {
        Some(match field {
            "--" => FileKind::Regular,
            "-d" => FileKind::Directory,
            "-l" => FileKind::Symlink,
            "-c" => FileKind::CharDevice,
            "-b" => FileKind::BlockDevice,
            "-s" => FileKind::Socket,
            "-p" => FileKind::Fifo,
            _ => return None,
        })
    }
}

/// One line.
#[derive(Debug)]
struct Spec {
    regex: Regex,
    kind: Option<FileKind>,
    /// None for `<<none>>`.
    context: Option<String>,
}

/// A loaded file_contexts file, in libselinux's lookup order.
#[derive(Debug, Clone)]
pub struct FileContexts {
    /// Searched from the end: the last match wins.
    specs: Arc<Vec<Spec>>,
}

impl FileContexts {
    /// Reads and parses `path` (as clap's value parser: one line naming the file and the
    /// bad line).
    pub fn load(path: &str) -> Result<FileContexts, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{path}: {e}"))?;
        Self::parse(&text).map_err(|e| format!("{path}: {e}"))
    }

    fn parse(text: &str) -> Result<FileContexts, String> {
        let mut patterns = Vec::new();
        let mut exact = Vec::new();
        for (number, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let bad = |what: &str| {
                format!(
                    "line {}: {what} (want REGEX [TYPE] CONTEXT): {line:?}",
                    number + 1
                )
            };
            let fields: Vec<&str> = line.split_whitespace().collect();
            let (pattern, kind, context) = match fields[..] {
                [pattern, context] => (pattern, None, context),
                [pattern, kind, context] => {
                    let kind = FileKind::parse(kind)
                        .ok_or_else(|| bad(&format!("{kind:?} is not a file type")))?;
                    (pattern, Some(kind), context)
                }
                _ => return Err(bad("not two or three fields")),
            };
            // As bytes, ASCII classes: the engine is built without Unicode tables.
            let regex = Regex::builder()
                .syntax(syntax::Config::new().unicode(false).utf8(false))
                .build(&format!("^(?:{pattern})$"))
                .map_err(|e| bad(&format!("the regex does not compile: {e}")))?;
            let spec = Spec {
                regex,
                kind,
                context: (context != "<<none>>").then(|| context.to_string()),
            };
            if has_meta_characters(pattern) {
                patterns.push(spec);
            } else {
                exact.push(spec);
            }
        }
        patterns.extend(exact);
        Ok(FileContexts {
            specs: Arc::new(patterns),
        })
    }

    /// The label of the entry at absolute image path `path` of kind `kind`: None when no
    /// line matches or the one that wins says `<<none>>`.
    pub fn lookup(&self, path: &[u8], kind: FileKind) -> Option<&str> {
        self.specs
            .iter()
            .rev()
            .find(|spec| spec.kind.is_none_or(|k| k == kind) && spec.regex.is_match(path))
            .and_then(|spec| spec.context.as_deref())
    }
}

/// Whether a file_contexts regex holds a meta character (libselinux's `spec_hasMetaChars`).
fn has_meta_characters(pattern: &str) -> bool {
    let mut chars = pattern.chars();
    while let Some(c) = chars.next() {
        match c {
            '.' | '^' | '$' | '?' | '*' | '+' | '|' | '[' | '(' | '{' => return true,
            '\\' => {
                chars.next();
            }
            _ => {}
        }
    }
    false
}

/// The `security.selinux` value of `context`, as libselinux and e2fsdroid store it: the
/// label and its terminating NUL.
pub fn selinux_xattr(context: &str) -> Vec<u8> {
    let mut value = context.as_bytes().to_vec();
    value.push(0);
    value
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_match_wins_and_an_exact_path_beats_any_pattern() {
        let contexts = FileContexts::parse(
            "# comment\n\
             /system(/.*)?          u:object_r:system_file:s0\n\
             /system/bin/sh         u:object_r:shell_exec:s0\n\
             /system/bin(/.*)?      u:object_r:bin_file:s0\n\
             /system/bin  -d        u:object_r:bin_dir:s0\n\
             /system/none           <<none>>\n",
        )
        .unwrap();
        let label = |path: &str, kind| contexts.lookup(path.as_bytes(), kind);
        // Exact beats the later pattern.
        assert_eq!(
            label("/system/bin/sh", FileKind::Regular),
            Some("u:object_r:shell_exec:s0")
        );
        assert_eq!(
            label("/system/bin/ls", FileKind::Regular),
            Some("u:object_r:bin_file:s0")
        );
        assert_eq!(
            label("/system/bin", FileKind::Directory),
            Some("u:object_r:bin_dir:s0")
        );
        // A typed line does not match another type.
        assert_eq!(
            label("/system/bin", FileKind::Symlink),
            Some("u:object_r:bin_file:s0")
        );
        assert_eq!(
            label("/system/lib", FileKind::Directory),
            Some("u:object_r:system_file:s0")
        );
        // Anchored: no match inside a longer path.
        assert_eq!(label("/vendor/system", FileKind::Directory), None);
        assert_eq!(label("/system/none", FileKind::Regular), None);
        assert!(has_meta_characters("/a(/.*)?"));
        assert!(!has_meta_characters("/a\\.b"));
    }

    #[test]
    fn a_bad_line_is_refused_with_its_number() {
        for (text, want) in [
            ("/a u:r:x:s0\n/b\n", "line 2: not two or three fields"),
            ("/a -x u:r:x:s0\n", "line 1: \"-x\" is not a file type"),
            ("/a(  u:r:x:s0\n", "line 1: the regex does not compile"),
        ] {
            let error = FileContexts::parse(text).unwrap_err();
            assert!(error.starts_with(want), "{error}");
        }
    }
}

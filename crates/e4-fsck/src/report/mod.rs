//! What a check produced and how it is printed: e2fsck-style text (pass headers, one line
//! per problem with the question `-n` answers "no" to, a summary line) or JSON records.
//! Problems are sorted before printing, so the output is the same whatever the thread
//! count.

pub mod phase_times;
pub mod problem;
pub mod progress;

use std::io::{self, Write};

use crate::report::phase_times::PhaseTimes;
use crate::report::problem::Problem;

/// Exit status: no problems left (e2fsck's `FSCK_OK`).
pub const EXIT_CLEAN: u8 = 0;
/// Exit status: problems left uncorrected (`FSCK_UNCORRECTED`).
pub const EXIT_ERRORS: u8 = 4;
/// Exit status: the image could not be checked (`FSCK_ERROR`).
pub const EXIT_OPERATIONAL: u8 = 8;
/// Exit status: bad arguments (`FSCK_USAGE`).
pub const EXIT_USAGE: u8 = 16;

/// Counts for the summary line.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Summary {
    /// Inodes in use.
    pub inodes_used: u64,
    /// `s_inodes_count`.
    pub inodes_count: u64,
    /// Blocks in use.
    pub blocks_used: u64,
    /// `s_blocks_count`.
    pub blocks_count: u64,
    /// Bytes held by the checker's per-block and per-inode arrays, its peak state (the
    /// image is read through positional reads, not held in memory).
    pub state_bytes: u64,
}

/// The result of checking one filesystem.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    /// Every problem, in the fixed order.
    pub problems: Vec<Problem>,
    /// Counts found.
    pub summary: Summary,
    /// The filesystem was clean and recently checked, so it was not checked (no `-f`).
    pub skipped: bool,
    /// How long each step of the check took (`e4 fsck --timings` prints them).
    pub phases: PhaseTimes,
}

impl Report {
    /// The exit status e2fsck would give under `-n`: 4 if any problem left the
    /// filesystem in error, else 0; where a problem stops e2fsck, 8, with 4 added if it
    /// or an error before it left the filesystem in error (e2fsck finds nothing after
    /// it).
    pub fn exit_code(&self) -> u8 {
        let fatal = self.problems.iter().position(|p| p.code.is_fatal());
        let before = &self.problems[..fatal.map_or(self.problems.len(), |at| at + 1)];
        let errors = if before.iter().any(|p| p.code.is_error()) {
            EXIT_ERRORS
        } else {
            EXIT_CLEAN
        };
        match fatal {
            Some(_) => EXIT_OPERATIONAL | errors,
            None => errors,
        }
    }

    /// Writes e2fsck-style text.
    pub fn write_text(&self, out: &mut impl Write, name: &str) -> io::Result<()> {
        let s = &self.summary;
        if self.skipped {
            for p in &self.problems {
                writeln!(out, "{p}")?;
            }
            return writeln!(
                out,
                "{name}: clean, {}/{} files, {}/{} blocks",
                s.inodes_used, s.inodes_count, s.blocks_used, s.blocks_count
            );
        }
        const HEADERS: [&str; 6] = [
            "",
            "Pass 1: Checking inodes, blocks, and sizes",
            "Pass 2: Checking directory structure",
            "Pass 3: Checking directory connectivity",
            "Pass 4: Checking reference counts",
            "Pass 5: Checking group summary information",
        ];
        let mut problems = self.problems.iter().peekable();
        for (pass, header) in HEADERS.iter().enumerate() {
            if !header.is_empty() {
                writeln!(out, "{header}")?;
            }
            while let Some(p) = problems.next_if(|p| usize::from(p.code.pass()) == pass) {
                writeln!(out, "{p}")?;
            }
        }
        // After pass 5, without a header of its own: the quota files.
        for p in problems {
            writeln!(out, "{p}")?;
        }
        if self.exit_code() != EXIT_CLEAN {
            writeln!(
                out,
                "\n{name}: ********** WARNING: Filesystem still has errors **********\n"
            )?;
        }
        writeln!(
            out,
            "{name}: {}/{} files, {}/{} blocks",
            s.inodes_used, s.inodes_count, s.blocks_used, s.blocks_count
        )
    }

    /// Writes one JSON object: the summary and one record per problem.
    pub fn write_json(&self, out: &mut impl Write) -> io::Result<()> {
        let s = &self.summary;
        write!(
            out,
            "{{\"skipped\":{},\"exit_code\":{},\"inodes_used\":{},\"inodes_count\":{},\"blocks_used\":{},\"blocks_count\":{},\"state_bytes\":{},\"problems\":[",
            self.skipped,
            self.exit_code(),
            s.inodes_used,
            s.inodes_count,
            s.blocks_used,
            s.blocks_count,
            s.state_bytes
        )?;
        for (i, p) in self.problems.iter().enumerate() {
            if i > 0 {
                write!(out, ",")?;
            }
            write!(
                out,
                "{{\"code\":\"{}\",\"value\":\"0x{:06x}\",\"pass\":{},\"class\":\"{:?}\",\"error\":{},\"location\":\"{}\",\"message\":\"{}\",\"repair\":\"{:?}\"}}",
                p.code,
                p.code.value(),
                p.code.pass(),
                p.code.class(),
                p.code.is_error(),
                json_escape(&p.location.to_string()),
                json_escape(&p.message),
                p.repair()
            )?;
        }
        writeln!(out, "]}}")
    }
}

/// Escapes a string for a JSON string literal.
fn json_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::problem::{Location, ProblemCode};

    #[test]
    fn exit_code_ignores_no_ok_problems() {
        let mut report = Report {
            problems: vec![Problem::new(
                ProblemCode::PR_5_FREE_BLOCK_COUNT,
                Location::Filesystem,
                "x",
            )],
            summary: Summary::default(),
            skipped: false,
            phases: PhaseTimes::default(),
        };
        assert_eq!(report.exit_code(), EXIT_CLEAN);
        report.problems.push(Problem::new(
            ProblemCode::PR_1_BAD_I_SIZE,
            Location::Inode(12),
            "say \"hi\"\n",
        ));
        assert_eq!(report.exit_code(), EXIT_ERRORS);
        let mut json = Vec::new();
        report.write_json(&mut json).unwrap();
        let text = String::from_utf8(json).unwrap();
        assert!(text.contains("\"code\":\"PR_1_BAD_I_SIZE\""));
        assert!(text.contains("say \\\"hi\\\"\\u000a"));
    }

    /// A fatal problem gives 8, with 4 added only for an error e2fsck met before it.
    #[test]
    fn exit_code_of_a_fatal_problem() {
        let problem = |code, ino| Problem::new(code, Location::Inode(ino), "x");
        let fatal = problem(ProblemCode::EXT2_ET_INODE_CSUM_INVALID, 12);
        let mut report = Report {
            problems: vec![fatal.clone(), problem(ProblemCode::PR_1_BAD_I_SIZE, 13)],
            summary: Summary::default(),
            skipped: false,
            phases: PhaseTimes::default(),
        };
        assert_eq!(report.exit_code(), EXIT_OPERATIONAL);
        report.problems = vec![problem(ProblemCode::PR_1_BAD_I_SIZE, 11), fatal];
        assert_eq!(report.exit_code(), EXIT_OPERATIONAL | EXIT_ERRORS);
    }
}

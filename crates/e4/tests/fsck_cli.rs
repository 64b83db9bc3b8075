//! `e4 fsck`'s contract with scripts: e2fsck's exit statuses (0 clean, 4 errors left, 8
//! cannot check, 16 usage), the clean-skip without `-f`, and JSON records.

use std::process::Command;

use e4_testkit::make_empty_image;

fn e4(args: &[&str]) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_e4"))
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

#[test]
fn exit_statuses_follow_e2fsck() {
    let image = make_empty_image(&["-t", "ext4"], 8);
    let path = image.path.to_str().unwrap();
    let (code, text) = e4(&["fsck", "-fn", path]);
    assert_eq!(code, 0, "{text}");
    assert!(text.contains("Pass 5"), "{text}");

    // Clean and not forced: skipped, as e2fsck does.
    let (code, text) = e4(&["fsck", "-n", path]);
    assert_eq!(code, 0);
    assert!(text.contains(": clean,"), "{text}");

    let out = Command::new(e4_testkit::tool("debugfs"))
        .args(["-w", "-R", "sif <2> links_count 9", path])
        .output()
        .unwrap();
    assert!(out.status.success());
    let (code, text) = e4(&["fsck", "-fn", "--json", path]);
    assert_eq!(code, 4, "{text}");
    assert!(text.contains("\"code\":\"PR_4_BAD_REF_COUNT\""), "{text}");

    let not_ext = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(not_ext.path(), vec![0u8; 64 * 1024]).unwrap();
    assert_eq!(e4(&["fsck", "-fn", not_ext.path().to_str().unwrap()]).0, 8);
    assert_eq!(e4(&["fsck", "-fn", "/nonexistent/image"]).0, 8);

    // Progress goes to stderr as "pass done total device" lines; stdout is unchanged.
    let out = Command::new(env!("CARGO_BIN_EXE_e4"))
        .args(["fsck", "-fnC", path])
        .output()
        .unwrap();
    let progress = String::from_utf8_lossy(&out.stderr);
    for pass in 1..=5 {
        assert!(
            progress
                .lines()
                .any(|l| l.starts_with(&format!("{pass} ")) && l.ends_with(path)),
            "{progress}"
        );
    }

    assert_eq!(e4(&["fsck", "-n", "-j", "0", path]).0, 16);
    assert_eq!(e4(&["fsck", "--bogus", path]).0, 16);
    assert_eq!(
        e4(&["fsck", "-f", path]).0,
        16,
        "repair is not implemented; -n is required"
    );
}

#[test]
fn timings_go_to_stderr_and_change_nothing_else() {
    let image = make_empty_image(&["-t", "ext4"], 8);
    let path = image.path.to_str().unwrap();
    let (code, plain) = e4(&["fsck", "-fn", path]);
    let out = Command::new(env!("CARGO_BIN_EXE_e4"))
        .args(["fsck", "-fn", "--timings", path])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(code));
    assert_eq!(String::from_utf8_lossy(&out.stdout), plain);
    let timings = String::from_utf8_lossy(&out.stderr);
    let steps: Vec<&str> = timings
        .lines()
        .map(|l| l.split_once(" ms  ").expect(l).1)
        .collect();
    for step in [
        "start worker threads",
        "pass 1",
        "pass 5",
        "free state",
        "write report",
    ] {
        assert!(steps.contains(&step), "{timings}");
    }
    assert_eq!(steps.last(), Some(&"total"), "{timings}");
}

/// The functions `e4 fsck` runs (`fsck-link-order.txt`, from a profile) lie together at the
/// start of the program's code, so a check maps fewer pages of it: `build.rs` hands the
/// list to the linker (1.2 MiB of the peak on the small-file benchmark image). Of the
/// listed names this build has (a test build inlines more, so fewer), all come before
/// nearly every function not listed: a few share a listed one's section (aliases, folded
/// twins). Measured: 11 unlisted among the first 410 functions of the test build, 44
/// among 887 of the release build; 7,282 with the list not handed to the linker.
#[test]
fn the_functions_a_check_runs_lie_first_in_the_code() {
    let listed: std::collections::HashSet<String> =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/fsck-link-order.txt"))
            .unwrap()
            .lines()
            .map(str::to_string)
            .collect();
    let out = Command::new(e4_testkit::tool("nm"))
        .args(["-n", "--defined-only", env!("CARGO_BIN_EXE_e4")])
        .output()
        .unwrap();
    assert!(out.status.success(), "nm failed");
    let symbols = String::from_utf8(out.stdout).unwrap();
    // In address order, whether each of the code's symbols (`t`/`T`) is listed.
    let in_order: Vec<bool> = symbols
        .lines()
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            let (_, kind, name) = (fields.next()?, fields.next()?, fields.next()?);
            matches!(kind, "t" | "T").then(|| listed.contains(name))
        })
        .collect();
    let present = in_order.iter().filter(|&&l| l).count();
    assert!(
        present >= 100,
        "only {present} listed functions in the program"
    );
    let last_listed = in_order.iter().rposition(|&l| l).unwrap();
    let unlisted_among = last_listed + 1 - present;
    assert!(
        unlisted_among * 10 < present,
        "{unlisted_among} functions not listed lie among the {present} listed ones"
    );
}

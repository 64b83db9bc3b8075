//! `e4 bench` end to end, briefly: the e4 target only, a fraction of a second per point.
//! Checks the JSON record fields and that the image left by `--keep` passes `e2fsck -fn`,
//! with a normal user's PATH, which lacks the /usr/sbin and /sbin that e2fsprogs is in.

use std::process::Command;

#[test]
fn short_bench_writes_json_records_and_clean_images() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("bench.json");
    let chart = dir.path().join("bench.svg");
    let keep = dir.path().join("images");
    let out = Command::new(env!("CARGO_BIN_EXE_e4"))
        .args(["bench", "fallocate2", "create", "--targets", "e4"])
        .args(["--threads", "1,2", "--duration", "0.2", "--baseline", "e4"])
        .env("PATH", "/usr/bin:/bin")
        .arg("--json")
        .arg(&json)
        .arg("--chart")
        .arg(&chart)
        .arg("--keep")
        .arg(&keep)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("fallocate2") && stdout.contains("1.00x"),
        "{stdout}"
    );
    let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert!(doc["machine"]["cores"].as_u64().unwrap() >= 1);
    assert_eq!(doc["pin"], "none");
    assert!(!doc["machine"]["kernel"].as_str().unwrap().is_empty());
    let records = doc["records"].as_array().unwrap();
    assert_eq!(records.len(), 4, "2 workloads x 2 thread counts");
    for r in records {
        assert_eq!(r["target"], "e4");
        assert_eq!(r["pin"], "none", "without --pin nothing is pinned");
        assert!(r["ops_per_sec"].as_f64().unwrap() > 0.0, "{r}");
        assert!(r["contended_per_op"].is_number(), "{r}");
        // Creates and preallocations draw on the shared free counters' pools now and then.
        assert!(
            r["shared_atomic_writes_per_op"].as_f64().unwrap() > 0.0,
            "{r}"
        );
        assert!(r["locks_per_op"].as_f64().unwrap() > 0.0, "{r}");
        for field in [
            "workload",
            "threads",
            "mib_per_sec",
            "extents_per_file",
            "mean_extent_bytes",
        ] {
            assert!(r.get(field).is_some(), "{field} missing from {r}");
        }
        if r["workload"] == "fallocate2" {
            // Files of at most 1 MiB, preallocated by 8 KiB steps: at least one extent each.
            assert!(r["extents_per_file"].as_f64().unwrap() >= 1.0, "{r}");
            assert!(r["mean_extent_bytes"].as_f64().unwrap() >= 8192.0, "{r}");
        }
    }
    assert!(std::fs::read_to_string(&chart).unwrap().contains("<svg"));
    let mut images = 0;
    for entry in std::fs::read_dir(&keep).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "img") {
            images += 1;
            let fsck = Command::new(e4_testkit::tool("e2fsck"))
                .arg("-fn")
                .arg(&path)
                .output()
                .unwrap();
            assert!(
                fsck.status.success(),
                "e2fsck -fn {}:\n{}",
                path.display(),
                String::from_utf8_lossy(&fsck.stdout)
            );
        }
    }
    assert_eq!(images, 4);
}

#[test]
fn pin_is_recorded_in_every_record_and_the_table() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("bench.json");
    let out = Command::new(env!("CARGO_BIN_EXE_e4"))
        .args([
            "bench",
            "create",
            "--targets",
            "tmpfs",
            "--baseline",
            "tmpfs",
        ])
        .args(["--threads", "1,2", "--duration", "0.1", "--pin", "same"])
        .arg("--json")
        .arg(&json)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.lines().next().unwrap().contains("pinned: same"),
        "{stdout}"
    );
    let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let records = doc["records"].as_array().unwrap();
    assert_eq!(records.len(), 2, "{doc}");
    for r in records {
        assert_eq!(r["pin"], "same", "{r}");
        assert!(r["ops_per_sec"].as_f64().unwrap() > 0.0, "{r}");
    }
}

/// Under `taskset -c N` the process may use one CPU, whatever its number: `split` is
/// refused in one line naming it.
#[test]
fn split_on_one_allowed_cpu_is_refused_in_one_line() {
    // OK to unwrap: a running process may use at least one CPU.
    let cpu = *e4_bench::pinning::allowed_cpus().unwrap().last().unwrap();
    let out = Command::new("taskset")
        .args(["-c", &cpu.to_string(), env!("CARGO_BIN_EXE_e4")])
        .args(["bench", "create", "--targets", "tmpfs", "--pin", "split"])
        .output()
        .expect("taskset (util-linux) runs e4 on one CPU");
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        format!("e4: --pin split needs 2 CPUs at least, and this process may use 1 (CPU {cpu})\n")
    );
    assert!(out.stdout.is_empty());
}

#[test]
fn unknown_workload_and_target_are_usage_errors() {
    for args in [
        &["bench", "nosuch"][..],
        &["bench", "--targets", "zfs"][..],
        &["bench", "--threads", "0"][..],
        &["bench", "--pin", "both"][..],
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_e4"))
            .args(args)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
    }
}

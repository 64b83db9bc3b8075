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

/// Runs `e4 bench ARGS --json J --keep K` (bounded by `timeout`); returns the records and
/// the kept images.
fn bench_records(
    args: &[&str],
    dir: &std::path::Path,
) -> (Vec<serde_json::Value>, Vec<std::path::PathBuf>) {
    let json = dir.join("bench.json");
    let keep = dir.join("images");
    let out = Command::new("timeout")
        .arg("120")
        .arg(env!("CARGO_BIN_EXE_e4"))
        .args(args)
        .arg("--json")
        .arg(&json)
        .arg("--keep")
        .arg(&keep)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let images = std::fs::read_dir(&keep)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "img"))
        .collect();
    (doc["records"].as_array().unwrap().clone(), images)
}

/// Each sequential point moves `--size` per thread in 1 MiB requests (one operation each),
/// in MiB/s, and leaves an image e2fsck passes.
fn assert_sequential_points(
    records: &[serde_json::Value],
    images: &[std::path::PathBuf],
    points: usize,
) {
    assert_eq!(records.len(), points, "{records:?}");
    for r in records {
        let threads = r["threads"].as_u64().unwrap();
        assert_eq!(
            r["ops"].as_u64().unwrap(),
            4 * threads,
            "4 MiB a thread: {r}"
        );
        assert!(r["mib_per_sec"].as_f64().unwrap() > 0.0, "{r}");
        assert_eq!(
            r["mib_per_sec"], r["ops_per_sec"],
            "one MiB an operation: {r}"
        );
    }
    assert_eq!(images.len(), points);
    for image in images {
        let fsck = Command::new(e4_testkit::tool("e2fsck"))
            .arg("-fn")
            .arg(image)
            .output()
            .unwrap();
        assert!(
            fsck.status.success(),
            "e2fsck -fn {}:\n{}",
            image.display(),
            String::from_utf8_lossy(&fsck.stdout)
        );
    }
}

const SEQUENTIAL_ARGS: [&str; 6] = ["--size", "4M", "--duration", "30", "--threads", "1,2"];

#[test]
fn seqwrite_and_seqread_move_their_size_in_mebibytes_on_e4() {
    let dir = tempfile::tempdir().unwrap();
    let mut args = vec![
        "bench",
        "seqwrite",
        "seqread",
        "--targets",
        "e4",
        "--baseline",
        "e4",
    ];
    args.extend(SEQUENTIAL_ARGS);
    let (records, images) = bench_records(&args, dir.path());
    assert_sequential_points(&records, &images, 4);
}

/// The same through the kernel: its ext4 on a loop device and e4's FUSE mount, whose
/// cached pages `seqread` drops (POSIX_FADV_DONTNEED) before reading.
#[test]
fn seqwrite_and_seqread_run_on_the_kernels_ext4_and_e4s_mount() {
    let what = "e4 bench seqwrite seqread on kernel-ext4 and e4-fuse";
    if !e4_bench::target::is_root() {
        return e4_testkit::kernel_comparison_skipped(what, "not root");
    }
    if !std::path::Path::new("/dev/fuse").exists() {
        return e4_testkit::fuse_skipped(what, "no /dev/fuse");
    }
    let dir = tempfile::tempdir().unwrap();
    // Detaches a mount the run left behind, whatever happens.
    let _guards: Vec<_> = ["seqwrite", "seqread"]
        .iter()
        .flat_map(|w| ["1", "2"].map(|t| format!("e4-fuse-{w}-{t}.img.mnt")))
        .map(|m| {
            e4_testkit::FuseGuard::watch(
                &dir.path().join("images").join(m),
                std::time::Duration::from_secs(120),
            )
        })
        .collect();
    let mut args = vec![
        "bench",
        "seqwrite",
        "seqread",
        "--targets",
        "e4-fuse,kernel-ext4",
    ];
    args.extend(SEQUENTIAL_ARGS);
    let (records, images) = bench_records(&args, dir.path());
    assert_sequential_points(&records, &images, 8);
}

/// The real-tree workloads end to end on e4's mount and tmpfs, with a small `--tree`: a
/// point per workload and target (e4 in process is not applicable, and skipped), files/s
/// counting the tree's files, each image clean after untar, `rm -rf` and git through the
/// mount.
#[test]
fn the_tree_workloads_run_tar_rm_and_git_through_e4s_mount() {
    let what = "e4 bench untar rm-tree git-status on e4-fuse";
    if !e4_bench::target::is_root() {
        return e4_testkit::kernel_comparison_skipped(what, "not root");
    }
    if !std::path::Path::new("/dev/fuse").exists() {
        return e4_testkit::fuse_skipped(what, "no /dev/fuse");
    }
    let dir = tempfile::tempdir().unwrap();
    let tree = dir.path().join("tree");
    std::fs::create_dir_all(tree.join("sys")).unwrap();
    for n in 0..20 {
        std::fs::write(tree.join(format!("h{n}.h")), "int x;\n".repeat(n * 500)).unwrap();
    }
    std::fs::write(tree.join("sys/types.h"), "typedef int t;\n").unwrap();
    let workloads = ["untar", "rm-tree", "git-status"];
    let _guards: Vec<_> = workloads
        .iter()
        .map(|w| {
            e4_testkit::FuseGuard::watch(
                &dir.path().join(format!("images/e4-fuse-{w}-2.img.mnt")),
                std::time::Duration::from_secs(120),
            )
        })
        .collect();
    let mut args = vec!["bench"];
    args.extend(workloads);
    args.extend(["--targets", "e4-fuse,tmpfs,e4", "--threads", "2"]);
    args.extend(["--duration", "0.3", "--baseline", "tmpfs", "--tree"]);
    args.push(tree.to_str().unwrap());
    let (records, images) = bench_records(&args, dir.path());
    assert_eq!(records.len(), 6, "3 workloads x 2 targets: {records:?}");
    for r in &records {
        let ops = r["ops"].as_u64().unwrap();
        assert!(ops >= 2, "a tree or a run per thread at least: {r}");
        let files_per_op =
            r["files_per_sec"].as_f64().unwrap() / r["ops_per_sec"].as_f64().unwrap();
        assert!((files_per_op - 21.0).abs() < 1e-6, "{r}");
    }
    assert_eq!(images.len(), 3, "{images:?}");
    for image in images {
        e4_testkit::e2fsck_clean(&image).unwrap();
    }
}

//! The layout report against known layouts, and against e2freefrag and `e4defrag -c` on the
//! same images (the kernel's view, on a loop mount, where this machine allows one).

use std::path::Path;
use std::process::Command;

use super::*;

fn extent(logical: u64, physical: u64, len: u64) -> FileExtent {
    FileExtent {
        logical,
        physical,
        len,
    }
}

#[test]
fn counts_and_score_of_a_known_layout() {
    // Two files: one in three extents of 10 blocks, one in a single extent of 40.
    let files = vec![
        vec![
            extent(0, 1000, 10),
            extent(10, 2000, 10),
            extent(20, 3000, 10),
        ],
        vec![extent(0, 5000, 40)],
    ];
    let report = LayoutReport::from_parts(&files, &[1, 3, 4, 1000], 4096, 32768);
    assert_eq!((report.files, report.extents, report.blocks), (2, 4, 70));
    assert_eq!(report.extents_per_file, 2.0);
    assert_eq!(report.mean_extent_bytes, 70.0 * 4096.0 / 4.0);
    assert_eq!(report.best_extents, 2);
    // ratio = (4 - 2) * 100 / 70 = 2.857; under 10, so the score is 8 * ratio.
    assert!((report.fragmentation_score - 8.0 * 200.0 / 70.0).abs() < 1e-9);
    assert_eq!(report.free_blocks, 1008);
    let buckets: Vec<(u64, u64, u64)> = report
        .free_extent_histogram
        .iter()
        .map(|b| (b.min_bytes, b.extents, b.blocks))
        .collect();
    assert_eq!(
        buckets,
        vec![
            (4096, 1, 1),
            (8192, 1, 3),
            (16384, 1, 4),
            (4096 << 9, 1, 1000)
        ]
    );
}

#[test]
fn score_above_ten_percent_uses_the_steep_branch() {
    // 20 one-block extents in 20 blocks: ratio (20 - 1) * 100 / 20 = 95 -> 80 + 19 = 99.
    let file: Vec<FileExtent> = (0..20).map(|i| extent(i, 100 + 2 * i, 1)).collect();
    let report = LayoutReport::from_parts(&[file], &[], 4096, 32768);
    assert!((report.fragmentation_score - 99.0).abs() < 1e-9);
}

#[test]
fn a_file_longer_than_a_flex_group_needs_more_than_one_extent() {
    let file = vec![
        extent(0, 0, 32768),
        extent(32768, 40000, 32768),
        extent(65536, 80000, 1),
    ];
    let report = LayoutReport::from_parts(&[file], &[], 4096, 32768);
    assert_eq!(report.best_extents, 3);
    assert_eq!(report.fragmentation_score, 0.0);
}

fn mke2fs(path: &Path, mib: u64) {
    let out = Command::new(e4_host_tools::tool("mke2fs"))
        .args(crate::target::MKE2FS_OPTIONS)
        .arg(path)
        .arg(format!("{mib}M"))
        .output()
        .expect("mke2fs is needed (e2fsprogs)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// e2freefrag's histogram lines as (free extents, free blocks) per bucket, in order.
fn e2freefrag(image: &Path) -> (u64, Vec<(u64, u64)>) {
    let out = Command::new("e2freefrag")
        .arg(image)
        .output()
        .expect("e2freefrag is needed (e2fsprogs)");
    let text = String::from_utf8_lossy(&out.stdout);
    let free = text
        .lines()
        .find_map(|l| l.strip_prefix("Free blocks: "))
        .and_then(|l| l.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no free block count in:\n{text}"));
    let buckets = text
        .lines()
        .skip_while(|l| !l.contains("HISTOGRAM"))
        .filter_map(|l| {
            let (_, counts) = l.split_once(':')?;
            let mut fields = counts.split_whitespace();
            Some((fields.next()?.parse().ok()?, fields.next()?.parse().ok()?))
        })
        .collect();
    (free, buckets)
}

fn assert_matches_e2freefrag(image: &Path) {
    let report = LayoutReport::read(image).unwrap();
    let (free, buckets) = e2freefrag(image);
    assert_eq!(report.free_blocks, free, "free blocks");
    let ours: Vec<(u64, u64)> = report
        .free_extent_histogram
        .iter()
        .map(|b| (b.extents, b.blocks))
        .collect();
    assert_eq!(
        ours,
        buckets,
        "free-extent histogram of {}",
        image.display()
    );
}

#[test]
fn free_extents_match_e2freefrag_on_a_fresh_image() {
    // Uninitialised block groups (BLOCK_UNINIT) are most of a fresh image.
    let dir = tempfile::tempdir().unwrap();
    let image = dir.path().join("fresh.img");
    mke2fs(&image, 1024);
    assert_matches_e2freefrag(&image);
}

/// A read-write loop mount, unmounted on drop.
struct LoopMount(tempfile::TempDir);

impl LoopMount {
    fn new(image: &Path) -> Option<LoopMount> {
        let skipped = |why: &str| e4_testkit::kernel_comparison_skipped("layout", why);
        if !crate::target::is_root() {
            skipped("not root");
            return None;
        }
        let dir = tempfile::tempdir().unwrap();
        let ok = Command::new("mount")
            .args(["-t", "ext4", "-o", "loop"])
            .arg(image)
            .arg(dir.path())
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            skipped("the loop mount failed");
            return None;
        }
        Some(LoopMount(dir))
    }
}

impl Drop for LoopMount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.0.path()).status();
    }
}

/// Writes two files a block at a time, alternately, with an fsync after each block, so
/// the kernel's allocator interleaves them; a third contiguously; a fourth preallocated and
/// half written (a written and an unwritten record, physically contiguous: two extents for
/// FIEMAP and e4defrag); and a stray file in lost+found, which e4defrag leaves out.
fn write_fragmented(root: &Path) {
    use std::io::Write;
    let block = vec![7u8; 4096];
    let mut a = std::fs::File::create(root.join("a")).unwrap();
    let mut b = std::fs::File::create(root.join("b")).unwrap();
    for _ in 0..64 {
        a.write_all(&block).unwrap();
        a.sync_all().unwrap();
        b.write_all(&block).unwrap();
        b.sync_all().unwrap();
    }
    std::fs::create_dir(root.join("sub")).unwrap();
    std::fs::write(root.join("sub/c"), vec![1u8; 1 << 20]).unwrap();
    let d = std::fs::File::create(root.join("sub/d")).unwrap();
    rustix::fs::fallocate(&d, rustix::fs::FallocateFlags::empty(), 0, 1 << 20).unwrap();
    std::os::unix::fs::FileExt::write_all_at(&d, &vec![2u8; 64 << 10], 0).unwrap();
    d.sync_all().unwrap();
    std::fs::write(root.join("lost+found/stray"), vec![3u8; 8192]).unwrap();
}

/// `e4defrag -c DIR`: (total extents, best extents, score).
fn e4defrag(dir: &Path) -> (u64, u64, f64) {
    let out = Command::new("e4defrag")
        .arg("-c")
        .arg(dir)
        .output()
        .expect("e4defrag is needed (e2fsprogs)");
    let text = String::from_utf8_lossy(&out.stdout);
    let value = |key: &str| {
        text.lines()
            .find(|l| l.trim_start().starts_with(key))
            .and_then(|l| l.split_whitespace().last())
            .unwrap_or_else(|| panic!("no '{key}' in e4defrag output:\n{text}"))
            .to_string()
    };
    let totals = value("Total/best extents");
    let (total, best) = totals.split_once('/').unwrap();
    (
        total.parse().unwrap(),
        best.parse().unwrap(),
        value("Fragmentation score").parse().unwrap(),
    )
}

#[test]
fn extents_and_score_match_e4defrag_and_free_space_matches_e2freefrag() {
    let dir = tempfile::tempdir().unwrap();
    let image = dir.path().join("kernel.img");
    mke2fs(&image, 256);
    let Some(mount) = LoopMount::new(&image) else {
        return;
    };
    write_fragmented(mount.0.path());
    let (total, best, score) = e4defrag(mount.0.path());
    drop(mount);
    let report = LayoutReport::read(&image).unwrap();
    assert_eq!(report.files, 4);
    assert!(report.extents > 3, "the interleaved files are fragmented");
    assert_eq!((report.extents, report.best_extents), (total, best));
    assert_eq!(report.fragmentation_score.round(), score);
    assert_matches_e2freefrag(&image);
}

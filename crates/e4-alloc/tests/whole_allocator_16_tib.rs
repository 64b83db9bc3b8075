//! The whole allocator (blocks and inodes) for a 16 TiB volume, opened as e4-fs opens it:
//! from descriptors, reading no bitmap. Alone in its test binary so that the process's
//! resident-memory growth is the allocator's own.
//!
//! Timing is printed, not asserted (the machine may be loaded); measure with
//! `cargo test -p e4-alloc --release --test whole_allocator_16_tib -- --nocapture`.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use e4_alloc::{
    AllocRequest, AllocatorConfig, BlockAllocator, Extent, Geometry, GroupLocking, GroupSummary,
    InodeAllocator, InodeGeometry, InodeGroupSummary, InodeKind, InodeRequest, Reserve,
};

const GROUPS: u32 = 131_072;
const BLOCKS_PER_GROUP: u32 = 32_768;
const INODES_PER_GROUP: u32 = 8192;
const GROUPS_PER_FLEX: u32 = 16;
/// Inode table blocks per group: 8,192 inodes of 256 bytes in 4 KiB blocks.
const ITABLE_BLOCKS: u32 = 512;
/// Superblock, descriptors (131,072 of 64 bytes) and reserved GDT blocks in a backup group.
const SUPER_AND_GDT: u32 = 1 + 2048 + 1024;

/// Whether group `g` holds a superblock backup (`sparse_super`: 0, 1, powers of 3, 5, 7).
fn has_backup(g: u32) -> bool {
    if g <= 1 {
        return true;
    }
    [3u32, 5, 7].iter().any(|&base| {
        let mut p = base;
        while p < g {
            p *= base;
        }
        p == g
    })
}

/// The metadata of a flex_bg volume as mke2fs lays it out: superblock backups with their
/// descriptors, each flex group's bitmaps and inode tables packed into its first group, and
/// a 1 GiB journal in the middle of the volume.
fn system_zone() -> Vec<Extent> {
    let start = |g: u32| u64::from(g) * u64::from(BLOCKS_PER_GROUP);
    let mut zone: Vec<Extent> = (0..GROUPS)
        .filter(|&g| has_backup(g))
        .map(|g| Extent {
            start: start(g),
            len: SUPER_AND_GDT,
        })
        .collect();
    for leader in (0..GROUPS).step_by(GROUPS_PER_FLEX as usize) {
        let after_backup = if has_backup(leader) { SUPER_AND_GDT } else { 0 };
        zone.push(Extent {
            start: start(leader) + u64::from(after_backup),
            len: GROUPS_PER_FLEX * (2 + ITABLE_BLOCKS),
        });
    }
    zone.push(Extent {
        start: start(GROUPS / 2) + 4096,
        len: 32_768 - 4096,
    });
    zone
}

/// CPU time this thread has run, in nanoseconds (Linux `schedstat`), or `None` elsewhere:
/// unlike wall time, not inflated by other processes on a loaded machine.
fn thread_cpu_ns() -> Option<u64> {
    let stat = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    stat.split_whitespace().next()?.parse().ok()
}

/// The process's resident memory, in bytes (Linux), or `None` elsewhere.
fn resident_bytes() -> Option<usize> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: usize = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// Opens both allocators for 131,072 groups: no bitmap read, under 32 MiB by the
/// allocators' own accounting and by the process's resident growth, and a first creation
/// and allocation load only the groups they land in.
#[test]
fn a_16_tib_volume_opens_both_allocators_small_and_without_reading() {
    let zone = system_zone();
    let block_reads = Arc::new(AtomicUsize::new(0));
    let inode_reads = Arc::new(AtomicUsize::new(0));
    let resident_before = resident_bytes();
    let cpu_before = thread_cpu_ns();
    let started = Instant::now();
    let counted = Arc::clone(&block_reads);
    let blocks = BlockAllocator::open(
        Geometry {
            first_data_block: 0,
            blocks_per_group: BLOCKS_PER_GROUP,
            blocks: u64::from(GROUPS) * u64::from(BLOCKS_PER_GROUP),
        },
        AllocatorConfig::default(),
        |g| GroupSummary {
            // The descriptors' counts need not be exact: loading corrects them.
            free: BLOCKS_PER_GROUP - if g % GROUPS_PER_FLEX == 0 { 8224 } else { 0 },
            uninit: g != 0,
        },
        &zone,
        move |_: u32| {
            counted.fetch_add(1, Ordering::Relaxed);
            Ok(vec![0xFF; 4096])
        },
    )
    .unwrap();
    let counted = Arc::clone(&inode_reads);
    let inodes = InodeAllocator::open(
        InodeGeometry {
            groups: GROUPS,
            inodes_per_group: INODES_PER_GROUP,
            groups_per_flex: GROUPS_PER_FLEX,
            first_inode: 11,
        },
        GroupLocking::TrySkip,
        64,
        |g| InodeGroupSummary {
            free_inodes: INODES_PER_GROUP - if g == 0 { 10 } else { 0 },
            used_dirs: u32::from(g == 0),
            itable_unused: INODES_PER_GROUP - if g == 0 { 10 } else { 0 },
            uninit: g != 0,
        },
        move |_: u32| {
            counted.fetch_add(1, Ordering::Relaxed);
            let mut bitmap = vec![0u8; 1024];
            bitmap[0] = 0xFF;
            bitmap[1] = 0b11;
            Ok(bitmap)
        },
    );
    let elapsed = started.elapsed();
    let cpu = thread_cpu_ns()
        .zip(cpu_before)
        .map(|(after, before)| after.saturating_sub(before));
    let resident = resident_bytes()
        .zip(resident_before)
        .map(|(after, before)| after.saturating_sub(before));
    let accounted = blocks.memory_bytes() + inodes.memory_bytes();
    let mib = |b: usize| b as f64 / f64::from(1 << 20);
    eprintln!(
        "16 TiB, blocks + inodes: opened in {:.1} ms ({} on this thread's CPU); {:.1} MiB \
         accounted ({:.1} MiB blocks, {:.1} MiB inodes); resident growth {}",
        elapsed.as_secs_f64() * 1e3,
        cpu.map_or("unknown".into(), |ns| format!("{:.1} ms", ns as f64 / 1e6)),
        mib(accounted),
        mib(blocks.memory_bytes()),
        mib(inodes.memory_bytes()),
        resident.map_or("unknown".into(), |r| format!("{:.1} MiB", mib(r))),
    );
    assert!(accounted < 32 << 20, "{accounted} bytes");
    if let Some(resident) = resident {
        assert!(resident < 32 << 20, "resident growth {resident} bytes");
    }
    assert_eq!(block_reads.load(Ordering::Relaxed), 0);
    assert_eq!(inode_reads.load(Ordering::Relaxed), 0);
    assert_eq!((blocks.loaded_groups(), inodes.loaded_groups()), (0, 0));
    assert_eq!(
        inodes.free_inodes(),
        u64::from(GROUPS) * u64::from(INODES_PER_GROUP) - 10
    );

    // A file in the root: group 0's inode bitmap is read (it is initialised), nothing else.
    let file = inodes
        .allocate(
            &InodeRequest {
                parent: 2,
                parent_hint: None,
                kind: InodeKind::Other,
                slot: 0,
            },
            &blocks,
        )
        .unwrap();
    assert_eq!(file.ino, 11);
    assert_eq!(inode_reads.load(Ordering::Relaxed), 1);
    assert_eq!(inodes.loaded_groups(), 1);
    // Its first blocks, in a BLOCK_UNINIT group: computed, not read.
    let extent = blocks
        .allocate(AllocRequest {
            goal: Some(6 * u64::from(BLOCKS_PER_GROUP)),
            len: 16,
            min_len: 16,
            slot: 0,
            stream: 11,
            reserve: Reserve::None,
        })
        .unwrap();
    assert_eq!(extent.start, 6 * u64::from(BLOCKS_PER_GROUP));
    assert_eq!(block_reads.load(Ordering::Relaxed), 0);
    assert_eq!(blocks.loaded_groups(), 1);
    let dirty = inodes.take_dirty_groups();
    assert_eq!(dirty.len(), 1);
    assert_eq!(dirty[0].0, 0);
}

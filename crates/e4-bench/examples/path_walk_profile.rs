//! A fixed number of MRPL walks (`/d/d0/.../d7/file`, resolved then stat'ed, as
//! `e4 bench mrpl` does for one thread) on a fresh image, for counting instructions and
//! lock acquisitions per walk under callgrind (a time-bound `e4 bench` run makes a different
//! number of walks each time):
//!
//! ```sh
//! cargo build --release -p e4-bench --example path_walk_profile
//! valgrind --tool=callgrind target/release/examples/path_walk_profile /dev/shm/p.img 100000
//! callgrind_annotate --inclusive=yes callgrind.out.* | grep -E 'Filesystem>::(resolve_bytes|metadata) '
//! ```
//!
//! Divide the inclusive counts by the walk count; the program prints lock acquisitions per
//! walk from the engine's counters.

use e4_fs::{Creator, Filesystem, OpenOptions};

const ROOT_INO: u32 = 2;
/// Directories below the thread's own one, as in MRPL.
const DEPTH: usize = 8;

/// The allocator the `e4` binary runs with: counts made with the system's would weigh
/// allocations as e4 never pays them.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let (Some(image), Some(count)) = (args.next(), args.next()) else {
        return Err("usage: path_walk_profile IMAGE WALKS".into());
    };
    let count: u64 = count.parse()?;
    e4_bench::target::make_image(image.as_ref(), 256 << 20, true).map_err(|e| format!("{e:?}"))?;
    let fs = Filesystem::open(&image, OpenOptions::writable())?;
    let creator = Creator {
        permissions: 0o755,
        uid: 0,
        gid: 0,
        umask: 0,
    };
    let mut dir = fs.mkdir(ROOT_INO, b"t0", creator)?;
    for level in 0..DEPTH {
        dir = fs.mkdir(dir, format!("d{level}").as_bytes(), creator)?;
    }
    fs.create(dir, b"file", creator)?;
    let path: String = std::iter::once("/t0".to_string())
        .chain((0..DEPTH).map(|l| format!("d{l}")))
        .chain(std::iter::once("file".to_string()))
        .collect::<Vec<_>>()
        .join("/");
    let locks_before = lock_total(&fs);
    for _ in 0..count {
        let ino = fs.resolve(&path, true)?;
        fs.metadata(ino)?;
    }
    let locks = lock_total(&fs) - locks_before;
    fs.unmount()?;
    println!(
        "{count} walks of {path}: {:.1} lock acquisitions per walk",
        locks as f64 / count as f64
    );
    Ok(())
}

/// Lock acquisitions of every kind the engine counts (those a walk can take).
fn lock_total(fs: &Filesystem) -> u64 {
    let r = fs.lock_stats();
    [
        r.inode,
        r.inode_cache_shards,
        r.buffer_cache_shards,
        r.dentry_cache_shards,
        r.commit_gate,
    ]
    .iter()
    .map(|k| k.acquisitions)
    .sum()
}

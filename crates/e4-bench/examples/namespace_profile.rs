//! A fixed number of creates, then as many unlinks, in private directories of a fresh image
//! (one per thread; one thread by default), for counting instructions per operation under
//! callgrind (a time-bound `e4 bench` run makes a different number of files, and so
//! directories of a different size, on every run):
//!
//! ```sh
//! cargo build --release -p e4-bench --example namespace_profile
//! valgrind --tool=callgrind target/release/examples/namespace_profile /dev/shm/p.img 100000 [THREADS [nojournal]]
//! callgrind_annotate --inclusive=yes callgrind.out.* | grep -E 'Filesystem>::(create|unlink) '
//! ```
//!
//! Divide the inclusive counts of `create` and `unlink` by the file count; the program's
//! total over twice the count is the cost of an operation with its share of the commits
//! (`nojournal`: on an image made without a journal, to see what the journal adds). The engine's lock
//! counters, per lock kind, go to stderr at the end. With two threads,
//! valgrind runs one thread at a time but switches between them, so their directories grow
//! interleaved as they do on two cores: the count shows what sharing costs in instructions.

use e4_fs::{Creator, Filesystem, OpenOptions};

const ROOT_INO: u32 = 2;

/// The allocator the `e4` binary runs with: counts made with the system's would weigh
/// allocations as e4 never pays them.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let (Some(image), Some(count)) = (args.next(), args.next()) else {
        return Err("usage: namespace_profile IMAGE FILES [THREADS [nojournal]]".into());
    };
    let count: u32 = count.parse()?;
    let threads: u32 = args.next().map_or(Ok(1), |t| t.parse())?;
    let journal = match args.next().as_deref() {
        None => true,
        Some("nojournal") => false,
        Some(other) => return Err(format!("{other}: not `nojournal`").into()),
    };
    e4_bench::target::make_image(image.as_ref(), 2 << 30, journal).map_err(|e| format!("{e:?}"))?;
    let opened = std::time::Instant::now();
    let fs = Filesystem::open(&image, OpenOptions::writable())?;
    let creator = Creator {
        permissions: 0o644,
        uid: 0,
        gid: 0,
        umask: 0,
    };
    let create_then_unlink = |thread: u32| -> Result<(), e4_fs::Error> {
        let dir = fs.mkdir(
            ROOT_INO,
            format!("d{thread}").as_bytes(),
            Creator {
                permissions: 0o755,
                ..creator
            },
        )?;
        let names: Vec<String> = (0..count / threads).map(|n| format!("f{n}")).collect();
        for name in &names {
            fs.create(dir, name.as_bytes(), creator)?;
        }
        for name in &names {
            fs.unlink(dir, name.as_bytes())?;
        }
        Ok(())
    };
    std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|thread| scope.spawn(move || create_then_unlink(thread)))
            .collect();
        workers
            .into_iter()
            .try_for_each(|worker| worker.join().expect("worker panicked"))
    })?;
    // Where the threads met: contention per lock kind (LockReport's Debug lists them all).
    eprintln!("{:#?}", fs.lock_stats());
    let worked = opened.elapsed();
    fs.unmount()?;
    eprintln!(
        "open and work {:.3} s, unmount {:.3} s",
        worked.as_secs_f64(),
        (opened.elapsed() - worked).as_secs_f64()
    );
    println!("{count} files created and removed");
    Ok(())
}

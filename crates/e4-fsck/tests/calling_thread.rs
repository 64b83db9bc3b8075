//! `Options::use_calling_thread`, the CLI's setting: the thread that calls `check` is one
//! of its workers, so at one thread no other thread is started (a thread's stack and its
//! allocator pages were 0.35 MiB of `e4 fsck -j 1`'s peak on the small-file benchmark
//! image, where that peak is compared with e2fsck's).

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use e4_fsck::{check, Options, Progress};
use e4_testkit::make_empty_image;

/// Every progress update of a one-thread check that uses its calling thread comes from
/// that thread, and the report is the one a check on workers of its own gives; a second
/// such check from the thread is refused with an error.
#[test]
fn a_one_thread_check_runs_on_the_calling_thread() {
    let image = make_empty_image(&["-t", "ext4"], 32);
    let path = image.path.clone();
    let (report, caller, seen) = std::thread::spawn(move || {
        let seen = Arc::new(Mutex::new(HashSet::new()));
        let record = Arc::clone(&seen);
        let options = Options {
            threads: Some(1),
            force: true,
            progress: Some(Progress(Arc::new(move |_| {
                record.lock().unwrap().insert(std::thread::current().id());
            }))),
            use_calling_thread: true,
        };
        let report = check(&path, &options).unwrap();
        // Rayon keeps the thread registered with that pool: a second such check from it
        // is an error, not a hang or a panic.
        let again = check(&path, &options).unwrap_err();
        assert!(again.to_string().contains("worker threads"), "{again}");
        let seen = seen.lock().unwrap().clone();
        (report, std::thread::current().id(), seen)
    })
    .join()
    .unwrap();
    assert_eq!(seen, HashSet::from([caller]), "the updates' threads");
    let own_workers = Options {
        threads: Some(1),
        force: true,
        ..Options::default()
    };
    let pooled = check(&image.path, &own_workers).unwrap();
    assert_eq!(report.problems, pooled.problems);
    assert_eq!(report.summary, pooled.summary);
}

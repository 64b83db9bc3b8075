//! The engine's warnings on the mount's standard error, one line each, as the CLI's
//! commands show them: damage read around at open ([`Filesystem::warnings`], and a
//! journal left unreplayed by `norecovery`), then damage found while serving
//! ([`Filesystem::take_new_warnings`]: a group whose bitmap disagrees with its
//! descriptor, no longer used), polled once a second by a thread of its own, so no
//! request waits for it.

use std::sync::{Arc, Weak};
use std::time::Duration;

use e4_fs::Filesystem;

/// How often damage found while serving is looked for.
const POLL: Duration = Duration::from_secs(1);

/// Shows `fs`'s warnings for `image` now, and its new ones until the filesystem is gone
/// (the unmount takes the last strong reference; the thread then ends within [`POLL`]).
pub(crate) fn report(image: &str, fs: &Arc<Filesystem>) {
    for line in fs.warnings() {
        show(image, line);
    }
    let watched: Weak<Filesystem> = Arc::downgrade(fs);
    let image = image.to_string();
    // Nowhere to report a thread that cannot start: the warnings then go unshown.
    let _ = std::thread::Builder::new()
        .name("e4-warnings".into())
        .spawn(move || loop {
            std::thread::sleep(POLL);
            let Some(fs) = watched.upgrade() else { return };
            for line in fs.take_new_warnings() {
                show(&image, &line);
            }
        });
}

fn show(image: &str, line: &str) {
    eprintln!("e4: warning: {image}: {line}");
}

//! Mounting an image: open it in the engine, mount it with fuser, serve until unmounted,
//! then write it back and mark it clean.

use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::thread::JoinHandle;
use std::time::Duration;

use e4_fs::{Caller, Filesystem, OpenOptions};
use fuser::{Config, MountOption, Session, SessionACL};
use nix::sys::pthread::{pthread_kill, pthread_self};
use nix::sys::signal::{SigSet, SigmaskHow, Signal};

use crate::attrs::{IdMap, Owners};
use crate::error_policy::{ErrorPolicy, OnError};
use crate::ops::{E4Fuse, Outcome};
use crate::options::MountOptions;
use crate::unmount::MountPoint;

/// How long [`Mounted::unmount`] retries a busy mount before it gives up.
pub const UNMOUNT_PATIENCE: Duration = Duration::from_secs(10);

/// How long an unmount signal's unmount retries a busy mount before it says (once) what
/// holds it; it goes on retrying until the mount is released.
const BUSY_NOTICE: Duration = Duration::from_secs(2);

/// Why a mount failed, or why the image may not have been written back.
#[derive(Debug, thiserror::Error)]
pub enum MountError {
    #[error("cannot open {image}: {source}")]
    Open { image: String, source: e4_fs::Error },
    #[error("{image} can only be mounted read-only ({reason}); mount it with -o ro")]
    ReadOnly { image: String, reason: String },
    #[error("cannot mount on {dir}: {source}")]
    Mount { dir: String, source: io::Error },
    #[error("cannot open /dev/fuse: {0} (a mount needs it readable and writable by this user)")]
    Device(io::Error),
    #[error("cannot unmount {dir}: {reason}")]
    Unmount { dir: String, reason: String },
    #[error("serving the mount failed: {0}")]
    Serve(io::Error),
    #[error("writing the image back failed: {0}")]
    WriteBack(e4_fs::Error),
}

/// A mounted image, served by fuser's worker threads until it is unmounted.
pub struct Mounted {
    /// The mount, unmounted by its directory (fuser's own unmounter gives the mount up
    /// when an unmount fails, so it cannot retry one: crate::unmount).
    mount_point: MountPoint,
    serving: JoinHandle<io::Result<()>>,
    outcome: Outcome,
}

/// Mounts `image` on `dir` and starts serving it; returns once the kernel has the mount.
pub fn mount(image: &Path, dir: &Path, options: &MountOptions) -> Result<Mounted, MountError> {
    // Before the image is opened (which may replay its journal): the kernel would take a
    // regular file as the mount point too, with a root that is not a directory.
    let refused = |source| MountError::Mount {
        dir: dir.display().to_string(),
        source,
    };
    if !std::fs::metadata(dir).map_err(refused)?.is_dir() {
        return Err(refused(io::Error::from(nix::errno::Errno::ENOTDIR)));
    }
    // fuser opens the device itself (fusermount3 only mounts it), so a device this user
    // may not open fails the mount with a bare "Permission denied" that names nothing.
    nix::unistd::access(
        "/dev/fuse",
        nix::unistd::AccessFlags::R_OK | nix::unistd::AccessFlags::W_OK,
    )
    .map_err(|e| MountError::Device(io::Error::from(e)))?;
    // The whole path, for the mount table's source column.
    let shown = std::fs::canonicalize(image)
        .unwrap_or_else(|_| image.to_path_buf())
        .display()
        .to_string();
    let open = OpenOptions {
        writable: options.writable,
        commit_interval: options.commit_interval,
        caller: Caller::of_this_process(),
        replay_journal: options.replay_journal,
        ..OpenOptions::default()
    };
    let fs = Filesystem::open(image, open).map_err(|source| MountError::Open {
        image: shown.clone(),
        source,
    })?;
    if options.writable && !fs.is_writable() {
        return Err(MountError::ReadOnly {
            image: shown,
            reason: fs.read_only_reason().unwrap_or("unknown").to_string(),
        });
    }
    let owners = Owners {
        uid: options.uid.map(|image| IdMap {
            image,
            host: nix::unistd::geteuid().as_raw(),
        }),
        gid: options.gid.map(|image| IdMap {
            image,
            host: nix::unistd::getegid().as_raw(),
        }),
    };
    let outcome = Outcome::default();
    let policy = options
        .errors
        .unwrap_or_else(|| ErrorPolicy::of_superblock(fs.superblock().errors));
    let fs = std::sync::Arc::new(fs);
    crate::warnings::report(&shown, &fs);
    let on_error = OnError::new(policy, &shown);
    let notifier = Arc::new(OnceLock::new());
    // The mount point as /proc/self/mountinfo names it, found before the mount covers it.
    let mount_point = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
    let served = E4Fuse::new(
        fs,
        owners,
        options.fakeroot,
        options.posix_acl,
        outcome.clone(),
        on_error,
        Arc::clone(&notifier),
    );
    let session = Session::new(served, dir, &fuse_config(&shown, options)).map_err(|source| {
        MountError::Mount {
            dir: dir.display().to_string(),
            source,
        }
    })?;
    // Before the first request can need it: `run` starts serving below.
    let _ = notifier.set(session.notifier());
    let mount_point = MountPoint::on(&mount_point);
    let serving = std::thread::Builder::new()
        .name("e4-fuse".into())
        .spawn(move || session.run())
        .map_err(MountError::Serve)?;
    // Opening the root is a request (OPENDIR), sent only once INIT is answered: then the
    // readahead window can be raised (where it cannot, without root, reads come in the
    // kernel's default size). Not statfs, which valgrind runs holding its one lock, so a
    // traced daemon (scripts/mount-instructions.sh) never served it.
    if std::fs::File::open(mount_point.dir()).is_ok() {
        let _ = crate::readahead::raise_readahead(mount_point.dir());
    }
    Ok(Mounted {
        mount_point,
        serving,
        outcome,
    })
}

/// fuser's settings for `options`.
fn fuse_config(image: &str, options: &MountOptions) -> Config {
    let mut mount_options = vec![
        MountOption::FSName(image.to_string()),
        MountOption::Subtype("e4".into()),
        if options.writable {
            MountOption::RW
        } else {
            MountOption::RO
        },
    ];
    if options.kernel_checks_permissions() {
        mount_options.push(MountOption::DefaultPermissions);
    }
    let mut config = Config::default();
    config.mount_options = mount_options;
    config.acl = if options.allow_other {
        SessionACL::All
    } else {
        SessionACL::Owner
    };
    config.n_threads = Some(options.threads);
    // Each worker reads its own clone of the device: requests are taken in parallel, not
    // one thread reading and handing them out.
    config.clone_fd = true;
    config
}

impl Mounted {
    /// Unmounts (as `umount DIR` or `fusermount3 -u DIR` would), retrying for up to
    /// [`UNMOUNT_PATIENCE`] while something holds the mount, then waits as
    /// [`Mounted::wait`]. A mount still busy after that stays mounted and served; its
    /// write-back then follows whatever unmounts it later, unobserved.
    pub fn unmount(self) -> Result<(), MountError> {
        self.try_unmount(UNMOUNT_PATIENCE)?;
        self.wait()
    }

    /// Unmounts, retrying for up to `patience` while something holds the mount (EBUSY);
    /// then fails naming the processes that hold it, leaving it mounted and served, to be
    /// unmounted again or waited for.
    pub fn try_unmount(&self, patience: Duration) -> Result<(), MountError> {
        self.mount_point.unmount_within(patience)
    }

    /// Waits until the mount is gone (`fusermount3 -u DIR`, `umount DIR`, or
    /// [`Mounted::unmount`]) and the image has been written back and marked clean.
    pub fn wait(self) -> Result<(), MountError> {
        let served = self
            .serving
            .join()
            .unwrap_or_else(|_| Err(io::Error::other("a worker thread panicked")));
        match self.outcome.lock().take() {
            Some(written) => {
                served.map_err(MountError::Serve)?;
                written.map_err(MountError::WriteBack)
            }
            // fuser calls destroy as the session ends; it did not, so the engine's drop
            // wrote the image back, with nobody to hear of a failure.
            None => Err(MountError::Serve(served.err().unwrap_or_else(|| {
                io::Error::other("the session ended without writing the image back")
            }))),
        }
    }
}

/// The signals that unmount a mount served by [`mount_until_signal`], as fuse2fs.
const UNMOUNT_SIGNALS: [Signal; 3] = [Signal::SIGINT, Signal::SIGTERM, Signal::SIGHUP];

/// Mounts `image` on `dir` and serves it until it is unmounted or the process gets
/// SIGINT, SIGTERM or SIGHUP, which unmount it; returns once the image is written back.
/// `mounted` runs once the kernel has the mount (a daemon tells its starter then).
///
/// The signals are blocked in the calling thread before any other is started, so every
/// thread of the mount inherits the mask and one thread takes them with `sigwait`; the
/// mask is restored before returning.
pub fn mount_until_signal(
    image: &Path,
    dir: &Path,
    options: &MountOptions,
    mounted: impl FnOnce(),
) -> Result<(), MountError> {
    let mut signals = SigSet::empty();
    for s in UNMOUNT_SIGNALS {
        signals.add(s);
    }
    let previous = signals
        .thread_swap_mask(SigmaskHow::SIG_BLOCK)
        .map_err(|e| MountError::Serve(e.into()))?;
    let result = mount(image, dir, options).and_then(|serving| {
        mounted();
        let mount_point = serving.mount_point.clone();
        let served = Arc::new(AtomicBool::new(false));
        let session_ended = Arc::clone(&served);
        let (tx, rx) = std::sync::mpsc::channel();
        let waiter = std::thread::spawn(move || {
            // OK to ignore: the receiver waits for this message.
            let _ = tx.send(pthread_self());
            // Any of the signals (or the wake-up below) ends the mount; one already gone
            // is not unmounted again.
            if signals.wait().is_ok() {
                unmount_once_released(&mount_point, &session_ended);
            }
        });
        let result = serving.wait();
        served.store(true, Ordering::Release);
        // Unmounted by someone else: wake the waiter with a signal only it takes.
        if let Ok(id) = rx.recv() {
            let _ = pthread_kill(id, Signal::SIGHUP);
        }
        let _ = waiter.join();
        result
    });
    let _ = previous.thread_set_mask();
    result
}

/// An unmount signal's unmount: retries while the mount is busy, saying once on the
/// standard error what holds it, until it is unmounted (by this or by anyone) or the
/// session has ended. A signal is not repeated, so giving up would leave the daemon
/// deaf to the next one; and a forced unmount would fail the holders' writes.
fn unmount_once_released(mount_point: &MountPoint, session_ended: &AtomicBool) {
    let mut said = false;
    while !session_ended.load(Ordering::Acquire) {
        match mount_point.unmount_within(BUSY_NOTICE) {
            Ok(()) => return,
            Err(busy) if !said => {
                eprintln!("e4 mount: {busy}; unmounting it once it is released");
                said = true;
            }
            Err(_) => {}
        }
    }
}

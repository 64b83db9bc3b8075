//! Where a workload runs: e4 in process, the kernel's ext4 on a loop device, fuse2fs,
//! e4's own FUSE mount (`e4 mount`), tmpfs, or any mounted directory. The image-backed targets all start from an image made
//! by the same `mke2fs` command, on tmpfs unless `--keep` names a directory, and are read
//! back by [`LayoutReport`](crate::layout::LayoutReport) after they are unmounted.

use std::io;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::str::FromStr;
use std::time::Duration;

use e4_fs::{Filesystem, OpenOptions};
use e4_host_tools::mount_table::is_mounted;

use crate::fs_ops::{E4Ops, PosixOps};
use crate::workload::{self, Measurement, Params, Workload};

/// `mke2fs` options every image-backed target gets: ext4 defaults, no root reserve (so
/// `near-full` races for the same blocks everywhere), an inode per 2 KiB (so the create
/// workloads do not run out of inodes within a run: a 2 GiB image holds a million), and
/// lazy initialisation so making a large image on tmpfs is quick.
pub const MKE2FS_OPTIONS: [&str; 9] = [
    "-q",
    "-F",
    "-t",
    "ext4",
    "-m0",
    "-i",
    "2048",
    "-E",
    "lazy_itable_init=1,lazy_journal_init=1",
];

/// `statfs` magic of tmpfs (`f_type`'s width differs between architectures).
const TMPFS_MAGIC: u64 = 0x0102_1994;

/// A target, by the name `--targets` takes.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Target {
    E4,
    /// e4 on an image made without a journal (`-O ^has_journal`): what the journal costs.
    E4NoJournal,
    /// The kernel's ext4 on a loop device, mounted with extra `options` (`-o loop,OPTIONS`;
    /// empty for the defaults; `+` separates options, since `--targets` is comma-separated):
    /// `kernel-ext4:nodelalloc` allocates at write time, as e4 does, instead of at
    /// writeback.
    KernelExt4 {
        options: String,
    },
    Fuse2fs,
    /// `e4 mount` (this program, which must be `e4`) in the foreground as fuse2fs is, with
    /// extra mount `options` (`-o rw,OPTIONS`, `+` separating them as for the kernel's
    /// ext4; empty for the defaults): `e4-fuse:threads=1` serves with one worker thread.
    E4Fuse {
        options: String,
    },
    Tmpfs,
    Posix(PathBuf),
}

impl Target {
    /// The kernel's ext4 mounted with its default options (the default baseline).
    pub fn kernel_ext4() -> Target {
        Target::KernelExt4 {
            options: String::new(),
        }
    }

    /// `e4 mount` with its default options.
    pub fn e4_fuse() -> Target {
        Target::E4Fuse {
            options: String::new(),
        }
    }

    pub fn name(&self) -> String {
        match self {
            Target::E4 => "e4".into(),
            Target::E4NoJournal => "e4-nojournal".into(),
            Target::KernelExt4 { options } if options.is_empty() => "kernel-ext4".into(),
            Target::KernelExt4 { options } => format!("kernel-ext4:{options}"),
            Target::Fuse2fs => "fuse2fs".into(),
            Target::E4Fuse { options } if options.is_empty() => "e4-fuse".into(),
            Target::E4Fuse { options } => format!("e4-fuse:{options}"),
            Target::Tmpfs => "tmpfs".into(),
            Target::Posix(dir) => format!("posix:{}", dir.display()),
        }
    }

    /// Whether the target runs on an ext4 image whose layout can be read back.
    pub fn has_image(&self) -> bool {
        matches!(
            self,
            Target::E4
                | Target::E4NoJournal
                | Target::KernelExt4 { .. }
                | Target::Fuse2fs
                | Target::E4Fuse { .. }
        )
    }
}

impl FromStr for Target {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "e4" => Ok(Target::E4),
            "e4-nojournal" => Ok(Target::E4NoJournal),
            "kernel-ext4" => Ok(Target::kernel_ext4()),
            "fuse2fs" => Ok(Target::Fuse2fs),
            "e4-fuse" => Ok(Target::e4_fuse()),
            "tmpfs" => Ok(Target::Tmpfs),
            _ => {
                if let Some(options) = s.strip_prefix("kernel-ext4:").filter(|o| !o.is_empty()) {
                    return Ok(Target::KernelExt4 {
                        options: options.into(),
                    });
                }
                if let Some(options) = s.strip_prefix("e4-fuse:").filter(|o| !o.is_empty()) {
                    return Ok(Target::E4Fuse {
                        options: options.into(),
                    });
                }
                match s.strip_prefix("posix:") {
                    Some(dir) if !dir.is_empty() => Ok(Target::Posix(PathBuf::from(dir))),
                    _ => Err(format!(
                        "unknown target '{s}' (one of: e4, e4-nojournal, kernel-ext4, \
                         kernel-ext4:MOUNT-OPTIONS, fuse2fs, e4-fuse, e4-fuse:MOUNT-OPTIONS, \
                         tmpfs, posix:DIR)"
                    )),
                }
            }
        }
    }
}

/// Why a point could not be measured.
#[derive(Debug)]
pub enum TargetError {
    /// The target cannot be set up on this machine (not root, no FUSE, ...): skip it.
    Unavailable(String),
    /// Set-up worked but the run failed.
    Failed(String),
    /// The workload cannot run on this target at any thread count: skip the pair.
    NotApplicable(String),
}

/// Where scratch images and mount points go: tmpfs when there is one.
pub fn scratch_base() -> PathBuf {
    let shm = Path::new("/dev/shm");
    if is_tmpfs(shm) {
        shm.to_path_buf()
    } else {
        std::env::temp_dir()
    }
}

fn is_tmpfs(dir: &Path) -> bool {
    rustix::fs::statfs(dir).is_ok_and(|s| s.f_type as u64 == TMPFS_MAGIC)
}

/// Whether this process may mount (loop devices, FUSE as root).
pub fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

/// Image size for a run: room for every thread's `--size` of data, and at least 2 GiB.
pub fn image_bytes(params: &Params) -> u64 {
    let data = params.size.saturating_mul(params.threads as u64);
    (data + data / 4 + (512 << 20)).max(2 << 30)
}

/// Makes the image every image-backed target starts from (`journal: false` adds
/// `-O ^has_journal`).
pub fn make_image(path: &Path, bytes: u64, journal: bool) -> Result<(), TargetError> {
    let _ = std::fs::remove_file(path);
    let out = Command::new(e4_host_tools::tool("mke2fs"))
        .args(MKE2FS_OPTIONS)
        .args(if journal {
            &[][..]
        } else {
            &["-O", "^has_journal"][..]
        })
        .arg(path)
        .arg(format!("{}k", bytes / 1024))
        .output()
        .map_err(|e| TargetError::Unavailable(format!("cannot run mke2fs: {e}")))?;
    if !out.status.success() {
        return Err(TargetError::Failed(format!(
            "mke2fs {}: {}",
            path.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(())
}

fn failed(what: &str) -> impl Fn(io::Error) -> TargetError + '_ {
    move |e| TargetError::Failed(format!("{what}: {e}"))
}

/// How long an unmount retries a mount still busy (a process of the workload finishing in
/// it) before it detaches the mount instead and reports the point failed.
const UNMOUNT_PATIENCE: Duration = Duration::from_secs(10);
/// How long a FUSE daemon may take to write its image back and exit after the unmount,
/// before it is killed and the point reported failed: a run never hangs on one.
const DAEMON_PATIENCE: Duration = Duration::from_secs(120);

/// A mount the harness made, undone on drop (also when the workload fails).
struct Mounted {
    dir: PathBuf,
    /// fuse2fs or `e4 mount`, run in the foreground so its exit (after writing the image
    /// back) can be waited for.
    daemon: Option<Child>,
}

impl Mounted {
    /// Unmounts; for a FUSE daemon, waits until it has written the image back and exited.
    fn unmount(mut self) -> Result<(), TargetError> {
        let unmounted = unmount_within(&self.dir, UNMOUNT_PATIENCE);
        let exited = match self.daemon.take() {
            Some(daemon) => wait_for_exit(daemon, DAEMON_PATIENCE),
            None => Ok(()),
        };
        unmounted.and(exited)
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        // Only reached when the run failed before `unmount`: best effort, bounded.
        let _ = unmount_within(&self.dir, UNMOUNT_PATIENCE);
        if let Some(daemon) = self.daemon.take() {
            let _ = wait_for_exit(daemon, DAEMON_PATIENCE);
        }
    }
}

/// `umount DIR`, again every 50 ms while the mount is busy, for up to `patience`; then
/// detached (`umount -l`, so a FUSE daemon can exit once its last user leaves) and an
/// error that says so.
fn unmount_within(dir: &Path, patience: Duration) -> Result<(), TargetError> {
    let started = std::time::Instant::now();
    loop {
        let out = Command::new("umount")
            .arg(dir)
            .output()
            .map_err(failed("umount"))?;
        if out.status.success() || !is_mounted(dir) {
            return Ok(());
        }
        if started.elapsed() >= patience {
            let _ = Command::new("umount")
                .arg("-l")
                .arg(dir)
                .stderr(Stdio::null())
                .status();
            return Err(TargetError::Failed(format!(
                "umount {}: {} (for {} s; detached)",
                dir.display(),
                String::from_utf8_lossy(&out.stderr).trim(),
                patience.as_secs()
            )));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Waits for `daemon` to exit, for up to `patience`; then kills it and says so.
fn wait_for_exit(mut daemon: Child, patience: Duration) -> Result<(), TargetError> {
    let started = std::time::Instant::now();
    loop {
        if daemon
            .try_wait()
            .map_err(failed("the FUSE daemon"))?
            .is_some()
        {
            return Ok(());
        }
        if started.elapsed() >= patience {
            let _ = daemon.kill();
            let _ = daemon.wait();
            return Err(TargetError::Failed(format!(
                "the FUSE daemon (pid {}) had not exited {} s after the unmount; killed",
                daemon.id(),
                patience.as_secs()
            )));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The FUSE daemon of `target` (fuse2fs, or `e4 mount` run by this very program)
/// mounting `image` on `dir` in the foreground (so its exit, after writing the image back,
/// can be waited for), under `taskset -c CPU` when pinned. taskset execs the daemon, so the
/// child is the daemon itself and every thread it starts inherits the CPU; without the
/// program, taskset exits 127 saying so.
fn daemon_command(
    target: &Target,
    image: &Path,
    dir: &Path,
    daemon_cpu: Option<usize>,
) -> Result<Command, TargetError> {
    let (program, before, after): (PathBuf, Vec<String>, &[&str]) = match target {
        Target::Fuse2fs => (e4_host_tools::tool("fuse2fs"), vec![], &["-f", "-o", "rw"]),
        _ => {
            let me = std::env::current_exe()
                .map_err(|e| TargetError::Unavailable(format!("cannot find e4: {e}")))?;
            let options = match target {
                Target::E4Fuse { options } if !options.is_empty() => {
                    format!("rw,{}", options.replace('+', ","))
                }
                _ => "rw".into(),
            };
            (
                me,
                vec!["mount".into(), "-f".into(), "-o".into(), options],
                &[],
            )
        }
    };
    let mut command = match daemon_cpu {
        Some(cpu) => {
            let mut c = Command::new("taskset");
            c.args(["-c", &cpu.to_string()]).arg(&program);
            c
        }
        None => Command::new(&program),
    };
    command.args(before).arg(image).arg(dir).args(after);
    Ok(command)
}

/// Mounts `image` on `dir`: a loop mount for the kernel's ext4, or a FUSE daemon (fuse2fs,
/// `e4 mount`) in the foreground, on `daemon_cpu` when pinned.
fn mount(
    target: &Target,
    image: &Path,
    dir: &Path,
    daemon_cpu: Option<usize>,
) -> Result<Mounted, TargetError> {
    if !is_root() {
        return Err(TargetError::Unavailable(
            "needs root to mount its image".into(),
        ));
    }
    std::fs::create_dir_all(dir).map_err(failed("mount point"))?;
    if let Target::KernelExt4 { options } = target {
        let options = match options.as_str() {
            "" => "loop".to_string(),
            extra => format!("loop,{}", extra.replace('+', ",")),
        };
        let out = Command::new("mount")
            .args(["-t", "ext4", "-o", &options])
            .arg(image)
            .arg(dir)
            .output()
            .map_err(|e| TargetError::Unavailable(format!("cannot run mount: {e}")))?;
        if !out.status.success() {
            return Err(TargetError::Unavailable(format!(
                "mount -o loop failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            )));
        }
        return Ok(Mounted {
            dir: dir.to_path_buf(),
            daemon: None,
        });
    }
    if !Path::new("/dev/fuse").exists() {
        return Err(TargetError::Unavailable(
            "no /dev/fuse on this machine".into(),
        ));
    }
    let name = target.name();
    let mut daemon = daemon_command(target, image, dir, daemon_cpu)?
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| {
            TargetError::Unavailable(match daemon_cpu {
                Some(_) => format!(
                    "cannot run taskset to pin {name}: {e} (--pin needs util-linux's taskset)"
                ),
                None if *target == Target::Fuse2fs => {
                    format!("cannot run fuse2fs: {e} (apt install fuse2fs)")
                }
                None => format!("cannot run {name}: {e}"),
            })
        })?;
    for _ in 0..200 {
        if is_mounted(dir) {
            return Ok(Mounted {
                dir: dir.to_path_buf(),
                daemon: Some(daemon),
            });
        }
        if let Ok(Some(status)) = daemon.try_wait() {
            let mut message = String::new();
            if let Some(mut err) = daemon.stderr.take() {
                let _ = io::Read::read_to_string(&mut err, &mut message);
            }
            return Err(TargetError::Unavailable(format!(
                "{name} exited ({status}): {}",
                message.trim()
            )));
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    // Our own child, stuck before mounting: stop it.
    let _ = daemon.kill();
    let _ = daemon.wait();
    Err(TargetError::Unavailable(format!(
        "{name} did not mount within 5 s"
    )))
}

/// One measured point, and the image it left (image-backed targets).
pub struct Point {
    pub measurement: Measurement,
    pub image: Option<PathBuf>,
}

/// Runs `workload` on `target` in a fresh filesystem under `work` (a scratch directory this
/// point owns; its image is left there for the caller to read back and remove or keep).
pub fn run_point(
    target: &Target,
    workload: Workload,
    params: &Params,
    work: &Path,
    image_name: &str,
) -> Result<Point, TargetError> {
    let fail = |e: io::Error| TargetError::Failed(format!("{}: {e}", workload.name()));
    if workload == Workload::NearFull && !target.has_image() {
        // Filling a shared tmpfs or someone's directory to 95 % is not a benchmark.
        return Err(TargetError::NotApplicable(
            "near-full runs only on image-backed targets (e4, e4-nojournal, kernel-ext4, fuse2fs, e4-fuse)"
                .into(),
        ));
    }
    if workload.works_on_a_tree() && matches!(target, Target::E4 | Target::E4NoJournal) {
        return Err(TargetError::NotApplicable(format!(
            "{} runs tar, rm or git in a directory, and e4 in process has none \
             (run it on e4-fuse, kernel-ext4, fuse2fs, tmpfs or posix:DIR)",
            workload.name()
        )));
    }
    match target {
        Target::E4
        | Target::E4NoJournal
        | Target::KernelExt4 { .. }
        | Target::Fuse2fs
        | Target::E4Fuse { .. } => {
            let image = work.join(image_name);
            make_image(&image, image_bytes(params), *target != Target::E4NoJournal)?;
            let measurement = if matches!(target, Target::E4 | Target::E4NoJournal) {
                let fs = Filesystem::open(&image, OpenOptions::writable())
                    .map_err(|e| TargetError::Failed(format!("e4 open: {e}")))?;
                let ops = E4Ops(fs);
                let m = workload::run(&ops, workload, params).map_err(fail)?;
                ops.0
                    .unmount()
                    .map_err(|e| TargetError::Failed(format!("e4 unmount: {e}")))?;
                m
            } else {
                let dir = work.join(format!("{image_name}.mnt"));
                let mounted = mount(target, &image, &dir, params.placement.daemon_cpu())?;
                let m = workload::run(&PosixOps { root: dir.clone() }, workload, params);
                mounted.unmount()?;
                let _ = std::fs::remove_dir(&dir);
                m.map_err(fail)?
            };
            Ok(Point {
                measurement,
                image: Some(image),
            })
        }
        Target::Tmpfs | Target::Posix(_) => {
            let base = match target {
                Target::Posix(dir) => dir.clone(),
                _ => {
                    let base = scratch_base();
                    if !is_tmpfs(&base) {
                        return Err(TargetError::Unavailable("no tmpfs at /dev/shm".into()));
                    }
                    base
                }
            };
            let dir = base.join(format!("e4-bench-{}-{image_name}", std::process::id()));
            std::fs::create_dir(&dir)
                .map_err(|e| TargetError::Unavailable(format!("{}: {e}", dir.display())))?;
            let m = workload::run(&PosixOps { root: dir.clone() }, workload, params);
            let _ = std::fs::remove_dir_all(&dir);
            Ok(Point {
                measurement: m.map_err(fail)?,
                image: None,
            })
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn kernel_ext4_targets_carry_their_mount_options() {
        let plain: Target = "kernel-ext4".parse().unwrap();
        assert_eq!(plain, Target::kernel_ext4());
        let nodelalloc: Target = "kernel-ext4:nodelalloc+noatime".parse().unwrap();
        assert_eq!(nodelalloc.name(), "kernel-ext4:nodelalloc+noatime");
        assert_ne!(nodelalloc, plain);
        assert!(nodelalloc.has_image());
        assert!("kernel-ext4:".parse::<Target>().is_err());
    }

    use super::*;

    /// A daemon that does not exit after its unmount is killed after the patience, and
    /// the point says so, instead of the run waiting forever; one that exits is waited for.
    #[test]
    fn a_daemon_that_does_not_exit_is_killed_after_the_patience() {
        let stuck = Command::new("sleep").arg("30").spawn().unwrap();
        let pid = stuck.id();
        let started = std::time::Instant::now();
        let err = wait_for_exit(stuck, Duration::from_millis(200)).unwrap_err();
        assert!(started.elapsed() < Duration::from_secs(5));
        assert!(
            matches!(&err, TargetError::Failed(m) if m.contains("killed")),
            "{err:?}"
        );
        assert!(
            !Path::new(&format!("/proc/{pid}")).exists(),
            "pid {pid} still there"
        );
        let quick = Command::new("true").spawn().unwrap();
        wait_for_exit(quick, Duration::from_secs(10)).unwrap();
    }

    /// A directory nothing is mounted on counts as unmounted at once.
    #[test]
    fn unmounting_a_directory_not_mounted_is_done() {
        let dir = std::env::temp_dir().join(format!("e4-bench-unmounted-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        unmount_within(&dir, Duration::from_secs(10)).unwrap();
        std::fs::remove_dir(&dir).unwrap();
    }

    fn program_and_args(c: &Command) -> Vec<String> {
        std::iter::once(c.get_program())
            .chain(c.get_args())
            .map(|a| a.to_string_lossy().into_owned())
            .collect()
    }

    #[test]
    fn a_pinned_fuse2fs_runs_under_taskset_on_the_daemons_cpu() {
        let (image, dir) = (Path::new("/s/a.img"), Path::new("/s/a.mnt"));
        let command = |cpu| daemon_command(&Target::Fuse2fs, image, dir, cpu).unwrap();
        let fuse2fs = e4_host_tools::tool("fuse2fs")
            .to_string_lossy()
            .into_owned();
        assert_eq!(
            program_and_args(&command(Some(3))),
            ["taskset", "-c", "3", &fuse2fs, "/s/a.img", "/s/a.mnt", "-f", "-o", "rw"]
        );
        assert_eq!(
            program_and_args(&command(None)),
            [&fuse2fs, "/s/a.img", "/s/a.mnt", "-f", "-o", "rw"]
        );
    }

    #[test]
    fn the_e4_fuse_target_runs_this_program_as_e4_mount() {
        let (image, dir) = (Path::new("/s/a.img"), Path::new("/s/a.mnt"));
        let me = std::env::current_exe().unwrap().display().to_string();
        let pinned = daemon_command(&Target::e4_fuse(), image, dir, Some(1)).unwrap();
        assert_eq!(
            program_and_args(&pinned),
            ["taskset", "-c", "1", &me, "mount", "-f", "-o", "rw", "/s/a.img", "/s/a.mnt"]
        );
        assert_eq!("e4-fuse".parse::<Target>().unwrap(), Target::e4_fuse());
        assert!(Target::e4_fuse().has_image());
        let one_worker: Target = "e4-fuse:threads=1+commit=1".parse().unwrap();
        assert_eq!(one_worker.name(), "e4-fuse:threads=1+commit=1");
        assert_eq!(
            program_and_args(&daemon_command(&one_worker, image, dir, None).unwrap()),
            [
                &me,
                "mount",
                "-f",
                "-o",
                "rw,threads=1,commit=1",
                "/s/a.img",
                "/s/a.mnt"
            ]
        );
        assert!("e4-fuse:".parse::<Target>().is_err());
    }
}

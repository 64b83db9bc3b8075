//! Issue 23 deliver 4: the README's first command (`scripts/setup.sh && cargo build ... &&
//! scripts/as-root.sh target/release/e4 bench`) works as root without sudo, as a user with
//! sudo, and as a user without it. CI runs the command itself as root only; this test runs
//! the two scripts as root and as an unprivileged user (uid 65534, through `setpriv`), with
//! a stand-in `sudo` that logs its arguments and runs them, and with no sudo at all; the
//! package tools (`dpkg-query`, `apt-get`) and the command run as root are stand-ins too,
//! logging the uid they run as, so nothing is installed. Needs root to switch users: as
//! another user it says so on stderr and passes.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The unprivileged user the scripts run as (`nobody` on Debian).
const USER_ID: u32 = 65534;
/// Seconds one script may run.
const TIMEOUT_S: &str = "30";
/// What setup.sh installs, as its message lists them.
const PACKAGES: &str = "e2fsprogs mount fuse2fs fuse3 fio stress-ng time acl";

/// A folder the unprivileged user can read: copies of the two scripts, and two folders of
/// programs for PATH (`tools`: what the scripts call, stand-ins where the real one would
/// change the machine; `sudo`: the stand-in sudo alone), and the log they all append to.
struct Sandbox {
    _dir: tempfile::TempDir,
    root: PathBuf,
    log: PathBuf,
}

impl Sandbox {
    /// `installed`: what the stand-in dpkg-query calls installed (the rest it calls not).
    fn new(installed: &[&str]) -> Sandbox {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().to_path_buf();
        let log = root.join("log");
        fs::write(&log, "").unwrap();
        fs::set_permissions(&log, fs::Permissions::from_mode(0o666)).unwrap();
        let scripts = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts");
        for name in ["scripts", "tools", "sudo"] {
            fs::create_dir(root.join(name)).unwrap();
        }
        for script in ["as-root.sh", "setup.sh"] {
            fs::copy(scripts.join(script), root.join("scripts").join(script)).unwrap();
        }
        // What the scripts run that needs no stand-in.
        for tool in ["bash", "env", "id", "grep"] {
            let real = which(tool);
            std::os::unix::fs::symlink(&real, root.join("tools").join(tool)).unwrap();
        }
        let log_text = log.display();
        let logging = |what: &str| format!("echo \"{what} $(id -u) $*\" >> {log_text}");
        let installed = installed.join(" ");
        let stand_ins = [
            ("sudo/sudo", format!("{}\nexec \"$@\"", logging("sudo"))),
            (
                "tools/probe",
                format!("{}\necho \"PATH=$PATH\" >> {log_text}", logging("probe")),
            ),
            ("tools/apt-get", logging("apt-get")),
            (
                "tools/dpkg-query",
                format!(
                    "case \" {installed} \" in *\" ${{!#}} \"*) echo 'install ok installed';; \
                     *) exit 1;; esac"
                ),
            ),
            // setup.sh only asks whether cargo is there.
            ("tools/cargo", "exit 0".to_string()),
        ];
        for (name, body) in stand_ins {
            let path = root.join(name);
            fs::write(&path, format!("#!/bin/bash\n{body}\n")).unwrap();
            fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).unwrap();
        }
        for folder in [&root, &root.join("scripts")] {
            fs::set_permissions(folder, fs::Permissions::from_mode(0o755)).unwrap();
        }
        Sandbox {
            _dir: dir,
            root,
            log,
        }
    }

    /// Runs `scripts/SCRIPT ARGS` under a clean environment, as root or as [`USER_ID`],
    /// with the stand-in sudo on PATH or no sudo at all; returns its output and the log.
    fn run(&self, script: &str, args: &[&str], as_user: bool, with_sudo: bool) -> (Output, String) {
        fs::write(&self.log, "").unwrap();
        let mut path = self.root.join("tools").display().to_string();
        if with_sudo {
            path = format!("{}:{path}", self.root.join("sudo").display());
        }
        let mut cmd = Command::new("timeout");
        cmd.arg(TIMEOUT_S);
        if as_user {
            cmd.arg("setpriv").args([
                format!("--reuid={USER_ID}"),
                format!("--regid={USER_ID}"),
                "--clear-groups".to_string(),
            ]);
        }
        cmd.args(["env", "-i"])
            .arg(format!("PATH={path}"))
            .arg("HOME=/nonexistent")
            .arg(self.root.join("scripts").join(script))
            .args(args)
            .current_dir(&self.root);
        let out = cmd.output().unwrap();
        (out, fs::read_to_string(&self.log).unwrap())
    }
}

fn which(tool: &str) -> PathBuf {
    ["/usr/bin", "/bin"]
        .iter()
        .map(|dir| Path::new(dir).join(tool))
        .find(|p| p.exists())
        .unwrap_or_else(|| panic!("{tool} not found in /usr/bin or /bin"))
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Whether this test can switch users; if not, says so on stderr.
fn can_switch_users() -> bool {
    if !rustix::process::geteuid().is_root() {
        eprintln!("skipped: running the scripts as another user needs root");
        return false;
    }
    true
}

/// scripts/as-root.sh: as root it runs the command itself, never sudo; as a user with
/// sudo, through sudo, with PATH carried (mke2fs is in /usr/sbin); as a user without
/// sudo, as the user, after the one documented line.
#[test]
fn as_root_uses_sudo_only_when_needed_and_there() {
    if !can_switch_users() {
        return;
    }
    let sandbox = Sandbox::new(&[]);
    // The PATH the command sees: the caller's with the sbin folders added.
    let path = |with_sudo: bool| {
        let tools = sandbox.root.join("tools").display().to_string();
        match with_sudo {
            true => format!(
                "{}:{tools}:/usr/sbin:/sbin",
                sandbox.root.join("sudo").display()
            ),
            false => format!("{tools}:/usr/sbin:/sbin"),
        }
    };

    let (out, log) = sandbox.run("as-root.sh", &["probe", "a b"], false, true);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        log,
        format!("probe 0 a b\nPATH={}\n", path(true)),
        "as root"
    );
    assert_eq!(stderr(&out), "", "as root");

    let (out, log) = sandbox.run("as-root.sh", &["probe", "a b"], true, true);
    assert!(out.status.success(), "{}", stderr(&out));
    let sudo_path = path(true);
    assert_eq!(
        log,
        format!("sudo {USER_ID} env PATH={sudo_path} probe a b\nprobe {USER_ID} a b\nPATH={sudo_path}\n"),
        "as a user with sudo"
    );
    assert_eq!(stderr(&out), "", "as a user with sudo");

    let (out, log) = sandbox.run("as-root.sh", &["probe", "a b"], true, false);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        log,
        format!("probe {USER_ID} a b\nPATH={}\n", path(false)),
        "as a user without sudo"
    );
    assert_eq!(
        stderr(&out),
        "as-root: not root and no sudo; running probe as nobody, without root\n",
        "as a user without sudo"
    );

    let (out, _) = sandbox.run("as-root.sh", &[], true, true);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        stderr(&out),
        "usage: scripts/as-root.sh COMMAND [ARGS...]\n"
    );
}

/// scripts/setup.sh: with everything installed it asks for root from no one, so a user
/// without sudo gets through; with a package missing it installs it directly as root,
/// through sudo as a user with sudo, and as a user without sudo it says what to do.
#[test]
fn setup_asks_for_root_only_to_install_what_is_missing() {
    if !can_switch_users() {
        return;
    }
    let installed_line = format!("setup: {PACKAGES} are installed\n");
    let all: Vec<&str> = PACKAGES.split(' ').collect();
    let sandbox = Sandbox::new(&all);
    for (as_user, with_sudo) in [(false, false), (true, true), (true, false)] {
        let (out, log) = sandbox.run("setup.sh", &[], as_user, with_sudo);
        let case = format!("all installed, as user {as_user}, sudo {with_sudo}");
        assert!(out.status.success(), "{case}: {}", stderr(&out));
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            installed_line,
            "{case}"
        );
        assert_eq!(log, "", "{case}: nothing installed, no sudo");
    }

    let sandbox = Sandbox::new(&all[..all.len() - 2]);
    let missing = &all[all.len() - 2..].join(" ");
    let (out, log) = sandbox.run("setup.sh", &[], false, true);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        log,
        format!("apt-get 0 update -qq\napt-get 0 install -y -qq {missing}\n"),
        "as root: apt-get directly, sudo on PATH unused"
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), installed_line);

    let (out, log) = sandbox.run("setup.sh", &[], true, true);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        log,
        format!(
            "sudo {USER_ID} apt-get update -qq\napt-get {USER_ID} update -qq\n\
             sudo {USER_ID} apt-get install -y -qq {missing}\napt-get {USER_ID} install -y -qq {missing}\n"
        ),
        "as a user with sudo: apt-get through sudo"
    );

    let (out, log) = sandbox.run("setup.sh", &[], true, false);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(log, "", "as a user without sudo: nothing run");
    assert_eq!(
        stderr(&out),
        format!("setup: run as root, or install sudo, to install: {missing}\n")
    );
}

//! One writer per image (io/image_lock.rs): a second writer is refused while the first has
//! the image open and admitted once it is closed; readers share an image with each other
//! but not with a writer; and, where loop devices work (root; a failure under
//! E4_REQUIRE_KERNEL=1, else skipped with one line), an image file attached to a loop device
//! or mounted through one, and the loop device itself while mounted, are refused; and the
//! kernel cannot mount a loop device e4 is writing.

use std::path::Path;

use e4_fs::{Error, Filesystem, Holder, InUse, OpenOptions};
use e4_testkit::{e2fsck_clean, kernel_comparison_skipped, make_empty_image, LoopDevice};

fn open(path: &Path, writable: bool) -> Result<Filesystem, Error> {
    Filesystem::open(
        path,
        OpenOptions {
            writable,
            ..OpenOptions::default()
        },
    )
}

/// Why opening `path` was refused: it must be for [`Error::InUse`], as EBUSY, in one line.
fn refused(path: &Path, writable: bool) -> InUse {
    match open(path, writable) {
        Ok(_) => panic!(
            "{} opened (writable: {writable}) but should have been refused",
            path.display()
        ),
        Err(Error::InUse(why)) => {
            let line = Error::InUse(why.clone()).to_string();
            assert_eq!(line.lines().count(), 1, "{line}");
            assert_eq!(Error::InUse(why.clone()).errno(), libc_ebusy());
            why
        }
        Err(other) => panic!("refused for the wrong reason: {other}"),
    }
}

fn libc_ebusy() -> i32 {
    nix::errno::Errno::EBUSY as i32
}

/// This process, as a refusal names the holder of a lock it took itself.
fn this_process() -> Option<Holder> {
    Some(Holder {
        pid: std::process::id(),
        command: std::fs::read_to_string("/proc/self/comm")
            .unwrap()
            .trim_end()
            .to_string(),
    })
}

#[test]
fn a_second_writer_is_refused_until_the_first_closes() {
    let image = make_empty_image(&["-t", "ext4"], 16);
    let first = open(&image.path, true).unwrap();
    assert_eq!(
        refused(&image.path, true),
        InUse::Locked {
            holder_writes: true,
            holder: this_process(),
            for_writing: true
        }
    );
    first.unmount().unwrap();
    let again = open(&image.path, true).unwrap();
    // Dropping (not only unmounting) lets go too.
    drop(again);
    open(&image.path, true).unwrap().unmount().unwrap();
    e2fsck_clean(&image.path).unwrap();
}

#[test]
fn readers_share_an_image_but_not_with_a_writer() {
    let image = make_empty_image(&["-t", "ext4"], 16);
    let reader = open(&image.path, false).unwrap();
    let other_reader = open(&image.path, false).unwrap();
    assert_eq!(
        refused(&image.path, true),
        InUse::Locked {
            holder_writes: false,
            holder: this_process(),
            for_writing: true
        }
    );
    drop((reader, other_reader));
    let writer = open(&image.path, true).unwrap();
    // A reader could see what the writer has half written: refused, not torn.
    let why = refused(&image.path, false);
    assert_eq!(
        why,
        InUse::Locked {
            holder_writes: true,
            holder: this_process(),
            for_writing: false
        }
    );
    assert!(why.to_string().contains("half-written"), "{why}");
    writer.unmount().unwrap();
    open(&image.path, false).unwrap();
}

#[test]
fn an_image_the_filesystem_lets_only_be_read_is_read_under_a_shared_lock() {
    // The shared lock needs only the read access a read-only open has: an image file in a
    // read-only bind mount is read (root passes file permissions, a read-only mount not).
    let image = make_empty_image(&["-t", "ext4"], 16);
    let dir = image.path.parent().unwrap();
    let view = tempfile::tempdir().unwrap();
    let bound = std::process::Command::new("timeout")
        .args(["20", "mount", "--bind", "-o", "ro"])
        .arg(dir)
        .arg(view.path())
        .status();
    if !bound.is_ok_and(|s| s.success()) {
        kernel_comparison_skipped("a read-only bind mount", "mount --bind -o ro failed");
        return;
    }
    struct Unbind<'a>(&'a Path);
    impl Drop for Unbind<'_> {
        fn drop(&mut self) {
            let _ = std::process::Command::new("timeout")
                .args(["20", "umount"])
                .arg(self.0)
                .status();
        }
    }
    let _unbind = Unbind(view.path());
    let path = view.path().join(image.path.file_name().unwrap());
    assert!(std::fs::OpenOptions::new().write(true).open(&path).is_err());
    let reader = open(&path, false).unwrap();
    assert!(!reader.is_writable());
}

/// Attaches `image` to a loop device, or reports why the kernel cases cannot run.
fn attach(image: &Path, what: &str) -> Option<LoopDevice> {
    match LoopDevice::attach(image) {
        Ok(device) => Some(device),
        Err(reason) => {
            kernel_comparison_skipped(what, &reason);
            None
        }
    }
}

#[test]
fn an_image_file_attached_to_a_loop_device_is_not_written() {
    let image = make_empty_image(&["-t", "ext2"], 16);
    let Some(device) = attach(&image.path, "a loop-attached image") else {
        return;
    };
    let shown = device.path().display().to_string();
    let why = refused(&image.path, true);
    assert_eq!(
        why,
        InUse::LoopAttached {
            device: shown.clone()
        }
    );
    assert!(why.to_string().contains("losetup -d"), "{why}");
    // Nothing mounts it: reading is safe.
    open(&image.path, false).unwrap();
    // The device itself is not mounted either, so e4 may write through it (exclusively).
    let through_device = open(device.path(), true).unwrap();
    assert!(matches!(
        refused(device.path(), true),
        InUse::DeviceBusy | InUse::Locked { .. }
    ));
    // The exclusive open also keeps the kernel off the device while e4 writes it.
    let kernel = device.mount("rw");
    assert!(
        kernel.is_err(),
        "the kernel mounted a device e4 was writing"
    );
    drop(kernel);
    through_device.unmount().unwrap();
    drop(device);
    open(&image.path, true).unwrap().unmount().unwrap();
    e2fsck_clean(&image.path).unwrap();
}

#[test]
fn a_kernel_mount_refuses_writers_of_the_file_and_of_the_device() {
    for profile in [
        &["-t", "ext2"][..],
        &["-t", "ext4", "-O", "^has_journal"][..],
    ] {
        let image = make_empty_image(profile, 16);
        let Some(device) = attach(&image.path, "a kernel-mounted image") else {
            return;
        };
        let shown = device.path().display().to_string();
        let mount = match device.mount("rw") {
            Ok(mount) => mount,
            Err(reason) => {
                kernel_comparison_skipped("a kernel-mounted image", &reason);
                return;
            }
        };
        let mount_point = mount.path().display().to_string();
        let mounted = |for_writing| InUse::Mounted {
            device: shown.clone(),
            mount_point: mount_point.clone(),
            read_write: true,
            for_writing,
        };
        assert_eq!(refused(&image.path, true), mounted(true));
        assert_eq!(refused(device.path(), true), mounted(true));
        // The kernel writes a read-write mount whenever it likes: a reader is refused too.
        assert_eq!(refused(&image.path, false), mounted(false));
        assert_eq!(refused(device.path(), false), mounted(false));
        std::fs::write(mount.path().join("kernel"), b"written by the kernel").unwrap();
        drop(mount);

        // Read-only: readers are welcome, writers are not.
        let mount = device.mount("ro").unwrap();
        let read_only = InUse::Mounted {
            device: shown.clone(),
            mount_point: mount.path().display().to_string(),
            read_write: false,
            for_writing: true,
        };
        assert_eq!(refused(&image.path, true), read_only);
        assert_eq!(refused(device.path(), true), read_only);
        let reader = open(&image.path, false).unwrap();
        assert!(reader.resolve("/kernel", true).is_ok());
        drop(reader);
        open(device.path(), false).unwrap();
        drop(mount);
        drop(device);
        e2fsck_clean(&image.path).unwrap();
    }
}

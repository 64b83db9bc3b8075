//! Links the `e4` program with packed relative relocations (`DT_RELR`) where the C library
//! it links against can load them. As a position-independent executable `e4` has about
//! 7,500 relocations of its own addresses, which the dynamic loader reads at every start:
//! as `.rela.dyn` entries they are 180 KiB of the file, read in full and so resident in
//! every process; packed they are 2 KiB. `e4 fsck` promises a peak no higher than
//! e2fsck's, and on the small-file benchmark image the two were within 0.1 MiB: this cut
//! e4's peak there by 0.3-0.5 MiB (docs/BENCHMARKS.md, "Packed relative relocations").
//!
//! GNU ld (2.38 on) then makes the program need the C library's `GLIBC_ABI_DT_RELR`
//! version, which glibc has from 2.36: with an older glibc (Ubuntu 22.04's 2.35) the
//! program would link and then not start. So the option is passed only when the
//! `libc.so.6` the C compiler links against defines that version; a linker too old for
//! the option ignores it with a warning.
//!
//! And it places first in the program's code the functions an `e4 fsck` runs
//! (`fsck-link-order.txt`, from a profile: `scripts/fsck-link-order.sh`), so that a check
//! maps fewer pages of code: spread over most of the 3.4 MB of code, they were 2.3 MiB of
//! `e4 fsck`'s peak; placed together, the peak on the small-file benchmark image fell by
//! 1.2 MiB (docs/BENCHMARKS.md, "A link order from a profile"). The option is lld's
//! (`--symbol-ordering-file`, Rust's own linker on x86_64 Linux from 1.90); a name the
//! program no longer has is skipped, so a stale list costs only the pages it no longer
//! saves. It is passed only when a probe program links with it, with the same compiler,
//! target, flags and linker: GNU ld refuses the option.
use std::path::Path;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux") && libc_loads_relr() {
        println!("cargo:rustc-link-arg-bins=-Wl,-z,pack-relative-relocs");
    }
    let manifest_dir = std::env::var("CARGO_MANIFEST_DIR").unwrap_or_default();
    let order = Path::new(&manifest_dir).join("fsck-link-order.txt");
    println!("cargo:rerun-if-changed={}", order.display());
    let ordering = [
        format!("-Wl,--symbol-ordering-file={}", order.display()),
        "-Wl,--no-warn-symbol-ordering".to_string(),
    ];
    if order.is_file() && links_with(&ordering) {
        for arg in ordering {
            println!("cargo:rustc-link-arg-bins={arg}");
        }
    }
}

/// Whether an empty program links with `link_args` added, built by the compiler, for the
/// target, with the flags and the linker this build uses; false if anything fails.
fn links_with(link_args: &[String]) -> bool {
    let var = |name: &str| std::env::var(name).ok();
    let (Some(rustc), Some(target), Some(out_dir)) = (var("RUSTC"), var("TARGET"), var("OUT_DIR"))
    else {
        return false;
    };
    let source = Path::new(&out_dir).join("link_probe.rs");
    if std::fs::write(&source, "fn main() {}\n").is_err() {
        return false;
    }
    let mut probe = Command::new(rustc);
    let flags = var("CARGO_ENCODED_RUSTFLAGS").unwrap_or_default();
    probe.args(flags.split('\x1f').filter(|flag| !flag.is_empty()));
    if let Some(linker) = var("RUSTC_LINKER") {
        probe.arg(format!("-Clinker={linker}"));
    }
    probe
        .args(["--target", &target, "--crate-type", "bin", "-o"])
        .arg(Path::new(&out_dir).join("link_probe"))
        .arg(&source);
    for arg in link_args {
        probe.arg(format!("-Clink-arg={arg}"));
    }
    probe
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|status| status.success())
}

/// Whether the glibc that `cc` links against defines `GLIBC_ABI_DT_RELR`; false if
/// anything on the way cannot be found or read.
fn libc_loads_relr() -> bool {
    let compiler = std::env::var("CC").unwrap_or_else(|_| "cc".to_string());
    let Ok(out) = Command::new(compiler)
        .arg("-print-file-name=libc.so.6")
        .output()
    else {
        return false;
    };
    let path = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let Ok(library) = std::fs::read(&path) else {
        return false;
    };
    let version = b"GLIBC_ABI_DT_RELR";
    library.windows(version.len()).any(|w| w == version)
}

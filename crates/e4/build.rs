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
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux") && libc_loads_relr() {
        println!("cargo:rustc-link-arg-bins=-Wl,-z,pack-relative-relocs");
    }
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

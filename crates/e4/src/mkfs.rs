//! `e4 mkfs`: parses mke2fs's options and hands them to e4-mkfs; with `-d`, fills the new
//! filesystem from a host tree through the engine, as `e4 import` does.

use std::path::{Path, PathBuf};

use e4_mkfs::{make_filesystem, MkfsOptions};

use crate::edit_session::{with_writable_image, ImagePath};
use crate::output::CliError;

/// What `e4 mkfs` was asked for besides the filesystem's own options.
pub struct MkfsRun {
    pub image: PathBuf,
    pub options: MkfsOptions,
    pub source: Option<PathBuf>,
    pub threads: Option<usize>,
    pub quiet: bool,
}

pub fn run(run: MkfsRun) -> Result<(), CliError> {
    let image = run.image.display().to_string();
    let made = make_filesystem(&run.image, &run.options)
        .map_err(|e| CliError::Message(format!("{image}: {e}")))?;
    if !run.quiet {
        println!(
            "{image}: {} blocks of {} bytes, {} inodes, {} groups, journal {} blocks",
            made.blocks, made.block_size, made.inodes, made.groups, made.journal_blocks
        );
    }
    if let Some(source) = &run.source {
        fill(&run.image, &image, source, run.threads)?;
    }
    Ok(())
}

/// Copies `source`'s tree into the root of the new filesystem. A tree that does not fit
/// leaves no image behind: a half-filled one would claim to be the filesystem asked for.
fn fill(path: &Path, image: &str, source: &Path, threads: Option<usize>) -> Result<(), CliError> {
    let result = with_writable_image(image, |fs| {
        crate::import::run(
            fs,
            path,
            source,
            ImagePath(std::ffi::OsStr::new("/")),
            threads,
        )
    });
    if result.is_err() {
        // The image is not what was asked for; remove it so nothing mistakes it for one.
        let _ = std::fs::remove_file(path);
    }
    result
}

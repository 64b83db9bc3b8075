//! `e4 put IMG HOST_FILE PATH`: copy one host file into the image as a new regular file,
//! with its data (holes kept), mode, owner, times and xattrs, as `e4 import` copies each
//! file. PATH may be an existing directory, which receives the file under its host name;
//! an existing file is not replaced.

use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use e4_fs::Filesystem;

use crate::edit_session::{describe, ImagePath};
use crate::host_copy::{
    copy_data, copy_xattrs, creator_of, final_attributes, CopyError, XattrSource,
};
use crate::host_metadata::HostMetadata;
use crate::output::CliError;
use crate::tree_edit::destination;

pub fn run(fs: &Filesystem, host: &Path, path: ImagePath<'_>) -> Result<(), CliError> {
    // A host symlink is followed, as cp(1) does: what is put is the file's contents.
    let meta = HostMetadata::of_path(host).map_err(|e| format!("{}: {e}", host.display()))?;
    if !meta.is_file() {
        return Err(format!("{}: not a regular file", host.display()).into());
    }
    let (parent, name, shown) = destination(fs, path, host.as_os_str().as_bytes())?;
    let shown = ImagePath::from_bytes(&shown);
    let ino = fs
        .create(parent, name, creator_of(&meta))
        .map_err(|e| describe(shown, &e))?;
    let copied = std::fs::File::open(host)
        .map_err(|e| CopyError::Host(format!("{}: cannot open: {e}", host.display())))
        .and_then(|file| copy_data(fs, ino, &file, host, meta.size()));
    if let Err(e) = copied {
        // Half a file is worse than none: the name goes again (best effort; the unmount
        // that follows keeps the image consistent either way).
        let _ = fs.unlink(parent, name);
        return Err(match e {
            CopyError::Host(line) => line,
            CopyError::Image(e) => describe(shown, &e),
        }
        .into());
    }
    let xattrs = copy_xattrs(fs, ino, XattrSource::Path(host));
    fs.setattr(ino, &final_attributes(&meta))
        .map_err(|e| describe(shown, &e))?;
    xattrs.map_err(|reason| format!("{}: {reason}", shown.shown()).into())
}

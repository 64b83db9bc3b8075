//! `e4 stat`.

use e4_fs::Filesystem;

use crate::ls::mode_string;
use crate::time_format::format_timestamp;

pub fn run(fs: &Filesystem, path: &str) -> Result<(), String> {
    let fail = |e: e4_fs::Error| e.to_string();
    let ino = fs.resolve(path, false).map_err(fail)?;
    let m = fs.metadata(ino).map_err(fail)?;
    println!("  File: {path}");
    println!(
        "  Size: {:<15} Blocks: {:<10} Type: {:?}",
        m.size, m.blocks, m.file_type
    );
    println!(
        "Inode: {:<15} Links: {:<10} Generation: {}",
        m.ino, m.nlink, m.generation
    );
    println!(
        "Access: ({:04o}/{})  Uid: {:>5}  Gid: {:>5}",
        m.permissions,
        mode_string(&m),
        m.uid,
        m.gid
    );
    if m.rdev != (0, 0) {
        println!("Device: {},{}", m.rdev.0, m.rdev.1);
    }
    println!("Flags: {:#x}", m.flags);
    println!("Access: {}", format_timestamp(m.atime));
    println!("Modify: {}", format_timestamp(m.mtime));
    println!("Change: {}", format_timestamp(m.ctime));
    match m.crtime {
        Some(t) => println!(" Birth: {}", format_timestamp(t)),
        None => println!(" Birth: -"),
    }
    Ok(())
}

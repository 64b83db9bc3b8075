//! `e4`: inspect, read and export ext2/3/4 images in user space.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod cat;
mod export;
mod info;
mod ls;
mod stat;
mod time_format;

#[derive(Parser)]
#[command(
    name = "e4",
    version,
    about = "ext4 in user space: read and export ext2/3/4 images without root"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Print the superblock and a summary of every block group (like `dumpe2fs`).
    Info {
        /// Image file or block device.
        image: String,
        /// Also list every block group.
        #[arg(short, long)]
        groups: bool,
    },
    /// List a directory (or show one file).
    Ls {
        image: String,
        /// Path inside the image; the root by default.
        #[arg(default_value = "/")]
        path: String,
        /// Long listing: mode, links, owner, group, size, time.
        #[arg(short)]
        long: bool,
    },
    /// Show an inode's attributes (like `stat`; the last symlink is not followed).
    Stat { image: String, path: String },
    /// Write a file's contents to standard output.
    Cat { image: String, path: String },
    /// Extract the whole tree into DIR with modes, owners, times, links and xattrs, using
    /// all cores.
    Export {
        image: String,
        /// Destination directory; created if missing, must be empty if present.
        dir: String,
    },
}

fn run(cli: Cli) -> Result<(), String> {
    let open = |image: &str| {
        e4_fs::Filesystem::open(image, e4_fs::OpenOptions::default())
            .map_err(|e| format!("{image}: {e}"))
    };
    match cli.command {
        Command::Info { image, groups } => info::run(&open(&image)?, groups),
        Command::Ls { image, path, long } => ls::run(&open(&image)?, &path, long),
        Command::Stat { image, path } => stat::run(&open(&image)?, &path),
        Command::Cat { image, path } => cat::run(&open(&image)?, &path),
        Command::Export { image, dir } => export::run(&open(&image)?, std::path::Path::new(&dir)),
    }
}

fn main() -> ExitCode {
    // A panic is a bug in e4; report it on one line rather than with a backtrace.
    std::panic::set_hook(Box::new(|info| {
        eprintln!("e4: internal error (please report): {info}");
    }));
    let cli = Cli::parse();
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("e4: {message}");
            ExitCode::FAILURE
        }
    }
}

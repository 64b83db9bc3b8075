#!/usr/bin/env bash
# Installs what e4 and its tests need on Debian or Ubuntu: e2fsprogs (mke2fs, e2fsck,
# debugfs, e2freefrag, e4defrag: the demo and the test oracles), mount (util-linux, for the
# kernel comparisons), fuse2fs (the fuse2fs target of `e4 bench`), fuse3 (fusermount3,
# which `e4 mount` uses to mount and unmount without root), fio and stress-ng (the
# FUSE mount's integrity tests, crates/e4-fuse/tests/integrity.rs), and GNU time (the peak
# memory of a checker in crates/e4/tests/bounded.rs), and acl (getfacl and setfacl, the
# oracles of `e4 getfacl`/`e4 setfacl` in crates/e4/tests/flag_and_acl_commands.rs).
# Works as root (no sudo needed) and as a user with sudo. Rust itself comes from rustup.
set -euo pipefail
packages=(e2fsprogs mount fuse2fs fuse3 fio stress-ng time acl)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
# Root is asked for only when something is missing, so a user without sudo gets through
# once the packages are installed.
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ]; then
    as_root=()
  elif command -v sudo >/dev/null; then
    as_root=(sudo)
  else
    echo "setup: run as root, or install sudo, to install: ${missing[*]}" >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  "${as_root[@]}" apt-get update -qq
  "${as_root[@]}" apt-get install -y -qq "${missing[@]}" >/dev/null
fi
if ! command -v cargo >/dev/null && [ ! -x "$HOME/.cargo/bin/cargo" ]; then
  echo "setup: cargo not found; install Rust with rustup (https://rustup.rs), then rerun" >&2
  exit 1
fi
echo "setup: ${packages[*]} are installed"

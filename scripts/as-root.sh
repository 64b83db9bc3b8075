#!/usr/bin/env bash
# Runs a command as root where that is possible, so one documented command works for every
# newcomer: as root it runs directly (a fresh Debian machine has no sudo), as a user with sudo
# it runs through sudo, and with neither it runs as the user after one line saying so (e4
# bench then skips its kernel-ext4 column, which needs root for a loop device).
# mke2fs and e2fsck live in /sbin, which a non-root user's PATH may lack on Debian.
set -euo pipefail
if [ $# -eq 0 ]; then
  echo "usage: scripts/as-root.sh COMMAND [ARGS...]" >&2
  exit 2
fi
export PATH="$PATH:/usr/sbin:/sbin"
if [ "$(id -u)" = 0 ]; then
  exec "$@"
elif command -v sudo >/dev/null; then
  exec sudo env "PATH=$PATH" "$@"
else
  echo "as-root: not root and no sudo; running $1 as $(id -un), without root" >&2
  exec "$@"
fi

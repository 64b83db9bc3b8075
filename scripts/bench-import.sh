#!/usr/bin/env bash
# `e4 import` and `e4 mkfs -d` against `mke2fs -d` copying the same host tree into the same
# fresh image, on
# tmpfs, cache warm: wall time, user+system CPU and peak memory (GNU time) per run, RUNS
# times. Every image made is checked with `e2fsck -fn`.
# Usage: scripts/bench-import.sh HOST_DIR [SIZE_MIB] [RUNS] [THREADS...]
#   (defaults: 4096 MiB, 5 runs, threads 1 2)
set -euo pipefail
# e2fsprogs is in /usr/sbin and /sbin, off a normal user's PATH.
PATH="$PATH:/usr/sbin:/sbin"
src=$1; size=${2:-4096}; runs=${3:-5}; shift 3 || shift $#
threads=("${@:-1}"); [ $# -gt 0 ] || threads=(1 2)
e4=$(command -v e4 || echo "$(dirname "$0")/../target/release/e4")
out=$(mktemp -d -p /dev/shm)
trap 'rm -rf "$out"' EXIT
tar -cf - "$src" 2>/dev/null > /dev/null   # warm the page cache
fresh() { rm -f "$out/img"; mke2fs -q -F -t ext4 "$out/img" "${size}M"; }
measure() {  # label, command...
  local label=$1; shift
  for run in $(seq "$runs"); do
    rm -f "$out/img"
    case $label in mke2fs* | "e4 mkfs"*) ;; *) fresh ;; esac
    /usr/bin/time -f "$label run $run: %e s wall, %U s user, %S s sys, %M KiB peak" "$@" \
      > /dev/null 2> "$out/err" || { cat "$out/err"; exit 1; }
    tail -1 "$out/err"
    e2fsck -fn "$out/img" > /dev/null || { echo "$label run $run: e2fsck -fn failed"; exit 1; }
  done
}
# mke2fs -d formats and copies in one run; the empty format's time is shown beside it (e4
# import's runs start from an image formatted before the clock starts).
measure "mke2fs (empty)" mke2fs -q -F -t ext4 "$out/img" "${size}M"
measure "mke2fs -d" mke2fs -q -F -t ext4 -d "$src" "$out/img" "${size}M"
for t in "${threads[@]}"; do
  measure "e4 import -j $t" "$e4" import -j "$t" "$out/img" "$src"
done
# e4 mkfs -d formats and copies in one run, as mke2fs -d does; with SOURCE_DATE_EPOCH it is
# reproducible, which runs the copy on one thread.
for t in "${threads[@]}"; do
  measure "e4 mkfs -d -j $t" "$e4" mkfs -q -j "$t" -d "$src" "$out/img" "${size}M"
done
measure "e4 mkfs -d SOURCE_DATE_EPOCH" env SOURCE_DATE_EPOCH=1700000000 \
  "$e4" mkfs -q -d "$src" "$out/img" "${size}M"

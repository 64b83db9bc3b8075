#!/usr/bin/env bash
# `e4 import` and `e4 mkfs -d` against `mke2fs -d` copying the same host tree into the same
# fresh image, on tmpfs, cache warm: wall time, user+system CPU and peak memory (GNU time)
# per run, RUNS times, interleaved (run 1 of every tool, then run 2, ...), so a slow minute
# on a shared machine spreads over every tool instead of landing on one. Every image made
# is checked with `e2fsck -fn`; the reproducible (SOURCE_DATE_EPOCH) images of every thread
# count and run must be equal to the byte. The load average is printed before each round.
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
measure() {  # label, run, command...
  local label=$1 run=$2; shift 2
  rm -f "$out/img"
  case $label in mke2fs* | "e4 mkfs"*) ;; *) fresh ;; esac
  /usr/bin/time -f "$label run $run: %e s wall, %U s user, %S s sys, %M KiB peak" "$@" \
    > /dev/null 2> "$out/err" || { cat "$out/err"; exit 1; }
  tail -1 "$out/err"
  e2fsck -fn "$out/img" > /dev/null || { echo "$label run $run: e2fsck -fn failed"; exit 1; }
}
for run in $(seq "$runs"); do
  echo "# round $run, load before: $(cut -d' ' -f1-3 /proc/loadavg)"
  # mke2fs -d formats and copies in one run; the empty format's time is shown beside it (e4
  # import's runs start from an image formatted before the clock starts).
  measure "mke2fs (empty)" "$run" mke2fs -q -F -t ext4 "$out/img" "${size}M"
  measure "mke2fs -d" "$run" mke2fs -q -F -t ext4 -d "$src" "$out/img" "${size}M"
  for t in "${threads[@]}"; do
    measure "e4 import -j $t" "$run" "$e4" import -j "$t" "$out/img" "$src"
  done
  # e4 mkfs -d formats and copies in one run, as mke2fs -d does.
  for t in "${threads[@]}"; do
    measure "e4 mkfs -d -j $t" "$run" "$e4" mkfs -q -j "$t" -d "$src" "$out/img" "${size}M"
  done
  # Reproducible: the walk decides every placement, -j - 1 threads copy the data.
  for t in "${threads[@]}"; do
    measure "e4 mkfs -d -j $t SOURCE_DATE_EPOCH" "$run" env SOURCE_DATE_EPOCH=1700000000 \
      "$e4" mkfs -q -j "$t" -d "$src" "$out/img" "${size}M"
    sum=$(cksum < "$out/img")
    [ "${reproducible:-$sum}" = "$sum" ] ||
      { echo "SOURCE_DATE_EPOCH -j $t run $run: the image differs from the first one"; exit 1; }
    reproducible=$sum
  done
done

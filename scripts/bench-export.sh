#!/usr/bin/env bash
# `e4 export` against `debugfs -R "rdump / OUT"` on the same image, output on tmpfs, cache
# warm: wall time, user+system CPU and peak memory (GNU time) for each run, RUNS times.
# Usage: scripts/bench-export.sh IMAGE [RUNS] [THREADS...]   (default: 5 runs, 1 2 threads)
set -euo pipefail
# e2fsprogs is in /usr/sbin and /sbin, off a normal user's PATH.
PATH="$PATH:/usr/sbin:/sbin"
image=$1; runs=${2:-5}; shift 2 || true
threads=("${@:-1}"); [ $# -gt 0 ] || threads=(1 2)
e4=$(command -v e4 || echo "$(dirname "$0")/../target/release/e4")
out=$(mktemp -d -p /dev/shm)
trap 'rm -rf "$out"' EXIT
cat "$image" > /dev/null   # warm the page cache
measure() {  # label, command...
  local label=$1; shift
  for run in $(seq "$runs"); do
    rm -rf "$out/t"; mkdir "$out/t"
    /usr/bin/time -f "$label run $run: %e s wall, %U s user, %S s sys, %M KiB peak" "$@" \
      > /dev/null 2> "$out/err" || { cat "$out/err"; exit 1; }
    tail -1 "$out/err"
  done
}
measure "debugfs rdump" debugfs -R "rdump / $out/t" "$image"
for t in "${threads[@]}"; do
  measure "e4 export -j $t" "$e4" export -j "$t" "$image" "$out/t"
done

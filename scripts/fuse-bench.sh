#!/usr/bin/env bash
# e4's FUSE mount beside fuse2fs: the same `e4 bench` workloads through each mount (e4's
# as a posix:DIR target), in interleaved rounds, under each CPU placement: same (daemon
# and workload on CPU 0: every hand-off a context switch), split (daemon on CPU 0,
# workload on CPU 1: every hand-off a cross-CPU wake), none (the scheduler decides).
# Prints the median ops/s of the rounds with their range. Needs root, fuse2fs, fusermount3,
# and a release build (cargo build --release -p e4). Images live on /dev/shm, as
# e4 bench's own fuse2fs target keeps its image there with --keep.
#   ROUNDS=5 WORKLOADS="create fallocate2" THREADS=1,2 DURATION=2 scripts/fuse-bench.sh
set -euo pipefail
# e2fsprogs is in /usr/sbin and /sbin, off a normal user's PATH.
PATH="$PATH:/usr/sbin:/sbin"
cd "$(dirname "$0")/.."
e4=${E4:-target/release/e4}
rounds=${ROUNDS:-5}
workloads=${WORKLOADS:-create fallocate2}
threads=${THREADS:-1,2}
duration=${DURATION:-2}
work=$(mktemp -d /dev/shm/e4-fuse-bench.XXXXXX)
mnt=$work/mnt
mkdir -p "$mnt" "$work/json"
cleanup() {
  fusermount3 -uz "$mnt" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
for round in $(seq "$rounds"); do
  for pin in same split none; do
    daemon_cpu=()
    [ "$pin" = none ] || daemon_cpu=(taskset -c 0)
    for workload in $workloads; do
      mke2fs -q -F -t ext4 -m0 -i 2048 -E lazy_itable_init=1,lazy_journal_init=1 \
        "$work/e4.img" 2G
      "${daemon_cpu[@]}" "$e4" mount -f -o "threads=2" "$work/e4.img" "$mnt" &
      daemon=$!
      for _ in $(seq 100); do mountpoint -q "$mnt" && break; sleep 0.05; done
      timeout 300 "$e4" bench "$workload" --targets "posix:$mnt" --threads "$threads" \
        --duration "$duration" --pin "$pin" \
        --json "$work/json/e4-fuse-$workload-$pin-$round.json" >/dev/null
      fusermount3 -u "$mnt"
      wait "$daemon"
      timeout 300 "$e4" bench "$workload" --targets fuse2fs --threads "$threads" \
        --duration "$duration" --pin "$pin" --keep "$work/f2" \
        --json "$work/json/fuse2fs-$workload-$pin-$round.json" >/dev/null
    done
  done
done
python3 - "$work/json" <<'PY'
import json, os, statistics, sys
from collections import defaultdict
runs = defaultdict(list)
for name in sorted(os.listdir(sys.argv[1])):
    target = "e4 mount" if name.startswith("e4-fuse") else "fuse2fs"
    for r in json.load(open(os.path.join(sys.argv[1], name)))["records"]:
        runs[(r["workload"], r["pin"], r["threads"], target)].append(r["ops_per_sec"])
print(f"{'workload':<11}{'pin':<7}{'threads':>7}  {'target':<9}{'median ops/s':>13}  range (n)")
for (w, p, t, target), v in sorted(runs.items()):
    print(f"{w:<11}{p:<7}{t:>7}  {target:<9}{statistics.median(v):>13.0f}  "
          f"{min(v):.0f}-{max(v):.0f} ({len(v)})")
PY

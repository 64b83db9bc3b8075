#!/usr/bin/env bash
# Instructions and FUSE requests per operation of e4's mount: callgrind on the daemon
# (`e4 mount -f -o threads=1`, so every request is served on one traced thread), whose
# totals do not move with the machine's load, as wall-clock figures do on the shared VM.
# Each workload runs twice on a fresh image on /dev/shm: its set-up alone, then its set-up
# and N operations; the difference over N is what one operation costs the daemon, and the
# handlers' call counts over N are the requests the kernel sent for it.
#
# Usage: scripts/mount-instructions.sh [-n N] [WORKLOAD...]   (root; valgrind, fuse3)
#   create      open(O_CREAT|O_EXCL) and close of a new name in one directory
#   unlink      unlink of one of N files made in the set-up, 2 s later (as in `e4 bench
#               unlink`, whose set-up takes longer than the mount's entry timeout once was)
#   missing     a `stat` of a name that is not there (the same name each time)
#   append      a 4 KiB write to a file opened O_APPEND
#   write       1 MiB of a sequential write in 1 MiB requests (then one fsync)
#   read        1 MiB of a sequential read of a file written in the set-up, its pages
#               dropped from the kernel's cache first (posix_fadvise DONTNEED)
#   fallocate2  will-it-scale's fallocate2: an 8 KiB fallocate at the end, ftruncate to 0
#               at 1 MiB (one operation = one fallocate)
# E4=PATH picks the binary (default target/release/e4).
set -euo pipefail

n=2000
while [ $# -gt 0 ]; do
  case $1 in
    -n) n=$2; shift 2 ;;
    -*) sed -n '2,/^set -e/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 2 ;;
    *) break ;;
  esac
done
[ $# -gt 0 ] || set -- create unlink missing append fallocate2 write read
e4=$(realpath "${E4:-target/release/e4}")
work=$(mktemp -d /dev/shm/e4-instructions.XXXXXX)
cleanup() {
  mountpoint -q "$work/mnt" && umount -l "$work/mnt"
  [ -n "${KEEP:-}" ] || rm -rf "$work"
}
trap cleanup EXIT
mkdir "$work/mnt"

# The workload's Python: set-up, then `count` operations.
workload() {
  python3 - "$1" "$2" "$work/mnt" <<'PY'
import os, sys, time
what, count, root = sys.argv[1], int(sys.argv[2]), sys.argv[3]
n = int(os.environ["N"])
d = os.path.join(root, "d")
os.mkdir(d)
if what == "create":
    for i in range(count):
        os.close(os.open(f"{d}/{i}", os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
elif what == "unlink":
    for i in range(n):
        os.close(os.open(f"{d}/{i}", os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
    time.sleep(2)
    for i in range(count):
        os.unlink(f"{d}/{i}")
elif what == "missing":
    for _ in range(count):
        try:
            os.stat(f"{d}/absent")
            sys.exit("absent is there")
        except FileNotFoundError:
            pass
elif what == "append":
    fd = os.open(f"{d}/f", os.O_CREAT | os.O_WRONLY | os.O_APPEND, 0o644)
    block = b"a" * 4096
    for _ in range(count):
        os.write(fd, block)
    os.close(fd)
elif what == "write":
    fd = os.open(f"{d}/f", os.O_CREAT | os.O_WRONLY, 0o644)
    mib = b"w" * (1 << 20)
    for _ in range(count):
        os.write(fd, mib)
    os.fsync(fd)
    os.close(fd)
elif what == "read":
    fd = os.open(f"{d}/f", os.O_CREAT | os.O_RDWR, 0o644)
    mib = b"r" * (1 << 20)
    for _ in range(n):
        os.write(fd, mib)
    os.fsync(fd)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    os.lseek(fd, 0, os.SEEK_SET)
    for _ in range(count):
        assert len(os.read(fd, 1 << 20)) == 1 << 20
    os.close(fd)
elif what == "fallocate2":
    fd = os.open(f"{d}/f", os.O_CREAT | os.O_RDWR, 0o644)
    size = 0
    for _ in range(count):
        os.posix_fallocate(fd, size, 8192)
        size += 8192
        if size >= 1 << 20:
            os.ftruncate(fd, 0)
            size = 0
    os.close(fd)
else:
    sys.exit(f"unknown workload {what}")
PY
}

# Runs one workload with `count` operations under callgrind; leaves $work/$1.$2.out.
traced() {
  local what=$1 count=$2 img=$work/img out=$work/$1.$2.out
  rm -f "$img"
  truncate -s 4G "$img"
  mke2fs -q -F -t ext4 "$img"
  valgrind --tool=callgrind --callgrind-out-file="$out" "$e4" mount -f -o threads=1 "$img" "$work/mnt" \
    2>"$work/valgrind.log" &
  local daemon=$!
  for _ in $(seq 600); do mountpoint -q "$work/mnt" && break; sleep 0.1; done
  mountpoint -q "$work/mnt" || { cat "$work/valgrind.log" >&2; exit 1; }
  N=$n timeout 600 bash -c "$(declare -f workload); work=$work; workload $what $count"
  umount "$work/mnt"
  timeout 120 tail --pid="$daemon" -f /dev/null
  wait "$daemon"
}

total() { callgrind_annotate "$1" | awk '/PROGRAM TOTALS/ { gsub(",", "", $1); print $1 }'; }

# Each handler's inclusive instructions and calls from fuser's dispatch, as
# "name instructions calls" (callgrind_annotate's caller tree: "N (P%)  < CALLER (Kx)"
# lines, then "N (P%)  *  FUNCTION").
handlers() {
  callgrind_annotate --threshold=100 --auto=no --inclusive=yes --tree=caller "$1" 2>/dev/null | awk '
    /< .*RequestWithSender::dispatch \([0-9,]+x\)/ { c = $0; sub(/.*\(/, "", c); sub(/x\).*/, "", c); gsub(",", "", c); calls = c; next }
    /\* .*<e4_fuse::ops::E4Fuse as fuser::Filesystem>::/ && calls != "" {
      name = $0; sub(/.*Filesystem>::/, "", name); sub(/[^a-z_].*/, "", name)
      v = $1; gsub(",", "", v); print name, v, calls
    }
    /^$/ { calls = "" }' | sort -k1,1 -k2,2nr | sort -u -k1,1
}

printf '%-11s %12s   %s\n' workload "instr/op" "per op: requests (instructions each)"
for what in "$@"; do
  traced "$what" 0
  traced "$what" "$n"
  base=$(total "$work/$what.0.out") full=$(total "$work/$what.$n.out")
  per=$(( (full - base) / n ))
  # Requests per operation: the handlers' call counts, less the set-up's.
  line=$(join -a 2 -e 0 -o 2.1,1.2,1.3,2.2,2.3 \
      <(handlers "$work/$what.0.out" | sort) <(handlers "$work/$what.$n.out" | sort) |
    awk -v n="$n" '{ c = ($5 - $3) / n; i = ($4 - $2) / n
                     if (c >= 0.01) printf "%s %.2f (%d)  ", $1, c, (c > 0 ? i / c : 0) }')
  printf '%-11s %12s   %s\n' "$what" "$per" "$line"
done

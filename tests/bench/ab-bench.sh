#!/usr/bin/env bash
# ab-bench.sh - two builds of `diskimg serve` against each other, to show that
# a change (a refactor, a tuning) does not make serving slower.
#
# Usage: ab-bench.sh -a OLD -b NEW [-t SEC] [-r ROUNDS] [-c CACHE] [-d DIR] [-w LIST]
#   -a PATH    the reference diskimg binary (e.g. a build of main before the change)
#   -b PATH    the diskimg binary under test
#   -t SEC     seconds per workload (default 5)
#   -r N       rounds (default 5); odd rounds run A first, even rounds B first
#   -c MODE    the servers' --cache mode (default writeback)
#   -d DIR     scratch directory (default /var/tmp/diskimg-ab-bench)
#   -w LIST    comma-separated workloads (default: all below)
#
# Workloads (nbd-fua-client.py, one connection, 4 KiB at random offsets unless
# said otherwise; servers run with -t --cache=MODE on a unix socket):
#   raw-read-qd1 raw-read-qd16     reads of a 1 GiB random-data raw image
#   raw-fua-qd16                   writes with FUA into it
#   raw-wflush-qd1                 write, then FLUSH, one at a time
#   qcow2-alloc-qd16               writes into a fresh, empty 64 GiB qcow2
#   qcow2-alloc-fua-qd1            the same with FUA, one at a time
#   qcow2-alloc-fua-qd16           the same with FUA, 16 in flight (not in the default set)
#   qcow2-over-fua-qd16            overwrites with FUA (not in the default set)
#   qcow2-over-qd16                writes into a fully allocated 1 GiB qcow2
#   qcow2-read-qd16                reads of that image
# Every case starts its server on a fresh copy of its image, warmed in the
# page cache alike for both builds.
#
# Output: one line per case, then per workload the median of each build and
# the median (min-max) of the per-round ratio B/A (above 1: B is faster).
# Only processes started here are stopped, by PID.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
PY=/usr/bin/python3 # has python3-libnbd; the PATH python3 may not
CLIENT=$HERE/nbd-fua-client.py
A="" B="" RUNTIME=5 ROUNDS=5 CACHE=writeback DIR=/var/tmp/diskimg-ab-bench
WORKLOADS=(raw-read-qd1 raw-read-qd16 raw-fua-qd16 raw-wflush-qd1
  qcow2-alloc-qd16 qcow2-alloc-fua-qd1 qcow2-over-qd16 qcow2-read-qd16)

while getopts "a:b:t:r:c:d:w:h" opt; do
  case $opt in
    a) A=$OPTARG ;; b) B=$OPTARG ;; t) RUNTIME=$OPTARG ;; r) ROUNDS=$OPTARG ;; c) CACHE=$OPTARG ;;
    d) DIR=$OPTARG ;; w) IFS=, read -r -a WORKLOADS <<<"$OPTARG" ;;
    h) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) exit 2 ;;
  esac
done
for bin in "$A" "$B"; do
  [ -x "$bin" ] || { echo "ab-bench: -a and -b must name diskimg binaries" >&2; exit 2; }
done
for t in qemu-img "$PY"; do
  command -v "$t" >/dev/null || { echo "ab-bench: $t is required" >&2; exit 1; }
done

# shellcheck source=bench-lib.sh
. "$HERE/bench-lib.sh"
mkdir -p "$DIR"
SERVER=""
cleanup() {
  if [ -n "$SERVER" ]; then kill "$SERVER" 2>/dev/null || true; wait "$SERVER" 2>/dev/null || true; fi
  rm -rf "$DIR"
}
trap cleanup EXIT

RAW=$DIR/base.raw OVER=$DIR/over.qcow2
if [ ! -s "$RAW" ]; then
  head -c 1G /dev/urandom >"$RAW"
  qemu-img convert -f raw -O qcow2 "$RAW" "$OVER"
fi

client_args() { # WORKLOAD
  local qd=${1##*-qd}
  case $1 in
    *-read-*) echo "--mode read --qd $qd" ;;
    *-fua-*) echo "--mode fua --qd $qd" ;;
    *-wflush-*) echo "--mode wflush --qd 1" ;;
    *) echo "--mode write --qd $qd" ;;
  esac
}

run_case() { # BIN WORKLOAD -> value on stdout
  local img fmt sock=$DIR/run.sock v
  case $2 in
    raw-*) img=$DIR/run.raw fmt=raw; cp "$RAW" "$img" ;;
    qcow2-alloc-*) img=$DIR/run.qcow2 fmt=qcow2; qemu-img create -q -f qcow2 "$img" 64G ;;
    *) img=$DIR/run.qcow2 fmt=qcow2; cp "$OVER" "$img" ;;
  esac
  cat "$img" >/dev/null # warm, the same for both builds
  rm -f "$sock"
  "$1" serve -t -f "$fmt" --cache="$CACHE" -k "$sock" "$img" 2>>"$DIR/server.log" &
  SERVER=$!
  wait_socket "$1" "$sock"
  # shellcheck disable=SC2046
  v=$("$PY" "$CLIENT" --uri "nbd+unix:///?socket=$sock" --seconds "$RUNTIME" \
        --bs 4096 $(client_args "$2") | client_value)
  stop_server
  if [ "$fmt" = qcow2 ] && ! qemu-img check -q "$img"; then
    echo "ab-bench: $1 left $2's image unclean" >&2
  fi
  rm -f "$img"
  echo "$v"
}

TSV=$DIR/results.tsv
printf 'round\tbuild\tworkload\tvalue\n' >"$TSV"
for ((round = 1; round <= ROUNDS; round++)); do
  order=(A B)
  ((round % 2)) || order=(B A)
  for wl in "${WORKLOADS[@]}"; do
    for which in "${order[@]}"; do
      bin=$A
      [ "$which" = B ] && bin=$B
      v=$(run_case "$bin" "$wl")
      printf '%s\t%s\t%s\t%s\n' "$round" "$which" "$wl" "$v" | tee -a "$TSV"
    done
  done
done

"$PY" - "$TSV" <<'EOF'
import statistics, sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1])][1:]
val, order = {}, []
for rnd, which, wl, v in rows:
    val[(rnd, which, wl)] = float(v)
    if wl not in order:
        order.append(wl)
print("%-22s %10s %10s  %s" % ("workload", "A median", "B median", "B/A per round: median (min-max)"))
for wl in order:
    rounds = sorted({r for r, _, w in val if w == wl})
    a = [val[(r, "A", wl)] for r in rounds if (r, "A", wl) in val]
    b = [val[(r, "B", wl)] for r in rounds if (r, "B", wl) in val]
    ratios = [val[(r, "B", wl)] / val[(r, "A", wl)] for r in rounds
              if (r, "A", wl) in val and (r, "B", wl) in val and val[(r, "A", wl)]]
    print("%-22s %10.0f %10.0f  %.2f (%.2f-%.2f)" % (wl, statistics.median(a), statistics.median(b),
          statistics.median(ratios), min(ratios), max(ratios)))
EOF

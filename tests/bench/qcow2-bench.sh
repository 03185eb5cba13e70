#!/usr/bin/env bash
# qcow2-bench.sh - serving qcow2: diskimg serve against qemu-nbd on the same
# images, and info/check/map against qemu-img on a large sparse image.
#
# Usage: qcow2-bench.sh [-t SEC] [-r ROUNDS] [-q] [-k] [-b DISKIMG] [-d DIR] [-n REGEX]
#   -t SEC     seconds per workload (default 10)
#   -r N       interleaved rounds (default 3)
#   -q         quick smoke test: small images, 1 s, 1 round
#   -k         keep the scratch directory (images are rebuilt anyway)
#   -b PATH    diskimg binary (default <source>/build/cmd/diskimg)
#   -d DIR     scratch directory (default /var/tmp/diskimg-qcow2-bench)
#   -n REGEX   only configs whose name matches (diskimg.writeback diskimg.none
#              qemu-nbd.writeback qemu-nbd.none)
#
# Serving workloads (nbd-fua-client.py, one connection, 4 KiB at random
# offsets unless said otherwise):
#   alloc-qd1 alloc-qd16           writes into a fresh, empty 64 GiB image:
#                                  almost every write allocates a cluster
#   alloc-fua-qd1 alloc-fua-qd16   the same, every write with FUA
#   over-qd1 over-qd16             writes into a fully allocated 2 GiB image
#   over-fua-qd1 over-fua-qd16     the same with FUA
#   seqread-1m-qd8                 1 MiB sequential reads of the allocated image
# The allocated image holds random data (made with qemu-img convert from
# /dev/urandom), so reads move real bytes.  Every workload starts its server
# on a fresh copy of its image.
#
# Metadata commands, on a 20 GiB image with 64 KiB clusters and every 16th
# cluster written (20480 clusters, an L2 table per 512 MiB): the median of
# 5 runs of diskimg info/check/map --output=json against qemu-img's.
#
# Output: one line per run, then tables of medians (min-max) and per-round
# ratios diskimg/qemu-nbd for the same cache mode.  Only processes started
# here are stopped, by PID.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=bench-lib.sh
. "$HERE/bench-lib.sh"
SRCROOT=$(cd "$HERE/../.." && pwd)
PY=/usr/bin/python3
CLIENT=$HERE/nbd-fua-client.py
DISKIMG=${DISKIMG:-$SRCROOT/build/cmd/diskimg}
RUNTIME=10 ROUNDS=3 KEEP=0 DIR=/var/tmp/diskimg-qcow2-bench NAME_RE=""
ALLOC_SIZE=64G OVER_SIZE=2G SPARSE_SIZE=20G

while getopts "t:r:qkb:d:n:h" opt; do
  case $opt in
    t) RUNTIME=$OPTARG ;; r) ROUNDS=$OPTARG ;;
    q) RUNTIME=1 ROUNDS=1 OVER_SIZE=128M SPARSE_SIZE=1G ;;
    k) KEEP=1 ;; b) DISKIMG=$OPTARG ;; d) DIR=$OPTARG ;; n) NAME_RE=$OPTARG ;;
    h) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) exit 2 ;;
  esac
done

for t in qemu-nbd qemu-img "$PY"; do
  command -v "$t" >/dev/null || { echo "qcow2-bench: $t is required" >&2; exit 1; }
done
[ -x "$DISKIMG" ] || { echo "qcow2-bench: $DISKIMG is not built" >&2; exit 1; }

mkdir -p "$DIR"
SERVER=""
cleanup() {
  if [ -n "$SERVER" ]; then kill "$SERVER" 2>/dev/null || true; wait "$SERVER" 2>/dev/null || true; fi
  [ "$KEEP" = 1 ] || rm -rf "$DIR"
}
trap cleanup EXIT

# ---- images
OVER=$DIR/over.qcow2 SPARSE=$DIR/sparse.qcow2
if [ ! -s "$OVER" ]; then
  qemu-img create -q -f raw "$DIR/over.raw" "$OVER_SIZE"
  head -c "$(stat -c %s "$DIR/over.raw")" /dev/urandom |
    dd of="$DIR/over.raw" conv=notrunc bs=1M status=none iflag=fullblock
  qemu-img convert -f raw -O qcow2 "$DIR/over.raw" "$OVER"
  rm -f "$DIR/over.raw"
fi
if [ ! -s "$SPARSE" ]; then
  "$PY" - "$DIR/sparse.raw" "$SPARSE_SIZE" <<'EOF'
import os, sys
size = {"G": 1 << 30, "M": 1 << 20}[sys.argv[2][-1]] * int(sys.argv[2][:-1])
step = 16 * 65536
with open(sys.argv[1], "wb") as f:
    for off in range(0, size, step):
        f.seek(off)
        f.write(os.urandom(4096))
    f.truncate(size)
EOF
  qemu-img convert -f raw -O qcow2 "$DIR/sparse.raw" "$SPARSE"
  rm -f "$DIR/sparse.raw"
fi

CONFIGS=()
for c in diskimg.writeback diskimg.none qemu-nbd.writeback qemu-nbd.none; do
  if [ -z "$NAME_RE" ] || grep -qE "$NAME_RE" <<<"$c"; then CONFIGS+=("$c"); fi
done
WORKLOADS=(alloc-qd1 alloc-qd16 alloc-fua-qd1 alloc-fua-qd16 over-qd1 over-qd16 over-fua-qd1
  over-fua-qd16 seqread-1m-qd8)

start_server() { # CONFIG IMG SOCK
  local tool=${1%%.*} cache=${1#*.}
  rm -f "$3"
  case $tool in
    diskimg) "$DISKIMG" serve -t -f qcow2 --cache="$cache" -k "$3" "$2" 2>>"$DIR/server.log" & ;;
    qemu-nbd) qemu-nbd -t -f qcow2 --cache="$cache" --aio=threads -k "$3" "$2" \
                2>>"$DIR/server.log" & ;;
  esac
  SERVER=$!
  wait_socket "$1" "$3"
}

client_args() { # WORKLOAD
  local qd=${1##*-qd} mode=write
  [[ $1 == *fua* ]] && mode=fua
  case $1 in
    seqread-1m-qd8) echo "--mode read --pattern seq --bs 1048576 --qd 8" ;;
    *) echo "--mode $mode --bs 4096 --qd $qd" ;;
  esac
}

TSV=$DIR/results.tsv
printf 'round\tconfig\tworkload\tvalue\n' >"$TSV"
for ((round = 1; round <= ROUNDS; round++)); do
  for ((i = 0; i < ${#CONFIGS[@]}; i++)); do
    cfg=${CONFIGS[$(((i + round - 1) % ${#CONFIGS[@]}))]}
    for wl in "${WORKLOADS[@]}"; do
      img=$DIR/run.qcow2 sock=$DIR/run.sock
      rm -f "$img"
      if [[ $wl == alloc* ]]; then
        qemu-img create -q -f qcow2 "$img" "$ALLOC_SIZE"
      else
        cp "$OVER" "$img"
        cat "$img" >/dev/null # warm for every config alike
      fi
      start_server "$cfg" "$img" "$sock"
      # shellcheck disable=SC2046
      v=$("$PY" "$CLIENT" --uri "nbd+unix:///?socket=$sock" --seconds "$RUNTIME" \
            $(client_args "$wl") | client_value)
      stop_server
      printf '%s\t%s\t%s\t%s\n' "$round" "$cfg" "$wl" "$v" | tee -a "$TSV"
      qemu-img check -q "$img" || echo "qcow2-bench: $cfg left $wl's image unclean" >&2
      rm -f "$img"
    done
  done
done

# ---- metadata commands on the sparse image
META=$DIR/meta.tsv
printf 'tool\tcommand\tseconds\n' >"$META"
timeit() { # LABEL CMD...: seconds of one run
  local t0 t1
  t0=$(date +%s.%N)
  "${@:3}" >/dev/null
  t1=$(date +%s.%N)
  printf '%s\t%s\t%s\n' "$1" "$2" "$("$PY" -c "print(round($t1 - $t0, 4))")" >>"$META"
}
cat "$SPARSE" >/dev/null
for _ in 1 2 3 4 5; do
  timeit diskimg info "$DISKIMG" info --output=json "$SPARSE"
  timeit qemu-img info qemu-img info --output=json "$SPARSE"
  timeit diskimg check "$DISKIMG" check --output=json "$SPARSE"
  timeit qemu-img check qemu-img check --output=json "$SPARSE"
  timeit diskimg map "$DISKIMG" map --output=json "$SPARSE"
  timeit qemu-img map qemu-img map --output=json "$SPARSE"
done

"$PY" - "$TSV" "$META" <<'PYEOF'
import collections, statistics, sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1])][1:]
val = collections.defaultdict(dict)
for rnd, cfg, wl, v in rows:
    val[(wl, cfg)][rnd] = float(v)
wls = list(dict.fromkeys(r[2] for r in rows))
cfgs = list(dict.fromkeys(r[1] for r in rows))
def med(xs):
    return "%.0f (%.0f-%.0f)" % (statistics.median(xs), min(xs), max(xs))
ratio_cols = [c for c in cfgs if c.startswith("diskimg.") and "qemu-nbd." + c[8:] in cfgs]
print("\n| workload (IOPS; MB/s for seqread) | " + " | ".join(cfgs) + " | " +
      " | ".join("%s / qemu-nbd" % c for c in ratio_cols) + " |")
print("| --- |" + " ---: |" * (len(cfgs) + len(ratio_cols)))
for wl in wls:
    cells = [med(list(val[(wl, c)].values())) if val[(wl, c)] else "-" for c in cfgs]
    for c in ratio_cols:
        ours, theirs = val[(wl, c)], val[(wl, "qemu-nbd." + c[8:])]
        rs = [ours[r] / theirs[r] for r in ours if r in theirs and theirs[r]]
        cells.append("%.2fx" % statistics.median(rs) if rs else "-")
    print("| %s | %s |" % (wl, " | ".join(cells)))
meta = collections.defaultdict(list)
for tool, cmd, s in [l.rstrip("\n").split("\t") for l in open(sys.argv[2])][1:]:
    meta[(cmd, tool)].append(float(s))
print("\n| 20 GiB sparse qcow2, 20480 clusters (median of 5, s) | diskimg | qemu-img | qemu-img / diskimg |")
print("| --- | ---: | ---: | ---: |")
for cmd in ("info", "check", "map"):
    a, b = statistics.median(meta[(cmd, "diskimg")]), statistics.median(meta[(cmd, "qemu-img")])
    print("| %s --output=json | %.3f | %.3f | %.1fx |" % (cmd, a, b, b / a if a else 0))
PYEOF

#!/usr/bin/env bash
# rbd-bench.sh: one `diskimg serve` of an rbd image against Ceph's own
# `rbd bench` on the same cluster, the same image and the same I/O: 4k
# random writes and reads, 1 MiB sequential writes and reads, 16 in flight
# (rbd bench's default --io-threads; fio's nbd engine at iodepth 16 for
# diskimg).  A third column is fio's own rbd engine (librbd in fio, the
# same client as the diskimg column without the NBD hop).  Rounds are
# interleaved and rotate which tool goes first; the summary gives each
# tool's median MiB/s and the medians of the per-round ratios (diskimg /
# rbd bench and diskimg / fio-rbd: 1.0 is as fast as librbd itself, so
# the ratio is what the NBD hop and the server cost).
#
# Usage: tests/bench/rbd-bench.sh [ROUNDS] [SIZE_MIB]    (default 5, 256)
#   CEPH_CONF=...   use that cluster (pool "rbd"); otherwise one is started
#                   with scripts/ceph-dev.sh in a temporary directory and
#                   stopped at the end
#   SMALL=32        MiB moved by each 4k case (default 32)
#   BIG=1024        MiB moved by each 1 MiB case (default 4 x SIZE_MIB: the
#                   sequential cases wrap around the image, as both tools do)
#
# The server is started for each of its cases and stopped after it (by PID),
# so that rbd bench can take the image's exclusive lock in between.  The
# image is filled first, so reads return data from the OSD, not holes.
# Needs fio (with its nbd and rbd engines), rbd (ceph-common), jq,
# python3-libnbd, a built diskimg.
set -euo pipefail
cd "$(dirname "$0")/../.."
. tests/bench/bench-lib.sh

ROUNDS=${1:-5}
SIZE=${2:-256}
SMALL=${SMALL:-32}
BIG=${BIG:-$((4 * SIZE))}
DISKIMG=${DISKIMG:-build/cmd/diskimg}
PY=/usr/bin/python3 # the system python has libnbd's module
DIR=$(mktemp -d /tmp/rbd-bench.XXXXXX)
IMG=rbd/diskimg-bench-$$
SERVER=""
OWN_CLUSTER=""

cleanup() {
  [ -n "$SERVER" ] && stop_server
  if [ -n "$OWN_CLUSTER" ]; then
    scripts/ceph-dev.sh stop "$OWN_CLUSTER" >/dev/null 2>&1 || true
  else
    timeout 30 rbd rm --no-progress "$IMG" >/dev/null 2>&1 || true
  fi
  rm -rf "$DIR"
}
trap cleanup EXIT

if [ -z "${CEPH_CONF:-}" ]; then
  OWN_CLUSTER=$DIR/ceph
  scripts/ceph-dev.sh start "$OWN_CLUSTER" >"$DIR/ceph-dev.log" 2>&1 || {
    cat "$DIR/ceph-dev.log" >&2
    exit 1
  }
  export CEPH_CONF=$OWN_CLUSTER/ceph.conf
fi

rbdc() { timeout -k 5 300 rbd "$@"; }
rbdc create --size "${SIZE}M" "$IMG"
rbdc bench --io-type write --io-size 1M --io-pattern seq --io-total "${SIZE}M" "$IMG" >/dev/null

# case NAME -> "TYPE SIZE PATTERN TOTAL_MIB" for rbd bench
#              and "RW" for fio.
params() {
  case $1 in
  4k-randwrite) echo "write 4096 rand $SMALL randwrite" ;;
  4k-randread) echo "read 4096 rand $SMALL randread" ;;
  1m-seqwrite) echo "write 1048576 seq $BIG write" ;;
  1m-seqread) echo "read 1048576 seq $BIG read" ;;
  esac
}

# run_rbd CASE: MiB/s of rbd bench (its ops/sec times the I/O size).
run_rbd() {
  local type bs pat total rw
  read -r type bs pat total rw <<<"$(params "$1")"
  rbdc bench --io-type "$type" --io-size "$bs" --io-pattern "$pat" \
    --io-threads 16 --io-total "${total}M" "$IMG" 2>&1 |
    awk -v bs="$bs" '/^elapsed:/ { printf "%.1f\n", $6 * bs / 1048576 }'
}

# run_diskimg CASE: MiB/s fio's nbd engine reaches through diskimg serve.
run_diskimg() {
  local type bs pat total rw sock=$DIR/nbd.sock
  read -r type bs pat total rw <<<"$(params "$1")"
  rm -f "$sock"
  "$DISKIMG" serve -t -f raw -k "$sock" "rbd:$IMG" 2>>"$DIR/server.log" &
  SERVER=$!
  wait_socket "diskimg serve" "$sock"
  # librbd writes through until its first flush (rbd_cache_writethrough_
  # until_flush), as a safety for clients that never flush; rbd bench and
  # fio's rbd engine start in writeback.  A client that flushes once (as
  # every file system does) switches it: rewrite 4k and flush, as one.
  "$PY" -m nbd -u "nbd+unix:///?socket=$sock" -c 'h.pwrite(h.pread(4096, 0), 0); h.flush()'
  fio --name=nbd --ioengine=nbd --uri="nbd+unix:///?socket=$sock" --rw="$rw" \
    --bs="$bs" --iodepth=16 --io_size="${total}M" --size="${SIZE}M" \
    --randrepeat=0 --output-format=json 2>/dev/null |
    sed -n '/^{/,$p' | jq -r --arg t "$type" '.jobs[0][$t].bw_bytes / 1048576 | . * 10 | round / 10'
  stop_server
}

# run_fiorbd CASE: MiB/s of fio's rbd engine on the image.
run_fiorbd() {
  local type bs pat total rw
  read -r type bs pat total rw <<<"$(params "$1")"
  fio --name=rbd --ioengine=rbd --pool="${IMG%%/*}" --rbdname="${IMG#*/}" --rw="$rw" \
    --bs="$bs" --iodepth=16 --io_size="${total}M" --size="${SIZE}M" \
    --randrepeat=0 --output-format=json 2>/dev/null |
    sed -n '/^{/,$p' | jq -r --arg t "$type" '.jobs[0][$t].bw_bytes / 1048576 | . * 10 | round / 10'
}

CASES="4k-randwrite 4k-randread 1m-seqwrite 1m-seqread"
RAW=$DIR/rows.tsv
echo "# $(date -u +%F) $(nproc) cores, $(uname -r), rbd $(rbd --version | awk '{print $3}')" \
  ", image ${SIZE} MiB, 4k cases move ${SMALL} MiB, 1 MiB cases ${BIG} MiB," \
  "rbd_cache $(ceph-conf --show-config-value rbd_cache 2>/dev/null || echo '?')" >&2
printf 'round\tcase\trbd_bench_mibs\tdiskimg_mibs\tratio\tfio_rbd_mibs\tratio_fio\n'
TOOLS=(rbd diskimg fiorbd)
for round in $(seq "$ROUNDS"); do
  for c in $CASES; do
    declare -A v=()
    for k in 0 1 2; do
      t=${TOOLS[(round + k) % 3]}
      v[$t]=$("run_$t" "$c")
    done
    r=${v[rbd]} d=${v[diskimg]} f=${v[fiorbd]}
    ratio=$(awk -v d="$d" -v r="$r" 'BEGIN { printf "%.2f", (r > 0 ? d / r : 0) }')
    ratio_f=$(awk -v d="$d" -v r="$f" 'BEGIN { printf "%.2f", (r > 0 ? d / r : 0) }')
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$round" "$c" "$r" "$d" "$ratio" "$f" "$ratio_f" |
      tee -a "$RAW"
  done
done

echo
echo "| case | rbd bench MiB/s | fio rbd MiB/s | diskimg serve MiB/s | diskimg / rbd bench | diskimg / fio rbd |"
echo "|---|---:|---:|---:|---:|---:|"
for c in $CASES; do
  awk -F'\t' -v c="$c" "$MEDIAN_AWK"'
    $2 == c { r = r " " $3; d = d " " $4; q = q " " $5; f = f " " $6; qf = qf " " $7 }
    END { printf "| %s | %s | %s | %s | %.2f | %.2f |\n", c, median(r), median(f), median(d), median(q), median(qf) }' "$RAW"
done

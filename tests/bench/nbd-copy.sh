#!/usr/bin/env bash
# nbd-copy.sh - copying between two NBD servers: diskimg convert against
# nbdcopy (its defaults: up to four connections with multi-conn, block
# status on the source), source and target served alike by one pair:
#   nbdkit    nbdkit -f -U SOCK file IMG  (-r for the source)
#   diskimg   diskimg serve -t -e 8 --cache=writeback -f raw -k SOCK IMG
#             (-r for the source)
# The cases:
#   diskimg   diskimg convert -n -f raw -O raw SRC-URI DST-URI
#   nbdcopy   nbdcopy --flush SRC-URI DST-URI
# Both flush the target at the end (diskimg convert always does, nbdcopy
# with --flush) and both servers make a flush real (fdatasync), so the
# time is until the copy is durable; `sync DST` after the command is in
# the timed window as well, for both alike.
#
# Each case gets a fresh sparse target (deleted, written back, truncated
# to the source's size) and a fresh target server; the source server runs
# through the whole pair and the source stays in the page cache (it is
# read once before the rounds).  An untimed round 0 runs each case once
# first (the first copy after the servers start is slower whoever makes
# it).  The order of the cases alternates from round to round.  The
# first round compares every target with the source (cmp).  The summary
# gives each case's median time and the median of the per-round ratios
# nbdcopy / diskimg (above 1x: diskimg is faster).
#
# Usage: nbd-copy.sh [-r ROUNDS] [-s REST] [-p PAIRS] [-d DIR] [-i SRC]
#   -r N      interleaved rounds (default 5)
#   -s REST   seconds of rest before each case (default 1)
#   -p PAIRS  server pairs, comma-separated (default nbdkit,diskimg)
#   -d DIR    work directory (default /var/tmp/nbd-copy-bench; the target
#             is deleted at the end)
#   -i SRC    raw source image (default /var/tmp/convert-bench/src.raw,
#             made by the shared convert-bench.sh; only read)
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/bench/bench-lib.sh
. "$HERE/bench-lib.sh"
B=${DISKIMG:-$HERE/../../build/cmd/diskimg}
ROUNDS=5 REST=1 PAIRS=nbdkit,diskimg DIR=/var/tmp/nbd-copy-bench SRC=/var/tmp/convert-bench/src.raw
usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit "${1:-0}"; }
while getopts "r:s:p:d:i:h" opt; do
  case $opt in
    r) ROUNDS=$OPTARG ;; s) REST=$OPTARG ;; p) PAIRS=$OPTARG ;; d) DIR=$OPTARG ;; i) SRC=$OPTARG ;;
    h) usage 0 ;; *) usage 1 >&2 ;;
  esac
done
[ -f "$SRC" ] || { echo "$(basename "$0"): $SRC is missing (run /work/shared/bench/convert-bench.sh -k)" >&2; exit 1; }
mkdir -p "$DIR"
DST=$DIR/dst.raw SS=$DIR/src.sock TS=$DIR/dst.sock TSV=$DIR/nbd-copy.tsv
SURI="nbd+unix:///?socket=$SS" TURI="nbd+unix:///?socket=$TS"
SIZE=$(stat -c %s "$SRC")
SRC_SERVER="" SERVER=""
cleanup() {
  [ -z "$SERVER" ] || stop_server
  [ -z "$SRC_SERVER" ] || { SERVER=$SRC_SERVER; stop_server; }
  rm -f "$DST" "$SS" "$TS"
}
trap cleanup EXIT

# start PAIR SOCK IMG [-r]: one server of the pair, in the background;
# its PID in SERVER.
start() {
  local pair=$1 sock=$2 img=$3 ro=()
  [ -z "${4:-}" ] || ro=("$4")
  rm -f "$sock"
  case $pair in
    nbdkit) nbdkit -f -U "$sock" "${ro[@]}" file "$img" 2>>"$DIR/server.log" & ;;
    diskimg) "$B" serve -t -e 8 --cache=writeback -f raw "${ro[@]}" -k "$sock" "$img" 2>>"$DIR/server.log" & ;;
    *) echo "$(basename "$0"): unknown pair $pair" >&2; exit 1 ;;
  esac
  SERVER=$!
  wait_socket "$pair" "$sock"
}

now() { date +%s.%N; }
cat "$SRC" > /dev/null
echo "$SRC: $((SIZE >> 20)) MiB, $(($(du -k "$SRC" | cut -f1) >> 10)) MiB of data; $("$B" --version | head -1); $(nbdcopy --version | head -1); $(nbdkit --version); $(nproc) CPUs"
: > "$TSV"
IFS=, read -ra pairs <<< "$PAIRS"
for pair in "${pairs[@]}"; do
  start "$pair" "$SS" "$SRC" -r
  SRC_SERVER=$SERVER SERVER=""
  CASES=("diskimg=$B convert -n -f raw -O raw $SURI $TURI" "nbdcopy=nbdcopy --flush $SURI $TURI")
  for round in $(seq 0 "$ROUNDS"); do
    for i in 0 1; do
      c=${CASES[$(((i + round - 1) % 2))]}
      name=${c%%=*}
      rm -f "$DST"
      sync
      truncate -s "$SIZE" "$DST"
      start "$pair" "$TS" "$DST"
      sleep "$REST"
      t0=$(now)
      ${c#*=} > /dev/null
      sync "$DST"
      t1=$(now)
      stop_server
      if [ "$round" = 1 ]; then
        cmp "$SRC" "$DST" || { echo "$pair/$name: the target differs from the source" >&2; exit 1; }
      fi
      [ "$round" = 0 ] && continue
      printf '%s\t%s\t%s\t%.3f\n' "$pair" "$name" "$round" "$(echo "$t1 - $t0" | bc)" | tee -a "$TSV"
    done
  done
  SERVER=$SRC_SERVER SRC_SERVER=""
  stop_server
done

echo
printf '%-8s %-8s %8s  %s\n' servers case median "nbdcopy/diskimg per round (median)"
awk -F'\t' "$MEDIAN_AWK"'
  { t[$1, $2, $3] = $4; v[$1, $2] = v[$1, $2] " " $4; r[$1] = r[$1] " " $3
    if (!($1 in seen)) { seen[$1] = 1; order[++n] = $1 } }
  END {
    for (i = 1; i <= n; i++) {
      p = order[i]; q = ""
      k = split(r[p], rs, " ")
      for (j = 1; j <= k; j += 2) q = q " " t[p, "nbdcopy", rs[j]] / t[p, "diskimg", rs[j]]
      printf "%-8s %-8s %8.2f\n", p, "diskimg", median(v[p, "diskimg"])
      printf "%-8s %-8s %8.2f  %.2fx\n", p, "nbdcopy", median(v[p, "nbdcopy"]), median(q)
    } }' "$TSV"

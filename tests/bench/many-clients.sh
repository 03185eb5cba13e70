#!/usr/bin/env bash
# many-clients.sh - many NBD clients at once: diskimg serve against
# nbdkit and qemu-nbd (and nbd-server with -n), every server in writeback
# mode (page cache, flush = fdatasync), on its own copy of one raw image
# filled with random data, over a unix socket.  nbd-server 3.24 is not in
# the default set: its listen backlog overflows when 16 clients connect at
# once (libnbd: "server backlog overflowed") and some of fio's jobs fail.
#
# Each workload is fio's nbd engine with J jobs (J connections, default
# 16), each with Q requests in flight (default 16), 4k random offsets
# over the whole image:
#   randread   4k random reads                                  IOPS
#   randwrite  4k random writes, no flush                       IOPS
# For every run it records the aggregate IOPS, the server's CPU time per
# request (user + system of the server and its children, from /proc) and
# the server's peak resident memory (VmRSS of the server and its children,
# sampled every 0.2 s while the clients run; nbd-server forks a process
# per client).  Between workloads the image is written back (outside the
# timed window).
#
# Rounds are interleaved: round 1 runs every server, then round 2, and the
# first server of each round rotates.  The summary gives, per server and
# workload, the median IOPS, CPU per request and peak RSS, and the median
# of the per-round ratios diskimg / peer (above 1x: diskimg is faster).
#
# Usage: many-clients.sh [-r ROUNDS] [-t SEC] [-j JOBS] [-q QD] [-s SIZE]
#                        [-n REGEX] [-d DIR] [-k]
#   -r N      interleaved rounds (default 5)
#   -t SEC    seconds per workload (default 10)
#   -j N      client connections (default 16)
#   -q N      requests in flight per connection (default 16)
#   -s SIZE   image size for fallocate/dd (default 1G)
#   -n REGEX  servers whose name matches (default: diskimg|nbdkit|qemu-nbd;
#             nbd-server as well with e.g. -n .)
#   -d DIR    work directory (default /var/tmp/many-clients-bench)
#   -k        keep the base image for the next run (copies are always fresh)
# Environment: DISKIMG (default <source>/build/cmd/diskimg).  Needs fio,
# qemu-nbd, nbdkit, nbd-server and nbdinfo.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/bench/bench-lib.sh
. "$HERE/bench-lib.sh"
B=${DISKIMG:-$HERE/../../build/cmd/diskimg}
ROUNDS=5 SECS=10 JOBS=16 QD=16 SIZE=1G NAME_RE="" DIR=/var/tmp/many-clients-bench KEEP=0
usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit "${1:-0}"; }
while getopts "r:t:j:q:s:n:d:kh" opt; do
  case $opt in
    r) ROUNDS=$OPTARG ;; t) SECS=$OPTARG ;; j) JOBS=$OPTARG ;; q) QD=$OPTARG ;;
    s) SIZE=$OPTARG ;; n) NAME_RE=$OPTARG ;; d) DIR=$OPTARG ;; k) KEEP=1 ;;
    h) usage 0 ;; *) usage 1 >&2 ;;
  esac
done
mkdir -p "$DIR"
BASE=$DIR/base.raw IMG=$DIR/img.raw SOCK=$DIR/nbd.sock TSV=$DIR/many-clients.tsv
SERVER=""
cleanup() {
  [ -z "$SERVER" ] || stop
  rm -f "$IMG" "$SOCK" "$DIR/nbd-server.conf" "$DIR/nbd-server.pid" "$DIR/fio.out"
  [ "$KEEP" = 1 ] || rm -f "$BASE"
}
trap cleanup EXIT

# The servers: name and command line (IMG and SOCK substituted by start).
ALL_SERVERS="diskimg nbdkit qemu-nbd nbd-server"
server_cmd() {
  case $1 in
    diskimg) echo "$B serve -t -e $JOBS -f raw --cache=writeback -k $SOCK $IMG" ;;
    nbdkit) echo "nbdkit -f -U $SOCK file $IMG" ;;
    qemu-nbd) echo "qemu-nbd -t -e $JOBS -f raw --cache=writeback --aio=threads -k $SOCK $IMG" ;;
    nbd-server) echo "nbd-server -C $DIR/nbd-server.conf -p $DIR/nbd-server.pid" ;;
  esac
}
SERVERS=""
for s in $ALL_SERVERS; do
  [[ $s =~ ${NAME_RE:-^(diskimg|nbdkit|qemu-nbd)$} ]] && SERVERS="$SERVERS $s"
done
read -r -a SERVERS <<<"$SERVERS"
[ ${#SERVERS[@]} -gt 0 ] || { echo "$(basename "$0"): no server matches $NAME_RE" >&2; exit 1; }

if [ ! -f "$BASE" ] || [ "$(stat -c %s "$BASE")" != "$(numfmt --from=iec "$SIZE")" ]; then
  echo "making $BASE ($SIZE of random data)" >&2
  rm -f "$BASE"
  dd if=/dev/urandom of="$BASE" bs=1M count=$(($(numfmt --from=iec "$SIZE") / 1048576)) \
    iflag=fullblock status=none
  sync "$BASE"
fi

# start NAME: a fresh copy of the image, the server on SOCK, ready.
start() {
  rm -f "$IMG" "$SOCK"
  cp "$BASE" "$IMG"
  evict_files "$IMG"
  if [ "$1" = nbd-server ]; then
    # nbd-server forks a child per client; -d keeps the parent in the foreground.
    printf '[generic]\nunixsock = %s\n[bench]\nexportname = %s\nflush = true\nfua = true\n' \
      "$SOCK" "$IMG" >"$DIR/nbd-server.conf"
  fi
  local cmd
  read -r -a cmd <<<"$(server_cmd "$1")" # (paths without blanks)
  if [ "$1" = nbd-server ]; then
    # It daemonizes (a child per client) and writes its PID file.
    rm -f "$DIR/nbd-server.pid"
    "${cmd[@]}" >>"$DIR/server.log" 2>&1
    for _ in $(seq 100); do [ -s "$DIR/nbd-server.pid" ] && break; sleep 0.05; done
    SERVER=$(cat "$DIR/nbd-server.pid")
  else
    "${cmd[@]}" >>"$DIR/server.log" 2>&1 &
    SERVER=$!
  fi
  wait_socket "$1" "$SOCK"
  nbdinfo --size "$(uri "$1")" >/dev/null
}

# stop: the server started last, by its PID; waits until it is gone.
stop() {
  kill "$SERVER" 2>/dev/null || true
  wait "$SERVER" 2>/dev/null || true
  while kill -0 "$SERVER" 2>/dev/null; do sleep 0.05; done
  SERVER=""
}

uri() { [ "$1" = nbd-server ] && echo "nbd+unix:///bench?socket=$SOCK" || echo "nbd+unix:///?socket=$SOCK"; }

# tree_pids PID: PID and its descendants.
tree_pids() {
  local p=$1 c
  echo "$p"
  for c in $(pgrep -P "$p" || true); do tree_pids "$c"; done
}

# cpu_ticks PID: user + system clock ticks of PID and its live children,
# with those of the children each has reaped (nbd-server's forks end with
# their client).
cpu_ticks() {
  local t=0 p v
  for p in $(tree_pids "$1"); do
    v=$(awk '{print $14 + $15 + $16 + $17}' "/proc/$p/stat" 2>/dev/null || echo 0)
    t=$((t + v))
  done
  echo "$t"
}

rss_kb() {
  local t=0 p v
  for p in $(tree_pids "$1"); do
    v=$(awk '/^VmRSS:/ {print $2}' "/proc/$p/status" 2>/dev/null || echo 0)
    t=$((t + ${v:-0}))
  done
  echo "$t"
}

# run NAME WORKLOAD: one timed fio run -> "iops cpu_us_per_req peak_rss_kb".
# While fio runs, the server's resident memory and CPU ticks are sampled
# every 0.2 s (nbd-server's forks end with their clients).
run() {
  local iops ticks0 hz peak=0 ticks=0 fio_pid r c
  hz=$(getconf CLK_TCK)
  ticks0=$(cpu_ticks "$SERVER")
  fio --name=m --ioengine=nbd --uri="$(uri "$1")" --rw="$2" --bs=4k --iodepth="$QD" \
    --numjobs="$JOBS" --group_reporting --time_based --runtime="$SECS" --size="$SIZE" \
    --randrepeat=0 --output-format=json >"$DIR/fio.out" 2>/dev/null &
  fio_pid=$!
  while kill -0 "$fio_pid" 2>/dev/null; do
    r=$(rss_kb "$SERVER") c=$(cpu_ticks "$SERVER")
    [ "$r" -gt "$peak" ] && peak=$r
    [ "$c" -gt "$ticks" ] && ticks=$c
    sleep 0.2
  done
  wait "$fio_pid" || { echo "$(basename "$0"): $1 $2: fio failed" >&2; return 1; }
  sleep 0.2 # the forks of nbd-server exit and are reaped
  c=$(cpu_ticks "$SERVER")
  [ "$c" -gt "$ticks" ] && ticks=$c
  # The nbd engine prints a line before the JSON.
  iops=$(sed -n '/^{/,$p' "$DIR/fio.out" | jq -r --arg rw "${2#rand}" '.jobs[0][$rw].iops | floor')
  [ "$iops" -gt 0 ] || { echo "$(basename "$0"): $1 $2: no IOPS from fio" >&2; return 1; }
  awk -v i="$iops" -v s="$SECS" -v t0="$ticks0" -v t="$ticks" -v hz="$hz" -v p="$peak" \
    'BEGIN { printf "%d %.1f %d\n", i, (t - t0) / hz * 1e6 / (i * s), p }'
}

: >"$DIR/server.log"
echo "servers: ${SERVERS[*]}; $JOBS connections x qd$QD, $SECS s per workload, $ROUNDS rounds" >&2
for ((round = 1; round <= ROUNDS; round++)); do
  n=${#SERVERS[@]}
  for ((k = 0; k < n; k++)); do
    s=${SERVERS[$(((k + round - 1) % n))]}
    start "$s"
    for wl in randread randwrite; do
      read -r iops cpu rss < <(run "$s" "$wl")
      printf '%d\t%s\t%s\t%d\t%s\t%d\n' "$round" "$s" "$wl" "$iops" "$cpu" "$rss" | tee -a "$TSV"
      [ "$wl" = randwrite ] && sync "$IMG"
    done
    stop
  done
done

# Summary of this run's rounds (the last ROUNDS*servers*2 lines of the TSV).
tail -n $((ROUNDS * ${#SERVERS[@]} * 2)) "$TSV" | awk -F'\t' "$MEDIAN_AWK"'
  { iops[$2 "," $3] = iops[$2 "," $3] " " $4; cpu[$2 "," $3] = cpu[$2 "," $3] " " $5
    rss[$2 "," $3] = rss[$2 "," $3] " " $6; v[$1 "," $2 "," $3] = $4; names[$2] = 1; wls[$3] = 1
    rounds[$1] = 1 }
  END {
    printf "\n%-10s %-10s %10s %12s %12s %14s\n", "server", "workload", "IOPS", "CPU us/req", "peak RSS MB", "diskimg/peer"
    for (w in wls) for (s in names) {
      r = ""
      if (s != "diskimg") for (k in rounds) if (v[k "," s "," w] > 0) r = r " " v[k ",diskimg," w] / v[k "," s "," w]
      printf "%-10s %-10s %10d %12.1f %12.1f %14s\n", s, w, median(iops[s "," w]), median(cpu[s "," w]),
        median(rss[s "," w]) / 1024, r == "" ? "-" : sprintf("%.2f", median(r))
    }
  }'

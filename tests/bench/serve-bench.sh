#!/usr/bin/env bash
# serve-bench.sh - diskimg serve against qemu-nbd, nbdkit and fio on the file.
#
# Each config is run on its own copy of one preallocated raw image (all copies
# on the same file system) and served on a unix socket.  Every workload uses
# one NBD connection.  Rounds are interleaved: round 1 runs every config, then
# round 2 does the same, and so on.  The start of the config order rotates by
# one each round.  Ratios are computed within a round and then the median is
# taken.
#
# Usage: serve-bench.sh [options]
#        serve-bench.sh -S FILE.tsv...      (summary of earlier results only)
#   -s SIZE    image size (default 1G)
#   -t SEC     seconds per workload (default 10)
#   -r N       interleaved rounds (default 3; 1 with -q)
#   -n REGEX   only configs whose name matches REGEX (grep -E)
#   -w LIST    comma-separated workloads (default: all, see below)
#   -u         also run diskimg with --aio=io_uring (diskimg-uring.*)
#   -b PATH    diskimg binary (default: <source>/build/cmd/diskimg, or $DISKIMG)
#   -d DIR     scratch directory for images and sockets (default /var/tmp/diskimg-bench)
#   -o FILE    raw results as TSV, appended to (default /var/tmp/serve-bench-<date>.tsv);
#              the server/client log goes to FILE with .log instead of .tsv
#   -k         keep the image files (the base image is reused by the next run
#              with the same -s and content; the per-config copies are always fresh)
#   -Z         leave the image all zeros (like the shared nbd-bench.sh). The
#              default fills it with random data; see "Image content" below
#   -q         quick smoke test: 64M image, 1 s per workload, 1 round
#   -S         print the summary of the TSV files given as arguments and exit
#
# Configs (names for -n):
#   diskimg.none diskimg.writeback    diskimg serve -t -f raw --cache=.. --aio=threads
#   diskimg-uring.none diskimg-uring.writeback   the same with --aio=io_uring (-u)
#   qemu-nbd.none qemu-nbd.writeback  qemu-nbd -t -f raw --cache=.. --aio=threads
#   nbdkit                            nbdkit -f -U SOCK file IMG
#   fio-direct                        fio on the image file itself: io_uring, O_DIRECT.
#                                     This is the ceiling for cache=none
#   fio-buffered                      the same but buffered; the ceiling for writeback
#
# Workloads (4k ones pick random offsets across the whole image):
#   randread-qd1 randread-qd16   fio --ioengine=nbd, 4k random reads      IOPS
#   seqread-1m-qd8               fio --ioengine=nbd, 1 MiB sequential read MB/s
#   fua-qd1 fua-qd16             nbd-fua-client.py, 4k writes + FUA       IOPS
#   wflush-qd1                   nbd-fua-client.py, 4k write then FLUSH   IOPS (pairs/s)
#   seqwrite-1m-qd8              fio --ioengine=nbd, 1 MiB sequential write MB/s
#   On fio-direct and fio-buffered the same rows run with fio io_uring on the
#   file itself:
#   - fua-*: --sync=dsync, i.e. O_DSYNC writes; with fio-direct that is
#     O_DIRECT|O_DSYNC;
#   - wflush-qd1: --fdatasync=1 (p50 there is write clat p50 + fdatasync p50).
#
# Image content: the base image is preallocated (qemu-img preallocation=full,
# or fallocate) and then overwritten with random data from /dev/urandom.  diskimg
# answers reads of all-zero 4k granules with NBD_REPLY_TYPE_OFFSET_HOLE chunks,
# which carry no payload (nbd/reply.c).  On a zero image its read rows would
# measure that shortcut rather than moving data.  qemu-nbd 7.2 and the nbdkit
# file plugin send the bytes of an allocated file.  Each config gets a fresh
# cp of the base image at startup.
#
# Before each config starts, its image is fsynced and, only when running as
# root, evicted from the page cache (posix_fadvise DONTNEED via dd iflag=nocache).
# Every server therefore starts cold.  Between workloads the image is fsynced
# outside the timed window.  Every process started here is stopped by its PID.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
SRCROOT=$(cd "$HERE/../.." && pwd)
PY=/usr/bin/python3                  # has python3-libnbd; the PATH python3 may not
CLIENT=$HERE/nbd-fua-client.py
DISKIMG=${DISKIMG:-$SRCROOT/build/cmd/diskimg}

SIZE=1G RUNTIME=10 ROUNDS=3 NAME_RE="" WL_SEL="" URING=0 KEEP=0 QUICK=0 SUMMARY=0 ZERO=0
DIR=/var/tmp/diskimg-bench OUT=""
SET_S="" SET_T="" SET_R=""
ALL_WL="randread-qd1 randread-qd16 seqread-1m-qd8 fua-qd1 fua-qd16 wflush-qd1 seqwrite-1m-qd8"

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit "${1:-0}"; }

while getopts "s:t:r:n:w:ub:d:o:kqZSh" opt; do
  case $opt in
    s) SET_S=$OPTARG ;; t) SET_T=$OPTARG ;; r) SET_R=$OPTARG ;;
    n) NAME_RE=$OPTARG ;; w) WL_SEL=${OPTARG//,/ } ;; u) URING=1 ;;
    b) DISKIMG=$OPTARG ;; d) DIR=$OPTARG ;; o) OUT=$OPTARG ;; k) KEEP=1 ;;
    q) QUICK=1 ;; Z) ZERO=1 ;; S) SUMMARY=1 ;; h) usage 0 ;; *) usage 2 >&2 ;;
  esac
done
shift $((OPTIND - 1))
if [ "$QUICK" = 1 ]; then SIZE=64M RUNTIME=1 ROUNDS=1; fi
SIZE=${SET_S:-$SIZE} RUNTIME=${SET_T:-$RUNTIME} ROUNDS=${SET_R:-$ROUNDS}

# ------------------------------------------------------------------ summary
# Reads one or more TSVs and prints per workload and config the median (min-max)
# over rounds.  For diskimg rows it adds per-round ratios against qemu-nbd (same
# cache mode), nbdkit and the fio ceiling (fio-direct for cache=none,
# fio-buffered for writeback), summarised as median (min-max).
summary() {
  "$PY" - "$@" <<'PYEOF'
import signal, statistics, sys
signal.signal(signal.SIGPIPE, signal.SIG_DFL)     # quiet when piped into head

rows, order_wl, order_cfg = [], [], []
for path in sys.argv[1:]:
    hdr = None
    with open(path) as fh:
        for line in fh:
            if not line.strip() or line.startswith("#"):
                continue
            f = line.rstrip("\n").split("\t")
            if f[0] == "run":
                hdr = f
                continue
            if hdr is None:
                sys.exit("%s: no header line" % path)
            r = dict(zip(hdr, f))
            rows.append(r)
            if r["workload"] not in order_wl:
                order_wl.append(r["workload"])
            if r["config"] not in order_cfg:
                order_cfg.append(r["config"])
if not rows:
    sys.exit("no results")

def rank(c):
    for i, p in enumerate(("diskimg.", "diskimg-", "qemu-nbd", "nbdkit", "fio-")):
        if c.startswith(p):
            return i
    return 9
cfgs = sorted(order_cfg, key=lambda c: (rank(c), order_cfg.index(c)))

def num(s):
    try:
        return float(s)
    except (TypeError, ValueError):
        return None

val, unit, p50, srv = {}, {}, {}, {}       # (cfg, wl) -> list; (run, round, cfg, wl) -> value
per_round = {}
for r in rows:
    k = (r["config"], r["workload"])
    unit.setdefault(k, r["unit"])
    v = num(r["value"])
    if r["status"] != "ok" or v is None:
        continue
    val.setdefault(k, []).append(v)
    p50.setdefault(k, []).append(num(r["p50_us"]) or 0.0)
    if num(r["srv_cpu_pct"]) is not None:          # empty for the fio-* rows
        srv.setdefault(k, []).append(num(r["srv_cpu_pct"]))
    per_round[(r["run"], r["round"], r["config"], r["workload"])] = v

def mmm(xs):
    return statistics.median(xs), min(xs), max(xs)

def fmt_v(x):
    return "%.0f" % x if x >= 100 else "%.1f" % x

def peers(cfg):
    mode = cfg.rsplit(".", 1)[1] if "." in cfg else ""
    ceil = "fio-direct" if mode in ("none", "directsync") else "fio-buffered"
    return [("qemu-nbd." + mode), "nbdkit", ceil]

def ratio(cfg, peer, wl):
    rs = []
    for (run, rnd, c, w), v in per_round.items():
        if c != cfg or w != wl:
            continue
        pv = per_round.get((run, rnd, peer, wl))
        if pv:
            rs.append(v / pv)
    if not rs:
        return "-"
    m, lo, hi = mmm(rs)
    return "%.2f (%.2f-%.2f)" % (m, lo, hi) if len(rs) > 1 else "%.2f" % m

nrounds = len({(r["run"], r["round"]) for r in rows})
for col in ("size", "runtime_s", "cache_drop"):
    seen = sorted({r.get(col, "") for r in rows})
    if len(seen) > 1:
        print("WARNING: rows with different %s (%s) are pooled; compare like with like"
              % (col, ", ".join(seen)))
print("median over rounds (min-max); %d run-round(s); ratios are per round, then median" % nrounds)
print("ratio columns (diskimg rows only): /qemu-nbd = same cache mode, /nbdkit = nbdkit file, "
      "/fio = fio-direct for cache=none, fio-buffered for writeback")
hfmt = "%-16s %-24s %-5s %9s %-19s %2s %8s %6s  %-18s %-18s %-18s"
print(hfmt % ("workload", "config", "unit", "median", "(min-max)", "n", "p50_us", "srv%",
              "/qemu-nbd", "/nbdkit", "/fio"))
for wl in order_wl:
    first = True
    for c in cfgs:
        k = (c, wl)
        if k not in unit:
            continue
        if k in val:
            m, lo, hi = mmm(val[k])
            cells = (fmt_v(m), "(%s-%s)" % (fmt_v(lo), fmt_v(hi)), len(val[k]),
                     "%.0f" % statistics.median(p50[k]),
                     "%.0f" % statistics.median(srv[k]) if k in srv else "-")
        else:
            cells = ("n/a", "", 0, "", "")
        rat = ("", "", "")
        if c.startswith("diskimg") and k in val:
            rat = tuple(ratio(c, p, wl) for p in peers(c))
        print(hfmt % ((wl if first else "", c, unit[k]) + cells + rat))
        first = False
PYEOF
}
if [ "$SUMMARY" = 1 ]; then
  [ $# -ge 1 ] || { echo "-S needs TSV file arguments" >&2; exit 2; }
  summary "$@"; exit
fi
[ $# -eq 0 ] || { echo "unexpected arguments: $*" >&2; usage 2 >&2; }

# ------------------------------------------------------------------ checks
die() { echo "serve-bench: $*" >&2; exit 1; }
for t in fio jq qemu-img nbdinfo timeout; do
  command -v "$t" >/dev/null || die "$t not found"
done
"$PY" -c 'import nbd' 2>/dev/null || die "$PY cannot import nbd (install python3-libnbd)"
[ -x "$DISKIMG" ] || die "diskimg binary $DISKIMG not found (build it: ninja -C $SRCROOT/build)"
[[ $RUNTIME =~ ^[0-9]+$ && $RUNTIME -ge 1 ]] || die "-t wants whole seconds >= 1"
[[ $ROUNDS =~ ^[0-9]+$ && $ROUNDS -ge 1 ]] || die "-r wants a number >= 1"
SIZE_B=$(numfmt --from=iec "$SIZE") || die "bad -s $SIZE"
[ "$SIZE_B" -ge $((16 << 20)) ] && [ $((SIZE_B % (1 << 20))) = 0 ] || die "-s must be a multiple of 1M, at least 16M"
WORKLOADS=${WL_SEL:-$ALL_WL}
for wl in $WORKLOADS; do
  [[ " $ALL_WL " == *" $wl "* ]] || die "unknown workload $wl (known: $ALL_WL)"
done

# ------------------------------------------------------------------ configs
CONFIGS=(diskimg.none diskimg.writeback)
[ "$URING" = 0 ] || CONFIGS+=(diskimg-uring.none diskimg-uring.writeback)
CONFIGS+=(qemu-nbd.none qemu-nbd.writeback nbdkit fio-direct fio-buffered)
SEL=()
for c in "${CONFIGS[@]}"; do
  if [ -n "$NAME_RE" ] && ! grep -qE -- "$NAME_RE" <<< "$c"; then continue; fi
  case $c in
    qemu-nbd.*) command -v qemu-nbd >/dev/null || { echo "skip $c: no qemu-nbd" >&2; continue; } ;;
    nbdkit)     command -v nbdkit >/dev/null || { echo "skip $c: no nbdkit" >&2; continue; } ;;
  esac
  SEL+=("$c")
done
[ ${#SEL[@]} -gt 0 ] || die "no config matches -n '$NAME_RE' (configs: ${CONFIGS[*]})"

# server_cmd CONFIG IMG SOCK -> fills array CMD (empty for the fio-* rows)
server_cmd() {
  local c=$1 img=$2 sock=$3
  CMD=()
  case $c in
    diskimg.*)       CMD=("$DISKIMG" serve -t -f raw "--cache=${c#*.}" --aio=threads -k "$sock" "$img") ;;
    diskimg-uring.*) CMD=("$DISKIMG" serve -t -f raw "--cache=${c#*.}" --aio=io_uring -k "$sock" "$img") ;;
    qemu-nbd.*)      CMD=(qemu-nbd -t -f raw "--cache=${c#*.}" --aio=threads -k "$sock" "$img") ;;
    nbdkit)          CMD=(nbdkit -f -U "$sock" file "$img") ;;
    fio-*)           ;;
    *) die "unknown config $c" ;;
  esac
}

# ------------------------------------------------------------------ state, cleanup
mkdir -p "$DIR"
DIR=$(cd "$DIR" && pwd)
RUN_ID=$(date +%Y%m%d-%H%M%S)
OUT=${OUT:-/var/tmp/serve-bench-$RUN_ID.tsv}
LOG=${OUT%.tsv}.log
[ "$LOG" != "$OUT" ] || LOG=$OUT.log
CONTENT=random; [ "$ZERO" = 0 ] || CONTENT=zero
BASE=$DIR/base-$SIZE_B-$CONTENT.raw
CREATED=()            # files this run created (removed at exit unless -k)
SRV_PID="" CLI_PID="" CUR_SOCK=""
NOTES=()
CLK_TCK=$(getconf CLK_TCK)
[ ${#DIR} -lt 70 ] || die "-d path too long for unix socket names"

log() { printf '%s\n' "$*" >> "$LOG"; }
note() { NOTES+=("$*"); log "NOTE: $*"; echo "NOTE: $*" >&2; }

# stop_server: SIGTERM, wait up to 10 s, then SIGKILL; records its exit status.
stop_server() {
  local pid=$SRV_PID name=${1:-server} rc=0 i
  SRV_PID=""
  [ -n "$pid" ] || return 0
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null || true
    for i in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$pid" 2>/dev/null; then
      note "$name (pid $pid) still running 10 s after SIGTERM, sent SIGKILL"
      kill -KILL "$pid" 2>/dev/null || true
    fi
  fi
  wait "$pid" 2>/dev/null || rc=$?
  log "--- $name pid $pid exited with status $rc"
  # 143 = killed by SIGTERM before installing a handler (fine for peers).
  case $name:$rc in
    *:0|qemu-nbd*:143|nbdkit*:143) ;;
    *) note "$name (pid $pid) exit status $rc after SIGTERM (see $LOG)" ;;
  esac
  [ -z "$CUR_SOCK" ] || rm -f "$CUR_SOCK"
}

cleanup() {
  local rc=$? f
  trap - EXIT INT TERM
  if [ -n "$CLI_PID" ]; then kill -TERM "$CLI_PID" 2>/dev/null || true; wait "$CLI_PID" 2>/dev/null || true; fi
  stop_server "${CUR_NAME:-server}"
  if [ "$KEEP" = 0 ]; then
    for f in "${CREATED[@]}"; do rm -f "$f"; done
    # copies and bases left by earlier -k runs (our names only); never rm -r
    rm -f "$DIR"/img.*.raw "$DIR"/base-*-random.raw "$DIR"/base-*-zero.raw "$DIR"/*.sock
    rmdir "$DIR" 2>/dev/null || true          # only if empty; never rm -r
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# ------------------------------------------------------------------ images
allocated() {   # file fully allocated and of the right size?
  local st
  st=$(stat -c '%s %b %B' "$1" 2>/dev/null) || return 1
  set -- $st
  [ "$1" = "$SIZE_B" ] && [ $(($2 * $3)) -ge "$SIZE_B" ]
}

make_base() {
  if allocated "$BASE"; then log "reusing $BASE"; return 0; fi
  echo "creating $BASE ($SIZE, fully allocated, $CONTENT data)" >&2
  rm -f "$BASE"; CREATED+=("$BASE")
  if ! qemu-img create -q -f raw -o preallocation=full "$BASE" "$SIZE_B" 2>>"$LOG"; then
    fallocate -l "$SIZE_B" "$BASE"
    [ "$CONTENT" = random ] ||
      dd if=/dev/zero of="$BASE" bs=1M count=$((SIZE_B >> 20)) conv=notrunc status=none
  fi
  if [ "$CONTENT" = random ]; then
    dd if=/dev/urandom of="$BASE" bs=1M count=$((SIZE_B >> 20)) conv=notrunc status=none
  fi
  sync "$BASE"
  allocated "$BASE" || die "$BASE is not fully allocated"
}

# img_of CONFIG: path of the config's private copy; make_copy CONFIG: fresh cp of the base
img_of() { printf '%s/img.%s.raw' "$DIR" "$1"; }
make_copy() {
  local img; img=$(img_of "$1")
  rm -f "$img"; CREATED+=("$img")
  cp --sparse=never --reflink=never "$BASE" "$img"
  sync "$img"
  allocated "$img" || die "$img is not fully allocated"
}

DROP=0
[ "$(id -u)" = 0 ] && DROP=1
evict() {   # fsync and (as root) drop the file's pages from the page cache
  sync "$1"
  [ "$DROP" = 1 ] || return 0
  dd if="$1" iflag=nocache count=0 status=none
  if command -v fincore >/dev/null; then
    log "page cache after eviction: $(fincore -n -o PAGES,SIZE "$1" 2>/dev/null | tr -s ' ')"
  fi
}

# ------------------------------------------------------------------ servers
uri_of() { printf 'nbd+unix:///?socket=%s' "$1"; }

# start_server NAME IMG SOCK: runs CMD in the background, waits until the socket
# exists and an NBD handshake succeeds (10 s max).
start_server() {
  local name=$1 img=$2 sock=$3 i
  server_cmd "$name" "$img" "$sock"
  rm -f "$sock"
  log "--- start $name: ${CMD[*]}"
  "${CMD[@]}" >> "$LOG" 2>&1 &
  SRV_PID=$! CUR_SOCK=$sock CUR_NAME=$name
  for i in $(seq 200); do
    kill -0 "$SRV_PID" 2>/dev/null || break
    if [ -S "$sock" ] && nbdinfo --size "$(uri_of "$sock")" >/dev/null 2>>"$LOG"; then
      log "$name ready after $i polls (pid $SRV_PID)"
      return 0
    fi
    sleep 0.05
  done
  note "$name did not become ready within 10 s (pid $SRV_PID); skipped this round"
  return 1
}

proc_ticks() {   # utime+stime of a process (all its threads), in clock ticks
  local line
  { read -r line < "/proc/$1/stat"; } 2>/dev/null || { echo 0; return; }
  line=${line##*) }
  set -- $line
  echo $(( ${12} + ${13} ))
}

# ------------------------------------------------------------------ workloads
# Each runner sets R_UNIT R_VAL R_P50 R_P99 R_CLI R_STATUS.
CLIENT_LIMIT=$((RUNTIME * 3 + 60))

# run_client CMD...: runs a client under timeout, in the background, so the
# trap can stop it by PID.  Returns the client's exit status.
run_client() {
  local rc=0
  timeout -k 5 "$CLIENT_LIMIT" "$@" &
  CLI_PID=$!
  wait "$CLI_PID" || rc=$?
  CLI_PID=""
  return $rc
}

fio_spec() {   # WL -> RW BS QD
  case $1 in
    randread-qd1)    echo randread 4k 1 ;;
    randread-qd16)   echo randread 4k 16 ;;
    seqread-1m-qd8)  echo read 1M 8 ;;
    seqwrite-1m-qd8) echo write 1M 8 ;;
    fua-qd1|wflush-qd1) echo randwrite 4k 1 ;;
    fua-qd16)        echo randwrite 4k 16 ;;
  esac
}

parse_fio() {   # JSON DIR UNIT [add-sync-lat]
  local json=$1 dir=$2 unit=$3 addsync=${4:-0} line
  line=$(jq -r --arg d "$dir" --arg u "$unit" --argjson s "$addsync" '
    .jobs[0] as $j | $j[$d] as $x |
    def pct(p): (($x.clat_ns.percentile[p] // 0)
                 + (if $s == 1 then ($j.sync.lat_ns.percentile[p] // 0) else 0 end)) / 1000;
    [ (if $u == "IOPS" then $x.iops else $x.bw_bytes / 1e6 end),
      pct("50.000000"), pct("99.000000"), ($j.usr_cpu + $j.sys_cpu),
      $j.error ] | map(if type == "number" then (. * 10 | round / 10) else . end) | @tsv' "$json") || return 1
  read -r R_VAL R_P50 R_P99 R_CLI err <<< "$line"
  R_UNIT=$unit
  [ "$err" = 0 ] || { R_STATUS="fio-error-$err"; return 1; }
  [ -n "$R_VAL" ] || return 1
  R_STATUS=ok
}

fio_result() {   # RC JSON DIR UNIT ADDSYNC -> R_* (n/a unless fio exited 0 with good JSON)
  local rc=$1
  R_UNIT=$4 R_VAL=n/a R_P50="" R_P99="" R_CLI="" R_STATUS=""
  case $rc in
    0) ;;
    124|137) R_STATUS=timeout; return ;;
    *) R_STATUS="fio-exit-$rc"; return ;;
  esac
  if ! parse_fio "$2" "$3" "$4" "$5"; then
    R_VAL=n/a; R_STATUS=${R_STATUS:-bad-fio-json}
  fi
}

run_fio_nbd() {   # URI WL
  local uri=$1 wl=$2 rw bs qd unit=IOPS dir=read json=$DIR/fio.json rc=0
  read -r rw bs qd < <(fio_spec "$wl")
  [ "$bs" = 4k ] || unit=MB/s
  [[ $rw != *write ]] || dir="write"
  rm -f "$json"
  run_client fio --name="$wl" --ioengine=nbd --uri="$uri" --rw="$rw" --bs="$bs" \
    --iodepth="$qd" --numjobs=1 --time_based --runtime="$RUNTIME" \
    --output-format=json --output="$json" >> "$LOG" 2>&1 || rc=$?
  fio_result "$rc" "$json" "$dir" "$unit" 0
}

run_fio_local() {   # IMG WL direct|buffered
  local img=$1 wl=$2 mode=$3 rw bs qd unit=IOPS dir=read json=$DIR/fio.json rc=0 addsync=0
  local extra=(--invalidate=0)
  read -r rw bs qd < <(fio_spec "$wl")
  [ "$bs" = 4k ] || unit=MB/s
  [[ $rw != *write ]] || dir="write"
  [ "$mode" = buffered ] || extra+=(--direct=1)
  case $wl in
    fua-*)      extra+=(--fsync=0 --sync=dsync) ;;
    wflush-qd1) extra+=(--fdatasync=1); addsync=1 ;;
  esac
  rm -f "$json"
  run_client fio --name="$wl" --filename="$img" --ioengine=io_uring --rw="$rw" --bs="$bs" \
    --iodepth="$qd" --numjobs=1 --time_based --runtime="$RUNTIME" "${extra[@]}" \
    --output-format=json --output="$json" >> "$LOG" 2>&1 || rc=$?
  fio_result "$rc" "$json" "$dir" "$unit" "$addsync"
}

run_py() {   # URI MODE QD
  local uri=$1 mode=$2 qd=$3 json=$DIR/client.json rc=0 line
  rm -f "$json"
  run_client "$PY" "$CLIENT" --uri "$uri" --mode "$mode" --qd "$qd" \
    --seconds "$RUNTIME" > "$json" 2>> "$LOG" || rc=$?
  R_UNIT=IOPS R_VAL=n/a R_P50="" R_P99="" R_CLI=""
  log "client $mode qd$qd rc=$rc: $(cat "$json" 2>/dev/null)"
  case $rc in
    0) ;;
    2) R_STATUS=unsupported; return ;;
    124|137) R_STATUS=timeout; return ;;
    *) R_STATUS="client-exit-$rc"; return ;;
  esac
  line=$(jq -r '[.iops, .p50_us, .p99_us, .client_cpu_pct] | @tsv' "$json") || { R_STATUS=bad-json; return; }
  read -r R_VAL R_P50 R_P99 R_CLI <<< "$line"
  R_STATUS=ok
}

run_workload() {   # CONFIG IMG URI WL
  local c=$1 img=$2 uri=$3 wl=$4
  case $c in
    fio-direct)   run_fio_local "$img" "$wl" direct; return ;;
    fio-buffered) run_fio_local "$img" "$wl" buffered; return ;;
  esac
  case $wl in
    fua-qd1)    run_py "$uri" fua 1 ;;
    fua-qd16)   run_py "$uri" fua 16 ;;
    wflush-qd1) run_py "$uri" wflush 1 ;;
    *)          run_fio_nbd "$uri" "$wl" ;;
  esac
}

# ------------------------------------------------------------------ main
: >> "$LOG"
NEED=$(( (${#SEL[@]} + 1) * SIZE_B ))
AVAIL=$(( $(df --output=avail -B1 "$DIR" | tail -1) ))
[ "$AVAIL" -gt "$NEED" ] || die "need $(numfmt --to=iec $NEED) free in $DIR, have $(numfmt --to=iec $AVAIL)"

HOST=$(hostname)
GITREV=$(git -C "$SRCROOT" describe --always --dirty 2>/dev/null || echo unknown)
{
  echo "# serve-bench run $RUN_ID on $HOST, kernel $(uname -r), $(nproc) cpus, load:$(cut -d' ' -f1-3 /proc/loadavg)"
  echo "# image $SIZE ($SIZE_B bytes, $CONTENT data) in $DIR on $(findmnt -no FSTYPE,SOURCE -T "$DIR" | tr -s ' ')"
  echo "# runtime ${RUNTIME}s/workload, rounds $ROUNDS, page cache drop: $([ "$DROP" = 1 ] && echo yes || echo 'no (not root)')"
  echo "# diskimg $DISKIMG ($GITREV)"
  echo "# $(qemu-nbd --version 2>/dev/null | head -1); $(nbdkit --version 2>/dev/null | head -1); $(fio --version)"
} > "$DIR/meta.txt"
cat "$DIR/meta.txt" >&2
if [ ! -s "$OUT" ]; then
  cat "$DIR/meta.txt" > "$OUT"
  printf 'run\tround\tconfig\tworkload\tunit\tvalue\tp50_us\tp99_us\tsrv_cpu_pct\tcli_cpu_pct\tstatus\tsize\truntime_s\tcache_drop\tdate\thost\n' >> "$OUT"
else
  sed 's/^# /# (appended) /' "$DIR/meta.txt" >> "$OUT"
fi
CREATED+=("$DIR/meta.txt" "$DIR/fio.json" "$DIR/client.json")
cat "$DIR/meta.txt" >> "$LOG"
[ "$DROP" = 1 ] || note "not root: the image page cache is NOT dropped between server starts"

make_base
for c in "${SEL[@]}"; do make_copy "$c"; done
# -k keeps them; otherwise they are removed at exit, also a base reused from a kept run
CREATED+=("$BASE"); for c in "${SEL[@]}"; do CREATED+=("$(img_of "$c")"); done
echo "results -> $OUT   log -> $LOG" >&2
echo "configs: ${SEL[*]}" >&2

row_fmt='%-5s %-24s %-16s %10s %-5s %8s %8s %6s %6s %s\n'
printf "$row_fmt" round config workload value unit p50_us p99_us srv% cli% status
N=${#SEL[@]}
for round in $(seq "$ROUNDS"); do
  for j in $(seq 0 $((N - 1))); do
    c=${SEL[$(( (j + round - 1) % N ))]}
    img=$(img_of "$c") sock=$DIR/$c.sock uri=""
    evict "$img"
    log "=== round $round config $c $(date -Is)"
    if [[ $c != fio-* ]]; then
      CREATED+=("$sock")
      if ! start_server "$c" "$img" "$sock"; then stop_server "$c"; continue; fi
      uri=$(uri_of "$sock")
    fi
    for wl in $WORKLOADS; do
      t0=$(date +%s.%N) c0=0
      [ -z "$SRV_PID" ] || c0=$(proc_ticks "$SRV_PID")
      run_workload "$c" "$img" "$uri" "$wl"
      t1=$(date +%s.%N) c1=0
      [ -z "$SRV_PID" ] || c1=$(proc_ticks "$SRV_PID")
      sync "$img"
      srv=$(awk -v a="$c0" -v b="$c1" -v t0="$t0" -v t1="$t1" -v hz="$CLK_TCK" \
              'BEGIN { printf "%.1f", 100 * (b - a) / hz / (t1 - t0) }')
      [ -n "$SRV_PID" ] || srv=""
      case $R_STATUS in
        ok|unsupported) ;;
        *) note "round $round $c $wl: $R_STATUS" ;;
      esac
      if [ -n "$SRV_PID" ] && ! kill -0 "$SRV_PID" 2>/dev/null; then
        note "round $round $c: server died during $wl"
      fi
      printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' \
        "$RUN_ID" "$round" "$c" "$wl" "$R_UNIT" "$R_VAL" "$R_P50" "$R_P99" "$srv" "$R_CLI" \
        "$R_STATUS" "$SIZE_B" "$RUNTIME" "$DROP" "$(date -Is)" "$HOST" >> "$OUT"
      printf "$row_fmt" "$round" "$c" "$wl" "$R_VAL" "$R_UNIT" "$R_P50" "$R_P99" "$srv" "$R_CLI" \
        "$([ "$R_STATUS" = ok ] || echo "$R_STATUS")"
      if [ -n "$SRV_PID" ] && ! kill -0 "$SRV_PID" 2>/dev/null; then break; fi
    done
    stop_server "$c"
  done
done

echo
summary "$OUT"
if [ ${#NOTES[@]} -gt 0 ]; then
  echo; echo "notes:"; printf '  %s\n' "${NOTES[@]}"
fi

#!/usr/bin/env bash
# tls-bench.sh - NBD over TLS: diskimg serve against qemu-nbd and nbdkit with
# the same X.509 credentials, on the same image, over unix sockets.
#
# Usage: tls-bench.sh [-s SIZE] [-t SEC] [-r ROUNDS] [-q] [-k] [-b DISKIMG] [-B DISKIMG]
#                     [-p PEERS] [-w WORKLOADS] [-d DIR]
#   -s SIZE    image size (default 1G; random data, so no zero shortcut)
#   -t SEC     seconds per workload (default 10)
#   -r N       interleaved rounds (default 3)
#   -q         quick smoke test: 64M, 1 s, 1 round
#   -k         keep the scratch directory
#   -b PATH    diskimg binary (default <source>/build/cmd/diskimg)
#   -B PATH    another diskimg build to compare with (config "before"), in
#              the same rounds: for a before/after of a change
#   -p PEERS   the peers to run, space-separated (default "qemu-nbd nbdkit")
#   -w WLS     the workloads to run, space-separated (default all below):
#              more rounds of one row in the same time, for a before/after
#   -d DIR     scratch directory (default /var/tmp/diskimg-tls-bench)
#
# Configs: diskimg (serve --tls-creds), qemu-nbd (--object tls-creds-x509),
# nbdkit (--tls=require --tls-certificates --tls-verify-peer), each on its
# copy of the image (one copy per config, made once; which copy a config
# gets and the order of the configs are shuffled every round), page cache
# warm, cache mode writeback everywhere (the defaults).  Every server
# requires TLS and verifies the same client certificate (diskimg and
# qemu-nbd do by default, nbdkit when told).
#
# Workloads, one connection each (nbd-fua-client.py over nbds+unix://):
#   seqread-1m-qd8    1 MiB sequential reads, 8 in flight    MB/s
#   seqwrite-1m-qd8   1 MiB sequential writes, 8 in flight   MB/s
#   randread-4k-qd16  4 KiB random reads, 16 in flight       IOPS
#   randread-4k-qd1   4 KiB random reads, one at a time      IOPS
#   write-4k-qd1      4 KiB random writes, one at a time     IOPS
#
# Prints one line per run, then per workload the median (min-max) of each
# config and diskimg's per-round ratio against each peer (median).  Only
# processes started here are stopped, by PID.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=bench-lib.sh
. "$HERE/bench-lib.sh"
SRCROOT=$(cd "$HERE/../.." && pwd)
PY=/usr/bin/python3
CLIENT=$HERE/nbd-fua-client.py
DISKIMG=${DISKIMG:-$SRCROOT/build/cmd/diskimg}
SIZE=1G RUNTIME=10 ROUNDS=3 KEEP=0 DIR=/var/tmp/diskimg-tls-bench BASEBIN="" PEERS="qemu-nbd nbdkit"
WORKLOADS=(seqread-1m-qd8 seqwrite-1m-qd8 randread-4k-qd16 randread-4k-qd1 write-4k-qd1)

while getopts "s:t:r:qkb:B:p:w:d:h" opt; do
  case $opt in
    s) SIZE=$OPTARG ;; t) RUNTIME=$OPTARG ;; r) ROUNDS=$OPTARG ;;
    q) SIZE=64M RUNTIME=1 ROUNDS=1 ;; k) KEEP=1 ;; b) DISKIMG=$OPTARG ;; d) DIR=$OPTARG ;;
    B) BASEBIN=$OPTARG ;; p) PEERS=$OPTARG ;; w) read -ra WORKLOADS <<<"$OPTARG" ;;
    h) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) exit 2 ;;
  esac
done
for p in $PEERS; do
  case $p in qemu-nbd | nbdkit) ;; *) echo "tls-bench: unknown peer $p" >&2; exit 2 ;; esac
done
for w in "${WORKLOADS[@]}"; do
  case $w in
    seqread-1m-qd8 | seqwrite-1m-qd8 | randread-4k-qd16 | randread-4k-qd1 | write-4k-qd1) ;;
    *) echo "tls-bench: unknown workload $w" >&2; exit 2 ;;
  esac
done

for t in certtool qemu-nbd nbdkit qemu-img "$PY"; do
  command -v "$t" >/dev/null || { echo "tls-bench: $t is required" >&2; exit 1; }
done
for b in "$DISKIMG" $BASEBIN; do
  [ -x "$b" ] || { echo "tls-bench: $b is not built" >&2; exit 1; }
done

mkdir -p "$DIR"
PIDS=()
cleanup() {
  local p
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
  [ "$KEEP" = 1 ] || rm -rf "$DIR"
}
trap cleanup EXIT

# ---- credentials: a CA, a server and a client certificate (certtool)
PKI=$DIR/pki
mkdir -p "$PKI/server" "$PKI/client"
cert() { # NAME TEMPLATE-LINES...: key and certificate signed by the CA
  local name=$1; shift
  printf '%s\n' "$@" >"$PKI/$name.info"
  certtool --generate-privkey --outfile "$PKI/$name-key.pem" 2>/dev/null
  certtool --generate-certificate --load-privkey "$PKI/$name-key.pem" \
    --load-ca-certificate "$PKI/ca-cert.pem" --load-ca-privkey "$PKI/ca-key.pem" \
    --template "$PKI/$name.info" --outfile "$PKI/$name-cert.pem" 2>/dev/null
}
certtool --generate-privkey --outfile "$PKI/ca-key.pem" 2>/dev/null
printf 'cn = bench CA\nca\ncert_signing_key\nexpiration_days = 30\n' >"$PKI/ca.info"
certtool --generate-self-signed --load-privkey "$PKI/ca-key.pem" --template "$PKI/ca.info" \
  --outfile "$PKI/ca-cert.pem" 2>/dev/null
cert server 'organization = bench' 'cn = localhost' 'dns_name = localhost' \
  'tls_www_server' 'encryption_key' 'signing_key' 'expiration_days = 30'
cert client 'organization = bench' 'cn = client' 'tls_www_client' 'encryption_key' \
  'signing_key' 'expiration_days = 30'
for side in server client; do
  cp "$PKI/ca-cert.pem" "$PKI/$side/"
  cp "$PKI/$side-cert.pem" "$PKI/$side/$side-cert.pem"
  cp "$PKI/$side-key.pem" "$PKI/$side/$side-key.pem"
  chmod 600 "$PKI/$side/$side-key.pem"
done

# ---- the image: random data (no zero shortcut on reads), one copy per config
BASE=$DIR/base.raw
if [ ! -s "$BASE" ]; then
  qemu-img create -q -f raw "$BASE" "$SIZE"
  bytes=$(stat -c %s "$BASE")
  head -c "$bytes" /dev/urandom | dd of="$BASE" conv=notrunc,fsync bs=1M status=none iflag=fullblock
fi

read -ra CONFIGS <<<"diskimg${BASEBIN:+ before} $PEERS"
start_server() { # CONFIG IMG SOCK
  local img=$2 sock=$3 bin=$DISKIMG
  case $1 in
    diskimg | before)
      [ "$1" = before ] && bin=$BASEBIN
      "$bin" serve -t -f raw --tls-creds="$PKI/server" -k "$sock" "$img" \
        2>>"$DIR/server.log" &
      ;;
    qemu-nbd) qemu-nbd -t -f raw -k "$sock" \
                --object "tls-creds-x509,id=tls0,dir=$PKI/server,endpoint=server" \
                --tls-creds tls0 "$img" 2>>"$DIR/server.log" & ;;
    nbdkit) nbdkit -f -U "$sock" --tls=require --tls-certificates="$PKI/server" \
              --tls-verify-peer file "$img" 2>>"$DIR/server.log" & ;;
  esac
  SERVER=$!
  PIDS+=("$SERVER")
  wait_socket "$1" "$sock"
}

run_workload() { # WORKLOAD URI -> value
  local args
  case $1 in
    seqread-1m-qd8) args=(--mode read --pattern seq --bs 1048576 --qd 8) ;;
    seqwrite-1m-qd8) args=(--mode write --pattern seq --bs 1048576 --qd 8) ;;
    randread-4k-qd16) args=(--mode read --bs 4096 --qd 16) ;;
    randread-4k-qd1) args=(--mode read --bs 4096 --qd 1) ;;
    write-4k-qd1) args=(--mode write --bs 4096 --qd 1) ;;
  esac
  "$PY" "$CLIENT" --uri "$2" --seconds "$RUNTIME" "${args[@]}" |
    client_value
}

TSV=$DIR/results.tsv
printf 'round\tconfig\tworkload\tvalue\n' >"$TSV"
# One copy of the image per config, made once before the first round:
# copying and deleting a 1 GiB image between servers made each one's run
# depend on what the one before it freed (see tests/bench/README.md).
IMGS=()
for ((i = 0; i < ${#CONFIGS[@]}; i++)); do
  cp "$BASE" "$DIR/copy$i.raw"
  IMGS+=("$DIR/copy$i.raw")
done
sync
for ((round = 1; round <= ROUNDS; round++)); do
  # A new order every round (a fixed rotation kept each config after the
  # same neighbour), and a new copy for each config (one copy can be
  # faster to write back than another, which must not follow a config).
  mapfile -t order < <(printf '%s\n' "${CONFIGS[@]}" | shuf)
  mapfile -t imgs < <(printf '%s\n' "${IMGS[@]}" | shuf)
  echo "round $round: ${order[*]} (copies: ${imgs[*]##*/})" >&2
  for ((i = 0; i < ${#order[@]}; i++)); do
    cfg=${order[$i]} img=${imgs[$i]} sock=$DIR/${order[$i]}.sock
    cat "$img" >/dev/null # warm, like every config
    rm -f "$sock"
    start_server "$cfg" "$img" "$sock"
    uri="nbds+unix:///?socket=$sock&tls-certificates=$PKI/client"
    for wl in "${WORKLOADS[@]}"; do
      v=$(run_workload "$wl" "$uri")
      printf '%s\t%s\t%s\t%s\n' "$round" "$cfg" "$wl" "$v" | tee -a "$TSV"
      sync "$img"
    done
    stop_server
  done
done

"$PY" - "$TSV" <<'PYEOF'
import collections, statistics, sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1])][1:]
val = collections.defaultdict(dict)  # (wl, cfg) -> {round: value}
for rnd, cfg, wl, v in rows:
    val[(wl, cfg)][rnd] = float(v)
wls = list(dict.fromkeys(r[2] for r in rows))
# diskimg, then before, then the peers, whatever order the rounds ran in
cfgs = sorted(set(r[1] for r in rows), key=lambda c: (c != "diskimg", c != "before", c))
def fmt(xs):
    return "%.0f (%.0f-%.0f)" % (statistics.median(xs), min(xs), max(xs))
peers = [c for c in cfgs if c != "diskimg"]
print("\n| workload | " + " | ".join(cfgs) + " | " + " | ".join("diskimg/" + p for p in peers) + " |")
print("| --- |" + " ---: |" * (len(cfgs) + len(peers)))
for wl in wls:
    cells = [fmt(list(val[(wl, c)].values())) for c in cfgs]
    ratios = []
    for peer in peers:
        ours, theirs = val[(wl, "diskimg")], val[(wl, peer)]
        rs = [ours[r] / theirs[r] for r in ours if r in theirs and theirs[r]]
        ratios.append("%.2fx" % statistics.median(rs) if rs else "-")
    print("| %s | %s | %s |" % (wl, " | ".join(cells), " | ".join(ratios)))
PYEOF

# bench-lib.sh: pieces shared by the scripts in tests/bench (sourced;
# those that start servers set PY and DIR, and keep the running server's
# PID in SERVER).

# wait_socket NAME SOCK: wait up to 10 s for the server to listen on SOCK.
wait_socket() {
  local _
  for _ in $(seq 200); do
    [ -S "$2" ] && return 0
    kill -0 "$SERVER" 2>/dev/null || break
    sleep 0.05
  done
  echo "$(basename "$0"): $1 did not start (see $DIR/server.log)" >&2
  return 1
}

# stop_server: SIGTERM the server started last and wait for it.
stop_server() {
  kill "$SERVER" 2>/dev/null || true
  wait "$SERVER" 2>/dev/null || true
  SERVER=""
}

# client_value: nbd-fua-client.py's JSON line on stdin -> MB/s for 1 MiB
# blocks and larger, IOPS otherwise; fails on a client error.
client_value() {
  "$PY" -c 'import json, sys
d = json.load(sys.stdin)
if "iops" not in d: sys.exit("client: %s" % d)
print(round(d["iops"] * d["bs"] / 1e6, 1) if d["bs"] >= 1048576 else d["iops"])'
}

# evict_files FILE...: write back, then drop from the page cache, every
# FILE that exists (a cold start for the next case).
evict_files() {
  local f
  for f in "$@"; do
    [ -f "$f" ] || continue
    sync "$f"
    dd if="$f" iflag=nocache count=0 status=none
  done
}

# MEDIAN_AWK: put before an awk program that calls median(S), the median
# of the numbers in the space-separated string S.
MEDIAN_AWK='
  function median(s,   x, k, i, j, tmp) {
    k = split(s, x, " ")
    for (i = 1; i <= k; i++) for (j = i + 1; j <= k; j++) if (x[j] + 0 < x[i] + 0) { tmp = x[i]; x[i] = x[j]; x[j] = tmp }
    return k % 2 ? x[(k + 1) / 2] : (x[k / 2] + x[k / 2 + 1]) / 2 }
'

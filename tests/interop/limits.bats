#!/usr/bin/env bats
# Memory and file descriptors under load: 200 connections with 16
# requests in flight each; the server's RSS stays under a stated bound,
# its fds and threads return to the baseline once the clients are gone,
# and it still serves afterwards.
#
# The bound (plain builds; ASan's shadow memory and quarantine make RSS
# meaningless, so there only the fd, thread and service checks apply).
# Per connection the server holds, by design (nbd/conn.c, worker.c):
#   - one receive buffer of 64 KiB (NBD_RBUF_SIZE);
#   - up to --threads (16) worker threads, each with a request buffer of
#     max(request, 64 KiB) -- 64 KiB for the 64 KiB requests used here,
#     since a buffer is sized by its request and capped by the maximum
#     payload -- and a 512 KiB stack of which a few pages are touched
#     (count 16 KiB).
# 200 x (64 KiB + 16 x (64 KiB + 16 KiB)) = 200 x 1344 KiB = 262.5 MiB,
# plus the idle server (about 5 MiB) and malloc's per-arena slack.
# Measured on a 2-core Debian 12 VM: about 180 MiB at the peak.  The
# bound is 384 MiB: ~1.5x the design's arithmetic, ~2x the measurement.
# A server that sized every buffer for the maximum payload (32 MiB), or
# kept 1 MiB per worker, would need gigabytes and fail.

load '../helpers'
load 'lib'

RSS_BOUND_KIB=$((384 * 1024))
CONNS=200
DEPTH=16
REQ=65536

setup_file() {
    if [[ $DISKIMG == *build-san* ]] || nm -D "$DISKIMG" 2>/dev/null | grep -q __asan_init; then
        export ASAN_BUILD=1
    else
        export ASAN_BUILD=0
    fi
}

setup() {
    setup_test
    IMG=$TEST_DIR/a.img
    truncate -s 64M "$IMG"
}
teardown() { cleanup_test; }

proc_status() { awk -v k="$2:" '$1 == k { print $2 }' /proc/"$1"/status; }
fd_count() { ls /proc/"$1"/fd | wc -l; }
threads_back_to() { [[ $(proc_status "$SERVER_PID" Threads) -le $1 ]]; }
fds_back_to() { [[ $(fd_count "$SERVER_PID") -le $1 ]]; }

# LOAD: CONNS connections, DEPTH requests in flight on each (alternating
# reads and writes of REQ bytes, every one sent before any reply is
# read, so that all are in the server at once), replies checked, then
# all closed.  A thread samples the server's VmRSS every 5 ms.  Prints
# "peak-rss-kib max-fds max-threads" on success.
LOAD='
import os, sys, threading, time
import nbdraw as n

sock, pid, nconn, depth, size = sys.argv[1], int(sys.argv[2]), *map(int, sys.argv[3:6])

def status(key):
    for line in open("/proc/%d/status" % pid):
        if line.startswith(key + ":"):
            return int(line.split()[1])

peak = {"rss": 0, "threads": 0, "fds": 0}
stop = threading.Event()
def sample():
    peak["rss"] = max(peak["rss"], status("VmRSS"))
    peak["threads"] = max(peak["threads"], status("Threads"))
def sampler():
    while not stop.is_set():
        sample()
        time.sleep(0.005)
th = threading.Thread(target=sampler)
th.start()
try:
    conns = []
    for i in range(nconn):
        c = n.connect(sock, timeout=60)
        c.handshake()
        conns.append(c)
    peak["fds"] = len(os.listdir("/proc/%d/fd" % pid))
    expect = []
    for i, c in enumerate(conns):
        exp = {}
        for j in range(depth):
            # each connection has its own region, so reads are predictable
            off = (i * depth + j) * size % (64 << 20)
            if j % 2:
                exp[c.send_request(n.CMD_WRITE, off, size, payload=bytes([i % 251 + 1]) * size)] = None
            else:
                exp[c.send_request(n.CMD_READ, off, size)] = off
        expect.append(exp)
    sample()
    for c, exp in zip(conns, expect):
        for _ in range(depth):
            r = c.reply()
            assert r.error == 0, r
            off = exp.pop(r.cookie)
            if off is not None:
                assert len(r.data) == size
        assert not exp
    for c in conns:
        c.disconnect()
    for c in conns:
        assert c.is_closed(timeout=30), "server did not close after NBD_CMD_DISC"
        c.close()
finally:
    stop.set()
    th.join()
print(peak["rss"], peak["fds"], peak["threads"])
'

run_load() {
    PYTHONPATH=$BATS_TEST_DIRNAME "$PYTHON3" -c "$LOAD" "$SOCK" "$SERVER_PID" "$@"
}

@test "200 connections x 16 requests in flight: RSS bounded, fds and threads back to baseline" {
    start_server -t -e 0 "$IMG"
    local fd0 th0 rss0
    fd0=$(fd_count "$SERVER_PID")
    th0=$(proc_status "$SERVER_PID" Threads)
    rss0=$(proc_status "$SERVER_PID" VmRSS)

    run run_load "$CONNS" "$DEPTH" "$REQ"
    assert_success
    local peak fds threads
    read -r peak fds threads <<<"$output"
    echo "baseline: rss $rss0 KiB, $fd0 fds, $th0 threads; peak: rss $peak KiB, $fds fds, $threads threads" >&2
    # every connection was really open at once
    [[ $fds -ge $((fd0 + CONNS)) ]]
    if [[ $ASAN_BUILD == 0 ]]; then
        [[ $peak -lt $RSS_BOUND_KIB ]]
    fi
    # once the clients are gone, so are their fds and threads
    wait_until 30 fds_back_to "$fd0"
    wait_until 30 threads_back_to "$th0"

    # a second round: the same bound, and nothing accumulates
    run run_load "$CONNS" "$DEPTH" "$REQ"
    assert_success
    local peak2
    read -r peak2 fds threads <<<"$output"
    echo "second round: peak rss $peak2 KiB" >&2
    if [[ $ASAN_BUILD == 0 ]]; then
        [[ $peak2 -lt $RSS_BOUND_KIB ]]
        [[ $peak2 -lt $((peak + 64 * 1024)) ]]
    fi
    wait_until 30 fds_back_to "$fd0"
    wait_until 30 threads_back_to "$th0"

    # and it still serves
    require_tool nbdsh
    run nbdsh -u "$URI" -c '
h.pwrite(b"after" * 1000, 12345)
assert h.pread(5000, 12345) == b"after" * 1000
'
    assert_success
    stop_server
    [[ $SERVER_STATUS -eq 0 ]]
    run ! grep -q "Sanitizer" "$SERVER_LOG"
    [[ $(bytes_at "$IMG" 12345 5) == 6166746572 ]]
}

@test "200 clients that vanish (kill -9) with requests in flight: fds and threads back to baseline" {
    start_server -t -e 0 "$IMG"
    local fd0 th0
    fd0=$(fd_count "$SERVER_PID")
    th0=$(proc_status "$SERVER_PID" Threads)
    PYTHONPATH=$BATS_TEST_DIRNAME "$PYTHON3" -c '
import sys, time
import nbdraw as n
conns = []
for i in range(int(sys.argv[2])):
    c = n.connect(sys.argv[1], timeout=60)
    c.handshake()
    for j in range(16):
        c.send_request(n.CMD_READ, j * 65536, 65536)
    conns.append(c)
print("ready", flush=True)
time.sleep(120)
' "$SOCK" "$CONNS" >"$TEST_DIR/vanish.out" 2>&1 &
    local clients=$!
    wait_until 60 grep -q ready "$TEST_DIR/vanish.out"
    [[ $(fd_count "$SERVER_PID") -ge $((fd0 + CONNS)) ]]
    kill -KILL "$clients"
    wait "$clients" || true
    wait_until 30 fds_back_to "$fd0"
    wait_until 30 threads_back_to "$th0"
    require_tool nbdinfo
    run nbdinfo --size "$URI"
    assert_success
    assert_output 67108864
}

@test "200 clients that connect and never finish the handshake: all dropped, nothing left over" {
    start_server -t -e 0 --handshake-limit=1 "$IMG"
    local fd0 th0
    fd0=$(fd_count "$SERVER_PID")
    th0=$(proc_status "$SERVER_PID" Threads)
    run py "$SOCK" "$CONNS" <<'EOF'
import sys
import nbdraw as n
conns = []
for i in range(int(sys.argv[2])):
    c = n.connect(sys.argv[1], timeout=60)
    c.greeting()
    conns.append(c)
for c in conns:
    assert c.is_closed(timeout=60), "a silent client was not dropped"
EOF
    assert_success
    wait_until 30 fds_back_to "$fd0"
    wait_until 30 threads_back_to "$th0"
    require_tool nbdinfo
    run nbdinfo --size "$URI"
    assert_success
}

@test "maximum-size requests: memory is per request in flight (threads x 32 MiB) and is returned afterwards" {
    # 2 connections x 4 workers x 32 MiB (the advertised maximum payload)
    # = 256 MiB at most in request buffers; buffers over 1 MiB go back to
    # a shared stash that keeps at most 32 MiB (common/bufpool.h) and frees
    # the rest, so RSS comes back down.  Bound: 256 MiB + 64 MiB.
    start_server -t -e 0 --threads=4 "$IMG"
    local rss0
    rss0=$(proc_status "$SERVER_PID" VmRSS)
    run run_load 2 4 $((32 * 1048576))
    assert_success
    local peak fds threads
    read -r peak fds threads <<<"$output"
    echo "baseline rss $rss0 KiB, peak $peak KiB" >&2
    local rss_after
    rss_after=$(proc_status "$SERVER_PID" VmRSS)
    echo "after: $rss_after KiB" >&2
    if [[ $ASAN_BUILD == 0 ]]; then
        [[ $peak -lt $(((256 + 64) * 1024)) ]]
        # the large buffers were given back (no 32 MiB buffer kept per
        # worker; the stash holds at most 32 MiB)
        [[ $rss_after -lt $((rss0 + 48 * 1024)) ]]
    fi
    run nbdinfo --size "$URI"
    assert_success
}

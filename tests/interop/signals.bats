#!/usr/bin/env bats
# Process life cycle: SIGTERM, SIGINT, SIGUSR1, exiting after the last
# client (or not, with -t), and --fork with --pid-file.

load '../helpers'
load 'lib'

setup() { setup_test; }
teardown() { cleanup_test; }

# A client that completes the handshake, then waits until the server
# closes the connection (prints "closed"), for at most 60 s.
IDLE_CLIENT='
import sys
import nbdraw as n
c = n.connect(sys.argv[1])
c.handshake()
print("connected", flush=True)
print("closed" if c.is_closed(timeout=60) else "still open", flush=True)
'

# start_idle_client: runs IDLE_CLIENT in the background, waits until it is
# connected.  Sets IDLE_PID and IDLE_OUT.
start_idle_client() {
    IDLE_OUT=$TEST_DIR/idle.out
    PYTHONPATH=$BATS_TEST_DIRNAME "$PYTHON3" -c "$IDLE_CLIENT" "$SOCK" >"$IDLE_OUT" 2>&1 &
    IDLE_PID=$!
    wait_until 20 grep -q connected "$IDLE_OUT"
}

# usr1_stats_show EXPR: SIGUSR1 the server, wait for a fresh --stats file
# ($TEST_DIR/stats.json) and evaluate EXPR (python, d = the document).
usr1_stats_show() {
    rm -f "$TEST_DIR/stats.json"
    kill -USR1 "$SERVER_PID"
    wait_until 10 test -f "$TEST_DIR/stats.json" &&
        [[ $(stats_get "$TEST_DIR/stats.json" "$1") == True ]]
}

@test "SIGTERM: exit 0, statistics on stderr, socket removed" {
    require_tool nbdsh
    truncate -s 1M "$TEST_DIR/a.img"
    start_server -t "$TEST_DIR/a.img"
    run nbdsh -u "$URI" -c 'h.pwrite(b"x" * 4096, 0); h.pread(4096, 0)'
    assert_success

    stop_server TERM
    [[ $SERVER_STATUS -eq 0 ]]
    run cat "$SERVER_LOG"
    assert_output --partial "statistics after"
    assert_output --regexp "NBD_CMD_WRITE +1 requests"
    assert_output --regexp "NBD_CMD_READ +1 requests"
    [[ ! -e "$SOCK" ]]
}

@test "SIGINT: exit 0 and statistics, like SIGTERM" {
    require_tool nbdsh
    truncate -s 1M "$TEST_DIR/a.img"
    start_server -t "$TEST_DIR/a.img"
    run nbdsh -u "$URI" -c 'h.flush()'
    assert_success

    stop_server INT
    [[ $SERVER_STATUS -eq 0 ]]
    run cat "$SERVER_LOG"
    assert_output --partial "statistics after"
    assert_output --regexp "NBD_CMD_FLUSH +1 requests"
    [[ ! -e "$SOCK" ]]
}

@test "SIGTERM with a client connected: the client is disconnected, exit 0" {
    truncate -s 1M "$TEST_DIR/a.img"
    start_server -t "$TEST_DIR/a.img"
    start_idle_client

    stop_server TERM
    [[ $SERVER_STATUS -eq 0 ]]
    wait_exit "$IDLE_PID"
    run cat "$IDLE_OUT"
    assert_output --partial "closed"
}

@test "SIGTERM with several clients connected, five times over: exit 0 every time" {
    truncate -s 1M "$TEST_DIR/a.img"
    local round
    for round in 1 2 3 4 5; do
        rm -f "$TEST_DIR/clients.out"
        start_server -t -e 0 "$TEST_DIR/a.img"
        PYTHONPATH=$BATS_TEST_DIRNAME "$PYTHON3" -c '
import sys
import nbdraw as n
cs = []
for i in range(4):
    c = n.connect(sys.argv[1])
    c.handshake(structured=bool(i % 2))
    assert c.read(0, 512).error == 0
    cs.append(c)
print("connected", flush=True)
print("closed" if all(c.is_closed(timeout=60) for c in cs) else "still open", flush=True)
' "$SOCK" >"$TEST_DIR/clients.out" 2>&1 &
        local clients=$!
        wait_until 20 grep -q connected "$TEST_DIR/clients.out"
        stop_server TERM
        [[ $SERVER_STATUS -eq 0 ]]
        wait_exit "$clients"
        grep -q closed "$TEST_DIR/clients.out"
        # no sanitizer report (when built with one)
        if grep -q "Sanitizer" "$SERVER_LOG"; then
            cat "$SERVER_LOG" >&2
            return 1
        fi
    done
}

@test "SIGTERM with a client stuck in the handshake (no handshake limit): exit 0" {
    truncate -s 1M "$TEST_DIR/a.img"
    start_server -t --handshake-limit=0 "$TEST_DIR/a.img"
    PYTHONPATH=$BATS_TEST_DIRNAME "$PYTHON3" -c '
import sys
import nbdraw as n
c = n.connect(sys.argv[1])
c.greeting()
print("greeted", flush=True)
c.is_closed(timeout=60)
' "$SOCK" >"$TEST_DIR/silent.out" 2>&1 &
    local silent=$!
    wait_until 20 grep -q greeted "$TEST_DIR/silent.out"

    kill -TERM "$SERVER_PID"
    # must not wait for the silent client forever
    wait_exit "$SERVER_PID" 30
    SERVER_PID=
    kill "$silent" 2>/dev/null || true
    wait "$silent" || true
    [[ $EXIT_STATUS -eq 0 ]]
}

@test "SIGTERM with writes in flight: every acknowledged write is in the file" {
    truncate -s 4M "$TEST_DIR/a.img"
    start_server -t "$TEST_DIR/a.img"

    run py "$SOCK" "$SERVER_PID" <<'EOF'
import os, signal, sys
import nbdraw as n

c = n.connect(sys.argv[1])
c.handshake(structured=True)
cookies = {}
for i in range(64):
    cookies[c.send_request(n.CMD_WRITE, i * 65536, 65536, payload=bytes([i + 1]) * 65536)] = i
os.kill(int(sys.argv[2]), signal.SIGTERM)
acked = []
try:
    while True:
        r = c.reply()
        # a request the server ran must have succeeded; one it refused
        # because it is shutting down may say ESHUTDOWN
        assert r.error in (0, 108), r
        if r.error == 0:
            acked.append(cookies[r.cookie])
except n.Closed:
    pass
print(" ".join(map(str, acked)))
EOF
    assert_success
    local acked=$output
    wait_exit "$SERVER_PID"
    SERVER_PID=
    [[ $EXIT_STATUS -eq 0 ]]
    local i
    for i in $acked; do
        range_is "$TEST_DIR/a.img" $((i * 65536)) 65536 "$(printf '%02x' $((i + 1)))"
    done
}

@test "SIGUSR1: statistics on stderr and in --stats, and the server keeps serving" {
    require_tool nbdsh
    truncate -s 1M "$TEST_DIR/a.img"
    start_server -t --stats="$TEST_DIR/stats.json" "$TEST_DIR/a.img"
    run nbdsh -u "$URI" -c 'h.pwrite(b"u" * 512, 0)'
    assert_success

    kill -USR1 "$SERVER_PID"
    wait_until 20 grep -q "statistics after" "$SERVER_LOG"
    wait_until 20 test -f "$TEST_DIR/stats.json"
    # A request is counted just after its reply is sent, so the client may
    # see the reply first: ask again until the write shows up.
    wait_until 20 usr1_stats_show 'd["commands"]["NBD_CMD_WRITE"]["count"] == 1'
    assert server_alive
    run nbdsh -u "$URI" -c 'assert h.pread(512, 0) == b"u" * 512'
    assert_success
    wait_until 20 usr1_stats_show 'd["commands"]["NBD_CMD_READ"]["count"] == 1'
    [[ $(grep -c "statistics after" "$SERVER_LOG") -ge 2 ]]
    assert server_alive
    stop_server TERM
    [[ $SERVER_STATUS -eq 0 ]]
    [[ $(cmd_count "$TEST_DIR/stats.json" READ) -eq 1 ]]
}

@test "without -t: the server exits 0 after its only client disconnects" {
    require_tool nbdinfo
    truncate -s 1M "$TEST_DIR/a.img"
    start_server "$TEST_DIR/a.img"
    run nbdinfo --size "$URI"
    assert_success
    wait_exit "$SERVER_PID"
    SERVER_PID=
    [[ $EXIT_STATUS -eq 0 ]]
    [[ ! -e "$SOCK" ]]
}

@test "without -t (-e 0): the server waits for the last of several clients" {
    require_tool nbdsh
    truncate -s 1M "$TEST_DIR/a.img"
    start_server -e 0 "$TEST_DIR/a.img"
    start_idle_client
    run nbdsh -u "$URI" -c 'h.pwrite(b"1" * 512, 0)'
    assert_success
    # one client left: still running, and serving it
    assert server_alive
    run py "$SOCK" <<'EOF'
import sys
import nbdraw as n
c = n.connect(sys.argv[1])
c.handshake()
assert c.read(0, 512).data == b"1" * 512
c.disconnect()
c.close()
EOF
    assert_success
    assert server_alive
    kill "$IDLE_PID"
    wait "$IDLE_PID" || true
    wait_exit "$SERVER_PID"
    SERVER_PID=
    [[ $EXIT_STATUS -eq 0 ]]
}

@test "with -t: the server keeps serving after clients disconnect" {
    require_tool nbdinfo
    truncate -s 1M "$TEST_DIR/a.img"
    start_server -t "$TEST_DIR/a.img"
    local i
    for i in 1 2 3; do
        run nbdinfo --size "$URI"
        assert_success
        assert_output 1048576
    done
    assert server_alive
    stop_server TERM
    [[ $SERVER_STATUS -eq 0 ]]
    grep -q "statistics after .*, 3 connection(s)" "$SERVER_LOG"
}

@test "--fork --pid-file: returns once the socket exists; the pid file names the server" {
    require_tool nbdinfo
    truncate -s 1M "$TEST_DIR/a.img"
    # (stderr to the log: the daemon keeps it open, and "run" would wait for EOF)
    local status=0
    "$DISKIMG" serve --fork --pid-file="$TEST_DIR/pid" -t -k "$SOCK" "$TEST_DIR/a.img" \
        2>>"$SERVER_LOG" || status=$?
    [[ $status -eq 0 ]]
    [[ -S "$SOCK" ]]
    [[ -s "$TEST_DIR/pid" ]]
    local pid
    pid=$(cat "$TEST_DIR/pid")
    # cleanup_test kills it by this PID should the test fail
    SERVER_PID=$pid
    kill -0 "$pid"
    [[ $(cat "/proc/$pid/comm") == diskimg ]]
    # the socket is ready: no waiting needed
    run nbdinfo --size "$URI"
    assert_success
    assert_output 1048576

    kill -TERM "$pid"
    wait_until 20 server_gone "$pid"
    SERVER_PID=
    [[ ! -e "$SOCK" ]]
    # a clean exit removes the pid file
    [[ ! -e "$TEST_DIR/pid" ]]
}

@test "--fork: a start-up failure is reported by the parent's exit status" {
    local status=0
    "$DISKIMG" serve --fork --pid-file="$TEST_DIR/pid" -k "$SOCK" "$TEST_DIR/missing.img" \
        2>>"$SERVER_LOG" || status=$?
    [[ $status -eq 1 ]]
    grep -q "missing.img" "$SERVER_LOG"
    [[ ! -e "$SOCK" ]]
    [[ ! -e "$TEST_DIR/pid" ]]
}

@test "a second SIGTERM does not hurry the shutdown: still exit 0 with statistics" {
    require_tool nbdsh
    truncate -s 1M "$TEST_DIR/a.img"
    start_server -t "$TEST_DIR/a.img"
    run nbdsh -u "$URI" -c 'h.pwrite(b"2" * 4096, 0)'
    assert_success
    kill -TERM "$SERVER_PID"
    kill -TERM "$SERVER_PID" 2>/dev/null || true
    stop_server TERM
    [[ $SERVER_STATUS -eq 0 ]]
    grep -q "statistics after" "$SERVER_LOG"
    range_is "$TEST_DIR/a.img" 0 4096 32
}

@test "without -t: a listing, a port probe or an aborted handshake is not the client that ends the server" {
    require_tool nbdinfo
    truncate -s 1M "$TEST_DIR/a.img"
    start_server "$TEST_DIR/a.img"

    run nbdinfo --list "$URI"
    assert_success
    run py "$SOCK" <<'EOF2'
import sys
import nbdraw as n
c = n.connect(sys.argv[1])          # a probe: connect and go
c.close()
c = n.connect(sys.argv[1])          # a handshake that ends with ABORT
c.greeting()
c.send_client_flags()
c.send_option(n.OPT_ABORT)
c.option_reply()
c.close()
EOF2
    assert_success
    # the server is still there for a real client ...
    run nbdinfo --size "$URI"
    assert_success
    assert_output 1048576
    # ... and exits after that one
    wait_exit "$SERVER_PID"
    SERVER_PID=
    [[ $EXIT_STATUS -eq 0 ]]
}

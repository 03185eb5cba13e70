# tests/interop/lib.bash: helpers shared by the interop suites, loaded
# after ../helpers (load '../helpers'; load 'lib').

bats_require_minimum_version 1.5.0

# nbdsh is "python3 -m nbd": the python3 found first on PATH must be the
# one with libnbd's module (see PYTHON3 in helpers.bash), so put its
# directory first.  Being a function, this also fixes nbdsh_run.
nbdsh() {
    PATH="$(dirname "$PYTHON3"):$PATH" command nbdsh "$@"
}

# py [ARGS...] < SCRIPT: run a python script from stdin with the libnbd
# python, with tests/interop on the module path (nbdraw.py).
py() {
    PYTHONPATH="$BATS_TEST_DIRNAME${PYTHONPATH:+:$PYTHONPATH}" "$PYTHON3" - "$@"
}

# stats_get FILE EXPR: print a value from the --stats JSON document;
# EXPR is python with d bound to the document, e.g. 'd["exports"][0]["fua-native"]'.
stats_get() {
    "$PYTHON3" -c 'import json, sys
d = json.load(open(sys.argv[1]))
print(eval(sys.argv[2]))' "$1" "$2"
}

# cmd_count FILE NAME: how many NBD_CMD_NAME requests the stats recorded (0 if none).
cmd_count() {
    stats_get "$1" "d['commands'].get('NBD_CMD_$2', {}).get('count', 0)"
}

# make_pattern FILE SIZE: a file of SIZE bytes of non-repeating data.
make_pattern() {
    "$PYTHON3" -c 'import sys
n = int(sys.argv[2])
out = bytearray()
i = 0
while len(out) < n:
    out += i.to_bytes(8, "big") + b"diskimg!"
    i += 1
open(sys.argv[1], "wb").write(out[:n])' "$1" "$2"
}

# bytes_at FILE OFFSET COUNT: hex dump of COUNT bytes at OFFSET, one line.
bytes_at() {
    od -An -v -tx1 -j "$2" -N "$3" "$1" | tr -d ' \n'
}

# range_is FILE OFFSET COUNT BYTE: the COUNT bytes at OFFSET are all BYTE
# (two hex digits).  Prints where it differs when not.
range_is() {
    "$PYTHON3" -c 'import sys
path, off, n, byte = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4], 16)
with open(path, "rb") as f:
    f.seek(off)
    d = f.read(n)
want = bytes([byte]) * n
if d != want:
    i = next((i for i in range(min(len(d), n)) if d[i] != byte), len(d))
    print("%s: byte %d is not %02x (%d of %d bytes read)" % (path, off + i, byte, len(d), n),
          file=sys.stderr)
    sys.exit(1)' "$@"
}

server_alive() { [[ -n "${SERVER_PID:-}" ]] && kill -0 "$SERVER_PID" 2>/dev/null; }
# server_gone PID: the process has exited (a zombie waiting to be reaped
# by someone else, e.g. a --fork daemon's, counts as gone).
server_gone() {
    ! kill -0 "$1" 2>/dev/null || [[ $(ps -o stat= -p "$1" 2>/dev/null) == Z* ]]
}

# A free TCP port on 127.0.0.1 (and ::1): a random high one that nobody
# listens on yet.  start_server_tcp retries if it is taken meanwhile.
random_port() {
    echo $((20000 + RANDOM % 20000))
}

# start_server_tcp ADDR [serve options...] IMAGE: serve on ADDR and a random
# port (another one if that is taken); sets PORT and URI.  Readiness is
# read from /proc/net/tcp*, not by connecting: without -t a probe
# connection would count as the server's one client.
start_server_tcp() {
    local addr=$1 try
    shift
    for try in 1 2 3 4 5 6 7 8; do
        PORT=$(random_port)
        tcp_port_listening "$PORT" && continue
        "$DISKIMG" serve -b "$addr" -p "$PORT" "$@" 2>>"$SERVER_LOG" &
        SERVER_PID=$!
        if wait_tcp_listen "$PORT"; then
            if [[ "$addr" == *:* ]]; then
                URI="nbd://[$addr]:$PORT/"
            else
                URI="nbd://$addr:$PORT/"
            fi
            return 0
        fi
        stop_server KILL
        grep -q "Address already in use" "$SERVER_LOG" || break
    done
    echo "could not start a TCP server:" >&2
    cat "$SERVER_LOG" >&2
    return 1
}

# tcp_port_listening PORT: some socket listens on PORT (IPv4 or IPv6).
tcp_port_listening() {
    local hex
    hex=$(printf '%04X' "$1")
    awk -v p=":$hex" '$2 ~ p"$" && $4 == "0A" { found = 1 } END { exit !found }' \
        /proc/net/tcp /proc/net/tcp6
}

# wait_tcp_listen PORT: wait until PORT listens; fails at once if our
# server exits first.
wait_tcp_listen() {
    local i
    for ((i = 0; i < 500; i++)); do
        server_alive || return 1
        tcp_port_listening "$1" && return 0
        sleep 0.02
    done
    return 1
}

# start_extra_server SOCKET [serve options...] IMAGE: a second server,
# on its own unix socket; its PID goes to EXTRA_PIDS, which
# kill_extra_servers (call it from teardown) stops by PID.
EXTRA_PIDS=()
start_extra_server() {
    local sock=$1 pid
    shift
    "$DISKIMG" serve -k "$sock" "$@" 2>>"$SERVER_LOG" &
    pid=$!
    EXTRA_PIDS+=("$pid")
    LAST_EXTRA_PID=$pid
    wait_until 10 unix_listening "$sock"
}

# start_kit SOCKET nbdkit-args...: nbdkit in the foreground on SOCKET; its
# PID goes to EXTRA_PIDS too, so kill_extra_servers stops it.
start_kit() {
    local sock=$1
    shift
    nbdkit --exit-with-parent -f -U "$sock" "$@" 2>>"$TEST_DIR/nbdkit.log" &
    EXTRA_PIDS+=("$!")
    wait_until 10 unix_listening "$sock"
}

kill_extra_servers() {
    local pid
    for pid in "${EXTRA_PIDS[@]}"; do
        kill -KILL "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    done
    EXTRA_PIDS=()
}

# wait_exit PID [TIMEOUT_S]: wait (bounded) for a child to exit; sets
# EXIT_STATUS.  Fails if it is still running after the timeout.
wait_exit() {
    local pid=$1 limit=$((${2:-20} * 50)) i
    for ((i = 0; i < limit; i++)); do
        if ! kill -0 "$pid" 2>/dev/null; then
            EXIT_STATUS=0
            wait "$pid" 2>/dev/null || EXIT_STATUS=$?
            return 0
        fi
        # A zombie still answers kill -0: reap it if it has exited.
        if [[ $(ps -o stat= -p "$pid" 2>/dev/null) == Z* ]]; then
            EXIT_STATUS=0
            wait "$pid" 2>/dev/null || EXIT_STATUS=$?
            return 0
        fi
        sleep 0.02
    done
    echo "process $pid did not exit" >&2
    return 1
}

# stop_server [SIGNAL]: as in helpers.bash (signal the server we started,
# reap it, set SERVER_STATUS), but bounded: a server that does not exit
# within 30 s fails the test (and is killed) instead of hanging the suite.
stop_server() {
    local sig=${1:-TERM}
    SERVER_STATUS=0
    [[ -n "${SERVER_PID:-}" ]] || return 0
    kill "-$sig" "$SERVER_PID" 2>/dev/null || true
    if ! wait_exit "$SERVER_PID" 30; then
        echo "server $SERVER_PID did not exit within 30 s of SIG$sig; killing it" >&2
        kill -KILL "$SERVER_PID" 2>/dev/null || true
        wait "$SERVER_PID" 2>/dev/null || true
        SERVER_PID=
        SERVER_STATUS=255
        return 1
    fi
    SERVER_STATUS=$EXIT_STATUS
    SERVER_PID=
}

# wait_for_server: as in helpers.bash, but waits for a listening socket
# (see unix_listening), for up to 10 s (sanitizer builds start slowly).
wait_for_server() {
    local i
    for ((i = 0; i < 500; i++)); do
        if ! kill -0 "$SERVER_PID" 2>/dev/null; then
            echo "server exited early:" >&2
            cat "$SERVER_LOG" >&2
            return 1
        fi
        if [[ -n "${WAIT_PORT:-}" ]]; then
            tcp_port_listening "$WAIT_PORT" && return 0
        elif unix_listening "$SOCK"; then
            return 0
        fi
        sleep 0.02
    done
    echo "server did not start listening" >&2
    return 1
}

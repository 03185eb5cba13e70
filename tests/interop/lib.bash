# tests/interop/lib.bash: helpers shared by the interop suites, loaded
# after ../helpers (load '../helpers'; load 'lib').

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

# repeat_hex BYTE COUNT: what bytes_at prints for COUNT bytes of BYTE (hex, 2 digits).
repeat_hex() {
    local i out=
    for ((i = 0; i < $2; i++)); do out+=$1; done
    printf '%s' "$out"
}

# wait_until TIMEOUT_S CMD...: poll CMD until it succeeds (10 ms steps).
wait_until() {
    local limit=$(($1 * 100)) i
    shift
    for ((i = 0; i < limit; i++)); do
        "$@" && return 0
        sleep 0.01
    done
    return 1
}

server_alive() { [[ -n "${SERVER_PID:-}" ]] && kill -0 "$SERVER_PID" 2>/dev/null; }
server_gone() { ! kill -0 "$1" 2>/dev/null; }

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

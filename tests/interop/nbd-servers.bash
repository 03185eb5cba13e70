# tests/interop/nbd-servers.bash: other people's NBD servers (qemu-nbd,
# nbdkit, nbd-server) for the client-side interop suites, loaded after
# ../helpers and lib.  Each listens on a unix socket in $TEST_DIR (or on
# 127.0.0.1); every one started here is recorded by PID and
# stop_peers (call it from teardown) stops exactly those.

PEER_PIDS=()
PEER_LOG=

# _peer_ready SOCKET PID: wait until SOCKET listens; fail if PID exits first.
_peer_ready() {
    local sock=$1 pid=$2 i
    for ((i = 0; i < 500; i++)); do
        if server_gone "$pid"; then
            echo "NBD server $pid exited before listening on $sock:" >&2
            cat "$PEER_LOG" >&2 2>/dev/null
            return 1
        fi
        unix_listening "$sock" && return 0
        sleep 0.02
    done
    echo "NBD server $pid does not listen on $sock" >&2
    return 1
}

_peer_ready_tcp() {
    local port=$1 pid=$2 i
    for ((i = 0; i < 500; i++)); do
        server_gone "$pid" && return 1
        tcp_port_listening "$port" && return 0
        sleep 0.02
    done
    return 1
}

# start_qemu_nbd SOCKET [qemu-nbd options...] FILE: qemu-nbd in the
# foreground on SOCKET; sets PEER_PID.
start_qemu_nbd() {
    local sock=$1
    shift
    PEER_LOG=$TEST_DIR/qemu-nbd.log
    qemu-nbd -k "$sock" "$@" 2>>"$PEER_LOG" &
    PEER_PID=$!
    PEER_PIDS+=("$PEER_PID")
    _peer_ready "$sock" "$PEER_PID"
}

# start_nbdkit SOCKET [nbdkit arguments...]: nbdkit -f on SOCKET; sets PEER_PID.
start_nbdkit() {
    local sock=$1
    shift
    PEER_LOG=$TEST_DIR/nbdkit.log
    nbdkit -f -U "$sock" "$@" 2>>"$PEER_LOG" &
    PEER_PID=$!
    PEER_PIDS+=("$PEER_PID")
    _peer_ready "$sock" "$PEER_PID"
}

# start_peer_tcp qemu-nbd|nbdkit ADDR [arguments...]: on ADDR and a random
# free port (retried if taken); sets PEER_PID, PORT and PEER_URI (no export).
start_peer_tcp() {
    local kind=$1 addr=$2 try host
    shift 2
    PEER_LOG=$TEST_DIR/$kind.log
    for try in 1 2 3 4 5 6 7 8; do
        PORT=$(random_port)
        tcp_port_listening "$PORT" && continue
        case $kind in
            qemu-nbd) qemu-nbd -b "$addr" -p "$PORT" "$@" 2>>"$PEER_LOG" & ;;
            nbdkit) nbdkit -f -i "$addr" -p "$PORT" "$@" 2>>"$PEER_LOG" & ;;
        esac
        PEER_PID=$!
        PEER_PIDS+=("$PEER_PID")
        if _peer_ready_tcp "$PORT" "$PEER_PID"; then
            host=$addr
            [[ "$addr" == *:* ]] && host="[$addr]"
            PEER_URI="nbd://$host:$PORT"
            return 0
        fi
        stop_peer "$PEER_PID"
    done
    echo "could not start $kind on $addr:" >&2
    cat "$PEER_LOG" >&2
    return 1
}

# start_nbd_server SOCKET NAME FILE [export option lines...]: nbd-server
# with one export NAME of FILE on SOCKET.  nbd-server daemonizes (its -d
# serves one connection only): its PID comes from its pid file.
start_nbd_server() {
    local sock=$1 name=$2 file=$3 conf pidf line i
    shift 3
    conf=$TEST_DIR/nbd-server.$name.conf
    pidf=$TEST_DIR/nbd-server.$name.pid
    PEER_LOG=$TEST_DIR/nbd-server.log
    {
        echo "[generic]"
        echo "    unixsock = $sock"
        echo "    allowlist = true"
        echo "[$name]"
        echo "    exportname = $file"
        for line in "$@"; do echo "    $line"; done
    } >"$conf"
    rm -f "$pidf"
    nbd-server -C "$conf" -p "$pidf" >>"$PEER_LOG" 2>&1 || {
        echo "nbd-server failed to start:" >&2
        cat "$PEER_LOG" >&2
        return 1
    }
    for ((i = 0; i < 500; i++)); do
        [[ -s "$pidf" ]] && break
        sleep 0.02
    done
    PEER_PID=$(cat "$pidf")
    [[ -n "$PEER_PID" ]] || { echo "nbd-server wrote no pid file" >&2; return 1; }
    PEER_PIDS+=("$PEER_PID")
    _peer_ready "$sock" "$PEER_PID"
}

# stop_peer PID [SIGNAL]: stop one server started here and wait (bounded)
# until it is gone; PEER_STATUS is its exit status when it is our child.
stop_peer() {
    local pid=$1 sig=${2:-TERM} i
    PEER_STATUS=0
    kill "-$sig" "$pid" 2>/dev/null || true
    for ((i = 0; i < 1000; i++)); do
        server_gone "$pid" && break
        sleep 0.01
    done
    if ! server_gone "$pid"; then
        kill -KILL "$pid" 2>/dev/null || true
    fi
    wait "$pid" 2>/dev/null || PEER_STATUS=$?
    local p rest=()
    for p in "${PEER_PIDS[@]}"; do [[ "$p" == "$pid" ]] || rest+=("$p"); done
    PEER_PIDS=("${rest[@]}")
}

stop_peers() {
    local pid
    for pid in "${PEER_PIDS[@]}"; do
        stop_peer "$pid" TERM
    done
    PEER_PIDS=()
}

# unix_uri SOCKET [EXPORT]
unix_uri() {
    echo "nbd+unix:///${2:-}?socket=$1"
}

# make_sparse_src FILE: 6 MiB + 4 KiB raw image: data, a hole, written
# zeroes, data at odd offsets, a hole, a data tail.
make_sparse_src() {
    "$PYTHON3" - "$1" <<'EOF'
import sys
M = 1 << 20
def pat(n, salt):
    out = bytearray()
    i = 0
    while len(out) < n:
        out += (i * 2654435761 + salt).to_bytes(8, "big") + b"nbd-test"
        i += 1
    return bytes(out[:n])
with open(sys.argv[1], "wb") as f:
    f.truncate(6 * M + 4096)
    f.seek(0); f.write(pat(M, 1))
    f.seek(2 * M); f.write(bytes(M // 2))
    f.seek(3 * M + 12288); f.write(pat(300000, 2))
    f.seek(6 * M - 65536); f.write(pat(65536 + 4096, 3))
EOF
}

# norm_map: qemu-img/diskimg map --output=json on stdin -> one
# "start length zero data" line per run, adjacent equal runs merged.
norm_map() {
    jq -r '[.[] | {start, length, zero, data}]
        | reduce .[] as $e ([];
            if length > 0 and .[-1].zero == $e.zero and .[-1].data == $e.data
               and .[-1].start + .[-1].length == $e.start
            then .[-1].length += $e.length else . + [$e] end)
        | .[] | "\(.start) \(.length) \(.zero) \(.data)"'
}

# du_kib FILE: allocated KiB.
du_kib() {
    du -k "$1" | cut -f1
}

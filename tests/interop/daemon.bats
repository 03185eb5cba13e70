#!/usr/bin/env bats
# Staying up: systemd socket activation, --fork and --pid-file,
# --max-connections (slots freed when clients vanish), --handshake-limit,
# --idle-timeout, and what is logged (one line per connection open and
# close at default verbosity, per request only with debug flags; syslog
# once forked).

load '../helpers'
load 'lib'

setup() {
    setup_test
    IMG=$TEST_DIR/a.img
    truncate -s 4M "$IMG"
    DAEMON_PID=
    CLIENT_PIDS=()
}

teardown() {
    local p
    for p in "${CLIENT_PIDS[@]}"; do
        kill -KILL "$p" 2>/dev/null || true
        wait "$p" 2>/dev/null || true
    done
    # a --fork daemon is not our child: stop it by the pid it wrote
    if [[ -n "$DAEMON_PID" ]] && ! server_gone "$DAEMON_PID"; then
        kill -KILL "$DAEMON_PID" 2>/dev/null || true
    fi
    [[ -z "${LOGGER_PID:-}" ]] || { kill "$LOGGER_PID" 2>/dev/null; wait "$LOGGER_PID" 2>/dev/null; } || true
    cleanup_test
}

# ---------------------------------------------------------------------------
# Raw clients run as separate processes, so that a test can kill -9 one.

# A client that completes the handshake, prints "ready" and holds the
# connection until killed (or until the server closes it: "closed").
HOLDER='
import sys
import nbdraw as n
c = n.connect(sys.argv[1])
c.handshake()
assert c.read(0, 512).error == 0
print("ready", flush=True)
print("closed" if c.is_closed(timeout=120) else "still open", flush=True)
'

# A client that sends 16 reads of 1 MiB and never reads the replies.
INFLIGHT='
import sys
import nbdraw as n
c = n.connect(sys.argv[1])
c.handshake()
for i in range(16):
    c.send_request(n.CMD_READ, 0, 1 << 20)
print("ready", flush=True)
c.is_closed(timeout=120)
'

# A client that reads the greeting, then says nothing.
SILENT='
import sys
import nbdraw as n
c = n.connect(sys.argv[1])
c.greeting()
print("ready", flush=True)
print("closed" if c.is_closed(timeout=float(sys.argv[2]) if len(sys.argv) > 2 else 120)
      else "still open", flush=True)
'

# A client that connects, prints "connected", waits for the greeting
# (prints "greeted"), then completes the handshake and reads ("served").
WAITER='
import sys
import nbdraw as n
c = n.connect(sys.argv[1], timeout=60)
print("connected", flush=True)
c.greeting()
print("greeted", flush=True)
c.send_client_flags()
assert c.go() == n.REP_ACK
assert c.read(0, 4096).error == 0
c.disconnect()
print("served", flush=True)
'

# client NAME SCRIPT [ARGS...]: run SCRIPT (python) in the background with
# output in $TEST_DIR/NAME.out; sets CLIENT_PID (also kept for teardown).
client() {
    local name=$1 script=$2
    shift 2
    PYTHONPATH=$BATS_TEST_DIRNAME "$PYTHON3" -c "$script" "$@" >"$TEST_DIR/$name.out" 2>&1 &
    CLIENT_PID=$!
    CLIENT_PIDS+=("$CLIENT_PID")
}

# said NAME WORD: client NAME has printed WORD.
said() { grep -qx "$2" "$TEST_DIR/$1.out"; }
wait_said() {
    wait_until 30 said "$1" "$2" || {
        echo "client $1 did not say '$2':" >&2
        cat "$TEST_DIR/$1.out" >&2
        return 1
    }
}

# ---------------------------------------------------------------------------
# Socket activation

# activate SOCK TCP-PORT -- COMMAND...: python stand-in for systemd: a
# listening unix socket (fd 3) and, if TCP-PORT is not empty, a TCP socket
# on 127.0.0.1 (fd 4), LISTEN_FDS and LISTEN_PID set, then exec (same pid).
ACTIVATE='
import os, socket, sys
path, port = sys.argv[1], sys.argv[2]
argv = sys.argv[4:]
socks = []
u = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
u.bind(path)
u.listen(16)
socks.append(u)
if port:
    t = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    t.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    t.bind(("127.0.0.1", int(port)))
    t.listen(16)
    socks.append(t)
for i, s in enumerate(socks):
    if s.fileno() != 3 + i:
        os.dup2(s.fileno(), 3 + i)
    os.set_inheritable(3 + i, True)
os.environ["LISTEN_FDS"] = str(len(socks))
os.environ["LISTEN_PID"] = str(os.getpid())
os.execv(argv[0], argv)
'

@test "socket activation (systemd-socket-activate): the inherited unix socket is served" {
    require_tool systemd-socket-activate nbdsh
    systemd-socket-activate -l "$SOCK" "$DISKIMG" serve -t "$IMG" 2>>"$SERVER_LOG" &
    SERVER_PID=$!
    wait_until 20 unix_listening "$SOCK"
    run nbdsh -u "$URI" -c 'h.pwrite(b"A" * 4096, 0); assert h.pread(4096, 0) == b"A" * 4096'
    assert_success
    run nbdsh -u "$URI" -c 'assert h.pread(4096, 0) == b"A" * 4096'
    assert_success
    # the same process (systemd-socket-activate execs in place) is diskimg now
    [[ $(tr '\0' ' ' </proc/"$SERVER_PID"/cmdline) == "$DISKIMG serve"* ]]
    stop_server
    [[ $SERVER_STATUS -eq 0 ]]
    range_is "$IMG" 0 4096 41
}

@test "socket activation (LISTEN_FDS=2): a unix and a TCP socket are both served, no socket of its own" {
    require_tool nbdinfo
    local port try
    for try in 1 2 3 4 5; do
        port=$(random_port)
        tcp_port_listening "$port" || break
    done
    "$PYTHON3" -c "$ACTIVATE" "$SOCK" "$port" -- "$DISKIMG" serve -t -e 0 -x act "$IMG" \
        2>>"$SERVER_LOG" &
    SERVER_PID=$!
    wait_until 20 unix_listening "$SOCK"
    wait_until 20 tcp_port_listening "$port"
    run nbdinfo --size "nbd+unix:///act?socket=$SOCK"
    assert_success
    assert_output 4194304
    run nbdinfo --size "nbd://127.0.0.1:$port/act"
    assert_success
    assert_output 4194304
    stop_server
    [[ $SERVER_STATUS -eq 0 ]]
}

@test "socket activation with -k, -b or -p is an error naming the conflict" {
    run --separate-stderr timeout 20 "$PYTHON3" -c "$ACTIVATE" "$SOCK" "" -- \
        "$DISKIMG" serve -k "$TEST_DIR/other.sock" "$IMG"
    [[ $status -ne 0 ]]
    [[ $stderr == *activation* ]]
    [[ ! -e "$TEST_DIR/other.sock" ]]
}

@test "LISTEN_PID of another process: the environment is ignored, -k is used" {
    require_tool nbdinfo
    LISTEN_PID=1 LISTEN_FDS=1 "$DISKIMG" serve -t -k "$SOCK" "$IMG" 2>>"$SERVER_LOG" &
    SERVER_PID=$!
    wait_for_server
    run nbdinfo --size "$URI"
    assert_success
}

# ---------------------------------------------------------------------------
# --fork and --pid-file

@test "--fork returns once the socket is ready: connect at once, pid file names the server" {
    require_tool nbdinfo
    local round pid
    for round in 1 2 3; do
        rm -f "$TEST_DIR/d.pid"
        run "$DISKIMG" serve --fork --pid-file="$TEST_DIR/d.pid" -t -k "$SOCK" "$IMG"
        assert_success
        # no waiting: the pid file is written and the socket accepts now
        [[ -s "$TEST_DIR/d.pid" ]]
        pid=$(<"$TEST_DIR/d.pid")
        DAEMON_PID=$pid
        [[ $pid =~ ^[0-9]+$ ]]
        [[ $(wc -l <"$TEST_DIR/d.pid") -eq 1 ]]
        run nbdinfo --size "$URI"
        assert_success
        assert_output 4194304
        # it is diskimg, in a session of its own, with stdin on /dev/null
        [[ $(readlink /proc/"$pid"/exe) == "$(readlink -f "$DISKIMG")" ]]
        [[ $(ps -o sid= -p "$pid" | tr -d ' ') == "$pid" ]]
        [[ $(readlink /proc/"$pid"/fd/0) == /dev/null ]]
        # stop it by that pid
        kill -TERM "$pid"
        wait_until 30 server_gone "$pid"
        [[ ! -e "$TEST_DIR/d.pid" ]]
        [[ ! -e "$SOCK" ]]
        DAEMON_PID=
    done
}

@test "--fork: a server that cannot start makes the command fail with the reason" {
    run --separate-stderr timeout 20 "$DISKIMG" serve --fork --pid-file="$TEST_DIR/d.pid" \
        -t -k "$SOCK" "$TEST_DIR/missing.img"
    assert_failure 1
    [[ $stderr == *missing.img* ]]
    [[ ! -e "$TEST_DIR/d.pid" ]]
    [[ ! -e "$SOCK" ]]
}

@test "--pid-file without --fork: the server's own pid, removed at exit" {
    "$DISKIMG" serve -t -k "$SOCK" --pid-file="$TEST_DIR/s.pid" "$IMG" 2>>"$SERVER_LOG" &
    SERVER_PID=$!
    wait_for_server
    [[ $(<"$TEST_DIR/s.pid") == "$SERVER_PID" ]]
    stop_server
    [[ $SERVER_STATUS -eq 0 ]]
    [[ ! -e "$TEST_DIR/s.pid" ]]
}

# ---------------------------------------------------------------------------
# --max-connections

@test "--max-connections=2: a third client waits, and gets the slot of a client killed with -9" {
    start_server -t --max-connections=2 "$IMG"
    client a "$HOLDER" "$SOCK"
    local a=$CLIENT_PID
    client b "$HOLDER" "$SOCK"
    wait_said a ready
    wait_said b ready
    client w "$WAITER" "$SOCK"
    wait_said w connected
    # both slots are taken: the third is not greeted while they stay
    sleep 1
    run ! said w greeted
    kill -KILL "$a"
    wait_said w served
    # the server saw the killed client go
    wait_until 20 grep -q "closed export" "$SERVER_LOG"
    assert server_alive
}

@test "--max-connections: slots of clients killed mid-handshake or with requests in flight are freed" {
    start_server -t --max-connections=2 --handshake-limit=0 "$IMG"
    local round
    for round in 1 2 3; do
        client s$round "$SILENT" "$SOCK"
        local s=$CLIENT_PID
        client f$round "$INFLIGHT" "$SOCK"
        local f=$CLIENT_PID
        wait_said s$round ready
        wait_said f$round ready
        kill -KILL "$s" "$f"
    done
    # every slot is free again: two clients at once are served
    client a "$HOLDER" "$SOCK"
    client b "$HOLDER" "$SOCK"
    wait_said a ready
    wait_said b ready
    assert server_alive
}

@test "--max-connections=1 (the default): the second client is served after the first leaves" {
    start_server -t "$IMG"
    client a "$HOLDER" "$SOCK"
    local a=$CLIENT_PID
    wait_said a ready
    client w "$WAITER" "$SOCK"
    wait_said w connected
    sleep 1
    run ! said w greeted
    kill -TERM "$a"
    wait_said w served
}

# ---------------------------------------------------------------------------
# --handshake-limit and --idle-timeout

@test "--handshake-limit=1: a silent client is dropped and its slot goes to the next" {
    start_server -t --handshake-limit=1 --stats="$TEST_DIR/stats.json" "$IMG"
    client s "$SILENT" "$SOCK"
    wait_said s ready
    client w "$WAITER" "$SOCK"
    wait_said s closed
    wait_said w served
    grep -q "time limit" "$SERVER_LOG"
    stop_server
    [[ $(stats_get "$TEST_DIR/stats.json" 'd["handshake-failures"]') -eq 1 ]]
}

@test "--handshake-limit=1: a client dribbling one byte at a time is dropped too" {
    start_server -t -e 0 --handshake-limit=1 "$IMG"
    run py "$SOCK" <<'EOF'
import struct, sys, time
import nbdraw as n
c = n.connect(sys.argv[1])
c.greeting()
c.send_client_flags()
# an option header and a long name, one byte every 0.2 s, for at most 60 s
data = struct.pack(">QII", n.IHAVEOPT, n.OPT_GO, 1000) + b"x" * 1000
for b in data[:300]:
    try:
        c.send(bytes([b]))
    except (BrokenPipeError, ConnectionResetError):
        print("dropped")
        sys.exit(0)
    if c.is_closed(timeout=0.2):
        print("dropped")
        sys.exit(0)
print("never dropped")
EOF
    assert_output dropped
}

@test "--handshake-limit: does not apply once in transmission; 0 means never" {
    start_server -t -e 0 --handshake-limit=1 "$IMG"
    run py "$SOCK" <<'EOF'
import sys, time
import nbdraw as n
c = n.connect(sys.argv[1])
c.handshake()
time.sleep(3)   # three times the limit, idle in transmission
assert c.read(0, 4096).error == 0
c.disconnect()
EOF
    assert_success
    stop_server

    start_server -t -e 0 --handshake-limit=0 "$IMG"
    client s "$SILENT" "$SOCK" 3
    wait_said s ready
    # the silent client is still connected after 3 s (three times the
    # limit that dropped it in the tests above)
    wait_until 30 grep -qE "closed|still open" "$TEST_DIR/s.out"
    said s "still open"
}

@test "--idle-timeout=1: an idle client is closed, a busy one is not; default never" {
    start_server -t -e 0 --idle-timeout=1 "$IMG"
    run py "$SOCK" <<'EOF'
import sys, time
import nbdraw as n
busy = n.connect(sys.argv[1])
busy.handshake()
idle = n.connect(sys.argv[1])
idle.handshake()
# busy: a request every 0.2 s for 3 s
for i in range(15):
    assert busy.read(0, 512).error == 0
    time.sleep(0.2)
assert idle.is_closed(timeout=30), "idle client still connected"
assert busy.read(0, 512).error == 0
busy.disconnect()
EOF
    assert_success
    grep -q "idle" "$SERVER_LOG"
    stop_server

    start_server -t -e 0 "$IMG"
    run py "$SOCK" <<'EOF'
import sys
import nbdraw as n
c = n.connect(sys.argv[1])
c.handshake()
assert not c.is_closed(timeout=3)
assert c.read(0, 512).error == 0
EOF
    assert_success
}

# ---------------------------------------------------------------------------
# Logging

# conn_lines: the per-connection lines of the log ("diskimg: conn N: ...").
conn_lines() { grep '^diskimg: conn ' "$SERVER_LOG" || true; }

@test "logging: one line when a client opens an export and one when it closes, with peer and export" {
    # (-f raw: a guessed format adds a start-up warning to the log)
    start_server_tcp 127.0.0.1 -t -f raw -e 0 -x logged "$IMG"
    run py "$PORT" <<'EOF'
import sys
import nbdraw as n
c = n.connect(("127.0.0.1", int(sys.argv[1])))
print(c.sock.getsockname()[1])
c.handshake(name=b"logged")
for i in range(50):
    assert c.read(i * 4096, 4096).error == 0
    assert c.write(i * 4096, b"L" * 4096).error == 0
c.disconnect()
c.is_closed()
EOF
    assert_success
    local cport=$output
    wait_until 20 grep -q "closed export" "$SERVER_LOG"
    run conn_lines
    [[ ${#lines[@]} -eq 2 ]]
    [[ ${lines[0]} == *"127.0.0.1:$cport"*"opened export 'logged'"* ]]
    [[ ${lines[1]} == *"127.0.0.1:$cport"*"closed export 'logged'"* ]]
    # nothing per request, nothing else at all
    run cat "$SERVER_LOG"
    [[ ${#lines[@]} -eq 2 ]]
}

@test "logging: a handshake failure is one line with peer and reason; a listing is none" {
    require_tool nbdinfo
    start_server -t -e 0 "$IMG"
    run nbdinfo --list "$URI"
    assert_success
    run py "$SOCK" <<'EOF'
import sys
import nbdraw as n
c = n.connect(sys.argv[1])
c.greeting()
c.send(b"\xff" * 4)    # unknown client flags
c.is_closed()
EOF
    wait_until 20 grep -q "dropped" "$SERVER_LOG"
    cat "$SERVER_LOG" >&2
    run conn_lines
    [[ ${#lines[@]} -eq 1 ]]
    [[ ${lines[0]} == *"unix socket"*"dropped"* ]]
    [[ ${lines[0]} == *"client flags"* ]]
}

@test "logging: --debug=nbd.requests logs every request; without it nothing per request" {
    require_tool nbdsh
    start_server -t -e 0 --debug=nbd.requests "$IMG"
    run nbdsh -u "$URI" -c '
for i in range(40):
    h.pread(512, i * 512)
'
    assert_success
    stop_server
    local n
    n=$(grep -c -i "read" "$SERVER_LOG")
    [[ $n -ge 40 ]]

    : >"$SERVER_LOG"
    start_server -t -e 0 "$IMG"
    run nbdsh -u "$URI" -c '
for i in range(40):
    h.pread(512, i * 512)
'
    assert_success
    wait_until 20 grep -q "closed export" "$SERVER_LOG"
    run conn_lines
    [[ ${#lines[@]} -eq 2 ]]
}

# ---------------------------------------------------------------------------
# syslog once forked.  Observed cheaply in a private mount namespace
# (unshare -m, root only): /dev there is a tmpfs whose /dev/log is our own
# datagram socket, written to $TEST_DIR/syslog.txt by a small listener.

LOGGER='
import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.bind(sys.argv[1])
print("ready", flush=True)
with open(sys.argv[2], "ab", buffering=0) as f:
    while True:
        f.write(s.recv(65536).replace(b"\n", b" ") + b"\n")
'

# fork_with_syslog SERVE-OPTIONS...: diskimg serve --fork in a mount
# namespace whose /dev/log is ours; stderr to $TEST_DIR/daemon.err.
fork_with_syslog() {
    require_tool unshare
    [[ $EUID -eq 0 ]] || skip "observing syslog needs root (unshare -m)"
    PYTHONPATH= "$PYTHON3" -c "$LOGGER" "$TEST_DIR/log.sock" "$TEST_DIR/syslog.txt" \
        >"$TEST_DIR/logger.out" 2>&1 &
    LOGGER_PID=$!
    wait_until 20 grep -q ready "$TEST_DIR/logger.out"
    mkdir "$TEST_DIR/olddev"
    unshare -m sh -ec '
t=$1
shift
mount --rbind /dev "$t/olddev"
mount -t tmpfs tmpfs /dev
for f in null zero urandom random; do
    touch "/dev/$f"
    mount --bind "$t/olddev/$f" "/dev/$f"
done
touch /dev/log
mount --bind "$t/log.sock" /dev/log
exec "$@" 2>"$t/daemon.err"
' sh "$TEST_DIR" "$DISKIMG" serve --fork --pid-file="$TEST_DIR/d.pid" "$@"
    DAEMON_PID=$(<"$TEST_DIR/d.pid")
}

@test "syslog once forked: connection lines go to syslog, not to the old stderr" {
    require_tool nbdinfo
    fork_with_syslog -t -k "$SOCK" -x sys "$IMG"
    run nbdinfo --size "nbd+unix:///sys?socket=$SOCK"
    assert_success
    wait_until 20 grep -q "closed export 'sys'" "$TEST_DIR/syslog.txt"
    grep -q "diskimg\[$DAEMON_PID\]: .*opened export 'sys'" "$TEST_DIR/syslog.txt"
    run ! grep -q "opened export" "$TEST_DIR/daemon.err"
    kill -TERM "$DAEMON_PID"
    wait_until 30 server_gone "$DAEMON_PID"
    DAEMON_PID=
}

@test "--fork: the statistics at exit are not lost (stderr, as the man page says, or syslog)" {
    require_tool nbdinfo
    fork_with_syslog -t -k "$SOCK" "$IMG"
    run nbdinfo --size "$URI"
    assert_success
    kill -TERM "$DAEMON_PID"
    wait_until 30 server_gone "$DAEMON_PID"
    DAEMON_PID=
    sleep 0.2 # let the listener write the last datagram
    cat "$TEST_DIR/daemon.err" "$TEST_DIR/syslog.txt" >&2
    grep -q "statistics after" "$TEST_DIR/daemon.err" "$TEST_DIR/syslog.txt"
}

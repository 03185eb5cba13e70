#!/usr/bin/env bats
# diskimg serve as a service: systemd socket activation (LISTEN_PID,
# LISTEN_FDS, sockets from fd 3), --fork and --pid-file, client slots
# (-e / --max-connections) and how they are freed, --handshake-limit,
# --idle-timeout, and the per-connection log lines.

load '../helpers'
load 'lib'

setup() {
    setup_test
    WRAPPER_PID=
    CLIENT_PIDS=()
}

teardown() {
    local pid
    for pid in "${CLIENT_PIDS[@]}"; do
        kill -KILL "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    done
    if [[ -n "$WRAPPER_PID" ]]; then
        [[ -n "${SERVER_PID:-}" ]] && kill -KILL "$SERVER_PID" 2>/dev/null
        SERVER_PID=
        kill -KILL "$WRAPPER_PID" 2>/dev/null || true
        wait "$WRAPPER_PID" 2>/dev/null || true
    fi
    cleanup_test
}

# --- systemd socket activation ------------------------------------------

# The activation wrapper: binds and listens on each unix socket PATH (as
# systemd does), forks; the child puts the sockets at fd 3, 4, ... (inheritable),
# sets LISTEN_PID to its own pid and LISTEN_FDS, and execs the command.
# The parent writes the child's pid to PIDFILE, keeps its copies of the
# sockets, and exits with the child's status.
#   activate.py PIDFILE PATH[,PATH...] COMMAND...
write_activator() {
    ACTIVATE=$TEST_DIR/activate.py
    cat >"$ACTIVATE" <<'EOF'
import os
import socket
import sys

pidfile, paths, argv = sys.argv[1], sys.argv[2].split(","), sys.argv[3:]
socks = []
for p in paths:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(p)
    s.listen(16)
    socks.append(s)
pid = os.fork()
if pid == 0:
    # Move the sockets out of the way first, then to 3, 4, ...: one of
    # them may already be fd 3 (then only its inheritable flag changes).
    fds = [os.dup(s.fileno()) if s.fileno() < 3 + len(socks) else s.fileno() for s in socks]
    for i, fd in enumerate(fds):
        if fd != 3 + i:
            os.dup2(fd, 3 + i)   # dup2 makes the copy inheritable
        else:
            os.set_inheritable(fd, True)
    os.environ["LISTEN_PID"] = str(os.getpid())
    os.environ["LISTEN_FDS"] = str(len(socks))
    os.environ["LISTEN_FDNAMES"] = ":".join("nbd%d" % i for i in range(len(socks)))
    os.execv(argv[0], argv)
with open(pidfile + ".tmp", "w") as f:
    f.write("%d\n" % pid)
os.rename(pidfile + ".tmp", pidfile)
_, status = os.waitpid(pid, 0)
sys.exit(os.waitstatus_to_exitcode(status))
EOF
}

# start_activated PATHS serve-options...: diskimg serve under the wrapper,
# on PATHS (comma-separated); sets WRAPPER_PID and SERVER_PID (the server
# itself, a child of the wrapper).
start_activated() {
    local paths=$1
    shift
    write_activator
    "$PYTHON3" "$ACTIVATE" "$TEST_DIR/child.pid" "$paths" "$DISKIMG" serve "$@" 2>>"$SERVER_LOG" &
    WRAPPER_PID=$!
    wait_until 10 test -s "$TEST_DIR/child.pid"
    SERVER_PID=$(cat "$TEST_DIR/child.pid")
    [[ -n "$SERVER_PID" ]]
}

# stop_activated: SIGTERM to the server, its status (via the wrapper) in
# SERVER_STATUS.
stop_activated() {
    kill -TERM "$SERVER_PID"
    wait_exit "$WRAPPER_PID" 30
    SERVER_STATUS=$EXIT_STATUS
    WRAPPER_PID=
    SERVER_PID=
}

@test "socket activation: serves on the inherited socket, leaves systemd's socket file alone" {
    require_tool nbdinfo nbdsh
    make_pattern "$TEST_DIR/a.img" 1048576
    start_activated "$SOCK" -t "$TEST_DIR/a.img"

    # the wrapper listens already: no waiting for the server is needed
    run nbdinfo --size "$URI"
    assert_success
    assert_output 1048576
    run nbdsh -u "$URI" -c 'h.pwrite(b"\x42" * 4096, 4096); h.flush()'
    assert_success
    # the server made no socket of its own, and no TCP listener
    local socks=("$TEST_DIR"/*.sock)
    [[ ${#socks[@]} -eq 1 ]]

    stop_activated
    [[ $SERVER_STATUS -eq 0 ]]
    range_is "$TEST_DIR/a.img" 4096 4096 42
    # the socket belongs to systemd (here: the wrapper): not removed
    [[ -S "$SOCK" ]]
    grep -q "opened export ''" "$SERVER_LOG"
}

@test "socket activation with two sockets (LISTEN_FDS=2): both are served" {
    require_tool nbdinfo
    truncate -s 2M "$TEST_DIR/a.img"
    start_activated "$SOCK,$TEST_DIR/second.sock" -t -e 0 "$TEST_DIR/a.img"

    run nbdinfo --size "$URI"
    assert_success
    assert_output 2097152
    run nbdinfo --size "nbd+unix:///?socket=$TEST_DIR/second.sock"
    assert_success
    assert_output 2097152
    stop_activated
    [[ $SERVER_STATUS -eq 0 ]]
}

@test "socket activation: refused together with -k, -p or -b, in one line" {
    truncate -s 1M "$TEST_DIR/a.img"
    local opts
    # (loopback only, should the server wrongly listen after all)
    for opts in "-k $TEST_DIR/other.sock" "-b 127.0.0.1" "-b 127.0.0.1 -p $(random_port)"; do
        : >"$SERVER_LOG"
        # shellcheck disable=SC2086
        start_activated "$SOCK" -t $opts "$TEST_DIR/a.img"
        wait_exit "$WRAPPER_PID" 20
        WRAPPER_PID=
        SERVER_PID=
        [[ $EXIT_STATUS -eq 1 ]]
        [[ $(wc -l <"$SERVER_LOG") -eq 1 ]]
        grep -q "socket activation cannot be combined" "$SERVER_LOG"
        [[ ! -e "$TEST_DIR/other.sock" ]]
        rm -f "$SOCK" "$TEST_DIR/child.pid"
    done
}

@test "socket activation: LISTEN_PID of another process is not for us (-k is used)" {
    require_tool nbdinfo
    truncate -s 1M "$TEST_DIR/a.img"
    # LISTEN_PID names this shell, not the server
    LISTEN_PID=$$ LISTEN_FDS=1 start_server -t "$TEST_DIR/a.img"
    # (the server did get them)
    tr '\0' '\n' <"/proc/$SERVER_PID/environ" | grep -qx "LISTEN_PID=$$"
    run nbdinfo --size "$URI"
    assert_success
    assert_output 1048576
}

@test "socket activation: an inherited fd 3 that is not a listening socket is refused at start" {
    truncate -s 1M "$TEST_DIR/a.img"
    # fd 3 is a regular file: accept() can never work on it.  (Output
    # capped: a server that loops on accept() errors writes without end.)
    local status=0
    timeout 5 "$PYTHON3" -c 'import os, sys
fd = os.open(sys.argv[1], os.O_RDONLY)
if fd != 3:
    os.dup2(fd, 3)
os.set_inheritable(3, True)
os.environ["LISTEN_PID"] = str(os.getpid())
os.environ["LISTEN_FDS"] = "1"
os.execv(sys.argv[2], sys.argv[2:])' "$TEST_DIR/a.img" "$DISKIMG" serve -t "$TEST_DIR/a.img" \
        2>&1 >/dev/null | head -c 20000 >"$SERVER_LOG" || true
    status=${PIPESTATUS[0]}
    echo "status $status, log:" >&2
    head -5 "$SERVER_LOG" >&2
    [[ $status -eq 1 ]]
    [[ $(wc -l <"$SERVER_LOG") -eq 1 ]]
}

# --- --fork and --pid-file -------------------------------------------------

@test "--fork --pid-file: ready when it returns, five times over; the pid in the file serves and stops" {
    require_tool nbdsh
    truncate -s 1M "$TEST_DIR/a.img"
    local round pid status
    for round in 1 2 3 4 5; do
        status=0
        "$DISKIMG" serve --fork --pid-file="$TEST_DIR/pid" -t -e 0 -k "$SOCK" \
            "$TEST_DIR/a.img" 2>>"$SERVER_LOG" || status=$?
        [[ $status -eq 0 ]]
        pid=$(cat "$TEST_DIR/pid")
        SERVER_PID=$pid   # for cleanup_test, should the test fail
        # connect at once: no waiting, no retrying
        run py "$SOCK" "$round" <<'EOF'
import sys
import nbdraw as n
c = n.connect(sys.argv[1])
c.handshake()
r = c.write(int(sys.argv[2]) * 4096, bytes([int(sys.argv[2])]) * 4096)
assert r.error == 0, r
c.disconnect()
EOF
        assert_success
        # a daemon: its own session, stderr no longer ours (syslog from now on)
        [[ $(cat "/proc/$pid/comm") == diskimg ]]
        [[ $(ps -o sid= -p "$pid" | tr -d ' ') -eq $pid ]]
        [[ $(readlink "/proc/$pid/fd/2") == /dev/null ]]
        kill -TERM "$pid"
        wait_until 30 server_gone "$pid"
        SERVER_PID=
        [[ ! -e "$TEST_DIR/pid" && ! -e "$SOCK" ]]
        range_is "$TEST_DIR/a.img" $((round * 4096)) 4096 "0$round"
    done
    # nothing was logged to our stderr after the fork
    run ! grep -q "opened export" "$SERVER_LOG"
}

@test "--fork: a TLS credential problem is reported by the parent, in one line, exit 1" {
    truncate -s 1M "$TEST_DIR/a.img"
    run --separate-stderr timeout 20 "$DISKIMG" serve --fork --pid-file="$TEST_DIR/pid" \
        -k "$SOCK" --tls-creds="$TEST_DIR/no-such-dir" "$TEST_DIR/a.img"
    [[ $status -eq 1 ]]
    [[ $(printf '%s\n' "$stderr" | wc -l) -eq 1 ]]
    [[ $stderr == *no-such-dir* ]]
    [[ ! -e "$SOCK" && ! -e "$TEST_DIR/pid" ]]
}

@test "--pid-file without --fork: the server's own pid, removed at a clean exit" {
    truncate -s 1M "$TEST_DIR/a.img"
    start_server -t --pid-file="$TEST_DIR/pid" "$TEST_DIR/a.img"
    [[ $(cat "$TEST_DIR/pid") -eq $SERVER_PID ]]
    stop_server
    [[ $SERVER_STATUS -eq 0 ]]
    [[ ! -e "$TEST_DIR/pid" ]]
}

@test "--pid-file and --stats replace a link planted at their name instead of writing through it" {
    truncate -s 1M "$TEST_DIR/a.img"
    echo precious >"$TEST_DIR/victim"
    echo precious >"$TEST_DIR/victim2"
    ln -s "$TEST_DIR/victim" "$TEST_DIR/pid"
    ln -s "$TEST_DIR/victim2" "$TEST_DIR/stats.json"
    # and a dangling one: it must not create its target
    ln -s "$TEST_DIR/created-through-link" "$TEST_DIR/stats2.json"
    start_server -t --pid-file="$TEST_DIR/pid" --stats="$TEST_DIR/stats.json" "$TEST_DIR/a.img"
    [[ ! -L "$TEST_DIR/pid" && -f "$TEST_DIR/pid" ]]
    [[ $(cat "$TEST_DIR/pid") -eq $SERVER_PID ]]
    kill -USR1 "$SERVER_PID"
    wait_until 20 test -f "$TEST_DIR/stats.json" -a ! -L "$TEST_DIR/stats.json"
    stats_get "$TEST_DIR/stats.json" 'd["connections"]'
    stop_server
    [[ $SERVER_STATUS -eq 0 ]]
    [[ $(cat "$TEST_DIR/victim") == precious && $(cat "$TEST_DIR/victim2") == precious ]]
    [[ ! -e "$TEST_DIR/pid" ]]

    start_server -t --stats="$TEST_DIR/stats2.json" "$TEST_DIR/a.img"
    stop_server
    [[ $SERVER_STATUS -eq 0 ]]
    [[ ! -e "$TEST_DIR/created-through-link" ]]
    [[ ! -L "$TEST_DIR/stats2.json" && -f "$TEST_DIR/stats2.json" ]]
    # no temporary file is left behind
    [[ -z $(find "$TEST_DIR" -name '*.tmp*') ]]
}

@test "--pid-file in a directory that does not exist: exit 1, one line naming it" {
    truncate -s 1M "$TEST_DIR/a.img"
    run --separate-stderr "$DISKIMG" serve -k "$SOCK" --pid-file="$TEST_DIR/nodir/pid" \
        "$TEST_DIR/a.img"
    [[ $status -eq 1 ]]
    [[ $(printf '%s\n' "$stderr" | wc -l) -eq 1 ]]
    [[ $stderr == *"--pid-file: $TEST_DIR/nodir/pid: cannot create"*"No such file or directory"* ]]
    [[ ! -e "$SOCK" ]]
}

# --- client slots -------------------------------------------------------------

@test "--max-connections=2: a third client waits in the backlog until one leaves, then is served" {
    make_pattern "$TEST_DIR/a.img" 1048576
    start_server -t --max-connections=2 "$TEST_DIR/a.img"

    run py "$SOCK" "$TEST_DIR/a.img" <<'EOF'
import socket
import sys
import nbdraw as n

sock, path = sys.argv[1:3]
data = open(path, "rb").read()
c1 = n.connect(sock)
c1.handshake()
c2 = n.connect(sock)
c2.handshake()
# the third connects (the backlog takes it) but gets no greeting yet
c3 = n.connect(sock)
c3.sock.settimeout(1.5)
try:
    got = c3.sock.recv(18)
    sys.exit("a third client was greeted while two slots were taken: %r" % got)
except socket.timeout:
    pass
c3.sock.settimeout(20)
# both slot holders are served meanwhile
assert c1.read(0, 4096).data == data[:4096]
assert c2.read(4096, 4096).data == data[4096:8192]
# one leaves politely: the third is greeted and served
c1.disconnect()
c1.close()
c3.handshake()
assert c3.read(8192, 4096).data == data[8192:12288]
# and now a fourth waits, until the second vanishes without a goodbye
c4 = n.connect(sock)
c4.sock.settimeout(1.5)
try:
    got = c4.sock.recv(18)
    sys.exit("a fourth client was greeted with both slots taken: %r" % got)
except socket.timeout:
    pass
c4.sock.settimeout(20)
c2.close()
c4.handshake()
assert c4.read(0, 4096).data == data[:4096]
assert c3.read(0, 4096).data == data[:4096]
EOF
    assert_success
    [[ $(grep -c "opened export" "$SERVER_LOG") -eq 4 ]]
}

@test "-e 2: slots are freed when clients are killed (-9) at any stage, 20 times" {
    require_tool nbdinfo
    make_pattern "$TEST_DIR/a.img" 1048576
    start_server -t -e 2 --handshake-limit=0 "$TEST_DIR/a.img"

    # A client that gets to STAGE, says "ready", and waits to be killed:
    # greeted (mid-handshake), idle in transmission, or with reads and a
    # half-sent write in flight.
    local client='
import sys, time
import nbdraw as n
stage = sys.argv[2]
c = n.connect(sys.argv[1])
if stage == "greeted":
    c.greeting()
elif stage == "idle":
    c.handshake()
else:
    c.handshake(structured=True)
    for i in range(16):
        c.send_request(n.CMD_READ, i * 65536, 65536)
    c.send(b"\x25\x60\x95\x13\x00\x00\x00\x01" + b"\x00" * 8)
print("ready", flush=True)
time.sleep(120)
'
    local round stage a b
    for round in 1 2 3 4 5 6 7 8 9 10; do
        stage=$(echo greeted idle busy | cut -d' ' -f$((round % 3 + 1)))
        PYTHONPATH=$BATS_TEST_DIRNAME "$PYTHON3" -c "$client" "$SOCK" "$stage" \
            >"$TEST_DIR/a.out" 2>&1 &
        a=$!
        CLIENT_PIDS+=("$a")
        PYTHONPATH=$BATS_TEST_DIRNAME "$PYTHON3" -c "$client" "$SOCK" busy \
            >"$TEST_DIR/b.out" 2>&1 &
        b=$!
        CLIENT_PIDS+=("$b")
        # both hold a slot (a third could not have been greeted)
        wait_until 30 grep -q ready "$TEST_DIR/a.out"
        wait_until 30 grep -q ready "$TEST_DIR/b.out"
        kill -KILL "$a" "$b"
        wait "$a" "$b" 2>/dev/null || true
    done
    CLIENT_PIDS=()
    # two clients at once still get both slots
    run py "$SOCK" <<'EOF'
import sys
import nbdraw as n
cs = [n.connect(sys.argv[1], timeout=30) for _ in range(2)]
for c in cs:
    c.handshake()
    assert c.read(0, 512).error == 0
EOF
    assert_success
    run timeout 30 nbdinfo --size "$URI"
    assert_success
    assert_output 1048576
    assert server_alive
}

# --- time limits ----------------------------------------------------------------

@test "--handshake-limit=1 drops a silent client and says why; 0 keeps it" {
    truncate -s 1M "$TEST_DIR/a.img"
    start_server -t -e 0 --handshake-limit=1 "$TEST_DIR/a.img"
    run py "$SOCK" <<'EOF'
import sys
import nbdraw as n
silent = n.connect(sys.argv[1])
silent.greeting()
assert silent.is_closed(timeout=30), "a silent client was never dropped"
EOF
    assert_success
    grep -q "dropped during the handshake: time limit reached" "$SERVER_LOG"
    stop_server

    start_server -t -e 0 --handshake-limit=0 "$TEST_DIR/a.img"
    run py "$SOCK" <<'EOF'
import sys
import nbdraw as n
silent = n.connect(sys.argv[1])
silent.greeting()
assert not silent.is_closed(timeout=2.5), "dropped without a handshake limit"
silent.send_client_flags()
assert silent.go() == n.REP_ACK
EOF
    assert_success
}

@test "--idle-timeout=1 closes an idle client, not one that sends a request every 0.3 s" {
    make_pattern "$TEST_DIR/a.img" 1048576
    start_server -t -e 0 --idle-timeout=1 "$TEST_DIR/a.img"

    run py "$SOCK" "$TEST_DIR/a.img" <<'EOF'
import sys
import time
import nbdraw as n

sock, path = sys.argv[1:3]
data = open(path, "rb").read()
idle = n.connect(sock)
idle.handshake()
busy = n.connect(sock)
busy.handshake(structured=True)
# the idle one is closed while the busy one keeps going for 4 s or more
closed = False
for i in range(40):
    r = busy.read(i * 4096, 4096)
    assert r.error == 0 and r.data == data[i * 4096:(i + 1) * 4096], r
    if not closed:
        closed = idle.is_closed(timeout=0.3)
    else:
        time.sleep(0.3)
    if closed and i >= 14:
        break
assert closed or idle.is_closed(timeout=30), "the idle client was never closed"
# and the busy one is still served
assert busy.read(0, 4096).data == data[:4096]
busy.disconnect()
EOF
    assert_success
    grep -q "idle for 1 s, closing" "$SERVER_LOG"
    [[ $(grep -c "idle for 1 s, closing" "$SERVER_LOG") -eq 1 ]]
    # an idle client in the handshake is the handshake limit's business,
    # and without --idle-timeout nobody is closed for idling
    stop_server
    start_server -t -e 0 "$TEST_DIR/a.img"
    run py "$SOCK" <<'EOF'
import sys
import nbdraw as n
c = n.connect(sys.argv[1])
c.handshake()
assert not c.is_closed(timeout=2.5), "closed without --idle-timeout"
assert c.read(0, 512).error == 0
EOF
    assert_success
}

# --- logs ------------------------------------------------------------------------

@test "log: one 'opened export' and one 'closed export' line per client, no per-request lines" {
    require_tool nbdsh qemu-io nbdinfo
    truncate -s 1M "$TEST_DIR/a.img"
    # (-f raw: a guessed format adds a start-up warning to the log)
    start_server -t -f raw -e 0 -x disk "$TEST_DIR/a.img"
    local u="nbd+unix:///disk?socket=$SOCK"

    run nbdsh -u "$u" -c '
h.pwrite(b"\x01" * 4096, 0)
h.pread(4096, 0)
h.flush()
h.trim(4096, 8192)
h.zero(4096, 16384)
'
    assert_success
    run qemu-io -f raw "$u" -c 'write -P 0x33 64k 64k' -c 'read -P 0x33 64k 64k'
    assert_success
    run nbdinfo --size "$u"
    assert_success
    # listings and refused names open nothing
    run nbdinfo --list "$URI"
    assert_success
    stop_server

    run grep -v -e '^ ' -e 'statistics after' "$SERVER_LOG"
    echo "$output" >&2
    # three clients, two lines each, nothing else
    [[ ${#lines[@]} -eq 6 ]]
    [[ $(grep -c "unix socket opened export 'disk'$" "$SERVER_LOG") -eq 3 ]]
    [[ $(grep -c "unix socket closed export 'disk' after [0-9]* request(s)$" "$SERVER_LOG") -eq 3 ]]
    grep -q "closed export 'disk' after 5 request(s)" "$SERVER_LOG"
}

#!/usr/bin/env bats
# Clients that stop reading what the server sends: during the handshake
# (option replies), in transmission (read replies, plain and TLS), and
# when the server is told to stop.  None of them may hold a client slot
# or the server's exit: the handshake limit covers sends, --idle-timeout
# covers a reply the client does not take, and SIGTERM gives replies
# NBD_SHUTDOWN_GRACE_S (5 s) before it drops such clients.  And one
# stalled backend (nbdfake.py): a TLS request behind a read that hangs
# there is still answered.
#
# The stalled clients are python processes (nbdraw.py) that flood the
# server and then sleep with the socket open; the test kills them.

load '../helpers'
load 'lib'
load 'tls-lib'

setup() {
    setup_test
    STALL_PIDS=()
}

teardown() {
    local pid
    for pid in "${STALL_PIDS[@]}"; do
        kill -KILL "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    done
    cleanup_test
}

# start_staller MODE [ARGS...]: a client that stalls as MODE says, in the
# background; waits until it has sent everything ("stalled" on its
# stdout).  Modes:
#   options N       handshake, then N NBD_OPT_LIST options, never reading
#   reads N SIZE    transmission, N reads of SIZE bytes, never reading
#   write-reads N SIZE   a 1 MiB write of 0x5a at 0, reply read, then as reads
#   slow N SIZE     reads, then takes the replies 256 KiB every 0.4 s
STALLER='
import struct, sys, time
import nbdraw as n

sock, mode = sys.argv[1], sys.argv[2]
args = [int(a) for a in sys.argv[3:]]
c = n.connect(sock, timeout=60)
if mode == "options":
    c.greeting()
    c.send_client_flags()
    # one send: as many small ones would fill our socket buffer first
    c.send(struct.pack(">QII", n.IHAVEOPT, n.OPT_LIST, 0) * args[0])
else:
    c.handshake(structured=True)
    if mode == "write-reads":
        assert c.write(0, b"\x5a" * 1048576).error == 0
    c.send(b"".join(struct.pack(">IHHQQI", n.REQUEST_MAGIC, 0, n.CMD_READ, i,
                                (i * args[1]) % (32 << 20), args[1]) for i in range(args[0])))
print("stalled", flush=True)
if mode == "slow":
    got = 0
    while got < args[0] * args[1]:
        time.sleep(0.4)
        got += len(c.sock.recv(262144))
    print("all replies taken", flush=True)
time.sleep(300)
'

start_staller() {
    local out=$TEST_DIR/staller.$RANDOM.out
    PYTHONPATH=$BATS_TEST_DIRNAME "$PYTHON3" -c "$STALLER" "$SOCK" "$@" >"$out" 2>&1 &
    STALL_PIDS+=("$!")
    STALL_OUT=$out
    wait_until 30 grep -q stalled "$out" || {
        cat "$out" >&2
        return 1
    }
}

# log_count_is N TEXT: the server log has N lines with TEXT.
log_count_is() { [[ $(grep -c "$2" "$SERVER_LOG") -eq $1 ]]; }

# An export whose NBD_OPT_LIST reply is 4 KiB: 300 unread listings are
# 1.2 MiB, more than the socket buffers of both ends hold.
start_listing_server() {
    truncate -s 1M "$TEST_DIR/a.img"
    start_server -t "$@" -D "$(head -c 4000 /dev/zero | tr '\0' d)" "$TEST_DIR/a.img"
}

@test "-e 1: a client that never reads its option replies loses the slot at the handshake limit" {
    require_tool nbdinfo
    start_listing_server -e 1 --handshake-limit=2
    start_staller options 300
    # nbdinfo waits in the listen queue until the staller is dropped
    run timeout 60 nbdinfo --size "$URI"
    assert_success
    assert_output 1048576
    grep -q "dropped during the handshake: time limit reached" "$SERVER_LOG"
    grep -q "client limit reached (-e/--shared=1): a new client waits" "$SERVER_LOG"
    [[ $(grep -c "client limit reached" "$SERVER_LOG") -eq 1 ]]
}

@test "-e 0: clients that never read option replies are all dropped; others are served meanwhile" {
    start_listing_server -e 0 --handshake-limit=2
    local i
    for i in 1 2 3; do
        start_staller options 300
    done
    run py "$SOCK" <<'EOF'
import sys
import nbdraw as n
good = n.connect(sys.argv[1])
good.handshake()
assert good.read(0, 512).error == 0
EOF
    assert_success
    wait_until 30 log_count_is 3 "dropped during the handshake: time limit reached"
}

@test "a reply that would block hands the socket's reading over: pipelined writes go on, all replies arrive" {
    # Two 128 KiB read replies the client does not take yet fill the
    # socket buffers; the worker whose send would block must let another
    # worker read the 15 writes behind them, or client and server both
    # wait on full buffers until the timeout.
    make_pattern "$TEST_DIR/a.img" $((32 << 20))
    start_server -t "$TEST_DIR/a.img"
    run py "$SOCK" "$TEST_DIR/a.img" <<'EOF'
import sys, time
import nbdraw as n
sock, img = sys.argv[1], sys.argv[2]
image = open(img, "rb").read()
K = 128 * 1024
for structured in (False, True):
    c = n.connect(sock, timeout=20)
    c.handshake(structured=structured)
    pending = {}
    for off in (0, K):
        pending[c.send_request(n.CMD_READ, off, K)] = ("read", off, K)
        time.sleep(0.2)
    written = c.pipeline_writes(pending, 8 << 20, 15, K, structured)
    c.check_replies(pending, image, written)
    c.send_request(n.CMD_DISC)
print("ok")
EOF
    assert_success
    assert_output ok
}

@test "TLS: a one-record reply that would block hands the reading over; all replies arrive intact" {
    # Over TLS a short reply is tried as one record while its worker keeps
    # the read side.  Reads sent one at a time and left unread fill the
    # socket buffers until a try finds no room: GnuTLS keeps the record
    # (perhaps half sent), the worker hands the read side over and sends
    # the rest, and the pipelined writes behind it are read meanwhile.
    require_tool certtool
    make_pattern "$TEST_DIR/a.img" $((32 << 20))
    local pki=$TEST_DIR/pki/server
    make_server_pki "$TEST_DIR/pki"
    start_server -t --tls-creds="$pki" --tls-verify-peer=off "$TEST_DIR/a.img"
    run py "$SOCK" "$TEST_DIR/a.img" "$pki/ca-cert.pem" <<'EOF'
import array, fcntl, sys, termios, time
import nbdraw as n, nbdtls
sock, img, ca = sys.argv[1:4]
image = open(img, "rb").read()
c = n.connect(sock, timeout=20)
c.greeting()
c.send_client_flags()
nbdtls.starttls(c, ca=ca)
assert c.go(b"") == n.REP_ACK

def queued():  # reply bytes the server sent that we have not read
    v = array.array("i", [0])
    fcntl.ioctl(c.sock.fileno(), termios.FIONREAD, v)
    return v[0]

pending = {}
B = 16384 - 16  # a simple reply of one full record
still = 0
for i in range(1000):
    off = (i * 7919 * B) % (16 << 20)
    before = queued()
    pending[c.send_request(n.CMD_READ, off, B)] = ("read", off, B)
    time.sleep(0.02)  # one at a time: the worker keeps the read side
    still = still + 1 if queued() <= before else 0
    if still == 2:
        break  # the buffers are full: a try found no room
assert still == 2, "the reply buffers never filled"
K = 128 * 1024
written = c.pipeline_writes(pending, 24 << 20, 8, K, 1)
c.check_replies(pending, image, written)
c.send_request(n.CMD_DISC)
print("ok")
EOF
    assert_success
    assert_output ok
    assert server_alive
}

@test "TLS: a read whose reply outgrows a record hands the reading over before it runs" {
    # Over TLS only a one-record reply is tried while the worker keeps the
    # read side, so a 64 KiB read must hand it over before it runs, like
    # any request that may take long.  Its backend (nbdfake.py, stall)
    # never answers it: the request behind it is answered all the same.
    require_tool certtool
    local fake=$TEST_DIR/fake.sock pki=$TEST_DIR/pki/server
    "$PYTHON3" "$BATS_TEST_DIRNAME/nbdfake.py" "$fake" $((1 << 20)) stall >"$TEST_DIR/fake.out" 2>&1 &
    STALL_PIDS+=("$!")
    wait_until 20 grep -q listening "$TEST_DIR/fake.out"
    make_server_pki "$TEST_DIR/pki"
    start_server --tls-creds="$pki" --tls-verify-peer=off -r -f raw "nbd+unix:///?socket=$fake"
    run py "$SOCK" "$pki/ca-cert.pem" "$TEST_DIR/fake.out" <<'EOF'
import sys, time
import nbdraw as n, nbdtls
sock, ca, fake_out = sys.argv[1:4]
c = n.connect(sock, timeout=20)
c.greeting()
c.send_client_flags()
nbdtls.starttls(c, ca=ca)
assert c.go(b"") == n.REP_ACK
stalled = c.send_request(n.CMD_READ, 0, 65536)
while "READ 0 65536" not in open(fake_out).read():
    time.sleep(0.01)  # the read runs, and hangs in the backend
past_end = c.send_request(n.CMD_READ, 1 << 20, 4096)
r = c.reply()
assert r.cookie == past_end and r.error == n.EINVAL, (r.cookie, r.error)
print("ok")
EOF
    assert_success
    assert_output ok
}

@test "--idle-timeout closes a connection whose client does not read replies; its slot goes to the next" {
    require_tool nbdinfo
    make_pattern "$TEST_DIR/a.img" $((32 << 20))
    start_server -t -e 1 --idle-timeout=1 "$TEST_DIR/a.img"
    start_staller reads 32 1048576
    run timeout 60 nbdinfo --size "$URI"
    assert_success
    assert_output $((32 << 20))
    grep -Eq "has not read its replies for [0-9]+ s \(--idle-timeout\), closing" "$SERVER_LOG"
}

@test "--idle-timeout: a client that takes its replies slowly, but takes them, is not closed" {
    make_pattern "$TEST_DIR/a.img" $((32 << 20))
    start_server -t -e 0 --idle-timeout=1 "$TEST_DIR/a.img"
    start_staller slow 2 1048576
    wait_until 60 grep -q "all replies taken" "$STALL_OUT"
    ! grep -q "has not read its replies" "$SERVER_LOG"
}

@test "--idle-timeout over TLS: a client that does not read replies is closed too" {
    require_tool certtool
    make_pattern "$TEST_DIR/a.img" $((32 << 20))
    local pki=$TEST_DIR/pki/server
    make_server_pki "$TEST_DIR/pki"
    # (the client presents no certificate: this is about stalling)
    start_server -t -e 0 --idle-timeout=1 --tls-creds="$pki" --tls-verify-peer=off "$TEST_DIR/a.img"
    PYTHONPATH=$BATS_TEST_DIRNAME "$PYTHON3" -c '
import sys, time
import nbdraw as n, nbdtls
c = n.connect(sys.argv[1], timeout=60)
c.greeting()
c.send_client_flags()
nbdtls.starttls(c, ca=sys.argv[2])
assert c.go(b"") == n.REP_ACK
for i in range(32):
    c.send_request(n.CMD_READ, i << 20, 1 << 20)
print("stalled", flush=True)
time.sleep(300)
' "$SOCK" "$pki/ca-cert.pem" >"$TEST_DIR/tls.out" 2>&1 &
    STALL_PIDS+=("$!")
    wait_until 30 grep -q stalled "$TEST_DIR/tls.out" || {
        cat "$TEST_DIR/tls.out" >&2
        return 1
    }
    wait_until 30 grep -Eq "has not read its replies for [0-9]+ s \(--idle-timeout\), closing" "$SERVER_LOG"
    assert server_alive
}

@test "-e 1: a TLS client that stalls inside a record after STARTTLS loses the slot at the handshake limit" {
    require_tool certtool nbdinfo
    truncate -s 1M "$TEST_DIR/a.img"
    make_server_pki "$TEST_DIR/pki"
    start_server -t -e 1 --handshake-limit=2 --tls=on --tls-creds="$TEST_DIR/pki/server" \
        --tls-verify-peer=off "$TEST_DIR/a.img"
    PYTHONPATH=$BATS_TEST_DIRNAME "$PYTHON3" -c '
import os, socket, sys, time
import nbdraw as n, nbdtls
c = n.connect(sys.argv[1], timeout=60)
raw = socket.socket(fileno=os.dup(c.sock.fileno()))
c.greeting()
c.send_client_flags()
nbdtls.starttls(c, ca=sys.argv[2])
# the header of an application data record of 64 bytes, and 3 of them
raw.sendall(b"\x17\x03\x03\x00\x40abc")
print("stalled", flush=True)
time.sleep(300)
' "$SOCK" "$TEST_DIR/pki/server/ca-cert.pem" >"$TEST_DIR/tls.out" 2>&1 &
    STALL_PIDS+=("$!")
    wait_until 30 grep -q stalled "$TEST_DIR/tls.out" || {
        cat "$TEST_DIR/tls.out" >&2
        return 1
    }
    # a plain client (--tls=on allows it) gets the slot once the staller is dropped
    run timeout 60 nbdinfo --size "$URI"
    assert_success
    assert_output 1048576
    grep -q "dropped during the handshake: time limit reached" "$SERVER_LOG"
}

@test "SIGTERM with a client that does not read its replies: exit 0 after the grace, acknowledged writes on disk" {
    make_pattern "$TEST_DIR/a.img" $((32 << 20))
    start_server -t "$TEST_DIR/a.img"
    start_staller write-reads 64 1048576
    kill -TERM "$SERVER_PID"
    # without the grace this would wait for the client forever
    wait_exit "$SERVER_PID" 60
    SERVER_PID=
    [[ $EXIT_STATUS -eq 0 ]]
    grep -q "replies not taken within 5 s of the shutdown, dropping the connection" "$SERVER_LOG"
    grep -q "statistics after" "$SERVER_LOG"
    range_is "$TEST_DIR/a.img" 0 1048576 5a
    [[ ! -e "$SOCK" ]]
}

@test "SIGTERM with a client stuck in the handshake, not reading option replies, no handshake limit: exit 0" {
    start_listing_server -e 0 --handshake-limit=0
    start_staller options 300
    kill -TERM "$SERVER_PID"
    wait_exit "$SERVER_PID" 60
    SERVER_PID=
    [[ $EXIT_STATUS -eq 0 ]]
}

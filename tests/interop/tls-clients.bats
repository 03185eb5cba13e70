#!/usr/bin/env bats
# TLS, the client side and the cross-checks: diskimg's own nbds:// client
# (info, map, convert, compare, bench) against diskimg serve, nbdkit and
# qemu-nbd, with X.509 and PSK, credentials in the URI or as options; a
# clean goodbye inside TLS; certificate names over TCP; a good client
# with requests in flight while others send garbage instead of a TLS
# handshake; TLS 1.3 key updates from a client (gnutlsku.py) while
# replies stream; the per-connection log lines of a TLS client.
# (tls.bats covers the server's STARTTLS rules, verify-peer and authz
# with nbdinfo, nbdsh, qemu and raw clients; tls-creds.bats the
# credential checks.)
# The certificates, keys and PSK files: tls-lib.bash, made once per file.

load '../helpers'
load 'lib'
load 'tls-lib'

setup_file() { tls_pki_setup; }

setup() {
    setup_test
    AUX_PIDS=()
}

teardown() {
    local pid
    for pid in "${AUX_PIDS[@]}"; do
        kill -KILL "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    done
    kill_extra_servers
    cleanup_test
}

# x509_uri DIR [SOCKET]: an nbds+unix URI with the credentials in it.
x509_uri() { echo "nbds+unix:///?socket=${2:-$SOCK}&tls-certificates=$1"; }

# start_aux SOCKET LOG CMD...: another server (nbdkit, qemu-nbd) in the
# background, stopped by PID in teardown; waits until SOCKET listens.
start_aux() {
    local sock=$1 log=$2 i
    shift 2
    "$@" 2>>"$log" &
    AUX_PIDS+=("$!")
    AUX_PID=$!
    for ((i = 0; i < 500; i++)); do
        if ! kill -0 "$AUX_PID" 2>/dev/null; then
            echo "$1 exited early:" >&2
            cat "$log" >&2
            return 1
        fi
        unix_listening "$sock" && return 0
        sleep 0.02
    done
    echo "$1 did not start listening" >&2
    return 1
}

# log_lines: the server log without the statistics report.
log_lines() {
    grep -v -e '^ ' -e 'statistics after' "$SERVER_LOG" || true
}

# --- against diskimg serve ---------------------------------------------------

@test "diskimg info/map/convert/compare/bench over nbds+unix:// to diskimg serve (X.509)" {
    make_pattern "$TEST_DIR/a.img" 4194304
    make_pattern "$TEST_DIR/orig.img" 4194304
    # new.img differs from a.img: the pattern shifted by 4 KiB
    dd if="$TEST_DIR/orig.img" of="$TEST_DIR/new.img" bs=4096 skip=1 status=none
    truncate -s 4194304 "$TEST_DIR/new.img"
    start_server -t -e 0 --tls-creds="$PKI/server" "$TEST_DIR/a.img"
    local turi bare="nbds+unix:///?socket=$SOCK"
    turi=$(x509_uri "$PKI/client1")

    # credentials in the URI ...
    run "$DISKIMG" info "$turi"
    assert_success
    assert_output --partial "virtual size: 4 MiB (4194304 bytes)"
    run "$DISKIMG" map "$turi"
    assert_success
    assert_output --partial "0x400000"
    run "$DISKIMG" compare -q "$turi" "$TEST_DIR/new.img"
    [[ $status -eq 1 ]]
    # ... or as options
    run "$DISKIMG" convert -n "$TEST_DIR/new.img" "$bare" --tls-creds="$PKI/client1"
    assert_success
    run "$DISKIMG" compare "$bare" "$TEST_DIR/new.img" --tls-creds="$PKI/client1"
    assert_success
    run "$DISKIMG" convert -O raw "$turi" "$TEST_DIR/out.img"
    assert_success
    cmp "$TEST_DIR/out.img" "$TEST_DIR/new.img"
    run "$DISKIMG" bench -c 200 -d 8 --output=json "$bare" --tls-creds="$PKI/client1"
    assert_success
    assert_output --partial '"requests": 200'
    # an nbds:// URI without credentials: the client says what is missing
    run "$DISKIMG" info "$bare"
    assert_failure
    assert_output --partial "--tls-creds"
    # and a plain nbd:// URI gets told that the server wants TLS
    run "$DISKIMG" info "$URI"
    assert_failure
    assert_output --partial "TLS"

    stop_server
    [[ $SERVER_STATUS -eq 0 ]]
    cmp "$TEST_DIR/a.img" "$TEST_DIR/new.img"
    grep -q "opened export '' over TLS" "$SERVER_LOG"
}

@test "diskimg client over PSK: --tls-psk/--tls-username, and tls-psk-file=/tls-username= in the URI" {
    make_pattern "$TEST_DIR/a.img" 1048576
    start_server -t -e 0 --tls-psk="$PKI/psk/keys.psk" "$TEST_DIR/a.img"
    local bare="nbds+unix:///?socket=$SOCK"

    run "$DISKIMG" info "$bare" --tls-psk="$PKI/psk/keys.psk" --tls-username=bob
    assert_success
    assert_output --partial "virtual size: 1 MiB"
    # (-U: a.img is the file the server has open for writing)
    run "$DISKIMG" compare -U "$bare&tls-psk-file=$PKI/psk/keys.psk&tls-username=alice" "$TEST_DIR/a.img"
    assert_success
    # without --tls-username: the file's first identity (alice)
    make_pattern "$TEST_DIR/src.img" 1048576
    dd if=/dev/zero of="$TEST_DIR/src.img" bs=4096 count=1 conv=notrunc status=none
    run "$DISKIMG" convert -n "$TEST_DIR/src.img" "$bare" --tls-psk="$PKI/psk/keys.psk"
    assert_success
    # an identity the server does not know
    run "$DISKIMG" info "$bare" --tls-psk="$PKI/psk-mallory/keys.psk"
    assert_failure
    # a --tls-username that is not in the file: refused by the client
    run "$DISKIMG" info "$bare" --tls-psk="$PKI/psk/keys.psk" --tls-username=dave
    assert_failure
    assert_output --partial "dave"

    stop_server
    cmp "$TEST_DIR/a.img" "$TEST_DIR/src.img"
    grep -q "over TLS as bob" "$SERVER_LOG"
    grep -q "over TLS as alice" "$SERVER_LOG"
    run ! grep -q "over TLS as mallory" "$SERVER_LOG"
}

@test "diskimg client: libnbd's user@ form of a PSK URI (nbds+unix://bob@/?socket=...)" {
    require_tool nbdinfo
    make_pattern "$TEST_DIR/a.img" 1048576
    start_server -t -e 0 --tls-psk="$PKI/psk/keys.psk" "$TEST_DIR/a.img"
    local uri="nbds+unix://bob@/?socket=$SOCK&tls-psk-file=$PKI/psk/keys.psk"

    # libnbd takes the PSK identity from the URI's user part ...
    run nbdinfo --size "$uri"
    assert_success
    assert_output 1048576
    # ... and so should diskimg, for the same URI
    run "$DISKIMG" info "$uri"
    assert_success
    assert_output --partial "virtual size: 1 MiB"
    [[ $(grep -c "over TLS as bob" "$SERVER_LOG") -ge 2 ]]
}

@test "diskimg client with a client certificate: accepted by --tls-verify-peer, refused without one" {
    make_pattern "$TEST_DIR/a.img" 1048576
    start_server -t -e 0 --tls-creds="$PKI/server" --tls-verify-peer "$TEST_DIR/a.img"
    run "$DISKIMG" info "nbds+unix:///?socket=$SOCK" --tls-creds="$PKI/anon"
    assert_failure
    assert_output --partial "the NBD server requires a client certificate"
    assert_output --partial "no client-cert.pem"
    run ! grep -q "opened export" "$SERVER_LOG"
    run "$DISKIMG" compare -U "$(x509_uri "$PKI/client1")" "$TEST_DIR/a.img" # (a.img is served)
    assert_success
    grep -q "opened export '' over TLS as O=diskimg tests,CN=client1" "$SERVER_LOG"
}

# --- against nbdkit and qemu-nbd ---------------------------------------------

@test "diskimg client against nbdkit --tls=require (X.509 and PSK)" {
    require_tool nbdkit
    make_pattern "$TEST_DIR/src.img" 16777216
    local ksock=$TEST_DIR/nbdkit.sock klog=$TEST_DIR/nbdkit.log
    start_aux "$ksock" "$klog" nbdkit -f -U "$ksock" --tls=require \
        --tls-certificates="$PKI/server" memory 16M
    local bare="nbds+unix:///?socket=$ksock"

    run "$DISKIMG" info "$bare&tls-certificates=$PKI/anon"
    assert_success
    assert_output --partial "virtual size: 16 MiB"
    run "$DISKIMG" convert -n "$TEST_DIR/src.img" "$bare" --tls-creds="$PKI/anon"
    assert_success
    run "$DISKIMG" compare "$bare" "$TEST_DIR/src.img" --tls-creds="$PKI/anon"
    assert_success
    run "$DISKIMG" convert -O raw "$bare&tls-certificates=$PKI/anon" "$TEST_DIR/out.img"
    assert_success
    cmp "$TEST_DIR/src.img" "$TEST_DIR/out.img"
    # nbdkit refuses a plaintext client, and the client says why
    run "$DISKIMG" info "nbd+unix:///?socket=$ksock"
    assert_failure
    assert_output --partial "TLS"
    # a client that does not trust nbdkit's certificate gives up
    run "$DISKIMG" info "$bare" --tls-creds="$PKI/other"
    assert_failure

    # PSK
    local psock=$TEST_DIR/nbdkit-psk.sock
    start_aux "$psock" "$klog" nbdkit -f -U "$psock" --tls=require --tls-psk="$PKI/psk/keys.psk" \
        memory 1M
    head -c 1048576 "$TEST_DIR/src.img" >"$TEST_DIR/src1.img"
    run "$DISKIMG" convert -n "$TEST_DIR/src1.img" "nbds+unix:///?socket=$psock" \
        --tls-psk="$PKI/psk/keys.psk" --tls-username=bob
    assert_success
    run "$DISKIMG" compare "nbds+unix:///?socket=$psock&tls-psk-file=$PKI/psk/keys.psk&tls-username=alice" \
        "$TEST_DIR/src1.img"
    assert_success
    run "$DISKIMG" info "nbds+unix:///?socket=$psock" --tls-psk="$PKI/psk-mallory/keys.psk"
    assert_failure
}

@test "diskimg client against qemu-nbd --tls-creds (X.509 with a client certificate, and PSK)" {
    require_tool qemu-nbd
    truncate -s 4M "$TEST_DIR/b.img"
    make_pattern "$TEST_DIR/src.img" 4194304
    local qsock=$TEST_DIR/qemu.sock qlog=$TEST_DIR/qemu-nbd.log
    # qemu's server credentials verify the client by default (verify-peer=on)
    start_aux "$qsock" "$qlog" qemu-nbd \
        --object "tls-creds-x509,id=tls0,endpoint=server,dir=$PKI/server" --tls-creds tls0 \
        -k "$qsock" -f raw -t -e 8 "$TEST_DIR/b.img"
    local bare="nbds+unix:///?socket=$qsock"

    run "$DISKIMG" convert -n "$TEST_DIR/src.img" "$bare" --tls-creds="$PKI/client1"
    assert_success
    run "$DISKIMG" compare "$bare&tls-certificates=$PKI/client1" "$TEST_DIR/src.img"
    assert_success
    run "$DISKIMG" info "$bare" --tls-creds="$PKI/client1"
    assert_success
    assert_output --partial "virtual size: 4 MiB"
    # no client certificate: qemu-nbd refuses it
    run "$DISKIMG" info "$bare" --tls-creds="$PKI/anon"
    assert_failure
    cmp "$TEST_DIR/src.img" "$TEST_DIR/b.img"

    local psock=$TEST_DIR/qemu-psk.sock
    start_aux "$psock" "$qlog" qemu-nbd \
        --object "tls-creds-psk,id=tls1,endpoint=server,dir=$PKI/psk" --tls-creds tls1 \
        -k "$psock" -f raw -t -e 8 "$TEST_DIR/b.img"
    run "$DISKIMG" compare "nbds+unix:///?socket=$psock" "$TEST_DIR/src.img" \
        --tls-psk="$PKI/psk/keys.psk" --tls-username=bob
    assert_success
}

@test "diskimg client says goodbye inside TLS: nbdkit and qemu-nbd log no error" {
    require_tool nbdkit qemu-nbd nbdinfo
    local ksock=$TEST_DIR/nbdkit.sock klog=$TEST_DIR/nbdkit.log
    local qsock=$TEST_DIR/qemu.sock qlog=$TEST_DIR/qemu-nbd.log
    truncate -s 1M "$TEST_DIR/b.img"
    start_aux "$ksock" "$klog" nbdkit -f -U "$ksock" --tls=require \
        --tls-certificates="$PKI/server" memory 1M
    start_aux "$qsock" "$qlog" qemu-nbd \
        --object "tls-creds-x509,id=tls0,endpoint=server,dir=$PKI/server" --tls-creds tls0 \
        -k "$qsock" -f raw -t "$TEST_DIR/b.img"

    # libnbd's goodbye (NBD_CMD_DISC inside the TLS session) makes neither
    # server log anything: the check below tells a clean disconnect from
    # a broken one
    run nbdinfo --size "$(x509_uri "$PKI/anon" "$ksock")"
    assert_success
    run nbdinfo --size "$(x509_uri "$PKI/client1" "$qsock")"
    assert_success

    run "$DISKIMG" info "$(x509_uri "$PKI/anon" "$ksock")"
    assert_success
    run "$DISKIMG" info "$(x509_uri "$PKI/client1" "$qsock")"
    assert_success
    # (no timing here: each server logs the connection's end before it
    # serves the next one, and a last nbdinfo goes through both)
    run nbdinfo --size "$(x509_uri "$PKI/anon" "$ksock")"
    run nbdinfo --size "$(x509_uri "$PKI/client1" "$qsock")"
    sleep 0.2
    if [[ -s "$klog" || -s "$qlog" ]]; then
        echo "nbdkit:" >&2
        cat "$klog" >&2
        echo "qemu-nbd:" >&2
        cat "$qlog" >&2
        return 1
    fi
}

# --- names and CAs -------------------------------------------------------------

@test "TCP 127.0.0.1: the certificate's IP address is verified; another CA or a wrong tls-hostname is refused" {
    require_tool nbdinfo qemu-img
    make_pattern "$TEST_DIR/a.img" 1048576
    start_server_tcp 127.0.0.1 -t -e 0 --tls-creds="$PKI/server" "$TEST_DIR/a.img"
    local turi="nbds://127.0.0.1:$PORT/"
    local qobj="tls-creds-x509,id=tls0,endpoint=client,dir="
    local qopts="driver=nbd,host=127.0.0.1,port=$PORT,tls-creds=tls0"

    run nbdinfo --size "$turi?tls-certificates=$PKI/client1"
    assert_success
    assert_output 1048576
    run qemu-img info --object "$qobj$PKI/client1" --image-opts "$qopts"
    assert_success
    run "$DISKIMG" compare -U "$turi" "$TEST_DIR/a.img" --tls-creds="$PKI/client1" # (a.img is served)
    assert_success
    run "$DISKIMG" info "$turi?tls-certificates=$PKI/client1&tls-hostname=localhost"
    assert_success

    # a name the certificate does not carry
    run "$DISKIMG" info "$turi?tls-certificates=$PKI/client1&tls-hostname=wrong.example"
    assert_failure
    run qemu-img info --object "$qobj$PKI/client1" --image-opts "$qopts,tls-hostname=wrong.example"
    assert_failure
    # a CA that did not sign the server's certificate
    run nbdinfo --size "$turi?tls-certificates=$PKI/other"
    assert_failure
    run qemu-img info --object "$qobj$PKI/other" --image-opts "$qopts"
    assert_failure
    # (other/ has no client certificate either, which the server would
    # refuse: the message tells the causes apart)
    run "$DISKIMG" info "$turi" --tls-creds="$PKI/other"
    assert_failure
    assert_output --partial "(unknown CA)"

    # over a unix socket (no name to check) diskimg still checks the CA
    # (a second server needs its own image: the first one writes a.img)
    cp "$TEST_DIR/a.img" "$TEST_DIR/b.img"
    start_extra_server "$TEST_DIR/u.sock" -t -e 0 --tls-creds="$PKI/server" "$TEST_DIR/b.img"
    run "$DISKIMG" info "$(x509_uri "$PKI/other" "$TEST_DIR/u.sock")"
    assert_failure
    assert_output --partial "(unknown CA)"
    run "$DISKIMG" info "$(x509_uri "$PKI/client1" "$TEST_DIR/u.sock")&tls-hostname=wrong.example"
    assert_failure
    run "$DISKIMG" info "$(x509_uri "$PKI/client1" "$TEST_DIR/u.sock")"
    assert_success
}

# --- a good client among bad ones --------------------------------------------

@test "garbage or silence instead of a TLS handshake: a client with reads in flight is not disturbed" {
    make_pattern "$TEST_DIR/a.img" 1048576
    start_server -t -e 0 --handshake-limit=2 --tls-creds="$PKI/server" "$TEST_DIR/a.img"

    run py "$SOCK" "$TEST_DIR/a.img" "$PKI/client1" <<'EOF'
import struct
import sys
import nbd
import nbdraw as n

sock, path, pki = sys.argv[1:4]
data = open(path, "rb").read()
good = nbd.NBD()
good.set_tls(nbd.TLS_REQUIRE)
good.set_tls_certificates(pki)
good.connect_unix(sock)
assert good.get_size() == len(data)

def starttls():
    c = n.connect(sock)
    c.greeting()
    c.send_client_flags()
    rtype, _ = c.option(n.OPT_STARTTLS)
    assert rtype == n.REP_ACK, "%#x" % rtype
    return c

def reads_in_flight():
    """16 reads in flight on the good client."""
    bufs = []
    for i in range(16):
        b = nbd.Buffer(4096)
        good.aio_pread(b, i * 4096)
        bufs.append((i, b))
    return bufs

def check(bufs):
    while good.aio_in_flight() > 0:
        good.poll(-1)
    for i, b in bufs:
        assert b.to_bytearray() == data[i * 4096:(i + 1) * 4096], "read %d differs" % i

# an HTTP request instead of a ClientHello
bufs = reads_in_flight()
c = starttls()
c.send(b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n" * 4)
assert c.closes(), "HTTP garbage after STARTTLS was not dropped"
check(bufs)
# a TLS record header that claims a huge record, junk, and gone
bufs = reads_in_flight()
c = starttls()
c.send(b"\x16\x03\x01\xff\xff" + b"\xee" * 4096)
c.close()
check(bufs)
# bytes right behind STARTTLS, before the server's answer
bufs = reads_in_flight()
c = n.connect(sock)
c.greeting()
c.send_client_flags()
c.send(struct.pack(">QII", n.IHAVEOPT, n.OPT_STARTTLS, 0) + b"\x00" * 64)
assert c.is_closed(), "data behind STARTTLS was not dropped"
check(bufs)
# STARTTLS, then silence: the handshake limit ends it, and the good
# client is served all the while
silent = starttls()
for _ in range(3):
    check(reads_in_flight())
assert silent.is_closed(timeout=30), "a silent TLS client was never dropped"
check(reads_in_flight())
good.pwrite(b"\x77" * 512, 0)
good.shutdown()
EOF
    assert_success
    stop_server
    [[ $SERVER_STATUS -eq 0 ]]
    range_is "$TEST_DIR/a.img" 0 512 77
    # each bad client was dropped, with a reason
    [[ $(grep -c "dropped during the handshake" "$SERVER_LOG") -eq 4 ]]
    grep -q "TLS: handshake failed" "$SERVER_LOG"
    grep -q "data after NBD_OPT_STARTTLS" "$SERVER_LOG"
    grep -q "dropped during the handshake: time limit reached" "$SERVER_LOG"
}

@test "TLS 1.3 key updates from the client while replies stream: every reply intact" {
    # A client's key update switched the session's keys in the server's
    # reading thread while another thread encrypted a reply, and the
    # client could not decrypt what followed.  Six key updates, a second
    # apart (older GnuTLS takes one a second), half of them while the
    # socket is full of unread replies, half while the replies stream; 48
    # requests in flight each time: no more than the server's 16 workers
    # and what the socket holds, or a client that reads no reply until it
    # has sent them all could block.
    make_pattern "$TEST_DIR/a.img" 8388608
    start_server -t -e 0 -f raw --tls-creds="$PKI/server" "$TEST_DIR/a.img"

    run py "$SOCK" "$TEST_DIR/a.img" "$PKI/client1" <<'EOF'
import random
import sys
import time
import nbd
import nbdraw as n
import gnutlsku

sock, path, pki = sys.argv[1:4]
data = bytearray(open(path, "rb").read())
half = len(data) // 2
c = n.connect(sock)
c.greeting()
c.send_client_flags()
rtype, _ = c.option(n.OPT_STARTTLS)
assert rtype == n.REP_ACK, "%#x" % rtype
c.sock = gnutlsku.Session(c.sock, pki)
assert c.sock.is_tls13(), "TLS 1.3 was not negotiated"
assert c.go(b"") == n.REP_ACK
rng = random.Random(7)
for rnd in range(6):
    if rnd:
        time.sleep(1.1)  # older GnuTLS takes one key update a second
    # even rounds: the key update comes while the socket is full of
    # replies; odd rounds: while they stream to us
    full = rnd % 2 == 0
    pending = {}
    # reads of the first half, 4 KiB writes into the second (distinct offsets)
    write_offs = iter(rng.sample(range(half, len(data), 4096), 6))
    for i in range(48):
        if full and i == 24:
            c.sock.key_update()
        if i % 8 == 7:
            off, buf = next(write_offs), rng.randbytes(4096)
            data[off:off + 4096] = buf
            pending[c.send_request(n.CMD_WRITE, off, 4096, payload=buf)] = ("w", off, 4096)
        else:
            size = rng.choice((4096, 65536, 262144, 262144))
            off = rng.randrange(0, (half - size) // 4096) * 4096
            pending[c.send_request(n.CMD_READ, off, size)] = ("r", off, size)
    for i in range(len(pending)):
        if not full and i == 8:
            c.sock.key_update()
        r = c.reply()
        kind, off, size = pending.pop(r.cookie)
        assert r.error == 0, (rnd, kind, off, r)
        if kind == "r" and r.data != data[off:off + size]:
            raise AssertionError("round %d: read at %d+%d differs" % (rnd, off, size))
for off in range(half, len(data), 262144):
    r = c.read(off, 262144)
    assert r.error == 0 and r.data == data[off:off + 262144], "written data at %d" % off
c.disconnect()
c.close()
# the server serves on
h = nbd.NBD()
h.set_tls(nbd.TLS_REQUIRE)
h.set_tls_certificates(pki)
h.connect_unix(sock)
assert h.pread(4096, 0) == data[:4096]
h.shutdown()
EOF
    assert_success
    stop_server
    [[ $SERVER_STATUS -eq 0 ]]
    # no connection ended with an error
    [[ $(log_lines | grep -c "closed export") -eq 2 ]]
    ! log_lines | grep -i -e error -e failed -e warning
}

@test "log: a damaged TLS record and a key-update flood are logged with the reason" {
    # TLS record errors other than a client leaving were never logged: the
    # operator saw only "closed".  A forged record must fail GnuTLS's
    # integrity check; GnuTLS allows a client 8 key updates a second.
    make_pattern "$TEST_DIR/a.img" 1048576
    start_server -t -f raw --tls-creds="$PKI/server" "$TEST_DIR/a.img"

    run py "$SOCK" "$PKI/client1" <<'EOF'
import os
import sys
import nbdraw as n
import nbdtls
import gnutlsku

sock, pki = sys.argv[1:3]

def session(wrap):
    c = n.connect(sock)
    c.greeting()
    c.send_client_flags()
    wrap(c)
    assert c.go(b"") == n.REP_ACK
    assert c.read(0, 4096).error == 0
    return c

def closed(c):
    try:
        return c.sock.recv(1) == b""
    except (OSError, gnutlsku.Error):
        return True

# an application-data record that no key produced, under the TLS layer
c = session(lambda c: nbdtls.starttls(c, pki))
os.write(c.sock.fileno(), b"\x17\x03\x03\x00\x40" + bytes(64))
assert closed(c), "a forged record did not end the connection"

def tls13(c):
    rtype, _ = c.option(n.OPT_STARTTLS)
    assert rtype == n.REP_ACK, "%#x" % rtype
    c.sock = gnutlsku.Session(c.sock, pki)
    assert c.sock.is_tls13(), "TLS 1.3 was not negotiated"

c = session(tls13)
try:
    for _ in range(12):
        c.sock.key_update()
except gnutlsku.Error:
    pass  # the server has closed
assert closed(c), "12 key updates at once did not end the connection"

# the server serves on
c = session(lambda c: nbdtls.starttls(c, pki))
c.disconnect()
EOF
    assert_success
    stop_server
    [[ $SERVER_STATUS -eq 0 ]]
    run log_lines
    assert_line --partial "TLS: receiving: Decryption has failed., closing the connection"
    assert_line --partial "TLS: receiving: Too many handshake packets have been received., closing the connection"
    [[ $(log_lines | grep -c "closed export") -eq 3 ]]
}

# --- logs ----------------------------------------------------------------------

@test "log: a TLS client gives one 'opened ... over TLS as ID' line and one 'closed' line" {
    require_tool nbdsh
    truncate -s 1M "$TEST_DIR/a.img"
    # (-f raw: a guessed format adds a start-up warning to the log)
    start_server -t -f raw --tls-psk="$PKI/psk/keys.psk" "$TEST_DIR/a.img"
    export SOCK
    run nbdsh -c '
import os
h.set_tls(nbd.TLS_REQUIRE)
h.set_tls_psk_file(os.environ["PKI"] + "/psk/keys.psk")
h.set_tls_username("bob")
h.connect_unix(os.environ["SOCK"])
h.pread(512, 0)
h.pread(512, 512)
h.shutdown()
'
    assert_success
    stop_server
    run log_lines
    assert_line --index 0 --regexp "unix socket opened export '' over TLS as bob$"
    assert_line --index 1 --regexp "unix socket closed export '' after 2 request\(s\)$"
    [[ ${#lines[@]} -eq 2 ]]
}

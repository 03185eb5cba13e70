#!/usr/bin/env bats
# TLS (GnuTLS) in diskimg serve, against real clients: nbdinfo, nbdsh and
# nbdcopy (libnbd nbds+unix:// URIs), qemu-img and qemu-io (--object
# tls-creds-x509 / tls-creds-psk), diskimg's own nbds:// client, and a raw
# client (nbdraw.py + nbdtls.py) for NBD_OPT_STARTTLS itself.
#
# The certificates and keys: tls-lib.bash, made by the hooks in
# tls-server.bash.  Credential errors and the priority string:
# tls-creds.bats.

load '../helpers'
load 'lib'
load 'tls-server' # and its setup_file, setup and teardown

# ---------------------------------------------------------------------------
# Real clients, X.509 and PSK

@test "TLS X.509: nbdinfo connects over nbds+unix, plaintext is not offered" {
    require_tool nbdinfo
    truncate -s 4M "$IMG"
    start_tls
    run nbdinfo "$(x509_uri)"
    assert_success
    assert_output --partial "with TLS"
    assert_output --regexp "export-size: 4194304"
    run grep "opened export '' over TLS" "$SERVER_LOG"
    assert_success
}

@test "TLS X.509: nbdsh writes and reads, the data reaches the file" {
    require_tool nbdsh
    truncate -s 4M "$IMG"
    start_tls
    run nbdsh_tls "$(x509_uri)" '
assert h.get_tls_negotiated()
h.pwrite(b"tls!" * 16384, 1048576)
h.flush()
assert h.pread(65536, 1048576) == b"tls!" * 16384
'
    assert_success
    stop_server
    [[ $(bytes_at "$IMG" 1048576 4) == 746c7321 ]]
    [[ $(bytes_at "$IMG" $((1048576 + 65532)) 4) == 746c7321 ]]
    range_is "$IMG" 0 1048576 00
}

@test "TLS PSK: nbdsh writes and reads as alice, nbdinfo as bob" {
    require_tool nbdsh nbdinfo
    truncate -s 4M "$IMG"
    start_psk
    run nbdsh_tls "$(psk_uri alice)" '
assert h.get_tls_negotiated()
h.pwrite(b"\xa5" * 4096, 8192)
assert h.pread(4096, 8192) == b"\xa5" * 4096
'
    assert_success
    run nbdinfo --size "$(psk_uri bob)"
    assert_success
    assert_output 4194304
    stop_server
    range_is "$IMG" 8192 4096 a5
    grep -q "over TLS as alice" "$SERVER_LOG"
    grep -q "over TLS as bob" "$SERVER_LOG"
}

@test "TLS X.509: qemu-io writes and reads with --object tls-creds-x509" {
    require_tool qemu-io
    truncate -s 4M "$IMG"
    start_tls
    # qemu needs a host name to check the certificate against on a unix socket
    run qemu-io --object "tls-creds-x509,id=tls0,dir=$PKI/client1,endpoint=client" \
        --image-opts "driver=nbd,path=$SOCK,tls-creds=tls0,tls-hostname=localhost" \
        -c 'write -P 0x5a 65536 128k' -c 'read -P 0x5a 65536 128k'
    assert_success
    refute_output --partial "failed"
    refute_output --partial "Pattern verification"
    stop_server
    range_is "$IMG" 65536 131072 5a
}

@test "TLS X.509: qemu-img convert in and out (server.type=unix syntax), then cmp" {
    require_tool qemu-img
    make_pattern "$TEST_DIR/src.img" $((3 * 1048576))
    truncate -s 3M "$IMG"
    start_tls
    local obj="tls-creds-x509,id=tls0,dir=$PKI/client1,endpoint=client"
    local nbd="driver=nbd,server.type=unix,server.path=$SOCK,tls-creds=tls0,tls-hostname=localhost"
    run qemu-img convert -n --object "$obj" -f raw "$TEST_DIR/src.img" \
        --target-image-opts "$nbd"
    assert_success
    run qemu-img convert --object "$obj" --image-opts "$nbd" -O raw "$TEST_DIR/back.img"
    assert_success
    stop_server
    cmp "$TEST_DIR/src.img" "$IMG"
    cmp "$TEST_DIR/src.img" "$TEST_DIR/back.img"
}

@test "TLS PSK: qemu-io and qemu-img with --object tls-creds-psk" {
    require_tool qemu-io qemu-img
    truncate -s 4M "$IMG"
    start_psk
    local obj="tls-creds-psk,id=tls0,dir=$PKI/psk,username=alice,endpoint=client"
    run qemu-io --object "$obj" --image-opts "driver=nbd,path=$SOCK,tls-creds=tls0" \
        -c 'write -P 0x3c 0 64k' -c 'read -P 0x3c 0 64k'
    assert_success
    refute_output --partial "failed"
    refute_output --partial "Pattern verification"
    run qemu-img info --object "$obj" --image-opts "driver=nbd,path=$SOCK,tls-creds=tls0"
    assert_success
    assert_output --partial "4 MiB"
    stop_server
    range_is "$IMG" 0 65536 3c
}

@test "TLS: nbdcopy in and out over X.509 and PSK (several connections), then cmp" {
    require_tool nbdcopy
    make_pattern "$TEST_DIR/src.img" $((8 * 1048576))
    truncate -s 8M "$IMG"
    start_tls
    run nbdcopy "$TEST_DIR/src.img" "$(x509_uri)"
    assert_success
    run nbdcopy "$(x509_uri)" "$TEST_DIR/back.img"
    assert_success
    stop_server
    cmp "$TEST_DIR/src.img" "$IMG"
    cmp "$TEST_DIR/src.img" "$TEST_DIR/back.img"

    rm -f "$TEST_DIR/back.img"
    start_psk
    run nbdcopy "$(psk_uri bob)" "$TEST_DIR/back.img"
    assert_success
    cmp "$TEST_DIR/src.img" "$TEST_DIR/back.img"
}

# ---------------------------------------------------------------------------
# --tls modes

@test "--tls=require (the default with credentials): plaintext clients get nothing" {
    require_tool nbdinfo qemu-img nbdsh
    make_pattern "$IMG" 1048576
    local before
    before=$(sha256sum <"$IMG")
    start_tls -x secret -D "secret description"
    run nbdinfo --list "nbd+unix:///?socket=$SOCK"
    assert_failure
    refute_output --partial "secret"
    run nbdinfo "nbd+unix:///secret?socket=$SOCK"
    assert_failure
    assert_output --partial "TLS"
    run qemu-img info "nbd+unix:///secret?socket=$SOCK"
    assert_failure
    run nbdsh -c "
h.set_tls(0)
try:
    h.connect_uri('nbd+unix:///secret?socket=$SOCK')
    h.pwrite(b'x' * 512, 0)
except nbd.Error:
    pass
else:
    raise SystemExit('plaintext client could write')
"
    assert_success
    # ... while a TLS client is served
    run nbdinfo --size "$(x509_uri client1 secret)"
    assert_success
    assert_output 1048576
    stop_server
    [[ $(sha256sum <"$IMG") == "$before" ]]
}

@test "--tls=on: plaintext and TLS clients are both served" {
    require_tool nbdinfo nbdsh
    truncate -s 1M "$IMG"
    start_tls --tls=on
    run nbdsh -c "
h.set_tls(0)
h.connect_uri('nbd+unix:///?socket=$SOCK')
assert not h.get_tls_negotiated()
h.pwrite(b'p' * 512, 0)
"
    assert_success
    run nbdsh_tls "$(x509_uri)" '
assert h.get_tls_negotiated()
assert h.pread(512, 0) == b"p" * 512
'
    assert_success
    run grep -c "opened export '' over TLS" "$SERVER_LOG"
    assert_output 1
}

@test "--tls=off with credentials: plaintext only, STARTTLS gets NBD_REP_ERR_POLICY" {
    require_tool nbdinfo
    truncate -s 1M "$IMG"
    start_tls --tls=off
    run nbdinfo --size "nbd+unix:///?socket=$SOCK"
    assert_success
    run nbdinfo --size "$(x509_uri)"
    assert_failure
    run py "$SOCK" <<'EOF'
import sys
import nbdraw as n
c = n.connect(sys.argv[1])
c.greeting()
c.send_client_flags()
rtype, _ = c.option(n.OPT_STARTTLS)
assert rtype == n.REP_ERR_POLICY, hex(rtype)
assert c.go() == n.REP_ACK
EOF
    assert_success
}

@test "--tls without credentials, or TLS options without credentials: usage error" {
    truncate -s 1M "$IMG"
    run --separate-stderr "$DISKIMG" serve -k "$SOCK" --tls=require "$IMG"
    assert_failure 2
    [[ $stderr == *tls* ]]
    run --separate-stderr "$DISKIMG" serve -k "$SOCK" --tls-verify-peer "$IMG"
    assert_failure 2
    run --separate-stderr "$DISKIMG" serve -k "$SOCK" --tls-verify-peer=off "$IMG"
    assert_failure 2
    run --separate-stderr "$DISKIMG" serve -k "$SOCK" --tls-creds="$PKI/server" \
        --tls-verify-peer=maybe "$IMG"
    assert_failure 2
    [[ $stderr == *"--tls-verify-peer takes on or off"* ]]
    run --separate-stderr "$DISKIMG" serve -k "$SOCK" --tls=maybe --tls-creds="$PKI/server" "$IMG"
    assert_failure 2
    run --separate-stderr "$DISKIMG" serve -k "$SOCK" --tls-creds="$PKI/server" \
        --tls-psk="$PKI/psk/keys.psk" "$IMG"
    [[ $status -ne 0 ]]
    [[ ! -S $SOCK ]]
}

# ---------------------------------------------------------------------------
# NBD_OPT_STARTTLS, on the wire

@test "STARTTLS (require): every option but STARTTLS and ABORT gets NBD_REP_ERR_TLS_REQD, nothing leaks" {
    make_pattern "$IMG" 1048576
    start_tls -x secret -D "secret description"
    run py "$SOCK" "$PKI/client1" "$IMG" <<'EOF'
import struct, sys
import nbdraw as n
import nbdtls as t

sock, ca, img = sys.argv[1:]
want = open(img, "rb").read(65536)

def name_req(name, infos=()):
    return (struct.pack(">I", len(name)) + name + struct.pack(">H", len(infos))
            + b"".join(struct.pack(">H", i) for i in infos))

def meta_req(name):
    q = b"base:allocation"
    return name_req(name)[:-2] + struct.pack(">I", 1) + struct.pack(">I", len(q)) + q

c = n.connect(sock)
c.greeting()
c.send_client_flags()
before = [
    (n.OPT_LIST, b""),
    (n.OPT_STRUCTURED_REPLY, b""),
    (n.OPT_INFO, name_req(b"secret", (1, 2))),
    (n.OPT_GO, name_req(b"secret")),
    (n.OPT_LIST_META_CONTEXT, meta_req(b"secret")),
    (n.OPT_SET_META_CONTEXT, meta_req(b"secret")),
    (n.OPT_GO, name_req(b"no-such-export")),
    (42, b""),  # an unknown option: TLS first, too
]
for opt, data in before:
    c.send_option(opt, data)
    ropt, rtype, rdata = c.option_reply()
    assert ropt == opt, (ropt, opt)
    assert rtype == t.REP_ERR_TLS_REQD, "option %d before TLS: reply %#x" % (opt, rtype)
    assert b"secret" not in rdata, rdata
# TLS, then the same options work
version = t.starttls(c, ca)
assert version in ("TLSv1.2", "TLSv1.3"), version
rtype, replies = c.option(n.OPT_LIST)
assert rtype == n.REP_ACK and len(replies) == 1, (rtype, replies)
assert replies[0][1][4:10] == b"secret" and b"secret description" in replies[0][1], replies
# a second STARTTLS inside TLS is invalid
rtype, _ = c.option(n.OPT_STARTTLS)
assert rtype == n.REP_ERR_INVALID, hex(rtype)
assert c.go(b"secret") == n.REP_ACK
assert c.size == 1048576
r = c.read(0, 65536)
assert r.error == 0 and r.data == want
c.disconnect()

# NBD_OPT_EXPORT_NAME has no error reply: before TLS the server must hang
# up, without sending the export's size and flags.
c = n.connect(sock)
c.greeting()
c.send_client_flags()
c.send_option(n.OPT_EXPORT_NAME, b"secret")
try:
    got = c.recv_exact(10)
except (n.Closed, ConnectionResetError):
    got = None
assert got is None, "server answered EXPORT_NAME before TLS: %r" % got

# ABORT before TLS is a clean goodbye
c = n.connect(sock)
c.greeting()
c.send_client_flags()
c.send_option(n.OPT_ABORT)
try:
    _, rtype, _ = c.option_reply()
    assert rtype == n.REP_ACK, hex(rtype)
except n.Closed:
    pass
print("ok")
EOF
    assert_success
    assert_output ok
    assert server_alive
}

@test "STARTTLS (--tls=on): structured replies and meta contexts negotiated in the clear are forgotten" {
    truncate -s 1M "$IMG"
    start_tls --tls=on
    run py "$SOCK" "$PKI/client1" <<'EOF'
import struct, sys
import nbdraw as n
import nbdtls as t

sock, ca = sys.argv[1:]
c = n.connect(sock)
c.greeting()
c.send_client_flags()
rtype, _ = c.option(n.OPT_STRUCTURED_REPLY)
assert rtype == n.REP_ACK, hex(rtype)
q = b"base:allocation"
rtype, replies = c.option(n.OPT_SET_META_CONTEXT, struct.pack(">I", 0) + struct.pack(">I", 1)
                          + struct.pack(">I", len(q)) + q)
assert rtype == n.REP_ACK and len(replies) == 1, (rtype, replies)
t.starttls(c, ca)
assert c.go() == n.REP_ACK
# structured replies were reset: a read gets a simple reply
r = c.read(0, 4096)
assert r.error == 0 and r.chunks == [] and r.data == bytes(4096), r
# and no metadata context is selected any more
r = c.request(n.CMD_BLOCK_STATUS, 0, 4096)
assert r.error == n.EINVAL, r
c.disconnect()

# negotiated again inside TLS, they work
c = n.connect(sock)
c.greeting()
c.send_client_flags()
t.starttls(c, ca)
rtype, _ = c.option(n.OPT_STRUCTURED_REPLY)
assert rtype == n.REP_ACK
c.structured = True
assert c.go() == n.REP_ACK
r = c.read(0, 4096)
assert r.error == 0 and r.chunks, r
print("ok")
EOF
    assert_success
    assert_output ok
}

# ---------------------------------------------------------------------------
# Who may connect

@test "TLS: a client that does not trust our CA refuses the server (nbdinfo, qemu-img, diskimg)" {
    require_tool nbdinfo qemu-img
    truncate -s 1M "$IMG"
    start_server_tcp 127.0.0.1 -t -e 0 --tls-creds="$PKI/server" "$IMG"
    # libnbd checks the server's certificate on TCP (host name localhost)
    run nbdinfo --size "nbds://localhost:$PORT/?tls-certificates=$PKI/client1"
    assert_success
    run nbdinfo --size "nbds://localhost:$PORT/?tls-certificates=$PKI/other"
    assert_failure
    assert_output --partial "certificate"
    run qemu-img info --object "tls-creds-x509,id=tls0,dir=$PKI/other,endpoint=client" \
        --image-opts "driver=nbd,host=localhost,port=$PORT,tls-creds=tls0"
    assert_failure
    run qemu-img info --object "tls-creds-x509,id=tls0,dir=$PKI/client1,endpoint=client" \
        --image-opts "driver=nbd,host=localhost,port=$PORT,tls-creds=tls0"
    assert_success
    run "$DISKIMG" info --tls-creds="$PKI/other" "nbds://localhost:$PORT/"
    assert_failure
    run "$DISKIMG" info --tls-creds="$PKI/client1" "nbds://localhost:$PORT/"
    assert_success
    assert_output --partial "1 MiB"
}

@test "X.509 verifies clients by default, as qemu-nbd: no certificate, or another CA's, is refused" {
    require_tool nbdinfo qemu-img
    truncate -s 1M "$IMG"
    local opt
    # the default, and the explicit spellings of it
    for opt in "" --tls-verify-peer --tls-verify-peer=on --tls-verify-peer=yes; do
        start_tls $opt
        run nbdinfo --size "$(x509_uri client1)"
        assert_success
        run nbdinfo --size "$(x509_uri anon)"
        assert_failure
        run nbdinfo --size "$(x509_uri foreign)"
        assert_failure
        run qemu-img info --object "tls-creds-x509,id=tls0,dir=$PKI/anon,endpoint=client" \
            --image-opts "driver=nbd,path=$SOCK,tls-creds=tls0,tls-hostname=localhost"
        assert_failure
        run qemu-img info --object "tls-creds-x509,id=tls0,dir=$PKI/client1,endpoint=client" \
            --image-opts "driver=nbd,path=$SOCK,tls-creds=tls0,tls-hostname=localhost"
        assert_success
        assert server_alive
        stop_server
        # the log says who was let in, and why the others were not
        grep -q "opened export '' over TLS as .*CN=client1" "$SERVER_LOG"
        grep -q "dropped during the handshake: TLS: the client sent no certificate" "$SERVER_LOG"
        grep -q "the client certificate '$DN1_ENC' is not signed by the CA in .*ca-cert.pem (unknown CA)" \
            "$SERVER_LOG"
        : >"$SERVER_LOG"
    done
}

@test "--tls-verify-peer=off: a client without a certificate (or with one) is served" {
    require_tool nbdinfo
    truncate -s 1M "$IMG"
    local opt
    for opt in --tls-verify-peer=off --tls-verify-peer=no --tls-verify-peer=false; do
        start_tls "$opt"
        run nbdinfo --size "$(x509_uri anon)"
        assert_success
        assert_output 1048576
        run nbdinfo --size "$(x509_uri client1)"
        assert_success
        # a certificate is not asked for, so nobody has a name in the log
        run ! grep -q "over TLS as" "$SERVER_LOG"
        stop_server
    done
}

@test "--tls-authz (X.509, with --tls-verify-peer): only the listed DN gets in" {
    require_tool nbdinfo nbdsh
    truncate -s 1M "$IMG"
    printf '# who may connect\n%s\n' "$DN1_ENC" >"$TEST_DIR/authz"
    start_tls --tls-verify-peer --tls-authz="$TEST_DIR/authz"
    run nbdsh_tls "$(x509_uri client1)" 'h.pwrite(b"1" * 512, 0)'
    assert_success
    run nbdsh_tls "$(x509_uri client2)" 'h.pwrite(b"2" * 512, 0)'
    assert_failure
    # the same DN from another CA is not client1
    run nbdinfo --size "$(x509_uri foreign)"
    assert_failure
    run grep "not in the --tls-authz list" "$SERVER_LOG"
    assert_success
    assert_output --partial "client2"
    stop_server
    range_is "$IMG" 0 512 31
}

@test "--tls-authz: a DN written as RFC 4514 (as certtool -i prints it) is accepted" {
    require_tool nbdinfo certtool
    truncate -s 1M "$IMG"
    # what an administrator copies from "certtool -i"
    run certtool -i --infile "$PKI/client1/client-cert.pem"
    assert_output --partial "Subject: $DN1"
    printf '%s\n' "$DN1" >"$TEST_DIR/authz"
    start_tls --tls-verify-peer --tls-authz="$TEST_DIR/authz"
    run nbdinfo --size "$(x509_uri client1)"
    assert_success
    run nbdinfo --size "$(x509_uri client2)"
    assert_failure
}

@test "--tls-authz (X.509) with the default verification; with --tls-verify-peer=off a usage error" {
    require_tool nbdinfo
    truncate -s 1M "$IMG"
    printf '%s\n%s\n' "$DN1" "$DN1_ENC" >"$TEST_DIR/authz"
    start_tls --tls-authz="$TEST_DIR/authz"
    run nbdinfo --size "$(x509_uri client1)"
    assert_success
    run nbdinfo --size "$(x509_uri client2)"
    assert_failure
    run nbdinfo --size "$(x509_uri anon)"
    assert_failure
    stop_server
    grep -q "client '$DN2_ENC' is not in the --tls-authz list" "$SERVER_LOG"
    # the names come from client certificates: without them, nothing to match
    run --separate-stderr "$DISKIMG" serve -k "$SOCK" --tls-creds="$PKI/server" \
        --tls-verify-peer=off --tls-authz="$TEST_DIR/authz" "$IMG"
    assert_failure 2
    [[ $stderr == *--tls-authz* && $stderr == *--tls-verify-peer=on* ]]
    [[ ! -S $SOCK ]]
}

@test "--tls-authz (PSK): only the listed identity gets in" {
    require_tool nbdinfo
    truncate -s 1M "$IMG"
    echo alice >"$TEST_DIR/authz"
    start_psk --tls-authz="$TEST_DIR/authz"
    run nbdinfo --size "$(psk_uri alice)"
    assert_success
    run nbdinfo --size "$(psk_uri bob)"
    assert_failure
    grep -q "'bob' is not in the --tls-authz list" "$SERVER_LOG"
}

@test "TLS PSK: an unknown identity, or the right identity with the wrong key, is refused" {
    require_tool nbdinfo qemu-img
    truncate -s 1M "$IMG"
    start_psk
    run nbdinfo --size "$(psk_uri mallory "$PKI/psk-mallory/keys.psk")"
    assert_failure
    run nbdinfo --size "$(psk_uri alice "$PKI/psk-wrong/keys.psk")"
    assert_failure
    run qemu-img info \
        --object "tls-creds-psk,id=tls0,dir=$PKI/psk-mallory,username=mallory,endpoint=client" \
        --image-opts "driver=nbd,path=$SOCK,tls-creds=tls0"
    assert_failure
    run "$DISKIMG" info --tls-psk="$PKI/psk-mallory/keys.psk" "nbds+unix:///?socket=$SOCK"
    assert_failure
    # no export was opened for any of them, and the server goes on
    run grep -c "opened export" "$SERVER_LOG"
    assert_output 0
    run nbdinfo --size "$(psk_uri alice)"
    assert_success
}

@test "TLS: clients sending garbage instead of a TLS handshake do not disturb a good client" {
    require_nbd_python
    make_pattern "$IMG" $((4 * 1048576))
    start_tls
    run py "$SOCK" "$(x509_uri)" "$IMG" <<'EOF'
import os, socket, struct, sys
import nbd
import nbdraw as n

sock, uri, img = sys.argv[1:]
want = open(img, "rb").read()

good = nbd.NBD()
good.set_uri_allow_local_file(True)
good.connect_uri(uri)
assert good.get_tls_negotiated()

def check(i):
    data = bytes([i % 256]) * 65536
    good.pwrite(data, i * 65536)
    assert good.pread(65536, i * 65536) == data, "good client: data differs after %d" % i

def after_starttls():
    c = n.connect(sock)
    c.greeting()
    c.send_client_flags()
    rtype, _ = c.option(n.OPT_STARTTLS)
    assert rtype == n.REP_ACK, hex(rtype)
    return c

# 1. random bytes instead of a ClientHello: dropped
bad = []
for i in range(8):
    c = after_starttls()
    c.send(os.urandom(517))
    bad.append(c)
    check(i)
for c in bad:
    assert c.closes(timeout=20), "garbage after STARTTLS: connection not closed"

# 2. a TLS record header that promises a handshake and never delivers:
#    held open meanwhile (up to the handshake limit), the good client goes on
stalled = []
for i in range(8):
    c = after_starttls()
    c.send(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03")
    stalled.append(c)
    check(8 + i)

# 3. a TLS ClientHello (or any garbage) where the NBD client flags belong
for i in range(4):
    c = n.connect(sock)
    c.greeting()
    c.send(b"\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03" + os.urandom(160))
    assert c.is_closed(timeout=20), "garbage instead of client flags: not closed"
    check(16 + i)

# 4. an option header with garbage before STARTTLS
c = n.connect(sock)
c.greeting()
c.send_client_flags()
c.send(os.urandom(64))
assert c.is_closed(timeout=20)

for c in stalled:
    c.close()
for i in range(20):
    check(i)
good.shutdown()
print("ok")
EOF
    assert_success
    assert_output ok
    assert server_alive
    grep -q "handshake failed" "$SERVER_LOG"
    run nbdinfo --size "$(x509_uri)"
    assert_success
}

# ---------------------------------------------------------------------------
# diskimg's own client

@test "diskimg info and convert over nbds+unix:// (X.509 and PSK)" {
    make_pattern "$TEST_DIR/src.img" $((2 * 1048576))
    truncate -s 2M "$IMG"
    start_tls
    run "$DISKIMG" info --tls-creds="$PKI/client1" "nbds+unix:///?socket=$SOCK"
    assert_success
    assert_output --partial "2 MiB"
    # the same server without TLS: refused, and the message says why
    run --separate-stderr "$DISKIMG" info "nbd+unix:///?socket=$SOCK"
    assert_failure
    [[ $stderr == *TLS* ]]
    run "$DISKIMG" convert -q -n -O raw "$TEST_DIR/src.img" "nbds+unix:///?socket=$SOCK" \
        --tls-creds="$PKI/client1"
    assert_success
    run "$DISKIMG" convert -q -O raw "nbds+unix:///?socket=$SOCK" "$TEST_DIR/back.img" \
        --tls-creds="$PKI/client1"
    assert_success
    stop_server
    cmp "$TEST_DIR/src.img" "$IMG"
    cmp "$TEST_DIR/src.img" "$TEST_DIR/back.img"

    : >"$IMG"
    truncate -s 2M "$IMG"
    start_psk
    run "$DISKIMG" info --tls-psk="$PKI/psk/keys.psk" --tls-username=bob "nbds+unix:///?socket=$SOCK"
    assert_success
    assert_output --partial "2 MiB"
    run "$DISKIMG" convert -q -n -O raw "$TEST_DIR/src.img" "nbds+unix:///?socket=$SOCK" \
        --tls-psk="$PKI/psk/keys.psk" --tls-username=alice
    assert_success
    stop_server
    cmp "$TEST_DIR/src.img" "$IMG"
    grep -q "over TLS as bob" "$SERVER_LOG"
    grep -q "over TLS as alice" "$SERVER_LOG"
}

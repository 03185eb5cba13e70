#!/usr/bin/env bats
# TLS secure by default, and errors that say what failed: revocation lists
# (ca-crl.pem) on both sides; for each cause of a failed TLS handshake (no
# client certificate, another CA on either side, revoked, wrong host name,
# wrong PSK or unknown identity, no common version, the peer gone) the
# message of our client and the server's log line name it; third-party
# clients get an alert instead of a broken pipe; our client against
# qemu-nbd and nbdkit, which send none, guesses the cause.  And the
# handshake limit covers TLS: a client that stalls inside a TLS record or
# stops reading after STARTTLS is dropped, and frees its slot.
# (tls.bats: STARTTLS rules, modes, authz; tls-creds.bats: credential
# checks;
# tls-clients.bats: our client against every server.)

load '../helpers'
load 'lib'
load 'tls-lib'

setup_file() { tls_pki_setup; }

setup() {
    setup_test
    IMG=$TEST_DIR/a.img
    truncate -s 1M "$IMG"
    AUX_PIDS=()
}

teardown() {
    local pid
    for pid in "${AUX_PIDS[@]}"; do
        # a "py ... &" is a subshell: its python child goes too
        pkill -KILL -P "$pid" 2>/dev/null || true
        kill -KILL "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    done
    cleanup_test
}

# uri DIR [SOCKET]: an nbds+unix URI with the X.509 credentials in DIR.
uri() { echo "nbds+unix:///?socket=${2:-$SOCK}&tls-certificates=$PKI/$1"; }
# qemu_info DIR [OPTS]: qemu-img info of our server with credentials DIR.
qemu_info() {
    qemu-img info --object "tls-creds-x509,id=tls0,endpoint=client,dir=$PKI/$1" \
        --image-opts "driver=nbd,path=$SOCK,tls-creds=tls0,tls-hostname=localhost${2:-}"
}
# ours DIR [SOCKET]: diskimg info with the X.509 credentials in DIR.
ours() { "$DISKIMG" info --tls-creds="$PKI/$1" "nbds+unix:///?socket=${2:-$SOCK}"; }
# logged TEXT: the server logged a line with TEXT (a fixed string).
logged() { grep -qF -- "$1" "$SERVER_LOG" || { cat "$SERVER_LOG" >&2 && false; }; }

# start_aux SOCKET LOG CMD...: qemu-nbd or nbdkit in the background,
# stopped by PID in teardown.
start_aux() {
    local sock=$1 log=$2
    shift 2
    "$@" 2>>"$log" &
    AUX_PIDS+=("$!")
    wait_until 20 unix_listening "$sock"
}

# --- revocation lists ------------------------------------------------------

@test "CRL: a revoked client certificate is refused, saying 'revoked'; others are served" {
    require_tool nbdinfo qemu-img
    start_server -t -e 0 --tls-creds="$PKI/server-crl" "$IMG"
    run nbdinfo --size "$(uri client1)"
    assert_success
    run qemu_info client1
    assert_success
    run ours client1
    assert_success
    # the revoked client, with each client
    run nbdinfo --size "$(uri revoked)"
    assert_failure
    run qemu_info revoked
    assert_failure
    run --separate-stderr ours revoked
    assert_failure
    [[ $stderr == *"the NBD server says our certificate $PKI/revoked/client-cert.pem is revoked"* ]]
    assert server_alive
    stop_server
    logged "dropped during the handshake: TLS: the client certificate 'O=diskimg tests,CN=revoked1' is revoked (listed in $PKI/server-crl/ca-crl.pem)"
    [[ $(grep -c "is revoked" "$SERVER_LOG") -eq 3 ]]
    [[ $(grep -c "opened export '' over TLS as O=diskimg tests,CN=client1" "$SERVER_LOG") -eq 3 ]]
    # without the list, the same certificate is good
    start_server -t -e 0 --tls-creds="$PKI/server" "$IMG"
    run ours revoked
    assert_success
}

@test "CRL on the client: a server whose certificate is revoked is refused" {
    local d=$TEST_DIR/client
    cp -r "$PKI/client1" "$d"
    tls_crl "$PKI" ca "$d/ca-crl.pem" server
    start_server -t -e 0 --tls-creds="$PKI/server" "$IMG"
    run --separate-stderr "$DISKIMG" info --tls-creds="$d" "nbds+unix:///?socket=$SOCK"
    assert_failure
    [[ $stderr == *"the NBD server's certificate 'O=diskimg tests,CN=localhost' is revoked (listed in $d/ca-crl.pem)"* ]]
    # our client told the server why
    wait_until 10 grep -q "dropped during the handshake" "$SERVER_LOG"
    logged "TLS: the client says our certificate $PKI/server/server-cert.pem is revoked"
}

@test "CRL checks at start: another CA's, or not a CRL: exit 1, one line, on both sides" {
    local d=$TEST_DIR/creds
    cp -r "$PKI/server" "$d"
    check() {
        run --separate-stderr timeout 20 "$DISKIMG" serve -k "$SOCK" --tls-creds="$d" "$IMG"
        echo "status $status: $stderr" >&2
        [[ $status -eq 1 && $(printf '%s\n' "$stderr" | wc -l) -eq 1 ]]
        [[ $stderr == *"$d/ca-crl.pem"* && $stderr == *"$1"* ]]
        # a client takes the same checks
        run --separate-stderr "$DISKIMG" info --tls-creds="$d" "nbds+unix:///?socket=$SOCK"
        [[ $status -eq 1 && $stderr == *"$d/ca-crl.pem"* && $stderr == *"$1"* ]]
    }
    tls_crl "$PKI" ca2 "$d/ca-crl.pem" foreign1 >/dev/null
    check "is not signed by the CA in $d/ca-cert.pem"
    : >"$d/ca-crl.pem"
    check "ca-crl.pem"
    echo "not a CRL" >"$d/ca-crl.pem"
    check "ca-crl.pem"
    # a CA that may not sign CRLs (a certtool template without crl_signing_key)
    local n=$TEST_DIR/nocrl
    tls_generate "$n" tls_ca "$n" ca "no CRL CA"
    cp "$n/gen/ca-cert.pem" "$d/ca-cert.pem"
    tls_crl "$n" ca "$d/ca-crl.pem" >/dev/null
    check "does not allow signing revocation lists (certtool template: crl_signing_key)"
    [[ ! -S $SOCK ]]
}

@test "an out-of-date CRL: a warning at start, and what it lists is still refused" {
    # a CA from 2019, and a list it issued for January 2020
    local d=$TEST_DIR/old
    old_ca_steps() {
        tls_ca "$d" ca "old CA" crl_signing_key 'activation_date = "2019-01-01 00:00:00"' \
            'expiration_date = "2099-01-01 00:00:00"'
        tls_cert "$d" server ca server localhost
        tls_cert "$d" gone ca client gone 'activation_date = "2019-06-01 00:00:00"' \
            'expiration_date = "2099-01-01 00:00:00"'
        tls_cert "$d" kept ca client kept
        tls_crl "$d" ca "$d/gen/crl.pem" gone -- 'crl_this_update_date = "2020-01-01 00:00:00"' \
            'crl_next_update_date = "2020-02-01 00:00:00"'
        tls_creds "$d" server ca server server
        cp "$d/gen/crl.pem" "$d/server/ca-crl.pem"
        tls_creds "$d" gone ca client gone
        tls_creds "$d" kept ca client kept
    }
    tls_generate "$d" old_ca_steps
    start_server -t -e 0 --tls-creds="$d/server" "$IMG"
    logged "warning: TLS: revocation list $d/server/ca-crl.pem is out of date (its next update was due)"
    run "$DISKIMG" info --tls-creds="$d/kept" "nbds+unix:///?socket=$SOCK"
    assert_success
    run --separate-stderr "$DISKIMG" info --tls-creds="$d/gone" "nbds+unix:///?socket=$SOCK"
    assert_failure
    [[ $stderr == *"is revoked" ]]
    logged "the client certificate 'O=diskimg tests,CN=gone' is revoked (listed in $d/server/ca-crl.pem)"
}

# --- each cause, named on both sides (our client, our server) --------------

@test "no client certificate: 'requires a client certificate' / 'sent no certificate'" {
    start_server -t -e 0 --tls-creds="$PKI/server" "$IMG"
    run --separate-stderr ours anon
    assert_failure
    [[ $stderr == "diskimg: nbd+unix socket $SOCK: TLS: the NBD server requires a client certificate, and $PKI/anon/ has no client-cert.pem (no client certificate)" ]]
    logged "dropped during the handshake: TLS: the client sent no certificate, and this server requires one signed by its CA (--tls-verify-peer)"
    # TLS 1.2 says it with another alert
    stop_server
    start_server -t -e 0 --tls-creds="$PKI/server" --tls-priority=NORMAL:-VERS-ALL:+VERS-TLS1.2 "$IMG"
    run --separate-stderr ours anon
    assert_failure
    [[ $stderr == *"it may require a client certificate, and $PKI/anon/ has no client-cert.pem"* ]]
}

@test "a client certificate from another CA: 'unknown CA' on both sides" {
    start_server -t -e 0 --tls-creds="$PKI/server" "$IMG"
    run --separate-stderr ours foreign
    assert_failure
    [[ $stderr == *"TLS: the NBD server does not trust the CA that signed our certificate $PKI/foreign/client-cert.pem (unknown CA)" ]]
    logged "TLS: the client certificate 'O=diskimg tests,CN=client1' is not signed by the CA in $PKI/server/ca-cert.pem (unknown CA)"
}

@test "an expired client certificate (nbdinfo, qemu-img): 'has expired' in the log" {
    require_tool nbdinfo qemu-img
    start_server -t -e 0 --tls-creds="$PKI/server" "$IMG"
    run nbdinfo --size "$(uri expired)"
    assert_failure
    assert_output --partial "A TLS fatal alert has been received"
    run qemu_info expired
    assert_failure
    # our own client refuses to present it in the first place
    run --separate-stderr ours expired
    assert_failure
    [[ $stderr == *"certificate $PKI/expired/client-cert.pem has expired"* ]]
    stop_server
    logged "TLS: the client certificate 'O=diskimg tests,CN=expired1' has expired"
}

@test "a server certificate from another CA, or without the host name: said on both sides" {
    require_tool nbdinfo qemu-img
    start_server_tcp 127.0.0.1 -t -e 0 --tls-creds="$PKI/server" "$IMG"
    run --separate-stderr "$DISKIMG" info --tls-creds="$PKI/other" "nbds://127.0.0.1:$PORT/"
    assert_failure
    [[ $stderr == "diskimg: nbd://127.0.0.1:$PORT: TLS: the NBD server's certificate 'O=diskimg tests,CN=localhost' is not signed by the CA in $PKI/other/ca-cert.pem (unknown CA)" ]]
    wait_until 10 grep -q "dropped" "$SERVER_LOG"
    logged "TLS: the client does not trust the CA that signed our certificate $PKI/server/server-cert.pem (unknown CA)"
    : >"$SERVER_LOG"
    run --separate-stderr "$DISKIMG" info \
        "nbds://127.0.0.1:$PORT/?tls-certificates=$PKI/client1&tls-hostname=wrong.example"
    assert_failure
    [[ $stderr == *"TLS: the NBD server's certificate 'O=diskimg tests,CN=localhost' does not name the host 'wrong.example' (wrong host name"* ]]
    wait_until 10 grep -q "dropped" "$SERVER_LOG"
    logged "TLS: the client refused our certificate $PKI/server/server-cert.pem (Certificate is bad: not signed by a CA it trusts, or without the host name it dialled)"
    # qemu checks the name after its handshake and hangs up without an
    # alert; libnbd hangs up too: the log still points at our certificate
    : >"$SERVER_LOG"
    run qemu-img info --object "tls-creds-x509,id=tls0,endpoint=client,dir=$PKI/client1" \
        --image-opts "driver=nbd,host=127.0.0.1,port=$PORT,tls-creds=tls0,tls-hostname=wrong.example"
    assert_failure
    assert_output --partial "wrong.example"
    run nbdinfo --size "nbds://127.0.0.1:$PORT/?tls-certificates=$PKI/other"
    assert_failure
    wait_until 10 test "$(grep -c dropped "$SERVER_LOG")" -eq 2
    logged "TLS: the client closed the connection right after the TLS handshake (did it refuse our certificate?)"
    logged "TLS: the client closed the connection during the TLS handshake (did it refuse our certificate?)"
}

@test "PSK: a wrong key or an unknown identity is named on both sides" {
    start_server -t -e 0 --tls-psk="$PKI/psk/keys.psk" "$IMG"
    local bare="nbds+unix:///?socket=$SOCK"
    run --separate-stderr "$DISKIMG" info --tls-psk="$PKI/psk-wrong/keys.psk" "$bare"
    assert_failure
    [[ $stderr == *"TLS: the NBD server's pre-shared key for 'alice' differs from ours in $PKI/psk-wrong/keys.psk (wrong PSK)" ]]
    logged "TLS: the client's pre-shared key for 'alice' differs from the one in $PKI/psk/keys.psk (wrong PSK)"
    run --separate-stderr "$DISKIMG" info --tls-psk="$PKI/psk-mallory/keys.psk" "$bare"
    assert_failure
    [[ $stderr == *"TLS: the NBD server does not know our PSK identity 'mallory' (unknown identity)" ]]
    logged "TLS: the client's PSK identity 'mallory' is not in $PKI/psk/keys.psk (unknown identity)"
    # the same with TLS 1.2, where the key fails in the Finished message
    stop_server
    : >"$SERVER_LOG"
    start_server -t -e 0 --tls-psk="$PKI/psk/keys.psk" \
        --tls-priority=NORMAL:-VERS-ALL:+VERS-TLS1.2:+PSK:+ECDHE-PSK:+DHE-PSK "$IMG"
    run --separate-stderr "$DISKIMG" info --tls-psk="$PKI/psk-wrong/keys.psk" "$bare"
    assert_failure
    [[ $stderr == *"(wrong PSK)" ]]
    logged "TLS: the client's pre-shared key for 'alice' differs from the one in $PKI/psk/keys.psk (wrong PSK)"
    run --separate-stderr "$DISKIMG" info --tls-psk="$PKI/psk/keys.psk" --tls-username=bob "$bare"
    assert_success
}

@test "no TLS version in common, or the client gone mid-handshake: said in the log" {
    # a server that speaks only TLS 1.1 (GnuTLS's NORMAL allows it) and
    # our client, which offers 1.2 and 1.3
    start_server -t -e 0 --tls-creds="$PKI/server" --tls-priority=NORMAL:-VERS-ALL:+VERS-TLS1.1 "$IMG"
    run --separate-stderr ours client1
    assert_failure
    [[ $stderr == *"TLS: no TLS version or cipher suite in common with the NBD server"* ]]
    logged "TLS: no TLS version or cipher suite in common with the client"
    stop_server
    : >"$SERVER_LOG"
    start_server -t -e 0 --tls-creds="$PKI/server" "$IMG"
    run py "$SOCK" <<'EOF'
import sys
import nbdraw as n
c = n.connect(sys.argv[1])
c.greeting()
c.send_client_flags()
rtype, _ = c.option(n.OPT_STARTTLS)
assert rtype == n.REP_ACK, hex(rtype)
c.send(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03")  # part of a ClientHello
c.close()
EOF
    assert_success
    wait_until 10 grep -q dropped "$SERVER_LOG"
    logged "dropped during the handshake: TLS: the client closed the connection during the TLS handshake"
}

# --- third-party clients get an alert, and our client guesses ---------------

@test "refused nbdinfo and qemu-img clients read our alert, not a broken pipe" {
    require_tool nbdinfo qemu-img
    start_server -t -e 0 --tls-creds="$PKI/server-crl" "$IMG"
    local i d
    # (several times: a server that closes at once loses this race)
    for i in 1 2 3; do
        for d in anon foreign revoked; do
            run nbdinfo --size "$(uri "$d")"
            assert_failure
            assert_output --partial "A TLS fatal alert has been received"
            refute_output --partial "push function"
            refute_output --partial "pull function"
            run qemu_info "$d"
            assert_failure
            refute_output --partial "push function"
        done
    done
    assert server_alive
}

@test "our client against qemu-nbd and nbdkit, which send no alert: the message guesses why" {
    require_tool qemu-nbd nbdkit
    local qsock=$TEST_DIR/q.sock ksock=$TEST_DIR/k.sock log=$TEST_DIR/aux.log
    start_aux "$qsock" "$log" qemu-nbd --object \
        "tls-creds-x509,id=tls0,endpoint=server,dir=$PKI/server-crl" --tls-creds tls0 \
        -k "$qsock" -f raw -t "$IMG"
    start_aux "$ksock" "$log" nbdkit -f -U "$ksock" --tls=require \
        --tls-psk="$PKI/psk/keys.psk" memory 1M
    run ours client1 "$qsock"
    assert_success
    run --separate-stderr ours anon "$qsock"
    assert_failure
    [[ $stderr == *"TLS: the NBD server closed the connection"*"(does it require a client certificate? $PKI/anon/ has no client-cert.pem)" ]]
    run --separate-stderr ours revoked "$qsock"
    assert_failure
    [[ $stderr == *"TLS: the NBD server closed the connection"*"(did it refuse our client certificate $PKI/revoked/client-cert.pem?)" ]]
    run --separate-stderr "$DISKIMG" info --tls-psk="$PKI/psk-wrong/keys.psk" \
        "nbds+unix:///?socket=$ksock"
    assert_failure
    [[ $stderr == *"TLS: the NBD server closed the connection during the TLS handshake (did it refuse our PSK identity 'alice' or its key?)" ]]
    grep -q "revoked" "$log"
}

# --- the handshake limit covers TLS -----------------------------------------

# stall_after_tls MODE: a raw client that completes STARTTLS and the TLS
# handshake, then either sends half a TLS record (half) or sends options
# and reads no reply for 30 s (noread); prints "stalling", then how the
# connection ended.
stall_after_tls() {
    py "$SOCK" "$PKI/client1" "$1" <<'EOF'
import socket, ssl, struct, sys, time
import nbdraw as n
import nbdtls as t

sock, creds, mode = sys.argv[1:]
c = n.connect(sock)
c.greeting()
c.send_client_flags()
t.starttls(c, creds)
raw = socket.socket(fileno=c.sock.fileno())  # beneath the TLS layer
if mode == "half":
    raw.sendall(b"\x17\x03\x03\x00\x40" + b"\x00" * 10)  # 15 of 69 bytes
else:
    c.sock.settimeout(2)
    try:
        while True:
            c.sock.sendall(struct.pack(">QII", n.IHAVEOPT, n.OPT_LIST, 0))
    except (socket.timeout, ssl.SSLError, OSError):
        pass  # our send buffer is full: the server's must be too
print("stalling", flush=True)
if mode == "noread":
    # A server blocked on sending to us stays blocked: longer than the
    # 2 s limit and the watchdog's 2 s slack, so nbdinfo is served while
    # we still read nothing.
    time.sleep(8)
raw.settimeout(60)
try:
    while raw.recv(1 << 16):
        pass
    print("closed")
except ConnectionResetError:
    print("closed")
except socket.timeout:
    print("still open after 60 s")
raw.detach()
EOF
}

@test "a client stalling inside a TLS record after STARTTLS is dropped at the limit, its slot freed" {
    require_tool nbdinfo
    # -e 1: one client at a time, as qemu-nbd's default; the next waits
    start_server -t -e 1 --handshake-limit=2 --tls-creds="$PKI/server" "$IMG"
    stall_after_tls half >"$TEST_DIR/stall.out" &
    local stall=$!
    wait_until 20 grep -q stalling "$TEST_DIR/stall.out"
    # the next client gets its turn once the staller is dropped
    run timeout 60 nbdinfo --size "$(uri client1)"
    assert_success
    assert_output 1048576
    wait "$stall"
    run cat "$TEST_DIR/stall.out"
    assert_output $'stalling\nclosed'
    logged "dropped during the handshake: time limit reached"
    logged "opened export '' over TLS"
}

@test "a client that stops reading option replies inside TLS is dropped at the limit" {
    require_tool nbdinfo
    start_server -t -e 1 --handshake-limit=2 --tls-creds="$PKI/server" \
        -D "$(printf 'x%.0s' {1..4000})" "$IMG"
    stall_after_tls noread >"$TEST_DIR/stall.out" &
    local stall=$!
    wait_until 20 grep -q stalling "$TEST_DIR/stall.out"
    # served while the staller still reads nothing
    run timeout 20 nbdinfo --size "$(uri client1)"
    assert_success
    wait "$stall"
    run cat "$TEST_DIR/stall.out"
    assert_output $'stalling\nclosed'
    logged "dropped during the handshake: time limit reached"
}

@test "a client stalling inside the TLS handshake itself is dropped at the limit" {
    require_tool nbdinfo
    start_server -t -e 1 --handshake-limit=2 --tls-creds="$PKI/server" "$IMG"
    py "$SOCK" >"$TEST_DIR/stall.out" <<'EOF' &
import sys
import nbdraw as n
c = n.connect(sys.argv[1])
c.greeting()
c.send_client_flags()
rtype, _ = c.option(n.OPT_STARTTLS)
assert rtype == n.REP_ACK, hex(rtype)
c.send(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03")  # a ClientHello, cut short
print("stalling", flush=True)
print("closed" if c.closes(timeout=60) else "still open after 60 s")
EOF
    local stall=$!
    wait_until 20 grep -q stalling "$TEST_DIR/stall.out"
    run timeout 60 nbdinfo --size "$(uri client1)"
    assert_success
    wait "$stall"
    run cat "$TEST_DIR/stall.out"
    assert_output $'stalling\nclosed'
    logged "dropped during the handshake: time limit reached"
}

@test "our client: Ctrl-C while a server stalls inside the TLS handshake exits 130 promptly" {
    # a "server" that acknowledges STARTTLS, then sends half a TLS record
    py "$TEST_DIR/stall.sock" "$TEST_DIR/stalling" <<'PY' &
import socket, struct, sys, time
import nbdraw as n
s = socket.socket(socket.AF_UNIX)
s.bind(sys.argv[1])
s.listen(4)
c, _ = s.accept()
c.sendall(struct.pack(">QQH", n.NBDMAGIC, n.IHAVEOPT, n.FLAG_FIXED_NEWSTYLE))
c.recv(4)                                       # client flags
magic, opt, length = struct.unpack(">QII", c.recv(16))
assert opt == n.OPT_STARTTLS, opt
c.sendall(struct.pack(">QIII", n.REP_MAGIC, opt, n.REP_ACK, 0))
c.recv(4096)                                    # the ClientHello
c.sendall(b"\x16\x03\x03\x00\x40\x02\x00")      # 7 of 69 bytes of a ServerHello
open(sys.argv[2], "w").close()
c.settimeout(60)
c.recv(1)                                       # until the client is gone
PY
    AUX_PIDS+=("$!")
    wait_until 10 unix_listening "$TEST_DIR/stall.sock"
    "$DISKIMG" convert -f raw --tls-creds="$PKI/client1" "nbds+unix:///?socket=$TEST_DIR/stall.sock" \
        "$TEST_DIR/out.raw" 2>"$TEST_DIR/err" &
    local pid=$!
    wait_until 10 test -e "$TEST_DIR/stalling"
    sleep 0.2
    kill -INT "$pid"
    # bounded: the client's handshake limit is 30 s, which Ctrl-C must not sit out
    if ! wait_exit "$pid" 10; then
        kill -KILL "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
        echo "convert ignored SIGINT inside the TLS handshake" >&2
        return 1
    fi
    [[ $EXIT_STATUS -eq 130 ]] || { echo "exit $EXIT_STATUS: $(cat "$TEST_DIR/err")" >&2; return 1; }
    [[ ! -e $TEST_DIR/out.raw ]]
}

#!/usr/bin/env bats
# TLS credentials in diskimg serve: what a missing, unreadable, too open,
# expired or malformed certificate, key or PSK file gives (exit 1 and one
# clear line), and the --tls-priority string.  Split from tls.bats, whose
# certificates and keys (tls-lib.bash) and hooks (tls-server.bash) it shares.

load '../helpers'
load 'lib'
load 'tls-server' # and its setup_file, setup and teardown

# ---------------------------------------------------------------------------
# Credential errors: exit 1 and one clear line

@test "missing credentials: a missing directory, CA, certificate or key is one clear line" {
    truncate -s 1M "$IMG"
    serve_fails "ca-cert.pem" --tls-creds="$TEST_DIR/no-such-dir"
    mkdir "$TEST_DIR/creds"
    cp -p "$PKI/server/"*.pem "$TEST_DIR/creds/"
    rm "$TEST_DIR/creds/server-key.pem"
    serve_fails "server-key.pem" --tls-creds="$TEST_DIR/creds"
    cp -p "$PKI/server/server-key.pem" "$TEST_DIR/creds/"
    rm "$TEST_DIR/creds/server-cert.pem"
    serve_fails "server-cert.pem" --tls-creds="$TEST_DIR/creds"
    cp -p "$PKI/server/server-cert.pem" "$TEST_DIR/creds/"
    rm "$TEST_DIR/creds/ca-cert.pem"
    serve_fails "ca-cert.pem" --tls-creds="$TEST_DIR/creds"
    serve_fails "no-such.psk" --tls-psk="$TEST_DIR/no-such.psk"
    serve_fails "no-such-authz" --tls-creds="$PKI/server" --tls-authz="$TEST_DIR/no-such-authz"
    [[ ! -S $SOCK ]]
}

@test "unreadable credentials (server run as nobody): one clear line naming the file" {
    require_tool setpriv
    [[ $EUID -eq 0 ]] || skip "needs root to run the server as another user"
    truncate -s 1M "$IMG"
    chmod 755 "$TEST_DIR"
    chmod 666 "$IMG"
    # nobody must be able to create the socket
    mkdir -m 777 "$TEST_DIR/run"
    SOCK=$TEST_DIR/run/nbd.sock
    local d=$TEST_DIR/creds
    mkdir "$d"
    cp "$PKI/server/"*.pem "$d/"
    chown -R nobody "$d"
    chmod 755 "$d"
    chmod 644 "$d/ca-cert.pem" "$d/server-cert.pem"
    chmod 600 "$d/server-key.pem"
    local as_nobody=(setpriv --reuid=65534 --regid=65534 --clear-groups --)
    # readable by nobody: starts (sanity check of the setup)
    "${as_nobody[@]}" "$DISKIMG" serve -k "$SOCK" --tls-creds="$d" "$IMG" 2>>"$SERVER_LOG" &
    SERVER_PID=$!
    wait_for_server
    stop_server
    # the key belongs to root: nobody cannot read it
    chown root "$d/server-key.pem"
    run --separate-stderr timeout 20 "${as_nobody[@]}" "$DISKIMG" serve -k "$SOCK" \
        --tls-creds="$d" "$IMG"
    echo "status $status: $stderr" >&2
    [[ $status -eq 1 ]]
    [[ $(printf '%s\n' "$stderr" | wc -l) -eq 1 ]]
    [[ $stderr == *server-key.pem* && $stderr == *"ermission denied"* ]]
    chown nobody "$d/server-key.pem"
    chmod 600 "$d/ca-cert.pem"
    chown root "$d/ca-cert.pem"
    run --separate-stderr timeout 20 "${as_nobody[@]}" "$DISKIMG" serve -k "$SOCK" \
        --tls-creds="$d" "$IMG"
    [[ $status -eq 1 ]]
    [[ $(printf '%s\n' "$stderr" | wc -l) -eq 1 ]]
    [[ $stderr == *ca-cert.pem* && $stderr == *"ermission denied"* ]]
    # a PSK file nobody cannot read
    cp "$PKI/psk/keys.psk" "$d/keys.psk"
    chmod 600 "$d/keys.psk"
    run --separate-stderr timeout 20 "${as_nobody[@]}" "$DISKIMG" serve -k "$SOCK" \
        --tls-psk="$d/keys.psk" "$IMG"
    [[ $status -eq 1 ]]
    [[ $(printf '%s\n' "$stderr" | wc -l) -eq 1 ]]
    [[ $stderr == *keys.psk* && $stderr == *"ermission denied"* ]]
}

@test "a private key or PSK file readable by group or others is refused, with the fix" {
    truncate -s 1M "$IMG"
    mkdir "$TEST_DIR/creds"
    cp "$PKI/server/"*.pem "$TEST_DIR/creds/"
    local mode
    for mode in 640 604 644; do
        chmod "$mode" "$TEST_DIR/creds/server-key.pem"
        serve_fails "server-key.pem" --tls-creds="$TEST_DIR/creds"
        [[ $stderr == *"$mode"* || $stderr == *group* || $stderr == *others* ]]
    done
    # certificates may be world-readable
    chmod 600 "$TEST_DIR/creds/server-key.pem"
    chmod 644 "$TEST_DIR/creds/server-cert.pem" "$TEST_DIR/creds/ca-cert.pem"
    start_server -t --tls-creds="$TEST_DIR/creds" "$IMG"
    stop_server
    cp "$PKI/psk/keys.psk" "$TEST_DIR/keys.psk"
    chmod 644 "$TEST_DIR/keys.psk"
    serve_fails "keys.psk" --tls-psk="$TEST_DIR/keys.psk"
}

@test "an expired or not yet valid server certificate is refused at start, in one line" {
    truncate -s 1M "$IMG"
    serve_fails "server-cert.pem" --tls-creds="$PKI/server-expired"
    [[ $stderr == *expired* ]]
    serve_fails "server-cert.pem" --tls-creds="$PKI/server-notyet"
    [[ $stderr == *"not valid yet"* || $stderr == *"not yet"* ]]
}

@test "a malformed certificate or PSK file is one clear line, not a crash" {
    truncate -s 1M "$IMG"
    mkdir "$TEST_DIR/creds"
    cp "$PKI/server/"*.pem "$TEST_DIR/creds/"
    echo "not a certificate" >"$TEST_DIR/creds/server-cert.pem"
    serve_fails "server-cert.pem" --tls-creds="$TEST_DIR/creds"
    cp "$PKI/server/server-cert.pem" "$TEST_DIR/creds/"
    # a key that does not belong to the certificate
    cp "$PKI/client1/client-key.pem" "$TEST_DIR/creds/server-key.pem"
    serve_fails "server-" --tls-creds="$TEST_DIR/creds"
}

# ---------------------------------------------------------------------------
# Priority string

# tls_version [VERSION]: the TLS version a raw client negotiates (pinned to
# VERSION if given), or "refused".
tls_version() {
    py "$SOCK" "$PKI/client1" "${1:-}" <<'EOF'
import sys
import nbdraw as n
import nbdtls as t
c = n.connect(sys.argv[1])
c.greeting()
c.send_client_flags()
try:
    v = t.starttls(c, sys.argv[2], version=sys.argv[3] or None)
    assert c.go() == n.REP_ACK
    assert c.read(0, 512).error == 0
    print(v)
except (t.HandshakeFailed, n.Closed, ConnectionResetError):
    print("refused")
EOF
}

@test "--tls-priority: the default refuses TLS 1.1; a priority string changes what is offered" {
    truncate -s 1M "$IMG"
    start_tls
    run tls_version
    assert_output TLSv1.3
    run tls_version TLSv1_2
    assert_output TLSv1.2
    run tls_version TLSv1_1
    assert_output refused
    stop_server

    start_tls --tls-priority=NORMAL:-VERS-ALL:+VERS-TLS1.2
    run tls_version
    assert_output TLSv1.2
    run tls_version TLSv1_3
    assert_output refused
    stop_server

    start_tls --tls-priority=NORMAL:-VERS-ALL:+VERS-TLS1.3
    run tls_version TLSv1_2
    assert_output refused
    run tls_version TLSv1_3
    assert_output TLSv1.3
    stop_server

    # GnuTLS's NORMAL still allows TLS 1.1: so the refusal above is the
    # default priority string's doing, not the client's
    start_tls --tls-priority=NORMAL
    run tls_version TLSv1_1
    assert_output TLSv1.1
    stop_server

    serve_fails "NOT-A-PRIORITY" --tls-creds="$PKI/server" --tls-priority=NOT-A-PRIORITY
}

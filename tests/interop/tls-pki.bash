# tests/interop/tls-pki.bash: the certificates, keys and helpers that
# tls.bats and tls-creds.bats share (load after ../helpers and lib).
# tls-lib.bash makes another layout, for tls-verify.bats (revocation) and
# stalled-clients.bats; these two suites were written against this one.
#
# tls_pki_setup (from setup_file) makes, once per file, with certtool
# and psktool:
#   $PKI/server    ca-cert.pem, server-cert.pem, server-key.pem (CN=localhost)
#   $PKI/client1   ca-cert.pem, client-cert.pem, client-key.pem (CN=client1)
#   $PKI/client2   the same CA, CN=client2
#   $PKI/nocert    ca-cert.pem only (a client without a certificate)
#   $PKI/foreign   our CA's ca-cert.pem, but a client certificate (CN=client1)
#                  signed by another CA
#   $PKI/wrongca   another CA's ca-cert.pem (does not trust our server)
#   $PKI/expired   a server certificate that expired in 2020
#   $PKI/notyet    a server certificate valid from 2099
#   $PKI/keys.psk  PSK identities alice and bob; $PKI/alice/keys.psk alice
#                  only (qemu's tls-creds-psk reads DIR/keys.psk);
#                  $PKI/mallory/keys.psk an identity the server does not
#                  know; $PKI/alice-wrong/keys.psk alice with another key

template() { printf '%s\n' "$@" >"$TMPL"; }

# make_ca DIR: a self-signed CA in DIR (ca-key.pem, ca-cert.pem).
make_ca() {
    mkdir -p "$1"
    template "cn = diskimg test CA $(basename "$1")" ca cert_signing_key "expiration_days = 30"
    certtool --generate-privkey --key-type=ecdsa --outfile "$1/ca-key.pem" &&
        certtool --generate-self-signed --load-privkey "$1/ca-key.pem" --template "$TMPL" \
            --outfile "$1/ca-cert.pem"
}

# sign CADIR OUTDIR KIND(server|client) TEMPLATE-LINES...: a key and a
# certificate signed by CADIR's CA, as OUTDIR/KIND-key.pem, KIND-cert.pem.
sign() {
    local ca=$1 out=$2 kind=$3
    shift 3
    mkdir -p "$out"
    template "$@"
    certtool --generate-privkey --key-type=ecdsa --outfile "$out/$kind-key.pem" &&
        certtool --generate-certificate --load-privkey "$out/$kind-key.pem" \
            --load-ca-certificate "$ca/ca-cert.pem" --load-ca-privkey "$ca/ca-key.pem" \
            --template "$TMPL" --outfile "$out/$kind-cert.pem"
}

SERVER_TMPL=("organization = diskimg test" "cn = localhost" "dns_name = localhost"
    "ip_address = 127.0.0.1" "ip_address = ::1" tls_www_server encryption_key signing_key)

gen_pki() {
    TMPL=$PKI/template
    make_ca "$PKI/ca" && make_ca "$PKI/otherca" || return 1
    sign "$PKI/ca" "$PKI/server" server "${SERVER_TMPL[@]}" "expiration_days = 30" || return 1
    sign "$PKI/ca" "$PKI/client1" client "organization = diskimg test" "cn = client1" \
        tls_www_client encryption_key signing_key "expiration_days = 30" || return 1
    sign "$PKI/ca" "$PKI/client2" client "organization = diskimg test" "cn = client2" \
        tls_www_client encryption_key signing_key "expiration_days = 30" || return 1
    sign "$PKI/otherca" "$PKI/foreign" client "organization = diskimg test" "cn = client1" \
        tls_www_client encryption_key signing_key "expiration_days = 30" || return 1
    sign "$PKI/otherca" "$PKI/wrongca" client "organization = diskimg test" "cn = client1" \
        tls_www_client encryption_key signing_key "expiration_days = 30" || return 1
    sign "$PKI/ca" "$PKI/expired" server "${SERVER_TMPL[@]}" \
        'activation_date = "2019-01-01 00:00:00"' 'expiration_date = "2020-01-01 00:00:00"' ||
        return 1
    sign "$PKI/ca" "$PKI/notyet" server "${SERVER_TMPL[@]}" \
        'activation_date = "2099-01-01 00:00:00"' 'expiration_date = "2099-12-31 00:00:00"' ||
        return 1
    mkdir -p "$PKI/nocert"
    local d
    for d in server client1 client2 foreign nocert expired notyet; do
        cp "$PKI/ca/ca-cert.pem" "$PKI/$d/"
    done
    cp "$PKI/otherca/ca-cert.pem" "$PKI/wrongca/"
    psktool -u alice -p "$PKI/keys.psk" && psktool -u bob -p "$PKI/keys.psk" || return 1
    mkdir -p "$PKI/alice" "$PKI/mallory" "$PKI/alice-wrong"
    grep '^alice:' "$PKI/keys.psk" >"$PKI/alice/keys.psk"
    psktool -u mallory -p "$PKI/mallory/keys.psk" &&
        psktool -u alice -p "$PKI/alice-wrong/keys.psk"
}

# For setup_file: the PKI above in $BATS_FILE_TMPDIR/pki, exported as PKI.
tls_pki_setup() {
    require_tool certtool psktool
    export PKI=$BATS_FILE_TMPDIR/pki
    mkdir -p "$PKI"
    # umask 077: private keys and PSK files are 0600, as the server wants.
    (umask 077 && gen_pki) >"$BATS_FILE_TMPDIR/pki.log" 2>&1 || {
        cat "$BATS_FILE_TMPDIR/pki.log" >&2
        return 1
    }
    # The DN as RFC 4514 writes it (and certtool -i and openssl
    # -nameopt RFC2253 print it), and in the order of the certificate
    # (GnuTLS's gnutls_x509_crt_get_dn, which qemu's authz also uses).
    export DN1="CN=client1,O=diskimg test" DN1_ENC="O=diskimg test,CN=client1"
    export DN2_ENC="O=diskimg test,CN=client2"
}

# The hooks of the suites that load this file: the PKI once per file, an
# image path per test.
setup_file() { tls_pki_setup; }
setup() {
    setup_test
    IMG=$TEST_DIR/a.img
}
teardown() { cleanup_test; }

# X.509 and PSK URIs of the server on $SOCK (libnbd syntax: PSK identity
# as the URI's user).
x509_uri() { echo "nbds+unix:///${2:-}?socket=$SOCK&tls-certificates=$PKI/${1:-client1}"; }
psk_uri() { echo "nbds+unix://${1:-alice}@/${3:-}?socket=$SOCK&tls-psk-file=${2:-$PKI/keys.psk}"; }

# nbdsh_tls URI SCRIPT: nbdsh connected to URI, then SCRIPT (libnbd
# allows the local files a TLS URI names only when asked to).
nbdsh_tls() {
    nbdsh -c "h.set_uri_allow_local_file(True)" -c "h.connect_uri('$1')" -c "$2"
}

# start_tls [serve options...]: X.509 server (require mode) on $IMG, any
# number of clients, persistent.
start_tls() { start_server -t -e 0 --tls-creds="$PKI/server" "$@" "$IMG"; }
start_psk() { start_server -t -e 0 --tls-psk="$PKI/keys.psk" "$@" "$IMG"; }

# serve_fails EXPECTED-SUBSTRING serve-options...: the server must refuse
# to start, exit 1, and say why in exactly one "diskimg: " line naming
# EXPECTED-SUBSTRING.  (timeout: a server that starts anyway fails the
# test instead of hanging it.)
serve_fails() {
    local want=$1
    shift
    run --separate-stderr timeout 20 "$DISKIMG" serve -k "$SOCK" "$@" "$IMG"
    echo "status $status, stderr: $stderr" >&2
    [[ $status -eq 1 ]]
    [[ $(printf '%s\n' "$stderr" | wc -l) -eq 1 ]]
    [[ $stderr == diskimg:* ]]
    [[ $stderr == *"$want"* ]]
}

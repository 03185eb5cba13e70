# tests/interop/tls-lib.bash: a PKI for the TLS suites, made with
# certtool and psktool (load after ../helpers and lib).
#
# make_server_pki DIR makes only a CA and DIR/server (below), for tests
# of something other than certificates.
#
# make_tls_pki DIR makes, with ECDSA keys (fast) of mode 600:
#   DIR/gen/        the CAs' keys and every certificate (NAME-cert.pem,
#                   NAME-key.pem), and crl.pem (our CA revokes "revoked")
#   DIR/server      ca-cert.pem, server-cert.pem, server-key.pem
#                   (CN=localhost, DNS localhost, IP 127.0.0.1)
#   DIR/server-crl  the same and ca-crl.pem
#   DIR/client      ca-cert.pem, client-cert.pem, client-key.pem (CN=client1)
#   DIR/revoked     the same for CN=revoked1, whom crl.pem revokes
#   DIR/expired     the same for CN=expired1, which expired in 2020
#   DIR/foreign     our CA's ca-cert.pem, a client certificate (CN=client1)
#                   signed by another CA
#   DIR/anon        ca-cert.pem only: no client certificate
#   DIR/other       the other CA's ca-cert.pem: does not trust our server
#   DIR/psk/keys.psk        alice and bob (qemu reads DIR/keys.psk)
#   DIR/psk-wrong/keys.psk  alice with another key
#   DIR/psk-mallory/keys.psk  an identity the server does not know

# tls_template FILE LINE...: a certtool template, one line per argument.
tls_template() {
    local f=$1
    shift
    printf '%s\n' "$@" >"$f"
}

# tls_self_sign DIR NAME CN: a CA, DIR/gen/NAME-{key,cert}.pem.
tls_self_sign() {
    tls_template "$1/gen/$2.info" "cn = \"$3\"" ca cert_signing_key crl_signing_key \
        'expiration_days = 30'
    certtool --generate-privkey --key-type=ecdsa --outfile "$1/gen/$2-key.pem" &&
        certtool --generate-self-signed --load-privkey "$1/gen/$2-key.pem" \
            --template "$1/gen/$2.info" --outfile "$1/gen/$2-cert.pem"
}

# tls_sign DIR NAME CA TEMPLATE-LINE...: DIR/gen/NAME-{key,cert}.pem signed by CA.
tls_sign() {
    local d=$1 name=$2 ca=$3
    shift 3
    tls_template "$d/gen/$name.info" "$@"
    certtool --generate-privkey --key-type=ecdsa --outfile "$d/gen/$name-key.pem" &&
        certtool --generate-certificate --load-privkey "$d/gen/$name-key.pem" \
            --load-ca-certificate "$d/gen/$ca-cert.pem" --load-ca-privkey "$d/gen/$ca-key.pem" \
            --template "$d/gen/$name.info" --outfile "$d/gen/$name-cert.pem"
}

# tls_install DIR SUBDIR CA [ROLE NAME]: DIR/SUBDIR with CA's certificate as
# ca-cert.pem and, when given, NAME's certificate and key as ROLE-*.pem.
tls_install() {
    local d=$1/$2
    mkdir -p "$d"
    cp "$1/gen/$3-cert.pem" "$d/ca-cert.pem"
    if [[ $# -ge 5 ]]; then
        cp "$1/gen/$5-cert.pem" "$d/$4-cert.pem"
        cp "$1/gen/$5-key.pem" "$d/$4-key.pem"
    fi
}

# tls_crl DIR CA OUT CERT...: a revocation list by CA revoking CERTs
# (DIR/gen names), valid for 30 days.
tls_crl() {
    local d=$1 ca=$2 out=$3 c args=()
    shift 3
    for c in "$@"; do
        args+=(--load-certificate "$d/gen/$c-cert.pem")
    done
    tls_template "$d/gen/crl.info" 'crl_next_update = 30'
    certtool --generate-crl --load-ca-privkey "$d/gen/$ca-key.pem" \
        --load-ca-certificate "$d/gen/$ca-cert.pem" "${args[@]}" --template "$d/gen/crl.info" \
        --outfile "$out"
}

# tls_generate DIR STEPS...: run the certtool steps with keys of mode 600,
# their output in DIR/gen/log, shown only when one fails.
tls_generate() {
    local d=$1
    shift
    mkdir -p "$d/gen"
    (
        umask 077
        set -e
        "$@"
    ) >"$d/gen/log" 2>&1 || {
        cat "$d/gen/log" >&2
        return 1
    }
}

tls_server_steps() {
    local d=$1
    tls_self_sign "$d" ca "diskimg test CA"
    tls_sign "$d" server ca 'organization = "diskimg tests"' 'cn = "localhost"' \
        'dns_name = "localhost"' 'ip_address = "127.0.0.1"' tls_www_server encryption_key \
        signing_key 'expiration_days = 30'
    tls_install "$d" server ca server server
}

make_server_pki() {
    tls_generate "$1" tls_server_steps "$1" && [[ -s $1/server/server-cert.pem ]]
}

tls_all_steps() {
    local d=$1 client=(tls_www_client encryption_key signing_key 'expiration_days = 30')
    tls_server_steps "$d"
    tls_self_sign "$d" ca2 "some other CA"
    tls_sign "$d" client1 ca 'organization = "diskimg tests"' 'cn = "client1"' "${client[@]}"
    tls_sign "$d" revoked1 ca 'organization = "diskimg tests"' 'cn = "revoked1"' "${client[@]}"
    tls_sign "$d" foreign1 ca2 'organization = "diskimg tests"' 'cn = "client1"' "${client[@]}"
    tls_sign "$d" expired1 ca 'organization = "diskimg tests"' 'cn = "expired1"' \
        tls_www_client encryption_key signing_key 'activation_date = "2019-01-01 00:00:00"' \
        'expiration_date = "2020-01-01 00:00:00"'
    tls_crl "$d" ca "$d/gen/crl.pem" revoked1
    tls_install "$d" server-crl ca server server
    cp "$d/gen/crl.pem" "$d/server-crl/ca-crl.pem"
    tls_install "$d" client ca client client1
    tls_install "$d" revoked ca client revoked1
    tls_install "$d" foreign ca client foreign1
    tls_install "$d" expired ca client expired1
    tls_install "$d" anon ca
    tls_install "$d" other ca2
    mkdir -p "$d/psk" "$d/psk-wrong" "$d/psk-mallory"
    psktool -u alice -p "$d/psk/keys.psk"
    psktool -u bob -p "$d/psk/keys.psk"
    psktool -u alice -p "$d/psk-wrong/keys.psk"
    psktool -u mallory -p "$d/psk-mallory/keys.psk"
}

make_tls_pki() {
    tls_generate "$1" tls_all_steps "$1" &&
        [[ -s $1/server-crl/ca-crl.pem && -s $1/foreign/client-cert.pem && -s $1/psk/keys.psk ]]
}

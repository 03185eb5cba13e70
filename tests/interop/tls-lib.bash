# tests/interop/tls-lib.bash: the one PKI of the TLS suites, made with
# certtool and psktool (load after ../helpers and lib).  Every set of
# credentials is a directory in qemu's --tls-creds layout (ca-cert.pem,
# ROLE-cert.pem, ROLE-key.pem, ca-crl.pem), which diskimg, qemu, nbdkit
# and libnbd all read.
#
# Building blocks, for a suite or a test that needs certificates of its
# own (run them under tls_generate, which makes the keys mode 600):
#   tls_ca DIR NAME CN [LINE...]            a CA: DIR/gen/NAME-{key,cert}.pem
#   tls_cert DIR NAME CA ROLE CN [LINE...]  a server or client certificate
#                                           signed by CA, the same names
#   tls_creds DIR SUBDIR CA [ROLE NAME]     DIR/SUBDIR for --tls-creds
#   tls_crl DIR CA OUT [CERT...] [-- LINE...]  a revocation list
# LINE: more certtool template lines, for what a test needs: dates (an
# expired or not yet valid certificate), other host names (dns_name,
# ip_address), crl_signing_key for a CA that signs revocation lists.
#
# make_server_pki DIR: only a CA and DIR/server, for tests of something
# other than certificates.
#
# make_tls_pki DIR: every credential the TLS suites share:
#   DIR/gen/            the CAs' keys and every certificate and key
#   DIR/server          ca-cert.pem, server-cert.pem, server-key.pem
#                       (CN=localhost; DNS localhost, IP 127.0.0.1 and ::1)
#   DIR/server-crl      the same and ca-crl.pem, which revokes "revoked"
#   DIR/server-expired  a server certificate that expired in 2020
#   DIR/server-notyet   a server certificate valid from 2099
#   DIR/client1         ca-cert.pem, client-cert.pem, client-key.pem
#                       (CN=client1); DIR/client2 the same for CN=client2
#   DIR/revoked         the same for CN=revoked1, whom ca-crl.pem revokes
#   DIR/expired         the same for CN=expired1, which expired in 2020
#   DIR/foreign         our CA's ca-cert.pem, a client certificate
#                       (CN=client1) signed by another CA
#   DIR/anon            ca-cert.pem only: no client certificate
#   DIR/other           the other CA's ca-cert.pem: does not trust our server
#   DIR/psk/keys.psk          alice and bob (qemu reads DIR/keys.psk)
#   DIR/psk-wrong/keys.psk    alice with another key
#   DIR/psk-mallory/keys.psk  an identity the server does not know
# Every certificate but the CAs' names O=diskimg tests.

# tls_template FILE LINE...: a certtool template, one line per argument.
tls_template() {
    local f=$1
    shift
    printf '%s\n' "$@" >"$f"
}

# tls_lifetime LINE...: "expiration_days = 30" unless LINEs set an
# expiration date of their own.
tls_lifetime() {
    [[ " $* " == *" expiration_date "* || " $* " == *" expiration_date="* ]] ||
        echo 'expiration_days = 30'
}

# tls_ca DIR NAME CN [LINE...]: a self-signed CA, DIR/gen/NAME-{key,cert}.pem.
tls_ca() {
    local d=$1 name=$2 cn=$3
    shift 3
    tls_template "$d/gen/$name.info" "cn = \"$cn\"" ca cert_signing_key "$@" \
        "$(tls_lifetime "$@")"
    certtool --generate-privkey --key-type=ecdsa --outfile "$d/gen/$name-key.pem" &&
        certtool --generate-self-signed --load-privkey "$d/gen/$name-key.pem" \
            --template "$d/gen/$name.info" --outfile "$d/gen/$name-cert.pem"
}

# tls_cert DIR NAME CA ROLE CN [LINE...]: DIR/gen/NAME-{key,cert}.pem, a
# certificate for ROLE (server or client) signed by CA.  A server's names
# localhost, 127.0.0.1 and ::1 unless LINEs name hosts (dns_name,
# ip_address).
tls_cert() {
    local d=$1 name=$2 ca=$3 role=$4 cn=$5 hosts=()
    shift 5
    if [[ $role == server && " $* " != *" dns_name "* && " $* " != *" ip_address "* ]]; then
        hosts=('dns_name = "localhost"' 'ip_address = "127.0.0.1"' 'ip_address = "::1"')
    fi
    tls_template "$d/gen/$name.info" 'organization = "diskimg tests"' "cn = \"$cn\"" \
        "tls_www_$role" encryption_key signing_key "${hosts[@]}" "$@" "$(tls_lifetime "$@")"
    certtool --generate-privkey --key-type=ecdsa --outfile "$d/gen/$name-key.pem" &&
        certtool --generate-certificate --load-privkey "$d/gen/$name-key.pem" \
            --load-ca-certificate "$d/gen/$ca-cert.pem" --load-ca-privkey "$d/gen/$ca-key.pem" \
            --template "$d/gen/$name.info" --outfile "$d/gen/$name-cert.pem"
}

# tls_creds DIR SUBDIR CA [ROLE NAME]: DIR/SUBDIR with CA's certificate as
# ca-cert.pem and, when given, NAME's certificate and key as ROLE-*.pem.
tls_creds() {
    local d=$1/$2
    mkdir -p "$d"
    cp "$1/gen/$3-cert.pem" "$d/ca-cert.pem"
    if [[ $# -ge 5 ]]; then
        cp "$1/gen/$5-cert.pem" "$d/$4-cert.pem"
        cp -p "$1/gen/$5-key.pem" "$d/$4-key.pem"
    fi
}

# tls_crl DIR CA OUT [CERT...] [-- LINE...]: a revocation list by CA
# revoking CERTs (DIR/gen names), valid for 30 days unless LINEs give
# other dates.
tls_crl() {
    local d=$1 ca=$2 out=$3 args=()
    shift 3
    while [[ $# -gt 0 && $1 != -- ]]; do
        args+=(--load-certificate "$d/gen/$1-cert.pem")
        shift
    done
    [[ $# -eq 0 ]] || shift
    if [[ $# -eq 0 ]]; then
        set -- 'crl_next_update = 30'
    fi
    tls_template "$d/gen/crl.info" "$@"
    certtool --generate-crl --load-ca-privkey "$d/gen/$ca-key.pem" \
        --load-ca-certificate "$d/gen/$ca-cert.pem" "${args[@]}" --template "$d/gen/crl.info" \
        --outfile "$out"
}

# tls_generate DIR STEP...: run STEP (a command or function) with keys of
# mode 600, stopping at the first failure; the output goes to DIR/gen/log,
# shown only when a step fails.  (The subshell runs in the background so
# that set -e holds in it: in an || list bash ignores it.)
tls_generate() {
    local d=$1
    shift
    mkdir -p "$d/gen"
    (
        umask 077
        set -e
        "$@"
    ) >"$d/gen/log" 2>&1 &
    wait $! || {
        cat "$d/gen/log" >&2
        return 1
    }
}

tls_server_steps() {
    local d=$1
    tls_ca "$d" ca "diskimg test CA" crl_signing_key
    tls_cert "$d" server ca server localhost
    tls_creds "$d" server ca server server
}

make_server_pki() {
    tls_generate "$1" tls_server_steps "$1"
}

# tls_psk FILE NAME...: a random key for each NAME in FILE.
tls_psk() {
    local f=$1 name
    shift
    mkdir -p "$(dirname "$f")"
    for name in "$@"; do
        psktool -u "$name" -p "$f"
    done
}

tls_all_steps() {
    local d=$1
    local expired=('activation_date = "2019-01-01 00:00:00"'
        'expiration_date = "2020-01-01 00:00:00"')
    tls_server_steps "$d"
    tls_ca "$d" ca2 "some other CA" crl_signing_key
    tls_cert "$d" server-expired ca server localhost "${expired[@]}"
    tls_cert "$d" server-notyet ca server localhost 'activation_date = "2099-01-01 00:00:00"' \
        'expiration_date = "2099-12-31 00:00:00"'
    tls_cert "$d" client1 ca client client1
    tls_cert "$d" client2 ca client client2
    tls_cert "$d" revoked1 ca client revoked1
    tls_cert "$d" expired1 ca client expired1 "${expired[@]}"
    tls_cert "$d" foreign1 ca2 client client1
    tls_crl "$d" ca "$d/gen/crl.pem" revoked1
    tls_creds "$d" server-crl ca server server
    cp "$d/gen/crl.pem" "$d/server-crl/ca-crl.pem"
    tls_creds "$d" server-expired ca server server-expired
    tls_creds "$d" server-notyet ca server server-notyet
    tls_creds "$d" client1 ca client client1
    tls_creds "$d" client2 ca client client2
    tls_creds "$d" revoked ca client revoked1
    tls_creds "$d" expired ca client expired1
    tls_creds "$d" foreign ca client foreign1
    tls_creds "$d" anon ca
    tls_creds "$d" other ca2
    tls_psk "$d/psk/keys.psk" alice bob
    tls_psk "$d/psk-wrong/keys.psk" alice
    tls_psk "$d/psk-mallory/keys.psk" mallory
}

make_tls_pki() {
    tls_generate "$1" tls_all_steps "$1"
}

# tls_pki_setup, for setup_file: make_tls_pki in $BATS_FILE_TMPDIR/pki,
# exported as PKI, once per file.  DN1 is client1's DN as RFC 4514 writes
# it (and certtool -i and openssl -nameopt RFC2253 print it); DN1_ENC and
# DN2_ENC are client1's and client2's in the order of the certificate
# (GnuTLS's gnutls_x509_crt_get_dn, which qemu's authz also uses).
tls_pki_setup() {
    require_tool certtool psktool
    export PKI=$BATS_FILE_TMPDIR/pki
    make_tls_pki "$PKI"
    export DN1="CN=client1,O=diskimg tests" DN1_ENC="O=diskimg tests,CN=client1"
    export DN2_ENC="O=diskimg tests,CN=client2"
}

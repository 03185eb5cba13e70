# tests/interop/tls-server.bash: the hooks and helpers that tls.bats and
# tls-creds.bats share, for tests of our server's TLS (load after
# ../helpers and lib).  The certificates, keys and PSK files are
# tls-lib.bash's, made once per file in $PKI.

load 'tls-lib'

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
psk_uri() { echo "nbds+unix://${1:-alice}@/${3:-}?socket=$SOCK&tls-psk-file=${2:-$PKI/psk/keys.psk}"; }

# nbdsh_tls URI SCRIPT: nbdsh connected to URI, then SCRIPT (libnbd
# allows the local files a TLS URI names only when asked to).
nbdsh_tls() {
    nbdsh -c "h.set_uri_allow_local_file(True)" -c "h.connect_uri('$1')" -c "$2"
}

# start_tls [serve options...]: X.509 server (require mode) on $IMG, any
# number of clients, persistent.
start_tls() { start_server -t -e 0 --tls-creds="$PKI/server" "$@" "$IMG"; }
start_psk() { start_server -t -e 0 --tls-psk="$PKI/psk/keys.psk" "$@" "$IMG"; }

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

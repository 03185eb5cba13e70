#!/usr/bin/env bats
# The certtool and psktool commands of diskimg-serve(1) make credentials
# that diskimg and the other clients accept: this suite takes them from
# the man page source (the blocks between '.\" recipe NAME' and
# '.\" end recipe'), runs them as they are, and serves with the result.
# And the fix a permission error suggests is one that works.

load '../helpers'
load 'lib'

MAN=$BATS_TEST_DIRNAME/../../man/diskimg-serve.1

setup() {
    setup_test
    require_tool certtool psktool
    WORK=$TEST_DIR/work
    mkdir -p "$WORK"
    truncate -s 1M "$WORK/disk.img"
}
teardown() { cleanup_test; }

# recipe NAME: the shell commands of that block of the man page, with the
# roff escapes it uses undone; fails if another escape is left.
recipe() {
    awk -v name="$1" '
        $0 == ".\\\" recipe " name { on = 1; found = 1; next }
        on && $0 == ".\\\" end recipe" { exit }
        on && !/^\./ { print }
        END { exit !found }' "$MAN" |
        sed -e 's/\\-/-/g' -e "s/\\\\(aq/'/g" -e 's/\\(dq/"/g' -e 's/\\e/\\/g' >"$TEST_DIR/$1.sh"
    [[ -s $TEST_DIR/$1.sh ]]
    # a backslash is left only to continue a line
    ! grep -n '\\.' "$TEST_DIR/$1.sh"
}

# run_recipe NAME: run it in $WORK, as a reader would paste it.
run_recipe() {
    recipe "$1"
    (cd "$WORK" && bash -e "$TEST_DIR/$1.sh") >"$TEST_DIR/$1.log" 2>&1 || {
        cat "$TEST_DIR/$1.sh" "$TEST_DIR/$1.log" >&2
        return 1
    }
}

@test "man page X.509 recipe: the certificates it makes serve nbdinfo, qemu-img and diskimg" {
    require_tool nbdinfo qemu-img
    run_recipe x509
    local f
    for f in server/ca-cert.pem server/server-cert.pem server/server-key.pem \
        client/ca-cert.pem client/client-cert.pem client/client-key.pem; do
        [[ -s $WORK/pki/$f ]]
    done
    # certtool made the keys private, as the man page says
    [[ $(stat -c %a "$WORK/pki/server/server-key.pem") == 600 ]]
    [[ $(stat -c %a "$WORK/pki/client/client-key.pem") == 600 ]]

    start_server -t -e 0 --tls-creds="$WORK/pki/server" "$WORK/disk.img"
    run nbdinfo --size "nbds+unix:///?socket=$SOCK&tls-certificates=$WORK/pki/client"
    assert_success
    assert_output 1048576
    run "$DISKIMG" info --tls-creds="$WORK/pki/client" "nbds+unix:///?socket=$SOCK"
    assert_success
    run qemu-img info \
        --object "tls-creds-x509,id=tls0,dir=$WORK/pki/client,endpoint=client" \
        --image-opts "driver=nbd,path=$SOCK,tls-creds=tls0,tls-hostname=localhost"
    assert_success
    # without the client certificate: refused, as the man page says
    mkdir "$TEST_DIR/anon"
    cp "$WORK/pki/client/ca-cert.pem" "$TEST_DIR/anon/"
    run "$DISKIMG" info --tls-creds="$TEST_DIR/anon" "nbds+unix:///?socket=$SOCK"
    assert_failure
    assert_output --partial "the NBD server requires a client certificate"
    stop_server
    grep -q "opened export '' over TLS as O=Example,CN=ci-runner" "$SERVER_LOG"

    # over TCP, the names the server certificate carries check out
    start_server_tcp 127.0.0.1 -t -e 0 --tls-creds="$WORK/pki/server" "$WORK/disk.img"
    run "$DISKIMG" info --tls-creds="$WORK/pki/client" "nbds://127.0.0.1:$PORT/"
    assert_success
    run "$DISKIMG" info --tls-creds="$WORK/pki/client" "nbds://localhost:$PORT/"
    assert_success
}

@test "man page CRL recipe: the client certificate it revokes is refused, saying so" {
    run_recipe x509
    run_recipe crl
    [[ -s $WORK/pki/server/ca-crl.pem ]]
    start_server -t -e 0 --tls-creds="$WORK/pki/server" "$WORK/disk.img"
    run --separate-stderr "$DISKIMG" info --tls-creds="$WORK/pki/client" \
        "nbds+unix:///?socket=$SOCK"
    assert_failure
    [[ $stderr == *"the NBD server says our certificate $WORK/pki/client/client-cert.pem is revoked" ]]
    stop_server
    grep -q "the client certificate 'O=Example,CN=ci-runner' is revoked (listed in $WORK/pki/server/ca-crl.pem)" \
        "$SERVER_LOG"
}

@test "man page PSK recipe: the keys it makes serve nbdinfo, qemu-img and diskimg" {
    require_tool nbdinfo qemu-img
    run_recipe psk
    [[ $(stat -c %a "$WORK/psk/keys.psk") == 600 ]]
    [[ $(grep -c '^alice:' "$WORK/psk/keys.psk") -eq 1 && $(grep -c '^bob:' "$WORK/psk/keys.psk") -eq 1 ]]
    start_server -t -e 0 --tls-psk="$WORK/psk/keys.psk" "$WORK/disk.img"
    run nbdinfo --size "nbds+unix://alice@/?socket=$SOCK&tls-psk-file=$WORK/psk/keys.psk"
    assert_success
    run "$DISKIMG" info --tls-psk="$WORK/psk/keys.psk" --tls-username=bob "nbds+unix:///?socket=$SOCK"
    assert_success
    run qemu-img info \
        --object "tls-creds-psk,id=tls0,dir=$WORK/psk,username=alice,endpoint=client" \
        --image-opts "driver=nbd,path=$SOCK,tls-creds=tls0"
    assert_success
    stop_server
    grep -q "over TLS as alice" "$SERVER_LOG"
    grep -q "over TLS as bob" "$SERVER_LOG"
}

@test "a key or PSK file open to others is refused; the chmod the message gives fixes it" {
    run_recipe x509
    run_recipe psk
    local key=$WORK/pki/server/server-key.pem psk=$WORK/psk/keys.psk mode fix
    for mode in 644 640 604 660; do
        chmod "$mode" "$key" "$psk"
        for opt in --tls-creds="$WORK/pki/server" --tls-psk="$psk"; do
            run --separate-stderr timeout 20 "$DISKIMG" serve -k "$SOCK" "$opt" "$WORK/disk.img"
            echo "$stderr" >&2
            [[ $status -eq 1 && $(printf '%s\n' "$stderr" | wc -l) -eq 1 ]]
            [[ $stderr == *"(mode $mode); make it private to its owner: chmod 600 '"* ]]
        done
    done
    # the suggested command, run as printed, makes them acceptable
    for opt in --tls-creds="$WORK/pki/server" --tls-psk="$psk"; do
        run --separate-stderr timeout 20 "$DISKIMG" serve -k "$SOCK" "$opt" "$WORK/disk.img"
        fix=${stderr##*make it private to its owner: }
        [[ $fix == "chmod 600 '"*"'" ]]
        (cd / && eval "$fix")
        start_server -t "$opt" "$WORK/disk.img"
        stop_server
        [[ $SERVER_STATUS -eq 0 ]]
    done
    [[ $(stat -c %a "$key") == 600 && $(stat -c %a "$psk") == 600 ]]
}

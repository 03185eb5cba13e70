#!/usr/bin/env bats
# Many `diskimg serve` in front of one Ceph cluster (ceph-lib.bash), as
# SCALE-OUT in diskimg-scaleout(7) describes it: each server its own
# images, several exports per server, a golden image read-only from
# several servers at once, one writer per image cluster-wide (RBD's
# exclusive lock: a second process is refused with exit 5), and a local
# qcow2 overlay whose backing file is rbd:, with the rules that keep an
# image from opening it.  Every server is its own process, as if on its
# own host.  Clients: nbdsh, nbdcopy, nbdinfo, qemu-img; cross-checks
# with Ceph's rbd export, rbd lock ls and rbd status.

load '../helpers'
load 'ceph-lib'
bats_require_minimum_version 1.5.0

setup_file() { ceph_start; }
teardown_file() { ceph_stop; }

setup() {
    setup_test
    PIDS=()
    T=t$BATS_TEST_NUMBER
}

teardown() {
    local p
    for p in "${PIDS[@]}"; do
        kill -KILL "$p" 2>/dev/null || true
        wait "$p" 2>/dev/null || true
    done
    cleanup_test
}

MiB=$((1024 * 1024))

# nbdsh_at URI SCRIPT: nbdsh (python3 -m nbd, what /usr/bin/nbdsh runs)
# with the system python, which has the nbd module.
nbdsh_at() { "$PYTHON3" -m nbd -u "$1" -c "$2"; }

sock_uri() { echo "nbd+unix:///${2:-}?socket=$TEST_DIR/$1.sock"; }

# serve NAME [serve options...]: a persistent server on $TEST_DIR/NAME.sock
# (or TCP with -b/-p), its PID kept for teardown; waits until it listens.
serve() {
    local name=$1 listen=(-k "$TEST_DIR/$1.sock") port='' i
    shift
    local args=("$@")
    for ((i = 0; i < ${#args[@]}; i++)); do
        if [[ ${args[i]} == -p ]]; then
            port=${args[i + 1]}
            listen=()
        fi
    done
    "$DISKIMG" serve -t "${listen[@]}" "$@" 2>>"$TEST_DIR/$name.log" &
    PIDS+=($!)
    local pid=$!
    if [[ ${#listen[@]} -gt 0 ]]; then
        wait_until 10 unix_listening "$TEST_DIR/$name.sock" || {
            cat "$TEST_DIR/$name.log" >&2
            return 1
        }
    else
        wait_until 10 bash -c "exec 3<>/dev/tcp/127.0.0.1/$port" 2>/dev/null || {
            cat "$TEST_DIR/$name.log" >&2
            return 1
        }
    fi
    kill -0 "$pid"
}

# stop PID: TERM one server of ours and wait for it.
stop() {
    kill "$1"
    wait "$1" || true
}

free_port() {
    "$PYTHON3" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# write_at URI OFFSET BYTE LEN: LEN bytes of BYTE (hex) at OFFSET, with FUA.
write_at() {
    nbdsh_at "$1" "h.pwrite(bytes([0x$3]) * $4, $2, nbd.CMD_FLAG_FUA)"
}

# patch FILE OFFSET BYTE LEN: the same write into a local file.
patch() {
    "$PYTHON3" -c 'import sys
f = open(sys.argv[1], "r+b")
f.seek(int(sys.argv[2]))
f.write(bytes([int(sys.argv[3], 16)]) * int(sys.argv[4]))' "$@"
}

@test "overlay on an rbd base: created by diskimg and qemu-img, served, converted" {
    head -c $((4 * MiB)) /dev/urandom >"$TEST_DIR/base.raw"
    rbd import --no-progress "$TEST_DIR/base.raw" "rbd/${T}base"
    cd "$TEST_DIR"

    run "$DISKIMG" create -f qcow2 -b "rbd:rbd/${T}base" -F raw ov.qcow2
    assert_success
    assert_output --partial "backing_file=rbd:rbd/${T}base backing_fmt=raw"
    qemu-img create -q -f qcow2 -b "rbd:rbd/${T}base" -F raw qov.qcow2
    run "$DISKIMG" info --output=json ov.qcow2
    assert_output --partial "\"backing-filename\": \"rbd:rbd/${T}base\""
    assert_output --partial '"virtual-size": 4194304'

    # Read-write overlay, read-only base: the base takes no lock and
    # keeps its bytes; the writes land in the overlay.
    serve ov -f qcow2 ov.qcow2
    serve qov -f qcow2 qov.qcow2
    run rbd lock ls "rbd/${T}base"
    assert_output ""
    write_at "$(sock_uri ov)" $MiB ab 65536
    write_at "$(sock_uri qov)" $((3 * MiB + 512)) cd 4096
    nbdcopy "$(sock_uri ov)" ov-served.raw
    stop "${PIDS[0]}"
    stop "${PIDS[1]}"
    rbd export --no-progress "rbd/${T}base" - | cmp - base.raw

    cp base.raw want.raw
    patch want.raw $MiB ab 65536
    cmp ov-served.raw want.raw
    qemu-img compare -f qcow2 -F raw ov.qcow2 want.raw
    run "$DISKIMG" convert -f qcow2 -O raw ov.qcow2 out.raw
    assert_success
    cmp out.raw want.raw
    cp base.raw qwant.raw
    patch qwant.raw $((3 * MiB + 512)) cd 4096
    "$DISKIMG" convert -f qcow2 -O raw qov.qcow2 qout.raw
    cmp qout.raw qwant.raw
    qemu-img compare -f qcow2 -F raw qov.qcow2 qout.raw
    # and back: a qcow2 overlay converted into a new rbd image
    "$DISKIMG" convert -f qcow2 -O raw ov.qcow2 "rbd:rbd/${T}flat"
    rbd export --no-progress "rbd/${T}flat" - | cmp - want.raw
    # commit writes the changes into the base, under its exclusive lock
    run "$DISKIMG" commit -f qcow2 ov.qcow2
    assert_success
    rbd export --no-progress "rbd/${T}base" - | cmp - want.raw
    run rbd lock ls "rbd/${T}base"
    assert_output ""
}

@test "an rbd backing file opens only by the rules; --untrusted refuses it" {
    rbd create --size 1M "rbd/${T}b"
    cd "$TEST_DIR"
    qemu-img create -q -f qcow2 -b "rbd:rbd/${T}b" -F raw ok.qcow2
    # probed overlay: a forged header in a guest's raw disk looks the same
    run "$DISKIMG" convert -O raw ok.qcow2 x.raw
    assert_failure 1
    assert_output "diskimg: ok.qcow2: qcow2: backing file 'rbd:rbd/${T}b' is opened only when the image's format is named (-f qcow2), not probed"
    run "$DISKIMG" serve --untrusted -f qcow2 -k u.sock ok.qcow2
    assert_failure
    assert_output --partial "refusing to open backing file 'rbd:rbd/${T}b' (--untrusted"
    [[ ! -e x.raw ]]

    # options in the name: where and as whom to connect, which files to read
    qemu-img create -q -f qcow2 -u -b "rbd:rbd/${T}b:mon_host=192.0.2.1" -F raw mon.qcow2 1M
    run "$DISKIMG" info --backing-chain mon.qcow2
    assert_failure 1
    assert_output --partial "is not a plain rbd:POOL/IMAGE[@SNAP] name"
    run "$DISKIMG" create -f qcow2 -b "rbd:rbd/${T}b:conf=$CEPH_CONF" -F raw c.qcow2
    assert_failure 1
    assert_output --partial "is not a plain rbd:POOL/IMAGE[@SNAP] name"
    [[ ! -e c.qcow2 ]]
    # rebase records what create would, and nothing else
    qemu-img create -q -f qcow2 rb.qcow2 1M
    run "$DISKIMG" rebase -u -f qcow2 -b "rbd:rbd/${T}b:keyring=/etc/passwd" -F raw rb.qcow2
    assert_failure 1
    assert_output --partial "is not a plain rbd:POOL/IMAGE[@SNAP] name"
    run qemu-img info rb.qcow2
    refute_output --partial "backing file"
    "$DISKIMG" rebase -f qcow2 -b "rbd:rbd/${T}b" -F raw rb.qcow2
    run qemu-img info rb.qcow2
    assert_line "backing file: rbd:rbd/${T}b"

    # no recorded backing format: the cluster's bytes would be probed
    # (the backing format extension renamed to an unknown one)
    cp ok.qcow2 nofmt.qcow2
    "$PYTHON3" - nofmt.qcow2 <<'EOF'
import sys
d = bytearray(open(sys.argv[1], 'rb').read())
i = d.index(bytes.fromhex('e2792aca'))
d[i:i + 4] = bytes.fromhex('0badf00d')
open(sys.argv[1], 'wb').write(d)
EOF
    run "$DISKIMG" convert -f qcow2 -O raw nofmt.qcow2 x.raw
    assert_failure 1
    assert_output --partial "is opened only with its format recorded"

    # other protocols stay refused, rbd or not
    qemu-img create -q -f qcow2 -u -b "nbd+unix:///?socket=/x" -F raw nbd.qcow2 1M
    run "$DISKIMG" convert -f qcow2 -O raw nbd.qcow2 x.raw
    assert_failure 1
    assert_output --partial "names a protocol"
    [[ ! -e x.raw ]]
    # Ceph's own search ends with ./ceph.conf, which may come with an image
    if [[ ! -e /etc/ceph/ceph.conf && ! -e ${HOME:-/nonexistent}/.ceph/ceph.conf ]]; then
        mkdir cwd
        cp "$CEPH_CONF" cwd/ceph.conf
        cp ok.qcow2 cwd/
        run bash -c 'cd cwd && unset CEPH_CONF && timeout 20 rbd ls'
        assert_line "${T}b"
        run bash -c 'cd cwd && unset CEPH_CONF && exec "$0" convert -f qcow2 -O raw ok.qcow2 x.raw' \
            "$DISKIMG"
        assert_failure 1
        assert_output --partial "never reads ./ceph.conf"
        [[ ! -e cwd/x.raw ]]
    fi
    # the rules met: it opens, and info follows the chain into the cluster
    run "$DISKIMG" compare -f qcow2 -F raw ok.qcow2 "rbd:rbd/${T}b"
    assert_success
    run "$DISKIMG" info --backing-chain -f qcow2 ok.qcow2
    assert_success
    assert_line "image: rbd:rbd/${T}b"
    assert_line "file format: raw"
    run "$DISKIMG" info --backing-chain ok.qcow2
    assert_failure 1
    assert_output --partial "is opened only when the image's format is named (-f qcow2)"
}

@test "several servers, one cluster: each its own images, several exports in one" {
    local port i
    port=$(free_port)
    for i in a b c; do
        rbd create --size 2M "rbd/${T}$i"
    done
    serve one --export="name=a,file=rbd:rbd/${T}a,format=raw" \
        --export="name=b,file=rbd:rbd/${T}b,format=raw"
    serve two -f raw -b 127.0.0.1 -p "$port" "rbd:rbd/${T}c"

    run nbdinfo --list "$(sock_uri one)"
    assert_output --partial "export=\"a\""
    assert_output --partial "export=\"b\""
    write_at "$(sock_uri one a)" 0 a1 $MiB
    write_at "$(sock_uri one b)" $MiB b2 $MiB
    write_at "nbd://127.0.0.1:$port" 4096 c3 8192
    [[ $(nbdinfo --size "nbd://127.0.0.1:$port") -eq $((2 * MiB)) ]]
    # every image holds its own writes, as the cluster has them
    truncate -s 2M "$TEST_DIR/a.raw" "$TEST_DIR/b.raw" "$TEST_DIR/c.raw"
    patch "$TEST_DIR/a.raw" 0 a1 $MiB
    patch "$TEST_DIR/b.raw" $MiB b2 $MiB
    patch "$TEST_DIR/c.raw" 4096 c3 8192
    for i in a b c; do
        rbd export --no-progress "rbd/${T}$i" - | cmp - "$TEST_DIR/$i.raw"
    done
    # each writer holds its image's exclusive lock, visible to the cluster
    for i in a b c; do
        run rbd lock ls "rbd/${T}$i"
        assert_output --partial "1 exclusive lock"
    done
    qemu-img compare -f raw -F raw "nbd://127.0.0.1:$port" "$TEST_DIR/c.raw"
    # two writable exports of one image in one server: two writers too
    rbd create --size 1M "rbd/${T}d"
    run "$DISKIMG" serve -k "$TEST_DIR/dd.sock" --export="name=x,file=rbd:rbd/${T}d,format=raw" \
        --export="name=y,file=rbd:rbd/${T}d,format=raw"
    assert_failure 5
    assert_output --partial "rbd:rbd/${T}d: in use"
    run rbd lock ls "rbd/${T}d"
    assert_output ""
}

@test "a golden image read-only from several servers; one writer cluster-wide (exit 5)" {
    local port w uri_w
    port=$(free_port)
    head -c $((3 * MiB)) /dev/urandom >"$TEST_DIR/gold.raw"
    rbd import --no-progress "$TEST_DIR/gold.raw" "rbd/${T}gold"
    rbd snap create --no-progress "rbd/${T}gold@v1"

    # three read-only servers of the snapshot and one of the head
    serve r1 -r -f raw "rbd:rbd/${T}gold@v1"
    serve r2 -r -f raw -b 127.0.0.1 -p "$port" "rbd:rbd/${T}gold@v1"
    serve r3 -r -f raw "rbd:rbd/${T}gold@v1"
    serve head -r -f raw "rbd:rbd/${T}gold"
    # readers hold no lock: a writer comes in
    run rbd lock ls "rbd/${T}gold"
    assert_output ""
    serve w -f raw "rbd:rbd/${T}gold"
    w=${PIDS[-1]}
    run rbd lock ls "rbd/${T}gold"
    assert_output --partial "1 exclusive lock"

    # a second writer, another process as if on another host: refused
    run "$DISKIMG" serve -f raw -k "$TEST_DIR/w2.sock" "rbd:rbd/${T}gold"
    assert_failure 5
    assert_output --regexp "^diskimg: rbd:rbd/${T}gold: in use: another client holds its exclusive lock .*a second writer is refused$"
    run "$DISKIMG" resize "rbd:rbd/${T}gold" 4M
    assert_failure 5
    # and librbd's other writers get EROFS from the cluster
    run rbd bench --io-type write --io-size 4K --io-total 4K "rbd/${T}gold"
    assert_failure
    assert_output --partial "Read-only file system"

    uri_w=$(sock_uri w)
    write_at "$uri_w" 0 5a 65536
    cp "$TEST_DIR/gold.raw" "$TEST_DIR/new.raw"
    patch "$TEST_DIR/new.raw" 0 5a 65536
    # the snapshot's readers all read the golden bytes, the head's reader
    # the writer's acknowledged write at once, as the cluster has it
    nbdcopy "$(sock_uri r1)" - | cmp - "$TEST_DIR/gold.raw"
    nbdcopy "nbd://127.0.0.1:$port" - | cmp - "$TEST_DIR/gold.raw"
    nbdcopy "$(sock_uri r3)" - | cmp - "$TEST_DIR/gold.raw"
    nbdcopy "$(sock_uri head)" - | cmp - "$TEST_DIR/new.raw"
    rbd export --no-progress "rbd/${T}gold" - | cmp - "$TEST_DIR/new.raw"
    write_at "$uri_w" $((2 * MiB)) 6b 4096
    patch "$TEST_DIR/new.raw" $((2 * MiB)) 6b 4096
    nbdcopy "$(sock_uri head)" - | cmp - "$TEST_DIR/new.raw"
    # a snapshot is never written, whoever asks
    run "$DISKIMG" serve -f raw -k "$TEST_DIR/ws.sock" "rbd:rbd/${T}gold@v1"
    assert_failure 1
    assert_output --partial "an RBD snapshot is read-only"

    # the writer gone, the lock is released and the next writer comes in
    stop "$w"
    run rbd lock ls "rbd/${T}gold"
    assert_output ""
    serve w3 -f raw "rbd:rbd/${T}gold"
    run rbd lock ls "rbd/${T}gold"
    assert_output --partial "1 exclusive lock"
}

#!/usr/bin/env bats
# The rbd: protocol driver against a real Ceph cluster (ceph-lib.bash):
# create, info, map, resize, convert both ways, compare, bench and serve,
# snapshots read-only, the exclusive lock of writers, errors.  What
# diskimg wrote is checked with Ceph's own tools (rbd export, rbd diff,
# rbd info) and with qemu-img's rbd driver.

load '../helpers'
load 'ceph-lib'
bats_require_minimum_version 1.5.0

setup_file() { ceph_start; }
teardown_file() { ceph_stop; }

setup() {
    setup_test
    # Each test its own images: pool "rbd", names from the test number.
    P=rbd:rbd/t$BATS_TEST_NUMBER
}
teardown() { cleanup_test; }

MiB=$((1024 * 1024))

# rbd_size IMAGE: the size rbd info reports, in bytes.
rbd_size() {
    rbd info --format json "rbd/$1" | sed -n 's/.*"size":\([0-9]*\).*/\1/p'
}

# sparse FILE: 16 MiB, random data in 4-5 MiB and 9 MiB + 4 KiB, holes
# elsewhere.
sparse() {
    truncate -s 16M "$1"
    head -c $MiB /dev/urandom | dd of="$1" bs=1M seek=4 conv=notrunc status=none
    head -c 4096 /dev/urandom | dd of="$1" bs=4k seek=2305 conv=notrunc status=none
}

@test "create raw and qcow2, info, resize: as rbd and qemu-img see them" {
    run "$DISKIMG" create -f raw "${P}a" 5M
    assert_success
    assert_output "Formatting '${P}a', fmt=raw size=5242880"
    [[ $(rbd_size "t${BATS_TEST_NUMBER}a") -eq $((5 * MiB)) ]]
    run "$DISKIMG" info "${P}a"
    assert_success
    assert_line "virtual size: 5 MiB (5242880 bytes)"
    # An image that exists is not overwritten, as qemu-img refuses too.
    run "$DISKIMG" create -f raw "${P}a" 1M
    assert_failure 1
    assert_output --partial "exists already"
    [[ $(rbd_size "t${BATS_TEST_NUMBER}a") -eq $((5 * MiB)) ]]

    run "$DISKIMG" resize "${P}a" 12M
    assert_success
    [[ $(rbd_size "t${BATS_TEST_NUMBER}a") -eq $((12 * MiB)) ]]
    run "$DISKIMG" resize --shrink "${P}a" 3M
    assert_success
    [[ $(rbd_size "t${BATS_TEST_NUMBER}a") -eq $((3 * MiB)) ]]

    # In a RADOS namespace, as qemu spells it (POOL/NAMESPACE/IMAGE).
    rbd namespace create "rbd/ns$BATS_TEST_NUMBER"
    run "$DISKIMG" create -f raw "rbd:rbd/ns$BATS_TEST_NUMBER/img" 2M
    assert_success
    run qemu-img info "rbd:rbd/ns$BATS_TEST_NUMBER/img"
    assert_line "virtual size: 2 MiB (2097152 bytes)"
    run "$DISKIMG" info rbd:rbd/nons/img
    assert_failure 1
    assert_output "diskimg: rbd:rbd/nons/img: namespace 'nons' does not exist"

    # qcow2 inside an rbd image: the image grows as qemu's does.
    run "$DISKIMG" create -f qcow2 "${P}q" 1G
    assert_success
    run qemu-img check "${P}q"
    assert_success
    run qemu-img info "${P}q"
    assert_line "virtual size: 1 GiB (1073741824 bytes)"
    run "$DISKIMG" resize "${P}q" 2G
    assert_success
    run qemu-img info "${P}q"
    assert_line "virtual size: 2 GiB (2147483648 bytes)"
}

@test "convert to and from rbd: bytes by rbd export, holes by rbd diff" {
    sparse "$TEST_DIR/src.raw"
    qemu-img convert -O qcow2 "$TEST_DIR/src.raw" "$TEST_DIR/src.qcow2"
    run "$DISKIMG" convert -m 4 -W -O raw "$TEST_DIR/src.qcow2" "${P}r"
    assert_success
    rbd export "rbd/t${BATS_TEST_NUMBER}r" "$TEST_DIR/exported" >/dev/null 2>&1
    cmp "$TEST_DIR/src.raw" "$TEST_DIR/exported"
    # Holes were not written: only the objects with data exist.
    run rbd diff --format json "rbd/t${BATS_TEST_NUMBER}r"
    assert_success
    [[ $output != *'"offset":0,'* && $output == *'"offset":4194304'* ]]
    [[ $output == *'"offset":8388608'* && $output != *'"offset":12582912'* ]]

    # rbd to local files and to a qcow2 inside rbd.
    run "$DISKIMG" convert -O qcow2 "${P}r" "$TEST_DIR/back.qcow2"
    assert_success
    run qemu-img compare "$TEST_DIR/src.raw" "$TEST_DIR/back.qcow2"
    assert_success
    run "$DISKIMG" convert -O qcow2 "${P}r" "${P}q"
    assert_success
    run qemu-img compare -f raw -F qcow2 "$TEST_DIR/src.raw" "${P}q"
    assert_success
    # The rbd image ends inside the qcow2's last cluster (its tail was
    # never written): served, the whole cluster reads, zeroes past the end.
    start_server -r "${P}q"
    run qemu-img compare -f raw "$URI" "$TEST_DIR/src.raw"
    assert_success
    stop_server
    run "$DISKIMG" compare "${P}q" "$TEST_DIR/src.raw"
    assert_success
    # compare finds a changed byte in rbd.
    printf x | dd of="$TEST_DIR/src.raw" bs=1 seek=$((4 * MiB + 7)) conv=notrunc status=none
    run "$DISKIMG" compare "${P}r" "$TEST_DIR/src.raw"
    assert_failure 1
    assert_output --partial "4194311"
    # A convert or dd that fails after creating its target leaves no
    # image behind: a source whose compressed clusters are broken.
    yes "hello world" | head -c 4M >"$TEST_DIR/comp.raw"
    qemu-img convert -c -O qcow2 "$TEST_DIR/comp.raw" "$TEST_DIR/bad.qcow2"
    head -c 40000 /dev/zero | tr '\0' '\377' | dd of="$TEST_DIR/bad.qcow2" conv=notrunc \
        bs=1 seek=$(($(stat -c %s "$TEST_DIR/bad.qcow2") - 40000)) status=none
    run "$DISKIMG" convert -O raw "$TEST_DIR/bad.qcow2" "${P}gone"
    assert_failure 1
    assert_output --partial "does not decompress"
    run "$DISKIMG" dd -O raw if="$TEST_DIR/bad.qcow2" of="${P}gone" bs=1M
    assert_failure 1
    assert_output --partial "does not decompress"
    run rbd info "rbd/t${BATS_TEST_NUMBER}gone"
    assert_failure
}

@test "map and --image-opts agree with qemu-img; bench writes" {
    head -c $((8 * MiB)) /dev/urandom >"$TEST_DIR/d"
    truncate -s 24M "$TEST_DIR/d"
    rbd import "$TEST_DIR/d" "rbd/t$BATS_TEST_NUMBER" >/dev/null 2>&1
    run qemu-img map --output=json "$P"
    assert_success
    want=$output
    run "$DISKIMG" map --output=json "$P"
    assert_success
    assert_output "$want"
    [[ $output == *'"length": 8388608, "depth": 0, "present": true, "zero": false, "data": true'* ]]
    run "$DISKIMG" info --image-opts "driver=raw,file.driver=rbd,file.pool=rbd,file.image=t$BATS_TEST_NUMBER"
    assert_success
    assert_line "virtual size: 24 MiB (25165824 bytes)"
    # info of the protocol itself as the image: qemu-img's output but the name
    local opts="driver=rbd,pool=rbd,image=t$BATS_TEST_NUMBER"
    diff <(qemu-img info --output=json --image-opts "$opts" | grep -v '"filename"') \
        <("$DISKIMG" info --output=json --image-opts "$opts" | grep -v '"filename"')
    diff <(qemu-img info --image-opts "$opts" | grep -v '^image:') \
        <("$DISKIMG" info --image-opts "$opts" | grep -v '^image:')
    run "$DISKIMG" bench -w -c 64 -s 64k -f raw "$P"
    assert_success
    run "$DISKIMG" compare "$P" "$TEST_DIR/d"
    assert_failure 1 # bench wrote its pattern over the data
}

@test "snapshots are read-only; the exclusive lock keeps a second writer out" {
    sparse "$TEST_DIR/src.raw"
    rbd import "$TEST_DIR/src.raw" "rbd/t$BATS_TEST_NUMBER" >/dev/null 2>&1
    rbd snap create "rbd/t$BATS_TEST_NUMBER@s1" >/dev/null 2>&1
    run "$DISKIMG" convert -n -O raw "$TEST_DIR/src.raw" "$P@s1"
    assert_failure 1
    assert_output --partial "snapshot is read-only"
    run "$DISKIMG" compare "$P@s1" "$TEST_DIR/src.raw"
    assert_success
    # info lists the RBD snapshots and the object size as qemu-img does;
    # only the image's name differs (qemu spells it as json:{...}).
    diff <(qemu-img info --output=json "$P" | grep -v '"filename"') \
        <("$DISKIMG" info --output=json "$P" | grep -v '"filename"')
    run "$DISKIMG" info "$P"
    assert_line "cluster_size: 4194304"
    assert_line --regexp "^s1 +s1 +16 MiB "

    # A writer holds the lock: another writer exits 5 naming the image,
    # readers still read, and once the writer is gone writing works.
    start_server -f raw "$P"
    run "$DISKIMG" convert -n -O raw "$TEST_DIR/src.raw" "$P"
    assert_failure 5
    assert_output --partial "rbd:rbd/t$BATS_TEST_NUMBER: in use: another client holds its exclusive lock"
    run qemu-img compare "$TEST_DIR/src.raw" "$URI"
    assert_success
    run "$DISKIMG" info "$P"
    assert_success
    stop_server
    run "$DISKIMG" convert -n -O raw "$TEST_DIR/src.raw" "$P"
    assert_success

    # The snapshot subcommand makes, rolls back to and removes RBD
    # snapshots, as qemu-img snapshot does.
    run "$DISKIMG" snapshot -c s2 "$P"
    assert_success
    run rbd snap ls "rbd/t$BATS_TEST_NUMBER"
    assert_output --partial " s2 "
    qemu-io -f raw -c "write -P 0x44 0 1M" "$P" >/dev/null
    run "$DISKIMG" snapshot -a s2 "$P"
    assert_success
    rbd export "rbd/t$BATS_TEST_NUMBER" "$TEST_DIR/rolled" >/dev/null 2>&1
    cmp "$TEST_DIR/src.raw" "$TEST_DIR/rolled"
    run "$DISKIMG" snapshot -d s2 "$P"
    assert_success
    run rbd snap ls "rbd/t$BATS_TEST_NUMBER"
    refute_output --partial " s2 "
}

@test "serve: several rbd exports, read-write and read-only; FUA by the cache" {
    sparse "$TEST_DIR/src.raw"
    rbd create --size 16M "rbd/t${BATS_TEST_NUMBER}a"
    rbd import "$TEST_DIR/src.raw" "rbd/t${BATS_TEST_NUMBER}b" >/dev/null 2>&1
    rbd snap create "rbd/t${BATS_TEST_NUMBER}b@s" >/dev/null 2>&1
    # a: librbd's cache off, so FUA is native; b: the default cache.
    start_server -t --export=name=a,file="${P}a:rbd_cache=false",format=raw \
        --export=name=b,file="${P}b",format=raw \
        --export=name=s,file="${P}b@s",format=raw,read-only=on \
        --export=name=h,file="${P}b",format=raw,read-only=on
    # h reads b without its lock: its block status (first a hole at 0)
    # must catch up with b's writes.
    run nbdinfo --map "nbd+unix:///h?socket=$SOCK"
    assert_line --regexp "^ +0 +4194304 +3 +hole,zero"
    run qemu-io -f raw -c "write -P 0x61 -f 0 1M" -c "write -P 0x62 3M 64k" -c flush \
        "nbd+unix:///a?socket=$SOCK"
    assert_success
    run qemu-io -f raw -c "write -P 0x63 -f 0 64k" -c "discard 4M 1M" \
        "nbd+unix:///b?socket=$SOCK"
    assert_success
    run qemu-img compare -f raw "nbd+unix:///s?socket=$SOCK" "$TEST_DIR/src.raw"
    assert_success
    h_has_data() { nbdinfo --map "nbd+unix:///h?socket=$SOCK" | grep -Eq '^ +0 +[0-9]+ +0 +data'; }
    wait_until 3 h_has_data
    run qemu-io -f raw -c "write 0 4k" "nbd+unix:///s?socket=$SOCK"
    assert_failure
    stop_server
    [[ $SERVER_STATUS -eq 0 ]]
    grep -Eq "export 'a' .*: FUA requests [0-9]+, native [1-9][0-9]*, emulated 0;" "$SERVER_LOG"
    grep -Eq "export 'b' .*: FUA requests [0-9]+, native 0, emulated [1-9][0-9]*;" "$SERVER_LOG"
    rbd export "rbd/t${BATS_TEST_NUMBER}a" "$TEST_DIR/a" >/dev/null 2>&1
    run qemu-io -f raw -r -c "read -P 0x61 0 1M" -c "read -P 0 1M 2M" -c "read -P 0x62 3M 64k" \
        "$TEST_DIR/a"
    assert_success
    refute_output --partial "fail"
    rbd export "rbd/t${BATS_TEST_NUMBER}b" "$TEST_DIR/b" >/dev/null 2>&1
    run qemu-io -f raw -r -c "read -P 0x63 0 64k" -c "read -P 0 4M 1M" "$TEST_DIR/b"
    assert_success
    refute_output --partial "fail"
}

@test "errors name the image and the reason" {
    run "$DISKIMG" info rbd:nopool/x
    assert_failure 1
    assert_output "diskimg: rbd:nopool/x: pool 'nopool' does not exist"
    run "$DISKIMG" info rbd:rbd/nope
    assert_failure 1
    assert_output "diskimg: rbd:rbd/nope: image 'nope' does not exist"
    run "$DISKIMG" info rbd:rbd/nope@s
    assert_failure 1
    assert_output --partial "does not exist"
    run "$DISKIMG" info "rbd:rbd/x:id=nobody"
    assert_failure 1
    assert_output --partial "permission denied"
    run "$DISKIMG" info "rbd:rbd/x:key=AQBad0BfAAAAABAAbadbadbadbadbadbadbadbadbad=="
    assert_failure 1
    assert_output --partial "permission denied"
    refute_output --partial "AQBad"
    run "$DISKIMG" info "rbd:rbd/x:no_such_option=1"
    assert_failure 1
    assert_output --partial "invalid Ceph option 'no_such_option'"
    run "$DISKIMG" info "rbd:rbd/x:conf=$TEST_DIR/none.conf"
    assert_failure 1
    assert_output --partial "cannot read Ceph configuration file"
    run "$DISKIMG" info "rbd:rbd"
    assert_failure 1
    assert_output --partial "no pool name"
    # A dead cluster is an error within the timeout, not a hang.
    run timeout 20 "$DISKIMG" info "rbd:rbd/x:mon_host=127.0.0.1\:1:client_mount_timeout=1"
    assert_failure 1
    assert_output --partial "timed out"
}

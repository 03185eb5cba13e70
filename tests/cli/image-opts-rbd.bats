#!/usr/bin/env bats
# --image-opts with the rbd protocol driver against a real Ceph cluster
# (ceph-lib.bash): driver=rbd,pool=,image= (the protocol node is the
# image, raw), formats over file.driver=rbd with file.KEY, written and
# read through every kind of subcommand.  Ceph's own rbd command checks
# what was written (rbd export, rbd info); qemu-img's rbd driver judges
# map.

load '../helpers'
load 'ceph-lib'
bats_require_minimum_version 1.5.0

setup_file() {
    ceph_start
    local raw=$BATS_FILE_TMPDIR/d.raw
    qemu-img create -q -f raw "$raw" 1M
    printf 'hello' | dd of="$raw" bs=1 seek=65536 conv=notrunc status=none
    qemu-img convert -f raw -O qcow2 "$raw" "$BATS_FILE_TMPDIR/d.qcow2"
    rbd import --no-progress "$raw" rbd/base
    rbd import --no-progress "$BATS_FILE_TMPDIR/d.qcow2" rbd/q
}
teardown_file() { ceph_stop; }

setup() {
    setup_test
    RAW=$BATS_FILE_TMPDIR/d.raw
}
teardown() { cleanup_test; }

@test "rbd: driver=rbd, raw and qcow2 over file.driver=rbd read as qemu-img and rbd see them" {
    local spec
    for spec in "driver=rbd,pool=rbd,image=base" \
        "driver=rbd,pool=rbd,image=base,conf=$CEPH_CONF" \
        "driver=raw,file.driver=rbd,file.pool=rbd,file.image=base" \
        "driver=qcow2,file.driver=rbd,file.pool=rbd,file.image=q"; do
        diff <(timeout 30 qemu-img map --output=json --image-opts "$spec") \
            <("$DISKIMG" map --output=json --image-opts "$spec")
        run -0 "$DISKIMG" compare --image-opts "$spec" "driver=file,filename=$RAW"
    done
    run -0 "$DISKIMG" info --image-opts "driver=rbd,pool=rbd,image=base"
    assert_line "image: rbd:rbd/base"
    assert_line "file format: rbd"
    run -0 "$DISKIMG" check --image-opts "driver=qcow2,file.driver=rbd,file.pool=rbd,file.image=q"
    run -0 "$DISKIMG" dd --image-opts bs=64k count=2 "if=driver=rbd,pool=rbd,image=base" \
        "of=$TEST_DIR/dd.raw"
    cmp "$TEST_DIR/dd.raw" <(head -c 131072 "$RAW")
}

@test "rbd: convert -n, resize, bench -w and serve write through the keys" {
    rbd create --size 1M rbd/w
    "$DISKIMG" convert -n --target-image-opts "$BATS_FILE_TMPDIR/d.qcow2" \
        "driver=rbd,pool=rbd,image=w"
    rbd export --no-progress rbd/w "$TEST_DIR/w.raw"
    cmp "$TEST_DIR/w.raw" "$RAW"
    "$DISKIMG" resize -q --image-opts "driver=rbd,pool=rbd,image=w" 2M
    [[ $(rbd info --format json rbd/w) == *'"size":2097152,'* ]]
    "$DISKIMG" bench -w -c 64 -s 4k -o 1M --image-opts "driver=rbd,pool=rbd,image=w" >/dev/null
    # served read-only from the keys, read back over NBD
    start_server -r -t --image-opts "driver=rbd,pool=rbd,image=base"
    qemu-img compare -f raw "$URI" "$RAW"
    stop_server
    # a snapshot by its key is read-only
    rbd snap create --no-progress rbd/w@s1
    run -0 "$DISKIMG" info --image-opts "driver=rbd,pool=rbd,image=w,snapshot=s1"
    assert_line "image: rbd:rbd/w@s1"
    run -1 "$DISKIMG" bench -w -c 1 --image-opts "driver=rbd,pool=rbd,image=w,snapshot=s1"
    assert_output --partial "an RBD snapshot is read-only"
}

@test "rbd errors: a missing key or pool fails at open, an unknown key is bad usage" {
    run -1 "$DISKIMG" info --image-opts "driver=rbd,pool=rbd"
    assert_output --partial "option 'image' is required"
    run -1 "$DISKIMG" info --image-opts "driver=rbd,pool=nope,image=x"
    assert_output "diskimg: rbd:nope/x: pool 'nope' does not exist"
    run -2 "$DISKIMG" map --image-opts "driver=raw,file.driver=rbd,file.pool=rbd,file.image=base,file.bogus=1"
    assert_line --index 0 "diskimg map: --image-opts: option 'bogus': no driver takes it"
}

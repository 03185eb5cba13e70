#!/usr/bin/env bats
# diskimg compare, beyond tests/cli/compare.bats: 20 GiB sparse images
# (raw, qcow2, compressed qcow2, behind an NBD URI) compare without
# reading their holes and find a one-byte difference at its exact offset;
# a small image against a huge one with a zero tail; -s like qemu-img
# compare -s; agreement with qemu-img compare's exit status.

load '../helpers'
load '../interop/lib'

setup() { setup_test; }
teardown() {
    kill_extra_servers
    cleanup_test
}

MiB=1048576
GiB=$((1024 * MiB))

# big IMAGE: a 20 GiB sparse raw file with 1 MiB at 0 and 3 MiB at 15000 MiB.
big() {
    truncate -s 20G "$1"
    make_pattern "$TEST_DIR/pat" $((3 * MiB))
    dd if="$TEST_DIR/pat" of="$1" bs=1M count=1 conv=notrunc status=none
    dd if="$TEST_DIR/pat" of="$1" bs=1M seek=15000 count=3 conv=notrunc status=none
}

poke() {
    printf '\xee' | dd of="$1" bs=1 seek="$2" conv=notrunc status=none
}

# same_verdict A B [options]: diskimg compare and qemu-img compare exit alike.
same_verdict() {
    local ours=0 theirs=0
    "$DISKIMG" compare -q "$@" || ours=$?
    qemu-img compare -q "$@" || theirs=$?
    [[ $ours -eq $theirs ]] || { echo "compare $*: diskimg $ours, qemu-img $theirs" >&2; return 1; }
}

@test "compare 20 GiB sparse images: raw, qcow2, compressed qcow2, NBD URI" {
    require_tool qemu-img
    big "$TEST_DIR/a.raw"
    qemu-img convert -O qcow2 "$TEST_DIR/a.raw" "$TEST_DIR/a.qcow2"
    qemu-img convert -c -O qcow2 "$TEST_DIR/a.raw" "$TEST_DIR/c.qcow2"
    run "$DISKIMG" compare "$TEST_DIR/a.raw" "$TEST_DIR/a.qcow2"
    assert_success
    assert_output "Images are identical."
    run "$DISKIMG" compare "$TEST_DIR/c.qcow2" "$TEST_DIR/a.qcow2"
    assert_success
    # -e 0: compare -s URI URI holds two connections at once
    start_server -t -e 0 -r "$TEST_DIR/a.qcow2"
    run "$DISKIMG" compare "$TEST_DIR/a.raw" "$URI"
    assert_success
    run "$DISKIMG" compare -s "$URI" "$URI"
    assert_success

    # one byte deep in a hole, one in the far data
    local off=$((12 * GiB + 12345))
    cp --sparse=always "$TEST_DIR/a.raw" "$TEST_DIR/b.raw"
    poke "$TEST_DIR/b.raw" $off
    run "$DISKIMG" compare "$TEST_DIR/a.qcow2" "$TEST_DIR/b.raw"
    assert_failure 1
    assert_output "Content mismatch at offset $off!"
    run "$DISKIMG" compare "$URI" "$TEST_DIR/b.raw"
    assert_failure 1
    assert_output "Content mismatch at offset $off!"
    off=$((15000 * MiB + 2 * MiB + 7))
    cp --sparse=always "$TEST_DIR/a.raw" "$TEST_DIR/d.raw"
    poke "$TEST_DIR/d.raw" $off
    run "$DISKIMG" compare "$TEST_DIR/d.raw" "$TEST_DIR/c.qcow2"
    assert_failure 1
    assert_output "Content mismatch at offset $off!"
    same_verdict "$TEST_DIR/d.raw" "$TEST_DIR/c.qcow2"
}

@test "compare a 1 MiB image against a 20 GiB one: zero tail equal, data far in the tail found" {
    require_tool qemu-img
    make_pattern "$TEST_DIR/small.raw" $MiB
    cp "$TEST_DIR/small.raw" "$TEST_DIR/huge.raw"
    truncate -s 20G "$TEST_DIR/huge.raw"
    run "$DISKIMG" compare "$TEST_DIR/small.raw" "$TEST_DIR/huge.raw"
    assert_success
    assert_output $'Warning: Image size mismatch!\nImages are identical.'
    run "$DISKIMG" compare -s "$TEST_DIR/small.raw" "$TEST_DIR/huge.raw"
    assert_failure 1
    assert_output "Strict mode: Image size mismatch!"
    "$DISKIMG" create -q -f qcow2 "$TEST_DIR/huge.qcow2" 20G
    qemu-io -f qcow2 -c "write -P 0x41 $((19 * GiB)) 512" "$TEST_DIR/huge.qcow2" >/dev/null
    qemu-io -f qcow2 -c "write -P 0 0 1M" "$TEST_DIR/huge.qcow2" >/dev/null
    truncate -s 1M "$TEST_DIR/zero.raw"
    run "$DISKIMG" compare "$TEST_DIR/zero.raw" "$TEST_DIR/huge.qcow2"
    assert_failure 1
    assert_output $'Warning: Image size mismatch!\nContent mismatch at offset '$((19 * GiB))'!'
    same_verdict "$TEST_DIR/zero.raw" "$TEST_DIR/huge.qcow2"
}

@test "compare -s agrees with qemu-img compare -s on allocation differences" {
    require_tool qemu-img qemu-io
    # qcow2: unallocated vs zero cluster vs written zeroes
    qemu-img create -q -f qcow2 "$TEST_DIR/u.qcow2" 1M
    qemu-img create -q -f qcow2 "$TEST_DIR/w.qcow2" 1M
    qemu-io -f qcow2 -c 'write -P 0 0 64k' "$TEST_DIR/w.qcow2" >/dev/null
    qemu-img create -q -f qcow2 "$TEST_DIR/z.qcow2" 1M
    qemu-io -f qcow2 -c 'write -z 0 64k' "$TEST_DIR/z.qcow2" >/dev/null
    # raw: a hole vs written zeroes
    truncate -s 1M "$TEST_DIR/h.raw"
    head -c $MiB /dev/zero >"$TEST_DIR/zz.raw"
    local a b
    for a in u.qcow2 w.qcow2 z.qcow2 h.raw zz.raw; do
        for b in u.qcow2 w.qcow2 z.qcow2 h.raw zz.raw; do
            same_verdict "$TEST_DIR/$a" "$TEST_DIR/$b"
            same_verdict -s "$TEST_DIR/$a" "$TEST_DIR/$b"
        done
    done
}

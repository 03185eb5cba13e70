#!/usr/bin/env bats
# diskimg compare: qemu-img compare's exit codes (0 identical, 1 different,
# 2 cannot open, 3 block status failed, 4 read failed), the exact offset
# of the first difference, holes against written zeroes, size mismatches
# with and without -s, -q, usage errors, and images behind NBD URIs.

load '../helpers'
load '../interop/lib'

setup() { setup_test; }
teardown() {
    kill_extra_servers
    cleanup_test
}

MiB=1048576


# 4 MiB: data, a hole, written zeroes, data at the end.
make_img() {
    truncate -s 4M "$1"
    make_pattern "$TEST_DIR/pat" $MiB
    dd if="$TEST_DIR/pat" of="$1" bs=64k count=16 conv=notrunc status=none
    dd if=/dev/zero of="$1" bs=64k seek=32 count=8 conv=notrunc status=none
    dd if="$TEST_DIR/pat" of="$1" bs=64k seek=60 count=4 conv=notrunc status=none
}

# poke FILE OFFSET: change the byte at OFFSET.
poke() {
    printf '\xee' | dd of="$1" bs=1 seek="$2" conv=notrunc status=none
}

# cmp_is EXIT STDOUT A B [options]: compare exits EXIT and prints STDOUT.
cmp_is() {
    local want_status=$1 want=$2
    shift 2
    run --separate-stderr "$DISKIMG" compare "$@"
    if [[ $status -ne $want_status || "$output" != "$want" ]]; then
        echo "compare $*: exit $status, stdout '$output', stderr '$stderr'" >&2
        echo "wanted exit $want_status, stdout '$want'" >&2
        return 1
    fi
}

@test "compare --help and -h print the usage" {
    run "$DISKIMG" compare -h
    assert_success
    assert_output --partial "Usage: diskimg compare"
    run "$DISKIMG" help compare
    assert_success
    assert_output --partial "Usage: diskimg compare"
    # Every other subcommand takes --help, and compare's own errors say
    # "Try 'diskimg compare --help'".
    run "$DISKIMG" compare --help
    assert_success
    assert_output --partial "Usage: diskimg compare"
}

@test "compare usage errors exit 2 and name the bad option" {
    truncate -s 1M "$TEST_DIR/a.raw"
    run --separate-stderr "$DISKIMG" compare
    assert_failure 2
    [[ "$stderr" == *"expected IMAGE1 and IMAGE2"* ]]
    run --separate-stderr "$DISKIMG" compare "$TEST_DIR/a.raw"
    assert_failure 2
    [[ "$stderr" == *"expected IMAGE1 and IMAGE2"* ]]
    run --separate-stderr "$DISKIMG" compare "$TEST_DIR/a.raw" "$TEST_DIR/a.raw" "$TEST_DIR/a.raw"
    assert_failure 2
    run --separate-stderr "$DISKIMG" compare -f
    assert_failure 2
    [[ "$stderr" == *"option '-f' needs a value"* ]]
    run --separate-stderr "$DISKIMG" compare -Z "$TEST_DIR/a.raw" "$TEST_DIR/a.raw"
    assert_failure 2
    [[ "$stderr" == *"unknown option '-Z'"* ]]
    run --separate-stderr "$DISKIMG" compare --bogus "$TEST_DIR/a.raw" "$TEST_DIR/a.raw"
    assert_failure 2
    [[ "$stderr" == *"unknown option '--bogus'"* ]]
    [[ "$stderr" == *"Try 'diskimg compare --help'"* ]]
}

@test "compare: identical images in different formats exit 0" {
    require_tool qemu-img
    make_img "$TEST_DIR/a.raw"
    qemu-img convert -O qcow2 "$TEST_DIR/a.raw" "$TEST_DIR/a.qcow2"
    qemu-img convert -c -O qcow2 "$TEST_DIR/a.raw" "$TEST_DIR/c.qcow2"
    cmp_is 0 "Images are identical." "$TEST_DIR/a.raw" "$TEST_DIR/a.qcow2"
    cmp_is 0 "Images are identical." "$TEST_DIR/a.qcow2" "$TEST_DIR/c.qcow2"
    cmp_is 0 "Images are identical." -f qcow2 -F raw "$TEST_DIR/c.qcow2" "$TEST_DIR/a.raw"
    cmp_is 0 "Images are identical." "$TEST_DIR/a.raw" "$TEST_DIR/a.raw"
}

@test "compare reports the exact offset of the first difference (exit 1)" {
    require_tool qemu-img
    make_img "$TEST_DIR/a.raw"
    local off
    # in data, in a hole, in written zeroes, the very first and last byte
    for off in 1000001 $((MiB + 4097)) $((2 * MiB + 513)) 0 $((4 * MiB - 1)); do
        cp "$TEST_DIR/a.raw" "$TEST_DIR/b.raw"
        poke "$TEST_DIR/b.raw" $off
        cmp_is 1 "Content mismatch at offset $off!" "$TEST_DIR/a.raw" "$TEST_DIR/b.raw"
        cmp_is 1 "Content mismatch at offset $off!" "$TEST_DIR/b.raw" "$TEST_DIR/a.raw"
        # qcow2 on one side, compressed on the other
        rm -f "$TEST_DIR/b.qcow2" "$TEST_DIR/a.qcow2"
        qemu-img convert -O qcow2 "$TEST_DIR/b.raw" "$TEST_DIR/b.qcow2"
        qemu-img convert -c -O qcow2 "$TEST_DIR/a.raw" "$TEST_DIR/a.qcow2"
        cmp_is 1 "Content mismatch at offset $off!" "$TEST_DIR/a.qcow2" "$TEST_DIR/b.qcow2"
    done
    # Two differences: the first one counts.
    cp "$TEST_DIR/a.raw" "$TEST_DIR/b.raw"
    poke "$TEST_DIR/b.raw" 3000000
    poke "$TEST_DIR/b.raw" 700000
    cmp_is 1 "Content mismatch at offset 700000!" "$TEST_DIR/a.raw" "$TEST_DIR/b.raw"
}

@test "compare: a hole equals written zeroes, except with -s" {
    truncate -s 2M "$TEST_DIR/hole.raw"
    head -c $((2 * MiB)) /dev/zero >"$TEST_DIR/zero.raw"
    cmp_is 0 "Images are identical." "$TEST_DIR/hole.raw" "$TEST_DIR/zero.raw"
    run --separate-stderr "$DISKIMG" compare -s "$TEST_DIR/hole.raw" "$TEST_DIR/zero.raw"
    assert_failure 1
    [[ "$output" == "Strict mode: Offset 0 block status mismatch!" ]]
    # -s on really identical images
    cp --sparse=always "$TEST_DIR/hole.raw" "$TEST_DIR/hole2.raw"
    cmp_is 0 "Images are identical." -s "$TEST_DIR/hole.raw" "$TEST_DIR/hole2.raw"
}

@test "compare: a larger image with a zero tail is equal; -s says size mismatch" {
    make_img "$TEST_DIR/a.raw"
    cp "$TEST_DIR/a.raw" "$TEST_DIR/big.raw"
    truncate -s 5M "$TEST_DIR/big.raw"
    cmp_is 0 $'Warning: Image size mismatch!\nImages are identical.' "$TEST_DIR/a.raw" "$TEST_DIR/big.raw"
    cmp_is 0 $'Warning: Image size mismatch!\nImages are identical.' "$TEST_DIR/big.raw" "$TEST_DIR/a.raw"
    cmp_is 1 "Strict mode: Image size mismatch!" -s "$TEST_DIR/a.raw" "$TEST_DIR/big.raw"
    cmp_is 1 "Strict mode: Image size mismatch!" -s "$TEST_DIR/big.raw" "$TEST_DIR/a.raw"
    # Written zeroes in the tail are zeroes too.
    dd if=/dev/zero of="$TEST_DIR/big.raw" bs=64k seek=64 count=4 conv=notrunc status=none
    cmp_is 0 $'Warning: Image size mismatch!\nImages are identical.' "$TEST_DIR/a.raw" "$TEST_DIR/big.raw"
    # Data in the tail: a mismatch at its exact offset, either way round.
    poke "$TEST_DIR/big.raw" $((4 * MiB + 777))
    cmp_is 1 $'Warning: Image size mismatch!\nContent mismatch at offset 4195081!' "$TEST_DIR/a.raw" "$TEST_DIR/big.raw"
    cmp_is 1 $'Warning: Image size mismatch!\nContent mismatch at offset 4195081!' "$TEST_DIR/big.raw" "$TEST_DIR/a.raw"
    # A difference inside the common part wins over the tail.
    poke "$TEST_DIR/big.raw" 12345
    cmp_is 1 "Content mismatch at offset 12345!" "$TEST_DIR/a.raw" "$TEST_DIR/big.raw"
}

@test "compare: cannot open exits 2 with one error line" {
    make_img "$TEST_DIR/a.raw"
    run --separate-stderr "$DISKIMG" compare "$TEST_DIR/a.raw" "$TEST_DIR/nope.raw"
    assert_failure 2
    [[ "$stderr" == "diskimg: "*"nope.raw: No such file or directory" ]]
    run --separate-stderr "$DISKIMG" compare "$TEST_DIR/nope.raw" "$TEST_DIR/a.raw"
    assert_failure 2
    [[ "$stderr" == *"nope.raw"* ]]
    run --separate-stderr "$DISKIMG" compare -f qcow2 "$TEST_DIR/a.raw" "$TEST_DIR/a.raw"
    assert_failure 2
    [[ $(printf '%s\n' "$stderr" | wc -l) -eq 1 && "$stderr" == *qcow2* ]]
    run --separate-stderr "$DISKIMG" compare -F qcow2 "$TEST_DIR/a.raw" "$TEST_DIR/a.raw"
    assert_failure 2
    run --separate-stderr "$DISKIMG" compare "$TEST_DIR/a.raw" "nbd+unix:///?socket=$TEST_DIR/none.sock"
    assert_failure 2
    [[ "$stderr" == *"none.sock"* ]]
    [[ -z "$output" ]]
}

@test "compare -q: no output, same exit codes" {
    make_img "$TEST_DIR/a.raw"
    cp "$TEST_DIR/a.raw" "$TEST_DIR/b.raw"
    cmp_is 0 "" -q "$TEST_DIR/a.raw" "$TEST_DIR/b.raw"
    poke "$TEST_DIR/b.raw" 5
    cmp_is 1 "" -q "$TEST_DIR/a.raw" "$TEST_DIR/b.raw"
    truncate -s 5M "$TEST_DIR/b.raw"
    cmp_is 1 "" -q -s "$TEST_DIR/a.raw" "$TEST_DIR/b.raw"
    run --separate-stderr "$DISKIMG" compare -q "$TEST_DIR/a.raw" "$TEST_DIR/nope"
    assert_failure 2
    [[ -z "$output" ]]
}

@test "compare -p still compares (progress goes to stderr, never stdout)" {
    make_img "$TEST_DIR/a.raw"
    cp "$TEST_DIR/a.raw" "$TEST_DIR/b.raw"
    cmp_is 0 "Images are identical." -p "$TEST_DIR/a.raw" "$TEST_DIR/b.raw"
    poke "$TEST_DIR/b.raw" 65537
    cmp_is 1 "Content mismatch at offset 65537!" -p "$TEST_DIR/a.raw" "$TEST_DIR/b.raw"
}

@test "compare on NBD URIs: file vs URI and URI vs URI" {
    require_tool qemu-img
    make_img "$TEST_DIR/a.raw"
    qemu-img convert -O qcow2 "$TEST_DIR/a.raw" "$TEST_DIR/a.qcow2"
    cp "$TEST_DIR/a.raw" "$TEST_DIR/b.raw"
    poke "$TEST_DIR/b.raw" 2222222
    start_server -t -r "$TEST_DIR/a.qcow2"
    # -e 0: compare opens the export twice at once (and with multi-conn)
    start_extra_server "$TEST_DIR/b.sock" -t -e 0 -r "$TEST_DIR/b.raw"
    local ub="nbd+unix:///?socket=$TEST_DIR/b.sock"
    cmp_is 0 "Images are identical." "$TEST_DIR/a.raw" "$URI"
    cmp_is 0 "Images are identical." "$URI" "$TEST_DIR/a.qcow2"
    cmp_is 1 "Content mismatch at offset 2222222!" "$TEST_DIR/a.raw" "$ub"
    cmp_is 1 "Content mismatch at offset 2222222!" "$URI" "$ub"
    cmp_is 0 "Images are identical." "$ub" "$TEST_DIR/b.raw"
    # -s on the same content: the export of a raw file and the file itself
    cmp_is 0 "Images are identical." -s "$ub" "$ub"
    kill_extra_servers
}

@test "compare: a read error exits 4, a block status error exits 3" {
    require_tool nbdkit
    make_img "$TEST_DIR/a.raw"
    start_kit "$TEST_DIR/r.sock" --filter=error pattern size=4M error-pread=EIO error-pread-rate=100%
    run --separate-stderr "$DISKIMG" compare -F raw "$TEST_DIR/a.raw" "nbd+unix:///?socket=$TEST_DIR/r.sock"
    assert_failure 4
    [[ $(printf '%s\n' "$stderr" | wc -l) -eq 1 && "$stderr" == "diskimg: "* ]]
    [[ -z "$output" ]]

    start_kit "$TEST_DIR/s.sock" --filter=error memory 4M error-extents=EIO error-extents-rate=100%
    run --separate-stderr "$DISKIMG" compare -F raw "$TEST_DIR/a.raw" "nbd+unix:///?socket=$TEST_DIR/s.sock"
    assert_failure 3
    [[ $(printf '%s\n' "$stderr" | wc -l) -eq 1 && "$stderr" == "diskimg: "* ]]
}

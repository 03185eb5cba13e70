#!/usr/bin/env bats
# diskimg info: the same output as qemu-img info (human and JSON, with and
# without --backing-chain; only the host "disk size"/"actual-size" may
# differ) for images made by qemu-img and by diskimg; errors, exit codes.

load '../helpers'
bats_require_minimum_version 1.5.0

setup() { setup_test; }
teardown() { cleanup_test; }

# strip: drop the lines that depend on host allocation.
strip() {
    grep -v '^disk size:\|"actual-size":'
}

# same_info [info options...] FILE: diskimg info and qemu-img info print
# the same, human and JSON, with and without --backing-chain, and exit
# with the same status (when both fail, only the status is compared).
same_info() {
    local out bc ours theirs rc_o rc_t
    for out in human json; do
        for bc in "" --backing-chain; do
            rc_o=0
            rc_t=0
            ours=$("$DISKIMG" info --output=$out $bc "$@" 2>/dev/null | strip
                   exit "${PIPESTATUS[0]}") || rc_o=$?
            theirs=$(qemu-img info --output=$out $bc "$@" 2>/dev/null | strip
                     exit "${PIPESTATUS[0]}") || rc_t=$?
            # (what is printed before a failure does not count)
            [[ $rc_o -ne 0 && $rc_t -ne 0 ]] && ours=$theirs
            if [[ "$ours" != "$theirs" || $rc_o -ne $rc_t ]]; then
                echo "info --output=$out $bc $* (exit diskimg $rc_o, qemu-img $rc_t):" >&2
                diff <(echo "$theirs") <(echo "$ours") >&2 || true
                return 1
            fi
        done
    done
}

# fill IMAGE: some data, zeroes and a discard, so allocation is not empty.
fill() {
    qemu-io -f qcow2 -c 'write -P 1 0 200k' -c 'write -z 1M 64k' -c 'discard 64k 64k' "$1" >/dev/null
}

VARIANTS=(
    ""
    compat=0.10
    cluster_size=512
    cluster_size=2M
    refcount_bits=1
    refcount_bits=64
    lazy_refcounts=on
    extended_l2=on
    compression_type=zstd
    preallocation=metadata
    preallocation=full
)

@test "info --help" {
    run "$DISKIMG" info --help
    assert_success
    assert_output --partial "Usage: diskimg info"
    assert_output --partial "--backing-chain"
    assert_output --partial "--output"
}

@test "info: same as qemu-img info for images qemu-img made (every variant, with data)" {
    require_tool qemu-img qemu-io
    local o
    for o in "${VARIANTS[@]}"; do
        rm -f "$TEST_DIR/a.qcow2"
        qemu-img create -q -f qcow2 ${o:+-o "$o"} "$TEST_DIR/a.qcow2" 4M
        fill "$TEST_DIR/a.qcow2"
        same_info "$TEST_DIR/a.qcow2" || { echo "variant '$o'" >&2; return 1; }
    done
}

@test "info: same as qemu-img info for images diskimg made (every variant)" {
    require_tool qemu-img
    local o
    for o in "${VARIANTS[@]}"; do
        rm -f "$TEST_DIR/a.qcow2"
        "$DISKIMG" create -q -f qcow2 ${o:+-o "$o"} "$TEST_DIR/a.qcow2" 3M
        same_info "$TEST_DIR/a.qcow2" || { echo "variant '$o'" >&2; return 1; }
    done
}

@test "info: the human output has qemu-img's fields" {
    require_tool qemu-img
    "$DISKIMG" create -q -f qcow2 -o lazy_refcounts=on "$TEST_DIR/a.qcow2" 3M
    run "$DISKIMG" info "$TEST_DIR/a.qcow2"
    assert_success
    assert_line "image: $TEST_DIR/a.qcow2"
    assert_line "file format: qcow2"
    assert_line "virtual size: 3 MiB (3145728 bytes)"
    assert_line "cluster_size: 65536"
    assert_line "    compat: 1.1"
    assert_line "    lazy refcounts: true"
    assert_line "    refcount bits: 16"
    assert_line --regexp '^disk size: [0-9.]+ [KMG]?i?B$'
}

@test "info: compressed images (zlib, zstd)" {
    require_tool qemu-img
    head -c 1M /dev/zero | tr '\0' 'x' >"$TEST_DIR/src.raw"
    qemu-img convert -c -f raw -O qcow2 "$TEST_DIR/src.raw" "$TEST_DIR/c.qcow2"
    same_info "$TEST_DIR/c.qcow2"
    qemu-img convert -c -f raw -O qcow2 -o compression_type=zstd "$TEST_DIR/src.raw" "$TEST_DIR/z.qcow2"
    same_info "$TEST_DIR/z.qcow2"
    run "$DISKIMG" info --output=json "$TEST_DIR/z.qcow2"
    assert_output --partial '"compression-type": "zstd"'
}

@test "info: internal snapshots (list and JSON), v3 and v2" {
    require_tool qemu-img qemu-io
    local c
    for c in 1.1 0.10; do
        rm -f "$TEST_DIR/s.qcow2"
        qemu-img create -q -f qcow2 -o compat=$c "$TEST_DIR/s.qcow2" 4M
        qemu-io -f qcow2 -c 'write -P 1 0 1M' "$TEST_DIR/s.qcow2" >/dev/null
        qemu-img snapshot -c first "$TEST_DIR/s.qcow2"
        qemu-io -f qcow2 -c 'write -P 2 0 2M' "$TEST_DIR/s.qcow2" >/dev/null
        qemu-img snapshot -c "second one" "$TEST_DIR/s.qcow2"
        same_info "$TEST_DIR/s.qcow2" || { echo "compat=$c" >&2; return 1; }
        run "$DISKIMG" info "$TEST_DIR/s.qcow2"
        assert_line "Snapshot list:"
        assert_output --partial "second one"
    done
}

@test "info: a backing chain (raw <- qcow2 <- qcow2), relative names, --backing-chain" {
    require_tool qemu-img
    mkdir "$TEST_DIR/sub"
    truncate -s 3000320 "$TEST_DIR/sub/base.raw"
    (cd "$TEST_DIR/sub" && qemu-img create -q -f qcow2 -b base.raw -F raw mid.qcow2 3584k)
    (cd "$TEST_DIR" && "$DISKIMG" create -q -f qcow2 -b sub/mid.qcow2 -F qcow2 top.qcow2 5M)
    same_info "$TEST_DIR/top.qcow2"
    same_info "$TEST_DIR/sub/mid.qcow2"
    # A relative argument, from the image's directory.
    cd "$TEST_DIR"
    same_info top.qcow2
    run "$DISKIMG" info --backing-chain top.qcow2
    assert_success
    assert_line "image: top.qcow2"
    assert_line "backing file: sub/mid.qcow2"
    assert_line "backing file: base.raw (actual path: sub/base.raw)"
    assert_line "file format: raw"
    run "$DISKIMG" info --backing-chain --output=json top.qcow2
    assert_output --regexp '^\['
    assert_output --partial "\"full-backing-filename\": \"sub/mid.qcow2\""
}

@test "info: a missing backing file is not opened (plain info works, as qemu-img)" {
    require_tool qemu-img
    qemu-img create -q -f qcow2 -u -b gone.qcow2 -F qcow2 "$TEST_DIR/a.qcow2" 1M
    run "$DISKIMG" info "$TEST_DIR/a.qcow2"
    assert_success
    assert_line --regexp '^backing file: gone\.qcow2 \(actual path: .*/gone\.qcow2\)$'
    same_info "$TEST_DIR/a.qcow2"
    run --separate-stderr "$DISKIMG" info --backing-chain "$TEST_DIR/a.qcow2"
    assert_failure 1
    [[ "$stderr" == *gone.qcow2* ]]
}

@test "info: raw files, probed and with -f raw" {
    require_tool qemu-img
    truncate -s 1000448 "$TEST_DIR/a.raw"
    dd if=/dev/urandom of="$TEST_DIR/a.raw" bs=64k count=2 seek=3 conv=notrunc status=none
    same_info -f raw "$TEST_DIR/a.raw"
    same_info "$TEST_DIR/a.raw"
    run "$DISKIMG" info "$TEST_DIR/a.raw"
    assert_success
    assert_line "file format: raw"
    assert_line "virtual size: 977 KiB (1000448 bytes)"
}

@test "info: a raw file whose size is not a multiple of 512 keeps its exact size" {
    # qemu-img rounds it up to 1000448; diskimg reports (and serves) the
    # file's real size, as its man page says.
    truncate -s 1000001 "$TEST_DIR/a.raw"
    run "$DISKIMG" info -f raw "$TEST_DIR/a.raw"
    assert_success
    assert_line "virtual size: 977 KiB (1000001 bytes)"
    run "$DISKIMG" info -f raw --output=json "$TEST_DIR/a.raw"
    assert_output --partial '"virtual-size": 1000001'
}

@test "info: a dirty image (lazy refcounts, qemu crashed) says so" {
    require_tool qemu-img qemu-io
    qemu-img create -q -f qcow2 -o lazy_refcounts=on "$TEST_DIR/d.qcow2" 4M
    run bash -c 'ulimit -c 0; exec qemu-io -f qcow2 -c "write 0 1M" -c abort "$1"' _ "$TEST_DIR/d.qcow2"
    same_info "$TEST_DIR/d.qcow2"
    run "$DISKIMG" info "$TEST_DIR/d.qcow2"
    assert_line "cleanly shut down: no"
    run "$DISKIMG" info --output=json "$TEST_DIR/d.qcow2"
    assert_output --partial '"dirty-flag": true'
}

@test "info: the corrupt bit and an unknown compatible feature bit" {
    require_tool qemu-img
    qemu-img create -q -f qcow2 "$TEST_DIR/c.qcow2" 1M
    printf '\x02' | dd of="$TEST_DIR/c.qcow2" bs=1 seek=79 conv=notrunc status=none
    same_info "$TEST_DIR/c.qcow2"
    run "$DISKIMG" info "$TEST_DIR/c.qcow2"
    assert_line "    corrupt: true"
    qemu-img create -q -f qcow2 "$TEST_DIR/u.qcow2" 1M
    printf '\x80' | dd of="$TEST_DIR/u.qcow2" bs=1 seek=80 conv=notrunc status=none
    same_info "$TEST_DIR/u.qcow2"
}

@test "info: errors exit 1 with one line naming the file" {
    require_tool qemu-img
    run --separate-stderr "$DISKIMG" info "$TEST_DIR/nope.qcow2"
    assert_failure 1
    [[ "$stderr" == *"nope.qcow2: No such file or directory"* ]]
    [[ $(printf '%s\n' "$stderr" | wc -l) -eq 1 ]]
    # -f qcow2 on a raw file
    truncate -s 1M "$TEST_DIR/a.raw"
    run --separate-stderr "$DISKIMG" info -f qcow2 "$TEST_DIR/a.raw"
    assert_failure 1
    [[ $(printf '%s\n' "$stderr" | wc -l) -eq 1 ]]
    # an unknown incompatible feature bit: refuse, as qemu-img does
    qemu-img create -q -f qcow2 "$TEST_DIR/u.qcow2" 1M
    printf '\x80' | dd of="$TEST_DIR/u.qcow2" bs=1 seek=72 conv=notrunc status=none
    run --separate-stderr "$DISKIMG" info "$TEST_DIR/u.qcow2"
    assert_failure 1
    [[ "$stderr" == *"incompatible feature"* ]]
    run qemu-img info "$TEST_DIR/u.qcow2"
    assert_failure 1
}

@test "info --backing-chain: a backing loop is detected (exit 1), plain info still works" {
    require_tool qemu-img
    cd "$TEST_DIR"
    qemu-img create -q -f qcow2 -u -b l2.qcow2 -F qcow2 l1.qcow2 1M
    qemu-img create -q -f qcow2 -u -b l1.qcow2 -F qcow2 l2.qcow2 1M
    run --separate-stderr "$DISKIMG" info --backing-chain l1.qcow2
    assert_failure 1
    [[ "$stderr" == *"infinite loop"* ]]
    run "$DISKIMG" info l1.qcow2
    assert_success
    # a self loop (qemu-img create refuses to make one; rebase -u does not)
    qemu-img create -q -f qcow2 self.qcow2 1M
    qemu-img rebase -u -b self.qcow2 -F qcow2 self.qcow2
    run --separate-stderr "$DISKIMG" info --backing-chain self.qcow2
    assert_failure 1
    [[ "$stderr" == *"infinite loop"* ]]
}

@test "info: usage errors exit 2" {
    run "$DISKIMG" info
    assert_failure 2
    truncate -s 1M "$TEST_DIR/a.raw"
    run "$DISKIMG" info --output=xml "$TEST_DIR/a.raw"
    assert_failure 2
    run "$DISKIMG" info "$TEST_DIR/a.raw" "$TEST_DIR/a.raw"
    assert_failure 2
    run "$DISKIMG" info --bogus "$TEST_DIR/a.raw"
    assert_failure 2
}

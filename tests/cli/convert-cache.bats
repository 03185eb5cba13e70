#!/usr/bin/env bats
# convert and compare keep out of the page cache by default: the target is
# written with O_DIRECT (cache=none, falling back to writeback where the
# file system refuses O_DIRECT, and writeback for -c), and source data the
# cache does not hold is read with O_DIRECT.  Residency is read with
# fincore(1); every assertion has a twin with the old behaviour (-t/-T
# writeback) that fills the cache, so the measurement can tell.

load '../helpers'

setup() {
    setup_test
    require_tool fincore qemu-img qemu-io
    # The default paths need O_DIRECT on the test directory (not tmpfs).
    dd if=/dev/zero of="$TEST_DIR/probe" bs=4096 count=1 oflag=direct status=none 2>/dev/null ||
        skip "$TEST_DIR does not support O_DIRECT"
    rm -f "$TEST_DIR/probe"
}

teardown() { cleanup_test; }

MiB=1048576

# make_data FILE MiB [EXTRA_BYTES]: random data (no holes, no zeroes), so
# every byte is read and written; EXTRA_BYTES makes the size unaligned
# (a multiple of 512, which raw images are rounded up to, as qemu-img does).
make_data() {
    head -c $(($2 * MiB + ${3:-0})) /dev/urandom > "$1"
}

# evict FILE: drop its pages from the page cache (written back first).
evict() {
    sync "$1"
    dd if="$1" iflag=nocache count=0 status=none
}

# resident FILE: bytes of FILE in the page cache.
resident() {
    fincore --bytes --noheadings --output RES "$1" | tr -d ' '
}

@test "convert: the default target is written around the page cache; -t writeback fills it" {
    make_data "$TEST_DIR/src.raw" 16
    "$DISKIMG" convert -f raw -O raw "$TEST_DIR/src.raw" "$TEST_DIR/direct.raw"
    "$DISKIMG" convert -t writeback -f raw -O raw "$TEST_DIR/src.raw" "$TEST_DIR/cached.raw"
    echo "resident: default $(resident "$TEST_DIR/direct.raw"), writeback $(resident "$TEST_DIR/cached.raw")"
    [[ $(resident "$TEST_DIR/direct.raw") -lt $MiB ]]
    [[ $(resident "$TEST_DIR/cached.raw") -gt $((8 * MiB)) ]]
    cmp "$TEST_DIR/src.raw" "$TEST_DIR/direct.raw"
    cmp "$TEST_DIR/src.raw" "$TEST_DIR/cached.raw"
}

@test "convert: a qcow2 target written with O_DIRECT is clean for qemu-img check and equal" {
    make_data "$TEST_DIR/src.raw" 16 1536
    "$DISKIMG" convert -f raw -O qcow2 "$TEST_DIR/src.raw" "$TEST_DIR/dst.qcow2"
    [[ $(resident "$TEST_DIR/dst.qcow2") -lt $MiB ]]
    qemu-img check "$TEST_DIR/dst.qcow2"
    qemu-img compare -f raw -F qcow2 "$TEST_DIR/src.raw" "$TEST_DIR/dst.qcow2"
    # and back, into an unaligned raw file: its last partial block too
    "$DISKIMG" convert -f qcow2 -O raw "$TEST_DIR/dst.qcow2" "$TEST_DIR/back.raw"
    cmp "$TEST_DIR/src.raw" "$TEST_DIR/back.raw"
}

@test "convert: a cold source is read around the page cache; -T writeback caches it" {
    make_data "$TEST_DIR/src.raw" 16 1536
    evict "$TEST_DIR/src.raw"
    [[ $(resident "$TEST_DIR/src.raw") -eq 0 ]]
    "$DISKIMG" convert -f raw -O raw "$TEST_DIR/src.raw" "$TEST_DIR/a.raw"
    cmp "$TEST_DIR/src.raw" "$TEST_DIR/a.raw" # (cmp caches the source again)
    evict "$TEST_DIR/src.raw"
    "$DISKIMG" convert -f raw -O raw "$TEST_DIR/src.raw" "$TEST_DIR/b.raw"
    local after_default after_writeback
    after_default=$(resident "$TEST_DIR/src.raw")
    evict "$TEST_DIR/src.raw"
    "$DISKIMG" convert -T writeback -f raw -O raw "$TEST_DIR/src.raw" "$TEST_DIR/c.raw"
    after_writeback=$(resident "$TEST_DIR/src.raw")
    echo "source resident after: default $after_default, -T writeback $after_writeback"
    # only the unaligned tail (and readahead around it) goes through the cache
    [[ $after_default -lt $((2 * MiB)) ]]
    [[ $after_writeback -gt $((8 * MiB)) ]]
    cmp "$TEST_DIR/src.raw" "$TEST_DIR/b.raw"
    cmp "$TEST_DIR/src.raw" "$TEST_DIR/c.raw"
}

@test "convert: a cached source is read from the cache and converts the same" {
    make_data "$TEST_DIR/src.raw" 16
    cat "$TEST_DIR/src.raw" > /dev/null
    [[ $(resident "$TEST_DIR/src.raw") -eq $((16 * MiB)) ]]
    "$DISKIMG" convert -f raw -O qcow2 "$TEST_DIR/src.raw" "$TEST_DIR/dst.qcow2"
    [[ $(resident "$TEST_DIR/src.raw") -eq $((16 * MiB)) ]] # still all there
    [[ $(resident "$TEST_DIR/dst.qcow2") -lt $MiB ]]
    qemu-img compare -f raw -F qcow2 "$TEST_DIR/src.raw" "$TEST_DIR/dst.qcow2"
}

@test "convert: a partly cached qcow2 source with a backing file reads right" {
    make_data "$TEST_DIR/base.raw" 8
    qemu-img convert -f raw -O qcow2 "$TEST_DIR/base.raw" "$TEST_DIR/base.qcow2"
    qemu-img create -q -f qcow2 -b base.qcow2 -F qcow2 "$TEST_DIR/top.qcow2"
    qemu-io -f qcow2 -c 'write -P 0x5a 1M 3M' "$TEST_DIR/top.qcow2" > /dev/null
    evict "$TEST_DIR/base.qcow2"
    evict "$TEST_DIR/top.qcow2"
    dd if="$TEST_DIR/top.qcow2" of=/dev/null bs=64k count=20 status=none # cache a part
    "$DISKIMG" convert -f qcow2 -O raw "$TEST_DIR/top.qcow2" "$TEST_DIR/out.raw"
    qemu-img compare -f qcow2 -F raw "$TEST_DIR/top.qcow2" "$TEST_DIR/out.raw"
}

# no_odirect CMD...: run CMD where every open() with O_DIRECT fails with
# EINVAL, as on a file system without direct I/O (tests/preload/no-odirect.c).
no_odirect() {
    [[ -n "${DISKIMG_NO_ODIRECT_LIB:-}" ]] || DISKIMG_NO_ODIRECT_LIB=$BATS_TEST_DIRNAME/../../build/tests/no-odirect.so
    # (ASan wants to be first in the list; the shim only wraps open)
    LD_PRELOAD=$DISKIMG_NO_ODIRECT_LIB ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0 "$@"
}

@test "convert: where O_DIRECT is refused, the default target falls back to writeback and the source to the cache" {
    make_data "$TEST_DIR/src.raw" 4 1536
    evict "$TEST_DIR/src.raw"
    no_odirect "$DISKIMG" convert -f raw -O qcow2 "$TEST_DIR/src.raw" "$TEST_DIR/dst.qcow2"
    [[ $(resident "$TEST_DIR/dst.qcow2") -gt $MiB ]]  # written through the cache
    [[ $(resident "$TEST_DIR/src.raw") -gt $MiB ]]    # read through the cache
    qemu-img compare -f raw -F qcow2 "$TEST_DIR/src.raw" "$TEST_DIR/dst.qcow2"
    no_odirect "$DISKIMG" convert -f raw -O raw "$TEST_DIR/src.raw" "$TEST_DIR/dst.raw"
    cmp "$TEST_DIR/src.raw" "$TEST_DIR/dst.raw"
    # the same for compare
    evict "$TEST_DIR/src.raw"
    no_odirect "$DISKIMG" compare "$TEST_DIR/src.raw" "$TEST_DIR/dst.raw"
}

@test "convert: where O_DIRECT is refused, an explicit -t none or -T none fails and leaves no target" {
    make_data "$TEST_DIR/src.raw" 4
    run no_odirect "$DISKIMG" convert -t none -f raw -O raw "$TEST_DIR/src.raw" "$TEST_DIR/none.raw"
    [[ $status -eq 1 ]]
    [[ $output == *"none.raw: the file system does not support O_DIRECT"* ]]
    [[ ! -e "$TEST_DIR/none.raw" ]] # the target it created is removed
    run no_odirect "$DISKIMG" convert -T none -f raw -O raw "$TEST_DIR/src.raw" "$TEST_DIR/none.raw"
    [[ $status -eq 1 ]]
    [[ $output == *"src.raw: the file system does not support O_DIRECT"* ]]
    [[ ! -e "$TEST_DIR/none.raw" ]]
}

@test "convert -c keeps the page cache for its unaligned compressed writes" {
    head -c $((8 * MiB)) /dev/zero | tr '\0' 'x' > "$TEST_DIR/src.raw"
    "$DISKIMG" convert -c -f raw -O qcow2 "$TEST_DIR/src.raw" "$TEST_DIR/c.qcow2"
    qemu-img check "$TEST_DIR/c.qcow2"
    qemu-img compare -f raw -F qcow2 "$TEST_DIR/src.raw" "$TEST_DIR/c.qcow2"
    [[ $(resident "$TEST_DIR/c.qcow2") -gt 0 ]]
}

@test "compare: cold images are read around the page cache; -T writeback caches them" {
    make_data "$TEST_DIR/a.raw" 16 1536
    cp "$TEST_DIR/a.raw" "$TEST_DIR/b.raw"
    evict "$TEST_DIR/a.raw"
    evict "$TEST_DIR/b.raw"
    run "$DISKIMG" compare "$TEST_DIR/a.raw" "$TEST_DIR/b.raw"
    [[ $status -eq 0 ]]
    [[ $(resident "$TEST_DIR/a.raw") -lt $((2 * MiB)) ]]
    [[ $(resident "$TEST_DIR/b.raw") -lt $((2 * MiB)) ]]
    run "$DISKIMG" compare -T writeback "$TEST_DIR/a.raw" "$TEST_DIR/b.raw"
    [[ $status -eq 0 ]]
    [[ $(resident "$TEST_DIR/a.raw") -gt $((8 * MiB)) ]]
    # a difference in the cold part is still found, at the right offset
    printf 'Z' | dd of="$TEST_DIR/b.raw" bs=1 seek=$((9 * MiB + 17)) conv=notrunc status=none
    evict "$TEST_DIR/a.raw"
    evict "$TEST_DIR/b.raw"
    run "$DISKIMG" compare "$TEST_DIR/a.raw" "$TEST_DIR/b.raw"
    [[ $status -eq 1 ]]
    [[ $output == *"offset $((9 * MiB + 17))"* ]]
}

@test "compare -T: any cache mode reads the same; a bad one is a usage error" {
    make_data "$TEST_DIR/a.raw" 4 1536
    cp "$TEST_DIR/a.raw" "$TEST_DIR/b.raw"
    local t
    for t in none writeback writethrough directsync unsafe; do
        "$DISKIMG" compare -T $t "$TEST_DIR/a.raw" "$TEST_DIR/b.raw"
    done
    run "$DISKIMG" compare -T fast "$TEST_DIR/a.raw" "$TEST_DIR/b.raw"
    [[ $status -eq 2 ]]
    [[ $output == *"invalid cache mode 'fast'"* ]]
}

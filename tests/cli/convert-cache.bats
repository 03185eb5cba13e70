#!/usr/bin/env bats
# convert and compare stream through the page cache by default: what they
# read cold and what they write leaves the cache as they go (block/
# file-posix-stream.c), data that was cached stays, and the result is the
# same.  Residency is read with fincore(1); every assertion on the default
# has a twin with -t/-T writeback that fills the cache, so the measurement
# can tell.  Images are larger than the write-behind window (16 writes of
# 2 MiB) and readahead (8 MiB here), so the difference is clear.

load '../helpers'

setup() {
    setup_test
    require_tool fincore qemu-img qemu-io
}

teardown() { cleanup_test; }

MiB=1048576
SIZE_MIB=96

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

@test "convert: the default target leaves the page cache once written; -t writeback keeps it" {
    make_data "$TEST_DIR/src.raw" $SIZE_MIB
    "$DISKIMG" convert -f raw -O raw "$TEST_DIR/src.raw" "$TEST_DIR/stream.raw"
    "$DISKIMG" convert -t writeback -f raw -O raw "$TEST_DIR/src.raw" "$TEST_DIR/cached.raw"
    echo "resident: default $(resident "$TEST_DIR/stream.raw"), writeback $(resident "$TEST_DIR/cached.raw")"
    [[ $(resident "$TEST_DIR/stream.raw") -lt $((4 * MiB)) ]]
    [[ $(resident "$TEST_DIR/cached.raw") -gt $((64 * MiB)) ]]
    cmp "$TEST_DIR/src.raw" "$TEST_DIR/stream.raw"
    cmp "$TEST_DIR/src.raw" "$TEST_DIR/cached.raw"
}

@test "convert: a streamed qcow2 target is clean for qemu-img check and equal, and converts back" {
    make_data "$TEST_DIR/src.raw" $SIZE_MIB 1536
    "$DISKIMG" convert -f raw -O qcow2 "$TEST_DIR/src.raw" "$TEST_DIR/dst.qcow2"
    [[ $(resident "$TEST_DIR/dst.qcow2") -lt $((4 * MiB)) ]]
    qemu-img check "$TEST_DIR/dst.qcow2"
    qemu-img compare -f raw -F qcow2 "$TEST_DIR/src.raw" "$TEST_DIR/dst.qcow2"
    # and back, into an unaligned raw file: its last partial block too
    evict "$TEST_DIR/dst.qcow2"
    "$DISKIMG" convert -f qcow2 -O raw "$TEST_DIR/dst.qcow2" "$TEST_DIR/back.raw"
    cmp "$TEST_DIR/src.raw" "$TEST_DIR/back.raw"
}

@test "convert: a cold source leaves the page cache once read; -T writeback keeps it" {
    make_data "$TEST_DIR/src.raw" $SIZE_MIB 1536
    evict "$TEST_DIR/src.raw"
    [[ $(resident "$TEST_DIR/src.raw") -eq 0 ]]
    "$DISKIMG" convert -f raw -O raw "$TEST_DIR/src.raw" "$TEST_DIR/a.raw"
    local after_default after_writeback
    after_default=$(resident "$TEST_DIR/src.raw")
    evict "$TEST_DIR/src.raw"
    "$DISKIMG" convert -T writeback -f raw -O raw "$TEST_DIR/src.raw" "$TEST_DIR/b.raw"
    after_writeback=$(resident "$TEST_DIR/src.raw")
    echo "source resident after: default $after_default, -T writeback $after_writeback"
    # what is left: readahead past the last read, a folio at an edge
    [[ $after_default -lt $((16 * MiB)) ]]
    [[ $after_writeback -gt $((64 * MiB)) ]]
    cmp "$TEST_DIR/src.raw" "$TEST_DIR/a.raw"
    cmp "$TEST_DIR/src.raw" "$TEST_DIR/b.raw"
}

@test "convert: a cached source stays cached and converts the same" {
    make_data "$TEST_DIR/src.raw" $SIZE_MIB
    cat "$TEST_DIR/src.raw" > /dev/null
    [[ $(resident "$TEST_DIR/src.raw") -eq $((SIZE_MIB * MiB)) ]]
    "$DISKIMG" convert -f raw -O qcow2 "$TEST_DIR/src.raw" "$TEST_DIR/dst.qcow2"
    [[ $(resident "$TEST_DIR/src.raw") -eq $((SIZE_MIB * MiB)) ]] # still all there
    qemu-img compare -f raw -F qcow2 "$TEST_DIR/src.raw" "$TEST_DIR/dst.qcow2"
}

@test "convert: a partly cached qcow2 source with a backing file reads right" {
    make_data "$TEST_DIR/base.raw" 32
    qemu-img convert -f raw -O qcow2 "$TEST_DIR/base.raw" "$TEST_DIR/base.qcow2"
    qemu-img create -q -f qcow2 -b base.qcow2 -F qcow2 "$TEST_DIR/top.qcow2"
    qemu-io -f qcow2 -c 'write -P 0x5a 1M 3M' -c 'write -P 0xa5 20M 5M' "$TEST_DIR/top.qcow2" > /dev/null
    evict "$TEST_DIR/base.qcow2"
    evict "$TEST_DIR/top.qcow2"
    dd if="$TEST_DIR/base.qcow2" of=/dev/null bs=64k count=100 status=none # cache a part
    "$DISKIMG" convert -f qcow2 -O raw "$TEST_DIR/top.qcow2" "$TEST_DIR/out.raw"
    qemu-img compare -f qcow2 -F raw "$TEST_DIR/top.qcow2" "$TEST_DIR/out.raw"
    "$DISKIMG" convert -f qcow2 -O qcow2 "$TEST_DIR/top.qcow2" "$TEST_DIR/out.qcow2"
    qemu-img check "$TEST_DIR/out.qcow2"
    qemu-img compare -f qcow2 -F qcow2 "$TEST_DIR/top.qcow2" "$TEST_DIR/out.qcow2"
}

@test "convert -c streams too and its output is valid" {
    # compressible, larger than the write-behind window when compressed
    "$PYTHON3" -c '
import os, sys
with open(sys.argv[1], "wb") as f:
    for i in range(64):
        f.write((os.urandom(16 << 10) + bytes(16 << 10)) * 32)' "$TEST_DIR/src.raw"
    "$DISKIMG" convert -c -f raw -O qcow2 "$TEST_DIR/src.raw" "$TEST_DIR/c.qcow2"
    qemu-img check "$TEST_DIR/c.qcow2"
    qemu-img compare -f raw -F qcow2 "$TEST_DIR/src.raw" "$TEST_DIR/c.qcow2"
}

@test "convert -t unsafe does not stream: the target stays in the page cache" {
    make_data "$TEST_DIR/src.raw" 48
    "$DISKIMG" convert -t unsafe -f raw -O raw "$TEST_DIR/src.raw" "$TEST_DIR/u.raw"
    [[ $(resident "$TEST_DIR/u.raw") -gt $((32 * MiB)) ]]
    cmp "$TEST_DIR/src.raw" "$TEST_DIR/u.raw"
}

# no_odirect CMD...: run CMD where every open() with O_DIRECT fails with
# EINVAL, as on a file system without direct I/O (tests/preload/no-odirect.c).
no_odirect() {
    [[ -n "${DISKIMG_NO_ODIRECT_LIB:-}" ]] || DISKIMG_NO_ODIRECT_LIB=$BATS_TEST_DIRNAME/../../build/tests/no-odirect.so
    # (ASan wants to be first in the list; the shim only wraps open)
    LD_PRELOAD=$DISKIMG_NO_ODIRECT_LIB ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0 "$@"
}

@test "convert: the defaults need no O_DIRECT; -t none or -T none without it fails and leaves no target" {
    make_data "$TEST_DIR/src.raw" 4 1536
    no_odirect "$DISKIMG" convert -f raw -O qcow2 "$TEST_DIR/src.raw" "$TEST_DIR/dst.qcow2"
    qemu-img compare -f raw -F qcow2 "$TEST_DIR/src.raw" "$TEST_DIR/dst.qcow2"
    run no_odirect "$DISKIMG" convert -t none -f raw -O raw "$TEST_DIR/src.raw" "$TEST_DIR/none.raw"
    [[ $status -eq 1 ]]
    [[ $output == *"none.raw: the file system does not support O_DIRECT"* ]]
    [[ ! -e "$TEST_DIR/none.raw" ]] # the target it created is removed
    run no_odirect "$DISKIMG" convert -T none -f raw -O raw "$TEST_DIR/src.raw" "$TEST_DIR/none.raw"
    [[ $status -eq 1 ]]
    [[ $output == *"src.raw: the file system does not support O_DIRECT"* ]]
    [[ ! -e "$TEST_DIR/none.raw" ]]
}

@test "compare: cold images leave the page cache once read; -T writeback keeps them" {
    make_data "$TEST_DIR/a.raw" $SIZE_MIB 1536
    cp "$TEST_DIR/a.raw" "$TEST_DIR/b.raw"
    evict "$TEST_DIR/a.raw"
    evict "$TEST_DIR/b.raw"
    run "$DISKIMG" compare "$TEST_DIR/a.raw" "$TEST_DIR/b.raw"
    [[ $status -eq 0 ]]
    [[ $(resident "$TEST_DIR/a.raw") -lt $((16 * MiB)) ]]
    [[ $(resident "$TEST_DIR/b.raw") -lt $((16 * MiB)) ]]
    run "$DISKIMG" compare -T writeback "$TEST_DIR/a.raw" "$TEST_DIR/b.raw"
    [[ $status -eq 0 ]]
    [[ $(resident "$TEST_DIR/a.raw") -gt $((64 * MiB)) ]]
    # a difference in the cold part is still found, at the right offset
    # (the complement of the random byte there: a fixed one would match it
    # one time in 256)
    local at=$((50 * MiB + 17)) byte
    byte=$(od -An -tu1 -j "$at" -N1 "$TEST_DIR/a.raw" | tr -d ' ')
    printf "\\$(printf %03o $((255 - byte)))" |
        dd of="$TEST_DIR/b.raw" bs=1 seek="$at" conv=notrunc status=none
    evict "$TEST_DIR/a.raw"
    evict "$TEST_DIR/b.raw"
    run "$DISKIMG" compare "$TEST_DIR/a.raw" "$TEST_DIR/b.raw"
    assert_failure 1
    assert_output --partial "offset $((50 * MiB + 17))"
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

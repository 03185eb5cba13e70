#!/usr/bin/env bats
# Persistent dirty bitmaps: "diskimg info" lists them as qemu-img does,
# "diskimg serve -B NAME" offers qemu:dirty-bitmap:NAME exactly as qemu-nbd
# does (compared extent by extent with nbdinfo and qemu-img map), and
# every write through diskimg is recorded in the enabled bitmaps, which a
# clean exit saves consistent and a kill -9 leaves in use, as qemu does.

load '../helpers'
load 'lib'
load 'qcow2-lib'

setup() {
    require_tool qemu-img qemu-io qemu-nbd nbdinfo jq
    setup_test
    IMG=$TEST_DIR/bm.qcow2
}

teardown() {
    kill_extra_servers
    cleanup_test
}

# make_bitmap_image [SIZE]: enabled bitmap b0 (64k granularity) sees two
# writes; disabled bitmap b1 (512 B granularity) was cleared and sees none;
# b2 (enabled, 4k) is added after the first write, so it sees only the second.
make_bitmap_image() {
    qemu-img create -q -f qcow2 "$IMG" "${1:-64M}"
    qemu-img bitmap --add "$IMG" b0
    qemu-img bitmap --add -g 512 --disable "$IMG" b1
    qemu-io -f qcow2 -c 'write -P 1 1M 64k' "$IMG" >/dev/null
    qemu-img bitmap --add -g 4096 "$IMG" b2
    qemu-io -f qcow2 -c 'write -P 2 10M 5k' -c 'write -P 3 63M 512' "$IMG" >/dev/null
}

# bitmap_flags IMAGE NAME: the flags qemu-img info lists for a bitmap.
bitmap_flags() {
    qemu-img info --output=json "$1" |
        jq -r --arg n "$2" '.["format-specific"].data.bitmaps[] | select(.name == $n) | .flags | join(",")'
}

# map_of URI CONTEXT: nbdinfo's map of one context.
map_of() {
    nbdinfo --map="$2" "$1"
}

@test "info lists bitmaps with the fields and layout of qemu-img info" {
    make_bitmap_image
    diff -u <(qemu-img info --output=json "$IMG") <("$DISKIMG" info --output=json "$IMG")
    diff -u <(qemu-img info "$IMG" | grep -v '^disk size') <("$DISKIMG" info "$IMG" | grep -v '^disk size')
}

@test "serve -B offers qemu:dirty-bitmap contexts that match qemu-nbd extent for extent" {
    make_bitmap_image
    start_server -r -t -B b0 -B b1 -B b2 "$IMG"
    qemu-nbd -r -t -B b0 -B b1 -B b2 -k "$TEST_DIR/q.sock" "$IMG" 2>>"$SERVER_LOG" &
    EXTRA_PIDS+=("$!")
    wait_until 10 unix_listening "$TEST_DIR/q.sock"
    local quri="nbd+unix:///?socket=$TEST_DIR/q.sock" b
    for b in b0 b1 b2; do
        run map_of "$URI" "qemu:dirty-bitmap:$b"
        assert_success
        [[ -n "$output" ]]
        diff -u <(map_of "$quri" "qemu:dirty-bitmap:$b") <(printf '%s\n' "$output")
    done
    # Exactly the ranges each bitmap saw.
    run map_of "$URI" qemu:dirty-bitmap:b0
    assert_line --regexp '^ +1048576 +65536 +1 +dirty$'
    assert_line --regexp '^ +10485760 +65536 +1 +dirty$'
    run map_of "$URI" qemu:dirty-bitmap:b1
    assert_output --regexp '^ +0 +67108864 +0 +clean$'
    run map_of "$URI" qemu:dirty-bitmap:b2
    refute_line --regexp '^ +1048576 .*dirty$'
    assert_line --regexp '^ +10485760 +8192 +1 +dirty$'
    assert_line --regexp '^ +66060288 +4096 +1 +dirty$'
    # The export lists every context, as qemu-nbd's does.
    run bash -c "nbdinfo --json '$URI' | jq -r '.exports[0].contexts[]'"
    assert_success
    assert_line qemu:dirty-bitmap:b0
    assert_line qemu:dirty-bitmap:b2
    assert_line base:allocation
}

@test "qemu-img map reads a bitmap through x-dirty-bitmap as from qemu-nbd" {
    make_bitmap_image
    start_server -r -t -B b2 "$IMG"
    qemu-nbd -r -t -B b2 -k "$TEST_DIR/q.sock" "$IMG" 2>>"$SERVER_LOG" &
    EXTRA_PIDS+=("$!")
    wait_until 10 unix_listening "$TEST_DIR/q.sock"
    local opts=driver=nbd,server.type=unix,x-dirty-bitmap=qemu:dirty-bitmap:b2,server.path=
    diff -u <(qemu-img map --output=json --image-opts "${opts}$TEST_DIR/q.sock") \
        <(qemu-img map --output=json --image-opts "${opts}$SOCK")
}

@test "block status of a bitmap honours REQ_ONE, offsets and ranges" {
    require_nbd_python
    make_bitmap_image
    start_server -r -t -B b2 "$IMG"
    py "$URI" <<'EOF'
import nbd, sys
h = nbd.NBD()
h.add_meta_context("qemu:dirty-bitmap:b2")
h.connect_uri(sys.argv[1])
got = []
def cb(meta, off, ents, err):
    got.append((meta, off, list(ents)))
    return 0
# From inside the dirty run at 10M (4k granularity: 8k dirty from 10M).
h.block_status(1 << 20, 10 * 2**20 + 4096, cb)
assert got[-1][0] == "qemu:dirty-bitmap:b2", got
assert got[-1][2][:4] == [4096, 1, (1 << 20) - 4096, 0], got[-1]
h.block_status(1 << 20, 0, cb, flags=nbd.CMD_FLAG_REQ_ONE)
assert got[-1][2] == [1 << 20, 0], got[-1]
# The last, partial range of the disk.
h.block_status(512, 63 * 2**20, cb)
assert got[-1][2] == [512, 1], got[-1]
EOF
}

# dirty_map URI NAME: the dirty extents of a bitmap, "offset length" a line.
dirty_map() {
    nbdinfo --map="qemu:dirty-bitmap:$2" "$1" | awk '$3 == 1 { print $1, $2 }'
}

@test "serve records writes, zeroes and discards in enabled bitmaps, live and on exit" {
    qemu-img create -q -f qcow2 "$IMG" 64M
    qemu-img bitmap --add "$IMG" b0
    qemu-img bitmap --add -g 4096 "$IMG" b4
    qemu-img bitmap --add --disable "$IMG" bd
    start_server -t --discard=unmap -B b4 "$IMG"
    qemu-io -f raw -c 'write -P 1 1M 5k' -c 'write -z 10M 64k' -c 'discard 20M 128k' \
        -c 'write -P 2 63M 512' "$URI" >/dev/null
    # The export shows the session's own writes, as qemu-nbd's does.
    run dirty_map "$URI" b4
    assert_success
    assert_output "$(printf '%s\n' '1048576 8192' '10485760 65536' '20971520 131072' '66060288 4096')"
    # Open for writing: the enabled bitmaps are in use on disk meanwhile.
    [[ $(qemu-img info -U --output=json "$IMG" | jq -r '.["format-specific"].data.bitmaps[0].flags | join(",")') == in-use,auto ]]
    stop_server
    [[ $SERVER_STATUS -eq 0 ]]
    qemu_check_clean "$IMG"
    [[ $(bitmap_flags "$IMG" b0) == auto ]]
    [[ $(bitmap_flags "$IMG" b4) == auto ]]
    [[ $(bitmap_flags "$IMG" bd) == "" ]]
    # qemu-nbd reads exactly the written ranges, at each granularity.
    run qemu_dirty "$IMG" b0
    assert_output "$(printf '%s\n' '1048576 65536' '10485760 65536' '20971520 131072' '66060288 65536')"
    run qemu_dirty "$IMG" b4
    assert_output "$(printf '%s\n' '1048576 8192' '10485760 65536' '20971520 131072' '66060288 4096')"
    [[ -z $(qemu_dirty "$IMG" bd) ]]
    # A second session adds to what the first saved; without -t the
    # server exits when its last client goes, and saves them then.
    start_server "$IMG"
    qemu-io -f raw -c 'write -P 3 30M 4k' "$URI" >/dev/null
    wait_exit "$SERVER_PID" 10
    [[ $EXIT_STATUS -eq 0 ]]
    SERVER_PID=
    [[ $(bitmap_flags "$IMG" b4) == auto ]]
    qemu_check_clean "$IMG"
    # A third, ended by SIGINT.
    start_server -t "$IMG"
    qemu-io -f raw -c 'write -P 3 40M 4k' "$URI" >/dev/null
    stop_server INT
    [[ $(bitmap_flags "$IMG" b4) == auto ]]
    qemu_check_clean "$IMG"
    run qemu_dirty "$IMG" b4
    assert_line '41943040 4096'
    assert_line '31457280 4096'
    assert_line '1048576 8192'
}

@test "concurrent writers over several connections all land in the bitmap" {
    require_tool nbdcopy
    qemu-img create -q -f raw "$TEST_DIR/src.raw" 32M
    local o script=()
    for o in 0 1 3 4 5 9 17 18 31; do
        script+=(-c "write -P $((o + 1)) ${o}M 300k")
    done
    qemu-io -f raw "${script[@]}" "$TEST_DIR/src.raw" >/dev/null
    qemu-img create -q -f qcow2 "$IMG" 32M
    qemu-img bitmap --add -g 4096 "$IMG" b
    start_server -t "$IMG"
    nbdcopy --destination-is-zero --connections=4 --requests=16 --request-size=65536 \
        "$TEST_DIR/src.raw" "$URI"
    stop_server
    qemu-img compare -f raw -F qcow2 "$TEST_DIR/src.raw" "$IMG"
    # Exactly the data nbdcopy wrote (300k is a multiple of 4k).
    diff <(qemu-img map --output=json -f raw "$TEST_DIR/src.raw" |
        jq -r '.[] | select(.data) | "\(.start) \(.length)"') <(qemu_dirty "$IMG" b)
}

@test "a kill -9 leaves enabled bitmaps in use; qemu-img check stays clean" {
    qemu-img create -q -f qcow2 "$IMG" 16M
    qemu-img bitmap --add "$IMG" b0
    start_server -t "$IMG"
    qemu-io -f raw -c 'write -P 1 1M 64k' "$URI" >/dev/null
    stop_server KILL
    # A crash may leak clusters (exit 3), never more.
    run qemu-img check "$IMG"
    [[ $status -eq 0 || $status -eq 3 ]]
    refute_output --partial ERROR
    qemu-img check -q -r leaks "$IMG"
    [[ $(bitmap_flags "$IMG" b0) == in-use,auto ]]
    # An in-use bitmap stays so (qemu's rule): later sessions leave it.
    start_server "$IMG"
    qemu-io -f raw -c 'write -P 1 2M 64k' "$URI" >/dev/null
    stop_server
    qemu_check_clean "$IMG"
    [[ $(bitmap_flags "$IMG" b0) == in-use,auto ]]
    qemu-img bitmap --remove "$IMG" b0
    qemu_check_clean "$IMG"
}

@test "a disabled bitmap may be exported read-write" {
    make_bitmap_image
    start_server -t -B b1 "$IMG"
    run map_of "$URI" qemu:dirty-bitmap:b1
    assert_success
    assert_output --regexp 'clean$'
}

@test "unknown bitmaps, raw images, in-use bitmaps and snapshots are refused with one line" {
    make_bitmap_image
    run "$DISKIMG" serve -r -k "$SOCK" -B nope "$IMG"
    assert_failure 1
    assert_output --partial "no bitmap named 'nope'"
    qemu-img create -q -f raw "$TEST_DIR/r.img" 1M
    run "$DISKIMG" serve -r -k "$SOCK" -B b0 "$TEST_DIR/r.img"
    assert_failure 1
    assert_output --partial "has no persistent bitmaps"
    qemu-img snapshot -c s1 "$IMG"
    run "$DISKIMG" serve -k "$SOCK" -l s1 -B b0 "$IMG"
    assert_failure 1
    assert_output --partial "not a snapshot"
    # Writing through diskimg records the writes: b0 stays consistent, and
    # convert -n of a zeroed 1 MiB image dirties what it zeroes there.
    "$DISKIMG" convert -n -f raw -O qcow2 "$TEST_DIR/r.img" "$IMG"
    [[ $(bitmap_flags "$IMG" b0) == auto ]]
    run qemu_dirty "$IMG" b0
    assert_line --regexp '^(0 1114112|65536 1048576)$'
    run "$DISKIMG" serve -r -k "$SOCK" -B b1 --export name=a,file="$IMG"
    assert_failure 2
    assert_output --partial "-B applies to IMAGE"
}

@test "opening for writing without writing leaves the bitmaps untouched" {
    make_bitmap_image
    cp "$IMG" "$TEST_DIR/before.qcow2"
    start_server "$IMG"
    qemu-io -f raw -r -c 'read 0 1M' "$URI" >/dev/null
    stop_server
    cmp "$IMG" "$TEST_DIR/before.qcow2"
}

@test "resize resizes bitmaps as qemu-img does; a corrupt bitmap directory is ignored, not fatal" {
    make_bitmap_image
    cp "$IMG" "$TEST_DIR/q.qcow2"
    "$DISKIMG" resize -q "$IMG" +1M
    qemu-img resize -q "$TEST_DIR/q.qcow2" +1M
    qemu_check_clean "$IMG"
    diff <(qemu-img info --output=json "$TEST_DIR/q.qcow2" | jq '.["format-specific"], .["virtual-size"]') \
        <(qemu-img info --output=json "$IMG" | jq '.["format-specific"], .["virtual-size"]')
    local b
    for b in b0 b1 b2; do
        [[ $(qemu_dirty "$IMG" $b) == "$(qemu_dirty "$TEST_DIR/q.qcow2" $b)" ]]
    done
    "$DISKIMG" resize -q --shrink "$IMG" 64M
    [[ $(qemu_dirty "$IMG" b2) == $'10485760 8192\n66060288 4096' ]]
    qemu_check_clean "$IMG"
    # Point the bitmap directory past the end of the file.
    "$PYTHON3" - "$IMG" <<'EOF'
import struct, sys
f = open(sys.argv[1], "r+b")
h = f.read(4096)
off = struct.unpack(">I", h[100:104])[0]
while True:
    t, l = struct.unpack(">II", h[off:off + 8])
    assert t != 0, "no bitmaps extension"
    if t == 0x23852875:
        f.seek(off + 8 + 16)
        f.write(struct.pack(">Q", 1 << 40))
        break
    off += 8 + ((l + 7) & ~7)
EOF
    run "$DISKIMG" serve -r -k "$SOCK" -B b0 "$IMG"
    assert_failure 1
    assert_output --partial "bitmaps extension ignored"
    # The data is still served, and a write drops the broken extension the
    # way the spec lets a program without bitmap support do.
    start_server "$IMG"
    qemu-io -f raw -c 'write -P 7 0 4k' "$URI" >/dev/null
    stop_server
    run qemu-img info --output=json "$IMG"
    assert_success
    refute_output --partial '"bitmaps"'
}

#!/usr/bin/env bats
# diskimg bitmap and convert --bitmaps, judged by qemu: qemu-img info
# lists what we wrote, qemu-img check finds it clean, and qemu-nbd -B reads
# the bits back (nbdinfo --map); bad input gets one line, qemu-img's exit
# code, and leaves the image as it was.

load '../helpers'
bats_require_minimum_version 1.5.0

setup() {
    require_tool qemu-img qemu-io qemu-nbd nbdinfo jq
    setup_test
    IMG=$TEST_DIR/a.qcow2
}
teardown() { cleanup_test; }

# flags IMAGE: "name:granularity:flags" per bitmap, as qemu-img info lists them.
flags() {
    qemu-img info --output=json "$1" |
        jq -r '.["format-specific"].data.bitmaps // [] | .[] | "\(.name):\(.granularity):\(.flags | join(","))"'
}

check_clean() {
    run qemu-img check "$1"
    assert_success
    assert_output --partial "No errors were found"
}

# leave_in_use IMAGE: IMAGE's enabled bitmaps marked in use, as a writer
# killed while it had the image open leaves them (our server, written to
# once, then SIGKILLed); the clusters that write leaked are reclaimed.
leave_in_use() {
    "$DISKIMG" serve -t -k "$SOCK" "$1" 2>/dev/null &
    SERVER_PID=$!
    wait_for_server
    qemu-io -f raw -c 'write 0 4k' "$URI" >/dev/null
    stop_server KILL
    qemu-img check -q -r leaks "$1"
}

@test "add, disable, enable, clear, merge and remove, read back by qemu" {
    qemu-img create -q -f qcow2 "$IMG" 64M
    "$DISKIMG" bitmap --add "$IMG" b0
    "$DISKIMG" bitmap --add -g 4k --disable "$IMG" b1
    "$DISKIMG" bitmap --add -g 2G "$IMG" big
    [[ $(flags "$IMG") == $'b0:65536:auto\nb1:4096:\nbig:2147483648:auto' ]]
    check_clean "$IMG"
    # qemu records writes in what we made; we merge them and qemu reads ours.
    qemu-io -f qcow2 -c 'write -P 1 1M 5k' -c 'write -P 2 40M 64k' "$IMG" >/dev/null
    [[ $(qemu_dirty "$IMG" b0) == $'1048576 65536\n41943040 65536' ]]
    "$DISKIMG" bitmap --merge b0 --enable "$IMG" b1
    [[ $(flags "$IMG") == $'b0:65536:auto\nb1:4096:auto\nbig:2147483648:auto' ]]
    [[ $(qemu_dirty "$IMG" b1) == $'1048576 65536\n41943040 65536' ]]
    # Several operations in one call, in order; a fine bitmap merged into a
    # coarse one covers whole coarse bits.
    "$DISKIMG" bitmap --add -g 512 "$IMG" fine
    qemu-io -f qcow2 -c 'write -P 3 3M 512' "$IMG" >/dev/null
    "$DISKIMG" bitmap --clear --merge fine --disable "$IMG" b0
    [[ $(qemu_dirty "$IMG" b0) == '3145728 65536' ]]
    [[ $(qemu_dirty "$IMG" fine) == '3145728 512' ]]
    "$DISKIMG" bitmap --remove "$IMG" fine
    "$DISKIMG" bitmap --remove "$IMG" big
    [[ $(flags "$IMG") == $'b0:65536:\nb1:4096:auto' ]]
    check_clean "$IMG"
    # Merge from another image (-b, -F).
    qemu-img create -q -f qcow2 "$TEST_DIR/src.qcow2" 64M
    qemu-img bitmap --add -g 1M "$TEST_DIR/src.qcow2" s
    qemu-io -f qcow2 -c 'write 20M 4k' "$TEST_DIR/src.qcow2" >/dev/null
    "$DISKIMG" bitmap --add --merge s -b "$TEST_DIR/src.qcow2" -F qcow2 "$IMG" m
    [[ $(qemu_dirty "$IMG" m) == '20971520 1048576' ]]
    # Removing the last bitmap drops the extension and autoclear bit 0.
    for b in b0 b1 m; do "$DISKIMG" bitmap --remove "$IMG" "$b"; done
    [[ -z $(flags "$IMG") ]]
    [[ $(od -An -tx1 -j 95 -N 1 "$IMG" | tr -d ' ') == 00 ]]
    check_clean "$IMG"
}

@test "the default granularity is the cluster size within 4k..64k, as qemu-img's" {
    local cs
    for cs in 512 4k 64k 2M; do
        qemu-img create -q -f qcow2 -o cluster_size=$cs "$TEST_DIR/$cs.qcow2" 8M
        "$DISKIMG" bitmap --add "$TEST_DIR/$cs.qcow2" d
        qemu-img create -q -f qcow2 -o cluster_size=$cs "$TEST_DIR/q$cs.qcow2" 8M
        qemu-img bitmap --add "$TEST_DIR/q$cs.qcow2" d
        [[ $(flags "$TEST_DIR/$cs.qcow2") == "$(flags "$TEST_DIR/q$cs.qcow2")" ]]
    done
}

@test "bad input: one line, qemu-img's exit code, the image unchanged" {
    qemu-img create -q -f qcow2 "$IMG" 16M
    qemu-img bitmap --add "$IMG" b0
    cp "$IMG" "$TEST_DIR/before"
    local args
    while IFS='|' read -r args msg; do
        # shellcheck disable=SC2086
        run --separate-stderr "$DISKIMG" bitmap $args "$IMG" b0
        [[ $status -eq 1 ]] || { echo "$args: exit $status" >&2; false; }
        [[ ${#stderr_lines[@]} -eq 1 && $stderr == *"$msg"* ]] || { echo "$args: $stderr" >&2; false; }
        cmp "$IMG" "$TEST_DIR/before"
    done <<'LIST'
--add|Operation add on bitmap b0 failed: Bitmap already exists: b0
--merge nope|Operation merge on bitmap b0 failed: Dirty bitmap 'nope' not found
--add -g 1000 --remove|Granularity must be power of 2 and at least 512
--add -g 256|Granularity must be power of 2 and at least 512
--add -g 4G|Granularity must be power of 2 and at least 512
--add -g abc|invalid granularity 'abc'
LIST
    run --separate-stderr "$DISKIMG" bitmap --remove "$IMG" nope
    assert_failure 1
    [[ $stderr == "diskimg: Operation remove on bitmap nope failed: Dirty bitmap 'nope' not found" ]]
    # Usage: exit 2, with qemu-img's rule in the message.
    run "$DISKIMG" bitmap "$IMG" b0
    assert_failure 2
    assert_output --partial "Need at least one of --add"
    run "$DISKIMG" bitmap --remove -g 64k "$IMG" b0
    assert_failure 2
    assert_output --partial "granularity only supported with --add"
    run "$DISKIMG" bitmap --remove -b "$IMG" "$IMG" b0
    assert_failure 2
    assert_output --partial "only supported with --merge"
    cmp "$IMG" "$TEST_DIR/before"
    # A raw image stores no bitmaps; an in-use bitmap can only be removed.
    qemu-img create -q -f raw "$TEST_DIR/r.raw" 1M
    run --separate-stderr "$DISKIMG" bitmap --add -f raw "$TEST_DIR/r.raw" x
    assert_failure 1
    [[ $stderr == *"cannot store persistent bitmaps"* && ${#stderr_lines[@]} -eq 1 ]]
    leave_in_use "$IMG"
    [[ $(flags "$IMG") == b0:65536:in-use,auto ]]
    run --separate-stderr "$DISKIMG" bitmap --clear "$IMG" b0
    assert_failure 1
    [[ $stderr == *"Bitmap 'b0' is inconsistent and cannot be used"* ]]
    cp "$IMG" "$TEST_DIR/before"
    run "$DISKIMG" resize "$IMG" +1M
    assert_failure 1
    assert_output --partial "bitmap 'b0' is inconsistent: remove it first"
    cmp "$IMG" "$TEST_DIR/before"
    "$DISKIMG" bitmap --remove "$IMG" b0
    [[ -z $(flags "$IMG") ]]
    check_clean "$IMG"
}

@test "convert --bitmaps copies bitmaps with their bits; in-use ones refuse or are skipped" {
    qemu-img create -q -f qcow2 "$IMG" 32M
    qemu-img bitmap --add "$IMG" b0
    qemu-img bitmap --add -g 4096 --disable "$IMG" b1
    qemu-io -f qcow2 -c 'write -P 1 1M 5k' "$IMG" >/dev/null
    qemu-img bitmap --merge b0 "$IMG" b1
    qemu-io -f qcow2 -c 'write -P 2 9M 4k' "$IMG" >/dev/null
    "$DISKIMG" convert --bitmaps -O qcow2 "$IMG" "$TEST_DIR/out.qcow2"
    [[ $(flags "$TEST_DIR/out.qcow2") == "$(flags "$IMG")" ]]
    [[ $(qemu_dirty "$TEST_DIR/out.qcow2" b0) == "$(qemu_dirty "$IMG" b0)" ]]
    [[ $(qemu_dirty "$TEST_DIR/out.qcow2" b1) == "$(qemu_dirty "$IMG" b1)" ]]
    check_clean "$TEST_DIR/out.qcow2"
    qemu-img compare "$IMG" "$TEST_DIR/out.qcow2"
    # Without --bitmaps none are copied.
    "$DISKIMG" convert -O qcow2 "$IMG" "$TEST_DIR/none.qcow2"
    [[ -z $(flags "$TEST_DIR/none.qcow2") ]]
    # Bad combinations, as qemu-img refuses them; no output is left.
    run "$DISKIMG" convert --bitmaps -O raw "$IMG" "$TEST_DIR/o.raw"
    assert_failure 1
    assert_output --partial "Format driver 'raw' does not support bitmaps"
    [[ ! -e $TEST_DIR/o.raw ]]
    run "$DISKIMG" convert --skip-broken-bitmaps -O qcow2 "$IMG" "$TEST_DIR/o.qcow2"
    assert_failure 2
    assert_output --partial "requires --bitmaps"
    # An in-use bitmap: refused, or skipped with a warning.
    leave_in_use "$IMG"
    run "$DISKIMG" convert --bitmaps -O qcow2 "$IMG" "$TEST_DIR/o.qcow2"
    assert_failure 1
    assert_output --partial "Cannot copy inconsistent bitmap 'b0'"
    [[ ! -e $TEST_DIR/o.qcow2 ]]
    run "$DISKIMG" convert --bitmaps --skip-broken-bitmaps -O qcow2 "$IMG" "$TEST_DIR/o.qcow2"
    assert_success
    assert_output --partial "Skipping inconsistent bitmap 'b0'"
    [[ $(flags "$TEST_DIR/o.qcow2") == b1:4096: ]]
    [[ $(qemu_dirty "$TEST_DIR/o.qcow2" b1) == "$(qemu_dirty "$IMG" b1)" ]]
    # A name read from an image is escaped in messages; a clash fails.
    qemu-img create -q -f qcow2 "$TEST_DIR/e1.qcow2" 1M
    qemu-img bitmap --add "$TEST_DIR/e1.qcow2" $'a\e[31m'
    cp "$TEST_DIR/e1.qcow2" "$TEST_DIR/e2.qcow2"
    run "$DISKIMG" convert -n --bitmaps -O qcow2 "$TEST_DIR/e1.qcow2" "$TEST_DIR/e2.qcow2"
    assert_failure 1
    assert_output --partial 'Bitmap already exists: a\x1b[31m'
    [[ $output != *$'\e'* ]]
}

@test "commit records into the base's bitmaps as qemu-img commit does; locks; --image-opts" {
    local who
    for who in qemu ours; do
        qemu-img create -q -f qcow2 "$TEST_DIR/$who-base.qcow2" 16M
        qemu-img bitmap --add "$TEST_DIR/$who-base.qcow2" bb
        qemu-img create -q -f qcow2 -b "$who-base.qcow2" -F qcow2 "$TEST_DIR/$who-top.qcow2"
        qemu-img bitmap --add -g 4k "$TEST_DIR/$who-top.qcow2" tb
        qemu-io -f qcow2 -c 'write 2M 5k' -c 'write -z 9M 64k' "$TEST_DIR/$who-top.qcow2" >/dev/null
    done
    qemu-img commit -q "$TEST_DIR/qemu-top.qcow2"
    "$DISKIMG" commit -q "$TEST_DIR/ours-top.qcow2"
    [[ $(qemu_dirty "$TEST_DIR/ours-base.qcow2" bb) == "$(qemu_dirty "$TEST_DIR/qemu-base.qcow2" bb)" ]]
    [[ $(qemu_dirty "$TEST_DIR/ours-top.qcow2" tb) == "$(qemu_dirty "$TEST_DIR/qemu-top.qcow2" tb)" ]]
    [[ $(qemu_dirty "$TEST_DIR/ours-base.qcow2" bb) == $'2097152 65536\n9437184 65536' ]]
    [[ $(flags "$TEST_DIR/ours-base.qcow2") == bb:65536:auto ]]
    check_clean "$TEST_DIR/ours-base.qcow2"
    check_clean "$TEST_DIR/ours-top.qcow2"
    # amend -o size= resizes the bitmaps too, as qemu-img amend does.
    "$DISKIMG" amend -o size=32M "$TEST_DIR/ours-base.qcow2"
    qemu-img amend -o size=32M "$TEST_DIR/qemu-base.qcow2"
    [[ $(qemu_dirty "$TEST_DIR/ours-base.qcow2" bb) == "$(qemu_dirty "$TEST_DIR/qemu-base.qcow2" bb)" ]]
    [[ $(qemu-img info --output=json "$TEST_DIR/ours-base.qcow2" | jq '.["virtual-size"]') == 33554432 ]]
    check_clean "$TEST_DIR/ours-base.qcow2"
    # An image another process writes: exit 5, untouched.
    qemu-img create -q -f qcow2 "$IMG" 8M
    qemu-nbd -t -k "$TEST_DIR/l.sock" "$IMG" 2>/dev/null &
    local pid=$!
    wait_until 10 unix_listening "$TEST_DIR/l.sock"
    # qemu-nbd listens before it opens (and locks) the image; a handshake
    # completes only once it has.
    nbdinfo --size "nbd+unix:///?socket=$TEST_DIR/l.sock" >/dev/null
    run "$DISKIMG" bitmap --add "$IMG" x
    kill "$pid"
    wait "$pid" 2>/dev/null || true
    assert_failure 5
    assert_output --partial "lock"
    [[ -z $(flags "$IMG") ]]
    "$DISKIMG" bitmap --add --image-opts "driver=qcow2,file.filename=$IMG" x
    [[ $(flags "$IMG") == x:65536:auto ]]
}

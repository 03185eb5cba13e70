#!/usr/bin/env bats
# diskimg convert, beyond tests/cli/convert.bats: a target that is the
# source itself (same path, another path, a hard link, a symlink) must be
# refused, never truncated; -p on a terminal and off one; big sparse
# images stay sparse; NBD targets full of old data come out sparse and
# exact; -n into a larger NBD export keeps its tail; SIGINT while writing
# into a slow NBD export.

load '../helpers'
load '../interop/lib'
load '../interop/nbd-servers'

setup() { setup_test; }
teardown() {
    stop_peers
    cleanup_test
}

MiB=1048576
GiB=$((1024 * MiB))

# 4 MiB: data, a hole, written zeroes, data.
make_src() {
    truncate -s 4M "$1"
    make_pattern "$TEST_DIR/pat" $MiB
    dd if="$TEST_DIR/pat" of="$1" bs=64k count=16 conv=notrunc status=none
    dd if=/dev/zero of="$1" bs=64k seek=32 count=8 conv=notrunc status=none
    dd if="$TEST_DIR/pat" of="$1" bs=64k seek=60 count=4 conv=notrunc status=none
}

# refused_onto_itself SRC DST [options]: convert exits 1 with one line and
# SRC is exactly as before.
refused_onto_itself() {
    local src=$1 dst=$2 before
    shift 2
    before=$(md5sum <"$src")
    run --separate-stderr "$DISKIMG" convert "$@" "$src" "$dst"
    if [[ $status -ne 1 || $(printf '%s\n' "$stderr" | wc -l) -ne 1 ]]; then
        echo "convert $* $src $dst: exit $status, stderr '$stderr' (want exit 1, one line)" >&2
        return 1
    fi
    if [[ $(md5sum <"$src") != "$before" ]]; then
        echo "convert $* $src $dst destroyed the source" >&2
        return 1
    fi
}

@test "convert SRC onto itself (same path, other spelling, hard link, symlink) is refused, SRC intact" {
    require_tool qemu-img
    make_src "$TEST_DIR/a.raw"
    cp "$TEST_DIR/a.raw" "$TEST_DIR/orig.raw"
    # qemu-img refuses too (it cannot take the write lock)
    run qemu-img convert -O raw "$TEST_DIR/orig.raw" "$TEST_DIR/orig.raw"
    assert_failure 1
    cmp "$TEST_DIR/a.raw" "$TEST_DIR/orig.raw"

    refused_onto_itself "$TEST_DIR/a.raw" "$TEST_DIR/a.raw"
    refused_onto_itself "$TEST_DIR/a.raw" "$TEST_DIR/./a.raw"
    refused_onto_itself "$TEST_DIR/a.raw" "$TEST_DIR/a.raw" -O qcow2
    ln "$TEST_DIR/a.raw" "$TEST_DIR/hard.raw"
    refused_onto_itself "$TEST_DIR/a.raw" "$TEST_DIR/hard.raw"
    ln -s a.raw "$TEST_DIR/sym.raw"
    refused_onto_itself "$TEST_DIR/a.raw" "$TEST_DIR/sym.raw"
    cmp "$TEST_DIR/a.raw" "$TEST_DIR/orig.raw"
    # a qcow2 source too
    qemu-img convert -O qcow2 "$TEST_DIR/a.raw" "$TEST_DIR/a.qcow2"
    refused_onto_itself "$TEST_DIR/a.qcow2" "$TEST_DIR/a.qcow2" -O qcow2
    run qemu-img compare "$TEST_DIR/orig.raw" "$TEST_DIR/a.qcow2"
    assert_success
}

@test "convert -p on a terminal redraws one line; off a terminal it prints whole lines" {
    require_tool script
    make_pattern "$TEST_DIR/a.raw" $((64 * MiB))
    # on a pseudo-terminal (script), stdout and stderr both go to it
    script -qec "'$DISKIMG' convert -p '$TEST_DIR/a.raw' '$TEST_DIR/tty.raw'" /dev/null \
        >"$TEST_DIR/tty.out"
    cmp "$TEST_DIR/a.raw" "$TEST_DIR/tty.raw"
    grep -q $'\r' "$TEST_DIR/tty.out" || { echo "no carriage return on a tty:" >&2; cat -A "$TEST_DIR/tty.out" >&2; return 1; }
    grep -q '(100.00/100%)' "$TEST_DIR/tty.out"
    # on a pipe: no carriage returns, every line complete, 100% last
    run --separate-stderr "$DISKIMG" convert -p "$TEST_DIR/a.raw" "$TEST_DIR/pipe.raw"
    assert_success
    [[ -z "$output" ]]
    [[ "$stderr" != *$'\r'* ]]
    [[ $(printf '%s\n' "$stderr" | tail -n 1) == *"(100.00/100%)"* ]]
    printf '%s\n' "$stderr" | grep -vE '^ *\([0-9]+\.[0-9]{2}/100%\) +[0-9.]+ MB/s +ETA [0-9]+:[0-9]{2}$' && return 1
    cmp "$TEST_DIR/a.raw" "$TEST_DIR/pipe.raw"
}

@test "convert a 20 GiB sparse image: raw -> qcow2 -> compressed qcow2 -> raw, all sparse and equal" {
    require_tool qemu-img
    truncate -s 20G "$TEST_DIR/big.raw"
    make_pattern "$TEST_DIR/pat" $((3 * MiB))
    dd if="$TEST_DIR/pat" of="$TEST_DIR/big.raw" bs=1M count=1 conv=notrunc status=none
    dd if="$TEST_DIR/pat" of="$TEST_DIR/big.raw" bs=1M seek=15000 count=3 conv=notrunc status=none
    dd if="$TEST_DIR/pat" of="$TEST_DIR/big.raw" bs=4k seek=$((5 * GiB / 4096 + 3)) count=1 conv=notrunc status=none

    run --separate-stderr "$DISKIMG" convert --progress=json -O qcow2 "$TEST_DIR/big.raw" "$TEST_DIR/big.qcow2"
    assert_success
    printf '%s\n' "$stderr" | tail -n 1 | jq -e --argjson t $((20 * GiB)) '.done == true and .total == $t and .bytes == $t'
    run "$DISKIMG" convert -c -O qcow2 "$TEST_DIR/big.qcow2" "$TEST_DIR/bigc.qcow2"
    assert_success
    run "$DISKIMG" convert -O raw "$TEST_DIR/bigc.qcow2" "$TEST_DIR/back.raw"
    assert_success
    local f
    for f in big.qcow2 bigc.qcow2; do
        run qemu-img check "$TEST_DIR/$f"
        assert_success
        run qemu-img compare "$TEST_DIR/big.raw" "$TEST_DIR/$f"
        assert_success
        [[ $(stat -c %s "$TEST_DIR/$f") -lt $((16 * MiB)) ]]
    done
    [[ $(stat -c %s "$TEST_DIR/back.raw") -eq $((20 * GiB)) ]]
    [[ $(du_kib "$TEST_DIR/back.raw") -lt 16384 ]]
    run "$DISKIMG" compare "$TEST_DIR/big.raw" "$TEST_DIR/back.raw"
    assert_success
    qemu-img map --output=json "$TEST_DIR/back.raw" | norm_map >"$TEST_DIR/back.map"
    qemu-img map --output=json "$TEST_DIR/big.raw" | norm_map >"$TEST_DIR/big.map"
    diff "$TEST_DIR/big.map" "$TEST_DIR/back.map"
}

@test "convert into NBD exports full of old data: exact, and the served file ends up sparse" {
    require_tool qemu-nbd
    "$PYTHON3" - "$TEST_DIR/src.raw" <<'EOF'
import sys
M = 1 << 20
with open(sys.argv[1], "wb") as f:
    f.truncate(16 * M)
    f.write(bytes(range(256)) * 4096)       # 1 MiB of data
    f.seek(8 * M); f.write(bytes(2 * M))    # written zeroes
EOF
    make_pattern "$TEST_DIR/d.raw" $((16 * MiB))
    make_pattern "$TEST_DIR/q.raw" $((16 * MiB))
    start_server "$TEST_DIR/d.raw"
    run "$DISKIMG" convert -f raw "$TEST_DIR/src.raw" "$URI"
    assert_success
    wait_exit "$SERVER_PID" 30
    SERVER_PID=
    start_qemu_nbd "$TEST_DIR/q.sock" -f raw "$TEST_DIR/q.raw"
    run "$DISKIMG" convert -f raw "$TEST_DIR/src.raw" "$(unix_uri "$TEST_DIR/q.sock")"
    assert_success
    wait_exit "$PEER_PID" 30
    PEER_PIDS=()
    local f
    for f in d.raw q.raw; do
        cmp "$TEST_DIR/src.raw" "$TEST_DIR/$f"
        # 1 MiB of data in 16 MiB: the zeroes went as WRITE_ZEROES (holes)
        [[ $(du_kib "$TEST_DIR/$f") -lt 4096 ]] || { echo "$f: $(du_kib "$TEST_DIR/$f") KiB" >&2; return 1; }
    done
}

@test "convert -n into an NBD export larger than the source: the source's range replaced, the tail kept" {
    make_src "$TEST_DIR/src.raw"
    make_pattern "$TEST_DIR/exp.raw" $((6 * MiB))
    cp "$TEST_DIR/exp.raw" "$TEST_DIR/exp.orig"
    start_server "$TEST_DIR/exp.raw"
    run "$DISKIMG" convert -n -f raw "$TEST_DIR/src.raw" "$URI"
    assert_success
    wait_exit "$SERVER_PID" 30
    SERVER_PID=
    cmp -n $((4 * MiB)) "$TEST_DIR/src.raw" "$TEST_DIR/exp.raw"
    cmp -i $((4 * MiB)) "$TEST_DIR/exp.orig" "$TEST_DIR/exp.raw"
}

@test "SIGINT while writing into a slow NBD export: exit 130 promptly, the server serves the next client" {
    require_tool nbdkit
    make_pattern "$TEST_DIR/src.raw" $((64 * MiB))
    start_nbdkit "$TEST_DIR/k.sock" --filter=delay memory 64M wdelay=300ms
    local uri
    uri=$(unix_uri "$TEST_DIR/k.sock")
    "$DISKIMG" convert --progress=json -f raw "$TEST_DIR/src.raw" "$uri" 2>"$TEST_DIR/progress" &
    local pid=$!
    wait_until 30 grep -q '"progress"' "$TEST_DIR/progress"
    kill -INT $pid
    wait_exit $pid 30
    [[ $EXIT_STATUS -eq 130 ]] || { echo "exit $EXIT_STATUS" >&2; cat "$TEST_DIR/progress" >&2; return 1; }
    grep -q interrupted "$TEST_DIR/progress"
    ! grep -q '"done": true' "$TEST_DIR/progress"
    # nbdkit is fine and serves another client
    run "$DISKIMG" info "$uri"
    assert_success
    assert_output --partial "virtual size: 64 MiB"
}

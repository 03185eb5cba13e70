#!/usr/bin/env bats
# The seed scenario of issue 4:
#   diskimg convert -p -f raw -O raw -T none -W SRC nbd+unix:///?socket=S
# into diskimg serve (default writeback) and diskimg serve
# --cache=writethrough, next to qemu-img convert into qemu-nbd (and the
# crossed pairs).  Every run is verified afterwards: the server exits,
# then the file it served is compared with SRC byte for byte.

load '../helpers'
load 'lib'
load 'nbd-servers'

setup() { setup_test; }
teardown() {
    stop_peers
    cleanup_test
}

MiB=1048576
SIZE=$((48 * MiB))

# make_seed_src FILE: 48 MiB raw: a realistic mix of incompressible data,
# text-like data, written zeroes, holes and a data tail.
make_seed_src() {
    "$PYTHON3" - "$1" <<'EOF'
import os, sys
M = 1 << 20
with open(sys.argv[1], "wb") as f:
    f.truncate(48 * M)
    f.seek(0); f.write(os.urandom(8 * M))
    f.seek(10 * M); f.write(b"".join(b"line %08d of the seed scenario\n" % i for i in range(200000)))
    f.seek(20 * M); f.write(bytes(4 * M))            # written zeroes
    f.seek(24 * M + 4096); f.write(os.urandom(3 * M + 512))
    f.seek(40 * M + 123 * 512); f.write(os.urandom(M))
    f.seek(48 * M - 65536); f.write(os.urandom(65536))
EOF
}

# target FILE fresh|filled: the served file, sparse or full of other data
# (then the source's holes must reach it as zeroes).
target() {
    if [[ $2 == filled ]]; then
        make_pattern "$1" $SIZE
    else
        truncate -s $SIZE "$1"
    fi
}

# need_odirect: -T none opens SRC with O_DIRECT, which tmpfs refuses.
need_odirect() {
    dd if="$TEST_DIR/src.raw" of=/dev/null bs=4096 count=1 iflag=direct status=none 2>/dev/null ||
        skip "$TEST_DIR does not support O_DIRECT (-T none)"
}

# check_progress FILE: -p on a pipe: whole lines, no carriage returns,
# percentages that end at 100.
check_progress() {
    local f=$1
    [[ -s "$f" ]] || { echo "no progress output" >&2; return 1; }
    if grep -q $'\r' "$f"; then
        echo "carriage returns in non-tty progress:" >&2
        cat -A "$f" >&2
        return 1
    fi
    grep -qE '\(100(\.00)?/100%\)' "$f" || { echo "no 100%:" >&2; cat "$f" >&2; return 1; }
}

# seed_diskimg_into_diskimg fresh|filled [serve options...]
seed_diskimg_into_diskimg() {
    local kind=$1
    shift
    make_seed_src "$TEST_DIR/src.raw"
    need_odirect
    target "$TEST_DIR/dst.raw" "$kind"
    start_server --stats="$TEST_DIR/stats.json" "$@" "$TEST_DIR/dst.raw"
    run --separate-stderr "$DISKIMG" convert -p -f raw -O raw -T none -W "$TEST_DIR/src.raw" "$URI"
    assert_success
    [[ -z "$output" ]]
    printf '%s\n' "$stderr" >"$TEST_DIR/progress"
    check_progress "$TEST_DIR/progress"
    # Without -t the server exits when convert disconnects, flushing.
    wait_exit "$SERVER_PID" 30
    [[ $EXIT_STATUS -eq 0 ]] || { echo "server exit $EXIT_STATUS" >&2; cat "$SERVER_LOG" >&2; return 1; }
    SERVER_PID=
    cmp "$TEST_DIR/src.raw" "$TEST_DIR/dst.raw"
}

@test "seed: diskimg convert -p -T none -W into diskimg serve (writeback, fresh target): exactly one FLUSH, no FUA" {
    seed_diskimg_into_diskimg fresh
    # writeback: convert asks for durability once, at the end
    [[ $(cmd_count "$TEST_DIR/stats.json" FLUSH) -eq 1 ]]
    [[ $(stats_get "$TEST_DIR/stats.json" 'd["fua-requests"]') -eq 0 ]]
    [[ $(stats_get "$TEST_DIR/stats.json" 'd["exports"][0]["cache"]') == writeback ]]
    [[ $(stats_get "$TEST_DIR/stats.json" 'd["exports"][0]["file-flushes"]') -ge 1 ]]
}

@test "seed: diskimg convert -p -T none -W into diskimg serve (writeback, target full of old data)" {
    seed_diskimg_into_diskimg filled
}

@test "seed: diskimg convert -p -T none -W into diskimg serve --cache=writethrough" {
    seed_diskimg_into_diskimg fresh --cache=writethrough
    [[ $(stats_get "$TEST_DIR/stats.json" 'd["exports"][0]["cache"]') == writethrough ]]
    # every write was made durable by the server
    local fua
    fua=$(stats_get "$TEST_DIR/stats.json" 'd["exports"][0]["fua-native"] + d["exports"][0]["fua-emulated"]')
    [[ $fua -ge 1 ]]
}

@test "seed: diskimg convert into diskimg serve --cache=writethrough (target full of old data)" {
    seed_diskimg_into_diskimg filled --cache=writethrough
}

@test "seed: diskimg convert into diskimg serve with several connections (-e 0, multi-conn)" {
    seed_diskimg_into_diskimg filled -e 0
    [[ $(stats_get "$TEST_DIR/stats.json" 'd["connections"]') -ge 2 ]]
}

# seed_into_qemu_nbd TOOL fresh|filled [qemu-nbd options...]: TOOL
# (diskimg or qemu-img) converts into qemu-nbd.
seed_into_qemu_nbd() {
    local tool=$1 kind=$2 uri
    shift 2
    make_seed_src "$TEST_DIR/src.raw"
    need_odirect
    target "$TEST_DIR/dst.raw" "$kind"
    start_qemu_nbd "$TEST_DIR/q.sock" -f raw "$@" "$TEST_DIR/dst.raw"
    uri=$(unix_uri "$TEST_DIR/q.sock")
    if [[ $tool == qemu-img ]]; then
        # qemu-img needs -n for an NBD target (it cannot create one)
        run --separate-stderr qemu-img convert -n -p -f raw -O raw -T none -W "$TEST_DIR/src.raw" "$uri"
    else
        run --separate-stderr "$DISKIMG" convert -p -f raw -O raw -T none -W "$TEST_DIR/src.raw" "$uri"
    fi
    assert_success
    # qemu-nbd without -t exits once the client has gone
    wait_exit "$PEER_PID" 30
    [[ $EXIT_STATUS -eq 0 ]] || { echo "qemu-nbd exit $EXIT_STATUS" >&2; cat "$PEER_LOG" >&2; return 1; }
    PEER_PIDS=()
    cmp "$TEST_DIR/src.raw" "$TEST_DIR/dst.raw"
}

@test "seed reference: qemu-img convert -p -T none -W into qemu-nbd (writeback)" {
    require_tool qemu-img qemu-nbd
    seed_into_qemu_nbd qemu-img filled
}

@test "seed reference: qemu-img convert -p -T none -W into qemu-nbd --cache=writethrough" {
    require_tool qemu-img qemu-nbd
    seed_into_qemu_nbd qemu-img fresh --cache=writethrough
}

@test "seed crossed: diskimg convert -p -T none -W into qemu-nbd (writeback and writethrough)" {
    require_tool qemu-nbd
    seed_into_qemu_nbd diskimg filled
    printf '%s\n' "$stderr" >"$TEST_DIR/progress"
    check_progress "$TEST_DIR/progress"
    rm -f "$TEST_DIR/dst.raw" "$TEST_DIR/q.sock"
    seed_into_qemu_nbd diskimg fresh --cache=writethrough
}

@test "seed crossed: qemu-img convert -p -T none -W into diskimg serve (writeback and writethrough)" {
    require_tool qemu-img
    local cache
    make_seed_src "$TEST_DIR/src.raw"
    need_odirect
    for cache in writeback writethrough; do
        target "$TEST_DIR/dst.raw" filled
        rm -f "$SOCK"
        start_server --cache=$cache "$TEST_DIR/dst.raw"
        run qemu-img convert -n -p -f raw -O raw -T none -W "$TEST_DIR/src.raw" "$URI"
        assert_success
        wait_exit "$SERVER_PID" 30
        [[ $EXIT_STATUS -eq 0 ]]
        SERVER_PID=
        cmp "$TEST_DIR/src.raw" "$TEST_DIR/dst.raw"
    done
}

@test "seed: the converted export reads back the same through both servers (diskimg compare, qemu-img compare)" {
    require_tool qemu-img qemu-nbd
    make_seed_src "$TEST_DIR/src.raw"
    need_odirect
    target "$TEST_DIR/dst.raw" filled
    start_server -t "$TEST_DIR/dst.raw"
    run "$DISKIMG" convert -p -f raw -O raw -T none -W "$TEST_DIR/src.raw" "$URI"
    assert_success
    run "$DISKIMG" compare -f raw -F raw "$TEST_DIR/src.raw" "$URI"
    assert_success
    run qemu-img compare -f raw -F raw "$TEST_DIR/src.raw" "$URI"
    assert_success
    stop_server
    start_qemu_nbd "$TEST_DIR/q.sock" -t -r -f raw "$TEST_DIR/dst.raw"
    run "$DISKIMG" compare -f raw -F raw "$TEST_DIR/src.raw" "$(unix_uri "$TEST_DIR/q.sock")"
    assert_success
}

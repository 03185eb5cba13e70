#!/usr/bin/env bats
# qcow2 crash consistency: "kill -9" the server at random moments while a
# libnbd client is writing (allocating writes, FUA, WRITE_ZEROES, TRIM,
# FLUSH, 16 in flight), again and again on the same image.  After each
# crash qemu-img check must find no corruption (leaks are allowed), and
# every write that was durable when the server died -- acknowledged with
# FUA, or acknowledged before a FLUSH that was acknowledged -- must read
# back (see qcow2_crash.py for the exact rule).

load '../helpers'
load 'lib'
load 'qcow2-lib'

setup() { setup_test; }
teardown() {
    if [[ -n "${CLIENT_PID:-}" ]]; then
        kill -KILL "$CLIENT_PID" 2>/dev/null || true
        wait "$CLIENT_PID" 2>/dev/null || true
    fi
    cleanup_test
}

CRASH=$BATS_TEST_DIRNAME/qcow2_crash.py

# crash_once IMAGE ITER: serve IMAGE, start the client, wait until it has
# had some acknowledgements, let it run a random while longer, kill -9
# the server, and reap both.
crash_once() {
    local img=$1 it=$2
    rm -f "$SOCK" "$TEST_DIR/log"
    start_server -t -f qcow2 "$img"
    "$PYTHON3" "$CRASH" client "$URI" "$TEST_DIR/log" "$it" "$((it * 7919 + 13))" \
        2>>"$TEST_DIR/client.err" &
    CLIENT_PID=$!
    # Some writes acknowledged (or the client already gave up).
    wait_until 30 grep -qs '^A' "$TEST_DIR/log" || true
    # A random moment: 0 to 300 ms later.
    sleep "0.$(printf '%03d' $((RANDOM % 300)))"
    stop_server KILL
    wait_exit "$CLIENT_PID" 30
    CLIENT_PID=
    [[ $EXIT_STATUS -eq 0 ]] || { cat "$TEST_DIR/client.err" >&2; return 1; }
    grep -q '^A' "$TEST_DIR/log" || { echo "iteration $it: nothing was acknowledged" >&2; return 1; }
}

# verify_after_crash IMAGE ITER: qemu reads the image; the content must
# keep every durable write.
verify_after_crash() {
    local img=$1 it=$2
    rm -f "$TEST_DIR/now.raw"
    qemu-img convert -f qcow2 -O raw "$img" "$TEST_DIR/now.raw"
    "$PYTHON3" "$CRASH" verify "$TEST_DIR/now.raw" "$TEST_DIR/log" "$it" "$TEST_DIR/state.json" \
        >>"$TEST_DIR/verify.out"
}

# check_no_corruption IMAGE: qemu-img check exit 0, or 3 (leaked
# clusters only: a crash between allocating and using a cluster).
check_no_corruption() {
    local out rc=0
    out=$(qemu-img check -f qcow2 "$1" 2>&1) || rc=$?
    if [[ $rc -ne 0 && $rc -ne 3 ]]; then
        echo "qemu-img check after crash $2: exit $rc" >&2
        printf '%s\n' "$out" | head -30 >&2
        return 1
    fi
}

@test "crash: kill -9 during allocating writes, 20 times on the same image" {
    require_tool qemu-img
    require_nbd_python
    "$DISKIMG" create -q -f qcow2 "$TEST_DIR/a.qcow2" 4M
    local it
    for it in $(seq 1 20); do
        crash_once "$TEST_DIR/a.qcow2" "$it"
        check_no_corruption "$TEST_DIR/a.qcow2" "$it"
        verify_after_crash "$TEST_DIR/a.qcow2" "$it"
    done
    # The final image still works: repair the leaks, serve it once more
    # cleanly, and qemu-img check finds nothing.
    run qemu-img check -r leaks "$TEST_DIR/a.qcow2"
    [[ $status -eq 0 ]] || { echo "$output" >&2; return 1; }
    serve_to_raw "$TEST_DIR/final.raw" "$TEST_DIR/a.qcow2"
    cmp "$TEST_DIR/final.raw" "$TEST_DIR/now.raw"
}

@test "crash: kill -9 on a 4k-cluster image (more metadata per write), 12 times" {
    require_tool qemu-img
    require_nbd_python
    "$DISKIMG" create -q -f qcow2 -o cluster_size=4k "$TEST_DIR/a.qcow2" 4M
    local it
    for it in $(seq 1 12); do
        crash_once "$TEST_DIR/a.qcow2" "$it"
        check_no_corruption "$TEST_DIR/a.qcow2" "$it"
        verify_after_crash "$TEST_DIR/a.qcow2" "$it"
    done
}

@test "crash: kill -9 on an extended_l2 image (subcluster allocation), 10 times" {
    require_tool qemu-img
    require_nbd_python
    "$DISKIMG" create -q -f qcow2 -o extended_l2=on "$TEST_DIR/a.qcow2" 4M
    local it
    for it in $(seq 1 10); do
        crash_once "$TEST_DIR/a.qcow2" "$it"
        check_no_corruption "$TEST_DIR/a.qcow2" "$it"
        verify_after_crash "$TEST_DIR/a.qcow2" "$it"
    done
}

@test "crash: lazy_refcounts image: durable writes survive; dirty or consistent after each crash" {
    require_tool qemu-img
    require_nbd_python
    "$DISKIMG" create -q -f qcow2 -o lazy_refcounts=on "$TEST_DIR/a.qcow2" 4M
    local it dirty
    for it in $(seq 1 8); do
        crash_once "$TEST_DIR/a.qcow2" "$it"
        # With the dirty bit set, stale refcounts are allowed (the next
        # read-write open rebuilds them); without it the refcounts must
        # be as safe as without lazy_refcounts.
        dirty=$(( $(qcow2util header "$TEST_DIR/a.qcow2" incompatible_features) & 1 ))
        if [[ $dirty -eq 0 ]]; then
            check_no_corruption "$TEST_DIR/a.qcow2" "$it"
        fi
        # Either way the mapping holds every durable write.
        verify_after_crash "$TEST_DIR/a.qcow2" "$it"
    done
    # A clean open and close by diskimg leaves a consistent, clean image.
    rm -f "$SOCK"
    start_server -f qcow2 "$TEST_DIR/a.qcow2"
    nbdinfo --size "$URI" >/dev/null
    server_exits_ok
    check_no_corruption "$TEST_DIR/a.qcow2" final
    run qemu-img info --output=json "$TEST_DIR/a.qcow2"
    assert_output --partial '"dirty-flag": false'
    qemu-img convert -f qcow2 -O raw "$TEST_DIR/a.qcow2" "$TEST_DIR/final.raw"
    cmp "$TEST_DIR/final.raw" "$TEST_DIR/now.raw"
}

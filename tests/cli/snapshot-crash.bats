#!/usr/bin/env bats
# diskimg snapshot -c/-a/-d killed (SIGKILL, as kill -9) at each of its
# writes and syncs in turn: tests/preload/kill-after.c stops the process
# just before its Nth call that changes a file, for N = 1, 2, ... until
# the operation completes unkilled.  After every crash qemu-img check must
# find the image clean (not even leaks: the change is one header write),
# and the image must be either as it was or with the change made: its
# snapshot list (qemu-img snapshot -l) and its content (qemu-img compare)
# one or the other, never a mix.  The same shim makes each of those calls
# fail with EIO in turn instead: the image checks clean in one state or the
# other, and a failure before the header switch leaves it as it was.

load '../helpers'
load '../crash-lib'
bats_require_minimum_version 1.5.0

setup() { setup_test; }
teardown() { cleanup_test; }

tags() {
    qemu-img snapshot -l "$1" | awk 'NR > 2 { print $2 }' | tr '\n' ' '
}

# in_either_state WORK RC: WORK is as it was (only if the run failed,
# RC not 0) or as it becomes, the snapshot list and the content together
# (old_tags, new_tags, old and new of the calling walk).
in_either_state() {
    local work=$1 rc=$2 now
    now=$(tags "$work")
    { [[ "$now" == "$old_tags" && $rc -ne 0 ]] && qemu-img compare -q "$old" "$work"; } ||
        { [[ "$now" == "$new_tags" ]] && qemu-img compare -q "$new" "$work"; }
}

# crash_walk BASE "OP ARGS" OLD_CONTENT NEW_CONTENT: run the operation on
# a copy of BASE, killed after 1, 2, ... writes; check each result.
crash_walk() {
    local base=$1 op=$2 old=$3 new=$4 work=$TEST_DIR/work.qcow2
    local old_tags new_tags n rc
    old_tags=$(tags "$base")
    cp "$base" "$work"
    # shellcheck disable=SC2086
    "$DISKIMG" snapshot $op "$work"
    new_tags=$(tags "$work")
    for n in $(seq 1 100); do
        cp "$base" "$work"
        rc=0
        # shellcheck disable=SC2086
        killed_after "$n" snapshot $op "$work" || rc=$?
        [[ $rc -eq 0 || $rc -eq 137 ]] || { echo "$op, write $n: exit $rc" >&2; return 1; }
        run qemu-img check "$work"
        [[ $status -eq 0 ]] || { echo "$op killed after write $n: $output" >&2; return 1; }
        if ! in_either_state "$work" $rc; then
            echo "$op killed after write $n: snapshots '$(tags "$work")' (before '$old_tags'," \
                "after '$new_tags') or the content is neither state" >&2
            return 1
        fi
        if [[ $rc -eq 0 ]]; then
            WALKED=$n
            return 0
        fi
    done
    echo "$op: still killed after 100 writes" >&2
    return 1
}

# error_walk BASE "OP ARGS" OLD_CONTENT NEW_CONTENT: run the operation on
# a copy of BASE with its 1st, 2nd, ... write, sync or truncate failing
# (EIO, the others done), until it makes fewer.  Each failure must leave
# the image clean in one state or the other, one line on stderr, and, if
# it came before the header switch, the file as it was, byte for byte.
# Where the switch falls, and how many calls there are, a walk of kills
# tells: the first kill to leave header bytes 24..71 changed comes just
# after the switch.
error_walk() {
    local base=$1 op=$2 old=$3 new=$4 work=$TEST_DIR/work.qcow2
    local old_tags new_tags n rc switch=0 calls
    old_tags=$(tags "$base")
    cp "$base" "$work"
    # shellcheck disable=SC2086
    "$DISKIMG" snapshot $op "$work"
    new_tags=$(tags "$work")
    for n in $(seq 1 100); do
        cp "$base" "$work"
        rc=0
        # shellcheck disable=SC2086
        killed_after "$n" snapshot $op "$work" || rc=$?
        [[ $rc -ne 0 ]] || break
        if [[ $switch -eq 0 ]] && ! cmp -s <(head -c 72 "$work") <(head -c 72 "$base"); then
            switch=$((n - 1))
        fi
    done
    calls=$((n - 1))
    [[ $rc -eq 0 && $switch -gt 1 ]]
    for n in $(seq 1 $((calls + 1))); do
        cp "$base" "$work"
        # shellcheck disable=SC2086
        run --separate-stderr failing_after "$n" snapshot $op "$work"
        rc=$status
        if [[ $rc -ne 0 ]] && ! failed_in_one_line; then
            echo "$op, write $n failed: exit $rc, $stderr" >&2
            return 1
        fi
        if [[ $rc -ne 0 && $n -lt $switch ]] && ! cmp -s "$base" "$work"; then
            echo "$op, write $n failed, before the switch at $switch: the image changed" >&2
            return 1
        fi
        run qemu-img check "$work"
        [[ $status -eq 0 ]] || { echo "$op, write $n failed: $output" >&2; return 1; }
        if ! in_either_state "$work" $rc; then
            echo "$op, write $n failed: snapshots '$(tags "$work")' or the content is neither" \
                "state" >&2
            return 1
        fi
    done
    [[ $rc -eq 0 ]]
}

# base IMAGE [create options]: data, a snapshot 'one' made by qemu-img,
# then other data; one.qcow2 saves the content 'one' holds.
base() {
    local img=$1
    shift
    qemu-img create -q -f qcow2 "$@" "$img" 8M
    qemu-io -f qcow2 -c 'write -P 1 0 3M' -c 'write -c -P 2 5M 64k' "$img" >/dev/null
    cp "$img" "$TEST_DIR/one.qcow2"
    qemu-img snapshot -c one "$img"
    qemu-io -f qcow2 -c 'write -P 3 1M 1M' -c 'write -P 4 7M 64k' "$img" >/dev/null
}

@test "snapshot crash: kill -9 at each write and sync of -c, -a and -d" {
    require_tool qemu-img qemu-io
    [[ -f "$KILL_LIB" ]] || skip "kill-after.so is not built"
    local img=$TEST_DIR/a.qcow2
    base "$img"
    crash_walk "$img" "-c two" "$img" "$img"
    [[ $WALKED -gt 5 ]] # the walk went through the operation's writes
    crash_walk "$img" "-a one" "$img" "$TEST_DIR/one.qcow2"
    crash_walk "$img" "-d one" "$img" "$img"
}

@test "snapshot crash: 4k clusters (many tables), and the image after a crash works" {
    require_tool qemu-img qemu-io
    [[ -f "$KILL_LIB" ]] || skip "kill-after.so is not built"
    local img=$TEST_DIR/b.qcow2
    base "$img" -o cluster_size=4k,refcount_bits=8
    crash_walk "$img" "-c two" "$img" "$img"
    # A crash mid-way leaves unreferenced clusters past the old end; the
    # next change starts after them and ends clean.
    rc=0
    killed_after $((WALKED / 2)) snapshot -d one "$img" || rc=$?
    [[ $rc -eq 137 ]]
    "$DISKIMG" snapshot -d one "$img"
    "$DISKIMG" snapshot -c three "$img"
    qemu-img check "$img"
    [[ "$(tags "$img")" == "three " ]]
    # Now the file has holes (what the changes before freed), where new
    # L2 tables go: the walk again, over them.
    qemu-io -f qcow2 -c 'write -P 6 0 6M' "$img" >/dev/null
    crash_walk "$img" "-c four" "$img" "$img"
    # It grew by its L1 tables, snapshot table and refcount structure (5
    # clusters), not by the 4 L2 tables too.
    [[ $(stat -c %s "$TEST_DIR/work.qcow2") -le $(($(stat -c %s "$img") + 5 * 4096)) ]]
    "$DISKIMG" snapshot -a three "$img"
    qemu-img check "$img"
}

@test "snapshot write errors: EIO at each write and sync of -c, -a and -d" {
    require_tool qemu-img qemu-io
    [[ -f "$KILL_LIB" ]] || skip "kill-after.so is not built"
    local img=$TEST_DIR/a.qcow2
    base "$img"
    error_walk "$img" "-c two" "$img" "$img"
    error_walk "$img" "-a one" "$img" "$TEST_DIR/one.qcow2"
    error_walk "$img" "-d one" "$img" "$img"
}

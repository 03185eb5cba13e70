# tests/interop/qcow2-lib.bash: helpers shared by the qcow2 suites
# (load '../helpers'; load 'lib'; load 'qcow2-lib').
#
# Reference results come from qemu-img / qemu-io on the same files; the
# image under test is read or written only through "diskimg serve".

QCOW2UTIL=$BATS_TEST_DIRNAME/qcow2util.py

# qcow2util COMMAND ARGS...: see qcow2util.py (ops, bump, header).
qcow2util() {
    "$PYTHON3" "$QCOW2UTIL" "$@"
}

# serve_to_raw OUT [serve options...] IMAGE: copy the whole export of a
# fresh read-only "diskimg serve" into OUT with nbdcopy.  Without -t the
# server exits once nbdcopy leaves; it must exit 0.
serve_to_raw() {
    local out=$1
    shift
    rm -f "$SOCK" "$out"
    start_server -r "$@" || return 1
    if ! nbdcopy "$URI" "$out"; then
        echo "nbdcopy from diskimg serve $* failed" >&2
        return 1
    fi
    server_exits_ok
}

# server_exits_ok: wait for our server (no -t) to leave after its client,
# and require exit status 0.
server_exits_ok() {
    wait_exit "$SERVER_PID" 60 || return 1
    SERVER_PID=
    if [[ $EXIT_STATUS -ne 0 ]]; then
        echo "diskimg serve exited with $EXIT_STATUS:" >&2
        cat "$SERVER_LOG" >&2
        return 1
    fi
}

# assert_export_equals_qemu IMAGE [serve options...] [-- convert options...]:
# what diskimg serve exports is byte-identical to qemu-img convert -O raw
# of the same image.
assert_export_equals_qemu() {
    local img=$1 sopts=() copts=()
    shift
    while [[ $# -gt 0 && "$1" != -- ]]; do
        sopts+=("$1")
        shift
    done
    [[ "${1:-}" == -- ]] && shift
    copts=("$@")
    rm -f "$TEST_DIR/qemu.raw"
    qemu-img convert -f qcow2 "${copts[@]}" -O raw "$img" "$TEST_DIR/qemu.raw" || return 1
    serve_to_raw "$TEST_DIR/ours.raw" "${sopts[@]}" "$img" || return 1
    if ! cmp "$TEST_DIR/qemu.raw" "$TEST_DIR/ours.raw"; then
        echo "diskimg serve ${sopts[*]} $img differs from qemu-img convert ${copts[*]}" >&2
        return 1
    fi
}

# qemu_check_clean IMAGE: qemu-img check finds no errors and no leaks.
qemu_check_clean() {
    local out rc=0
    out=$(qemu-img check -f qcow2 "$1" 2>&1) || rc=$?
    if [[ $rc -ne 0 ]]; then
        echo "qemu-img check $1: exit $rc" >&2
        printf '%s\n' "$out" | head -40 >&2
        return 1
    fi
    [[ "$out" == *"No errors were found on the image."* ]]
}

# qemu_io_script FMT TARGET SCRIPT: run the qemu-io commands in SCRIPT
# (one a line) against TARGET in one qemu-io process; fail if any fails.
qemu_io_script() {
    local fmt=$1 target=$2 script=$3 args=() line
    while IFS= read -r line; do
        args+=(-c "$line")
    done <"$script"
    if ! qemu-io -f "$fmt" "${args[@]}" "$target" >"$TEST_DIR/qemu-io.log" 2>&1; then
        echo "qemu-io on $target failed:" >&2
        grep -v '^wrote\|^discard\|ops;' "$TEST_DIR/qemu-io.log" | head -20 >&2
        return 1
    fi
    if grep -qi 'failed\|error' "$TEST_DIR/qemu-io.log"; then
        grep -i 'failed\|error' "$TEST_DIR/qemu-io.log" | head -20 >&2
        return 1
    fi
}

# ops_through_server IMAGE SCRIPT [serve options...]: start diskimg serve
# on IMAGE (read-write, exits when the client leaves), apply SCRIPT with
# qemu-io over NBD, and wait for a clean exit.
ops_through_server() {
    local img=$1 script=$2
    shift 2
    rm -f "$SOCK"
    start_server "$@" "$img" || return 1
    qemu_io_script raw "$URI" "$script" || return 1
    server_exits_ok
}

# assert_compare IMAGE_QCOW2 REF_RAW: qemu-img compare says identical.
assert_compare() {
    local out rc=0
    out=$(qemu-img compare -f qcow2 -F raw "$1" "$2" 2>&1) || rc=$?
    if [[ $rc -ne 0 ]]; then
        echo "qemu-img compare $1 $2: exit $rc: $out" >&2
        return 1
    fi
}

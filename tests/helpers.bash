# tests/helpers.bash: shared by every bats file (load '../helpers').
#
# - DISKIMG is the binary under test (meson sets it; defaults to build/).
# - require_tool skips a test when a client is missing, but fails it when
#   DISKIMG_TEST_STRICT=1 or CI=true: CI installs every tool, and a skipped
#   interop test proves nothing.
# - start_server/stop_server run "diskimg serve" on a unix socket in the
#   test's own directory and stop only that process, by PID.

# bats-support and bats-assert, sourced file by file: their load.bash
# files run dirname in a subshell per file, 15 forks for every test,
# which cost more than most tests on a small VM.
for _bats_lib in /usr/lib/bats/bats-support/src/*.bash /usr/lib/bats/bats-assert/src/*.bash; do
    # shellcheck disable=SC1090
    source "$_bats_lib"
done
unset _bats_lib

: "${DISKIMG:=$BATS_TEST_DIRNAME/../../build/cmd/diskimg}"
export DISKIMG
# libnbd's python module lives with the system python, not a pyenv one.
PYTHON3=/usr/bin/python3

strict_mode() {
    [[ "${DISKIMG_TEST_STRICT:-}" == 1 || "${CI:-}" == true ]]
}

require_tool() {
    local t
    for t in "$@"; do
        if ! command -v "$t" >/dev/null 2>&1; then
            if strict_mode; then
                echo "required tool '$t' is missing (strict mode: CI must install it)" >&2
                return 1
            fi
            skip "$t is not installed"
        fi
    done
}

require_nbd_python() {
    if ! "$PYTHON3" -c 'import nbd' 2>/dev/null; then
        if strict_mode; then
            echo "python3-libnbd is missing (strict mode)" >&2
            return 1
        fi
        skip "python3-libnbd is not installed"
    fi
}

# diskimg_under_asan: is $DISKIMG built with AddressSanitizer?  ASan
# reserves terabytes of address space for its shadow memory, so an
# address-space limit only breaks it; under ASan memory is bounded by the
# sanitizer instead.
diskimg_under_asan() {
    [[ $DISKIMG == *build-san* ]] || nm -D "$DISKIMG" 2>/dev/null | grep -q __asan_init
}

# bounded CMD...: CMD as a hostile-input test runs it: killed after 10 s,
# and with 2 GiB of address space unless under ASan, so that a huge
# allocation fails instead of swapping and a loop ends as a failure.
bounded() {
    local limit=()
    diskimg_under_asan || limit=(prlimit --as=2147483648 --)
    timeout -k 5 10 "${limit[@]}" "$@"
}

# Call from setup(): a fresh directory for this test's files, with a short
# path because unix socket paths are limited to 107 bytes.
setup_test() {
    TEST_DIR=$(mktemp -d "${TMPDIR:-/tmp}/diskimg-test.XXXXXX")
    SOCK=$TEST_DIR/nbd.sock
    URI="nbd+unix:///?socket=$SOCK"
    SERVER_LOG=$TEST_DIR/server.log
    SERVER_PID=
}

# start_server [serve options...] IMAGE
# Serves on $SOCK (unix) unless the options name -p/-b (then set WAIT_PORT);
# waits until the server accepts connections.  Sets SERVER_PID; the log
# goes to $SERVER_LOG.  A socket a killed server left behind is removed
# first: the wait below would otherwise find it and return before the new
# server listens.
start_server() {
    local listen=(-k "$SOCK")
    local a
    for a in "$@"; do
        case "$a" in -p|--port|--port=*|-b|--bind|--bind=*) listen=() ;; esac
    done
    [[ ${#listen[@]} -eq 0 ]] || rm -f "$SOCK"
    "$DISKIMG" serve "${listen[@]}" "$@" 2>>"$SERVER_LOG" &
    SERVER_PID=$!
    wait_for_server
}

# wait_until TIMEOUT_S CMD...: poll CMD until it succeeds (10 ms steps).
wait_until() {
    local limit=$(($1 * 100)) i
    shift
    for ((i = 0; i < limit; i++)); do
        "$@" && return 0
        sleep 0.01
    done
    return 1
}

# unix_listening PATH: a socket bound to PATH is listening (flag
# __SO_ACCEPTCON in /proc/net/unix).  Unlike [[ -S PATH ]] this is not
# true between the server's bind() and listen(), when a client would be
# refused.
unix_listening() {
    awk -v p="$1" '$NF == p && $4 == "00010000" { f = 1 } END { exit !f }' /proc/net/unix
}

# qemu_dirty IMAGE NAME: the dirty extents of bitmap NAME as qemu-nbd
# exports them, "offset length" a line.  When qemu-nbd or nbdinfo fails
# (no such bitmap, say), a line naming IMAGE and NAME instead, which
# matches no map and no other image's failure: a failure must not pass
# for a clean bitmap, and two must not compare equal as two empty maps.
qemu_dirty() {
    local sock=$TEST_DIR/q.sock pid map
    qemu-nbd -r -t -B "$2" -k "$sock" "$1" 2>>"${SERVER_LOG:-/dev/null}" &
    pid=$!
    if wait_until 10 unix_listening "$sock" &&
        map=$(nbdinfo --map="qemu:dirty-bitmap:$2" "nbd+unix:///?socket=$sock"); then
        awk '$3 == 1 { print $1, $2 }' <<<"$map"
    else
        echo "no map of bitmap $2 in $1"
    fi
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    rm -f "$sock"
}

# Waits until $SOCK (or TCP $WAIT_PORT on 127.0.0.1) accepts, or the server died.
wait_for_server() {
    local i
    for i in $(seq 1 100); do
        if ! kill -0 "$SERVER_PID" 2>/dev/null; then
            echo "server exited early:" >&2
            cat "$SERVER_LOG" >&2
            return 1
        fi
        if [[ -n "${WAIT_PORT:-}" ]]; then
            (exec 3<>/dev/tcp/127.0.0.1/"$WAIT_PORT") 2>/dev/null && return 0
        elif [[ -S "$SOCK" ]]; then
            return 0
        fi
        sleep 0.05
    done
    echo "server did not start listening" >&2
    return 1
}

# stop_server [SIGNAL]: stops the server we started and waits for it.
# Sets SERVER_STATUS to its exit status.
stop_server() {
    local sig=${1:-TERM}
    SERVER_STATUS=0
    if [[ -n "${SERVER_PID:-}" ]]; then
        kill "-$sig" "$SERVER_PID" 2>/dev/null || true
        wait "$SERVER_PID" 2>/dev/null || SERVER_STATUS=$?
        SERVER_PID=
    fi
}

# Call from teardown(): stop the server if still running, remove files.
cleanup_test() {
    stop_server KILL
    if [[ -n "${TEST_DIR:-}" ]]; then
        rm -rf "$TEST_DIR"
        TEST_DIR=
    fi
}

# nbdsh against the running server; the script gets h connected.
nbdsh_run() {
    nbdsh -u "$URI" -c "$1"
}

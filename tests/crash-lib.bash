# tests/crash-lib.bash: running diskimg so that it dies (SIGKILL) in the
# middle of its work, for the suites that check what a killed write leaves
# (load '../crash-lib' after '../helpers').

KILL_LIB=${DISKIMG_KILL_AFTER_LIB:-$BATS_TEST_DIRNAME/../../build/tests/kill-after.so}

# killed_after N ARGS...: diskimg ARGS, killed (SIGKILL) just before its
# Nth write, sync or truncate (tests/preload/kill-after.c); its status.
# Its output and the shell's "Killed" notice are not kept.
killed_after() {
    local n=$1 rc=0
    shift
    { LD_PRELOAD=$KILL_LIB ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0 \
        DISKIMG_KILL_AFTER=$n "$DISKIMG" "$@"; } >/dev/null 2>&1 || rc=$?
    return $rc
}

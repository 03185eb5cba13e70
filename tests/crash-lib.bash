# tests/crash-lib.bash: running diskimg so that it dies (SIGKILL) or meets
# a write error in the middle of its work, for the suites that check what
# a killed or failed write leaves (load '../crash-lib' after '../helpers').

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

# failing_after N ARGS...: diskimg ARGS, its Nth write, sync or truncate
# failing with EIO and every other one done (DISKIMG_FAIL_AFTER, same
# shim); its output and status are diskimg's.
failing_after() {
    local n=$1
    shift
    LD_PRELOAD=$KILL_LIB ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0 \
        DISKIMG_FAIL_AFTER=$n "$DISKIMG" "$@"
}

# failed_in_one_line: after `run --separate-stderr failing_after ...`,
# the run failed as a write error should: exit 1, nothing on stdout, one
# line on stderr, the error, after the note of marking the image corrupt
# if the failure left its header in doubt.
failed_in_one_line() {
    [[ $status -eq 1 && -z $output ]] || return 1
    [[ ${#stderr_lines[@]} -eq 1 ||
        (${#stderr_lines[@]} -eq 2 && ${stderr_lines[0]} == *"marking the image corrupt"*) ]] ||
        return 1
    [[ ${stderr_lines[-1]} == "diskimg: "*"Input/output error" ]]
}

# killed_at_random RESET CHECK ARGS...: diskimg ARGS on the images that
# the function RESET puts back, SIGKILLed at random moments of its run,
# each run followed by the function CHECK on what it left; up to 8 runs,
# until two were killed.  The moments are drawn from 10% to 90% of the
# length of a first, whole run (checked too), so they fall inside the run
# however fast or loaded the machine is.  A run that ends before its kill
# (the machine got faster) is the "after" state: checked like the others,
# and the next moments come earlier.  Fails unless some run was killed.
killed_at_random() {
    local reset=$1 check=$2 killed=0 i pid rc start us
    shift 2
    "$reset"
    start=$(date +%s%N)
    "$DISKIMG" "$@"
    us=$((($(date +%s%N) - start) / 1000))
    "$check"
    for ((i = 0; i < 8 && killed < 2; i++)); do
        "$reset"
        "$DISKIMG" "$@" &
        pid=$!
        local at=$((us / 10 + RANDOM * (us * 8 / 10) / 32768))
        sleep "$(printf '%d.%06d' $((at / 1000000)) $((at % 1000000)))"
        kill -KILL "$pid" 2>/dev/null || true
        rc=0
        wait "$pid" || rc=$?
        [[ $rc -eq 0 || $rc -eq 137 ]] || { echo "run $i: exit $rc" >&2; return 1; }
        if [[ $rc -eq 137 ]]; then
            killed=$((killed + 1))
        else
            us=$((us / 2))
        fi
        "$check"
    done
    [[ $killed -gt 0 ]] || { echo "no run was killed before it ended" >&2; return 1; }
}

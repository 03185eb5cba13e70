#!/usr/bin/env bats
# Hostile qcow2 images: a corpus of crafted images (one per field class,
# made by tests/fuzz/make-hostile-corpus.py) opened with every subcommand
# that reads an image.  Whatever the image, diskimg must not crash, hang,
# trip a sanitizer or allocate without bound, and when it refuses the image
# it says why in a single "diskimg: ..." line.
#
# Each test walks the whole corpus and lists every image that misbehaved,
# with the subcommand and the first lines of its stderr.  To reproduce,
# regenerate the corpus (make-hostile-corpus.py DIR) and run the same
# subcommand on DIR/NAME.

load '../helpers'
load 'lib'

# Per command; the whole file stays well under a minute.
TIMEOUT=${HOSTILE_TIMEOUT:-20}

setup_file() {
    require_tool qemu-img qemu-io
    export CORPUS=$BATS_FILE_TMPDIR/corpus
    "$PYTHON3" "$BATS_TEST_DIRNAME/../fuzz/make-hostile-corpus.py" "$CORPUS" >/dev/null
    # A sanitizer report must end the process (and fail the test).
    export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}abort_on_error=1:halt_on_error=1"
    export UBSAN_OPTIONS="${UBSAN_OPTIONS:+$UBSAN_OPTIONS:}abort_on_error=1:halt_on_error=1:print_stacktrace=1"
    # ASan reserves terabytes of address space: an address-space limit
    # would only break it, so the memory bound applies to plain builds.
    if [[ $DISKIMG == *build-san* ]] || nm -D "$DISKIMG" 2>/dev/null | grep -q __asan_init; then
        export ASAN_BUILD=1
    else
        export ASAN_BUILD=0
    fi
}

setup() {
    setup_test
    ulimit -c 0
    FAILURES=$TEST_DIR/failures
    : >"$FAILURES"
}

teardown() { cleanup_test; }

images() {
    local f
    for f in "$CORPUS"/*.qcow2; do
        printf '%s\n' "$f"
    done
}

# guarded CMD...: run CMD with the time limit and, unless under ASan, a
# 1 GiB address-space limit (a huge allocation fails instead of swapping).
guarded() {
    local limit=()
    [[ $ASAN_BUILD == 1 ]] || limit=(prlimit --as=1073741824 --)
    timeout -k 5 "$TIMEOUT" "${limit[@]}" "$@"
}

fail_image() {
    printf '%s: %s\n' "$(basename "$1")" "$2" >>"$FAILURES"
    if [[ -s ${3:-} ]]; then
        sed -n '1,6s/^/    | /p' "$3" >>"$FAILURES"
    fi
}

# no_crash IMG WHAT STATUS ERRFILE: status and stderr show neither a crash
# (signal), a hang (timeout) nor a sanitizer report.
no_crash() {
    local img=$1 what=$2 st=$3 err=$4
    if ((st == 124 || st == 137)); then
        fail_image "$img" "$what: timed out after ${TIMEOUT}s (hang)" "$err"
        return 1
    fi
    if ((st >= 128)); then
        fail_image "$img" "$what: killed by signal $((st - 128))" "$err"
        return 1
    fi
    if grep -qE 'Sanitizer|runtime error:|AddressSanitizer|LeakSanitizer' "$err"; then
        fail_image "$img" "$what: sanitizer report (status $st)" "$err"
        return 1
    fi
    return 0
}

# one_line_error IMG WHAT ERRFILE: stderr is exactly one "diskimg:" line.
one_line_error() {
    local img=$1 what=$2 err=$3
    if [[ $(wc -l <"$err") -ne 1 ]] || ! head -n 1 "$err" | grep -q '^diskimg: .'; then
        fail_image "$img" "$what: failed without a single 'diskimg:' line on stderr" "$err"
        return 1
    fi
}

# simple_cmd WHAT ARGS...: run "diskimg ARGS IMG" on every image; success,
# or failure with a one-line error.  Successful stdouts are kept in
# $TEST_DIR/out/ for json_valid.
simple_cmd() {
    local what=$1 img st
    shift
    mkdir -p "$TEST_DIR/out"
    while read -r img; do
        local out err=$TEST_DIR/err
        out=$TEST_DIR/out/$(basename "$img").out
        st=0
        guarded "$DISKIMG" "$@" "$img" >"$out" 2>"$err" || st=$?
        no_crash "$img" "$what" "$st" "$err" || continue
        if ((st != 0)); then
            rm -f "$out"
            one_line_error "$img" "$what (status $st)" "$err" || continue
        fi
    done < <(images)
}

# json_valid: every kept stdout is one JSON document.
json_valid() {
    "$PYTHON3" - "$TEST_DIR/out" "$FAILURES" <<'EOF'
import json, os, sys
d, failures = sys.argv[1], sys.argv[2]
with open(failures, "a") as f:
    for name in sorted(os.listdir(d)):
        try:
            json.load(open(os.path.join(d, name)))
        except ValueError as e:
            f.write("%s: stdout is not valid JSON: %s\n" % (name[:-4], e))
EOF
}

report_failures() {
    if [[ -s $FAILURES ]]; then
        echo "corpus: $CORPUS (regenerate with tests/fuzz/make-hostile-corpus.py DIR)"
        cat "$FAILURES"
        return 1
    fi
}

@test "hostile images: the corpus has one image per field class" {
    local n prefix
    n=$(images | wc -l)
    ((n >= 150)) || { echo "only $n images in $CORPUS"; false; }
    for prefix in base-v2-512 base-v3-64k base-snapshot base-compressed base-backing base-extl2 \
                  magic- version- cluster-bits- size- l1-size- l1-offset- refcount-table-offset- \
                  refcount-table-clusters- nb-snapshots- snapshots-offset- header-length- \
                  incompat-unknown incompat-data-file compression- refcount-order-7 crypt-method- \
                  backing-name-too-long backing-name-outside backing-name-with-nul \
                  ext-length-past ext-feature-table-not-48 ext-backing-format-empty \
                  ext-backing-format-too-long l1-entry-reserved l1-entry-l2-unaligned \
                  l1-entry-l2-past-eof l1-entry-l2-offset0 l1-entry-l2-at-refcount-table \
                  l2-entry-reserved l2-entry-data-unaligned l2-entry-data-at-header \
                  l2-compressed-garbage l2-compressed-sectors-past-eof l2-compressed-copied \
                  l2-entry-zero-flag-v2 refcount-block-at-offset-0 refcount-zero-for-used \
                  refcount-table-entry-reserved snapshot-count snapshot-id-len snapshot-name-len \
                  snapshot-extra-huge snapshot-l1-size-huge snapshot-l1-offset-unaligned \
                  chain-self-loop chain-cycle-a chain-depth-40 chain-missing-file \
                  chain-json-protocol chain-nbd-protocol chain-backing-fifo \
                  chain-backing-symlink-fifo; do
        compgen -G "$CORPUS/$prefix*.qcow2" >/dev/null || { echo "no $prefix* image"; false; }
        grep -q "^$prefix" "$CORPUS/MANIFEST" || { echo "$prefix* is not in MANIFEST"; false; }
    done
}

@test "hostile images: the good base images open, check clean and map" {
    local img st
    for img in "$CORPUS"/base-*.qcow2; do
        for cmd in info check "map --output=json"; do
            st=0
            # shellcheck disable=SC2086 # cmd holds a subcommand and its options
            guarded "$DISKIMG" $cmd "$img" >/dev/null 2>"$TEST_DIR/err" || st=$?
            if ((st != 0)); then
                fail_image "$img" "$cmd: status $st on a good image" "$TEST_DIR/err"
            fi
        done
    done
    report_failures
}

@test "hostile images: info" {
    simple_cmd info info
    report_failures
}

@test "hostile images: info --output=json (valid JSON when it succeeds)" {
    simple_cmd "info --output=json" info --output=json
    json_valid
    report_failures
}

@test "hostile images: info --backing-chain on the backing chains" {
    local img st
    for img in "$CORPUS"/chain-*.qcow2 "$CORPUS"/base-backing.qcow2; do
        st=0
        guarded "$DISKIMG" info --backing-chain "$img" >/dev/null 2>"$TEST_DIR/err" || st=$?
        no_crash "$img" "info --backing-chain" "$st" "$TEST_DIR/err" || continue
        if ((st != 0)); then
            one_line_error "$img" "info --backing-chain (status $st)" "$TEST_DIR/err" || true
        fi
    done
    report_failures
}

@test "hostile images: map --output=json (valid JSON when it succeeds)" {
    simple_cmd "map --output=json" map --output=json
    json_valid
    report_failures
}

# check_one IMG WHAT ARGS...: check exits 0, 1, 2 or 3; a failure to open
# (no summary on stdout) is one "diskimg:" line; the other stderr lines are
# the report's ERROR/Leaked lines.  A probed check of an image that probes
# as raw (bad magic, version 0 or 1) exits 63: then the qcow2 driver is
# made to check it with -f qcow2.
check_one() {
    local img=$1 what=$2 st=0 err=$TEST_DIR/err out=$TEST_DIR/out.txt
    shift 2
    guarded "$DISKIMG" check "$@" "$img" >"$out" 2>"$err" || st=$?
    no_crash "$img" "$what" "$st" "$err" || return 0
    if ((st == 63)) && [[ " $* " != *" qcow2 "* ]] &&
        "$DISKIMG" info --output=json "$img" 2>/dev/null | grep -q '"format": "raw"'; then
        check_one "$img" "$what -f qcow2" -f qcow2 "$@"
        return 0
    fi
    if ((st > 3)); then
        fail_image "$img" "$what: exit status $st is not 0, 1, 2 or 3" "$err"
        return 0
    fi
    if ((st != 0)) && [[ ! -s $out ]]; then
        one_line_error "$img" "$what (status $st)" "$err" || true
        return 0
    fi
    if grep -vqE '^(ERROR |Leaked cluster |Warning|Rebuilding refcount structure$|diskimg: )' "$err"; then
        fail_image "$img" "$what: unexpected stderr line" "$err"
    fi
}

@test "hostile images: check" {
    local img
    while read -r img; do
        check_one "$img" check
    done < <(images)
    report_failures
}

@test "hostile images: check -r all on a copy" {
    local img copy=$TEST_DIR/copy.qcow2
    while read -r img; do
        cp "$img" "$copy"
        check_one "$copy" "check -r all ($(basename "$img"))" -f qcow2 -r all
    done < <(images)
    report_failures
}

@test "hostile images: serve, one read through NBD, clean exit" {
    require_tool qemu-io
    local img copy=$TEST_DIR/serve.qcow2 sock=$TEST_DIR/s.sock log=$TEST_DIR/serve.log
    local pid st i rst listened
    while read -r img; do
        local name
        name=$(basename "$img")
        # Served read-write (the default) from a copy in the corpus
        # directory, so relative backing file names resolve; a copy because
        # a hostile image may get its corrupt bit set.
        copy=$CORPUS/serve-copy.qcow2.tmp
        cp "$img" "$copy"
        rm -f "$sock"
        guarded "$DISKIMG" serve -k "$sock" "$copy" 2>"$log" &
        pid=$!
        for ((i = 0; i < 500; i++)); do
            [[ -S $sock ]] && break
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.01
        done
        listened=0
        if [[ -S $sock ]]; then
            listened=1
            # One read; it may fail (EIO on a corrupt table), but it must
            # get an answer.
            rst=0
            timeout -k 5 "$TIMEOUT" qemu-io -f raw -r -c 'read 0 64k' \
                "nbd+unix:///?socket=$sock" >"$TEST_DIR/read.out" 2>&1 || rst=$?
            if ((rst >= 124)); then
                fail_image "$name" "serve: the NBD read got no answer (qemu-io status $rst)" \
                    "$TEST_DIR/read.out"
            fi
        fi
        # Without --persistent the server exits after its client; a server
        # that refused the image exits at once.
        st=0
        wait "$pid" || st=$?
        sed -i "s|$copy|$name|g" "$log"
        no_crash "$name" serve "$st" "$log" || continue
        if ((!listened || st != 0)); then
            if ((st == 0)); then
                fail_image "$name" "serve: exited 0 without listening" "$log"
            else
                one_line_error "$name" "serve (status $st)" "$log" || true
            fi
        fi
    done < <(images)
    rm -f "$CORPUS/serve-copy.qcow2.tmp"
    report_failures
}

@test "hostile images: convert to raw" {
    if ! "$DISKIMG" convert --help >/dev/null 2>&1; then
        skip "diskimg has no convert subcommand yet"
    fi
    local img st out=$TEST_DIR/converted.raw err=$TEST_DIR/err
    while read -r img; do
        st=0
        rm -f "$out"
        guarded "$DISKIMG" convert -O raw "$img" "$out" >/dev/null 2>"$err" || st=$?
        no_crash "$img" convert "$st" "$err" || continue
        if ((st != 0)); then
            one_line_error "$img" "convert (status $st)" "$err" || true
        fi
    done < <(images)
    report_failures
}

#!/usr/bin/env bats
# Hostile qcow2 images: a corpus of crafted images (one per field class,
# made by tests/fuzz/make-hostile-corpus.py) opened with every subcommand
# that reads an image.  Whatever the image, diskimg must not crash, hang,
# trip a sanitizer or allocate without bound, and when it refuses the image
# it says why in a single "diskimg: ..." line.
#
# Each test walks the whole corpus (hostile_walk.py) and lists every image
# that misbehaved, with the subcommand and the first lines of its stderr.  To reproduce,
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
    if diskimg_under_asan; then
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

report_failures() {
    if [[ -s $FAILURES ]]; then
        echo "corpus: $CORPUS (regenerate with tests/fuzz/make-hostile-corpus.py DIR)"
        cat "$FAILURES"
        return 1
    fi
}

# walk MODE: hostile_walk.py runs one subcommand on every image (a few at a
# time, each under the same limits as guarded) and lists the images that
# crashed, hung, tripped a sanitizer or failed without a one-line error.
walk() {
    HOSTILE_TIMEOUT=$TIMEOUT "$PYTHON3" "$BATS_TEST_DIRNAME/hostile_walk.py" "$1" "$CORPUS" "$TEST_DIR"
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
    walk info
}

@test "hostile images: info --output=json (valid JSON when it succeeds)" {
    walk info-json
}

@test "hostile images: info --backing-chain on the backing chains" {
    walk backing-chain
}

@test "hostile images: map --output=json (valid JSON when it succeeds)" {
    walk map-json
}

# check exits 0, 1, 2 or 3; a failure to open (no summary on stdout) is
# one "diskimg:" line; the other stderr lines are the report's ERROR/Leaked
# lines.  An image that probes as raw (bad magic, version 0 or 1) is
# checked again with -f qcow2.
@test "hostile images: check" {
    walk check
}

@test "hostile images: check -r all on a copy" {
    walk check-repair
}

# Served read-write from a copy, one read through qemu-io that must get an
# answer (it may be an error), then a clean exit or a one-line refusal.
@test "hostile images: serve, one read through NBD, clean exit" {
    require_tool qemu-io
    walk serve
}

@test "hostile images: convert to raw" {
    walk convert
}

# amend rewrites the refcounts, then downgrades (zero clusters in every
# L2 table, bitmaps dropped), on a copy of each image opened for writing.
@test "hostile images: amend (refcount rewrite, downgrade)" {
    walk amend
}

#!/usr/bin/env bats
# Our NBD client against a server that lies (nbdfake.py): READ replies
# whose chunks overlap, repeat, leave the request or stop short, and
# error texts with control characters.  convert must fail with a clear
# message naming the server and must never leave an output behind as if
# it had succeeded; what the server says is printed escaped.

load '../helpers'
load 'lib'

SIZE=$((4 << 20))

setup() {
    setup_test
    FAKE_PID=
    FAKE=$TEST_DIR/fake.sock
    FAKE_URI="nbd+unix:///?socket=$FAKE"
}

teardown() {
    if [[ -n "$FAKE_PID" ]]; then
        kill -KILL "$FAKE_PID" 2>/dev/null || true
        wait "$FAKE_PID" 2>/dev/null || true
    fi
    cleanup_test
}

# start_fake MODE: nbdfake.py on $FAKE, exporting SIZE bytes.
start_fake() {
    # A fresh file: the last fake's "listening" must not count (the
    # redirection below may happen after wait_until's first look).
    rm -f "$TEST_DIR/fake.out"
    "$PYTHON3" "$BATS_TEST_DIRNAME/nbdfake.py" "$FAKE" "$SIZE" "$1" >"$TEST_DIR/fake.out" 2>&1 &
    FAKE_PID=$!
    wait_until 20 grep -q listening "$TEST_DIR/fake.out"
}

stop_fake() {
    kill -KILL "$FAKE_PID" 2>/dev/null || true
    wait "$FAKE_PID" 2>/dev/null || true
    FAKE_PID=
}

@test "the fake server, behaving: convert copies its data (the harness itself works)" {
    start_fake good
    run --separate-stderr "$DISKIMG" convert -f raw -O raw "$FAKE_URI" "$TEST_DIR/out.raw"
    assert_success
    "$PYTHON3" -c 'import sys
n = int(sys.argv[2])
want = bytes(i % 251 for i in range(n))
assert open(sys.argv[1], "rb").read() == want' "$TEST_DIR/out.raw" "$SIZE"
    # The copy's 2 MiB reads went as 256 KiB requests, each byte once.
    awk '/^READ/ { n++; sum += $3; if ($3 > max) max = $3 }
         END { print n, sum, max; exit !(n == 16 && sum == '"$SIZE"' && max == 262144) }' \
        "$TEST_DIR/fake.out"
}

@test "one failed piece of a large read: the copy fails with the server's error, no output" {
    # The pieces sent beside the failed one are all collected (their
    # buffers are the copy's) before the error goes up: no hang, no crash.
    start_fake error-piece
    run --separate-stderr timeout 60 "$DISKIMG" convert -f raw -O raw "$FAKE_URI" \
        "$TEST_DIR/out.raw"
    echo "exit $status: $stderr" >&2
    [[ $status -eq 1 ]]
    [[ "$stderr" == *"NBD server: NBD_CMD_READ failed: Input/output error: piece failed"* ]]
    [[ $(printf '%s\n' "$stderr" | wc -l) -eq 1 ]]
    [[ ! -e "$TEST_DIR/out.raw" ]]
    # checksum reads 4 MiB at a time: the same error, through the same path.
    run --separate-stderr timeout 60 "$DISKIMG" checksum -f raw "$FAKE_URI"
    echo "checksum exit $status: $stderr" >&2
    [[ $status -eq 1 && "$stderr" == *"NBD_CMD_READ failed: Input/output error: piece failed"* ]]
}

# convert_refused MODE TEXT: convert from a server in MODE fails with exit
# 1, one line naming the server, the violation and TEXT; no output file.
convert_refused() {
    start_fake "$1"
    run --separate-stderr timeout 60 "$DISKIMG" convert -f raw -O raw "$FAKE_URI" \
        "$TEST_DIR/out.raw"
    echo "$1: exit $status: $stderr" >&2
    [[ $status -eq 1 ]]
    [[ "$stderr" == *"nbd+unix socket $FAKE: the NBD server sent an invalid reply"* ]]
    [[ "$stderr" == *"$2"* ]]
    [[ "$stderr" == *"Input/output error"* ]]
    [[ $(printf '%s\n' "$stderr" | wc -l) -eq 1 ]]
    [[ ! -e "$TEST_DIR/out.raw" ]]
    stop_fake
}

@test "a READ reply repeating its first half (the byte count adds up): refused, no output" {
    convert_refused duplicate "overlaps data already received for NBD_CMD_READ"
}

@test "overlapping data chunks, and data inside a hole: refused, no output" {
    convert_refused overlap "NBD_REPLY_TYPE_OFFSET_DATA chunk"
    convert_refused hole-overlap "overlaps data already received"
}

@test "a chunk outside the request: refused, no output" {
    convert_refused outside "outside the request NBD_CMD_READ"
}

@test "a reply that ends short, or with no data at all: refused, no output" {
    convert_refused short "ended after"
    convert_refused empty-done "ended after 0 bytes"
}

@test "compare against a lying server: an error, not a same or differ answer" {
    truncate -s "$SIZE" "$TEST_DIR/zero.raw"
    start_fake duplicate
    run --separate-stderr timeout 60 "$DISKIMG" compare -f raw -F raw "$FAKE_URI" \
        "$TEST_DIR/zero.raw"
    # 0 (same) or 1 (differ) would be an answer made of bytes never sent
    [[ $status -ne 0 && $status -ne 1 ]] || {
        echo "compare exit $status: $stderr" >&2
        return 1
    }
    [[ "$stderr" == *"the NBD server sent an invalid reply"* ]]
}

@test "a server's error text is printed escaped: a READ error chunk, and a refused export" {
    start_fake error-text
    run --separate-stderr timeout 60 "$DISKIMG" convert -f raw -O raw "$FAKE_URI" \
        "$TEST_DIR/out.raw"
    [[ $status -eq 1 ]]
    echo "$stderr" >&2
    [[ "$stderr" == *'bad\x1b[31m thing\x07\x0d\x0aforged: line'* ]]
    [[ "$stderr" != *$'\x1b'* && "$stderr" != *$'\r'* ]]
    [[ $(printf '%s\n' "$stderr" | wc -l) -eq 1 ]]
    [[ ! -e "$TEST_DIR/out.raw" ]]
    stop_fake

    start_fake refuse-text
    run --separate-stderr timeout 60 "$DISKIMG" info "$FAKE_URI"
    [[ $status -eq 1 ]]
    echo "$stderr" >&2
    [[ "$stderr" == *'bad\x1b[31m thing\x07\x0d\x0aforged: line'* ]]
    [[ "$stderr" != *$'\x1b'* && "$stderr" != *$'\r'* ]]
    [[ $(printf '%s\n' "$stderr" | wc -l) -eq 1 ]]
}

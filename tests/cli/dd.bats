#!/usr/bin/env bats
# diskimg dd: the same output as qemu-img dd on the same arguments (raw
# outputs byte for byte, the other formats by qemu-img compare and virtual
# size), qemu-img's quirks (count counted from the start of the input, a
# skip past the end, sizes with suffixes, bs=512 by default, an existing
# output overwritten), and bad input: one line, no output left behind,
# nothing destroyed.

load '../helpers'
bats_require_minimum_version 1.5.0

setup() { setup_test; }
teardown() {
    # the servers this test started, by their PIDs
    local f
    for f in "$TEST_DIR/qemu-nbd.pid" "$TEST_DIR/nbdkit.pid"; do
        [[ ! -s $f ]] || kill "$(cat "$f")" 2>/dev/null || true
    done
    cleanup_test
}

# make_inputs: a raw file of random bytes whose size is no multiple of 512,
# and a qcow2 image with data, zero and compressed clusters over a backing
# file.
make_inputs() {
    local d=$TEST_DIR
    head -c 3000000 /dev/urandom >"$d/in.raw"
    truncate -s 8M "$d/base.raw"
    qemu-io -f raw -c 'write -P 1 0 3M' "$d/base.raw" >/dev/null
    qemu-img create -q -f qcow2 -b base.raw -F raw "$d/in.qcow2" 8M
    qemu-io -f qcow2 -c 'write -P 2 1M 100k' -c 'write -z 2M 64k' -c 'write -c -P 3 5M 64k' \
        "$d/in.qcow2" >/dev/null
}

# same_dd [-O FMT] [OPTIONS] OPERANDS...: diskimg dd and qemu-img dd, with
# of= set to theirs and ours, exit alike and write the same: raw outputs
# byte for byte, others with the same virtual size and content.
same_dd() {
    local fmt=raw rc_o=0 rc_t=0
    [[ $1 != -O ]] || fmt=$2
    rm -f "$TEST_DIR/ours" "$TEST_DIR/theirs"
    "$DISKIMG" dd "$@" of="$TEST_DIR/ours" 2>/dev/null || rc_o=$?
    qemu-img dd "$@" of="$TEST_DIR/theirs" 2>/dev/null || rc_t=$?
    if [[ $rc_o -ne $rc_t ]]; then
        echo "dd $*: exit diskimg $rc_o, qemu-img $rc_t" >&2
        return 1
    fi
    [[ $rc_o -eq 0 ]] || return 0
    if [[ $fmt == raw ]]; then
        cmp "$TEST_DIR/theirs" "$TEST_DIR/ours" || { echo "dd $*: outputs differ" >&2; return 1; }
        return 0
    fi
    local vo vt
    vo=$(qemu-img info --output=json -f "$fmt" "$TEST_DIR/ours" | grep '"virtual-size"')
    vt=$(qemu-img info --output=json -f "$fmt" "$TEST_DIR/theirs" | grep '"virtual-size"')
    [[ "$vo" == "$vt" ]] || { echo "dd $*: $vo vs $vt" >&2; return 1; }
    qemu-img compare -q -f "$fmt" -F "$fmt" "$TEST_DIR/theirs" "$TEST_DIR/ours" ||
        { echo "dd $*: contents differ" >&2; return 1; }
    local rc=0
    qemu-img check -q -f "$fmt" "$TEST_DIR/ours" 2>/dev/null || rc=$?
    [[ $rc -eq 0 || $rc -eq 63 ]] || { echo "dd $*: qemu-img check exit $rc" >&2; return 1; }
}

@test "dd --help: synopsis, operands, exit status" {
    run -0 "$DISKIMG" dd --help
    assert_output --partial "Usage: diskimg dd"
    assert_output --partial "count=BLOCKS"
    assert_output --partial "Exit status"
    run -0 "$DISKIMG" --help
    assert_output --partial "dd "
}

@test "dd: the same output as qemu-img dd, raw byte for byte" {
    make_inputs
    local in ops
    for in in in.raw in.qcow2; do
        for ops in "bs=64k" "bs=64k count=10" "bs=64k skip=2 count=10" "bs=1.5k count=3" \
            "count=1k skip=7" "bs=1000 skip=3 count=2999" "bs=64k skip=1 count=1"; do
            # shellcheck disable=SC2086
            same_dd if="$TEST_DIR/$in" $ops
        done
        same_dd -f "${in#in.}" if="$TEST_DIR/$in" bs=512k skip=1
    done
    same_dd if="$TEST_DIR/in.raw" # bs=512 by default
    # if= given twice: the last one, as qemu-img
    same_dd if="$TEST_DIR/in.qcow2" if="$TEST_DIR/in.raw" bs=4k count=3
}

@test "dd -O: every output format holds what qemu-img dd writes" {
    make_inputs
    local fmt
    for fmt in qcow2 vpc vmdk vhdx vdi; do
        same_dd -O "$fmt" if="$TEST_DIR/in.qcow2" bs=1M skip=1 count=6
        same_dd -O "$fmt" if="$TEST_DIR/in.raw" bs=4k count=100
    done
}

@test "dd: a skip past the end gives an empty output and a warning, exit 0" {
    make_inputs
    run -0 --separate-stderr "$DISKIMG" dd if="$TEST_DIR/in.raw" of="$TEST_DIR/o.raw" bs=64k skip=100
    [[ $(wc -l <<<"$stderr") -eq 1 && "$stderr" == *"cannot skip"* ]]
    [[ $(stat -c %s "$TEST_DIR/o.raw") -eq 0 ]]
    same_dd if="$TEST_DIR/in.raw" bs=64k skip=100
    same_dd if="$TEST_DIR/in.raw" bs=1k count=100 skip=200
    same_dd -O qcow2 if="$TEST_DIR/in.raw" bs=2147483647 skip=4611686018427387904
    # an existing output is overwritten, as qemu-img does
    head -c 1M /dev/urandom >"$TEST_DIR/o.raw"
    run -0 "$DISKIMG" dd if="$TEST_DIR/in.raw" of="$TEST_DIR/o.raw" bs=4k count=1
    cmp "$TEST_DIR/o.raw" <(head -c 4096 "$TEST_DIR/in.raw")
}

@test "dd: bad operands exit 2 with the reason and create nothing" {
    make_inputs
    local in=if=$TEST_DIR/in.raw out=of=$TEST_DIR/o.raw
    run -2 "$DISKIMG" dd "$in"
    assert_output --partial "both if=INPUT and of=OUTPUT must be given"
    run -2 "$DISKIMG" dd "$out"
    run -2 "$DISKIMG" dd
    run -2 "$DISKIMG" dd "$in" "$out" foo=1
    assert_output --partial "unrecognized operand 'foo'"
    run -2 "$DISKIMG" dd "$in" "$out" bs
    assert_output --partial "unrecognized operand 'bs'"
    run -2 "$DISKIMG" dd "$in" "$out" bs=0
    assert_output --partial "invalid bs '0': it must be between 1 and 2147483647"
    run -2 "$DISKIMG" dd "$in" "$out" bs=2G
    assert_output --partial "invalid bs '2G'"
    run -2 "$DISKIMG" dd "$in" "$out" count=-1
    assert_output --partial "invalid count '-1'"
    run -2 "$DISKIMG" dd "$in" "$out" skip=x
    assert_output --partial "invalid skip 'x'"
    run -2 "$DISKIMG" dd "$in" "$out" -Z
    assert_output --partial "unknown option '-Z'"
    run -2 "$DISKIMG" dd "$in" "$out" -f
    assert_output --partial "option '-f' needs a value"
    [[ ! -e $TEST_DIR/o.raw ]]
    # qemu-img refuses the same (with exit 1)
    for ops in "$in" "$in $out foo=1" "$in $out bs=0" "$in $out count=-1"; do
        # shellcheck disable=SC2086
        run -1 qemu-img dd $ops
    done
}

@test "dd: failures are one line, exit 1, leave no output and destroy nothing" {
    make_inputs
    local d=$TEST_DIR
    one_line() {
        [[ $(wc -l <<<"$stderr") -eq 1 && "$stderr" == "diskimg: "* ]] ||
            { echo "stderr: $stderr" >&2; return 1; }
    }
    run -1 --separate-stderr "$DISKIMG" dd if="$d/missing" of="$d/o.raw"
    one_line
    run -1 --separate-stderr "$DISKIMG" dd -f qcow2 if="$d/in.raw" of="$d/o.raw"
    one_line
    run -1 --separate-stderr "$DISKIMG" dd -O bogus if="$d/in.raw" of="$d/o.raw"
    one_line
    run -1 --separate-stderr "$DISKIMG" dd if="$d/in.raw" of="$d/nodir/o.raw"
    one_line
    [[ ! -e $d/o.raw ]]
    # the output is the input, or the input's backing file: refused, intact
    local sum base
    sum=$(md5sum <"$d/in.raw")
    base=$(md5sum <"$d/base.raw")
    ln "$d/in.raw" "$d/link.raw"
    run -1 --separate-stderr "$DISKIMG" dd if="$d/in.raw" of="$d/link.raw"
    assert_equal "$stderr" "diskimg: $d/in.raw and $d/link.raw are the same file"
    run -5 --separate-stderr "$DISKIMG" dd if="$d/in.qcow2" of="$d/base.raw"
    [[ "$stderr" == *"base.raw: failed to get \"write\" lock"* ]]
    run -5 --separate-stderr "$DISKIMG" convert "$d/in.qcow2" "$d/base.raw" # (the same hold)
    [[ $(md5sum <"$d/in.raw") == "$sum" && $(md5sum <"$d/base.raw") == "$base" ]]
}

@test "dd: an input another process writes is refused (exit 5), -U reads it" {
    require_tool qemu-nbd
    make_inputs
    qemu-nbd --fork --pid-file="$TEST_DIR/qemu-nbd.pid" -k "$TEST_DIR/q.sock" -f raw \
        "$TEST_DIR/in.raw"
    run -5 "$DISKIMG" dd if="$TEST_DIR/in.raw" of="$TEST_DIR/o.raw" bs=64k count=2
    assert_output --partial "-U (--force-share) reads it anyway"
    [[ ! -e $TEST_DIR/o.raw ]]
    run -0 "$DISKIMG" dd -U if="$TEST_DIR/in.raw" of="$TEST_DIR/o.raw" bs=64k count=2
    cmp "$TEST_DIR/o.raw" <(head -c 131072 "$TEST_DIR/in.raw")
}

@test "dd: interrupted, it stops and removes its output (exit 128 + signal)" {
    require_tool nbdkit
    local sock=$TEST_DIR/n.sock pid rc=0
    # a slow input: every 1 MiB read takes 200 ms
    nbdkit -f -U "$sock" --filter=delay pattern size=64M rdelay=200ms &
    echo $! >"$TEST_DIR/nbdkit.pid"
    wait_until 10 unix_listening "$sock"
    "$DISKIMG" dd -f raw if="nbd+unix:///?socket=$sock" of="$TEST_DIR/o.raw" bs=1M \
        2>"$TEST_DIR/err" &
    pid=$!
    # Stopped in the middle of the copy: once some data is out.
    wait_until 10 test -s "$TEST_DIR/o.raw"
    kill -TERM "$pid"
    wait "$pid" || rc=$?
    [[ $rc -eq 143 ]] || { echo "exit $rc: $(cat "$TEST_DIR/err")" >&2; return 1; }
    [[ ! -e $TEST_DIR/o.raw ]]
    assert_equal "$(cat "$TEST_DIR/err")" "diskimg: dd: interrupted"
}

#!/usr/bin/env bats
# diskimg bench: reads and writes (-w, --fua, --flush-interval) on local
# raw and qcow2 images and on NBD URIs served by diskimg serve; the report
# (human and --output=json) is sane -- every request counted, IOPS and MB/s
# positive and consistent, latency percentiles ordered; writes land where
# -o/-s/-c say; the server sees exactly the requests bench claims to send;
# bad options exit 2, runtime failures exit 1 with one line.

load '../helpers'
load '../interop/lib'

setup() { setup_test; }
teardown() {
    kill_extra_servers
    cleanup_test
}

MiB=1048576

# check_json FILE COUNT SIZE DEPTH OPERATION PATTERN: the --output=json
# document in FILE reports this run and its numbers are sane.
check_json() {
    local f=$1 count=$2 size=$3 depth=$4 op=$5 pattern=$6
    jq -e . "$f" >/dev/null || { echo "not JSON:" >&2; cat "$f" >&2; return 1; }
    jq -e --argjson c "$count" --argjson s "$size" --argjson d "$depth" \
        --arg op "$op" --arg p "$pattern" '
        .requests == $c and ."request-size" == $s and .depth == $d
        and .operation == $op and .pattern == $p
        and .seconds > 0 and .iops > 0 and .mbps > 0
        # MB/s is IOPS times the request size (1% slack for rounding)
        and ((.mbps - .iops * $s / 1e6) | fabs) <= (.mbps / 100 + 0.01)
        # IOPS is requests per second (seconds are printed to the
        # millisecond: allow for that and 1% more)
        and ((.iops * .seconds - $c) | fabs) <= ($c / 100 + .iops * 0.0005 + 1)
        and (."latency-us" | .mean > 0 and .p50 > 0
             and .p50 <= .p90 and .p90 <= .p99 and .p99 <= ."p99.9"
             and ."p99.9" <= .max and .mean <= .max)' "$f" >/dev/null || {
        echo "bench JSON not sane for count=$count size=$size depth=$depth op=$op pattern=$pattern:" >&2
        cat "$f" >&2
        return 1
    }
}

# check_human OUTPUT COUNT SIZE DEPTH WORD: the human report of a run.
check_human() {
    local out=$1 count=$2 size=$3 depth=$4 word=$5 line
    [[ "$out" == *"Sending $count $word requests, $size bytes each, $depth in parallel"* ]] || {
        echo "no 'Sending' line in: $out" >&2
        return 1
    }
    [[ "$out" =~ Run\ completed\ in\ [0-9]+\.[0-9]+\ seconds\. ]] || {
        echo "no 'Run completed' line in: $out" >&2
        return 1
    }
    line=$(grep -E '^[0-9]+ IOPS, [0-9.]+ MB/s; latency us: ' <<<"$out") || {
        echo "no IOPS line in: $out" >&2
        return 1
    }
    # "N IOPS, X MB/s; latency us: mean A, p50 B, p90 C, p99 D, p99.9 E, max F"
    awk '{
        gsub(/[,;]/, "")
        iops = $1; mbps = $3
        mean = $8; p50 = $10; p90 = $12; p99 = $14; p999 = $16; max = $18
        ok = iops > 0 && mbps > 0 && p50 <= p90 && p90 <= p99 && p99 <= p999 && p999 <= max && mean <= max
        exit !ok
    }' <<<"$line" || {
        echo "human report not sane: $line" >&2
        return 1
    }
}

# server_stat FILE EXPR: a number from the server's --stats JSON.
server_stat() {
    jq -r "$2" "$1"
}

@test "bench --help lists every option" {
    run "$DISKIMG" bench --help
    assert_success
    assert_output --partial "Usage: diskimg bench"
    local o
    for o in -w --fua -d -s -c -o --flush-interval --pattern --output; do
        assert_output --partial -- "$o"
    done
    run "$DISKIMG" help bench
    assert_success
    assert_output --partial "Usage: diskimg bench"
}

@test "bench reads a local raw file: human report" {
    truncate -s 8M "$TEST_DIR/a.raw"
    run "$DISKIMG" bench -c 2000 -d 4 "$TEST_DIR/a.raw"
    assert_success
    check_human "$output" 2000 4096 4 read
    assert_output --partial "(sequential, starting at offset 0)"
}

@test "bench --output=json: one JSON document on stdout, nothing else" {
    truncate -s 8M "$TEST_DIR/a.raw"
    run --separate-stderr "$DISKIMG" bench --output=json -c 1000 -d 8 -s 8k "$TEST_DIR/a.raw"
    assert_success
    [[ -z "$stderr" ]]
    printf '%s\n' "$output" >"$TEST_DIR/out.json"
    check_json "$TEST_DIR/out.json" 1000 8192 8 read seq
    [[ "$output" != *Sending* ]]
    # --output=human is the default
    run "$DISKIMG" bench --output=human -c 10 "$TEST_DIR/a.raw"
    assert_success
    check_human "$output" 10 4096 64 read
}

@test "bench -w writes its pattern exactly where -o, -s and -c say, nothing else" {
    make_pattern "$TEST_DIR/a.raw" $((4 * MiB))
    cp "$TEST_DIR/a.raw" "$TEST_DIR/orig.raw"
    # 100 sequential 8k writes from 1M: [1M, 1M + 800k) becomes 0xa5
    run "$DISKIMG" bench -w -o 1M -s 8k -c 100 -d 4 "$TEST_DIR/a.raw"
    assert_success
    check_human "$output" 100 8192 4 write
    assert_output --partial "starting at offset 1048576"
    range_is "$TEST_DIR/a.raw" $MiB $((100 * 8192)) a5
    cmp -n $MiB "$TEST_DIR/a.raw" "$TEST_DIR/orig.raw"
    cmp -i $((MiB + 819200)) "$TEST_DIR/a.raw" "$TEST_DIR/orig.raw"
    [[ $(stat -c %s "$TEST_DIR/a.raw") -eq $((4 * MiB)) ]]
}

@test "bench -w with unaligned request sizes and -t none (O_DIRECT): data still exact" {
    truncate -s 1M "$TEST_DIR/a.raw"
    run "$DISKIMG" bench -w -t none -s 1000 -c 300 -d 8 "$TEST_DIR/a.raw"
    assert_success
    range_is "$TEST_DIR/a.raw" 0 300000 a5
    range_is "$TEST_DIR/a.raw" 300000 $((MiB - 300000)) 00
}

@test "bench -w --pattern=rand stays inside the image" {
    truncate -s 2M "$TEST_DIR/a.raw"
    run "$DISKIMG" bench -w --pattern=rand -s 4k -c 2000 -d 8 --output=json "$TEST_DIR/a.raw"
    assert_success
    printf '%s\n' "$output" >"$TEST_DIR/out.json"
    check_json "$TEST_DIR/out.json" 2000 4096 8 write rand
    [[ $(stat -c %s "$TEST_DIR/a.raw") -eq $((2 * MiB)) ]]
    # Random 4k slots: only whole 4k blocks of 0xa5 or of zeroes.
    "$PYTHON3" - "$TEST_DIR/a.raw" <<'EOF'
import sys
d = open(sys.argv[1], "rb").read()
written = 0
for i in range(0, len(d), 4096):
    b = d[i:i + 4096]
    if b == b"\xa5" * 4096:
        written += 1
    elif b != bytes(4096):
        sys.exit("block at %d is neither the pattern nor zero" % i)
# 2000 random picks among 512 slots touch far more than a handful
if written < 100:
    sys.exit("only %d blocks written" % written)
EOF
}

@test "bench on a qcow2 image: reads, writes, FUA and flushes; qemu-img check clean" {
    require_tool qemu-img qemu-io
    "$DISKIMG" create -q -f qcow2 "$TEST_DIR/a.qcow2" 16M
    run "$DISKIMG" bench -w -c 512 -s 16k -d 8 "$TEST_DIR/a.qcow2"
    assert_success
    check_human "$output" 512 16384 8 write
    run "$DISKIMG" bench -w --fua --pattern=rand -c 300 -s 4k -d 4 --output=json "$TEST_DIR/a.qcow2"
    assert_success
    printf '%s\n' "$output" >"$TEST_DIR/out.json"
    check_json "$TEST_DIR/out.json" 300 4096 4 write-fua rand
    run "$DISKIMG" bench -w --flush-interval=10 -c 200 -d 2 --output=json -f qcow2 "$TEST_DIR/a.qcow2"
    assert_success
    printf '%s\n' "$output" >"$TEST_DIR/out.json"
    [[ $(jq .flushes "$TEST_DIR/out.json") -eq 20 ]]
    run qemu-img check "$TEST_DIR/a.qcow2"
    assert_success
    # The first 512 x 16k = 8M are the pattern.
    run qemu-io -f qcow2 -r -c 'read -P 0xa5 0 8M' "$TEST_DIR/a.qcow2"
    assert_success
    refute_output --partial "Pattern verification failed"
    run "$DISKIMG" bench -c 1000 -d 16 --pattern=rand "$TEST_DIR/a.qcow2"
    assert_success
    check_human "$output" 1000 4096 16 read
}

@test "bench --flush-interval=N: COUNT/N flushes reported" {
    truncate -s 4M "$TEST_DIR/a.raw"
    run "$DISKIMG" bench -w --flush-interval=25 -c 500 -d 4 --output=json "$TEST_DIR/a.raw"
    assert_success
    printf '%s\n' "$output" >"$TEST_DIR/out.json"
    check_json "$TEST_DIR/out.json" 500 4096 4 write seq
    [[ $(jq .flushes "$TEST_DIR/out.json") -eq 20 ]]
    jq -e '."flush-p50-us" > 0' "$TEST_DIR/out.json"
    run "$DISKIMG" bench -w --flush-interval=100 -c 300 "$TEST_DIR/a.raw"
    assert_success
    assert_output --partial "3 flushes, p50 "
}

@test "bench on an NBD URI (diskimg serve): the server sees exactly COUNT reads of SIZE" {
    truncate -s 16M "$TEST_DIR/a.raw"
    start_server --stats="$TEST_DIR/stats.json" "$TEST_DIR/a.raw"
    run "$DISKIMG" bench -f raw -c 700 -s 64k -d 16 --pattern=rand --output=json "$URI"
    assert_success
    printf '%s\n' "$output" >"$TEST_DIR/out.json"
    check_json "$TEST_DIR/out.json" 700 65536 16 read rand
    stop_server
    [[ $SERVER_STATUS -eq 0 ]]
    [[ $(server_stat "$TEST_DIR/stats.json" '.commands.NBD_CMD_READ.count') -eq 700 ]]
    [[ $(server_stat "$TEST_DIR/stats.json" '.commands.NBD_CMD_READ.bytes') -eq $((700 * 65536)) ]]
    [[ $(server_stat "$TEST_DIR/stats.json" '.commands.NBD_CMD_WRITE.count // 0') -eq 0 ]]
}

@test "bench -w --fua on an NBD URI: every write carries FUA, data lands in the served file" {
    truncate -s 8M "$TEST_DIR/a.raw"
    start_server --stats="$TEST_DIR/stats.json" "$TEST_DIR/a.raw"
    run "$DISKIMG" bench -f raw -w --fua -c 256 -s 4k -d 8 "$URI"
    assert_success
    check_human "$output" 256 4096 8 write
    assert_output --partial ", FUA"
    stop_server
    [[ $SERVER_STATUS -eq 0 ]]
    [[ $(server_stat "$TEST_DIR/stats.json" '.commands.NBD_CMD_WRITE.count') -eq 256 ]]
    [[ $(server_stat "$TEST_DIR/stats.json" '."fua-requests"') -eq 256 ]]
    range_is "$TEST_DIR/a.raw" 0 $((256 * 4096)) a5
    range_is "$TEST_DIR/a.raw" $((256 * 4096)) $((8 * MiB - 256 * 4096)) 00
}

@test "bench -w --flush-interval on an NBD URI: the server gets the flushes, no FUA" {
    truncate -s 8M "$TEST_DIR/a.raw"
    start_server --stats="$TEST_DIR/stats.json" "$TEST_DIR/a.raw"
    run "$DISKIMG" bench -f raw -w --flush-interval=50 -c 400 -d 4 --output=json "$URI"
    assert_success
    printf '%s\n' "$output" >"$TEST_DIR/out.json"
    check_json "$TEST_DIR/out.json" 400 4096 4 write seq
    [[ $(jq .flushes "$TEST_DIR/out.json") -eq 8 ]]
    stop_server
    [[ $(server_stat "$TEST_DIR/stats.json" '.commands.NBD_CMD_WRITE.count') -eq 400 ]]
    # A flush that finds every completed write already covered by the one
    # before it is shared, not sent (block/flush.c): with writes still in
    # flight at a flush point, fewer than 8 may reach the server.
    local flushes
    flushes=$(server_stat "$TEST_DIR/stats.json" '.commands.NBD_CMD_FLUSH.count')
    [[ $flushes -ge 1 && $flushes -le 8 ]]
    [[ $(server_stat "$TEST_DIR/stats.json" '."fua-requests"') -eq 0 ]]
}

@test "bench on an NBD URI over TCP 127.0.0.1, depth 1 and 32" {
    truncate -s 4M "$TEST_DIR/a.raw"
    start_server_tcp 127.0.0.1 -t "$TEST_DIR/a.raw"
    local d
    for d in 1 32; do
        run "$DISKIMG" bench -f raw -w -c 300 -d $d --output=json "$URI"
        assert_success
        printf '%s\n' "$output" >"$TEST_DIR/out.json"
        check_json "$TEST_DIR/out.json" 300 4096 $d write seq
    done
    stop_server
    range_is "$TEST_DIR/a.raw" 0 $((300 * 4096)) a5
}

@test "bench -w on a read-only export or image fails with one line (exit 1)" {
    truncate -s 4M "$TEST_DIR/a.raw"
    start_server -r "$TEST_DIR/a.raw"
    run --separate-stderr "$DISKIMG" bench -f raw -w -c 10 "$URI"
    assert_failure 1
    [[ $(printf '%s\n' "$stderr" | wc -l) -eq 1 ]]
    [[ "$stderr" == *read-only* ]]
    stop_server
    range_is "$TEST_DIR/a.raw" 0 $((4 * MiB)) 00
    # reads work on a read-only file
    chmod 0444 "$TEST_DIR/a.raw"
    run "$DISKIMG" bench -c 10 "$TEST_DIR/a.raw"
    assert_success
}

@test "bench: a failing write and a failing final flush each fail with one line (exit 1)" {
    require_tool nbdkit
    start_kit "$TEST_DIR/w.sock" --filter=error memory 4M error-pwrite=EIO error-pwrite-rate=100%
    run --separate-stderr "$DISKIMG" bench -w -c 10 "nbd+unix:///?socket=$TEST_DIR/w.sock"
    assert_failure 1
    [[ $(printf '%s\n' "$stderr" | wc -l) -eq 1 && "$stderr" == "diskimg: "* ]]
    [[ "$stderr" == *"Input/output error"* ]]

    # nbdkit's error filter cannot fail flushes: a plugin whose flush fails
    start_kit "$TEST_DIR/f.sock" eval get_size='echo 4M' can_write='exit 0' can_flush='exit 0' \
        pwrite='cat >/dev/null' flush='echo "EIO the disk is gone" >&2; exit 1'
    run --separate-stderr "$DISKIMG" bench -f raw -w -c 10 "nbd+unix:///?socket=$TEST_DIR/f.sock"
    assert_failure 1
    [[ $(printf '%s\n' "$stderr" | wc -l) -eq 1 && "$stderr" == "diskimg: "* ]]
    [[ "$stderr" == *"NBD_CMD_FLUSH failed: Input/output error"* ]]
    kill_extra_servers
}

@test "bench --aio=io_uring and cache modes on a local file" {
    truncate -s 4M "$TEST_DIR/a.raw"
    local t
    for t in none writeback writethrough directsync unsafe; do
        run "$DISKIMG" bench -w -t $t -c 200 -d 8 "$TEST_DIR/a.raw"
        assert_success
        check_human "$output" 200 4096 8 write
    done
    run "$DISKIMG" bench --aio=threads -c 200 "$TEST_DIR/a.raw"
    assert_success
    if "$DISKIMG" bench --aio=io_uring -c 1 "$TEST_DIR/a.raw" >/dev/null 2>&1; then
        run "$DISKIMG" bench --aio=io_uring -t none -w -c 500 -d 16 --output=json "$TEST_DIR/a.raw"
        assert_success
        printf '%s\n' "$output" >"$TEST_DIR/out.json"
        check_json "$TEST_DIR/out.json" 500 4096 16 write seq
        range_is "$TEST_DIR/a.raw" 0 $((500 * 4096)) a5
    fi
}

@test "bench: the image must hold one request at the offset (exit 1, one line)" {
    truncate -s 4k "$TEST_DIR/a.raw"
    run --separate-stderr "$DISKIMG" bench -s 8k -c 1 "$TEST_DIR/a.raw"
    assert_failure 1
    [[ $(printf '%s\n' "$stderr" | wc -l) -eq 1 ]]
    [[ "$stderr" == *"too small"* ]]
    run --separate-stderr "$DISKIMG" bench -o 4k -c 1 "$TEST_DIR/a.raw"
    assert_failure 1
    [[ $(printf '%s\n' "$stderr" | wc -l) -eq 1 ]]
    # exactly one request fits
    run "$DISKIMG" bench -s 4k -c 5 "$TEST_DIR/a.raw"
    assert_success
}

@test "bench: a missing image or server exits 1 with one line" {
    run --separate-stderr "$DISKIMG" bench -c 1 "$TEST_DIR/nope.raw"
    assert_failure 1
    [[ $(printf '%s\n' "$stderr" | wc -l) -eq 1 ]]
    [[ "$stderr" == *"nope.raw"* ]]
    run --separate-stderr "$DISKIMG" bench -c 1 "nbd+unix:///?socket=$TEST_DIR/none.sock"
    assert_failure 1
    [[ $(printf '%s\n' "$stderr" | wc -l) -eq 1 ]]
    [[ "$stderr" == *none.sock* ]]
    [[ -z "$output" ]]
}

@test "bench: bad options exit 2 with the reason and no run" {
    truncate -s 1M "$TEST_DIR/a.raw"
    local args
    while IFS= read -r args; do
        # shellcheck disable=SC2086
        run --separate-stderr "$DISKIMG" bench $args "$TEST_DIR/a.raw"
        [[ $status -eq 2 ]] || { echo "bench $args: exit $status, want 2 ($stderr)" >&2; return 1; }
        [[ -n "$stderr" && "$output" != *Sending* ]] || { echo "bench $args: $stderr / $output" >&2; return 1; }
    done <<'EOF'
-d 0
-d 1025
-d abc
-s 0
-s 64M
-s 4q
-c 0
-c -5
-c abc
--pattern=zigzag
--output=xml
--fua
--flush-interval=0
--flush-interval=x
-t bogus
--aio=bogus
-o abc
--bogus
-d
EOF
    run "$DISKIMG" bench
    assert_failure 2
    run "$DISKIMG" bench "$TEST_DIR/a.raw" "$TEST_DIR/a.raw"
    assert_failure 2
}

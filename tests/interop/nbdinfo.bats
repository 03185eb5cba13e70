#!/usr/bin/env bats
# nbdinfo (libnbd) against diskimg serve: what the handshake advertises
# (flags, size, names, descriptions, block sizes) and --map.

load '../helpers'
load 'lib'

setup() { setup_test; }
teardown() { cleanup_test; }

# nbdinfo_field OUTPUT KEY: the value of "KEY: value" in nbdinfo's text output.
nbdinfo_field() {
    printf '%s\n' "$1" | sed -n "s/^[[:space:]]*$2: //p"
}

@test "nbdinfo: a writable export advertises FUA, flush, trim, zero, fast zero, DF, cache" {
    require_tool nbdinfo
    truncate -s 4M "$TEST_DIR/a.img"
    start_server -t "$TEST_DIR/a.img"

    run nbdinfo "$URI"
    assert_success
    local f
    for f in can_fua can_flush can_trim can_zero can_fast_zero can_df can_cache; do
        [[ $(nbdinfo_field "$output" "$f") == true ]] || {
            echo "$f is not true" >&2
            return 1
        }
    done
    [[ $(nbdinfo_field "$output" is_read_only) == false ]]
    [[ $(nbdinfo_field "$output" export-size) == "4194304 (4M)" ]]
    # One client at a time (default -e 1): no multi-conn.
    [[ $(nbdinfo_field "$output" can_multi_conn) == false ]]
    assert_output --partial "base:allocation"
    [[ $(nbdinfo_field "$output" block_size_maximum) == 33554432 ]]
}

@test "nbdinfo: can_multi_conn only when more than one client is allowed (-e 2, -e 0)" {
    require_tool nbdinfo
    truncate -s 1M "$TEST_DIR/a.img"
    local e
    for e in 2 0; do
        start_server -t -e "$e" "$TEST_DIR/a.img"
        run nbdinfo --can multi-conn "$URI"
        assert_success
        stop_server
    done
    start_server -t -e 1 "$TEST_DIR/a.img"
    run nbdinfo --can multi-conn "$URI"
    assert_failure
}

@test "nbdinfo: exact size of an unaligned export (1000001 bytes)" {
    require_tool nbdinfo
    truncate -s 1000001 "$TEST_DIR/a.img"
    start_server -t "$TEST_DIR/a.img"

    run nbdinfo --size "$URI"
    assert_success
    assert_output 1000001
}

@test "nbdinfo: a read-only export (-r) says is_read_only and offers no trim or zero" {
    require_tool nbdinfo
    truncate -s 1M "$TEST_DIR/a.img"
    start_server -t -r "$TEST_DIR/a.img"

    run nbdinfo "$URI"
    assert_success
    [[ $(nbdinfo_field "$output" is_read_only) == true ]]
    [[ $(nbdinfo_field "$output" can_trim) == false ]]
    [[ $(nbdinfo_field "$output" can_zero) == false ]]
    [[ $(nbdinfo_field "$output" can_fast_zero) == false ]]
    [[ $(nbdinfo_field "$output" can_flush) == true ]]
    run nbdinfo --is read-only "$URI"
    assert_success
}

@test "nbdinfo --map: data versus hole,zero on a sparse file" {
    require_tool nbdinfo
    truncate -s 4M "$TEST_DIR/a.img"
    dd if=/dev/urandom of="$TEST_DIR/a.img" bs=64k seek=16 count=4 conv=notrunc status=none
    dd if=/dev/urandom of="$TEST_DIR/a.img" bs=64k seek=62 count=2 conv=notrunc status=none
    start_server -t "$TEST_DIR/a.img"

    run nbdinfo --map "$URI"
    assert_success
    # columns: offset length type description
    assert_line --regexp '^ +0 +1048576 +3 +hole,zero$'
    assert_line --regexp '^ +1048576 +262144 +0 +data$'
    assert_line --regexp '^ +1310720 +2752512 +3 +hole,zero$'
    assert_line --regexp '^ +4063232 +131072 +0 +data$'
    [[ ${#lines[@]} -eq 4 ]]
}

@test "nbdinfo --map of a file that is all data, and of one that is all hole" {
    require_tool nbdinfo
    make_pattern "$TEST_DIR/a.img" 1000001
    start_server -t "$TEST_DIR/a.img"
    run nbdinfo --map "$URI"
    assert_success
    assert_output --regexp '^ +0 +1000001 +0 +data$'
    stop_server

    truncate -s 3M "$TEST_DIR/b.img"
    start_server -t "$TEST_DIR/b.img"
    run nbdinfo --map "$URI"
    assert_success
    assert_output --regexp '^ +0 +3145728 +3 +hole,zero$'
}

@test "export names: -x NAME is served under NAME only; unknown names are refused" {
    require_tool nbdinfo
    truncate -s 1M "$TEST_DIR/a.img"
    start_server -t -e 0 -x disk1 -D "first disk" "$TEST_DIR/a.img"

    run nbdinfo "nbd+unix:///disk1?socket=$SOCK"
    assert_success
    assert_output --partial 'export="disk1"'
    assert_output --partial "description: first disk"
    [[ $(nbdinfo_field "$output" export-size) == "1048576 (1M)" ]]
    run nbdinfo "nbd+unix:///nosuch?socket=$SOCK"
    assert_failure
    # The default export "" does not exist either.
    run nbdinfo "nbd+unix:///?socket=$SOCK"
    assert_failure
    # The server is still fine after the refusals.
    run nbdinfo --size "nbd+unix:///disk1?socket=$SOCK"
    assert_success
    assert_output 1048576
}

@test "export names: NBD_OPT_LIST (nbdinfo --list) shows the name and description" {
    require_tool nbdinfo
    truncate -s 1M "$TEST_DIR/a.img"
    start_server -t -e 0 -x disk1 -D "first disk" "$TEST_DIR/a.img"

    run nbdinfo --list --json "nbd+unix:///?socket=$SOCK"
    assert_success
    assert_output --partial '"export-name": "disk1"'
    assert_output --partial '"description": "first disk"'
    # exactly one export
    [[ $(grep -c '"export-name"' <<<"$output") -eq 1 ]]
}

@test "nbdinfo: the default export name is the empty string" {
    require_tool nbdinfo
    truncate -s 1M "$TEST_DIR/a.img"
    start_server -t -e 0 "$TEST_DIR/a.img"

    run nbdinfo --list --json "$URI"
    assert_success
    assert_output --partial '"export-name": ""'
    run nbdinfo "nbd+unix:///other?socket=$SOCK"
    assert_failure
}

#!/usr/bin/env bats
# diskimg serve: command line, help, errors and exit codes.

load '../helpers'

setup() { setup_test; }
teardown() { cleanup_test; }

@test "serve --help lists the qemu-nbd spellings" {
    run "$DISKIMG" serve --help
    assert_success
    for opt in --socket --bind --port --format --export-name --description \
               --read-only --persistent --shared --offset --cache --nocache \
               --aio --discard --detect-zeroes --fork --pid-file --verbose; do
        assert_output --partial -- "$opt"
    done
}

@test "serve without an image is a usage error (exit 2)" {
    run --separate-stderr "$DISKIMG" serve -k "$SOCK"
    assert_failure 2
    [[ "$stderr" == *"an IMAGE (or --export) is required"* ]]
}

@test "serve a missing file: one-line error naming it, exit 1" {
    run --separate-stderr "$DISKIMG" serve -k "$SOCK" "$TEST_DIR/nope.img"
    assert_failure 1
    [[ "$stderr" == *"nope.img: No such file or directory"* ]]
    [[ $(printf '%s\n' "$stderr" | wc -l) -eq 1 ]]
}

@test "serve rejects an unknown cache mode (exit 2)" {
    truncate -s 1M "$TEST_DIR/a.img"
    run --separate-stderr "$DISKIMG" serve --cache=bogus -k "$SOCK" "$TEST_DIR/a.img"
    assert_failure 2
    [[ "$stderr" == *"invalid cache mode 'bogus'"* ]]
}

@test "serve --connection-cap and --thread-cap take 1 to 1048576 (exit 2 otherwise)" {
    truncate -s 1M "$TEST_DIR/a.img"
    local bad
    for bad in --connection-cap=0 --connection-cap=x --thread-cap=0 --thread-cap=2000000; do
        run --separate-stderr "$DISKIMG" serve "$bad" -k "$SOCK" "$TEST_DIR/a.img"
        assert_failure 2
        [[ "$stderr" == *"invalid ${bad%%=*} '${bad#*=}'"* ]]
    done
    run "$DISKIMG" serve --help
    assert_output --partial "--connection-cap=N"
    assert_output --partial "--thread-cap=N"
}

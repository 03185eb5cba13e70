#!/usr/bin/env bats
# Hostile VHD images for the vpc driver: crafted footers, dynamic headers,
# BATs and parent locators (vpc_craft.py) end in a one-line error naming
# the file, within seconds, under a 2 GiB address space; differencing
# chains that loop, go too deep or name the wrong parent are refused.
# Its own suite so that the sanitizer build runs it (suite "san") without
# the rest of vpc.bats.

load '../helpers'

setup() { setup_test; }
teardown() { cleanup_test; }

CRAFT=$BATS_TEST_DIRNAME/vpc_craft.py

@test "vpc differencing: loops, depth, wrong parent, hostile locators" {
    "$DISKIMG" create -q -f vpc "$TEST_DIR/base.vhd" 3M
    "$PYTHON3" "$CRAFT" diff "$TEST_DIR/base.vhd" "$TEST_DIR/self.vhd" self
    run timeout 10 "$DISKIMG" compare "$TEST_DIR/self.vhd" "$TEST_DIR/base.vhd"
    assert_failure
    assert_output --partial "backing file loop"
    "$PYTHON3" "$CRAFT" diff "$TEST_DIR/base.vhd" "$TEST_DIR/uuid.vhd" uuid
    run "$DISKIMG" compare "$TEST_DIR/uuid.vhd" "$TEST_DIR/base.vhd"
    assert_failure
    assert_output --partial "is not the one this image was made from"
    "$PYTHON3" "$CRAFT" diff "$TEST_DIR/base.vhd" "$TEST_DIR/far.vhd" far
    run "$DISKIMG" info "$TEST_DIR/far.vhd"
    assert_failure
    assert_output --partial "parent locator of"
    mkdir "$TEST_DIR/ch"
    cp "$TEST_DIR/base.vhd" "$TEST_DIR/ch/"
    "$PYTHON3" "$CRAFT" chain "$TEST_DIR/ch/base.vhd" 33 "$TEST_DIR/ch"
    run "$DISKIMG" compare "$TEST_DIR/ch/c32.vhd" "$TEST_DIR/ch/c1.vhd"
    assert_success
    run "$DISKIMG" compare "$TEST_DIR/ch/c33.vhd" "$TEST_DIR/ch/c1.vhd"
    assert_failure
    assert_output --partial "backing chain deeper than 32"
    # A parent that is not a regular file: a FIFO is refused, not read
    # (which would block), and so is a directory.
    rm "$TEST_DIR/base.vhd"
    mkfifo "$TEST_DIR/base.vhd"
    run timeout 10 "$DISKIMG" compare "$TEST_DIR/uuid.vhd" "$TEST_DIR/ch/base.vhd"
    [[ $status -eq 2 ]] || { echo "status $status: $output"; false; }
    assert_output --partial "base.vhd is not a regular file or a block device"
    rm "$TEST_DIR/base.vhd"
    mkdir "$TEST_DIR/base.vhd"
    run timeout 10 "$DISKIMG" compare "$TEST_DIR/uuid.vhd" "$TEST_DIR/ch/base.vhd"
    [[ $status -eq 2 ]] || { echo "status $status: $output"; false; }
}

@test "vpc hostile images: a clear error within seconds, under a 2 GiB address space" {
    require_tool qemu-img
    qemu-img create -q -f vpc "$TEST_DIR/base.vhd" 5M
    qemu-io -f vpc -c 'write -P 0x41 0 64k' -c 'write -P 0x42 3M 4k' "$TEST_DIR/base.vhd" >/dev/null
    local kind
    declare -A want=(
        [footer-csum]="incorrect checksum of the footer"
        [header-csum]="incorrect checksum of the dynamic header"
        [huge-bat]="vpc: BAT"
        [bat-past-end]="BAT entry 0 points past the end of the file"
        [bat-into-meta]="BAT entry 0 points into the image's metadata"
        [few-entries]="too few for"
        [block-size]="invalid block size 3145728"
        [tiny-blocks]="more than diskimg loads"
        [header-past-end]="dynamic header offset"
    )
    for kind in "${!want[@]}"; do
        "$PYTHON3" "$CRAFT" hostile "$kind" "$TEST_DIR/base.vhd" "$TEST_DIR/h.vhd"
        run bounded "$DISKIMG" convert -O raw "$TEST_DIR/h.vhd" "$TEST_DIR/out.raw"
        [[ $status -eq 1 ]] || { echo "$kind: status $status: $output"; false; }
        [[ $output == *"h.vhd"*"${want[$kind]}"* ]] || { echo "$kind: $output"; false; }
    done
    # Truncated: a fixed image shorter than its footer says.
    qemu-img create -q -f vpc -o subformat=fixed,force_size=on "$TEST_DIR/f.vhd" 4M
    tail -c 512 "$TEST_DIR/f.vhd" >"$TEST_DIR/footer"
    truncate -s 1M "$TEST_DIR/f.vhd"
    cat "$TEST_DIR/footer" >>"$TEST_DIR/f.vhd"
    run "$DISKIMG" info "$TEST_DIR/f.vhd"
    assert_failure
    assert_output --partial "is truncated"
}

#!/usr/bin/env bats
# Persistent bitmaps survive a crash at every write: strace kills diskimg
# (SIGKILL) at its Nth write to the image, for every N, while it saves
# bitmaps (diskimg bitmap) and while a writer records into one and saves
# it at close (convert -n).  After each crash qemu-img check finds no
# error (leaks allowed), and a bitmap qemu calls consistent covers every
# write: it is never saved clean while missing one.

load '../helpers'
load 'lib'

setup() {
    require_tool strace qemu-img qemu-io qemu-nbd nbdinfo jq
    setup_test
    IMG=$TEST_DIR/a.qcow2
}
teardown() { cleanup_test; }

# crash_at N CMD...: run CMD, killed at its Nth write syscall; the exit
# status of CMD (137 when killed).
crash_at() {
    local n=$1
    shift
    # (LeakSanitizer cannot ptrace a process strace already traces.)
    ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0 \
        strace -f -o /dev/null -e "inject=pwrite64,pwritev,pwritev2:signal=KILL:when=$n" "$@" \
        2>/dev/null
}

# no_errors IMAGE: qemu-img check exits 0 or 3 (leaked clusters only).
no_errors() {
    local rc=0
    qemu-img check "$1" >"$TEST_DIR/check.out" 2>&1 || rc=$?
    [[ $rc -eq 0 || $rc -eq 3 ]] || { cat "$TEST_DIR/check.out" >&2; return 1; }
}

names() {
    qemu-img info --output=json "$1" | jq -r '[.["format-specific"].data.bitmaps // [] | .[] | "\(.name):\(.flags | join("+"))"] | join(" ")'
}

@test "a crash at any write of bitmap --add --merge leaves the old or the new bitmaps" {
    qemu-img create -q -f qcow2 "$TEST_DIR/base.qcow2" 64M
    qemu-img bitmap --add "$TEST_DIR/base.qcow2" b0
    qemu-io -f qcow2 -c 'write 1M 64k' "$TEST_DIR/base.qcow2" >/dev/null
    local n rc seen_new=0
    for n in $(seq 1 40); do
        cp "$TEST_DIR/base.qcow2" "$IMG"
        rc=0
        crash_at "$n" "$DISKIMG" bitmap --add -g 4k --merge b0 "$IMG" b1 || rc=$?
        no_errors "$IMG"
        case "$(names "$IMG")" in
        "b0:auto") ;;
        "b0:auto b1:auto") seen_new=1 ;;
        *) echo "n=$n: $(names "$IMG")" >&2; false ;;
        esac
        [[ $rc -ne 0 ]] || break # no Nth write: the run completed
    done
    [[ $rc -eq 0 && $seen_new -eq 1 && $n -gt 5 ]]
    [[ $(qemu_dirty "$IMG" b1) == '1048576 65536' ]]
}

@test "a crash at any write of convert -n never leaves a clean bitmap that misses a write" {
    qemu-img create -q -f qcow2 "$TEST_DIR/base.qcow2" 16M
    qemu-img bitmap --add "$TEST_DIR/base.qcow2" b0
    qemu-img create -q -f raw "$TEST_DIR/src.raw" 1M
    qemu-io -f raw -c 'write -P 7 0 1M' "$TEST_DIR/src.raw" >/dev/null
    qemu-img create -q -f raw "$TEST_DIR/zero.raw" 16M
    local n rc clean=0 early=0 inuse=0
    for n in $(seq 1 60); do
        cp "$TEST_DIR/base.qcow2" "$IMG"
        rc=0
        crash_at "$n" "$DISKIMG" convert -n -f raw -O qcow2 "$TEST_DIR/src.raw" "$IMG" || rc=$?
        no_errors "$IMG"
        case "$(names "$IMG")" in
        "b0:in-use+auto") inuse=1 ;;
        "b0:auto")
            # Clean: before the first data write, or saved with every write.
            if qemu-img compare -q -f raw -F qcow2 "$TEST_DIR/zero.raw" "$IMG"; then
                early=1 # no data written yet
            else
                [[ $(qemu_dirty "$IMG" b0) == '0 1048576' ]] || { echo "n=$n: $(qemu_dirty "$IMG" b0)" >&2; false; }
                clean=1
            fi
            ;;
        *) echo "n=$n: $(names "$IMG")" >&2; false ;;
        esac
        [[ $rc -ne 0 ]] || break
    done
    [[ $rc -eq 0 && $clean -eq 1 && $early -eq 1 && $inuse -eq 1 ]]
}

@test "a crash at any write of resize leaves the old size and bitmaps or the new ones" {
    qemu-img create -q -f qcow2 "$TEST_DIR/base.qcow2" 8M
    qemu-img bitmap --add -g 4k "$TEST_DIR/base.qcow2" b0
    qemu-io -f qcow2 -c 'write 1M 4k' "$TEST_DIR/base.qcow2" >/dev/null
    local n rc size
    for n in $(seq 1 40); do
        cp "$TEST_DIR/base.qcow2" "$IMG"
        rc=0
        crash_at "$n" "$DISKIMG" resize -q "$IMG" 24M || rc=$?
        no_errors "$IMG"
        size=$(qemu-img info --output=json "$IMG" | jq '.["virtual-size"]')
        [[ $size -eq 8388608 || $size -eq 25165824 ]]
        [[ $(names "$IMG") == "b0:auto" ]]
        # qemu loads the bitmap at this size: it matches the disk.
        [[ $(qemu_dirty "$IMG" b0) == '1048576 4096' ]] || { echo "n=$n size=$size" >&2; false; }
        [[ $rc -ne 0 ]] || break
    done
    [[ $rc -eq 0 && $size -eq 25165824 ]]
}

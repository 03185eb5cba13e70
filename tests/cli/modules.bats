#!/usr/bin/env bats
# The rbd driver as a module (protocols/rbd/loader.c): the program links
# no Ceph library and loads diskimg-rbd.so only when an rbd: image is
# opened; a missing or foreign module is one line naming it and why; an
# installed tree finds its module.  No Ceph cluster: a ceph.conf that
# does not exist is an error only the module's driver, through librados,
# can report, so that message proves the module loaded and resolved.

load '../helpers'
bats_require_minimum_version 1.5.0

setup() { setup_test; }
teardown() { cleanup_test; }

NOCONF=rbd:rbd/img:conf=/nonexistent/ceph.conf
LOADED="diskimg: rbd:rbd/img: cannot read Ceph configuration file /nonexistent/ceph.conf: No such file or directory"

@test "no Ceph library in the program; the module is loaded by an rbd: image alone" {
    run readelf -d "$DISKIMG"
    assert_success
    refute_output --regexp 'librbd|librados|ceph'
    run readelf -d "${DISKIMG%/*}/diskimg-rbd.so"
    assert_output --partial '[librbd.so.1]'
    assert_output --partial '[librados.so.2]'

    # a server of a file: no Ceph library in its memory
    truncate -s 1M "$TEST_DIR/a.raw"
    start_server -t "$TEST_DIR/a.raw"
    run grep -c -E 'librbd|librados|libceph|diskimg-rbd' "/proc/$SERVER_PID/maps"
    assert_output 0
    stop_server

    # an rbd: name loads it: its driver answers, for open and for create
    run "$DISKIMG" info "$NOCONF"
    assert_failure 1
    assert_output "$LOADED"
    run "$DISKIMG" create -f raw "$NOCONF" 1M
    assert_failure 1
    assert_output "$LOADED"
}

@test "a missing or foreign module: one line naming it and why, exit 1, no key shown" {
    mkdir "$TEST_DIR/bin"
    cp "$DISKIMG" "$TEST_DIR/bin/diskimg"
    # the module folder, <libdir>/diskimg seen from bin/, then beside it
    run "$TEST_DIR/bin/diskimg" info rbd:rbd/img:key=SECRET
    assert_failure 1
    assert_output --regexp "^diskimg: rbd:rbd/img: cannot load the Ceph RBD driver module $TEST_DIR/lib[^ ]*/diskimg/diskimg-rbd.so: No such file or directory \(nor $TEST_DIR/bin/diskimg-rbd.so\)\$"
    # --image-opts and create say the same
    run "$TEST_DIR/bin/diskimg" info --image-opts driver=rbd,pool=p,image=i
    assert_failure 1
    assert_output --regexp "^diskimg: rbd:p/i: cannot load the Ceph RBD driver module $TEST_DIR/lib"
    run "$TEST_DIR/bin/diskimg" create -f qcow2 rbd:p/i 1M
    assert_failure 1
    assert_output --partial "rbd:p/i: cannot load the Ceph RBD driver module"
    [[ ${#lines[@]} -eq 1 ]]

    # something else under the module's name, beside the program
    cp "$DISKIMG_NO_ODIRECT_LIB" "$TEST_DIR/bin/diskimg-rbd.so"
    run "$TEST_DIR/bin/diskimg" info rbd:rbd/img
    assert_failure 1
    assert_output "diskimg: rbd:rbd/img: cannot load the Ceph RBD driver module $TEST_DIR/bin/diskimg-rbd.so: not a diskimg module (no diskimg_rbd_module)"
    # a file that is no library: dlerror's reason
    echo junk >"$TEST_DIR/bin/diskimg-rbd.so"
    run "$TEST_DIR/bin/diskimg" info rbd:rbd/img
    assert_failure 1
    assert_output --regexp "^diskimg: rbd:rbd/img: cannot load the Ceph RBD driver module $TEST_DIR/bin/diskimg-rbd.so: .*(too short|invalid ELF header)"
    # a file image needs no module
    truncate -s 1M "$TEST_DIR/a.raw"
    run "$TEST_DIR/bin/diskimg" info "$TEST_DIR/a.raw"
    assert_success
}

@test "meson install --destdir: the installed program loads its installed module" {
    local build=${DISKIMG%/cmd/diskimg}
    [[ -f $build/meson-private/coredata.dat ]] || skip "$DISKIMG is not in a meson build tree"
    run meson install -C "$build" --no-rebuild --destdir "$TEST_DIR/inst"
    assert_success
    local prog mod
    prog=$(find "$TEST_DIR/inst" -path '*/bin/diskimg')
    mod=$(find "$TEST_DIR/inst" -name diskimg-rbd.so)
    [[ $mod == "$TEST_DIR"/inst/*/lib*/diskimg/diskimg-rbd.so ]]
    [[ ! -e ${prog%/*}/diskimg-rbd.so ]]
    run "$prog" info "$NOCONF"
    assert_failure 1
    assert_output "$LOADED"
}

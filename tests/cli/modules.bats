#!/usr/bin/env bats
# Protocol drivers as modules (protocols/module.h): the program links no
# Ceph library and no libcurl, and loads diskimg-rbd.so or diskimg-http.so
# only when an image of theirs is opened; a missing or foreign module is
# one line naming it and why; an installed tree finds its modules.  No
# Ceph cluster or web server: an error only a module's driver reports
# (a ceph.conf that does not exist, through librados; the http driver's
# own option check) proves that it loaded and resolved every symbol.

load '../helpers'
bats_require_minimum_version 1.5.0

setup() {
    setup_test
    MODDIR=${DISKIMG%/*}
}
teardown() { cleanup_test; }

# built NAME: the build has the module (meson feature rbd, curl).
built() { [[ -f $MODDIR/diskimg-$1.so ]]; }

RBD_NOCONF=rbd:rbd/img:conf=/nonexistent/ceph.conf
RBD_LOADED="diskimg: rbd:rbd/img: cannot read Ceph configuration file /nonexistent/ceph.conf: No such file or directory"
HTTP_OPTS=driver=http,url=http://127.0.0.1:1/x.raw?sig=SECRET,timeout=0
HTTP_LOADED="diskimg: http: option 'timeout': between 1 and 3600 seconds"

@test "no Ceph library or libcurl in the program or a server of a file; each module has its own" {
    run readelf -d "$DISKIMG"
    assert_success
    refute_output --regexp 'librbd|librados|ceph|libcurl'
    if built rbd; then
        run readelf -d "$MODDIR/diskimg-rbd.so"
        assert_output --partial '[librbd.so.1]'
        assert_output --partial '[librados.so.2]'
    fi
    if built http; then
        run readelf -d "$MODDIR/diskimg-http.so"
        assert_output --regexp '\[libcurl(-gnutls)?\.so\.4\]'
    fi

    truncate -s 1M "$TEST_DIR/a.raw"
    start_server -t "$TEST_DIR/a.raw"
    run grep -c -E 'librbd|librados|libceph|libcurl|diskimg-(rbd|http)' "/proc/$SERVER_PID/maps"
    assert_output 0
    stop_server
}

@test "an image of the protocol loads its module: its driver answers open and create" {
    built rbd || built http || skip "built without the rbd and curl features"
    if built rbd; then
        run "$DISKIMG" info "$RBD_NOCONF"
        assert_failure 1
        assert_output "$RBD_LOADED"
        run "$DISKIMG" create -f raw "$RBD_NOCONF" 1M
        assert_failure 1
        assert_output "$RBD_LOADED"
    fi
    if built http; then
        run "$DISKIMG" info --image-opts "$HTTP_OPTS"
        assert_failure 1
        assert_output "$HTTP_LOADED"
    fi
}

@test "a missing or foreign module: one line naming it and why, exit 1, no secret shown" {
    mkdir "$TEST_DIR/bin"
    cp "$DISKIMG" "$TEST_DIR/bin/diskimg"
    local prog=$TEST_DIR/bin/diskimg
    # the module folder, <libdir>/diskimg seen from bin/, then beside it
    if built rbd; then
        run "$prog" info rbd:rbd/img:key=SECRET
        assert_failure 1
        assert_output --regexp "^diskimg: rbd:rbd/img: cannot load the Ceph RBD driver module $TEST_DIR/lib[^ ]*/diskimg/diskimg-rbd.so: No such file or directory \\(nor $TEST_DIR/bin/diskimg-rbd.so\\)\$"
        run "$prog" info --image-opts driver=rbd,pool=p,image=i
        assert_failure 1
        assert_output --regexp "^diskimg: rbd:p/i: cannot load the Ceph RBD driver module $TEST_DIR/lib"
        run "$prog" create -f qcow2 rbd:p/i 1M
        assert_failure 1
        assert_output --partial "rbd:p/i: cannot load the Ceph RBD driver module"
        [[ ${#lines[@]} -eq 1 ]]
        # something else under the module's name, beside the program
        cp "$DISKIMG_NO_ODIRECT_LIB" "$TEST_DIR/bin/diskimg-rbd.so"
        run "$prog" info rbd:rbd/img
        assert_failure 1
        assert_output "diskimg: rbd:rbd/img: cannot load the Ceph RBD driver module $TEST_DIR/bin/diskimg-rbd.so: not a diskimg module (no diskimg_rbd_module)"
    fi
    if built http; then
        run "$prog" info 'https://user:pw@127.0.0.1:1/x.raw?X-Sig=SECRET'
        assert_failure 1
        assert_output --regexp "^diskimg: https://127.0.0.1:1/x.raw\\?\\.\\.\\.: cannot load the HTTP\\(S\\) driver module $TEST_DIR/lib[^ ]*/diskimg/diskimg-http.so: No such file or directory \\(nor $TEST_DIR/bin/diskimg-http.so\\)\$"
        # a file that is no library: dlerror's reason
        echo junk >"$TEST_DIR/bin/diskimg-http.so"
        run "$prog" info --image-opts "$HTTP_OPTS"
        assert_failure 1
        assert_output --regexp "^diskimg: http://127.0.0.1:1/x.raw\\?\\.\\.\\.: cannot load the HTTP\\(S\\) driver module $TEST_DIR/bin/diskimg-http.so: .*(too short|invalid ELF header)"
    fi
    refute_output --partial SECRET
    # a file image needs no module
    truncate -s 1M "$TEST_DIR/a.raw"
    run "$prog" info "$TEST_DIR/a.raw"
    assert_success
}

@test "meson install --destdir: the installed program loads its installed modules" {
    local build=${DISKIMG%/cmd/diskimg}
    [[ -f $build/meson-private/coredata.dat ]] || skip "$DISKIMG is not in a meson build tree"
    run meson install -C "$build" --no-rebuild --destdir "$TEST_DIR/inst"
    assert_success
    local prog name
    prog=$(find "$TEST_DIR/inst" -path '*/bin/diskimg')
    for name in rbd http; do
        built "$name" || continue
        [[ -n $(find "$TEST_DIR/inst" -path "*/lib*/diskimg/diskimg-$name.so") ]]
        [[ ! -e ${prog%/*}/diskimg-$name.so ]]
    done
    if built rbd; then
        run "$prog" info "$RBD_NOCONF"
        assert_failure 1
        assert_output "$RBD_LOADED"
    fi
    if built http; then
        run "$prog" info --image-opts "$HTTP_OPTS"
        assert_failure 1
        assert_output "$HTTP_LOADED"
    fi
}

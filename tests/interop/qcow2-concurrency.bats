#!/usr/bin/env bats
# qcow2 under concurrency: 8 libnbd clients at once (serve -t -e 0), each
# with up to 64 requests in flight, write distinct blocks that share the
# same unallocated clusters (and L2 tables and refcount blocks), so the
# server allocates, zero-fills or copies-on-write the same cluster for
# several requests at the same time.  Afterwards qemu-img check must be
# clean and the image must hold exactly every client's blocks.

load '../helpers'
load 'lib'
load 'qcow2-lib'

setup() { setup_test; }
teardown() { cleanup_test; }

# concurrent_run IMAGE BLOCK [client options...]: run the 8 clients
# against a persistent, unlimited-clients server on IMAGE (with the extra
# serve options in SERVE_EXTRA), stop it with SIGTERM (it must exit 0),
# then check the image against the expected content.
SERVE_EXTRA=()
concurrent_run() {
    local img=$1 block=$2
    shift 2
    rm -f "$SOCK"
    start_server -t -e 0 -f qcow2 "${SERVE_EXTRA[@]}" "$img"
    run "$PYTHON3" "$BATS_TEST_DIRNAME/qcow2_concurrent.py" "$URI" 8 "$block" \
        "$TEST_DIR/expected.raw" "$@"
    if [[ $status -ne 0 ]]; then
        echo "$output" >&2
        cat "$SERVER_LOG" >&2
        return 1
    fi
    stop_server TERM
    [[ $SERVER_STATUS -eq 0 ]] || { echo "server exit $SERVER_STATUS" >&2; return 1; }
    qemu_check_clean "$img" || return 1
    assert_compare "$img" "$TEST_DIR/expected.raw"
}

@test "concurrency: 8 clients, 4k blocks sharing 64k clusters of a fresh qcow2" {
    require_tool qemu-img
    require_nbd_python
    "$DISKIMG" create -q -f qcow2 "$TEST_DIR/a.qcow2" 8M
    concurrent_run "$TEST_DIR/a.qcow2" 4096
    # Each cluster was allocated once, not once per racing client: 128
    # data clusters plus a handful of metadata clusters, well under 9 MiB.
    run qemu-img check --output=json "$TEST_DIR/a.qcow2"
    assert_output --partial '"allocated-clusters": 128,'
    local end
    end=$(sed -n 's/.*"image-end-offset": \([0-9]*\).*/\1/p' <<<"$output")
    [[ $end -le $((8 * 1024 * 1024 + 16 * 65536)) ]]
}

@test "concurrency: 8 clients, 512-byte blocks on a fresh 512-byte-cluster qcow2" {
    require_tool qemu-img
    require_nbd_python
    # 4 MiB: 8192 clusters, 128 L2 tables, refcount blocks and a
    # refcount table that has to grow while the clients write.
    local round
    for round in 1 2 3; do
        rm -f "$TEST_DIR/a.qcow2"
        "$DISKIMG" create -q -f qcow2 -o cluster_size=512 "$TEST_DIR/a.qcow2" 4M
        concurrent_run "$TEST_DIR/a.qcow2" 512
    done
}

@test "concurrency: data and write-zeroes from different clients in the same clusters" {
    require_tool qemu-img
    require_nbd_python
    # Some blocks are never written: they must read as zeroes, not as a
    # neighbour's data.
    local round
    for round in 1 2 3; do
        rm -f "$TEST_DIR/a.qcow2"
        "$DISKIMG" create -q -f qcow2 "$TEST_DIR/a.qcow2" 8M
        concurrent_run "$TEST_DIR/a.qcow2" 4096 --zero-every=3 --skip-every=7
    done
}

@test "concurrency: 8 clients on extended_l2 subclusters (1k blocks, 2k subclusters)" {
    require_tool qemu-img
    require_nbd_python
    "$DISKIMG" create -q -f qcow2 -o extended_l2=on "$TEST_DIR/a.qcow2" 4M
    concurrent_run "$TEST_DIR/a.qcow2" 1024 --zero-every=4 --skip-every=5
}

@test "concurrency: 8 clients on an overlay: copy-on-write from the backing races with writes" {
    require_tool qemu-img
    require_nbd_python
    make_pattern "$TEST_DIR/base.raw" $((6 * 1024 * 1024 + 3000))
    # Every 5th block is written by nobody: the backing must show there
    # (and zeroes past the backing's end).
    local round
    for round in 1 2 3; do
        rm -f "$TEST_DIR/a.qcow2"
        "$DISKIMG" create -q -f qcow2 -b base.raw -F raw "$TEST_DIR/a.qcow2" 8M
        concurrent_run "$TEST_DIR/a.qcow2" 4096 --skip-every=5 --zero-every=4 \
            --base="$TEST_DIR/base.raw"
    done
}

@test "concurrency: 8 clients on 512-byte clusters overlaying a qcow2 backing" {
    require_tool qemu-img qemu-io
    require_nbd_python
    qemu-img create -q -f qcow2 "$TEST_DIR/base.qcow2" 2M
    qemu-io -f qcow2 -c 'write -P 0x5b 0 2M' "$TEST_DIR/base.qcow2" >/dev/null
    qemu-img convert -f qcow2 -O raw "$TEST_DIR/base.qcow2" "$TEST_DIR/base.raw"
    "$DISKIMG" create -q -f qcow2 -o cluster_size=512 -b base.qcow2 -F qcow2 "$TEST_DIR/a.qcow2"
    concurrent_run "$TEST_DIR/a.qcow2" 256 --skip-every=3 --base="$TEST_DIR/base.raw"
}

@test "concurrency: 8 clients with a one-table L2 cache (evictions while allocating)" {
    require_tool qemu-img
    require_nbd_python
    SERVE_EXTRA=(--l2-cache-size=1)
    local o
    for o in cluster_size=512 cluster_size=4k ""; do
        rm -f "$TEST_DIR/a.qcow2"
        "$DISKIMG" create -q -f qcow2 ${o:+-o "$o"} "$TEST_DIR/a.qcow2" 4M
        concurrent_run "$TEST_DIR/a.qcow2" 512 --zero-every=5 --skip-every=9 ||
            { echo "variant '$o'" >&2; return 1; }
    done
}

@test "concurrency: two clients write each block at the same time: every sector is one writer's" {
    require_tool qemu-img
    require_nbd_python
    local o
    for o in "" cluster_size=512 extended_l2=on; do
        rm -f "$TEST_DIR/a.qcow2"
        "$DISKIMG" create -q -f qcow2 ${o:+-o "$o"} "$TEST_DIR/a.qcow2" 4M
        # What was read back over NBD must also be what the file holds.
        concurrent_run "$TEST_DIR/a.qcow2" 4096 --overlap=1 --zero-every=4 --skip-every=6 ||
            { echo "variant '$o'" >&2; return 1; }
    done
}

@test "concurrency: extended_l2: writes into zeroed subclusters race in-place writes to the rest of the cluster" {
    require_tool qemu-img
    require_nbd_python
    local round cs
    for round in 1 2 3 4; do
        # 2M clusters (64k subclusters) make copying a cluster slow.
        cs=$([[ $((round % 2)) -eq 1 ]] && echo 2M || echo 64k)
        rm -f "$TEST_DIR/a.qcow2" "$SOCK"
        "$DISKIMG" create -q -f qcow2 -o extended_l2=on,cluster_size=$cs "$TEST_DIR/a.qcow2" 16M
        start_server -t -e 0 -f qcow2 "$TEST_DIR/a.qcow2"
        # Every cluster: allocated with data, then its second half zeroed
        # (zero subclusters in an allocated cluster).  Then, cluster by
        # cluster, one client writes into the zeroed half (allocating
        # subclusters) while the other rewrites the first half in place.
        run py "$URI" "$TEST_DIR/expected.raw" "$(qcow2util header "$TEST_DIR/a.qcow2" cluster_bits)" <<'PY'
import multiprocessing, sys, nbd
uri, expected = sys.argv[1], sys.argv[2]
CL, BS = 1 << int(sys.argv[3]), 4096
def data(tag, off):
    head = b"%s@%08x;" % (tag, off)
    return (head * (BS // len(head) + 1))[:BS]
h = nbd.NBD(); h.connect_uri(uri); size = h.get_size()
exp = bytearray(size)
for c in range(0, size, CL):
    buf = b"".join(data(b"old", c + i) for i in range(0, CL, BS))
    h.pwrite(buf, c)
    h.zero(CL // 2, c + CL // 2)
h.flush(); h.shutdown()
def client(which, barrier):
    h = nbd.NBD(); h.connect_uri(uri)
    errs = []
    def cb(err):
        if err.value:
            errs.append(err.value)
        return 1
    for c in range(0, size, CL):
        # Cluster by cluster, both clients start together: one write into
        # the zeroed half, and the whole first half rewritten in place.
        if which == "zeroed":
            offs = [c + CL // 2]
        else:
            offs = [c + i for i in range(0, CL // 2, BS)]
        barrier.wait()
        i = 0
        while i < len(offs) or h.aio_in_flight() > 0:
            while i < len(offs) and h.aio_in_flight() < 64:
                h.aio_pwrite(nbd.Buffer.from_bytearray(bytearray(data(which.encode(), offs[i]))),
                             offs[i], completion=cb)
                i += 1
            h.poll(-1)
    h.flush(); h.shutdown()
    sys.exit(1 if errs else 0)
ctx = multiprocessing.get_context("fork")
barrier = ctx.Barrier(2)
ps = [ctx.Process(target=client, args=(w, barrier)) for w in ("zeroed", "inplace")]
for p in ps: p.start()
for p in ps: p.join()
if any(p.exitcode for p in ps):
    sys.exit("a client failed")
for c in range(0, size, CL):
    for i in range(0, CL // 2, BS):
        exp[c + i:c + i + BS] = data(b"inplace", c + i)
    exp[c + CL // 2:c + CL // 2 + BS] = data(b"zeroed", c + CL // 2)
open(expected, "wb").write(exp)
PY
        [[ $status -eq 0 ]] || { echo "$output" >&2; return 1; }
        stop_server TERM
        [[ $SERVER_STATUS -eq 0 ]]
        qemu_check_clean "$TEST_DIR/a.qcow2"
        assert_compare "$TEST_DIR/a.qcow2" "$TEST_DIR/expected.raw" || {
            echo "round $round (cluster_size=$cs): in-place writes lost" >&2
            return 1
        }
    done
}

@test "concurrency: in-place writes racing discards never land in clusters reused by new allocations" {
    require_tool qemu-img
    require_nbd_python
    local o
    for o in "" cluster_size=4k; do
        rm -f "$TEST_DIR/a.qcow2" "$SOCK"
        "$DISKIMG" create -q -f qcow2 ${o:+-o "$o"} "$TEST_DIR/a.qcow2" 8M
        start_server -t -e 0 -f qcow2 "$TEST_DIR/a.qcow2"
        # A rewrites [0, 2M) in place again and again; B discards the same
        # clusters and flushes (the freed clusters become reusable); C
        # fills [2M, 8M), allocating clusters, maybe the freed ones.
        run py "$URI" "$TEST_DIR/expected.raw" "$(qcow2util header "$TEST_DIR/a.qcow2" cluster_bits)" <<'PY'
import multiprocessing, sys, nbd
uri, expected = sys.argv[1], sys.argv[2]
CL, BS = 1 << int(sys.argv[3]), 4096
S, R1 = 2 << 20, 8 << 20
def data(tag, off):
    head = b"%s@%08x;" % (tag, off)
    return (head * (BS // len(head) + 1))[:BS]
h = nbd.NBD(); h.connect_uri(uri)
for c in range(0, S, 65536):
    h.pwrite(b"".join(data(b"old", c + i) for i in range(0, 65536, BS)), c)
h.flush(); h.shutdown()
def run(which, barrier):
    h = nbd.NBD(); h.connect_uri(uri)
    errs = []
    def cb(err):
        if err.value:
            errs.append(err.value)
        return 1
    barrier.wait()
    if which == "A":
        for gen in range(6):
            for off in range(0, S, BS):
                while h.aio_in_flight() >= 64:
                    h.poll(-1)
                h.aio_pwrite(nbd.Buffer.from_bytearray(bytearray(data(b"A%d" % gen, off))), off,
                             completion=cb)
    elif which == "B":
        for gen in range(6):
            for c in range(0, S, CL):
                while h.aio_in_flight() >= 8:
                    h.poll(-1)
                h.aio_trim(CL, c, completion=cb)
            while h.aio_in_flight() > 0:
                h.poll(-1)
            h.flush()
    else:
        for off in range(S, R1, BS):
            while h.aio_in_flight() >= 64:
                h.poll(-1)
            h.aio_pwrite(nbd.Buffer.from_bytearray(bytearray(data(b"C", off))), off, completion=cb)
    while h.aio_in_flight() > 0:
        h.poll(-1)
    h.flush(); h.shutdown()
    sys.exit(1 if errs else 0)
ctx = multiprocessing.get_context("fork")
barrier = ctx.Barrier(3)
ps = [ctx.Process(target=run, args=(w, barrier)) for w in "ABC"]
for p in ps: p.start()
for p in ps: p.join()
if any(p.exitcode for p in ps):
    sys.exit("a client failed")
h = nbd.NBD(); h.connect_uri(uri)
got = h.pread(R1, 0); h.shutdown()
# [2M, 8M): exactly C's data.
want = b"".join(data(b"C", off) for off in range(S, R1, BS))
if got[S:] != want:
    i = next(i for i in range(len(want)) if got[S + i] != want[i])
    sys.exit("C's data differs at offset %d" % (S + i))
# [0, 2M): each sector is zeroes, the old data or some generation of A's.
for off in range(0, S, 512):
    blk = off - off % BS
    sec = got[off:off + 512]
    cands = [bytes(BS), data(b"old", blk)] + [data(b"A%d" % g, blk) for g in range(6)]
    if not any(sec == c[off - blk:off - blk + 512] for c in cands):
        nz = [i for i in range(512) if sec[i]]
        sys.exit("sector at %d holds foreign data: %d non-zero bytes from %s: %r" % (off, len(nz), nz[:1], bytes(sec[nz[0]:nz[0] + 40]) if nz else b""))
open(expected, "wb").write(got)
PY
        [[ $status -eq 0 ]] || { echo "variant '$o': $output" >&2; return 1; }
        stop_server TERM
        [[ $SERVER_STATUS -eq 0 ]]
        qemu_check_clean "$TEST_DIR/a.qcow2"
        assert_compare "$TEST_DIR/a.qcow2" "$TEST_DIR/expected.raw"
    done
}

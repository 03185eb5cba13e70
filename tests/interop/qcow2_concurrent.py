"""qcow2_concurrent: many NBD clients at once, each with many requests in
flight, writing distinct blocks that share clusters.

  python3 qcow2_concurrent.py URI CLIENTS BLOCK EXPECTED [--skip-every=N]
                              [--zero-every=N] [--base=FILE] [--overlap=1]

Block b (BLOCK bytes at b*BLOCK) belongs to client b % CLIENTS.  With
--skip-every=N, blocks with b % N == N-1 are written by nobody (the
backing file, or zeroes, must show there).  With --zero-every=N, blocks
with (b // CLIENTS) % N == 1 are written with WRITE_ZEROES instead of
data.  Every client walks the image from the start in the same order,
so they all allocate the same clusters at the same time; about a third
of the writes carry FUA, and each client flushes at the end.

EXPECTED is written with what the image must then hold: BASE's bytes (or
zeroes) where nobody wrote, the owner's data or zeroes elsewhere.

With --overlap=1 every written block is also written, at the same time,
by the next client (b+1) % CLIENTS with its own data.  The result is read
back over NBD: each 512-byte sector must hold one writer's bytes (NBD
does not promise atomic overlapping writes, but nothing else may show),
and EXPECTED gets what was read.
"""

import multiprocessing
import os
import struct
import sys

import nbd


def block_data(b, owner, size):
    head = struct.pack(">QQ", b, owner) + b"client-block"
    rep = head * (size // len(head) + 1)
    return rep[:size]


def plan(nblocks, clients, skip_every, zero_every, overlap):
    """(block, writer, kind) for every write; kind is 'data' or 'zero'."""
    out = []
    for b in range(nblocks):
        if skip_every and b % skip_every == skip_every - 1:
            continue
        owner = b % clients
        kind = "zero" if zero_every and (b // clients) % zero_every == 1 else "data"
        out.append((b, owner, kind))
        if overlap:
            out.append((b, (owner + 1) % clients, "data"))
    return out


def client(uri, me, clients, block, work, barrier, maxq):
    h = nbd.NBD()
    h.connect_uri(uri)
    mine = [w for w in work if w[1] == me]
    errors = []

    def done(what):
        def cb(err):
            if err.value:
                errors.append("%s: errno %d" % (what, err.value))
            return 1  # retire the command
        return cb

    barrier.wait()
    i = 0
    while i < len(mine) or h.aio_in_flight() > 0:
        while i < len(mine) and h.aio_in_flight() < maxq:
            b, owner, kind = mine[i]
            flags = nbd.CMD_FLAG_FUA if (b // clients) % 3 == 0 else 0
            if kind == "data":
                buf = nbd.Buffer.from_bytearray(bytearray(block_data(b, owner, block)))
                h.aio_pwrite(buf, b * block, completion=done("write %d" % b), flags=flags)
            else:
                h.aio_zero(block, b * block, completion=done("zero %d" % b), flags=flags)
            i += 1
        h.poll(-1)
    h.flush()
    h.shutdown()
    if errors:
        sys.exit("client %d: %d failed requests, first: %s" % (me, len(errors), errors[0]))


def main():
    uri, clients, block, expected = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    opts = dict(a[2:].split("=", 1) for a in sys.argv[5:])
    skip_every = int(opts.get("skip-every", 0))
    zero_every = int(opts.get("zero-every", 0))
    base = opts.get("base")
    overlap = opts.get("overlap") == "1"

    h = nbd.NBD()
    h.connect_uri(uri)
    size = h.get_size()
    h.shutdown()
    nblocks = size // block
    work = plan(nblocks, clients, skip_every, zero_every, overlap)

    ctx = multiprocessing.get_context("fork")
    barrier = ctx.Barrier(clients)
    procs = [ctx.Process(target=client, args=(uri, me, clients, block, work, barrier, 64))
             for me in range(clients)]
    for p in procs:
        p.start()
    bad = 0
    for p in procs:
        p.join()
        if p.exitcode != 0:
            bad += 1
    if bad:
        sys.exit("%d client(s) failed" % bad)

    if base:
        with open(base, "rb") as f:
            exp = bytearray(f.read())
        exp = exp[:size] + bytearray(max(0, size - len(exp)))
    else:
        exp = bytearray(size)
    if overlap:
        cands = {}
        for b, writer, kind in work:
            cands.setdefault(b, []).append(block_data(b, writer, block) if kind == "data"
                                           else bytes(block))
        h = nbd.NBD()
        h.connect_uri(uri)
        got = h.pread(size, 0)
        h.shutdown()
        bad = []
        for b in range(nblocks):
            want = cands.get(b, [bytes(exp[b * block:(b + 1) * block])])
            for sec in range(0, block, 512):
                off = b * block + sec
                if not any(got[off:off + 512] == c[sec:sec + 512] for c in want):
                    bad.append(off)
        if bad:
            b = bad[0] // block
            sec = bad[0] % block
            print("block %d sector at %d holds %r; the writers' data starts %s" % (
                b, bad[0], bytes(got[bad[0]:bad[0] + 24]),
                [c[sec:sec + 24] for c in cands.get(b, [])]), file=sys.stderr)
            sys.exit("%d sectors hold neither writer's data, first at offset %d" % (len(bad), bad[0]))
        exp = bytearray(got)
    else:
        for b, owner, kind in work:
            exp[b * block:(b + 1) * block] = (block_data(b, owner, block) if kind == "data"
                                              else bytes(block))
    with open(expected, "wb") as f:
        f.write(exp)
    print("%d clients wrote %d blocks of %d bytes" % (clients, len(work), block))


if __name__ == "__main__":
    main()

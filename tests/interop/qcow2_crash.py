"""qcow2_crash: the client and the checker of the crash test.

  python3 qcow2_crash.py client URI LOG ITER SEED
      Write until the server goes away: 4k-aligned writes of 1-4 blocks
      (a third with FUA), WRITE_ZEROES, cluster-aligned TRIMs and FLUSHes,
      up to 16 requests in flight, never two at once on the same block.
      LOG gets one line per event, written (unbuffered) as it happens:
        I SEQ KIND OFF LEN FUA   before a request is sent (KIND w, z, d, f)
        A SEQ                    when SEQ was acknowledged without error
  python3 qcow2_crash.py verify IMAGE_RAW LOG ITER STATE [--torn-sectors]
      Check the image (as read back, raw) against what was acknowledged:
      every block must hold intact content of some write, and a write that
      was durable (acknowledged with FUA, or acknowledged before a FLUSH
      was sent that was then acknowledged) must be there unless a later
      write to the same block replaced it.  STATE (json) carries each
      block's content from the previous iteration; it is updated.
      --torn-sectors: a block may also mix, sector by sector, the
      contents it may hold (a format whose data is not page-aligned in
      the file, as VHD's, can have a write cut between two pages).

Each written block is self-describing: tag (iteration, seq, block) then
filler derived from the tag, so a torn, misplaced or stale block shows.
"""

import hashlib
import json
import os
import random
import struct
import sys

BLOCK = 4096
CLUSTER = 65536
MAGIC = b"CRSH"


def block_bytes(it, seq, b):
    head = MAGIC + struct.pack(">III", it, seq, b)
    fill = (struct.pack(">III", b, seq, it) + b"-crash-") * (BLOCK // 19 + 1)
    return (head + fill)[:BLOCK]


def client(uri, log, it, seed):
    import nbd

    rnd = random.Random(seed)
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def emit(line):
        os.write(fd, (line + "\n").encode())

    h = nbd.NBD()
    h.connect_uri(uri)
    size = h.get_size()
    nblocks = size // BLOCK
    per_cluster = CLUSTER // BLOCK
    busy = set()
    seq = 0

    def done(s, blocks):
        def cb(err):
            busy.difference_update(blocks)
            if err.value == 0:
                emit("A %d" % s)
            return 1
        return cb

    try:
        for _ in range(200000):
            while h.aio_in_flight() >= 16:
                h.poll(-1)
            seq += 1
            r = rnd.random()
            if r < 0.06:
                emit("I %d f 0 0 0" % seq)
                h.aio_flush(completion=done(seq, set()))
                continue
            if r < 0.12:
                c = rnd.randrange(size // CLUSTER)
                blocks = set(range(c * per_cluster, (c + 1) * per_cluster))
                kind, off, ln = "d", c * CLUSTER, CLUSTER
            else:
                b0 = rnd.randrange(nblocks)
                n = min(rnd.randint(1, 4), nblocks - b0)
                blocks = set(range(b0, b0 + n))
                kind = "z" if r < 0.2 else "w"
                off, ln = b0 * BLOCK, n * BLOCK
            if blocks & busy:
                h.poll(-1)
                continue
            fua = 1 if kind != "d" and rnd.random() < 0.35 else 0
            flags = nbd.CMD_FLAG_FUA if fua else 0
            busy |= blocks
            emit("I %d %s %d %d %d" % (seq, kind, off, ln, fua))
            cb = done(seq, blocks)
            if kind == "w":
                data = b"".join(block_bytes(it, seq, b) for b in range(off // BLOCK, (off + ln) // BLOCK))
                h.aio_pwrite(nbd.Buffer.from_bytearray(bytearray(data)), off, completion=cb, flags=flags)
            elif kind == "z":
                h.aio_zero(ln, off, completion=cb, flags=flags)
            else:
                h.aio_trim(ln, off, completion=cb)
        # Not killed yet: wait for everything, then stay until killed.
        while h.aio_in_flight() > 0:
            h.poll(-1)
        h.flush()
        emit("DONE")
    except nbd.Error:
        pass  # the server was killed under us
    os.close(fd)


def parse_log(log):
    issued = []  # (seq, kind, off, len, fua) in issue order
    durable = set()
    acked = set()
    flushes = {}  # flush seq -> writes acked when it was sent
    fua_writes = set()
    with open(log) as f:
        lines = f.read().split("\n")
    # A line cut short by the kill is ignored (the client is not killed,
    # but be strict about what we parse).
    for line in lines:
        p = line.split()
        if not p or p[0] == "DONE":
            continue
        if p[0] == "I" and len(p) == 6:
            seq, kind, off, ln, fua = int(p[1]), p[2], int(p[3]), int(p[4]), int(p[5])
            if kind == "f":
                flushes[seq] = set(acked)
            else:
                issued.append((seq, kind, off, ln, fua))
                if fua:
                    fua_writes.add(seq)
        elif p[0] == "A" and len(p) == 2:
            s = int(p[1])
            if s in flushes:
                durable |= flushes[s]
            else:
                acked.add(s)
                if s in fua_writes:
                    durable.add(s)
    return issued, durable, acked


def tag_bytes(tag, b):
    if tag == "zero":
        return bytes(BLOCK)
    t_it, t_seq = (int(x) for x in tag.split("/"))
    return block_bytes(t_it, t_seq, b)


def torn_mix(data, ok, b):
    """Is every 512-byte sector of data that of one of the contents ok?"""
    choices = [tag_bytes(t, b) for t in ok if t == "zero" or t[0].isdigit()]
    return all(any(data[i:i + 512] == c[i:i + 512] for c in choices)
               for i in range(0, BLOCK, 512))


def verify(raw, log, it, state_path, torn=False):
    issued, durable, acked = parse_log(log)
    with open(raw, "rb") as f:
        img = f.read()
    nblocks = len(img) // BLOCK
    try:
        with open(state_path) as f:
            state = json.load(f)
    except FileNotFoundError:
        state = ["zero"] * nblocks

    per_block = [[] for _ in range(nblocks)]
    for seq, kind, off, ln, fua in issued:
        for b in range(off // BLOCK, (off + ln) // BLOCK):
            per_block[b].append((seq, kind))

    def tag_of(seq, kind):
        return "zero" if kind in ("z", "d") else "%d/%d" % (it, seq)

    errors = []
    new_state = []
    for b in range(nblocks):
        data = img[b * BLOCK:(b + 1) * BLOCK]
        if data == bytes(BLOCK):
            actual = "zero"
        elif data[:4] == MAGIC:
            t_it, t_seq, t_b = struct.unpack(">III", data[4:16])
            if t_b != b or data != block_bytes(t_it, t_seq, b):
                actual = "garbage(tag %d/%d for block %d)" % (t_it, t_seq, t_b)
            else:
                actual = "%d/%d" % (t_it, t_seq)
        else:
            actual = "garbage"
        ws = per_block[b]
        last_durable = max((i for i, (s, _) in enumerate(ws) if s in durable), default=None)
        if last_durable is None:
            ok = {state[b]} | {tag_of(s, k) for s, k in ws}
        else:
            ok = {tag_of(s, k) for s, k in ws[last_durable:]}
        if actual not in ok and torn:
            # A torn block is remembered by its digest for the next round.
            digest = "torn:" + hashlib.sha1(data).hexdigest()[:16]
            if digest in ok or torn_mix(data, ok, b):
                actual = digest
                ok = {actual}
        if actual not in ok:
            errors.append("block %d (offset %d): holds %s, expected one of %s%s" % (
                b, b * BLOCK, actual, sorted(ok),
                " (durable write seq %d)" % ws[last_durable][0] if last_durable is not None else ""))
        new_state.append(actual)
    with open(state_path, "w") as f:
        json.dump(new_state, f)
    nd = len([s for s, k, *_ in issued if s in durable])
    print("iteration %d: %d requests issued, %d acknowledged, %d durable" % (
        it, len(issued), len(acked), nd))
    if errors:
        for e in errors[:20]:
            print(e, file=sys.stderr)
        sys.exit("%d blocks wrong" % len(errors))


def main():
    if sys.argv[1] == "client":
        client(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]))
    elif sys.argv[1] == "verify":
        verify(sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5],
               "--torn-sectors" in sys.argv[6:])
    else:
        sys.exit("usage: see the docstring")


if __name__ == "__main__":
    main()

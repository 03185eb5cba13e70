"""qcow2util: small helpers for the qcow2 bats suites.

Run as a script: python3 qcow2util.py COMMAND ARGS...

  ops SEED SIZE COUNT CLUSTER [no-discard] [no-zero] [no-fua] [min=OFF] [max=END]
      print a deterministic qemu-io script: pattern writes at random
      offsets (512-aligned and byte-unaligned), some with FUA (-f),
      write -z, cluster-aligned discard, flush.  Ranges lie within
      [OFF, END) (default: the whole SIZE).
  bump FILE CLUSTER DELTA
      add DELTA to the refcount of host cluster CLUSTER (makes a leak
      when DELTA > 0): reads the header, refcount table and block.
  header FILE FIELD
      print a header field: version, cluster_bits, size, l1_size,
      l1_table_offset, refcount_table_offset, refcount_table_clusters,
      nb_snapshots, incompatible_features, compatible_features,
      refcount_order
"""

import random
import struct
import sys

HEADER_FIELDS = {
    "version": (4, ">I"),
    "cluster_bits": (20, ">I"),
    "size": (24, ">Q"),
    "l1_size": (36, ">I"),
    "l1_table_offset": (40, ">Q"),
    "refcount_table_offset": (48, ">Q"),
    "refcount_table_clusters": (56, ">I"),
    "nb_snapshots": (60, ">I"),
    "incompatible_features": (72, ">Q"),
    "compatible_features": (80, ">Q"),
    "refcount_order": (96, ">I"),
}


def header(path, field):
    with open(path, "rb") as f:
        h = f.read(112)
    version = struct.unpack(">I", h[4:8])[0]
    if version < 3 and field == "refcount_order":
        return 4
    if version < 3 and field in ("incompatible_features", "compatible_features"):
        return 0
    off, fmt = HEADER_FIELDS[field]
    return struct.unpack(fmt, h[off:off + struct.calcsize(fmt)])[0]


def bump(path, cluster, delta):
    cbits = header(path, "cluster_bits")
    rt_off = header(path, "refcount_table_offset")
    bits = 1 << header(path, "refcount_order")
    csize = 1 << cbits
    per_block = csize * 8 // bits
    with open(path, "r+b") as f:
        f.seek(rt_off + 8 * (cluster // per_block))
        rb = struct.unpack(">Q", f.read(8))[0] & ~0x1FF
        if rb == 0:
            sys.exit("no refcount block covers cluster %d" % cluster)
        i = cluster % per_block
        if bits >= 8:
            nb = bits // 8
            f.seek(rb + i * nb)
            v = int.from_bytes(f.read(nb), "big") + delta
            f.seek(rb + i * nb)
            f.write(v.to_bytes(nb, "big"))
        else:
            mask = (1 << bits) - 1
            byte, shift = divmod(i * bits, 8)
            f.seek(rb + byte)
            b = f.read(1)[0]
            v = ((b >> shift) & mask) + delta
            if v < 0 or v > mask:
                sys.exit("refcount %d does not fit in %d bits" % (v, bits))
            b = (b & ~(mask << shift) & 0xFF) | (v << shift)
            f.seek(rb + byte)
            f.write(bytes([b]))


def ops(seed, size, count, cluster, discard=True, zero=True, fua=True, start=0, end=None):
    """A qemu-io script whose effect on a raw file and on the qcow2 export
    must be the same (discards are whole clusters: qcow2 frees only those)."""
    rnd = random.Random(seed)
    out = []
    if end is not None:
        size = end
    maxlen = max(3 * cluster, 8192)

    def rng():
        if rnd.random() < 0.2:  # byte-unaligned
            off = rnd.randrange(start, size - 1)
            ln = rnd.randint(1, min(maxlen, size - off))
        else:
            off = rnd.randrange(start // 512, size // 512) * 512
            ln = rnd.randint(1, min(maxlen, size - off) // 512) * 512
        return off, ln

    for _ in range(count):
        r = rnd.random()
        f = " -f" if fua and rnd.random() < 0.3 else ""
        if discard and r < 0.08:
            first = -(-start // cluster)
            last = size // cluster
            if first >= last:
                continue
            c0 = rnd.randrange(first, last)
            n = min(rnd.randint(1, 4), last - c0)
            out.append("discard %d %d" % (c0 * cluster, n * cluster))
        elif zero and r < 0.22:
            off, ln = rng()
            out.append("write -z%s %d %d" % (f, off, ln))
        elif r < 0.25:
            out.append("flush")
        else:
            off, ln = rng()
            out.append("write%s -P %d %d %d" % (f, rnd.randint(1, 255), off, ln))
    return out


def main(argv):
    cmd = argv[1]
    if cmd == "ops":
        seed, size, count, cluster = (int(a) for a in argv[2:6])
        flags = argv[6:]
        start, end = 0, None
        for a in flags:
            if a.startswith("min="):
                start = int(a[4:])
            elif a.startswith("max="):
                end = int(a[4:])
        for line in ops(seed, size, count, cluster, "no-discard" not in flags,
                        "no-zero" not in flags, "no-fua" not in flags, start, end):
            print(line)
    elif cmd == "bump":
        bump(argv[2], int(argv[3]), int(argv[4]))
    elif cmd == "header":
        print(header(argv[2], argv[3]))
    else:
        sys.exit("unknown command " + cmd)


if __name__ == "__main__":
    main(sys.argv)

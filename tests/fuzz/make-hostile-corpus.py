#!/usr/bin/python3
"""tests/fuzz/make-hostile-corpus.py: write a corpus of crafted qcow2 images.

Usage: make-hostile-corpus.py OUTDIR

Creates a few good base images with qemu-img and qemu-io (v2 and v3, 512 B,
64 KiB and 2 MiB clusters, a snapshot, compressed clusters, a backing file,
extended L2 entries), then one crafted image per field class, made by
patching bytes of a base image: every header field, the header extensions,
L1 and L2 entries, compressed clusters, refcounts, the snapshot table and
backing chains.  Each image is named after what it breaks
(l1-offset-unaligned.qcow2).

OUTDIR/*.qcow2 are the images to open (base-*.qcow2 are the good ones);
OUTDIR/aux/ holds what they refer to (backing files, chain layers);
OUTDIR/MANIFEST has one line per image: NAME<TAB>what was changed.

Only the standard library is used; qemu-img and qemu-io must be on PATH.
The output is deterministic apart from the snapshot dates qemu-img writes.
"""

import os
import random
import shutil
import struct
import subprocess
import sys
import zlib

QCOW2_MAGIC = 0x514649FB
EXT_BACKING_FORMAT = 0xE2792ACA
EXT_FEATURE_TABLE = 0x6803F857
EXT_BITMAPS = 0x23852875
EXT_DATA_FILE = 0x44415441
OFLAG_COPIED = 1 << 63
OFLAG_COMPRESSED = 1 << 62
OFFSET_MASK = 0x00FFFFFFFFFFFE00
INCOMPAT_DIRTY = 1 << 0
INCOMPAT_CORRUPT = 1 << 1
INCOMPAT_DATA_FILE = 1 << 2
INCOMPAT_COMPRESSION = 1 << 3
INCOMPAT_EXTL2 = 1 << 4
KiB = 1024
MiB = 1024 * KiB


def run(*argv):
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)


def qemu_img(*args):
    run("qemu-img", *args)


def qemu_io(img, *cmds, fmt="qcow2"):
    argv = ["qemu-io", "-f", fmt]
    for c in cmds:
        argv += ["-c", c]
    run(*argv, img)


class Img:
    """A qcow2 image in memory, with accessors for the fields we patch."""

    def __init__(self, data):
        self.d = bytearray(data)

    @classmethod
    def load(cls, path):
        with open(path, "rb") as f:
            return cls(f.read())

    def save(self, path):
        with open(path, "wb") as f:
            f.write(self.d)

    def _grow(self, end):
        if end > len(self.d):
            self.d += bytes(end - len(self.d))

    def u8(self, off):
        return self.d[off]

    def u16(self, off):
        return struct.unpack_from(">H", self.d, off)[0]

    def u32(self, off):
        return struct.unpack_from(">I", self.d, off)[0]

    def u64(self, off):
        return struct.unpack_from(">Q", self.d, off)[0]

    def p8(self, off, v):
        self._grow(off + 1)
        self.d[off] = v & 0xFF

    def p16(self, off, v):
        self._grow(off + 2)
        struct.pack_into(">H", self.d, off, v & 0xFFFF)

    def p32(self, off, v):
        self._grow(off + 4)
        struct.pack_into(">I", self.d, off, v & 0xFFFFFFFF)

    def p64(self, off, v):
        self._grow(off + 8)
        struct.pack_into(">Q", self.d, off, v & 0xFFFFFFFFFFFFFFFF)

    def put(self, off, data):
        self._grow(off + len(data))
        self.d[off:off + len(data)] = data

    def append_cluster(self, data=b""):
        """Pad the file to a cluster boundary, append one cluster holding
        data (zero-padded), and return its offset."""
        off = -(-len(self.d) // self.cs) * self.cs
        self.put(off, data + bytes(self.cs - len(data)))
        return off

    # header fields
    version = property(lambda s: s.u32(4))
    cluster_bits = property(lambda s: s.u32(20))
    cs = property(lambda s: 1 << s.u32(20))
    size = property(lambda s: s.u64(24))
    l1_size = property(lambda s: s.u32(36))
    l1_off = property(lambda s: s.u64(40))
    rt_off = property(lambda s: s.u64(48))
    rt_clusters = property(lambda s: s.u32(56))
    nb_snapshots = property(lambda s: s.u32(60))
    sn_off = property(lambda s: s.u64(64))
    incompat = property(lambda s: s.u64(72) if s.version >= 3 else 0)

    @property
    def header_length(self):
        return self.u32(100) if self.version >= 3 else 72

    @property
    def extl2(self):
        return bool(self.incompat & INCOMPAT_EXTL2)

    @property
    def l2_entry_size(self):
        return 16 if self.extl2 else 8

    def extensions(self):
        """[(offset of the extension header, type, length)] up to the end marker."""
        out = []
        off = self.header_length
        end = self.u64(8) or self.cs
        while off + 8 <= end:
            t, n = self.u32(off), self.u32(off + 4)
            if t == 0:
                break
            out.append((off, t, n))
            off += 8 + ((n + 7) & ~7)
        return out

    def ext(self, typ):
        for e in self.extensions():
            if e[1] == typ:
                return e
        raise LookupError("no extension 0x%08x" % typ)

    def ext_end(self):
        """Offset of the end-of-extensions marker."""
        exts = self.extensions()
        if not exts:
            return self.header_length
        off, _, n = exts[-1]
        return off + 8 + ((n + 7) & ~7)

    def l1e_pos(self, i, l1_off=None):
        return (self.l1_off if l1_off is None else l1_off) + 8 * i

    def first_l2(self):
        """(L1 index, L2 table offset) of the first allocated L2 table."""
        for i in range(self.l1_size):
            off = self.u64(self.l1e_pos(i)) & OFFSET_MASK
            if off:
                return i, off
        raise LookupError("no L2 table")

    def l2_entries(self):
        """Every (position of the entry in the file, entry) of the active L2 tables."""
        es = self.l2_entry_size
        for i in range(self.l1_size):
            l2 = self.u64(self.l1e_pos(i)) & OFFSET_MASK
            if not l2:
                continue
            for j in range(self.cs // es):
                yield l2 + j * es, self.u64(l2 + j * es)

    def find_l2(self, pred):
        for pos, e in self.l2_entries():
            if pred(e):
                return pos, e
        raise LookupError("no matching L2 entry")

    def data_entry(self):
        """The first standard L2 entry with a host cluster."""
        return self.find_l2(lambda e: not e & OFLAG_COMPRESSED and e & OFFSET_MASK)

    def compressed_entry(self):
        return self.find_l2(lambda e: e & OFLAG_COMPRESSED)

    def csize_shift(self):
        return 62 - (self.cluster_bits - 8)

    def refblock0(self):
        return self.u64(self.rt_off) & ~0x1FF

    # snapshot table: the first entry
    def sn_field(self, name):
        pos = {"l1_off": 0, "l1_size": 8, "id_len": 12, "name_len": 14, "vm_state": 32,
               "extra": 36}[name]
        return self.sn_off + pos

    def sn_extra_pos(self):
        return self.sn_off + 40

    def sn_strings_pos(self):
        return self.sn_off + 40 + self.u32(self.sn_field("extra"))

    def set_backing(self, name, fmt=None, keep_fmt=False):
        """Rewrite the extension area: the old extensions (without the
        backing format unless keep_fmt), a backing format extension if fmt
        is given (bytes), the end marker, then the backing file name."""
        exts = [(t, bytes(self.d[o + 8:o + 8 + n])) for o, t, n in self.extensions()
                if keep_fmt or t != EXT_BACKING_FORMAT]
        if fmt is not None:
            exts.insert(0, (EXT_BACKING_FORMAT, fmt))
        start = self.header_length
        area = bytearray()
        for t, data in exts:
            area += struct.pack(">II", t, len(data)) + data + bytes(-len(data) % 8)
        area += bytes(8)
        name_off = start + len(area)
        if name is not None:
            area += name
        if start + len(area) > self.cs:
            raise ValueError("backing name does not fit in cluster 0")
        self.d[start:self.cs] = area + bytes(self.cs - start - len(area))
        self.p64(8, name_off if name is not None else 0)
        self.p32(16, len(name) if name is not None else 0)

    def add_ext(self, typ, data, length=None):
        """Insert an extension before the end marker (the backing name, if
        any, moves along).  length overrides the recorded length."""
        name = None
        if self.u64(8):
            name = bytes(self.d[self.u64(8):self.u64(8) + self.u32(16)])
        end = self.ext_end()
        tail = bytes(self.d[end:self.cs])
        blob = struct.pack(">II", typ, len(data) if length is None else length) + data + \
            bytes(-len(data) % 8)
        room = self.cs - end
        if len(blob) + 8 + (len(name) if name else 0) > room:
            raise ValueError("extension does not fit in cluster 0")
        self.d[end:self.cs] = (blob + tail)[:room]
        if name is not None:
            self.p64(8, self.u64(8) + len(blob))


class Corpus:
    def __init__(self, out):
        self.out = out
        self.aux = os.path.join(out, "aux")
        self.bases = {}
        self.manifest = []

    def path(self, name):
        return os.path.join(self.out, name)

    def base(self, name):
        return Img.load(self.path("base-%s.qcow2" % name))

    def add(self, name, what, img):
        """Write a crafted image (an Img, or None when already written)."""
        if img is not None:
            img.save(self.path(name + ".qcow2"))
        self.manifest.append((name + ".qcow2", what))

    def variant(self, name, base, what, patch):
        img = self.base(base)
        patch(img)
        self.add(name, what, img)

    def write_manifest(self):
        with open(self.path("MANIFEST"), "w") as f:
            f.write("# image\twhat was changed (base-*: good images made by qemu-img)\n")
            for name, what in self.manifest:
                f.write("%s\t%s\n" % (name, what))


def pattern(n, seed):
    """Compressible, non-repeating-looking data."""
    out = bytearray()
    i = 0
    while len(out) < n:
        out += b"diskimg %08x %08x hostile corpus\n" % (seed, i)
        i += 1
    return bytes(out[:n])


def make_bases(c):
    aux = c.aux
    p = c.path

    def base(name, what, create, *io):
        path = p("base-%s.qcow2" % name)
        qemu_img("create", "-q", "-f", "qcow2", *create[:-1], path, create[-1])
        if io:
            qemu_io(path, *io)
        c.manifest.append(("base-%s.qcow2" % name, "good: " + what))

    data64 = ("write -P 0x11 0 64k", "write -P 0x22 1M 128k")
    base("v3-64k", "v3, 64 KiB clusters, data at 0 and 1M, a zero cluster at 2M",
         ["-o", "compat=1.1,cluster_size=64k", "4M"], *data64, "write -z 2M 64k")
    base("v2-64k", "v2, 64 KiB clusters, data at 0 and 1M",
         ["-o", "compat=0.10,cluster_size=64k", "4M"], *data64)
    data512 = ("write -P 0x33 0 4k", "write -P 0x44 300k 2k")
    base("v3-512", "v3, 512 B clusters, data at 0 and 300k, zeroes at 600k",
         ["-o", "compat=1.1,cluster_size=512", "1M"], *data512, "write -z 600k 1k")
    base("v2-512", "v2, 512 B clusters, data at 0 and 300k",
         ["-o", "compat=0.10,cluster_size=512", "1M"], *data512)
    base("v3-2m", "v3, 2 MiB clusters, no data",
         ["-o", "cluster_size=2M", "16M"])
    base("snapshot", "v3, 64 KiB clusters, snapshot 's1' taken between two writes",
         ["-o", "cluster_size=64k", "4M"], "write -P 0x55 0 128k")
    qemu_img("snapshot", "-c", "s1", p("base-snapshot.qcow2"))
    qemu_io(p("base-snapshot.qcow2"), "write -P 0x66 64k 64k", "write -P 0x77 2M 64k")

    raw = os.path.join(aux, "compressible.raw")
    with open(raw, "wb") as f:
        f.write(pattern(1 * MiB, 1))
        f.seek(2 * MiB)
        f.write(pattern(512 * KiB, 2))
        f.truncate(4 * MiB)
    for name, opts, what in (
            ("compressed", "cluster_size=64k", "v3, 64 KiB clusters, compressed (zlib) by convert -c"),
            ("compressed-512", "cluster_size=512", "v3, 512 B clusters, compressed (zlib) by convert -c"),
            ("compressed-zstd", "cluster_size=64k,compression_type=zstd",
             "v3, 64 KiB clusters, compressed (zstd) by convert -c")):
        try:
            qemu_img("convert", "-q", "-c", "-f", "raw", "-O", "qcow2", "-o", opts, raw,
                     p("base-%s.qcow2" % name))
            c.manifest.append(("base-%s.qcow2" % name, "good: " + what))
        except subprocess.CalledProcessError:
            if "zstd" not in name:
                raise
            print("make-hostile-corpus: qemu-img cannot write zstd; skipping it", file=sys.stderr)

    backing = os.path.join(aux, "backing-base.qcow2")
    qemu_img("create", "-q", "-f", "qcow2", backing, "2M")
    qemu_io(backing, "write -P 0x88 0 2M")
    qemu_img("create", "-q", "-f", "qcow2", "-b", "aux/backing-base.qcow2", "-F", "qcow2",
             p("base-backing.qcow2"), "4M")
    qemu_io(p("base-backing.qcow2"), "write -P 0x99 64k 64k")
    c.manifest.append(("base-backing.qcow2",
                       "good: 4M overlay over a 2M qcow2 backing file (aux/backing-base.qcow2)"))

    base("extl2", "v3, 64 KiB clusters, extended L2 (subclusters), partial writes and zeroes",
         ["-o", "extended_l2=on,cluster_size=64k", "4M"],
         "write -P 0xaa 512 512", "write -z 4096 4096", "write -P 0xbb 1M 3k")

    base("bitmaps", "v3, 64 KiB clusters, enabled bitmap b0 and disabled 512 B bitmap b1, "
         "written after b0 was added", ["-o", "cluster_size=64k", "4M"])
    qemu_img("bitmap", "--add", p("base-bitmaps.qcow2"), "b0")
    qemu_img("bitmap", "--add", "-g", "512", "--disable", p("base-bitmaps.qcow2"), "b1")
    qemu_io(p("base-bitmaps.qcow2"), "write -P 0x12 64k 128k", "write -P 0x13 3M 4k")

    with open(os.path.join(aux, "host-like.raw"), "wb") as f:
        f.write(pattern(64 * KiB, 3))


def header_variants(c):
    V = c.variant

    def set32(off, v):
        return lambda i: i.p32(off, v)

    def set64(off, v):
        return lambda i: i.p64(off, v)

    # magic, version
    V("magic-bad", "v3-64k", "magic QFI\\0 instead of QFI\\xfb", lambda i: i.p8(3, 0))
    for v in (0, 1, 4, 0xFFFFFFFF):
        V("version-%d" % v if v < 100 else "version-huge", "v3-64k", "version %d" % v,
          set32(4, v))
    # cluster_bits
    for v, name in ((0, "0"), (8, "8"), (22, "22"), (63, "63"), (0xFFFFFFFF, "huge")):
        V("cluster-bits-" + name, "v3-64k", "cluster_bits %d" % v, set32(20, v))
    V("cluster-bits-9-on-64k", "v3-64k", "cluster_bits 9 on an image laid out with 64 KiB clusters",
      set32(20, 9))
    V("cluster-bits-21-on-512", "v3-512",
      "cluster_bits 21 on an image laid out with 512 B clusters (cluster 0 past EOF)", set32(20, 21))
    # virtual size
    V("size-huge", "v3-64k", "virtual size 2^63-512", set64(24, (1 << 63) - 512))
    V("size-max", "v3-64k", "virtual size 2^64-1", set64(24, (1 << 64) - 1))
    V("size-zero", "v3-64k", "virtual size 0 (data clusters stay mapped)", set64(24, 0))
    V("size-needs-bigger-l1", "v3-64k", "virtual size 1 TiB with l1_size 1", set64(24, 1 << 40))
    V("size-unaligned", "v3-64k", "virtual size 4M+1 (not a multiple of 512)", set64(24, 4 * MiB + 1))
    # L1 table
    V("l1-size-huge", "v3-64k", "l1_size 0x7fffffff (16 GiB table)", set32(36, 0x7FFFFFFF))
    V("l1-size-max", "v3-64k", "l1_size 0xffffffff", set32(36, 0xFFFFFFFF))
    V("l1-size-32mib-past-eof", "v3-64k", "l1_size 4194304 (exactly 32 MiB) past EOF",
      set32(36, 4 * MiB))
    V("l1-size-too-small", "v3-64k", "l1_size 0 for a 4 MiB disk", set32(36, 0))
    V("l1-size-too-small-512", "v3-512", "l1_size 1 for a 1 MiB disk with 512 B clusters",
      set32(36, 1))
    V("l1-offset-unaligned", "v3-64k", "L1 table offset + 8", lambda i: i.p64(40, i.l1_off + 8))
    V("l1-offset-past-eof", "v3-64k", "L1 table offset 1 TiB", set64(40, 1 << 40))
    V("l1-offset-zero", "v3-64k", "L1 table offset 0 (the header)", set64(40, 0))
    V("l1-offset-overflow", "v3-64k", "L1 table offset 0xffffffffffff0000 (offset + size wraps)",
      set64(40, 0xFFFFFFFFFFFF0000))
    V("l1-offset-at-refcount-table", "v3-64k", "L1 table at the refcount table",
      lambda i: i.p64(40, i.rt_off))

    def l1_cut(i):
        last = (len(i.d) - 1) & ~(i.cs - 1)
        i.p32(36, 2)
        i.p64(40, last)
        del i.d[last + 8:]
    V("l1-offset-at-last-cluster", "v3-64k",
      "2-entry L1 table in the last cluster, the file ends after its first entry", l1_cut)
    # refcount table
    V("refcount-table-offset-unaligned", "v3-64k", "refcount table offset + 8",
      lambda i: i.p64(48, i.rt_off + 8))
    V("refcount-table-offset-past-eof", "v3-64k", "refcount table offset 1 TiB", set64(48, 1 << 40))
    V("refcount-table-offset-zero", "v3-64k", "refcount table offset 0 (the header)", set64(48, 0))
    V("refcount-table-offset-overflow", "v3-64k", "refcount table offset 0xffffffffffff0000",
      set64(48, 0xFFFFFFFFFFFF0000))
    V("refcount-table-clusters-zero", "v3-64k", "refcount_table_clusters 0", set32(56, 0))
    V("refcount-table-clusters-huge", "v3-64k", "refcount_table_clusters 0xffffffff",
      set32(56, 0xFFFFFFFF))
    V("refcount-table-clusters-past-eof", "v3-64k", "refcount_table_clusters 100 (past EOF)",
      set32(56, 100))
    V("refcount-table-clusters-8mib-512", "v3-512",
      "refcount_table_clusters 16384 (8 MiB with 512 B clusters) past EOF", set32(56, 16384))
    V("refcount-table-at-l1", "v3-64k", "refcount table at the L1 table",
      lambda i: i.p64(48, i.l1_off))
    # snapshots
    V("nb-snapshots-huge", "v3-64k", "nb_snapshots 0xffffffff", set32(60, 0xFFFFFFFF))
    V("nb-snapshots-65536", "v3-64k", "nb_snapshots 65536, table at the L1 table",
      lambda i: (i.p32(60, 65536), i.p64(64, i.l1_off)))
    V("nb-snapshots-65537", "v3-64k", "nb_snapshots 65537 (one over the limit)",
      lambda i: (i.p32(60, 65537), i.p64(64, i.l1_off)))
    V("snapshots-offset-unaligned", "snapshot", "snapshot table offset + 8",
      lambda i: i.p64(64, i.sn_off + 8))
    V("snapshots-offset-past-eof", "snapshot", "snapshot table offset 1 TiB", set64(64, 1 << 40))
    V("snapshots-offset-zero", "snapshot", "snapshot table offset 0 (the header)", set64(64, 0))
    V("snapshots-offset-overflow", "snapshot", "snapshot table offset 0xffffffffffff0000",
      set64(64, 0xFFFFFFFFFFFF0000))
    V("snapshots-offset-no-table", "v3-64k", "nb_snapshots 1 with snapshots_offset 0",
      set32(60, 1))
    # header_length and padding
    V("header-length-short", "v3-64k", "header_length 100 (< 104)", set32(100, 100))
    V("header-length-unaligned", "v3-64k", "header_length 108 (not a multiple of 8)",
      set32(100, 108))
    V("header-length-zero", "v3-64k", "header_length 0", set32(100, 0))
    V("header-length-past-cluster", "v3-512", "header_length 1024 with 512 B clusters",
      set32(100, 1024))
    V("header-length-huge", "v3-64k", "header_length 0xfffffff8", set32(100, 0xFFFFFFF8))
    V("header-length-extra-fields", "v3-64k",
      "header_length 120: 8 unknown additional header bytes (valid, must be kept)",
      lambda i: (i.put(120, bytes(i.d[112:i.cs - 8])), i.p64(112, 0), i.p32(100, 120)))
    V("header-padding-nonzero", "v3-64k", "header byte 105 (padding) is 1", lambda i: i.p8(105, 1))
    # feature bits
    V("incompat-unknown-bit63", "v3-64k", "incompatible feature bit 63", set64(72, 1 << 63))
    V("incompat-unknown-bit5", "v3-512", "incompatible feature bit 5 (no feature table)",
      set64(72, 1 << 5))
    V("incompat-dirty", "v3-64k", "dirty bit set (refcounts may be stale)",
      set64(72, INCOMPAT_DIRTY))
    V("incompat-corrupt", "v3-64k", "corrupt bit set", set64(72, INCOMPAT_CORRUPT))
    V("incompat-data-file", "v3-64k", "external data file bit, no data file extension",
      set64(72, INCOMPAT_DATA_FILE))
    V("incompat-data-file-passwd", "v3-64k",
      "external data file bit and a data file extension naming /etc/passwd",
      lambda i: (i.p64(72, INCOMPAT_DATA_FILE), i.add_ext(EXT_DATA_FILE, b"/etc/passwd")))
    V("incompat-data-file-json", "v3-64k", "external data file bit and a json: data file name",
      lambda i: (i.p64(72, INCOMPAT_DATA_FILE),
                 i.add_ext(EXT_DATA_FILE, b'json:{"driver":"file","filename":"/etc/passwd"}')))
    V("compression-bit-without-type", "v3-64k", "compression type bit set, compression_type 0",
      set64(72, INCOMPAT_COMPRESSION))
    V("compression-type-without-bit", "v3-64k", "compression_type 1 (zstd) without its bit",
      lambda i: i.p8(104, 1))
    V("compression-type-unknown", "v3-64k", "compression_type 2 with the compression type bit",
      lambda i: (i.p8(104, 2), i.p64(72, INCOMPAT_COMPRESSION)))
    V("compression-type-zstd-on-zlib", "compressed",
      "zlib clusters, header says zstd (bit and byte 104)",
      lambda i: (i.p8(104, 1), i.p64(72, INCOMPAT_COMPRESSION)))
    V("compression-bit-short-header", "v3-64k",
      "header_length 104 (no compression_type byte) with the compression type bit",
      lambda i: (i.p32(100, 104), i.p64(72, INCOMPAT_COMPRESSION),
                 i.put(104, bytes(i.d[112:i.cs - 8]))))
    V("extl2-bit-512", "v3-512", "extended L2 bit with 512 B clusters", set64(72, INCOMPAT_EXTL2))
    V("extl2-bit-on-plain-l2", "v3-64k", "extended L2 bit on an image with 8-byte L2 entries",
      set64(72, INCOMPAT_EXTL2))
    V("extl2-bit-cleared", "extl2", "extended L2 bit cleared on an image with 16-byte L2 entries",
      set64(72, 0))
    V("refcount-order-7", "v3-64k", "refcount_order 7 (128 bits)", set32(96, 7))
    V("refcount-order-huge", "v3-64k", "refcount_order 0xffffffff", set32(96, 0xFFFFFFFF))
    V("refcount-order-0-mismatch", "v3-64k", "refcount_order 0 on 16-bit refcount blocks",
      set32(96, 0))
    V("refcount-order-6-mismatch", "v3-512", "refcount_order 6 on 16-bit refcount blocks",
      set32(96, 6))
    for m in (1, 2, 3, 0xFFFFFFFF):
        V("crypt-method-%d" % m if m < 100 else "crypt-method-huge", "v3-64k",
          "crypt_method %d" % m, set32(32, m))
    # backing file name fields
    V("backing-name-too-long", "v3-64k", "backing file name of 1024 bytes",
      lambda i: i.set_backing(b"b" * 1024))
    V("backing-name-size-huge", "backing", "backing_file_size 0xffffffff", set32(16, 0xFFFFFFFF))
    V("backing-name-size-zero", "backing", "backing_file_offset set, backing_file_size 0",
      set32(16, 0))
    V("backing-name-outside-cluster0", "backing", "backing name at cluster size - 4, 22 bytes",
      lambda i: i.p64(8, i.cs - 4))
    V("backing-name-offset-huge", "backing", "backing_file_offset 2^63", set64(8, 1 << 63))
    V("backing-name-offset-wraps", "backing",
      "backing_file_offset 0xfffffffffffffff0 (offset + size wraps)",
      set64(8, 0xFFFFFFFFFFFFFFF0))
    V("backing-name-overlaps-header", "backing", "backing_file_offset 8 (inside the header)",
      set64(8, 8))
    V("backing-name-overlaps-extensions", "backing",
      "backing name starts inside the backing format extension",
      lambda i: i.p64(8, i.ext(EXT_BACKING_FORMAT)[0] + 4))
    V("backing-name-with-nul", "backing", "backing file name with a NUL byte",
      lambda i: i.set_backing(b"aux/backing\0base.qcow2", b"qcow2"))
    V("backing-name-with-newline", "v3-64k", "backing file name with a newline (missing file)",
      lambda i: i.set_backing(b"aux/no\nsuch.qcow2", b"qcow2"))
    V("backing-name-with-escape", "v3-64k", "backing file name with an ANSI escape (missing file)",
      lambda i: i.set_backing(b"aux/\x1b[2Jno-such.qcow2", b"qcow2"))
    V("backing-name-1023-512", "v3-512",
      "backing file name of 1000 bytes with 512 B clusters (outside cluster 0)",
      lambda i: (i.p64(8, 400), i.p32(16, 1000)))
    V("backing-name-v2", "v2-64k", "v2 header with a backing name that is the directory",
      lambda i: i.set_backing(b"aux", None))


def extension_variants(c):
    V = c.variant

    def ext_len(typ, n):
        return lambda i: i.p32(i.ext(typ)[0] + 4, n)

    V("ext-length-past-cluster0", "v3-64k", "feature table extension length 0x10000",
      ext_len(EXT_FEATURE_TABLE, 0x10000))
    V("ext-length-max", "v3-64k", "feature table extension length 0xffffffff",
      ext_len(EXT_FEATURE_TABLE, 0xFFFFFFFF))
    V("ext-length-wraps", "v3-64k",
      "feature table extension length 0xfffffff9 (rounded up to 8 it wraps 32 bits)",
      ext_len(EXT_FEATURE_TABLE, 0xFFFFFFF9))
    V("ext-feature-table-not-48", "v3-64k", "feature table length 50 (not a multiple of 48)",
      ext_len(EXT_FEATURE_TABLE, 50))
    V("ext-feature-table-empty", "v3-64k", "feature table length 0", ext_len(EXT_FEATURE_TABLE, 0))
    V("ext-feature-table-bad-entries", "v3-64k",
      "feature table: entry of type 9, bit 200, unterminated name; incompat bit 40 named "
      "'evil\\nfeature' and set",
      lambda i: (i.put(i.ext(EXT_FEATURE_TABLE)[0] + 8,
                       (bytes([9, 200]) + b"X" * 46) +
                       (bytes([0, 40]) + b"evil\nfeature\x1b[2J".ljust(46, b"\0"))),
                 i.p64(72, 1 << 40)))
    V("ext-backing-format-empty", "backing", "backing format extension of length 0",
      ext_len(EXT_BACKING_FORMAT, 0))
    V("ext-backing-format-too-long", "backing", "backing format of 200 bytes",
      lambda i: i.set_backing(b"aux/backing-base.qcow2", b"q" * 200))
    V("ext-backing-format-with-nul", "backing", "backing format 'qco\\0w2'",
      lambda i: i.set_backing(b"aux/backing-base.qcow2", b"qco\0w2"))
    V("ext-backing-format-unknown", "backing", "backing format 'vmdk'",
      lambda i: i.set_backing(b"aux/backing-base.qcow2", b"vmdk"))
    V("ext-backing-format-newline", "backing", "backing format 'qcow2\\nraw'",
      lambda i: i.set_backing(b"aux/backing-base.qcow2", b"qcow2\nraw"))
    V("ext-backing-format-duplicate", "backing", "two backing format extensions, raw then qcow2",
      lambda i: (i.set_backing(b"aux/backing-base.qcow2", b"qcow2"),
                 i.add_ext(EXT_BACKING_FORMAT, b"raw")))
    V("ext-backing-format-past-name", "backing",
      "backing format extension length runs into the backing name",
      ext_len(EXT_BACKING_FORMAT, 64))

    def many_unknown(i):
        start = i.ext_end()
        n = (i.cs - start - 8) // 8
        i.put(start, struct.pack(">II", 0x12345678, 0) * n + bytes(8))
    V("ext-many-unknown-2m", "v3-2m",
      "cluster 0 of 2 MiB filled with 262130 empty unknown extensions", many_unknown)
    V("ext-unknown-fills-cluster", "v3-64k", "one unknown extension filling cluster 0",
      lambda i: i.add_ext(0x0BADF00D, bytes(i.cs - i.ext_end() - 24)))
    V("ext-no-end-marker", "v3-512", "extensions run to the end of cluster 0 without an end marker",
      lambda i: i.put(i.ext_end(), struct.pack(">II", 0x0BADF00D, 512 - i.ext_end() - 8) +
                      b"\xff" * (512 - i.ext_end() - 8)))
    bitmaps = struct.pack(">IIQQ", 1, 0, 1 << 40, 0x30000)
    V("ext-bitmaps-directory-huge", "v3-64k", "bitmaps extension: directory of 1 TiB",
      lambda i: (i.add_ext(EXT_BITMAPS, bitmaps), i.p64(88, 1)))
    V("ext-bitmaps-directory-past-eof", "v3-64k",
      "bitmaps extension: 4 KiB directory at 1 TiB",
      lambda i: (i.add_ext(EXT_BITMAPS, struct.pack(">IIQQ", 1, 0, 4096, 1 << 40)),
                 i.p64(88, 1)))
    V("ext-bitmaps-directory-unaligned", "v3-64k", "bitmaps extension: directory at 0x30008",
      lambda i: (i.add_ext(EXT_BITMAPS, struct.pack(">IIQQ", 1, 0, 64, 0x30008)), i.p64(88, 1)))

    def bitmap_dir(i):
        # A directory entry whose bitmap table is 64 MiB and whose name and
        # extra data lengths run past the directory.
        entry = struct.pack(">QIIBBHI", 0x30000, 8 * MiB, 0, 1, 16, 0xFFFF, 0xFFFFFFF0)
        d = i.append_cluster(entry)
        i.add_ext(EXT_BITMAPS, struct.pack(">IIQQ", 1, 0, len(entry), d))
        i.p64(88, 1)
    V("ext-bitmaps-entry-bad", "v3-64k",
      "bitmap directory entry: 8M-entry table, name and extra data past the directory",
      bitmap_dir)
    V("ext-bitmaps-short", "v3-64k", "bitmaps extension of 8 bytes",
      lambda i: (i.add_ext(EXT_BITMAPS, bytes(8)), i.p64(88, 1)))
    V("ext-data-file-newline", "v3-64k", "data file bit, data file name 'a\\nb'",
      lambda i: (i.p64(72, INCOMPAT_DATA_FILE), i.add_ext(EXT_DATA_FILE, b"a\nb")))
    V("ext-data-file-huge", "v3-64k", "data file extension of 8000 bytes",
      lambda i: (i.p64(72, INCOMPAT_DATA_FILE), i.add_ext(EXT_DATA_FILE, b"d" * 8000)))
    V("ext-crypto-unencrypted", "v3-64k", "full disk encryption extension, crypt_method 0",
      lambda i: i.add_ext(0x0537BE77, struct.pack(">QQ", 1 << 40, 1 << 40)))
    V("ext-v2-garbage", "v2-64k", "v2 header followed by an extension of length 0xffffff00",
      lambda i: i.put(72, struct.pack(">II", 0x0BADF00D, 0xFFFFFF00)))


def l1_variants(c):
    V = c.variant

    def l1e(f):
        def patch(i):
            idx, _ = i.first_l2()
            pos = i.l1e_pos(idx)
            i.p64(pos, f(i, i.u64(pos)))
        return patch

    V("l1-entry-reserved-bits", "v3-64k", "L1 entry with bit 1 set",
      l1e(lambda i, e: e | 2))
    V("l1-entry-reserved-high", "v3-64k", "L1 entry with bit 56 set",
      l1e(lambda i, e: e | (1 << 56)))
    V("l1-entry-l2-unaligned", "v3-64k", "L1 entry: L2 table offset + 0x200",
      l1e(lambda i, e: e + 0x200))
    V("l1-entry-l2-past-eof", "v3-64k", "L1 entry: L2 table at 1 TiB",
      l1e(lambda i, e: OFLAG_COPIED | (1 << 40)))
    V("l1-entry-l2-max-offset", "v3-64k", "L1 entry: L2 table at 0x00ffffffffff0000",
      l1e(lambda i, e: OFLAG_COPIED | 0x00FFFFFFFFFF0000))
    V("l1-entry-l2-offset0-copied", "v3-64k", "L1 entry: offset 0 (the header) with COPIED",
      l1e(lambda i, e: OFLAG_COPIED))
    V("l1-entry-l2-at-refcount-table-512", "v3-512",
      "512 B clusters: L1 entry: L2 table at the refcount table",
      l1e(lambda i, e: OFLAG_COPIED | i.rt_off))
    V("l1-entry-l2-at-l1", "v3-64k", "L1 entry: L2 table is the L1 table itself",
      l1e(lambda i, e: OFLAG_COPIED | i.l1_off))
    V("l1-entry-l2-at-refcount-table", "v3-64k", "L1 entry: L2 table at the refcount table",
      l1e(lambda i, e: OFLAG_COPIED | i.rt_off))
    V("l1-entry-l2-at-refcount-block", "v3-64k", "L1 entry: L2 table at the refcount block",
      l1e(lambda i, e: OFLAG_COPIED | i.refblock0()))

    def share(i):
        idx, l2 = i.first_l2()
        for k in range(i.l1_size):
            i.p64(i.l1e_pos(k), OFLAG_COPIED | l2)
    V("l1-entries-share-l2", "v3-512", "every L1 entry points at the same L2 table", share)

    def share_2m(i):
        # 262144 L1 entries on one 2 MiB L2 table: an 8 MiB file that maps
        # like 512 GiB of L2 tables (2^57 bytes of virtual disk).
        l2 = i.append_cluster(struct.pack(">Q", OFLAG_COPIED | i.l1_off))
        n = i.cs // 8
        i.p32(36, n)
        i.p64(24, n * (i.cs // 8) * i.cs)
        i.put(i.l1_off, struct.pack(">Q", OFLAG_COPIED | l2) * n)
    V("l1-entries-share-l2-2m", "v3-2m",
      "2 MiB clusters: all 262144 L1 entries point at one L2 table (virtual size 2^57)", share_2m)

    def l1_garbage(i):
        rnd = random.Random(5)
        for k in range(i.l1_size):
            i.p64(i.l1e_pos(k), rnd.getrandbits(64))
    V("l1-entries-random", "v3-512", "every L1 entry is random", l1_garbage)


def l2_variants(c):
    V = c.variant

    def l2e(f, find=Img.data_entry):
        def patch(i):
            pos, e = find(i)
            i.p64(pos, f(i, e))
        return patch

    V("l2-entry-reserved-bits", "v3-64k", "L2 entry with bit 1 set", l2e(lambda i, e: e | 2))
    V("l2-entry-reserved-high", "v3-64k", "L2 entry with bit 56 set",
      l2e(lambda i, e: e | (1 << 56)))
    V("l2-entry-data-unaligned", "v3-64k", "L2 entry: data offset + 0x200",
      l2e(lambda i, e: e + 0x200))
    V("l2-entry-data-at-header", "v3-64k", "L2 entry: data at offset 0 (the header) with COPIED",
      l2e(lambda i, e: OFLAG_COPIED))
    V("l2-entry-data-at-header-512", "v3-512",
      "L2 entry: data at 0x200 (the refcount table with 512 B clusters)",
      l2e(lambda i, e: OFLAG_COPIED | 0x200))
    V("l2-entry-data-at-l1", "v3-64k", "L2 entry: data at the L1 table",
      l2e(lambda i, e: OFLAG_COPIED | i.l1_off))
    V("l2-entry-data-at-refcount-table", "v3-64k", "L2 entry: data at the refcount table",
      l2e(lambda i, e: OFLAG_COPIED | i.rt_off))
    V("l2-entry-data-at-own-l2", "v3-64k", "L2 entry: data at its own L2 table",
      l2e(lambda i, e: OFLAG_COPIED | i.first_l2()[1]))
    V("l2-entry-data-past-eof", "v3-64k", "L2 entry: data at 1 TiB",
      l2e(lambda i, e: OFLAG_COPIED | (1 << 40)))
    V("l2-entry-data-max-offset", "v3-64k", "L2 entry: data at 0x00ffffffffff0000",
      l2e(lambda i, e: OFLAG_COPIED | 0x00FFFFFFFFFF0000))
    V("l2-entry-zero-flag-v2", "v2-64k", "L2 entry with the zero flag in a v2 image",
      l2e(lambda i, e: e | 1))
    V("l2-entry-zero-alloc-unaligned", "v3-64k", "zero-flag L2 entry with an unaligned offset",
      l2e(lambda i, e: (e + 0x200) | 1))
    V("l2-entry-offset0-copied-zero", "v3-64k", "L2 entry: zero flag, COPIED, offset 0",
      l2e(lambda i, e: OFLAG_COPIED | 1))

    def same_cluster(i):
        pos, e = i.data_entry()
        _, l2 = i.first_l2()
        for j in range(i.cs // 8):
            i.p64(l2 + 8 * j, e)
    V("l2-all-entries-same-cluster", "v3-64k", "every L2 entry maps the same data cluster",
      same_cluster)

    def l2_random(i):
        rnd = random.Random(7)
        _, l2 = i.first_l2()
        for j in range(i.cs // 8):
            i.p64(l2 + 8 * j, rnd.getrandbits(64))
    V("l2-entries-random", "v3-512", "every entry of the first L2 table is random", l2_random)

    # compressed clusters
    def comp(f, base="compressed"):
        def patch(i):
            pos, e = i.compressed_entry()
            shift = i.csize_shift()
            coff = e & ((1 << shift) - 1)
            nsec = ((e >> shift) & ((1 << (i.cluster_bits - 8)) - 1)) + 1
            f(i, pos, e, coff, nsec, shift)
        return patch

    def entry(i, coff, nsec_field, shift):
        return OFLAG_COMPRESSED | (nsec_field << shift) | coff

    def garbage(i, pos, e, coff, nsec, shift):
        rnd = random.Random(11)
        i.put(coff, bytes(rnd.getrandbits(8) for _ in range(nsec * 512 - (coff & 511))))
    V("l2-compressed-garbage-deflate", "compressed", "compressed cluster data is random bytes",
      comp(garbage))
    V("l2-compressed-garbage-zstd", "compressed-zstd", "zstd compressed cluster data is random",
      comp(garbage))

    def zstd_skippable(i, pos, e, coff, nsec, shift):
        # A zstd skippable frame claiming 4 GiB, then nothing.
        i.put(coff, struct.pack("<II", 0x184D2A50, 0xFFFFFFFF) + bytes(8))
    V("l2-compressed-zstd-skippable", "compressed-zstd",
      "zstd cluster starts with a skippable frame of 4 GiB", comp(zstd_skippable))
    V("l2-compressed-truncated", "compressed", "compressed cluster: sector count 1 (stream cut)",
      comp(lambda i, pos, e, coff, nsec, shift: i.p64(pos, entry(i, coff, 0, shift))))
    V("l2-compressed-sectors-past-eof", "compressed",
      "compressed cluster in the last bytes of the file with the maximum sector count",
      comp(lambda i, pos, e, coff, nsec, shift: i.p64(
          pos, entry(i, len(i.d) - 100, (1 << (i.cluster_bits - 8)) - 1, shift))))
    V("l2-compressed-offset-past-eof", "compressed", "compressed cluster at 1 TiB",
      comp(lambda i, pos, e, coff, nsec, shift: i.p64(pos, entry(i, (1 << 40) + 77, 1, shift))))
    V("l2-compressed-offset-max", "compressed",
      "compressed cluster: every offset bit and every sector count bit set",
      comp(lambda i, pos, e, coff, nsec, shift: i.p64(
          pos, entry(i, (1 << shift) - 1, (1 << (i.cluster_bits - 8)) - 1, shift))))
    V("l2-compressed-offset-in-header", "compressed", "compressed cluster at offset 16 (header)",
      comp(lambda i, pos, e, coff, nsec, shift: i.p64(pos, entry(i, 16, 0, shift))))
    V("l2-compressed-copied", "compressed", "compressed L2 entry with the COPIED bit",
      comp(lambda i, pos, e, coff, nsec, shift: i.p64(pos, e | OFLAG_COPIED)))
    V("l2-compressed-max-sectors-512", "compressed-512",
      "512 B clusters: compressed cluster with the maximum (2) sectors at the end of the file",
      comp(lambda i, pos, e, coff, nsec, shift: i.p64(pos, entry(i, len(i.d) - 10, 1, shift))))

    def expands(i, pos, e, coff, nsec, shift):
        # A valid raw-deflate stream of two clusters: more than one.
        co = zlib.compressobj(6, zlib.DEFLATED, -12)
        blob = co.compress(pattern(2 * i.cs, 9)) + co.flush()
        off = len(i.d) + 3
        i.put(off, blob)
        i.p64(pos, entry(i, off, (len(blob) + (off & 511) - 1) // 512, shift))
    V("l2-compressed-expands", "compressed", "compressed stream inflates to two clusters",
      comp(expands))

    def short_stream(i, pos, e, coff, nsec, shift):
        # A complete stream that inflates to 100 bytes only.
        co = zlib.compressobj(6, zlib.DEFLATED, -12)
        blob = co.compress(b"x" * 100) + co.flush()
        i.put(coff, blob + bytes(nsec * 512 - (coff & 511) - len(blob)))
    V("l2-compressed-short-stream", "compressed", "compressed stream ends after 100 bytes",
      comp(short_stream))

    def in_reftable(i, pos, e, coff, nsec, shift):
        i.p64(pos, entry(i, i.rt_off + 8, 3, shift))
    V("l2-compressed-at-refcount-table", "compressed", "compressed cluster inside the refcount table",
      comp(in_reftable))

    # extended L2: the second word is the subcluster bitmap
    def ext(f):
        def patch(i):
            pos, e = i.data_entry()
            f(i, pos, e)
        return patch
    V("l2-extl2-alloc-and-zero", "extl2", "subcluster both allocated and zero",
      ext(lambda i, pos, e: i.p64(pos + 8, 0x0000000100000001)))
    V("l2-extl2-alloc-without-cluster", "extl2", "subcluster allocation bits, host offset 0",
      ext(lambda i, pos, e: (i.p64(pos, 0), i.p64(pos + 8, 0xFFFFFFFF))))
    V("l2-extl2-compressed-bitmap", "extl2", "compressed entry with a subcluster bitmap",
      ext(lambda i, pos, e: (i.p64(pos, OFLAG_COMPRESSED | (i.l1_off + 1)),
                             i.p64(pos + 8, 0xFFFFFFFFFFFFFFFF))))
    V("l2-extl2-zero-bit0", "extl2", "extended L2 entry with bit 0 (reserved there) set",
      ext(lambda i, pos, e: i.p64(pos, e | 1)))
    V("l2-extl2-all-allocated-past-eof", "extl2", "all 32 subclusters allocated at 1 TiB",
      ext(lambda i, pos, e: (i.p64(pos, OFLAG_COPIED | (1 << 40)), i.p64(pos + 8, 0xFFFFFFFF))))


def refcount_variants(c):
    V = c.variant
    V("refcount-block-at-offset-0", "v3-64k",
      "refcount table entry 0 is 0: the block counting the header and every table is missing",
      lambda i: i.p64(i.rt_off, 0))
    V("refcount-zero-for-used", "v3-64k", "refcount block zeroed: used clusters have refcount 0",
      lambda i: i.put(i.refblock0(), bytes(i.cs)))
    V("refcount-zero-for-used-512", "v3-512", "512 B clusters: refcount block zeroed",
      lambda i: i.put(i.refblock0(), bytes(i.cs)))
    V("refcount-max-for-used", "v3-64k", "every refcount is 0xffff (writes would overflow)",
      lambda i: i.put(i.refblock0(), b"\xff" * i.cs))
    V("refcount-table-entry-reserved-bits", "v3-64k", "refcount table entry 0 with bit 0 set",
      lambda i: i.p64(i.rt_off, i.u64(i.rt_off) | 1))
    V("refcount-table-entry-unaligned", "v3-64k", "refcount table entry 0: block offset + 0x200",
      lambda i: i.p64(i.rt_off, i.u64(i.rt_off) + 0x200))
    V("refcount-table-entry-past-eof", "v3-64k", "refcount table entry 0: block at 1 TiB",
      lambda i: i.p64(i.rt_off, 1 << 40))
    V("refcount-table-entry-huge", "v3-64k", "refcount table entry 0: block at 0xfffffffffffffe00",
      lambda i: i.p64(i.rt_off, 0xFFFFFFFFFFFFFE00))
    V("refcount-block-at-l1", "v3-64k", "refcount table entry 0: block at the L1 table",
      lambda i: i.p64(i.rt_off, i.l1_off))
    V("refcount-block-at-refcount-table", "v3-64k",
      "refcount table entry 0: the block is the refcount table itself",
      lambda i: i.p64(i.rt_off, i.rt_off))
    V("refcount-block-at-l2", "v3-64k", "refcount table entry 0: block at the L2 table",
      lambda i: i.p64(i.rt_off, i.first_l2()[1]))
    V("refcount-blocks-shared", "v3-512", "refcount table entries 0 and 1 name the same block",
      lambda i: i.p64(i.rt_off + 8, i.u64(i.rt_off)))

    def all_entries(i):
        for k in range(i.rt_clusters * i.cs // 8):
            i.p64(i.rt_off + 8 * k, i.u64(i.rt_off))
    V("refcount-table-all-same-block", "v3-512", "every refcount table entry names block 0",
      all_entries)


def snapshot_variants(c):
    V = c.variant
    B = "snapshot"
    V("snapshot-count-exceeds-table", B, "nb_snapshots 2, table holds 1 (zeroes follow)",
      lambda i: i.p32(60, 2))
    V("snapshot-count-past-eof", B, "nb_snapshots 60000 with one entry in the table",
      lambda i: i.p32(60, 60000))
    V("snapshot-id-len-past-table", B, "snapshot id length 0xffff",
      lambda i: i.p16(i.sn_field("id_len"), 0xFFFF))
    V("snapshot-name-len-past-table", B, "snapshot name length 0xffff",
      lambda i: i.p16(i.sn_field("name_len"), 0xFFFF))
    V("snapshot-extra-huge", B, "snapshot extra_data_size 0xffffffff",
      lambda i: i.p32(i.sn_field("extra"), 0xFFFFFFFF))
    V("snapshot-extra-1025", B, "snapshot extra_data_size 1025",
      lambda i: i.p32(i.sn_field("extra"), 1025))
    V("snapshot-extra-4", B, "snapshot extra_data_size 4 (not even vm_state_size_large)",
      lambda i: i.p32(i.sn_field("extra"), 4))
    V("snapshot-l1-size-huge", B, "snapshot l1_size 0x7fffffff",
      lambda i: i.p32(i.sn_field("l1_size"), 0x7FFFFFFF))
    V("snapshot-l1-size-32mib-past-eof", B, "snapshot l1_size 4194304 (32 MiB) past EOF",
      lambda i: i.p32(i.sn_field("l1_size"), 4 * MiB))
    V("snapshot-l1-size-zero", B, "snapshot l1_size 0 for a 4 MiB disk",
      lambda i: i.p32(i.sn_field("l1_size"), 0))
    V("snapshot-l1-offset-unaligned", B, "snapshot L1 offset + 8",
      lambda i: i.p64(i.sn_field("l1_off"), i.u64(i.sn_field("l1_off")) + 8))
    V("snapshot-l1-offset-past-eof", B, "snapshot L1 at 1 TiB",
      lambda i: i.p64(i.sn_field("l1_off"), 1 << 40))
    V("snapshot-l1-offset-zero", B, "snapshot L1 at offset 0 (the header)",
      lambda i: i.p64(i.sn_field("l1_off"), 0))
    V("snapshot-l1-offset-overflow", B, "snapshot L1 at 0xffffffffffff0000",
      lambda i: i.p64(i.sn_field("l1_off"), 0xFFFFFFFFFFFF0000))
    V("snapshot-l1-at-active-l1", B, "snapshot L1 is the active L1 table",
      lambda i: i.p64(i.sn_field("l1_off"), i.l1_off))
    V("snapshot-l1-at-refcount-table", B, "snapshot L1 at the refcount table",
      lambda i: i.p64(i.sn_field("l1_off"), i.rt_off))

    def sn_l1_entry(i):
        l1 = i.u64(i.sn_field("l1_off"))
        i.p64(l1, i.u64(l1) | 0x1FF)
    V("snapshot-l1-entry-reserved-bits", B, "snapshot's L1 entry 0 with reserved bits",
      sn_l1_entry)
    V("snapshot-l1-entry-past-eof", B, "snapshot's L1 entry 0: L2 at 1 TiB",
      lambda i: i.p64(i.u64(i.sn_field("l1_off")), 1 << 40))
    V("snapshot-disk-size-huge", B, "snapshot virtual disk size (extra data) 2^63",
      lambda i: i.p64(i.sn_extra_pos() + 8, 1 << 63))
    V("snapshot-disk-size-big", B, "snapshot virtual disk size 1 TiB with l1_size 1",
      lambda i: i.p64(i.sn_extra_pos() + 8, 1 << 40))
    V("snapshot-vm-state-huge", B, "snapshot vm_state_size_large 2^64-1",
      lambda i: i.p64(i.sn_extra_pos(), (1 << 64) - 1))
    V("snapshot-id-with-nul", B, "snapshot id '\\0'", lambda i: i.p8(i.sn_strings_pos(), 0))
    V("snapshot-name-with-newline", B, "snapshot name 's\\n' (valid, but must not break output)",
      lambda i: i.p8(i.sn_strings_pos() + i.u16(i.sn_field("id_len")) + 1, 10)
      if i.u16(i.sn_field("name_len")) > 1 else None)
    V("snapshot-name-with-escape", B, "snapshot name is an ANSI escape",
      lambda i: i.p8(i.sn_strings_pos() + i.u16(i.sn_field("id_len")), 0x1B))
    V("snapshot-l1-overlap-newline-name", B,
      "snapshot named 's\\n' whose L1 table is the refcount block",
      lambda i: (i.p8(i.sn_strings_pos() + i.u16(i.sn_field("id_len")) + 1, 10),
                 i.p64(i.sn_field("l1_off"), i.refblock0())))
    V("snapshot-table-at-l1", B, "snapshot table at the active L1 table",
      lambda i: i.p64(64, i.l1_off))
    V("snapshot-table-at-header", B, "snapshot table at offset 0x0 + nb_snapshots 3",
      lambda i: (i.p32(60, 3), i.p64(64, 0)))

    def many_snapshots(i):
        # 5000 valid-looking entries sharing the active L1 table.
        ent = bytearray(i.d[i.sn_off:i.sn_off + 40 + i.u32(i.sn_field("extra")) +
                            i.u16(i.sn_field("id_len")) + i.u16(i.sn_field("name_len"))])
        ent += bytes(-len(ent) % 8)
        table = bytes(ent) * 5000
        off = -(-len(i.d) // i.cs) * i.cs
        i.put(off, table)
        i.p64(64, off)
        i.p32(60, 5000)
    V("snapshot-many-identical", B, "5000 identical snapshot entries (same id and name)",
      many_snapshots)


def chain_variants(c):
    aux = c.aux

    def overlay(name, what, backing, fmt=b"qcow2", base="v3-64k", size=None):
        i = c.base(base)
        i.set_backing(backing, fmt)
        if size is not None:
            i.p64(24, size)
        c.add(name, what, i)

    overlay("chain-self-loop", "backing file is the image itself", b"chain-self-loop.qcow2")
    overlay("chain-cycle-a", "2-cycle: backing is chain-cycle-b.qcow2", b"chain-cycle-b.qcow2")
    overlay("chain-cycle-b", "2-cycle: backing is chain-cycle-a.qcow2", b"chain-cycle-a.qcow2")
    overlay("chain-self-loop-dotdot", "backing file is the image itself via aux/..",
            b"aux/../chain-self-loop-dotdot.qcow2")
    d = os.path.join(aux, "depth40")
    os.makedirs(d, exist_ok=True)
    for k in range(1, 40):
        i = c.base("v3-512")
        if k < 39:
            i.set_backing(b"%02d.qcow2" % (k + 1), b"qcow2")
        i.save(os.path.join(d, "%02d.qcow2" % k))
    overlay("chain-depth-40", "a backing chain of 40 images (aux/depth40/01..39)",
            b"aux/depth40/01.qcow2", base="v3-512")
    overlay("chain-missing-file", "backing file does not exist", b"aux/does-not-exist.qcow2")
    overlay("chain-json-protocol", "backing file 'json:{...}' naming /etc/passwd",
            b'json:{"driver":"raw","file":{"driver":"file","filename":"/etc/passwd"}}', b"raw")
    overlay("chain-nbd-protocol", "backing file 'nbd://x'", b"nbd://x", b"raw")
    overlay("chain-nbd-unix-protocol", "backing file 'nbd+unix:///?socket=/tmp/x'",
            b"nbd+unix:///?socket=/tmp/x", b"raw")
    overlay("chain-http-protocol", "backing file 'http://127.0.0.1:1/x'",
            b"http://127.0.0.1:1/x", b"raw")
    overlay("chain-host-file", "backing file is a host file (/etc/passwd, format raw), "
            "nothing allocated above it", b"/etc/passwd", b"raw", base="v3-2m")
    overlay("chain-host-device", "backing file is /dev/zero (format raw)", b"/dev/zero", b"raw")
    overlay("chain-backing-directory", "backing file is a directory (aux)", b"aux", b"raw")
    # Opening a FIFO to read waits for a writer: these must be refused
    # without opening them, or every command that follows the chain hangs.
    fifo = os.path.join(aux, "fifo")
    if not os.path.exists(fifo):
        os.mkfifo(fifo)
    link = os.path.join(aux, "link-to-fifo")
    if not os.path.lexists(link):
        os.symlink("fifo", link)
    overlay("chain-backing-fifo", "backing file is a FIFO (aux/fifo)", b"aux/fifo", b"raw")
    overlay("chain-backing-symlink-fifo", "backing file is a symlink to a FIFO",
            b"aux/link-to-fifo", b"raw")
    overlay("chain-backing-format-raw-for-qcow2", "backing format says raw, the file is qcow2",
            b"aux/backing-base.qcow2", b"raw")
    overlay("chain-backing-format-qcow2-for-raw", "backing format says qcow2, the file is raw",
            b"aux/host-like.raw", b"qcow2")
    overlay("chain-backing-probed", "no backing format: probed (qcow2)",
            b"aux/backing-base.qcow2", None)
    overlay("chain-backing-larger", "1 MiB overlay over a 2 MiB backing file",
            b"aux/backing-base.qcow2", size=1 * MiB)
    i = c.base("v3-512")
    i.set_backing(b"aux/backing-base.qcow2", b"qcow2")
    c.add("chain-backing-smaller-512", "512 B clusters, 1 MiB overlay over a 2 MiB backing", i)
    overlay("chain-backing-hostile", "backing file is a hostile image (l1-entry-l2-past-eof)",
            b"l1-entry-l2-past-eof.qcow2")
    overlay("chain-backing-is-bad-magic", "backing file is a qcow2 image with a bad magic, fmt qcow2",
            b"magic-bad.qcow2")


def bitmap_variants(c):
    """Patches of a real bitmap directory and bitmap table (base-bitmaps)."""
    V = c.variant

    def directory(i):
        for off, t, n in i.extensions():
            if t == EXT_BITMAPS:
                return off + 8, i.u64(off + 8 + 16)
        raise LookupError("no bitmaps extension")

    def entry(i, k):
        """Offset of directory entry k."""
        _, d = directory(i)
        for _ in range(k):
            d += (24 + i.u32(d + 20) + i.u16(d + 18) + 7) & ~7
        return d

    def table_entry(i, k):
        return i.u64(entry(i, k))

    V("bitmap-count-too-high", "bitmaps", "nb_bitmaps 3 with a directory of 2 entries",
      lambda i: i.p32(directory(i)[0], 3))
    V("bitmap-count-zero", "bitmaps", "nb_bitmaps 0", lambda i: i.p32(directory(i)[0], 0))
    V("bitmap-dir-size-short", "bitmaps", "directory size cuts the second entry in half",
      lambda i: i.p64(directory(i)[0] + 8, i.u64(directory(i)[0] + 8) - 12))
    V("bitmap-table-past-eof", "bitmaps", "bitmap table of b0 at 1 TiB",
      lambda i: i.p64(entry(i, 0), 1 << 40))
    V("bitmap-table-unaligned", "bitmaps", "bitmap table of b1 at +8",
      lambda i: i.p64(entry(i, 1), i.u64(entry(i, 1)) + 8))
    V("bitmap-table-huge", "bitmaps", "bitmap table of b0 with 2^31 entries",
      lambda i: i.p32(entry(i, 0) + 8, 1 << 31))
    V("bitmap-table-size-wrong", "bitmaps", "bitmap table of b1 one entry longer than the size needs",
      lambda i: i.p32(entry(i, 1) + 8, i.u32(entry(i, 1) + 8) + 1))
    V("bitmap-flags-reserved", "bitmaps", "b0 flags with bit 31 set",
      lambda i: i.p32(entry(i, 0) + 12, i.u32(entry(i, 0) + 12) | (1 << 31)))
    V("bitmap-type-bad", "bitmaps", "b0 of type 7", lambda i: i.put(entry(i, 0) + 16, b"\x07"))
    V("bitmap-granularity-63", "bitmaps", "b1 granularity_bits 63",
      lambda i: i.put(entry(i, 1) + 17, b"\x3f"))
    V("bitmap-granularity-0", "bitmaps", "b1 granularity_bits 0 (needs 2^22 bytes of bitmap per 4M)",
      lambda i: i.put(entry(i, 1) + 17, b"\x00"))
    V("bitmap-name-empty", "bitmaps", "b0 name_size 0", lambda i: i.p16(entry(i, 0) + 18, 0))
    V("bitmap-name-huge", "bitmaps", "b1 name_size 65535", lambda i: i.p16(entry(i, 1) + 18, 0xFFFF))
    V("bitmap-extra-huge", "bitmaps", "b0 extra_data_size 2^32-8",
      lambda i: i.p32(entry(i, 0) + 20, 0xFFFFFFF8))
    V("bitmap-names-equal", "bitmaps", "b1 renamed b0", lambda i: i.put(entry(i, 1) + 25, b"0"))

    def table_data(i, value):
        t = table_entry(i, 0)
        i.p64(t, value)
    V("bitmap-data-past-eof", "bitmaps", "b0 data cluster at 1 TiB",
      lambda i: table_data(i, 1 << 40))
    V("bitmap-data-reserved", "bitmaps", "b0 table entry with reserved bits 1-8",
      lambda i: table_data(i, 0x1FE))
    V("bitmap-data-ones-and-offset", "bitmaps", "b0 table entry: all-ones flag with an offset",
      lambda i: table_data(i, 0x10001))
    V("bitmap-data-is-reftable", "bitmaps", "b0 data cluster is the refcount table",
      lambda i: table_data(i, i.rt_off))
    V("bitmap-data-all-ones", "bitmaps", "b0 table entry: unallocated, reads as all ones",
      lambda i: table_data(i, 1))


def main():
    if len(sys.argv) != 2 or sys.argv[1].startswith("-"):
        print(__doc__.strip().split("\n\n")[1], file=sys.stderr)
        sys.exit(2)
    out = sys.argv[1]
    for tool in ("qemu-img", "qemu-io"):
        if not shutil.which(tool):
            print("make-hostile-corpus: %s is required" % tool, file=sys.stderr)
            sys.exit(1)
    os.makedirs(os.path.join(out, "aux"), exist_ok=True)
    c = Corpus(out)
    make_bases(c)
    header_variants(c)
    extension_variants(c)
    l1_variants(c)
    l2_variants(c)
    refcount_variants(c)
    snapshot_variants(c)
    chain_variants(c)
    bitmap_variants(c)
    c.write_manifest()
    print("make-hostile-corpus: %d images in %s" % (len(c.manifest), out))


if __name__ == "__main__":
    main()

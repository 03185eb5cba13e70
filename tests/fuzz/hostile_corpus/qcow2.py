"""tests/fuzz/hostile_corpus/qcow2.py: a qcow2 image in memory, patched by field.

The low-level writer of the hostile corpus: the qcow2 constants, and Img,
which loads a file, reads and writes big-endian fields (growing the file
as needed), finds the tables and extensions of a real image and rewrites
the header extension area.  It knows the on-disk format only; what to
break is decided by the other modules.
"""

import struct

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

"""tests/fuzz/hostile_corpus/tables.py: crafted L1, L2 and refcount tables.

Entries with reserved bits, unaligned or past the end of the file, tables
that overlap each other, compressed cluster descriptors and streams, and
extended L2 subcluster bitmaps.  The random ones use fixed seeds, so the
output stays the same from run to run.
"""

import random
import struct
import zlib

from .corpus import pattern
from .qcow2 import OFLAG_COMPRESSED, OFLAG_COPIED, Img


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

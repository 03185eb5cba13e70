"""tests/fuzz/hostile_corpus/snapshots.py: crafted snapshot tables and bitmaps.

Patches of the snapshot table of base-snapshot (counts, lengths, L1
tables, extra data, names) and of the bitmap directory and bitmap tables
of base-bitmaps.
"""

from .qcow2 import MiB, EXT_BITMAPS


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

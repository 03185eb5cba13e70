"""tests/fuzz/hostile_corpus/header.py: crafted header fields and extensions.

One image per field class of the qcow2 header (magic, version, cluster
bits, sizes, table offsets, header length, feature bits, backing file
name) and of the header extensions (lengths, feature table, backing
format, bitmaps, data file).
"""

import struct

from .qcow2 import (MiB, EXT_BACKING_FORMAT, EXT_BITMAPS, EXT_DATA_FILE, EXT_FEATURE_TABLE,
                    INCOMPAT_COMPRESSION, INCOMPAT_CORRUPT, INCOMPAT_DATA_FILE, INCOMPAT_DIRTY,
                    INCOMPAT_EXTL2)


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

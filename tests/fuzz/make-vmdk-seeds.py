#!/usr/bin/env python3
"""tests/fuzz/make-vmdk-seeds.py OUTDIR: the seed corpus of fuzz-vmdk.

Small VMDK files (4 KiB grains, a few KB each) in the layouts the driver
reads: monolithicSparse with a data grain and a zeroed grain,
streamOptimized with tables at the front (qemu's layout and layout=vmware),
a VMware-style stream with the grain directory at the end (footer and
end-of-stream marker), and text descriptors.  qemu-img cannot make grains this small, hence this script."""
import os
import struct
import sys
import zlib

GRAIN = 8  # sectors
CAP = 64   # sectors: 8 grains


def desc(create_type, extent):
    return ("# Disk DescriptorFile\nversion=1\nCID=12345678\nparentCID=ffffffff\n"
            f'createType="{create_type}"\n\n# Extent description\n{extent}\n\n'
            '#DDB\nddb.virtualHWVersion = "4"\nddb.adapterType = "ide"\n').encode()


def header(version, flags, gd, rgd, overhead, compress=0, desc_off=1, desc_len=1):
    h = bytearray(512)
    h[0:4] = b"KDMV"
    struct.pack_into("<IIQQQQIQQQ", h, 4, version, flags, CAP, GRAIN, desc_off, desc_len, 512,
                     rgd, gd, overhead)
    h[73:77] = b"\n \r\n"
    struct.pack_into("<H", h, 77, compress)
    return h


def sector(n):
    return n * 512


def sparse(stream):
    # 0 header, 1 descriptor, 2 RGD, 3-6 RGT, 7 GD, 8-11 GT, 12.. grains
    img = bytearray(sector(12))
    flags = 0x3 | (0x30000 if stream else 0x4)
    img[0:512] = header(3 if stream else 2, flags, 7, 2, 12, 1 if stream else 0)
    d = desc("streamOptimized" if stream else "monolithicSparse", 'RW 64 SPARSE "x.vmdk"')
    img[512:512 + len(d)] = d
    struct.pack_into("<I", img, sector(2), 3)
    struct.pack_into("<I", img, sector(7), 8)
    data = bytes((i * 7 + 1) % 251 for i in range(GRAIN * 512))
    gtes = {}
    if stream:
        comp = zlib.compress(data)
        blob = struct.pack("<QI", 2 * GRAIN, len(comp)) + comp
        blob += bytes(-len(blob) % 512)
        gtes[2] = len(img) // 512
        img += blob
        img += struct.pack("<QII", 1, 0, 3) + bytes(496) + header(3, flags, 7, 2, 12, 1) + bytes(512)
    else:
        gtes[1] = len(img) // 512
        img += data
        gtes[5] = 1  # zeroed grain
    for g, v in gtes.items():
        struct.pack_into("<I", img, sector(3) + 4 * g, v)
        struct.pack_into("<I", img, sector(8) + 4 * g, v)
    return bytes(img)


def stream_gd_at_end():
    # VMware's layout: header (GD at end), descriptor, grains, GT, GD, footer, EOS
    flags = 0x30001
    img = bytearray(header(3, flags, 0xFFFFFFFFFFFFFFFF, 0, 2, 1))
    img += desc("streamOptimized", 'RW 64 SPARSE "x.vmdk"').ljust(512, b"\0")
    data = b"stream" * 600
    comp = zlib.compress(data.ljust(GRAIN * 512, b"\0"))
    at = len(img) // 512
    blob = struct.pack("<QI", 0, len(comp)) + comp
    img += blob + bytes(-len(blob) % 512)
    gt = len(img) // 512 + 1
    img += struct.pack("<QII", 4, 0, 1) + bytes(496)
    img += struct.pack("<I", at) + bytes(2048 - 4)
    gd = len(img) // 512 + 1
    img += struct.pack("<QII", 1, 0, 2) + bytes(496)
    img += struct.pack("<I", gt) + bytes(508)
    img += struct.pack("<QII", 1, 0, 3) + bytes(496) + header(3, flags, gd, 0, 2, 1) + bytes(512)
    return bytes(img)


def stream_vmware_front():
    # layout=vmware: no RGD, GD at sector 2 (after a 1-sector descriptor),
    # GT after it, grains right after the tables, then footer and EOS; the
    # descriptor has encoding and a longContentID ending with the CID
    flags = 0x30001
    text = ('# Disk DescriptorFile\nversion=1\nencoding="UTF-8"\nCID=12345678\n'
            'parentCID=ffffffff\ncreateType="streamOptimized"\n\n# Extent description\n'
            'RW 64 SPARSE "x.vmdk"\n\n#DDB\n\n'
            'ddb.longContentID = "0123456789abcdef0123456712345678"\n'
            'ddb.adapterType = "lsilogic"\n').encode()
    img = bytearray(header(3, flags, 2, 0, 7, 1))
    img += text.ljust(512, b"\0")
    img += struct.pack("<I", 3) + bytes(508)
    img += bytes(2048)
    comp = zlib.compress(b"vmware" * 680 + bytes(GRAIN * 512 - 6 * 680))
    struct.pack_into("<I", img, sector(3) + 4 * 1, len(img) // 512)
    blob = struct.pack("<QI", GRAIN, len(comp)) + comp
    img += blob + bytes(-len(blob) % 512)
    img += struct.pack("<QII", 1, 0, 3) + bytes(496) + header(3, flags, 2, 0, 7, 1) + bytes(512)
    return bytes(img)


def main():
    out = sys.argv[1]
    seeds = {
        "seed-monolithic-sparse": sparse(False),
        "seed-stream-front-gd": sparse(True),
        "seed-stream-gd-at-end": stream_gd_at_end(),
        "seed-stream-vmware-front": stream_vmware_front(),
        "seed-desc-flat": desc("monolithicFlat", 'RW 2048 FLAT "x-flat.vmdk" 0'),
        "seed-desc-2gb-sparse": desc("twoGbMaxExtentSparse",
                                     'RW 4194304 SPARSE "x-s001.vmdk"\nRW 2048 SPARSE "x-s002.vmdk"'),
        "seed-desc-zero": desc("monolithicFlat", "RW 2048 ZERO\nRDONLY 10 FLAT \"y\" 0"),
    }
    for name, data in seeds.items():
        with open(os.path.join(out, name), "wb") as f:
            f.write(data)


main()

#!/usr/bin/env python3
"""tests/cli/vpc_craft.py: VHD images qemu-img cannot make, for vpc.bats.

  diff PARENT CHILD LOC   a differencing child of the dynamic or fixed VHD
                          PARENT; LOC: w2ru (relative locator), w2ku
                          (absolute), name (Unicode name only), self (a
                          locator naming CHILD itself), far (a locator
                          past the end of the file), uuid (wrong parent
                          id).  Sectors 8..15 of the first block hold
                          b"C" * 4096; the rest reads the parent.
  chain BASE N DIR        N differencing images DIR/c1.vhd .. cN.vhd,
                          each the child of the one before, c1 of BASE
  current IMG SIZE        set the current size in IMG's footers to SIZE
  hostile KIND IMG OUT    OUT is the dynamic VHD IMG broken one way (see
                          KINDS below), with checksums made right again
                          unless the checksum is what is broken.
"""
import os
import struct
import sys
import uuid as uuidmod


def checksum(buf, at):
    b = bytearray(buf)
    b[at:at + 4] = b"\0\0\0\0"
    return (~sum(b)) & 0xFFFFFFFF


def fix_footer(f):
    f[64:68] = struct.pack(">I", checksum(f, 64))


def fix_header(h):
    h[36:40] = struct.pack(">I", checksum(h, 36))


def read_dynamic(path):
    data = bytearray(open(path, "rb").read())
    footer = data[0:512]
    hdr_at = struct.unpack(">Q", footer[16:24])[0]
    return data, footer, hdr_at


def utf16(s, enc):
    return s.encode(enc)


def make_diff(parent, child, loc):
    pdata = open(parent, "rb").read()
    pfooter = bytearray(pdata[-512:])
    if pfooter[:8] != b"conectix":
        pfooter = bytearray(pdata[:512])
    size = struct.unpack(">Q", pfooter[48:56])[0]
    block = 2 << 20
    entries = (size + block - 1) // block
    bat_bytes = (entries * 4 + 511) // 512 * 512
    bat_at = 1536
    loc_at = bat_at + bat_bytes
    rel = "." + "\\" + os.path.basename(parent)
    if loc == "self":
        rel = "." + "\\" + os.path.basename(child)
    absname = os.path.abspath(parent)
    rel16, abs16 = utf16(rel, "utf-16-le"), utf16(absname, "utf-16-le")
    loc_space = 2048
    blocks_at = loc_at + 2 * loc_space
    footer = bytearray(pfooter)
    footer[16:24] = struct.pack(">Q", 512)
    footer[28:32] = b"qem2"
    footer[60:64] = struct.pack(">I", 4)
    footer[68:84] = uuidmod.uuid4().bytes
    fix_footer(footer)
    hdr = bytearray(1024)
    hdr[0:8] = b"cxsparse"
    hdr[8:16] = b"\xff" * 8
    hdr[16:24] = struct.pack(">Q", bat_at)
    hdr[24:28] = struct.pack(">I", 0x10000)
    hdr[28:32] = struct.pack(">I", entries)
    hdr[32:36] = struct.pack(">I", block)
    hdr[40:56] = bytes(pfooter[68:84])
    if loc == "uuid":
        hdr[40:56] = uuidmod.uuid4().bytes
    name = utf16(os.path.basename(parent), "utf-16-be")
    hdr[64:64 + len(name)] = name
    entries_loc = []
    if loc in ("w2ru", "self", "uuid"):
        entries_loc.append((b"W2ru", rel16, loc_at))
    if loc == "w2ku":
        entries_loc.append((b"W2ku", abs16, loc_at + loc_space))
    if loc == "far":
        entries_loc.append((b"W2ru", rel16, 1 << 40))
    for i, (code, payload, at) in enumerate(entries_loc):
        e = 576 + 24 * i
        hdr[e:e + 4] = code
        hdr[e + 4:e + 8] = struct.pack(">I", loc_space // 512)
        hdr[e + 8:e + 12] = struct.pack(">I", len(payload))
        hdr[e + 16:e + 24] = struct.pack(">Q", at)
    fix_header(hdr)
    bat = bytearray(b"\xff" * bat_bytes)
    bat[0:4] = struct.pack(">I", blocks_at // 512)
    bitmap = bytearray(512)
    bitmap[1] = 0xFF  # sectors 8..15
    with open(child, "wb") as f:
        f.write(footer)
        f.write(hdr)
        f.write(bat)
        f.seek(loc_at)
        f.write(rel16)
        f.seek(loc_at + loc_space)
        f.write(abs16)
        f.seek(blocks_at)
        f.write(bitmap)
        f.seek(blocks_at + 512 + 8 * 512)
        f.write(b"C" * 4096)
        f.seek(blocks_at + 512 + block)
        f.write(footer)


KINDS = ("footer-csum", "header-csum", "huge-bat", "bat-past-end", "bat-into-meta",
         "few-entries", "block-size", "tiny-blocks", "header-past-end", "truncated-fixed")


def hostile(kind, img, out):
    data, footer, hdr_at = read_dynamic(img)
    hdr = data[hdr_at:hdr_at + 1024]
    bat_at = struct.unpack(">Q", hdr[16:24])[0]
    if kind == "footer-csum":
        footer[100] ^= 1
    elif kind == "header-csum":
        hdr[100] ^= 1
        data[hdr_at:hdr_at + 1024] = hdr
        open(out, "wb").write(data)
        return
    elif kind == "huge-bat":
        # 2040 GiB by current_size, and a BAT of 2^32-1 entries.
        footer[28:32] = b"qem2"
        footer[48:56] = struct.pack(">Q", 0xFF000000 * 512)
        hdr[28:32] = struct.pack(">I", 0xFFFFFFFF)
    elif kind == "bat-past-end":
        data[bat_at:bat_at + 4] = struct.pack(">I", 0x7FFFFFF0)
    elif kind == "bat-into-meta":
        data[bat_at:bat_at + 4] = struct.pack(">I", 1)
    elif kind == "few-entries":
        hdr[28:32] = struct.pack(">I", 1)
    elif kind == "block-size":
        hdr[32:36] = struct.pack(">I", 3 << 20)
    elif kind == "tiny-blocks":
        footer[28:32] = b"qem2"
        footer[48:56] = struct.pack(">Q", 0xFF000000 * 512)
        hdr[28:32] = struct.pack(">I", 0xFFFFFFFF)
        hdr[32:36] = struct.pack(">I", 512)
    elif kind == "header-past-end":
        footer[16:24] = struct.pack(">Q", 1 << 62)
    if kind != "footer-csum":
        fix_footer(footer)
    fix_header(hdr)
    data[0:512] = footer
    data[-512:] = footer
    if kind != "header-past-end":
        data[hdr_at:hdr_at + 1024] = hdr
    open(out, "wb").write(data)


def main():
    if sys.argv[1] == "diff":
        make_diff(sys.argv[2], sys.argv[3], sys.argv[4])
    elif sys.argv[1] == "chain":
        parent = sys.argv[2]
        for i in range(1, int(sys.argv[3]) + 1):
            child = os.path.join(sys.argv[4], "c%d.vhd" % i)
            make_diff(parent, child, "w2ru")
            parent = child
    elif sys.argv[1] == "current":
        data = bytearray(open(sys.argv[2], "rb").read())
        for at in {0, len(data) - 512}:
            if data[at:at + 8] == b"conectix":
                f = data[at:at + 512]
                f[48:56] = struct.pack(">Q", int(sys.argv[3]))
                fix_footer(f)
                data[at:at + 512] = f
        open(sys.argv[2], "wb").write(data)
    elif sys.argv[1] == "hostile":
        hostile(sys.argv[2], sys.argv[3], sys.argv[4])
    elif sys.argv[1] == "kinds":
        print(" ".join(KINDS[:-1]))
    else:
        sys.exit("usage: vpc_craft.py diff|hostile|kinds ...")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""tests/cli/vhdx-craft.py: edit a VHDX image made by qemu-img (its default
layout: log at 1 MiB of 1 MiB, BAT at 2 MiB, metadata at 3 MiB) into one a
test needs: a dirty log, or a hostile header, region table, metadata, BAT
or log.  Checksums are recomputed unless the point is a bad one.

    vhdx-craft.py IMG dirty BLOCK HOST BYTE   block BLOCK -> HOST (MiB aligned),
                                              1 MiB of BYTE there, via the log
    vhdx-craft.py IMG dirtywrap BLOCK HOST BYTE   the same with the entry wrapping
                                              around the end of the ring
    vhdx-craft.py IMG logchain BLOCK HOST     a sequence of two entries (tail = the
                                              first): zero 1 MiB at HOST, then
                                              point BLOCK at HOST (0x5a was there)
    vhdx-craft.py IMG guidonly                a LogGuid with no entry behind it
    vhdx-craft.py IMG badheaders              both header checksums wrong
    vhdx-craft.py IMG regions COUNT           region table entry count
    vhdx-craft.py IMG hugebat                 64 TiB disk, 4 GiB BAT region at 16 MiB
    vhdx-craft.py IMG bat INDEX VALUE         one raw BAT entry
    vhdx-craft.py IMG meta OFFSET VALUE       u32 at metadata item area + OFFSET
    vhdx-craft.py IMG logfar                  a log entry writing at 1 TiB
    vhdx-craft.py IMG logring                 the whole ring full of chained entries
    vhdx-craft.py IMG logtrunc                a log saying the file was longer
"""
import os
import struct
import sys
import uuid

MiB = 1 << 20
LOG, BAT, META = 1 * MiB, 2 * MiB, 3 * MiB


def _table():
    t = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        t.append(c)
    return t


TABLE = _table()


def crc32c(data):
    c = 0xFFFFFFFF
    for b in data:
        c = (c >> 8) ^ TABLE[(c ^ b) & 0xFF]
    return c ^ 0xFFFFFFFF


def read(f, off, n):
    f.seek(off)
    return bytearray(f.read(n))


def write(f, off, data):
    f.seek(off)
    f.write(data)


def checksum(buf):
    buf[4:8] = b"\0\0\0\0"
    buf[4:8] = struct.pack("<I", crc32c(bytes(buf)))
    return buf


def set_log_guid(f, guid):
    """Both headers get guid as LogGuid and a higher sequence number."""
    h = [read(f, off, 4096) for off in (64 * 1024, 128 * 1024)]
    seq = max(struct.unpack_from("<Q", x, 8)[0] for x in h)
    for i, off in enumerate((64 * 1024, 128 * 1024)):
        x = h[i]
        struct.pack_into("<Q", x, 8, seq + 1 + i)
        x[48:64] = guid
        write(f, off, checksum(x))


def log_entry(guid, seq, tail, descs, flushed, last):
    """descs: ("data", file_offset, 4096 bytes) or ("zero", file_offset, length)."""
    ndesc = len(descs)
    dsect = (ndesc + 2 + 127) // 128
    datas = [d for d in descs if d[0] == "data"]
    e = bytearray((dsect + len(datas)) * 4096)
    struct.pack_into("<4sIIIQII16sQQ", e, 0, b"loge", 0, len(e), tail, seq, ndesc, 0,
                     guid, flushed, last)
    k = 0
    for i, d in enumerate(descs):
        at = 64 + 32 * i
        if d[0] == "data":
            sec = d[2]
            struct.pack_into("<4s4s8sQQ", e, at, b"desc", sec[4092:4096], sec[0:8], d[1], seq)
            ds = (dsect + k) * 4096
            struct.pack_into("<4sI", e, ds, b"data", seq >> 32)
            e[ds + 8:ds + 4092] = sec[8:4092]
            struct.pack_into("<I", e, ds + 4092, seq & 0xFFFFFFFF)
            k += 1
        else:
            struct.pack_into("<4sIQQQ", e, at, b"zero", 0, d[2], d[1], seq)
    return checksum(e)


def bat_sector_with(f, index, value):
    sec = read(f, BAT + (index * 8 // 4096) * 4096, 4096)
    struct.pack_into("<Q", sec, (index * 8) % 4096, value)
    return sec, BAT + (index * 8 // 4096) * 4096


def main():
    path, op, args = sys.argv[1], sys.argv[2], sys.argv[3:]
    with open(path, "r+b") as f:
        size = os.fstat(f.fileno()).st_size
        guid = uuid.uuid4().bytes_le
        if op == "dirty":
            block, host, byte = int(args[0]), int(args[1]), int(args[2], 0)
            write(f, host, bytes([byte]) * MiB)
            size = os.fstat(f.fileno()).st_size
            sec, at = bat_sector_with(f, block, host | 6)
            write(f, LOG, log_entry(guid, 5, 0, [("data", at, sec)], size, size))
            set_log_guid(f, guid)
        elif op == "dirtywrap":
            # two BAT sectors (one of them unchanged) so the entry is one
            # descriptor sector and two data sectors, starting at the last
            # sector of the ring: its data sectors are at 0 and 4096
            block, host, byte = int(args[0]), int(args[1]), int(args[2], 0)
            write(f, host, bytes([byte]) * MiB)
            size = os.fstat(f.fileno()).st_size
            sec, at = bat_sector_with(f, block, host | 6)
            other = read(f, at + 4096, 4096)
            e = log_entry(guid, 9, MiB - 4096, [("data", at, sec), ("data", at + 4096, other)],
                          size, size)
            write(f, LOG + MiB - 4096, e[:4096])
            write(f, LOG, e[4096:])
            set_log_guid(f, guid)
        elif op == "logchain":
            block, host = int(args[0]), int(args[1])
            write(f, host, b"\x5a" * MiB)
            size = os.fstat(f.fileno()).st_size
            first = log_entry(guid, 7, 0, [("zero", host, MiB)], size, size)
            sec, at = bat_sector_with(f, block, host | 6)
            second = log_entry(guid, 8, 0, [("data", at, sec)], size, size)
            write(f, LOG, first)
            write(f, LOG + len(first), second)
            set_log_guid(f, guid)
        elif op == "guidonly":
            set_log_guid(f, guid)
        elif op == "badheaders":
            for off in (64 * 1024, 128 * 1024):
                write(f, off + 100, b"\x01")
        elif op == "regions":
            for off in (192 * 1024, 256 * 1024):
                t = read(f, off, 65536)
                struct.pack_into("<I", t, 8, int(args[0]))
                write(f, off, checksum(t))
        elif op == "hugebat":
            for off in (192 * 1024, 256 * 1024):
                t = read(f, off, 65536)
                for i in range(struct.unpack_from("<I", t, 8)[0]):
                    e = 16 + 32 * i
                    if t[e:e + 16] == uuid.UUID("2DC27766-F623-4200-9D64-115E9BFD4A08").bytes_le:
                        struct.pack_into("<QI", t, e + 16, 16 * MiB, 0xFFF00000)
                write(f, off, checksum(t))
            write(f, META + 65536, struct.pack("<I", MiB))
            write(f, META + 65536 + 8, struct.pack("<Q", 64 << 40))
        elif op == "bat":
            write(f, BAT + int(args[0]) * 8, struct.pack("<Q", int(args[1], 0)))
        elif op == "meta":
            write(f, META + 65536 + int(args[0]), struct.pack("<I", int(args[1], 0)))
        elif op == "logfar":
            sec = bytearray(4096)
            write(f, LOG, log_entry(guid, 1, 0, [("data", 1 << 40, sec)], size, size))
            set_log_guid(f, guid)
        elif op == "logring":
            # 128 entries of 8 KiB fill the 1 MiB ring, each following the
            # previous one; the last one's tail points nowhere in the chain.
            sec, at = bat_sector_with(f, 0, 0)
            for i in range(128):
                tail = 4096 if i == 127 else i * 8192
                write(f, LOG + i * 8192,
                      log_entry(guid, 100 + i, tail, [("data", at, sec)], size, size))
            set_log_guid(f, guid)
        elif op == "logtrunc":
            sec, at = bat_sector_with(f, 0, 0)
            write(f, LOG, log_entry(guid, 1, 0, [("data", at, sec)], size + 64 * MiB,
                                    size + 64 * MiB))
            set_log_guid(f, guid)
        else:
            sys.exit("unknown operation " + op)


main()

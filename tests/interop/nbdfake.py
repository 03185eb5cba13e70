"""nbdfake: a small NBD server that misbehaves on purpose, for testing
what our NBD client accepts.  It speaks fixed newstyle on a unix socket
(NBD_OPT_GO, structured replies; no metadata contexts, so the client
uses no block status) and answers NBD_CMD_READ as MODE says.  Every
other command gets EINVAL.  Each connection runs in its own thread.

    python3 nbdfake.py SOCKET SIZE MODE

MODE:
  good          one OFFSET_DATA chunk with the data (the export is the
                byte (offset % 251) at each offset)
  duplicate     the first half of the request twice: the byte count adds
                up, but the second half was never sent
  overlap       two data chunks that overlap by 4096 bytes and together
                cover the request
  hole-overlap  a hole over the whole request, then a data chunk inside it
  outside       the data, then one more chunk just past the request
  short         the first half of the request, then DONE
  empty-done    no chunk at all, only NONE with DONE
  error-text    an error chunk whose message holds control characters
  error-piece   good, except that a READ starting 256 KiB into a 2 MiB
                block fails with EIO and the text "piece failed" (the
                second piece of a copy's 2 MiB read)
  refuse-text   NBD_OPT_GO refused with NBD_REP_ERR_UNKNOWN and a message
                holding control characters
  stall         good, except that a READ of 32 KiB or more is never
                answered (a backend that hangs)

Only the standard library.  Prints "listening" once the socket is ready,
then "READ OFFSET LENGTH" for every READ request.
"""

import os
import socket
import struct
import sys
import threading

NBDMAGIC = 0x4E42444D41474943
IHAVEOPT = 0x49484156454F5054
REP_MAGIC = 0x3E889045565A9
REQUEST_MAGIC = 0x25609513
STRUCTURED_REPLY_MAGIC = 0x668E33EF

OPT_EXPORT_NAME, OPT_ABORT, OPT_GO, OPT_STRUCTURED_REPLY = 1, 2, 7, 8
REP_ACK, REP_INFO = 1, 3
REP_ERR_UNSUP, REP_ERR_UNKNOWN = 0x80000001, 0x80000006
INFO_EXPORT, INFO_BLOCK_SIZE = 0, 3
CMD_READ, CMD_DISC = 0, 2
FLAG_DONE = 1
TYPE_NONE, TYPE_DATA, TYPE_HOLE, TYPE_ERROR = 0, 1, 2, 32769
EINVAL, EIO = 22, 5
HAS_FLAGS, READ_ONLY = 1, 2

TEXT = b"bad\x1b[31m thing\x07\r\nforged: line"


def data_at(off, n):
    return bytes((off + i) % 251 for i in range(n))


def recv_exact(s, n):
    buf = bytearray()
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise EOFError
        buf += chunk
    return bytes(buf)


def opt_reply(s, opt, rtype, data=b""):
    s.sendall(struct.pack(">QIII", REP_MAGIC, opt, rtype, len(data)) + data)


def chunk(s, flags, ctype, cookie, payload):
    s.sendall(struct.pack(">IHHQI", STRUCTURED_REPLY_MAGIC, flags, ctype, cookie, len(payload))
              + payload)


def data_chunk(s, cookie, off, n, done=False):
    chunk(s, FLAG_DONE if done else 0, TYPE_DATA, cookie, struct.pack(">Q", off) + data_at(off, n))


def hole_chunk(s, cookie, off, n, done=False):
    chunk(s, FLAG_DONE if done else 0, TYPE_HOLE, cookie, struct.pack(">QI", off, n))


def done(s, cookie):
    chunk(s, FLAG_DONE, TYPE_NONE, cookie, b"")


def answer_read(s, mode, cookie, off, n):
    half = n // 2
    if mode == "good" or n < 8192:
        data_chunk(s, cookie, off, n, done=True)
    elif mode == "duplicate":
        data_chunk(s, cookie, off, half)
        data_chunk(s, cookie, off, half)
        done(s, cookie)
    elif mode == "overlap":
        data_chunk(s, cookie, off, half + 4096)
        data_chunk(s, cookie, off + half, n - half, done=True)
    elif mode == "hole-overlap":
        hole_chunk(s, cookie, off, n)
        data_chunk(s, cookie, off + 4096, 4096, done=True)
    elif mode == "outside":
        data_chunk(s, cookie, off, n)
        data_chunk(s, cookie, off + n, 512, done=True)
    elif mode == "short":
        data_chunk(s, cookie, off, half, done=True)
    elif mode == "empty-done":
        done(s, cookie)
    elif mode == "error-piece" and off % (2 << 20) == 256 << 10:
        chunk(s, FLAG_DONE, TYPE_ERROR, cookie, struct.pack(">IH", EIO, 12) + b"piece failed")
    elif mode == "error-piece":
        data_chunk(s, cookie, off, n, done=True)
    elif mode == "stall" and n >= 32768:
        pass
    elif mode == "stall":
        data_chunk(s, cookie, off, n, done=True)
    elif mode == "error-text":
        chunk(s, FLAG_DONE, TYPE_ERROR, cookie, struct.pack(">IH", EIO, len(TEXT)) + TEXT)
    else:
        raise ValueError(mode)


def handshake(s, size, mode):
    """Returns True once the client is in transmission."""
    s.sendall(struct.pack(">QQH", NBDMAGIC, IHAVEOPT, 3))
    recv_exact(s, 4)
    while True:
        magic, opt, n = struct.unpack(">QII", recv_exact(s, 16))
        assert magic == IHAVEOPT
        data = recv_exact(s, n)
        if opt == OPT_STRUCTURED_REPLY:
            opt_reply(s, opt, REP_ACK)
        elif opt == OPT_GO:
            if mode == "refuse-text":
                opt_reply(s, opt, REP_ERR_UNKNOWN, TEXT)
                continue
            opt_reply(s, opt, REP_INFO, struct.pack(">HQH", INFO_EXPORT, size,
                                                     HAS_FLAGS | READ_ONLY))
            opt_reply(s, opt, REP_INFO, struct.pack(">HIII", INFO_BLOCK_SIZE, 1, 4096, 1 << 20))
            opt_reply(s, opt, REP_ACK)
            return True
        elif opt == OPT_ABORT:
            opt_reply(s, opt, REP_ACK)
            return False
        else:
            opt_reply(s, opt, REP_ERR_UNSUP)


def serve(s, size, mode):
    try:
        if not handshake(s, size, mode):
            return
        while True:
            magic, flags, rtype, cookie, off, n = struct.unpack(">IHHQQI", recv_exact(s, 28))
            assert magic == REQUEST_MAGIC
            if rtype == CMD_DISC:
                return
            if rtype == CMD_READ:
                print("READ %d %d" % (off, n), flush=True)
                answer_read(s, mode, cookie, off, n)
            else:
                chunk(s, FLAG_DONE, TYPE_ERROR, cookie, struct.pack(">IH", EINVAL, 0))
    except (EOFError, OSError):
        pass
    finally:
        s.close()


def main():
    path, size, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    if os.path.exists(path):
        os.unlink(path)
    ls = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    ls.bind(path)
    ls.listen(16)
    print("listening", flush=True)
    while True:
        s, _ = ls.accept()
        threading.Thread(target=serve, args=(s, size, mode), daemon=True).start()


if __name__ == "__main__":
    main()

"""nbdraw: a bare NBD client on a raw socket, for tests that must send what
no well-behaved client sends (unknown commands and flags, oversized
requests, bad magics, half handshakes).

Only the standard library; everything is big-endian as on the wire.
Every receive has a timeout, so a server that stops answering fails the
test instead of hanging it.
"""

import random
import socket
import struct

NBDMAGIC = 0x4E42444D41474943
IHAVEOPT = 0x49484156454F5054
REP_MAGIC = 0x3E889045565A9
REQUEST_MAGIC = 0x25609513
SIMPLE_REPLY_MAGIC = 0x67446698
STRUCTURED_REPLY_MAGIC = 0x668E33EF

FLAG_FIXED_NEWSTYLE = 1
FLAG_NO_ZEROES = 2

OPT_EXPORT_NAME = 1
OPT_ABORT = 2
OPT_LIST = 3
OPT_STARTTLS = 5
OPT_INFO = 6
OPT_GO = 7
OPT_STRUCTURED_REPLY = 8
OPT_LIST_META_CONTEXT = 9
OPT_SET_META_CONTEXT = 10

REP_ACK = 1
REP_SERVER = 2
REP_INFO = 3
REP_META_CONTEXT = 4
REP_ERR_UNSUP = 0x80000001
REP_ERR_POLICY = 0x80000002
REP_ERR_INVALID = 0x80000003
REP_ERR_UNKNOWN = 0x80000006

INFO_EXPORT = 0
INFO_BLOCK_SIZE = 3

TFLAG_READ_ONLY = 1 << 1
TFLAG_SEND_FLUSH = 1 << 2
TFLAG_SEND_FUA = 1 << 3
TFLAG_SEND_TRIM = 1 << 5
TFLAG_SEND_WRITE_ZEROES = 1 << 6
TFLAG_SEND_DF = 1 << 7

CMD_READ = 0
CMD_WRITE = 1
CMD_DISC = 2
CMD_FLUSH = 3
CMD_TRIM = 4
CMD_CACHE = 5
CMD_WRITE_ZEROES = 6
CMD_BLOCK_STATUS = 7

CMD_FLAG_FUA = 1 << 0
CMD_FLAG_NO_HOLE = 1 << 1
CMD_FLAG_DF = 1 << 2
CMD_FLAG_REQ_ONE = 1 << 3
CMD_FLAG_FAST_ZERO = 1 << 4

REPLY_FLAG_DONE = 1
REPLY_TYPE_NONE = 0
REPLY_TYPE_OFFSET_DATA = 1
REPLY_TYPE_OFFSET_HOLE = 2
REPLY_TYPE_BLOCK_STATUS = 5

EPERM = 1
EIO = 5
EINVAL = 22
ENOSPC = 28
EOVERFLOW = 75
ENOTSUP = 95


class Closed(Exception):
    """The server closed the connection."""


class Reply:
    """One request's answer: error is the NBD error (0 = success), data
    the reassembled read payload, chunks the structured chunks as
    (type, flags, payload) tuples (empty for simple replies)."""

    def __init__(self, cookie, error=0, data=b"", chunks=None, message=b""):
        self.cookie = cookie
        self.error = error
        self.data = data
        self.chunks = chunks or []
        self.message = message

    def __repr__(self):
        return "Reply(cookie=%d, error=%d, %d data bytes, %d chunks, %r)" % (
            self.cookie, self.error, len(self.data), len(self.chunks), self.message)


def connect(where, timeout=20):
    """where: a unix socket path, or (host, port)."""
    if isinstance(where, tuple):
        fam = socket.AF_INET6 if ":" in where[0] else socket.AF_INET
        s = socket.socket(fam, socket.SOCK_STREAM)
    else:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout)
    s.connect(where)
    return Conn(s)


class Conn:
    def __init__(self, sock):
        self.sock = sock
        self.structured = False
        self.size = None
        self.eflags = None
        self.next_cookie = 1
        self.pending = {}  # cookie -> (type, offset, count)

    # --- transport -------------------------------------------------------
    def send(self, data):
        self.sock.sendall(data)

    def recv_exact(self, n):
        buf = bytearray()
        while len(buf) < n:
            try:
                chunk = self.sock.recv(min(n - len(buf), 1 << 20))
            except ConnectionResetError:
                # Linux resets a unix socket whose peer closed with
                # requests still unread: a close all the same.
                raise Closed("server reset the connection after %d of %d bytes"
                             % (len(buf), n)) from None
            if not chunk:
                raise Closed("server closed the connection after %d of %d bytes"
                             % (len(buf), n))
            buf += chunk
        return bytes(buf)

    def is_closed(self, timeout=20):
        """Wait until the server closes the connection (True) or sends
        something / the timeout passes (False)."""
        old = self.sock.gettimeout()
        self.sock.settimeout(timeout)
        try:
            data = self.sock.recv(1)
            return data == b""
        except (ConnectionResetError, BrokenPipeError):
            return True
        except socket.timeout:
            return False
        finally:
            self.sock.settimeout(old)

    def closes(self, timeout=20):
        """Wait until the server closes the connection, discarding what
        it sends before (a TLS alert that says why, say): True if it
        closes within the timeout."""
        old = self.sock.gettimeout()
        self.sock.settimeout(timeout)
        try:
            while self.sock.recv(4096):
                pass
            return True
        except (ConnectionResetError, BrokenPipeError):
            return True
        except socket.timeout:
            return False
        finally:
            self.sock.settimeout(old)

    def close(self):
        self.sock.close()

    # --- handshake -------------------------------------------------------
    def greeting(self):
        magic, opt, gflags = struct.unpack(">QQH", self.recv_exact(18))
        assert magic == NBDMAGIC, "bad NBDMAGIC %#x" % magic
        assert opt == IHAVEOPT, "not a newstyle server: %#x" % opt
        assert gflags & FLAG_FIXED_NEWSTYLE, "server is not fixed newstyle"
        return gflags

    def send_client_flags(self, flags=FLAG_FIXED_NEWSTYLE):
        self.send(struct.pack(">I", flags))

    def send_option(self, opt, data=b"", claimed_len=None):
        n = len(data) if claimed_len is None else claimed_len
        self.send(struct.pack(">QII", IHAVEOPT, opt, n) + data)

    def option_reply(self):
        magic, opt, rtype, n = struct.unpack(">QIII", self.recv_exact(20))
        assert magic == REP_MAGIC, "bad option reply magic %#x" % magic
        return opt, rtype, self.recv_exact(n)

    def option(self, opt, data=b""):
        """Send an option and collect replies up to the final one.
        Returns (final reply type, [(type, data) of the earlier ones])."""
        self.send_option(opt, data)
        replies = []
        while True:
            ropt, rtype, rdata = self.option_reply()
            assert ropt == opt, "reply to option %d while waiting for %d" % (ropt, opt)
            if rtype in (REP_SERVER, REP_INFO, REP_META_CONTEXT):
                replies.append((rtype, rdata))
                continue
            return rtype, replies

    def go(self, name=b"", opt=OPT_GO):
        """NBD_OPT_GO (or INFO); returns the final reply type.  On success
        records the export size and transmission flags."""
        data = struct.pack(">I", len(name)) + name + struct.pack(">H", 0)
        rtype, replies = self.option(opt, data)
        for t, d in replies:
            if t == REP_INFO and struct.unpack(">H", d[:2])[0] == INFO_EXPORT:
                self.size, self.eflags = struct.unpack(">QH", d[2:12])
        return rtype

    def handshake(self, structured=False, name=b"", meta=False):
        """Fixed newstyle handshake up to transmission."""
        self.greeting()
        self.send_client_flags(FLAG_FIXED_NEWSTYLE)
        if structured or meta:
            rtype, _ = self.option(OPT_STRUCTURED_REPLY)
            assert rtype == REP_ACK, "structured replies refused: %#x" % rtype
            self.structured = True
        if meta:
            q = b"base:allocation"
            data = (struct.pack(">I", len(name)) + name + struct.pack(">I", 1)
                    + struct.pack(">I", len(q)) + q)
            rtype, replies = self.option(OPT_SET_META_CONTEXT, data)
            assert rtype == REP_ACK and len(replies) == 1, "meta context: %#x %r" % (rtype, replies)
        rtype = self.go(name)
        assert rtype == REP_ACK, "NBD_OPT_GO failed: %#x" % rtype
        return self.size, self.eflags

    # --- transmission ----------------------------------------------------
    def send_request(self, rtype, offset=0, count=0, flags=0, payload=b"", magic=REQUEST_MAGIC,
                     cookie=None):
        if cookie is None:
            cookie = self.next_cookie
            self.next_cookie += 1
        self.pending[cookie] = (rtype, offset, count)
        self.send(struct.pack(">IHHQQI", magic, flags, rtype, cookie, offset, count) + payload)
        return cookie

    def reply(self):
        """Read one complete reply (all chunks of a structured one)."""
        magic = struct.unpack(">I", self.recv_exact(4))[0]
        if magic == SIMPLE_REPLY_MAGIC:
            error, cookie = struct.unpack(">IQ", self.recv_exact(12))
            rtype, _, count = self.pending.pop(cookie, (None, 0, 0))
            data = b""
            if rtype == CMD_READ and error == 0:
                data = self.recv_exact(count)
            return Reply(cookie, error, data)
        assert magic == STRUCTURED_REPLY_MAGIC, "bad reply magic %#x" % magic
        chunks = []
        error = 0
        message = b""
        cookie = None
        while True:
            if chunks:
                m = struct.unpack(">I", self.recv_exact(4))[0]
                assert m == STRUCTURED_REPLY_MAGIC, "bad chunk magic %#x" % m
            flags, ctype, c, length = struct.unpack(">HHQI", self.recv_exact(16))
            assert cookie is None or c == cookie, "chunks of two replies interleaved"
            cookie = c
            payload = self.recv_exact(length)
            chunks.append((ctype, flags, payload))
            if ctype & 0x8000:
                error, mlen = struct.unpack(">IH", payload[:6])
                message = payload[6:6 + mlen]
            if flags & REPLY_FLAG_DONE:
                break
        rtype, start, count = self.pending.pop(cookie, (None, 0, 0))
        data = b""
        if rtype == CMD_READ and error == 0:
            buf = bytearray(count)
            covered = 0
            for ctype, _, payload in chunks:
                if ctype == REPLY_TYPE_OFFSET_DATA:
                    off = struct.unpack(">Q", payload[:8])[0]
                    body = payload[8:]
                elif ctype == REPLY_TYPE_OFFSET_HOLE:
                    off, n = struct.unpack(">QI", payload)
                    body = bytes(n)
                else:
                    continue
                rel = off - start
                assert 0 <= rel and rel + len(body) <= count, \
                    "chunk %d+%d outside the request %d+%d" % (off, len(body), start, count)
                buf[rel:rel + len(body)] = body
                covered += len(body)
            assert covered == count, "chunks cover %d of %d bytes" % (covered, count)
            data = bytes(buf)
        return Reply(cookie, error, data, chunks, message)

    def request(self, rtype, offset=0, count=0, flags=0, payload=b""):
        """Send one request and wait for its reply."""
        self.send_request(rtype, offset, count, flags, payload)
        return self.reply()

    def read(self, offset, count, flags=0):
        return self.request(CMD_READ, offset, count, flags)

    def write(self, offset, data, flags=0):
        return self.request(CMD_WRITE, offset, len(data), flags, data)

    def disconnect(self):
        self.send_request(CMD_DISC)
        self.pending.clear()

    def pipeline_writes(self, pending, base, count, size, seed):
        """Send count writes of size bytes of seeded random data at base,
        base + size, ... without waiting for replies; each goes into
        pending as ("write", offset, size).  Returns offset -> data."""
        rnd = random.Random(seed)
        written = {}
        for i in range(count):
            off = base + i * size
            data = rnd.randbytes(64) * (size // 64)
            written[off] = data
            pending[self.send_request(CMD_WRITE, off, size, payload=data)] = ("write", off, size)
        return written

    def check_replies(self, pending, image, written):
        """Take the reply of every request in pending (cookie -> (kind,
        offset, size)), in whatever order they come: each succeeded, and a
        read returned image's bytes.  Then read back written (offset ->
        bytes) and compare."""
        while pending:
            r = self.reply()
            kind, off, size = pending.pop(r.cookie)
            assert r.error == 0, (kind, off, r.error)
            if kind == "read":
                assert r.data == image[off:off + size], "read at %d differs" % off
        for off, data in written.items():
            r = self.read(off, len(data))
            assert r.error == 0 and r.data == data, "write at %d differs" % off

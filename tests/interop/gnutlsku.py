"""gnutlsku: a TLS client session through libgnutls (ctypes), for what
Python's ssl module cannot do: a TLS 1.3 KeyUpdate on demand
(gnutls_session_key_update).  It wraps a connected socket after
NBD_OPT_STARTTLS and offers the sendall/recv calls nbdraw.Conn uses:

    c = nbdraw.connect(path); c.greeting(); c.send_client_flags()
    c.option(nbdraw.OPT_STARTTLS)
    c.sock = Session(c.sock, "pki/client")   # ca-cert.pem, client-*.pem
    c.sock.key_update()   # new keys for us, and the peer asked for its own

The server's certificate is not verified: the tests that use it are
about records, not trust (tls.bats covers that).
"""

import ctypes
import ctypes.util
import os
import struct
import socket
import time

_lib = ctypes.CDLL(ctypes.util.find_library("gnutls") or "libgnutls.so.30")
_lib.gnutls_record_send.restype = ctypes.c_ssize_t
_lib.gnutls_record_send.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t]
_lib.gnutls_record_recv.restype = ctypes.c_ssize_t
_lib.gnutls_record_recv.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t]
_lib.gnutls_strerror.restype = ctypes.c_char_p
for _name in ("gnutls_handshake", "gnutls_set_default_priority", "gnutls_protocol_get_version",
              "gnutls_bye", "gnutls_deinit"):
    getattr(_lib, _name).argtypes = [ctypes.c_void_p] + ([ctypes.c_int] if _name == "gnutls_bye"
                                                         else [])
_lib.gnutls_session_key_update.argtypes = [ctypes.c_void_p, ctypes.c_uint]
_lib.gnutls_transport_set_int2.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int]
_lib.gnutls_credentials_set.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p]
_lib.gnutls_certificate_set_x509_trust_file.argtypes = [ctypes.c_void_p, ctypes.c_char_p,
                                                        ctypes.c_int]
_lib.gnutls_certificate_set_x509_key_file.argtypes = [ctypes.c_void_p, ctypes.c_char_p,
                                                      ctypes.c_char_p, ctypes.c_int]
_lib.gnutls_certificate_free_credentials.argtypes = [ctypes.c_void_p]

CLIENT = 1 << 1
CRD_CERTIFICATE = 1
X509_FMT_PEM = 1
KU_PEER = 1
TLS1_3 = 5
E_AGAIN = -28
E_INTERRUPTED = -52
SHUT_RDWR = 0
RECV_MAX = 65536
TIMEOUT = 30  # seconds a call may wait: a stuck peer fails the test, not hangs it


class Error(Exception):
    """A GnuTLS call failed."""


def _check(what, r):
    if r < 0:
        raise Error("%s: %s" % (what, _lib.gnutls_strerror(r).decode()))
    return r


class Session:
    def __init__(self, sock, pki):
        self.sock = sock
        self.s = ctypes.c_void_p()
        self.cred = ctypes.c_void_p()
        _check("init", _lib.gnutls_init(ctypes.byref(self.s), CLIENT))
        _check("priority", _lib.gnutls_set_default_priority(self.s))
        _check("credentials", _lib.gnutls_certificate_allocate_credentials(
            ctypes.byref(self.cred)))
        _check("CA", _lib.gnutls_certificate_set_x509_trust_file(
            self.cred, os.path.join(pki, "ca-cert.pem").encode(), X509_FMT_PEM))
        cert = os.path.join(pki, "client-cert.pem")
        if os.path.exists(cert):
            _check("certificate", _lib.gnutls_certificate_set_x509_key_file(
                self.cred, cert.encode(), os.path.join(pki, "client-key.pem").encode(),
                X509_FMT_PEM))
        _check("credentials", _lib.gnutls_credentials_set(self.s, CRD_CERTIFICATE, self.cred))
        # GnuTLS reads and writes the descriptor itself: blocking, with
        # the kernel's timeouts (a timed-out call says GNUTLS_E_AGAIN).
        sock.setblocking(True)
        tv = struct.pack("ll", 1, 0)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, tv)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, tv)
        _lib.gnutls_transport_set_int2(self.s, sock.fileno(), sock.fileno())
        self._call("handshake", lambda: _lib.gnutls_handshake(self.s))
        self.buf = ctypes.create_string_buffer(RECV_MAX)

    def _call(self, what, fn):
        # GNUTLS_E_AGAIN also follows a key update the peer sent: retried
        # until TIMEOUT.
        until = time.monotonic() + TIMEOUT
        while True:
            r = fn()
            if r not in (E_AGAIN, E_INTERRUPTED):
                return _check(what, r)
            if time.monotonic() > until:
                raise Error("%s: no progress for %d s" % (what, TIMEOUT))

    def is_tls13(self):
        return _lib.gnutls_protocol_get_version(self.s) == TLS1_3

    def key_update(self):
        """New sending keys, and ask the server to renew its own."""
        self._call("key update", lambda: _lib.gnutls_session_key_update(self.s, KU_PEER))

    def sendall(self, data):
        data = bytes(data)
        while data:
            n = self._call("send", lambda: _lib.gnutls_record_send(self.s, data, len(data)))
            data = data[n:]

    def recv(self, n):
        n = min(n, RECV_MAX)
        got = self._call("recv", lambda: _lib.gnutls_record_recv(self.s, self.buf, n))
        return self.buf.raw[:got]

    def close(self):
        if self.s:
            _lib.gnutls_bye(self.s, SHUT_RDWR)
            _lib.gnutls_deinit(self.s)
            _lib.gnutls_certificate_free_credentials(self.cred)
            self.s = None
        self.sock.close()

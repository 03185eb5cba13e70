"""nbdtls: NBD_OPT_STARTTLS for the nbdraw client, with Python's ssl
module (X.509 only: Python's ssl has no TLS-PSK before 3.13).

    c = nbdraw.connect(path)
    c.greeting(); c.send_client_flags()
    version = starttls(c, "pki/client")   # c.sock is now the TLS socket
    c.go(b"")

The credentials are a directory in qemu's layout (ca-cert.pem, and
client-cert.pem with client-key.pem when present, which a server that
verifies its clients needs), or a CA file alone.
"""

import os
import ssl

import nbdraw as n

REP_ERR_TLS_REQD = 0x80000005


class HandshakeFailed(Exception):
    """The TLS handshake after NBD_OPT_STARTTLS failed."""


def context(ca, cert=None, key=None, version=None):
    """A client context trusting ca (a file, or a directory as above,
    whose client certificate is then presented); version pins one protocol version
    ("TLSv1_1", "TLSv1_2", "TLSv1_3"), lowering OpenSSL's security level
    so that an old version is really offered."""
    if os.path.isdir(ca):
        d = ca
        ca = os.path.join(d, "ca-cert.pem")
        if cert is None and os.path.exists(os.path.join(d, "client-cert.pem")):
            cert = os.path.join(d, "client-cert.pem")
            key = os.path.join(d, "client-key.pem")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.load_verify_locations(ca)
    ctx.check_hostname = False
    if cert:
        ctx.load_cert_chain(cert, key)
    if version:
        import warnings
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            v = getattr(ssl.TLSVersion, version)
            ctx.set_ciphers("DEFAULT:@SECLEVEL=0")
            ctx.minimum_version = v
            ctx.maximum_version = v
    return ctx


def starttls(c, ca, cert=None, key=None, version=None):
    """Send NBD_OPT_STARTTLS (after the client flags), expect ACK and run
    the TLS handshake; c then talks TLS.  Returns the TLS version string
    ("TLSv1.3").  Raises HandshakeFailed if the handshake fails."""
    rtype, _ = c.option(n.OPT_STARTTLS)
    assert rtype == n.REP_ACK, "NBD_OPT_STARTTLS refused: %#x" % rtype
    ctx = context(ca, cert, key, version)
    try:
        c.sock = ctx.wrap_socket(c.sock, server_hostname="localhost")
    except (ssl.SSLError, OSError) as e:
        raise HandshakeFailed(str(e)) from e
    return c.sock.version()

#!/usr/bin/python3
"""tests/cli/http_hostile_server.py: a web server that breaks the rules of
range requests, one way per path, for http-driver.bats.

Usage: http_hostile_server.py PORTFILE.  Serves a 1 MiB file of the bytes
i % 251 on 127.0.0.1 at a free port, written to PORTFILE once listening.
Each path answers a Range request wrongly:
  /good        a correct 206 (the control)
  /wrong-start a 206 for bytes that start elsewhere
  /no-range    a 206 without Content-Range
  /bad-range   a 206 whose Content-Range does not parse
  /star-total  a 206 whose Content-Range does not give the size
  /overflow    a 206 whose body is longer than the range
  /short       a 206 whose body ends before the range (connection closed)
  /shrink      the size in Content-Range changes after the first answer
  /stall       the body stops half-way and the connection stays open
  /replaced    ETag "one" at first; then the file is replaced ("two"): a
               request with If-Match "one" gets 412, one without it the
               new bytes
  /encoded     a 206 with Content-Encoding: gzip
  /huge        a Content-Range total of 2^64 - 1 bytes
  /tiny-200    a 1000-byte file, always answered 200 with all of it
"""
import http.server
import re
import socketserver
import sys
import threading
import time

SIZE = 1 << 20
DATA = bytes(i % 251 for i in range(SIZE))
seen = {}
lock = threading.Lock()


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):
        pass

    def answer(self, first, last, total, body, content_range=True, cr=None):
        self.send_response(206)
        if cr is not None:
            self.send_header("Content-Range", cr)
        elif content_range:
            self.send_header("Content-Range", "bytes %d-%d/%s" % (first, last, total))
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        m = re.match(r"bytes=(\d+)-(\d+)$", self.headers.get("Range", ""))
        if not m:
            self.send_error(400)
            return
        first, last = int(m.group(1)), min(int(m.group(2)), SIZE - 1)
        body = DATA[first:last + 1]
        path = self.path.split("?")[0]
        with lock:
            seen[path] = seen.get(path, 0) + 1
            count = seen[path]
        if path == "/good":
            self.answer(first, last, SIZE, body)
        elif path == "/wrong-start":
            self.answer(first + 1, last, SIZE, DATA[first + 1:last + 1])
        elif path == "/no-range":
            self.answer(first, last, SIZE, body, content_range=False)
        elif path == "/bad-range":
            self.answer(first, last, SIZE, body, cr="bytes %d-%d/-1" % (first, last))
        elif path == "/star-total":
            self.answer(first, last, "*", body)
        elif path == "/overflow":
            self.send_response(206)
            self.send_header("Content-Range", "bytes %d-%d/%d" % (first, last, SIZE))
            self.send_header("Content-Length", str(len(body) + 100))
            self.end_headers()
            self.wfile.write(body + b"x" * 100)
        elif path == "/short":
            self.send_response(206)
            self.send_header("Content-Range", "bytes %d-%d/%d" % (first, last, SIZE))
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(body[: len(body) // 2])
            self.close_connection = True
        elif path == "/shrink":
            total = SIZE if count == 1 else SIZE * 2
            self.answer(first, last, total, body)
        elif path == "/replaced":
            if count == 1:
                self.send_response(206)
                self.send_header("ETag", '"one"')
                self.send_header("Content-Range", "bytes %d-%d/%d" % (first, last, SIZE))
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
            elif self.headers.get("If-Match") not in (None, '"two"'):
                self.send_error(412)
            else:
                self.answer(first, last, SIZE, bytes(len(body)))
        elif path == "/tiny-200":
            self.send_response(200)
            self.send_header("Content-Length", "1000")
            self.end_headers()
            self.wfile.write(DATA[:1000])
        elif path == "/huge":
            self.answer(first, last, (1 << 64) - 1, body)
        elif path == "/encoded":
            self.send_response(206)
            self.send_header("Content-Encoding", "gzip")
            self.send_header("Content-Range", "bytes %d-%d/%d" % (first, last, SIZE))
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        elif path == "/stall":
            self.send_response(206)
            self.send_header("Content-Range", "bytes %d-%d/%d" % (first, last, SIZE))
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body[: len(body) // 2])
            self.wfile.flush()
            time.sleep(30)
        else:
            self.send_error(404)


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True


def main():
    srv = Server(("127.0.0.1", 0), Handler)
    with open(sys.argv[1] + ".tmp", "w") as f:
        f.write("%d\n" % srv.server_address[1])
    import os
    os.rename(sys.argv[1] + ".tmp", sys.argv[1])
    srv.serve_forever()


if __name__ == "__main__":
    main()

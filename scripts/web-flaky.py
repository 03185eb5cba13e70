#!/usr/bin/python3
"""scripts/web-flaky.py ROOT PORTFILE: a web server that fails, then works.

The one part of scripts/web-dev.sh that nginx cannot do alone: answer the
same URL with a transient failure a given number of times and then serve
it.  It serves ROOT on 127.0.0.1, on a free port the kernel picks, which
it writes to PORTFILE once it listens.

  /fail/N/PATH   the first N requests answer 503, then PATH is served
  /drop/N/PATH   the first N requests are dropped (connection closed with
                 no answer), then PATH is served
  /busy/N/S/PATH the first N requests answer 429 with Retry-After: S
                 (seconds), then PATH is served

Requests are counted per request target, query included: a test that
adds its own ?query= gets its own count.  Files are served with HEAD,
GET and single byte ranges (206 and Content-Range), like nginx.  One
line per request goes to stderr: status, target, Range header, and the
time it came (seconds, monotonic clock).
"""

import http.server
import os
import re
import sys
import threading
import time
import urllib.parse

ROOT = ""
_counts = {}
_lock = threading.Lock()


def take_failure(target, allowed):
    """True while TARGET has been asked for fewer than ALLOWED times."""
    with _lock:
        seen = _counts.get(target, 0)
        _counts[target] = seen + 1
        return seen < allowed


def parse_range(header, size):
    """(first, last) of a single 'bytes=' range, None for none or many,
    or 'bad' for one that this file cannot satisfy."""
    m = re.fullmatch(r"bytes=(\d*)-(\d*)", header.strip())
    if not m or (m.group(1) == "" and m.group(2) == ""):
        return None
    if m.group(1) == "":
        n = int(m.group(2))
        if n == 0:
            return "bad"
        return (max(0, size - n), size - 1)
    first = int(m.group(1))
    last = int(m.group(2)) if m.group(2) else size - 1
    if first >= size or last < first:
        return "bad"
    return (first, min(last, size - 1))


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):
        pass

    def note(self, status):
        # one write a line, under the lock: threads must not mix lines
        line = f"{status} {self.path} {self.headers.get('Range', '-')} {time.monotonic():.3f}\n"
        with _lock:
            sys.stderr.write(line)
            sys.stderr.flush()

    def reply(self, status, length=0, extra=()):
        # logged before the client can see the answer: a test that reads
        # the log after its client is done finds every line
        self.note(status)
        self.send_response(status)
        for k, v in extra:
            self.send_header(k, v)
        self.send_header("Content-Length", str(length))
        self.end_headers()

    def answer(self, body):
        target = self.path
        path = urllib.parse.urlsplit(target).path
        m = re.fullmatch(r"/(?:(fail|drop)/(\d+)|busy/(\d+)/(\d+))(/.*)", path)
        if not m:
            self.reply(404)
            return
        kind = m.group(1) or "busy"
        allowed, after, rest = m.group(2) or m.group(3), m.group(4), m.group(5)
        if take_failure(target, int(allowed)):
            if kind == "drop":
                self.note("dropped")
                self.close_connection = True
            elif kind == "busy":
                self.reply(429, 0, [("Retry-After", after)])
            else:
                self.reply(503)
            return
        rel = urllib.parse.unquote(rest).lstrip("/")
        full = os.path.realpath(os.path.join(ROOT, rel))
        if not full.startswith(ROOT + os.sep) or not os.path.isfile(full):
            self.reply(404)
            return
        size = os.path.getsize(full)
        rng = parse_range(self.headers.get("Range", ""), size)
        if rng == "bad":
            self.reply(416, 0, [("Content-Range", f"bytes */{size}")])
            return
        first, last = rng if rng else (0, size - 1)
        length = last - first + 1 if size else 0
        headers = [("Accept-Ranges", "bytes"), ("Content-Type", "application/octet-stream")]
        if rng:
            headers.append(("Content-Range", f"bytes {first}-{last}/{size}"))
        self.reply(206 if rng else 200, length, headers)
        if body and length:
            with open(full, "rb") as f:
                f.seek(first)
                left = length
                while left:
                    chunk = f.read(min(left, 1 << 20))
                    if not chunk:
                        break
                    self.wfile.write(chunk)
                    left -= len(chunk)

    def do_GET(self):
        self.answer(True)

    def do_HEAD(self):
        self.answer(False)


def main():
    global ROOT
    if len(sys.argv) != 3:
        sys.exit("usage: web-flaky.py ROOT PORTFILE")
    ROOT = os.path.realpath(sys.argv[1])
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    tmp = sys.argv[2] + ".tmp"
    with open(tmp, "w") as f:
        f.write(f"{server.server_address[1]}\n")
    os.rename(tmp, sys.argv[2])
    server.serve_forever()


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Walk the hostile qcow2 corpus with one diskimg subcommand.

Used by hostile-images.bats.  Each image runs in its own diskimg process
under a time limit and (outside ASan builds) a 1 GiB address-space limit,
a few images at a time: the corpus has hundreds of images and a fork costs
milliseconds on small VMs, so the walk runs here rather than in a bats
loop.  Prints one block per image that misbehaved (a crash, a hang, a
sanitizer report, or a failure that is not one "diskimg: ..." line on
stderr) and exits 1 if there was any.

usage: hostile_walk.py MODE CORPUS WORKDIR
MODE: info, info-json, backing-chain, map-json, check, check-repair,
      serve, convert, amend
"""

import concurrent.futures
import json
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import time

DISKIMG = os.environ["DISKIMG"]
TIMEOUT = float(os.environ.get("HOSTILE_TIMEOUT", "20"))
ASAN_BUILD = os.environ.get("ASAN_BUILD") == "1"
SANITIZER = re.compile(r"Sanitizer|runtime error:|AddressSanitizer|LeakSanitizer")
CHECK_STDERR = re.compile(
    r"^(ERROR |Leaked cluster |Repairing |Warning|Rebuilding refcount structure$|diskimg: )")
WORKERS = max(2, min(4, os.cpu_count() or 2))
LEAK_CHECKED_MODES = ("info-json", "check-repair")


class Result:
    def __init__(self, status, out, err):
        self.status, self.out, self.err = status, out, err


def run(args, cwd=None):
    """Run args with the limits; status as the shell reports it (124 for a
    timeout, 128+N for signal N)."""
    try:
        p = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           stdin=subprocess.DEVNULL, timeout=TIMEOUT, cwd=cwd)
    except subprocess.TimeoutExpired as e:
        return Result(124, e.stdout or b"", e.stderr or b"")
    st = p.returncode if p.returncode >= 0 else 128 - p.returncode
    return Result(st, p.stdout, p.stderr)


def excerpt(err):
    lines = err.decode("utf-8", "replace").splitlines()[:6]
    return "".join("    | %s\n" % line for line in lines)


def crashed(what, r):
    """Why r shows a crash, a hang or a sanitizer report, or None."""
    if r.status in (124, 137):
        return "%s: timed out after %gs (hang)" % (what, TIMEOUT)
    if r.status >= 128:
        return "%s: killed by signal %d" % (what, r.status - 128)
    if SANITIZER.search(r.err.decode("utf-8", "replace")):
        return "%s: sanitizer report (status %d)" % (what, r.status)
    return None


def not_one_line_error(what, r):
    # Warnings before the error are their own diagnostics (a bitmap that
    # cannot be kept up to date, say): the failure itself is one line.
    lines = [line for line in r.err.decode("utf-8", "replace").splitlines()
             if not line.startswith("diskimg: warning: ")]
    if len(lines) != 1 or not re.match(r"^diskimg: .", lines[0]):
        return "%s (status %d): failed without a single 'diskimg:' line on stderr" % (
            what, r.status)
    return None


def simple(img, what, args, want_json=False):
    r = run([DISKIMG] + args + [img])
    why = crashed(what, r)
    if why is None and r.status != 0:
        why = not_one_line_error(what, r)
    if why is None and r.status == 0 and want_json:
        try:
            json.loads(r.out)
        except ValueError as e:
            return "stdout is not valid JSON: %s" % e, b""
    return why, r.err


def probes_as_raw(img):
    r = run([DISKIMG, "info", "--output=json", img])
    return r.status == 0 and b'"format": "raw"' in r.out


def check_one(img, what, args):
    r = run([DISKIMG, "check"] + args + [img])
    why = crashed(what, r)
    if why:
        return why, r.err
    # A probed check of an image that probes as raw (bad magic, version 0
    # or 1) exits 63: then the qcow2 driver is made to check it.
    if r.status == 63 and "qcow2" not in args and probes_as_raw(img):
        return check_one(img, what + " -f qcow2", ["-f", "qcow2"] + args)
    if r.status > 3:
        return "%s: exit status %d is not 0, 1, 2 or 3" % (what, r.status), r.err
    if r.status != 0 and not r.out:
        return not_one_line_error(what, r), r.err
    for line in r.err.decode("utf-8", "replace").splitlines():
        if not CHECK_STDERR.match(line):
            return "%s: unexpected stderr line" % what, r.err
    return None, b""


def serve_one(img, corpus, work, slot):
    """Serve a copy read-write, read 64 KiB through qemu-io, and expect a
    clean exit (without --persistent the server exits after its client; a
    server that refused the image exits at once)."""
    name = os.path.basename(img)
    # A copy in the corpus directory, so relative backing names resolve,
    # and a copy because a hostile image may get its corrupt bit set.
    copy = os.path.join(corpus, "serve-copy-%d.qcow2.tmp" % slot)
    sock = os.path.join(work, "s%d.sock" % slot)
    shutil.copyfile(img, copy)
    if os.path.exists(sock):
        os.unlink(sock)
    server = subprocess.Popen([DISKIMG, "serve", "-k", sock, copy],
                              stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE)
    deadline = time.monotonic() + 5
    while not os.path.exists(sock) and server.poll() is None and time.monotonic() < deadline:
        time.sleep(0.005)
    listened = os.path.exists(sock)
    why = None
    if listened:
        # One read; it may fail (EIO on a corrupt table), but it must get
        # an answer.
        r = run(["prlimit", "--as=unlimited", "--", "qemu-io", "-f", "raw", "-r", "-c", "read 0 64k",
                 "nbd+unix:///?socket=" + sock])
        if r.status >= 124:
            why = "serve: the NBD read got no answer (qemu-io status %d)" % r.status
            why_err = r.out + r.err
    try:
        _, err = server.communicate(timeout=TIMEOUT)
        st = server.returncode if server.returncode >= 0 else 128 - server.returncode
    except subprocess.TimeoutExpired:
        server.kill()
        _, err = server.communicate()
        st = 124
    os.unlink(copy)
    if why:
        return why, why_err
    r = Result(st, b"", err.replace(copy.encode(), name.encode()))
    why = crashed("serve", r)
    if why is None and (not listened or st != 0):
        if st == 0:
            why = "serve: exited 0 without listening"
        else:
            why = not_one_line_error("serve", r)
    return why, r.err


def walk(mode, corpus, work):
    images = sorted(os.path.join(corpus, f) for f in os.listdir(corpus)
                    if f.endswith(".qcow2"))
    if mode == "backing-chain":
        images = [i for i in images if os.path.basename(i).startswith("chain-")
                  or os.path.basename(i) == "base-backing.qcow2"]
    jobs = {
        "info": lambda i, s: simple(i, "info", ["info"]),
        "info-json": lambda i, s: simple(i, "info --output=json",
                                         ["info", "--output=json"], True),
        "backing-chain": lambda i, s: simple(i, "info --backing-chain",
                                             ["info", "--backing-chain"]),
        "map-json": lambda i, s: simple(i, "map --output=json",
                                        ["map", "--output=json"], True),
        "check": lambda i, s: check_one(i, "check", []),
        "check-repair": lambda i, s: check_repair(i, work, s),
        "serve": lambda i, s: serve_one(i, corpus, work, s),
        "convert": lambda i, s: convert_one(i, work, s),
        "amend": lambda i, s: amend_one(i, work, s),
    }
    job = jobs[mode]
    failures = []
    # Each worker has a slot number for its scratch files.
    slots = list(range(WORKERS))

    def one(img):
        slot = slots.pop()
        try:
            return img, job(img, slot)
        finally:
            slots.append(slot)

    with concurrent.futures.ThreadPoolExecutor(WORKERS) as pool:
        for img, (why, err) in pool.map(one, images):
            if why:
                failures.append("%s: %s\n%s" % (os.path.basename(img), why, excerpt(err)))
    if not images:
        failures.append("no images in %s\n" % corpus)
    return failures


def check_repair(img, work, slot):
    copy = os.path.join(work, "repair-%d.qcow2" % slot)
    shutil.copyfile(img, copy)
    why, err = check_one(copy, "check -r all (%s)" % os.path.basename(img),
                         ["-f", "qcow2", "-r", "all"])
    os.unlink(copy)
    return why, err


def convert_one(img, work, slot):
    out = os.path.join(work, "converted-%d.raw" % slot)
    r = run([DISKIMG, "convert", "-O", "raw", img, out])
    if os.path.exists(out):
        os.unlink(out)
    why = crashed("convert", r)
    if why is None and r.status != 0:
        why = not_one_line_error("convert", r)
    return why, r.err


def amend_one(img, work, slot):
    """The refcount rewrite, then the downgrade, on a copy: each may refuse
    the image, in one line, but never crash."""
    copy = os.path.join(work, "amend-%d.qcow2" % slot)
    shutil.copyfile(img, copy)
    why, err = None, b""
    for opts in ("refcount_bits=64", "compat=0.10,refcount_bits=16"):
        r = run([DISKIMG, "amend", "--untrusted", "-f", "qcow2", "-o", opts, copy])
        why, err = crashed("amend -o " + opts, r), r.err
        if why is None and r.status != 0:
            why = not_one_line_error("amend -o " + opts, r)
        if why:
            break
    os.unlink(copy)
    return why, err


if __name__ == "__main__":
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    mode, corpus, work = sys.argv[1:]
    if not ASAN_BUILD:
        # A soft limit every diskimg inherits: a huge allocation fails
        # instead of swapping (ASan reserves terabytes, so it gets none).
        # qemu-io raises it again.
        hard = resource.getrlimit(resource.RLIMIT_AS)[1]
        soft = 1 << 30 if hard == resource.RLIM_INFINITY else min(1 << 30, hard)
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
    elif mode not in LEAK_CHECKED_MODES:
        # LeakSanitizer's scan at exit doubles the cost of each of the
        # thousands of runs; the walks that open, check and repair every
        # image keep it, the others look for memory errors only.
        asan = [o for o in os.environ.get("ASAN_OPTIONS", "").split(":") if o]
        os.environ["ASAN_OPTIONS"] = ":".join(asan + ["detect_leaks=0"])
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    found = walk(mode, corpus, work)
    if found:
        print("corpus: %s (regenerate with tests/fuzz/make-hostile-corpus.py DIR)" % corpus)
        sys.stdout.write("".join(found))
        sys.exit(1)

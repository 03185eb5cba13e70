#!/usr/bin/python3
"""nbd-fua-client.py - durable-write load for an NBD server (libnbd).

fio's nbd engine never sets NBD_CMD_FLAG_FUA, so this client produces the two
durable-write patterns a guest generates:

  fua     4k random writes with NBD_CMD_FLAG_FUA, QD commands kept in flight
          (each completion immediately frees a slot for the next write)
  wflush  write, wait, NBD_CMD_FLUSH, wait, repeat (queue depth 1);
          one op = one write+flush pair, its latency covers both
  write   plain 4k random writes at QD (no FUA, no flush), for comparison
  read    reads at QD (also from read-only exports)

--pattern seq walks the export in --bs steps instead of random offsets
(with --bs 1048576: sequential 1 MiB I/O, e.g. for TLS throughput).  URIs
may name local credential files (nbds+unix:///?socket=S&tls-certificates=D).

It runs for --seconds (default 10) or for --count ops, whichever is given,
and prints ONE line of JSON on stdout, e.g.

  {"mode": "fua", "qd": 16, "bs": 4096, "ops": 81234, "seconds": 10.001,
   "iops": 8122.6, "p50_us": 1801.2, "p99_us": 4410.0, "errors": 0, ...}

Exit status: 0 ok; 1 connection or I/O error (JSON has "error" or
"errors" > 0); 2 bad usage, or the server does not advertise FUA / FLUSH
(JSON has "unsupported").

Needs Debian's python3-libnbd, i.e. run it with /usr/bin/python3.

Examples:
  /usr/bin/python3 nbd-fua-client.py --uri 'nbd+unix:///?socket=/tmp/s' --qd 16
  /usr/bin/python3 nbd-fua-client.py --uri ... --mode wflush --count 5000
"""
import argparse
import json
import os
import random
import resource
import sys
import time

try:
    import nbd
except ImportError:
    print(json.dumps({"error": "python module 'nbd' not found; run with "
                      "/usr/bin/python3 (package python3-libnbd)"}))
    sys.exit(1)

NOFFSETS = 1 << 16        # precomputed random offsets, reused cyclically


def emit(obj, rc):
    print(json.dumps(obj), flush=True)
    return rc


def percentile(sorted_ns, p):
    """Nearest-rank percentile of a sorted list of nanoseconds, in us."""
    if not sorted_ns:
        return 0.0
    k = max(0, min(len(sorted_ns) - 1, -(-len(sorted_ns) * p // 100) - 1))
    return round(sorted_ns[int(k)] / 1000.0, 1)


class Runner:
    def __init__(self, h, args, nblocks):
        self.h = h
        self.a = args
        rng = random.Random(args.seed)
        if args.pattern == "seq":
            self.offs = [(i % nblocks) * args.bs for i in range(min(NOFFSETS, nblocks))]
        else:
            self.offs = [rng.randrange(nblocks) * args.bs for _ in range(NOFFSETS)]
        self.next_off = 0
        # One shared source buffer: the server only reads from it.  Random,
        # non-zero content so no zero detection can shortcut the write.
        self.buf = nbd.Buffer.from_bytearray(bytearray(os.urandom(args.bs)))
        self.lat = []          # per-op latency in ns
        self.inflight = 0
        self.errors = 0
        self.first_errno = 0
        self.flushes = 0

    def offset(self):
        o = self.offs[self.next_off]
        self.next_off = (self.next_off + 1) % len(self.offs)
        return o

    def _done(self, t_submit):
        """Build a completion callback for a command submitted at t_submit.
        Returning 1 retires the command inside libnbd."""
        def cb(err):
            self.inflight -= 1
            if err.value:
                self.errors += 1
                self.first_errno = self.first_errno or err.value
            else:
                self.lat.append(time.perf_counter_ns() - t_submit)
            return 1
        return cb

    def _wait_all(self):
        while self.inflight:
            self.h.poll(-1)

    def run_queue(self, flags, deadline, count):
        """Keep a.qd writes (or reads) in flight until deadline / count
        submissions."""
        qd, h, buf = self.a.qd, self.h, self.buf
        now = time.perf_counter_ns
        submitted = 0
        reading = self.a.mode == "read"
        # Reads land in a buffer per slot; their content is not looked at.
        rbufs = [nbd.Buffer(self.a.bs) for _ in range(qd)] if reading else None
        while True:
            t = now()
            if t >= deadline or (count and submitted >= count):
                break
            while self.inflight < qd and not (count and submitted >= count):
                t = now()
                if reading:
                    h.aio_pread(rbufs[submitted % qd], self.offset(),
                                completion=self._done(t))
                else:
                    h.aio_pwrite(buf, self.offset(), completion=self._done(t),
                                 flags=flags)
                self.inflight += 1
                submitted += 1
            h.poll(-1)
        self._wait_all()

    def run_wflush(self, deadline, count):
        """qd1: write, wait, FLUSH, wait.  Latency covers the pair."""
        h, buf = self.h, self.buf
        now = time.perf_counter_ns
        state = {"err": 0}

        def cb(err):
            self.inflight -= 1
            if err.value and not state["err"]:
                state["err"] = err.value
            return 1

        done = 0
        while now() < deadline and not (count and done >= count):
            t = now()
            state["err"] = 0
            h.aio_pwrite(buf, self.offset(), completion=cb)
            self.inflight += 1
            self._wait_all()
            h.aio_flush(completion=cb)
            self.inflight += 1
            self._wait_all()
            self.flushes += 1
            done += 1
            if state["err"]:
                self.errors += 1
                self.first_errno = self.first_errno or state["err"]
            else:
                self.lat.append(now() - t)


def main():
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog=__doc__.split("\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--uri", required=True, help="NBD URI, e.g. nbd+unix:///?socket=PATH")
    p.add_argument("--mode", choices=["fua", "wflush", "write", "read"], default="fua")
    p.add_argument("--pattern", choices=["rand", "seq"], default="rand",
                   help="random (default) or sequential offsets")
    p.add_argument("--qd", type=int, default=1, help="commands in flight (wflush: must be 1)")
    p.add_argument("--bs", type=int, default=4096, help="write size in bytes (default 4096)")
    p.add_argument("--seconds", type=float, default=None,
                   help="run time (default 10 unless --count is given)")
    p.add_argument("--count", type=int, default=0, help="stop after this many ops")
    p.add_argument("--span", type=int, default=0,
                   help="address only the first SPAN bytes (default: whole export)")
    p.add_argument("--seed", type=int, default=1, help="random offset seed")
    a = p.parse_args()

    if a.qd < 1 or a.bs < 512 or a.count < 0:
        return emit({"error": "bad --qd/--bs/--count"}, 2)
    if a.mode == "wflush" and a.qd != 1:
        return emit({"error": "--mode wflush runs at --qd 1 only"}, 2)
    if a.seconds is None:
        a.seconds = 0 if a.count else 10.0
    if a.seconds <= 0 and not a.count:
        return emit({"error": "need --seconds > 0 or --count > 0"}, 2)

    h = nbd.NBD()
    h.set_handle_name("nbd-fua-client")
    h.set_uri_allow_local_file(True)  # nbds:// URIs name their credentials
    try:
        h.connect_uri(a.uri)
    except nbd.Error as e:
        return emit({"error": "connect %s: %s" % (a.uri, e.string)}, 1)

    if h.is_read_only() and a.mode != "read":
        return emit({"unsupported": "export is read-only", "mode": a.mode}, 2)
    if a.mode == "fua" and not h.can_fua():
        return emit({"unsupported": "server does not advertise FUA", "mode": a.mode}, 2)
    if a.mode == "wflush" and not h.can_flush():
        return emit({"unsupported": "server does not advertise FLUSH", "mode": a.mode}, 2)
    size = h.get_size()
    span = min(a.span, size) if a.span else size
    nblocks = span // a.bs
    if nblocks < 1:
        return emit({"error": "export (%d bytes) smaller than --bs" % size}, 2)

    r = Runner(h, a, nblocks)
    ru0 = resource.getrusage(resource.RUSAGE_SELF)
    t0 = time.perf_counter_ns()
    # A pure --count run still gets a (far) deadline so it cannot spin forever.
    limit_s = a.seconds if a.seconds > 0 else 1e7
    deadline = t0 + int(limit_s * 1e9)
    try:
        if a.mode == "wflush":
            r.run_wflush(deadline, a.count)
        else:
            flags = nbd.CMD_FLAG_FUA if a.mode == "fua" else 0
            r.run_queue(flags, deadline, a.count)
    except nbd.Error as e:
        return emit({"error": "%s after %d ops: %s" % (a.mode, len(r.lat), e.string),
                     "ops": len(r.lat)}, 1)
    t1 = time.perf_counter_ns()
    ru1 = resource.getrusage(resource.RUSAGE_SELF)
    try:
        h.shutdown()
    except nbd.Error:
        pass

    secs = (t1 - t0) / 1e9
    cpu = (ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime)
    lat = sorted(r.lat)
    ops = len(lat)
    out = {
        "mode": a.mode, "qd": a.qd, "bs": a.bs,
        "ops": ops, "seconds": round(secs, 3),
        "iops": round(ops / secs, 1) if secs > 0 else 0.0,
        "p50_us": percentile(lat, 50), "p99_us": percentile(lat, 99),
        "mean_us": round(sum(lat) / ops / 1000.0, 1) if ops else 0.0,
        "max_us": round(lat[-1] / 1000.0, 1) if ops else 0.0,
        "flushes": r.flushes, "errors": r.errors,
        "client_cpu_pct": round(100.0 * cpu / secs, 1) if secs > 0 else 0.0,
    }
    if r.errors:
        out["first_errno"] = r.first_errno
        return emit(out, 1)
    return emit(out, 0)


if __name__ == "__main__":
    sys.exit(main())

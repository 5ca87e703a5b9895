#!/usr/bin/env python3
"""bench/many_conns.py - thousands of ranks at once: N keep-alive HTTP
connections, each posting one training step (one line-protocol record of M
metrics for its rank) per interval, for a duration; reports the ack latency
(request sent -> whole response read) p50/p99/max of every step after the
first, and of the first step apart (it creates the rank's series), acks/s,
errors and the
server's CPU (from /proc/PID/stat) over the run.

    bench/many_conns.py --port P --pid PID --connections 4096 --duration-s 30
                        [--interval-s 1] [--metrics 32] [--path /write?precision=ns]
                        [--procs 3] [--out FILE.kv] [--timeline FILE]

One event loop (selectors, non-blocking sockets, a heap of due times) per
process; --procs
spreads the connections over that many processes so the client is not the
bottleneck. Rank r's first step is at r/N of the interval (the ranks of a
real job finish a step at about the same time; spreading them over the
interval is the gentler, steadier case - see docs/BENCHMARKS.md). A request
that is not answered is an error; a connection the server closes is
reopened (counted). Prints key=value lines (and writes them to --out).
--timeline writes one line per ack (send time in Unix seconds, step,
latency in ms) to line slow acks up with the server's log. Traffic:
127.0.0.1 only.
"""
import argparse
import heapq
import multiprocessing
import os
import selectors
import socket
import sys
import time

T0_NS = 1_700_000_000_000_000_000


def body(job, rank, step, metrics):
    fields = ",".join("m%d=%d.%d" % (i, step, (rank * 31 + i) % 1000) for i in range(metrics))
    return ("train,job=%s,rank=%d %s,step=%di %d\n" % (job, rank, fields, step,
                                                       T0_NS + step * 1_000_000_000 + rank)).encode()


class Conn:
    __slots__ = ("rank", "sock", "step", "due", "sent_at", "buf", "out", "state")

    def __init__(self, rank):
        self.rank = rank
        self.sock = None
        self.step = 0
        self.due = 0.0
        self.sent_at = 0.0
        self.buf = b""
        self.out = b""
        self.state = "idle"  # idle, sending, reading


def response_done(buf):
    """Length of one whole HTTP response at the start of buf, or 0."""
    end = buf.find(b"\r\n\r\n")
    if end < 0:
        return 0
    head = buf[:end].decode("latin-1").lower()
    n = 0
    for line in head.split("\r\n")[1:]:
        if line.startswith("content-length:"):
            n = int(line.split(":", 1)[1])
    if len(buf) < end + 4 + n:
        return 0
    return end + 4 + n


def status_of(buf):
    try:
        return int(buf.split(b" ", 2)[1])
    except (IndexError, ValueError):
        return 0


def worker(args, ranks, q):
    sel = selectors.DefaultSelector()
    host = "127.0.0.1"
    conns = [Conn(r) for r in ranks]
    lat = []
    errors = reconnects = acks = non2xx = 0
    mono0, wall0 = time.monotonic(), time.time()  # to print when slow acks were sent
    start = time.monotonic() + 1.0  # time to connect everyone
    for c in conns:
        c.sock = socket.create_connection((host, args.port))
        c.sock.setblocking(False)
        c.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        c.due = start + args.interval_s * c.rank / args.connections
        sel.register(c.sock, selectors.EVENT_READ, c)
    end = start + args.duration_s
    path = args.path.encode()
    due = [(c.due, c.rank, c) for c in conns]  # idle connections by due time
    heapq.heapify(due)
    busy = 0  # connections with a request out
    while True:
        now = time.monotonic()
        if now >= end and busy == 0:
            break
        if now >= end + 30:
            errors += busy
            break
        while due and due[0][0] <= now:
            c = heapq.heappop(due)[2]
            if now < end:
                b = body(args.job, c.rank, c.step, args.metrics)
                c.out = (b"POST " + path + b" HTTP/1.1\r\nHost: x\r\nContent-Type: text/plain\r\n"
                         b"Content-Length: " + str(len(b)).encode() + b"\r\n\r\n" + b)
                c.sent_at = now
                c.state = "sending"
                busy += 1
                try:
                    n = c.sock.send(c.out)
                    c.out = c.out[n:]
                except BlockingIOError:
                    pass
                except OSError:
                    c.out = b""  # the read side sees the close: counted there
                if c.state == "sending" and not c.out:
                    c.state = "reading"
                elif c.state == "sending":
                    sel.modify(c.sock, selectors.EVENT_READ | selectors.EVENT_WRITE, c)
        timeout = max(0.0, min(0.005, due[0][0] - time.monotonic())) if due else 0.005
        for key, ev in sel.select(timeout):
            c = key.data
            if ev & selectors.EVENT_WRITE and c.state == "sending":
                try:
                    n = c.sock.send(c.out)
                    c.out = c.out[n:]
                except OSError:
                    c.out = b""  # the read side sees the close: counted there
                if c.state == "sending" and not c.out:
                    c.state = "reading"
                    sel.modify(c.sock, selectors.EVENT_READ, c)
            if ev & selectors.EVENT_READ:
                try:
                    data = c.sock.recv(65536)
                except BlockingIOError:
                    continue
                except OSError:
                    data = b""
                if not data:
                    if c.state != "idle":
                        errors += 1
                        busy -= 1
                    c.state = "reconnect"
                else:
                    c.buf += data
                    n = response_done(c.buf)
                    if n and c.state == "reading":
                        t = time.monotonic()
                        st = status_of(c.buf)
                        c.buf = c.buf[n:]
                        if 200 <= st < 300:
                            acks += 1
                            lat.append((c.step, t - c.sent_at, c.sent_at - mono0 + wall0))
                            c.step += 1
                        else:
                            non2xx += 1
                        c.state = "idle"
                        busy -= 1
                        c.due += args.interval_s
                        while c.due < t - args.interval_s:  # far behind: skip, do not burst
                            c.due += args.interval_s
                        heapq.heappush(due, (c.due, c.rank, c))
            if c.state == "reconnect":
                try:
                    sel.unregister(c.sock)
                except (KeyError, ValueError):
                    pass
                c.sock.close()
                c.buf = b""
                reconnects += 1
                c.sock = socket.create_connection((host, args.port))
                c.sock.setblocking(False)
                sel.register(c.sock, selectors.EVENT_READ, c)
                c.state = "idle"
                c.due = time.monotonic() + args.interval_s
                heapq.heappush(due, (c.due, c.rank, c))
    for c in conns:
        c.sock.close()
    q.put((lat, errors, reconnects, acks, non2xx))


def cpu_s(pid):
    with open("/proc/%d/stat" % pid) as f:
        parts = f.read().rsplit(")", 1)[1].split()
    return (int(parts[11]) + int(parts[12])) / os.sysconf("SC_CLK_TCK")


def runq_wait_s(pid):
    """Seconds the server's threads have spent runnable but waiting for a
    CPU (schedstat), summed over its threads; None when not readable."""
    total = 0
    try:
        for tid in os.listdir("/proc/%d/task" % pid):
            try:
                with open("/proc/%d/task/%s/schedstat" % (pid, tid)) as f:
                    total += int(f.read().split()[1])
            except (OSError, IndexError, ValueError):
                pass  # a thread that ended meanwhile
    except OSError:
        return None
    return total / 1e9


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--pid", type=int, default=0, help="server PID, for its CPU time")
    ap.add_argument("--connections", type=int, default=1024)
    ap.add_argument("--duration-s", type=float, default=30)
    ap.add_argument("--interval-s", type=float, default=1.0)
    ap.add_argument("--metrics", type=int, default=32)
    ap.add_argument("--job", default="many-1")
    ap.add_argument("--path", default="/write?precision=ns")
    ap.add_argument("--procs", type=int, default=3)
    ap.add_argument("--out")
    ap.add_argument("--timeline", help="write 'sent_unix_s step latency_ms' per ack to this file")
    args = ap.parse_args()
    procs = max(1, min(args.procs, args.connections))
    q = multiprocessing.Queue()
    ps = []
    for i in range(procs):
        ranks = list(range(i, args.connections, procs))
        p = multiprocessing.Process(target=worker, args=(args, ranks, q))
        p.start()
        ps.append(p)
    cpu0 = cpu_s(args.pid) if args.pid else 0.0
    wait0 = runq_wait_s(args.pid) if args.pid else None
    t0 = time.monotonic()
    res = [q.get() for _ in ps]
    wall = time.monotonic() - t0
    cpu1 = cpu_s(args.pid) if args.pid else 0.0
    wait1 = runq_wait_s(args.pid) if args.pid else None
    for p in ps:
        p.join()
    first = sorted(x for r in res for st, x, _ in r[0] if st == 0)
    lat = sorted(x for r in res for st, x, _ in r[0] if st > 0)
    if args.timeline:
        with open(args.timeline, "w") as f:
            for r in res:
                for st, x, sent in r[0]:
                    f.write("%.6f %d %.3f\n" % (sent, st, x * 1000))
    errors = sum(r[1] for r in res)
    reconnects = sum(r[2] for r in res)
    acks = sum(r[3] for r in res)
    non2xx = sum(r[4] for r in res)

    def pct(p, v=None):
        v = lat if v is None else v
        return v[min(len(v) - 1, int(p * len(v)))] * 1000 if v else float("nan")

    out = {
        "connections": args.connections,
        "duration_s": "%.1f" % args.duration_s,
        "acks": acks,
        "acks_per_s": "%.1f" % (acks / args.duration_s),
        "expected_per_s": "%.1f" % (args.connections / args.interval_s),
        "p50_ms": "%.2f" % pct(0.50),
        "p99_ms": "%.2f" % pct(0.99),
        "max_ms": "%.2f" % (lat[-1] * 1000 if lat else float("nan")),
        "first_step_p50_ms": "%.2f" % pct(0.50, first),
        "first_step_p99_ms": "%.2f" % pct(0.99, first),
        "errors": errors,
        "non2xx": non2xx,
        "reconnects": reconnects,
        "server_cpu_s": "%.2f" % (cpu1 - cpu0),
        "server_cpu_pct": "%.1f" % (100 * (cpu1 - cpu0) / wall) if args.pid else "",
        "server_cpu_us_per_ack": "%.1f" % (1e6 * (cpu1 - cpu0) / acks) if acks and args.pid else "",
        # time the server's threads were runnable but not running: on a shared
        # machine the ack tail follows it (docs/BENCHMARKS.md, issue 14)
        "server_runq_wait_s": "%.2f" % (wait1 - wait0) if wait0 is not None and wait1 is not None else "",
    }
    text = "".join("%s=%s\n" % kv for kv in out.items())
    sys.stdout.write(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
    return 0 if errors == 0 else 1


if __name__ == "__main__":
    sys.exit(main())

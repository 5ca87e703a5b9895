"""Disk full (docs/BENCHMARKS.md, Reliability): rankdbd on a small tmpfs
(mounted by the caller, e.g. `mount -t tmpfs -o size=48m tmpfs DIR`), a
filler file leaving FREE_MB, 6 writer threads until writes have been refused
for a while, then SIGTERM (its exit status is reported), the filler removed,
a restart, and the exactly-once check of tests/integration/test_durability.py
(every acknowledged point once with its bits, refused ones all or nothing,
no duplicates).

    python3 bench/disk_full.py --dir /mnt/small [--bin ...] [--free-mb 8] [--rounds 3]
"""

import argparse
import os
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests", "integration"))

import harness  # noqa: E402
import test_durability as td  # noqa: E402


def fill(path, free_mb):
    st = os.statvfs(os.path.dirname(path))
    n = st.f_bavail * st.f_frsize - free_mb * (1 << 20)
    with open(path, "wb") as f:
        while n > 0:
            k = min(n, 1 << 20)
            f.write(b"\0" * k)
            n -= k


def round_(s, filler, free_mb, first):
    fill(filler, free_mb)
    stop = threading.Event()
    ws = [td._Writer(s, t, first, stop) for t in range(td.NTHREADS)]
    for w in ws:
        w.start()
    t0 = time.monotonic()
    refused_since = None
    while time.monotonic() - t0 < 120:
        time.sleep(0.2)
        refused = sum(1 for w in ws for b, st, _ in w.unexpected if st >= 500)
        if refused and refused_since is None:
            refused_since = time.monotonic()
        if refused_since and time.monotonic() - refused_since > 5:
            break
    st, _, _ = s.get("/healthz", timeout=10)
    stop.set()
    for w in ws:
        w.join(60)
    bad = [(b, st) for w in ws for b, st, _ in w.unexpected if st < 500]
    assert not bad, bad[:5]
    # 5xx answers are not acknowledgements: treat them like in-flight batches
    for w in ws:
        w.unexpected = []
    rc = s.signal_stop(expect_rc=None)
    os.unlink(filler)
    acked = sum(len(w.acked) for w in ws)
    refused = sum(1 for w in ws for b in w.sent if b not in w.acked and b not in w.rejected)
    return ws, acked, refused, st, rc


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", required=True, help="a small mounted file system")
    ap.add_argument("--bin", default=os.path.join(os.path.dirname(HERE), "build", "server", "rankdbd"))
    ap.add_argument("--free-mb", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    harness.set_bin(a.bin)
    harness.begin_test("disk_full")
    ok = False
    try:
        data = os.path.join(a.dir, "data")
        s = harness.Server(td.BIG + ["--checkpoint-interval-s", "1", "--chunk-max-points", "256"],
                           data_dir=data).start()
        rounds, first = [], 0
        for i in range(a.rounds):
            ws, acked, refused, health, rc = round_(s, os.path.join(a.dir, "filler"), a.free_mb, first)
            rounds.append(ws)
            first = max(max(w.sent) for w in ws) + 1
            s.start()
            td._verify(s, rounds)
            print("disk_full round %d: %d batches acknowledged, %d refused or in flight; /healthz %d "
                  "while full; SIGTERM exit status %d; after freeing space and restarting: every "
                  "acknowledged point exactly once" % (i + 1, acked, refused, health, rc))
        s.stop()
        ok = True
    finally:
        harness.end_test(ok)


if __name__ == "__main__":
    main()

"""kill -9 cycles under concurrent writers (the reliability figures of
docs/BENCHMARKS.md): N rounds of 6 writer threads (keep-alive HTTP, batches
of 1..4 records x 2 metrics, every 9th batch with a bad record) against one
data directory, checkpoints every second and small chunks so that seals,
checkpoints and WAL rotation are in flight when rankdbd is killed; after
each restart every acknowledged point must be there exactly once with its
bits, nothing of a rejected batch, in-flight batches all or nothing.

    python3 bench/kill9_cycles.py [--bin build/server/rankdbd] [--cycles 20]

Reuses the integration suite's harness and checks (tests/integration)."""

import argparse
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests", "integration"))

import harness  # noqa: E402
import test_durability as td  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=os.path.join(os.path.dirname(HERE), "build", "server", "rankdbd"))
    ap.add_argument("--cycles", type=int, default=20)
    a = ap.parse_args()
    harness.set_bin(a.bin)
    harness.begin_test("kill9_cycles")
    ok = False
    try:
        s = harness.Server(td.BIG + ["--checkpoint-interval-s", "1", "--chunk-max-points", "64"]).start()
        rounds, first, t0 = [], 0, time.monotonic()
        for i in range(a.cycles):
            ws = td._crash_round(s, first_batch=first, min_acked=200, write_s=3.0)
            rounds.append(ws)
            first = max(max(w.sent) for w in ws) + 1
            s.start()
            td._verify(s, rounds)  # raises on a lost, duplicated or wrong point
        acked_pts = sum(2 * len(td._batch(w.t, b)[0]) for ws in rounds for w in ws for b in w.acked)
        print("kill9_cycles: %d cycles in %.0f s, %d acknowledged points (6 writers): 0 lost, "
              "0 duplicated, 0 wrong bits" % (a.cycles, time.monotonic() - t0, acked_pts))
        s.stop()
        ok = True
    finally:
        harness.end_test(ok)


if __name__ == "__main__":
    main()

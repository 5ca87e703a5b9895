"""The proof on a real job: PyTorch DDP on CPU (gloo, 4 processes through
torch.multiprocessing) instrumented with the rankdb client
(clients/python/examples/ddp_train.py), against the real rankdbd.

1. One rank is slow in its forward pass: the outliers query names that
   rank and the forward phase; cross-rank loss, logs and spans exist for
   every rank; every step of every rank is stored exactly once.
2. rankdbd is killed (-9) and restarted in the middle of training: the
   training goes on, and afterwards every step arrives exactly once.
"""

import collections
import json
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
import harness  # noqa: E402

EXAMPLE = os.path.join(common.PYCLIENT, "examples", "ddp_train.py")
RANKS = 4
PHASES = ("dataloader", "forward", "backward", "optimizer")


def start_training(srv, job, steps, extra=()):
    env = common.client_env(RANKDB_SPOOL_DIR=harness.ctx().mkdir("spool"), OMP_NUM_THREADS=1)
    stats_dir = harness.ctx().mkdir("stats")
    argv = [common.torch_python(), EXAMPLE, "--procs", str(RANKS), "--url",
            "http://127.0.0.1:%d" % srv.port, "--job", job, "--steps", str(steps),
            "--stats-dir", stats_dir, "--log-every", "5"] + list(extra)
    out = open(os.path.join(harness.ctx().dir, "%s.out" % job), "w+")
    proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=harness.ctx().dir)
    proc.stats_dir = stats_dir
    return proc, out


def finish_training(proc, out, timeout=150):
    try:
        rc = proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        rc = "timeout"
    out.seek(0)
    text = out.read()
    assert rc == 0, "training exited with %s:\n%s" % (rc, text[-4000:])
    stats = {}
    for r in range(RANKS):
        with open(os.path.join(proc.stats_dir, "rank%d.json" % r)) as f:
            stats[r] = json.load(f)
    return text, stats


def assert_every_step_once(srv, job, steps, metrics=("step_time", "loss", "step_time.forward")):
    obj = srv.query_ok(job=job, metric=list(metrics))
    seen = {(s["rank"], s["metric"]): s for s in obj["series"]}
    for r in range(RANKS):
        for m in metrics:
            s = seen.get((r, m))
            assert s is not None, "rank %d has no %s" % (r, m)
            c = collections.Counter(s["steps"])
            missing = [x for x in range(steps) if c[x] == 0]
            dups = {x: n for x, n in c.items() if n > 1}
            assert not missing and not dups and len(c) == steps, \
                "rank %d %s: missing steps %r, duplicated %r" % (r, m, missing[:10], dups)
    # the phase timeline: each phase once per rank and step
    st, obj = srv.get_json("/api/v1/spans?job=%s&step_from=0&step_to=%d" % (job, steps - 1))
    assert st == 200, obj
    per = collections.Counter()
    for stp in obj["steps"]:
        for rk in stp["ranks"]:
            for sp in rk["spans"]:
                per[(rk["rank"], stp["step"], sp["name"])] += 1
    for r in range(RANKS):
        for x in range(steps):
            for p in PHASES:
                assert per[(r, x, p)] == 1, "span %s of rank %d step %d stored %d times" % (p, r, x, per[(r, x, p)])


def assert_clean_stats(stats):
    for r, s in stats.items():
        lost = s["dropped_queue_full"] + s["spool_dropped_records"] + s["lost_records"] + \
            s["records_refused"] + s["dropped_invalid_values"]
        assert lost == 0 and s["spool_batches"] == 0, "rank %d lost records: %r" % (r, s)


def test_ddp_straggler_named_and_every_step_once():
    srv = harness.Server().start()
    job, steps, slow = "ddp-straggler", 120, 2
    proc, out = start_training(srv, job, steps, ["--slow-rank", str(slow), "--slow-ms", "40"])
    text, stats = finish_training(proc, out)
    assert "rankdb: everything delivered" in text, text[-2000:]
    assert_clean_stats(stats)

    # the straggler: own work (step time minus collective and data-loader
    # waits, vocabulary names) puts rank `slow` first ...
    st, o = srv.get_json("/api/v1/query/outliers?job=%s&metric=step_time&mode=phases"
                         "&wait_phases=collective,dataloader&direction=high&limit=%d" % (job, RANKS))
    assert st == 200, o
    assert o["ranks_scored"] == RANKS, o
    top = o["outliers"][0]
    assert top["rank"] == slow and top["score"] > 3, o
    # ... and its slow phase is forward: the phase farthest above the other ranks
    others = [e for e in o["outliers"] if e["rank"] != slow]
    excess = {p: top["phases"][p] - statistics.median(e["phases"][p] for e in others)
              for p in ("forward", "backward", "optimizer")}
    assert max(excess, key=excess.get) == "forward", excess
    # the peers wait for it in all-reduce: measured as step_time.collective
    assert all(e["phases"]["collective"] > top["phases"]["collective"] for e in others), o

    # ... and the built-in Straggler detector raised it while training ran,
    # naming the rank and the phase (firing, or resolved once the run ended)
    deadline = time.monotonic() + 30
    while True:
        st, al = srv.get_json("/api/v1/alerts?job=%s&alertname=Straggler" % job)
        assert st == 200, al
        if al["alerts"] or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert [(a["rank"], a["phase"]) for a in al["alerts"]] == [(slow, "forward")], al
    st, al = srv.get_json("/api/v1/alerts?job=%s" % job)
    assert {a["alertname"] for a in al["alerts"]} <= {"Straggler", "JobDown"}, al

    # cross-rank loss: every step has all ranks
    st, cr = srv.get_json("/api/v1/query/crossrank?job=%s&metric=loss&agg=count" % job)
    assert st == 200, cr
    assert cr["ranks"] == list(range(RANKS)) and cr["start"] == list(range(steps)), cr
    assert cr["count"] == [RANKS] * steps, cr
    # logs of every rank, tagged with steps
    for r in range(RANKS):
        st, lg = srv.get_json("/api/v1/logs?job=%s&rank=%d&limit=1000" % (job, r))
        assert st == 200, lg
        msgs = [x["message"] for x in lg["logs"]]
        assert "training done after %d steps" % steps in msgs, msgs[:5]
        assert any(x["step"] == 5 and x["message"].startswith("step 5 loss") for x in lg["logs"]), msgs
        assert any(m.startswith("rankdb: rank %d of %d" % (r, RANKS)) for m in msgs), msgs
    assert_every_step_once(srv, job, steps)
    # world size and config hash from every rank, and the job metadata
    obj = srv.query_ok(job=job, metric=["world_size", "config_hash"])
    vals = collections.defaultdict(set)
    for s in obj["series"]:
        vals[s["metric"]].update(s["values"])
        assert len(s["values"]) == 1
    assert vals["world_size"] == {RANKS} and len(vals["config_hash"]) == 1, vals
    st, meta = srv.get_json("/api/v1/jobs/%s/meta" % job)
    assert st == 200 and meta["status"] == "finished" and meta["world_size"] == RANKS, meta
    assert meta["global_batch"] == 32 * RANKS and meta["config"]["steps"] == steps, meta
    srv.stop()


def test_ddp_survives_rankdbd_kill9_and_restart():
    srv = harness.Server().start().keep_port()
    job, steps = "ddp-restart", 200
    proc, out = start_training(srv, job, steps, ["--base-ms", "15"])

    def max_step():
        st, obj = srv.query(job=job, metric="step_time", rank=0)
        if st != 200 or not obj["series"]:
            return -1
        return max(obj["series"][0]["steps"])

    harness.wait_until(lambda: max_step() >= 20 or proc.poll() is not None, timeout=90,
                       what="training to reach step 20")
    assert proc.poll() is None, "training ended before the server was killed"
    killed_at = max_step()
    srv.kill9()
    time.sleep(1.5)  # the server is gone; training goes on
    assert proc.poll() is None, "training stopped while the server was down"
    srv.start()
    text, stats = finish_training(proc, out)
    assert_clean_stats(stats)
    assert all(s["retries"] > 0 for s in stats.values()), stats  # every rank saw the outage
    assert_every_step_once(srv, job, steps)
    obj = srv.query_ok(job=job, metric="step_time")
    for s in obj["series"]:
        assert set(s["attempts"]) == {0}
        times = list(zip(s["steps"], s["values"]))
        before = [v for x, v in times if x < killed_at]
        after = [v for x, v in times if x > killed_at + 60]
        print("rank %d median step_time: before the kill %.4f s, after the restart %.4f s"
              % (s["rank"], statistics.median(before), statistics.median(after)))
    srv.stop()


TORCH_HELPERS = r"""
import torch, rankdb, rankdb.torch as rt
m = torch.nn.Linear(8, 3)
m(torch.randn(4, 8)).pow(2).sum().backward()
g = rt.grad_norm(m)
assert g.dim() == 0
want = float(torch.nn.utils.clip_grad_norm_(m.parameters(), 1e9))
assert abs(float(g) - want) <= 1e-5 * want, (float(g), want)
assert rt.grad_norm([torch.nn.Parameter(torch.ones(2))]) is None
ids = torch.tensor([[5, 6, 0, 0], [7, 0, 0, 0]])
assert rt.count_tokens(ids) == 8 and rt.count_tokens(ids, pad_id=0) == 3
class FakeScaler:  # GradScaler's interface; a real one needs CUDA
    def __init__(self): self.s = [65536.0, 65536.0, 32768.0, 32768.0, 65536.0]
    def is_enabled(self): return True
    def get_scale(self): return self.s.pop(0)
w = rt.ScalerWatch(FakeScaler())
got = [w.metrics() for _ in range(5)]
assert [x["skipped_steps"] for x in got] == [0, 0, 1, 1, 1], got
assert got[2]["loss_scale"] == 32768.0
print("ok")
"""


def test_torch_helpers():
    r = subprocess.run([common.torch_python(), "-c", TORCH_HELPERS], capture_output=True, text=True,
                       env=common.client_env(), timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stdout + r.stderr

"""The Python client against a fake server that refuses, delays, drops
connections and answers 503/429: nothing lost, nothing duplicated, log()
returns while the server is blocked, a crashed process's spool is replayed
once by the next process of the same rank. Also: environment defaults,
the encoder against the real rankdbd, NVML through a fake libnvidia-ml,
and `pip install` of the package offline."""

import collections
import logging
import os
import subprocess
import sys
import textwrap
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402,F401  (import paths)
import fakeserver  # noqa: E402
import harness  # noqa: E402
import rankdb  # noqa: E402
from rankdb import _env  # noqa: E402

FAST = dict(flush_interval_s=0.05, heartbeat_s=0, capture_logging=False, gpu=False,
            backoff_max_s=0.5, finish_timeout_s=20)


def make_client(fs_or_url, spool, rank=0, job="t1", **kw):
    url = fs_or_url.url if hasattr(fs_or_url, "url") else fs_or_url
    opts = dict(FAST)
    opts.update(kw)
    return rankdb.Client(url=url, job=job, rank=rank, world_size=1, spool_dir=spool, **opts)


def steps_of(fs, metric="loss", rank=0):
    """Counter step -> number of times it was applied (rank's metric)."""
    return collections.Counter(s for r, s, _ in fs.metric_points(metric) if r == rank)


def assert_exactly_once(fs, steps, metric="loss", rank=0):
    got = steps_of(fs, metric, rank)
    missing = [s for s in steps if got[s] == 0]
    dups = {s: n for s, n in got.items() if n > 1}
    extra = [s for s in got if s not in set(steps)]
    assert not missing and not dups and not extra, \
        "metric %s rank %d: %d missing (first %r), duplicated %r, unexpected %r" % (
            metric, rank, len(missing), missing[:5], dict(list(dups.items())[:5]), extra[:5])


def log_steps(c, steps, metrics=32):
    for s in steps:
        m = {"m%02d" % i: float(i) for i in range(1, metrics)}
        m["loss"] = 1.0 / (s + 1)
        c.log(m, step=s)


def test_roundtrip_phases_spans_logs_meta():
    fs = fakeserver.FakeServer()
    c = make_client(fs, harness.ctx().mkdir("spool"), config={"lr": 0.1}, meta={"global_batch": 8})
    for s in range(20):
        with c.phase("forward"):
            pass
        with c.phase("backward"):
            pass
        c.log({"loss": 2.0 - s / 100}, step=s)
        c.log_message("step %d done" % s, level="warning", fields={"k": s})
        c.step_done(s, tokens=1000)
    c.checkpoint(1.5)
    assert c.finish("finished") is True, c.stats()
    assert_exactly_once(fs, range(20))
    for m in ("step_time", "step_time.forward", "step_time.backward", "tokens_per_sec"):
        assert_exactly_once(fs, range(20), metric=m)
    spans = collections.Counter((r["step"], r["name"]) for r in fs.of_type("span"))
    assert spans == collections.Counter({(s, n): 1 for s in range(20) for n in ("forward", "backward")}) \
        + collections.Counter({(20, "checkpoint"): 1}), spans
    logs = [r for r in fs.of_type("log") if r["message"].startswith("step ")]
    assert sorted(r["step"] for r in logs) == list(range(20)) and logs[0]["level"] == "warn", logs[:2]
    assert fs.metric_points("checkpoint.duration") == [(0, 20, 1.5)]
    ws = fs.metric_points("world_size")
    assert ws == [(0, None, 1)], ws
    assert [x[2] for x in fs.metric_points("config_hash")] == [rankdb.config_hash({"lr": 0.1})]
    meta = fs.meta["/api/v1/jobs/t1/meta"]
    assert meta["status"] == "finished" and meta["global_batch"] == 8 and meta["world_size"] == 1, meta
    # one keep-alive connection, few requests: batching works
    assert fs.requests <= 10, fs.requests
    fs.close()


def test_503_and_429_retry_after():
    fs = fakeserver.FakeServer()
    fs.retry_after = "0.2"
    c = make_client(fs, harness.ctx().mkdir("spool"))
    fs.mode = "503"
    log_steps(c, range(0, 300))
    harness.wait_until(lambda: c.stats()["retries"] >= 2, what="retries on 503")
    fs.mode = "429"
    log_steps(c, range(300, 600))
    harness.wait_until(lambda: c.stats()["retries"] >= 4, what="retries on 429")
    fs.mode = "ok"
    log_steps(c, range(600, 900))
    assert c.flush(30), c.stats()
    assert_exactly_once(fs, range(900))
    assert c.stats()["spool_batches"] == 0
    c.finish()
    fs.close()


def test_dropped_connections_never_duplicate():
    """The server applies a batch and drops the connection before answering:
    the client resends it with the same batch id, the server recognises it."""
    fs = fakeserver.FakeServer()
    c = make_client(fs, harness.ctx().mkdir("spool"))
    fs.mode = "drop_after"
    log_steps(c, range(0, 200))
    harness.wait_until(lambda: c.stats()["retries"] >= 3, what="dropped answers")
    fs.mode = "drop_before"
    log_steps(c, range(200, 400))
    harness.wait_until(lambda: c.stats()["retries"] >= 6, what="dropped requests")
    fs.mode = "ok"
    assert c.flush(30), c.stats()
    assert_exactly_once(fs, range(400))
    assert fs.duplicates >= 1, "resent batches must reach the server as duplicates"
    c.finish()
    fs.close()


def test_delayed_answers():
    fs = fakeserver.FakeServer()
    fs.mode = "delay"
    fs.delay_s = 0.3
    c = make_client(fs, harness.ctx().mkdir("spool"), http_timeout_s=0.2)  # times out, resends
    log_steps(c, range(500))
    time.sleep(1.0)
    fs.mode = "ok"
    assert c.flush(30), c.stats()
    assert_exactly_once(fs, range(500))
    c.finish()
    fs.close()


def test_log_returns_while_server_blocked():
    """Every log() returns while the server holds every request; the records
    then all arrive once the server answers again."""
    fs = fakeserver.FakeServer()
    fs.mode = "block"
    c = make_client(fs, harness.ctx().mkdir("spool"), http_timeout_s=60)
    n = 20000
    done = threading.Event()
    worst = [0.0]

    def train():
        for s in range(n):
            t = time.perf_counter()
            c.log({"loss": float(s), "a": 1.0, "b": 2.0}, step=s)
            worst[0] = max(worst[0], time.perf_counter() - t)
        done.set()

    threading.Thread(target=train, daemon=True).start()
    assert done.wait(60), "log() loop did not finish while the server was blocked"
    assert not fs.unblock.is_set()  # the server is still blocked: log() never waited for it
    assert worst[0] < 5.0, "one log() call took %.3f s" % worst[0]  # generous: it must not wait
    assert c.stats()["dropped_queue_full"] == 0
    fs.release()
    fs.mode = "ok"
    assert c.flush(60), c.stats()
    assert_exactly_once(fs, range(n))
    c.finish()
    fs.close()


def test_outage_spool_then_replay_exactly_once():
    fs = fakeserver.FakeServer()
    spool = harness.ctx().mkdir("spool")
    c = make_client(fs, spool)
    log_steps(c, range(0, 100))
    assert c.flush(10)
    fs.stop_listening()  # connections refused
    log_steps(c, range(100, 2100))
    harness.wait_until(lambda: c.stats()["spool_batches"] > 0 and not c._q, what="batches spooled")
    files = [f for d, _, fs_ in os.walk(spool) for f in fs_ if f.endswith(".batch")]
    assert files, "the outage must put batches on disk"
    fs.listen()  # same port
    log_steps(c, range(2100, 2200))
    assert c.flush(30), c.stats()
    assert_exactly_once(fs, range(2200))
    st = c.stats()
    assert st["spool_batches"] == 0 and st["spool_dropped_records"] == 0, st
    c.finish()
    fs.close()


CRASHER = textwrap.dedent("""
    import os, sys, time
    sys.path.insert(0, %(pyclient)r)
    sys.path.insert(0, %(here)r)
    import rankdb
    c = rankdb.Client(url=%(url)r, job="crash", rank=3, world_size=4, spool_dir=%(spool)r,
                      flush_interval_s=0.05, heartbeat_s=0, capture_logging=False, gpu=False,
                      backoff_max_s=0.2)
    for s in range(%(n)d):
        c.log({"loss": float(s)}, step=s)
    ev = __import__("threading").Event()
    c._q.append(("f", ev))  # the batcher seals and hands over everything before this
    assert ev.wait(30)
    deadline = time.time() + 30
    while time.time() < deadline:
        st = c.stats()
        if not c._q and st["batches_sealed"] and st["retries"] >= 1 and c.sender.pending() == len(c.spool) \\
                and len(c.spool) > 0:
            break
        time.sleep(0.02)
    print(len(c.spool), flush=True)
    os._exit(9)  # a crash: no atexit, no finish()
""")


def _crash_run(url, spool, n):
    code = CRASHER % {"pyclient": common.PYCLIENT, "here": common.HERE, "url": url, "spool": spool, "n": n}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 9, "crasher: rc %d\n%s\n%s" % (r.returncode, r.stdout, r.stderr)
    return int(r.stdout.strip().splitlines()[-1])


def test_crashed_process_spool_replayed_by_next_process():
    fs = fakeserver.FakeServer()
    spool = harness.ctx().mkdir("spool")
    fs.stop_listening()
    spooled = _crash_run(fs.url, spool, 3000)
    assert spooled > 0
    # the server applied one more batch but its answer was lost, then the process died
    fs.listen()
    fs.mode = "drop_after"
    spooled2 = _crash_run(fs.url, spool, 3000)  # logs steps 0..2999 again in a new session
    assert spooled2 > 0
    fs.mode = "ok"
    before = len(fs.records)
    c = make_client(fs, spool, rank=3, job="crash")
    c.log({"loss": -1.0}, step=10**6)
    assert c.flush(30), c.stats()
    assert c.stats()["spool_adopted_batches"] >= spooled + spooled2 - 1, c.stats()
    # each crashed session's records arrived exactly once (2 sessions, 2 points per step)
    got = steps_of(fs, rank=3)
    bad = {s: got[s] for s in range(3000) if got[s] != 2}
    assert not bad, "steps not applied exactly once per session: %r" % dict(list(bad.items())[:5])
    assert got[10**6] == 1 and len(fs.records) > before
    assert fs.duplicates >= 1, "the batch applied before the crash must come back as a duplicate"
    c.finish()
    left = [f for d, _, fl in os.walk(spool) for f in fl if f.endswith(".batch")]
    assert not left, left
    fs.close()


def test_spool_bound_drops_oldest_and_counts():
    fs = fakeserver.FakeServer()
    fs.stop_listening()
    c = make_client(fs, harness.ctx().mkdir("spool"), spool_max_bytes=200_000, batch_max_records=200)
    n = 20000
    log_steps(c, range(n), metrics=4)
    harness.wait_until(lambda: not c._q and c.stats()["spool_dropped_records"] > 0, what="spool full")
    fs.listen()
    assert c.flush(30), c.stats()
    st = c.stats()
    got = steps_of(fs)
    assert all(v == 1 for v in got.values()), "duplicates"
    # every record is either stored once or counted as dropped (n steps, the
    # start record and the start log line)
    assert len(fs.records) + st["spool_dropped_records"] == n + 2, (len(fs.records), st)
    assert st["warnings"].get("spool-full", 0) >= 1, st
    # the oldest went, never the newest: the last batch's steps all arrived
    # and every missing step is older. (Which old batches went depends on
    # timing: the batch the sender holds in memory while the server is away
    # is retried from memory, not from the spool, and may arrive although
    # older ones were dropped.)
    missing = set(range(n)) - set(got)
    assert missing, st
    assert max(missing) < n - 200 and all(s in got for s in range(n - 200, n)), \
        (max(missing), max(got))
    c.finish()
    fs.close()


def test_spool_keeps_sealing_order_when_a_spill_overlaps_newer_batches():
    """The sender spills its memory queue (older batches) while the batcher
    already puts newer ones straight into the spool: the full spool must still
    drop the oldest, never the newest, and send and name them in sealing
    order (the race behind a flaky end of the test above: the newest steps
    went missing)."""
    from rankdb import _spool
    warned = []
    sp = _spool.Spool(harness.ctx().mkdir("spool"), "t1", 0, "s1", 1000,
                      lambda k, m: warned.append(k))
    assert sp.ok
    body = b"x" * 230  # each file ~250 bytes: four fit in 1000
    # the batcher puts 9 and 10 first, then the spill brings 1..8
    for seq in (9, 10, 1, 2, 3, 4, 5, 6, 7, 8):
        assert sp.put("b%d" % seq, body, 1, seq)
    kept = [e.seq for e in sp.entries]
    assert kept == [7, 8, 9, 10], kept
    assert sp.dropped_batches == 6 and warned.count("spool-full") == 6
    files = sorted(os.listdir(sp.session_dir))
    assert files == ["%012d.batch" % q for q in (7, 8, 9, 10)] + ["lock"], files
    # a batch older than every batch kept is itself the one dropped
    assert sp.put("b3", body, 1, 3)
    assert [e.seq for e in sp.entries] == [7, 8, 9, 10] and sp.dropped_batches == 7
    e, got = sp.oldest()
    assert e.seq == 7 and got == body


def test_queue_full_counts_what_it_drops():
    fs = fakeserver.FakeServer()
    c = make_client(fs, harness.ctx().mkdir("spool"), queue_max_records=50)
    n = 50000
    log_steps(c, range(n), metrics=2)
    assert c.flush(30), c.stats()
    st = c.stats()
    got = steps_of(fs)
    assert all(v == 1 for v in got.values())
    assert len(got) + st["dropped_queue_full"] == n, (len(got), st)
    c.finish()
    fs.close()


def test_finish_is_bounded_and_leaves_the_rest_in_the_spool():
    fs = fakeserver.FakeServer()
    spool = harness.ctx().mkdir("spool")
    fs.mode = "block"
    c = make_client(fs, spool, http_timeout_s=60, finish_timeout_s=1.0)
    log_steps(c, range(1000))
    t = time.monotonic()
    ok = c.finish()
    took = time.monotonic() - t
    assert ok is False and took < 20, (ok, took)  # generous: bounded, not exact
    fs.release()
    fs.mode = "ok"
    c2 = make_client(fs, spool)
    assert c2.flush(30), c2.stats()
    assert_exactly_once(fs, range(1000))
    c2.finish()
    fs.close()


def test_heartbeat_while_the_step_hangs():
    fs = fakeserver.FakeServer()
    c = make_client(fs, harness.ctx().mkdir("spool"), heartbeat_s=0.05)
    c.log({"loss": 1.0}, step=7)
    t0 = time.time_ns()
    time.sleep(0.6)  # the training thread "hangs" in step 7
    t1 = time.time_ns()
    assert c.flush(10)
    beats = [r for r in fs.of_type("metrics") if "heartbeat" in r["metrics"] and t0 <= r["timestamp"] <= t1]
    assert len(beats) >= 3, len(beats)
    assert all(r["step"] == 7 for r in beats)
    c.finish()
    fs.close()


def test_logging_handler_sends_rank_and_step():
    fs = fakeserver.FakeServer()
    c = make_client(fs, harness.ctx().mkdir("spool"), rank=5, capture_logging=True)
    lg = logging.getLogger("mytrainer")
    lg.setLevel(logging.INFO)
    c.step_done(41)
    lg.info("loss is %s", "fine")
    try:
        raise ValueError("boom")
    except ValueError:
        lg.exception("it broke")
    logging.getLogger("rankdb").warning("never sent: our own warnings stay local")
    assert c.flush(10)
    logs = {r["message"]: r for r in fs.of_type("log")}
    assert logs["loss is fine"]["level"] == "info" and logs["loss is fine"]["step"] == 42
    assert logs["loss is fine"]["rank"] == 5
    assert logs["it broke"]["level"] == "error" and "boom" in logs["it broke"]["fields"]["exception"]
    assert not any("never sent" in m for m in logs)
    c.finish()
    fs.close()


def test_environment_defaults():
    s = _env.settings_from_env({"RANK": "3", "WORLD_SIZE": "8", "LOCAL_RANK": "1",
                                "TORCHELASTIC_RUN_ID": "abc", "TORCHELASTIC_RESTART_COUNT": "2",
                                "RANKDB_URL": "http://h:1"})
    assert (s["rank"], s["world_size"], s["local_rank"], s["attempt"], s["job"], s["url"],
            s["launcher"]) == (3, 8, 1, 2, "abc", "http://h:1", "torchrun"), s
    s = _env.settings_from_env({"SLURM_PROCID": "5", "SLURM_NTASKS": "16", "SLURM_LOCALID": "1",
                                "SLURM_JOB_ID": "991", "SLURM_RESTART_COUNT": "1"})
    assert (s["rank"], s["world_size"], s["local_rank"], s["attempt"], s["job"], s["launcher"]) == \
        (5, 16, 1, 1, "slurm-991", "slurm"), s
    s = _env.settings_from_env({"RANKDB_JOB": "mine", "TORCHELASTIC_RUN_ID": "none", "SLURM_JOB_ID": "1"})
    assert s["job"] == "mine" and s["url"] == _env.DEFAULT_URL and s["rank"] == 0
    assert _env.sanitize_job("a b/c") == ("a_b_c", True)
    # init() takes them from os.environ
    fs = fakeserver.FakeServer()
    os.environ.update(RANKDB_URL=fs.url, RANKDB_JOB="envjob", RANK="2", WORLD_SIZE="4",
                      RANKDB_SPOOL_DIR=harness.ctx().mkdir("spool"))
    c = rankdb.init(**FAST)
    assert (c.job, c.rank, c.world_size) == ("envjob", 2, 4)
    rankdb.log({"loss": 1.0}, step=0)
    assert rankdb.finish() is True
    assert fs.metric_points("loss") == [(2, 0, 1.0)] and fs.metric_points("world_size") == [(2, None, 4)]
    assert not fs.meta, "only rank 0 writes the job metadata"
    fs.close()


def test_encoder_output_is_accepted_by_rankdbd():
    """Everything the encoder lets through is valid for the real server, and
    what it must repair (bad names, odd values, surrogates, huge texts) does
    not cost the rest of the batch."""
    srv = harness.Server().start()

    class Weird:
        def __float__(self):
            return 0.25

    c = make_client("http://127.0.0.1:%d" % srv.port, harness.ctx().mkdir("spool"))
    c.log({"ok": 1.5, "nan": float("nan"), "inf": float("-inf"), "none": None, "bool": True,
           "big": 10**30, "weird": Weird(), "bad name": 1, "x{y}": 2, "s": "text", "": 3}, step=1)
    c.log({"ok": 2.5}, step=-4)
    c.log_message("bad \ud800 surrogate " + "x" * 100000, level="critical", step=1,
                  fields={"nested": {"a": 1}, "f": float("nan"), "n": 2**70})
    with c.phase("forward", step=2):
        pass
    c.step_done(2)
    assert c.flush(20), c.stats()
    st = c.stats()
    assert st["batches_refused"] == 0, st
    assert st["dropped_invalid_values"] == 4, st  # "bad name", "x{y}", "s", ""
    obj = srv.query_ok(job="t1", metric=["ok", "nan", "inf", "none", "bool", "big", "weird"])
    got = {s["metric"]: list(zip(s["steps"], s["values"])) for s in obj["series"]}
    assert got["ok"] == [(1, 1.5), (None, 2.5)], got  # a negative step is sent without a step
    assert got["nan"] == [(1, "NaN")] and got["inf"] == [(1, "-Inf")] and got["none"] == [(1, None)], got
    assert got["bool"] == [(1, 1)] and got["big"] == [(1, 1e30)] and got["weird"] == [(1, 0.25)], got
    st_, logs = srv.get_json("/api/v1/logs?job=t1&level=fatal")
    assert st_ == 200 and len(logs["logs"]) == 1 and logs["logs"][0]["message"].startswith("bad ? surrogate")
    st_, spans = srv.get_json("/api/v1/spans?job=t1&step=2")
    assert st_ == 200 and spans["steps"][0]["ranks"][0]["spans"][0]["name"] == "forward", spans
    c.finish()
    srv.stop()


FAKE_NVML = r"""
#include <string.h>
typedef struct { unsigned gpu, memory; } util_t;
typedef struct { unsigned long long total, free, used; } mem_t;
static int dev = 42;
int nvmlInit_v2(void) { return 0; }
int nvmlDeviceGetHandleByIndex_v2(unsigned i, void **h) { if (i != 1) return 2; *h = &dev; return 0; }
int nvmlDeviceGetName(void *h, char *b, unsigned n) { (void)h; strncpy(b, "Fake GPU", n); return 0; }
int nvmlSystemGetDriverVersion(char *b, unsigned n) { strncpy(b, "999.1", n); return 0; }
int nvmlDeviceGetTemperature(void *h, int s, unsigned *t) { if (h != &dev || s != 0) return 2; *t = 71; return 0; }
int nvmlDeviceGetPowerUsage(void *h, unsigned *p) { (void)h; *p = 312500; return 0; }
int nvmlDeviceGetUtilizationRates(void *h, util_t *u) { (void)h; u->gpu = 97; u->memory = 40; return 0; }
int nvmlDeviceGetClockInfo(void *h, int c, unsigned *m) { (void)h; if (c != 1) return 2; *m = 1410; return 0; }
int nvmlDeviceGetMemoryInfo(void *h, mem_t *m) { (void)h; m->total = 80ull << 30; m->used = 5ull << 30; m->free = m->total - m->used; return 0; }
int nvmlDeviceGetTotalEccErrors(void *h, int type, int counter, unsigned long long *c)
{ (void)h; if (counter != 0) return 2; *c = type == 0 ? 3 : 0; return 0; }
"""


def test_nvml_gauges_through_ctypes():
    d = harness.ctx().mkdir("nvml")
    src = os.path.join(d, "fake_nvml.c")
    lib = os.path.join(d, "libnvidia-ml.so.1")
    with open(src, "w") as f:
        f.write(FAKE_NVML)
    subprocess.run(["cc", "-shared", "-fPIC", "-o", lib, src], check=True)
    fs = fakeserver.FakeServer()
    os.environ["RANKDB_NVML_LIB"] = lib
    c = make_client(fs, harness.ctx().mkdir("spool"), heartbeat_s=0.05, gpu=True, local_rank=1)
    assert c.gpu is not None and c.gpu.name == "Fake GPU"
    harness.wait_until(lambda: fs.metric_points("gpu.temp"), what="gpu.temp")
    c.finish()
    rec = [r for r in fs.of_type("metrics") if "gpu.temp" in r["metrics"]][0]["metrics"]
    assert rec == {"heartbeat": 1, "gpu.temp": 71, "gpu.power": 312.5, "gpu.util": 97,
                   "gpu.sm_clock": 1410, "gpu.mem.used": 5 << 30, "gpu.ecc.correctable": 3,
                   "gpu.ecc.uncorrectable": 0}, rec
    # no NVML: no GPU metrics, no error
    os.environ["RANKDB_NVML_LIB"] = os.path.join(d, "missing.so")
    import rankdb.nvml as nv
    nv._lib = None
    assert nv.open_device(0) is None
    fs.close()


def test_pip_install_offline():
    """`pip install ./clients/python` with no index at all: into a fresh venv
    (build isolation on: the backend needs nothing), and with --target."""
    d = harness.ctx().mkdir("pip")
    env = dict(os.environ, PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_FIND_LINKS="")
    env.pop("PYTHONPATH", None)
    venv = os.path.join(d, "venv")
    r = subprocess.run([sys.executable, "-m", "venv", venv], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    py = os.path.join(venv, "bin", "python")
    r = subprocess.run([py, "-m", "pip", "install", common.PYCLIENT], capture_output=True, text=True,
                       env=env, timeout=180, cwd=d)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    r = subprocess.run([py, "-c", "import rankdb, rankdb.nvml; print(rankdb.__file__, rankdb.__version__)"],
                       capture_output=True, text=True, env=env, cwd=d)
    assert r.returncode == 0 and r.stdout.startswith(venv) and "0.1.0" in r.stdout, r.stdout + r.stderr
    target = os.path.join(d, "site")
    r = subprocess.run([sys.executable, "-m", "pip", "install", "--no-build-isolation", "--no-deps",
                        "--target", target, common.PYCLIENT], capture_output=True, text=True, env=env,
                       timeout=180, cwd=d)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert os.path.exists(os.path.join(target, "rankdb", "_sender.py"))

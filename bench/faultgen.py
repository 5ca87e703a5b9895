#!/usr/bin/env python3
"""faultgen.py - streams a realistic data-parallel training run, in real time,
to a running rankdbd over HTTP, and injects one fault into it.

    bench/faultgen.py --port P --job J [--ranks 64] [--fault NAME]
                      [--inject-after-s 40] [--duration-s 120] [--fault-rank R]
                      [--seed 1] [--ranks-per-body 8] [--connections 8]
    bench/faultgen.py --list          # the faults and what they do

What one run looks like (one JSON record per rank per step, POSTed as NDJSON
to /api/v1/write, one body per node of --ranks-per-body ranks, the way a
node-local agent batches its GPUs; spans of every phase beside them, as the
SDK's phase timers send them; a heartbeat per rank every 5 s from its own
thread, whatever the step does; the job's metadata PUT at start):

- timing: a data-parallel step. Per rank dataloader (~15 ms, 0.3 % of
  rank-steps stall 50-200 ms), forward (~280 ms), backward (~520 ms) with a
  per-rank skew of +-1 % and +-2 % noise; every rank then waits in the
  all-reduce for the slowest one plus ~80 ms of communication
  (step_time.collective), then its optimizer (~40 ms). step_time is the sum,
  so it is nearly equal on all ranks and the wall clock advances by it: about
  one step per second. A checkpoint every --ckpt-every steps adds
  step_time.checkpoint (~2.5 s, all ranks) and a checkpoint.duration point.
- numerics (float32 values widened to double, as tensor.item() gives):
  loss decays 10.5 -> ~2 with per-rank noise (data shards differ: ~2 %,
  0.5 % of rank-steps a +10 % harder batch); grad_norm decays and is the
  same on every rank (all-reduced) with 5 % noise; lr (float64) warms up
  linearly over 100 steps then follows a cosine; fp16 loss_scale 65536 that
  halves on a rare overflow (1 in 400 steps, job-wide; skipped_steps + 1,
  no grad_norm that step) and doubles after 1000 clean steps.
- throughput: samples_per_sec and tokens_per_sec of the rank
  (micro_batch 2 x grad_accum 1 samples of 4096 tokens per step).
- GPU (integers): gpu.temp 62-74 C per rank, gpu.power, gpu.util (lower in
  a data-loader stall), gpu.sm_clock ~1980 MHz, gpu.mem.used (bytes),
  cumulative gpu.ecc.correctable (rare +1), gpu.ecc.uncorrectable 0, gpu.xid 0.
- config_hash and world_size with each rank's first record (and after a
  restart); metadata: world_size, global_batch, micro_batch, grad_accum,
  flops_per_token (6 x 7e9 parameters), gpu_peak_flops (989e12, H100 bf16
  dense), status running. MFU comes out near 0.35.

Output: JSON lines on stdout, for bench/faults.py and for people:
  {"ev":"start", ...}                        once
  {"ev":"fault","fault":F,"t_ack":T,...}     the first faulty write's ack (wall
                                             clock, seconds) and what it was;
                                             for faults that are an absence
                                             (hang, rank/job down, no checkpoint)
                                             T is the ack of the last write that
                                             still showed the thing now missing
  {"ev":"progress","step":S,...}             every 30 steps
  {"ev":"end", ...}                          totals: steps, bodies, points,
                                             errors, step lag, CPU seconds
Python 3 standard library only; traffic to the given host (127.0.0.1) only.
"""

import argparse
import http.client
import json
import math
import queue
import random
import resource
import struct
import sys
import threading
import time

SEQ_LEN = 4096
MICRO_BATCH = 2
GRAD_ACCUM = 1
PARAMS = 7e9
FLOPS_PER_TOKEN = 6 * PARAMS
GPU_PEAK_FLOPS = 989e12
HEARTBEAT_S = 5.0
MEM_BYTES = 62 * 1024 ** 3

# name -> (what it does, expected alert: alertname, rank label?, phase, metric)
FAULTS = {
    "nan_loss": ("loss of one rank becomes NaN (a bad batch) and stays NaN",
                 ("LossNonFinite", True, "", "loss")),
    "loss_spike": ("one rank's loss jumps to 3x for one step (a corrupt batch), then normal",
                   ("LossSpike", True, "", "loss")),
    "divergence": ("the loss of every rank turns and rises 1.5 % per step (lr too high)",
                   ("LossDivergence", False, "", "loss")),
    "grad_spike": ("grad_norm (all-reduced: the same on every rank) jumps to 6x for 3 steps",
                   ("GradNormSpike", False, "", "grad_norm")),
    "loss_scale": ("fp16 overflow every step: loss_scale halves each step down to 1, "
                   "skipped_steps +1 per step, no grad_norm",
                   ("LossScaleCollapse", False, "", "loss_scale")),
    "hang": ("one rank blocks in its data loader; the others finish dataloader, forward, "
             "backward of the next step and wait in the all-reduce; every rank keeps its "
             "heartbeat", ("TrainingHang", True, "", "")),
    "rank_down": ("one rank's process dies (nothing more from it, no heartbeat); its peers "
                  "block in the all-reduce, alive", ("RankDown", True, "", "")),
    "job_down": ("every rank stops (the job was killed; metadata still says running)",
                 ("JobDown", False, "", "")),
    "throughput": ("network congestion: the all-reduce takes 0.45 s longer on every rank "
                   "(step time +45 %)", ("ThroughputDrop", False, "", "samples_per_sec")),
    "straggler_fwd": ("one rank's forward pass is 50 % slower (its peers wait in the "
                      "all-reduce)", ("Straggler", True, "forward", "")),
    "straggler_data": ("one rank's data loader takes ~250 ms per step instead of ~15 ms",
                       ("Straggler", True, "dataloader", "")),
    "overheat": ("one rank's GPU temperature climbs to 88-89 C in 6 steps (clocks hold)",
                 ("GpuOverheat", True, "", "gpu.temp")),
    "ecc": ("one rank's gpu.ecc.uncorrectable goes from 0 to 1",
            ("GpuEccErrors", True, "", "gpu.ecc.uncorrectable")),
    "xid": ("one rank's gpu.xid reports 48 (double-bit ECC error)",
            ("GpuEccErrors", True, "", "gpu.xid")),
    "config": ("the job restarts from its last checkpoint (attempt 1, 3 s gap) and one rank "
               "comes back with another config_hash", ("ConfigMismatch", True, "",
                                                       "config_hash")),
    "ckpt_stale": ("the job checkpoints every 20 steps, then stops checkpointing",
                   ("CheckpointStale", False, "", "checkpoint.age")),
    "mfu_low": ("the run is slow from its first step (step ~2.2 s: MFU ~0.16 against the "
                "0.2 floor) and never had a faster baseline", ("MfuLow", False, "", "mfu")),
}


def f32(x):
    """x rounded to float32 and widened back, as tensor.item() returns it."""
    try:
        return struct.unpack("f", struct.pack("f", x))[0]
    except OverflowError:
        return math.copysign(math.inf, x)


class Sender:
    """A pool of keep-alive HTTP connections; bodies are queued and each
    one's ack (wall clock) goes to its callback."""

    def __init__(self, host, port, nconn):
        self.host, self.port = host, port
        self.q = queue.Queue(maxsize=4096)
        self.lock = threading.Lock()
        self.bodies = self.errors = self.points = 0
        self.last_error = ""
        self.threads = [threading.Thread(target=self._run, daemon=True) for _ in range(nconn)]
        for t in self.threads:
            t.start()

    def submit(self, method, path, body, npoints=0, cb=None):
        self.q.put((method, path, body, npoints, cb))

    def drain(self):
        self.q.join()

    def _run(self):
        conn = None
        while True:
            method, path, body, npoints, cb = self.q.get()
            ok = False
            for attempt in range(5):
                try:
                    if conn is None:
                        conn = http.client.HTTPConnection(self.host, self.port, timeout=30)
                    conn.request(method, path, body=body,
                                 headers={"Content-Type": "application/x-ndjson"})
                    resp = conn.getresponse()
                    data = resp.read()
                    t_ack = time.time()
                    if resp.status == 200:
                        ok = True
                        break
                    with self.lock:
                        self.last_error = "%d %s" % (resp.status, data[:200])
                    if resp.status not in (429, 503):
                        break
                    time.sleep(float(resp.getheader("Retry-After") or 1))
                except (OSError, http.client.HTTPException) as e:
                    with self.lock:
                        self.last_error = repr(e)
                    if conn is not None:
                        conn.close()
                    conn = None
                    time.sleep(0.1)
            with self.lock:
                self.bodies += 1
                if ok:
                    self.points += npoints
                else:
                    self.errors += 1
            if ok and cb:
                cb(t_ack)
            self.q.task_done()


def emit(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


class Run:
    def __init__(self, a):
        self.a = a
        self.n = a.ranks
        self.rng = random.Random(a.seed)
        self.job = a.job
        self.fault = a.fault
        self.fr = a.fault_rank if a.fault_rank is not None else (a.ranks * 2) // 3 + 1
        self.fr %= a.ranks
        rng = self.rng
        # per-rank persistent character
        self.skew = [1 + rng.uniform(-0.01, 0.01) for _ in range(self.n)]
        self.temp0 = [rng.randint(62, 74) for _ in range(self.n)]
        self.power0 = [rng.randint(560, 640) for _ in range(self.n)]
        self.ecc_c = [0] * self.n
        self.attempt = 0
        self.config_hash = rng.getrandbits(48)
        self.step = 0
        self.loss_scale = 65536.0
        self.clean_steps = 0
        self.skipped = 0
        self.ckpt_every = a.ckpt_every
        self.last_ckpt_step = 0
        self.sent_config = [False] * self.n
        self.injected = False
        self.fault_step = None
        self.fault_reported = False
        self.dead = set()          # ranks that send nothing at all
        self.hb_stop = threading.Event()
        self.stop = threading.Event()
        self.lag_max = 0.0
        self.lag_sum = 0.0
        self.sender = Sender(a.host, a.port, a.connections)
        self.div_base = None
        self.last_ack = {}         # tag -> ack time of the latest body carrying it
        self.ack_lock = threading.Lock()

    # -- helpers --------------------------------------------------------------

    def note_ack(self, tag):
        def cb(t):
            with self.ack_lock:
                if t > self.last_ack.get(tag, 0):
                    self.last_ack[tag] = t
        return cb

    def report_fault(self, extra):
        """cb for the body with the first faulty point."""
        def cb(t):
            if not self.fault_reported:
                self.fault_reported = True
                d = {"ev": "fault", "fault": self.fault, "t_ack": t, "step": self.fault_step}
                d.update(extra)
                emit(d)
        return cb

    def loss_at(self, s):
        base = 2.0 + 8.5 * math.exp(-s / 300.0) + 0.4 * math.exp(-s / 3000.0)
        if self.fault == "divergence" and self.injected and self.div_base is not None:
            base = self.div_base * (1.015 ** (s - self.fault_step + 1))
        return base

    def lr_at(self, s):
        if s < 100:
            return 3e-4 * (s + 1) / 100
        return 3e-5 + 0.5 * (3e-4 - 3e-5) * (1 + math.cos(math.pi * min(1.0, (s - 100) / 1e5)))

    def put_meta(self, step_scale):
        meta = {"world_size": self.n, "global_batch": self.n * MICRO_BATCH * GRAD_ACCUM,
                "micro_batch": MICRO_BATCH, "grad_accum": GRAD_ACCUM, "seq_len": SEQ_LEN,
                "params": PARAMS, "flops_per_token": FLOPS_PER_TOKEN,
                "gpu_peak_flops": GPU_PEAK_FLOPS, "status": "running",
                "model": "llama-7b", "generator": "bench/faultgen.py",
                "fault": self.fault or "none", "step_scale": step_scale}
        done = threading.Event()
        self.sender.submit("PUT", "/api/v1/jobs/%s/meta" % self.job, json.dumps(meta),
                           cb=lambda t: done.set())
        done.wait(30)

    # -- heartbeat thread -------------------------------------------------------

    def heartbeats(self):
        """Each rank's heartbeat every HEARTBEAT_S, ranks spread evenly."""
        tick = 0
        slots = 10
        period = HEARTBEAT_S / slots
        t0 = time.time()
        while not self.hb_stop.is_set():
            ranks = [r for r in range(self.n) if r % slots == tick % slots and r not in self.dead]
            if ranks:
                ts = time.time_ns()
                body = "".join(json.dumps({"job": self.job, "rank": r, "timestamp": ts + r,
                                           "attempt": self.attempt,
                                           "metrics": {"heartbeat": 1}}) + "\n"
                               for r in ranks)
                cb = self.note_ack("heartbeat")
                if self.fr in ranks:
                    cb = self._both(cb, self.note_ack("heartbeat_fault_rank"))
                self.sender.submit("POST", "/api/v1/write", body, len(ranks), cb)
            tick += 1
            self.hb_stop.wait(max(0.0, t0 + tick * period - time.time()))

    # -- one step ---------------------------------------------------------------

    def phases(self, s, scale):
        """Per-rank (dl, fwd, bwd, opt, comm_wait, ckpt, step_time) of step s."""
        rng, n, f, fr, inj = self.rng, self.n, self.fault, self.fr, self.injected
        dl, fw, bw, op = [], [], [], []
        for r in range(n):
            k = self.skew[r] * scale
            d = 0.015 * rng.uniform(0.8, 1.25)
            if rng.random() < 0.003:
                d += rng.uniform(0.05, 0.2)
            fwd = 0.280 * k * rng.gauss(1, 0.02)
            if inj and r == fr:
                if f == "straggler_fwd":
                    fwd *= 1.5
                elif f == "straggler_data":
                    d = 0.25 * rng.uniform(0.9, 1.1)
            dl.append(d)
            fw.append(fwd)
            bw.append(0.520 * k * rng.gauss(1, 0.02))
            op.append(0.040 * k * rng.gauss(1, 0.03))
        comm = 0.080 * rng.uniform(0.95, 1.1)
        if inj and f == "throughput":
            comm += 0.45
        ready = [dl[r] + fw[r] + bw[r] for r in range(n)]
        slowest = max(ready)
        ckpt = 0.0
        if self.ckpt_every and s > 0 and s % self.ckpt_every == 0 and not (
                inj and f == "ckpt_stale"):
            ckpt = 2.5 * rng.uniform(0.9, 1.1)
        out = []
        for r in range(n):
            wait = slowest - ready[r] + comm
            st = ready[r] + wait + op[r] + ckpt
            out.append((dl[r], fw[r], bw[r], op[r], wait, ckpt, st))
        return out

    def build_step(self, s, ph, ts_end):
        """NDJSON bodies (one per node) for step s; returns [(body, npoints, ranks)]."""
        rng, f, fr, inj = self.rng, self.fault, self.fr, self.injected
        loss_mu = self.loss_at(s)
        gnorm = f32((0.3 + 2.5 * math.exp(-s / 150.0)) * rng.gauss(1, 0.05))
        lr = self.lr_at(s)
        # fp16 loss scaling, job-wide
        overflow = False
        if inj and f == "loss_scale":
            overflow = True
        elif rng.random() < 1 / 400:
            overflow = True
        if overflow:
            self.loss_scale = max(1.0, self.loss_scale / 2)
            self.skipped += 1
            self.clean_steps = 0
        else:
            self.clean_steps += 1
            if self.clean_steps >= 1000:
                self.loss_scale = min(2.0 ** 24, self.loss_scale * 2)
                self.clean_steps = 0
        if inj and f == "grad_spike" and s - self.fault_step < 3:
            gnorm = f32(gnorm * 6)
        bodies = []
        lines, npts, ranks = [], 0, []
        rpb = self.a.ranks_per_body
        for r in range(self.n):
            if r not in self.dead:
                dl, fw, bw, op, wait, ckpt, st = ph[r]
                loss = loss_mu * rng.gauss(1, 0.02)
                if rng.random() < 0.005:
                    loss *= 1.10
                if inj and r == fr and f == "loss_spike" and s == self.fault_step:
                    loss *= 3.0
                loss = f32(loss)
                if inj and r == fr and f == "nan_loss":
                    loss = math.nan
                stalled = dl > 0.05
                util = rng.randint(60, 80) if stalled else rng.randint(95, 100)
                temp = self.temp0[r] + (1 if (s // 97 + r) % 3 == 0 else 0)
                if inj and r == fr and f == "overheat":
                    temp = min(89, max(temp, 74 + 3 * (s - self.fault_step + 1)))
                if rng.random() < 1 / 20000:
                    self.ecc_c[r] += 1
                samples = MICRO_BATCH * GRAD_ACCUM / st
                m = {"loss": loss, "lr": lr,
                     "loss_scale": self.loss_scale, "skipped_steps": self.skipped,
                     "step_time": st, "step_time.dataloader": dl, "step_time.forward": fw,
                     "step_time.backward": bw, "step_time.optimizer": op,
                     "step_time.collective": wait,
                     "samples_per_sec": samples, "tokens_per_sec": samples * SEQ_LEN,
                     "gpu.temp": temp,
                     "gpu.power": self.power0[r] + rng.randint(-15, 15) - (120 if stalled else 0),
                     "gpu.util": util, "gpu.sm_clock": 1980 - 15 * rng.randint(0, 1),
                     "gpu.mem.used": MEM_BYTES + 2 * 1024 * 1024 * rng.randint(0, 64),
                     "gpu.ecc.correctable": self.ecc_c[r],
                     "gpu.ecc.uncorrectable": 1 if (inj and r == fr and f == "ecc") else 0,
                     "gpu.xid": 48 if (inj and r == fr and f == "xid") else 0}
                if not overflow:
                    m["grad_norm"] = gnorm
                if ckpt:
                    m["step_time.checkpoint"] = ckpt
                    m["checkpoint.duration"] = ckpt
                if not self.sent_config[r]:
                    h = self.config_hash
                    if inj and r == fr and f == "config":
                        h ^= 0x5a5a5a
                    m["config_hash"] = h
                    m["world_size"] = self.n
                    self.sent_config[r] = True
                ts = ts_end - int(1e9 * (ph[r][6] - st)) + rng.randint(500_000, 3_500_000)
                rec = {"job": self.job, "rank": r, "step": s, "timestamp": ts,
                       "attempt": self.attempt, "metrics": m}
                lines.append(json.dumps(rec, allow_nan=True))
                npts += len(m)
                if self.a.spans:
                    t = ts - int(st * 1e9)
                    for name, d in (("dataloader", dl), ("forward", fw), ("backward", bw),
                                    ("collective", wait), ("optimizer", op),
                                    ("checkpoint", ckpt)):
                        if d <= 0:
                            continue
                        dn = int(d * 1e9)
                        lines.append('{"type":"span","job":"%s","rank":%d,"step":%d,'
                                     '"attempt":%d,"name":"%s","start":%d,"duration_ns":%d}'
                                     % (self.job, r, s, self.attempt, name, t, dn))
                        t += dn
                ranks.append(r)
            if (r + 1) % rpb == 0 or r == self.n - 1:
                if lines:
                    bodies.append(("\n".join(lines) + "\n", npts, ranks))
                lines, npts, ranks = [], 0, []
        return bodies

    def partial_spans(self, s, stuck, t_start):
        """Spans of the phases of step s that finished before a hang: every rank
        but `stuck` did dataloader, forward and backward and now waits in the
        all-reduce; `stuck` is still in its data loader."""
        lines = []
        for r in range(self.n):
            if r == stuck or r in self.dead:
                continue
            t = t_start
            for name, d in (("dataloader", 0.015), ("forward", 0.28 * self.skew[r]),
                            ("backward", 0.52 * self.skew[r])):
                dn = int(d * 1e9)
                lines.append('{"type":"span","job":"%s","rank":%d,"step":%d,"attempt":%d,'
                             '"name":"%s","start":%d,"duration_ns":%d}'
                             % (self.job, r, s, self.attempt, name, t, dn))
                t += dn
        return "\n".join(lines) + "\n", len(lines)

    # -- the run ----------------------------------------------------------------

    def inject(self, s):
        """Called before building step s once the warm-up is over."""
        self.injected = True
        self.fault_step = s
        f = self.fault
        if f == "divergence":
            self.div_base = self.loss_at(s - 1)
        emit({"ev": "inject", "fault": f, "step": s, "rank": self.fr, "t": time.time()})

    def send_step(self, bodies, s):
        f, fr = self.fault, self.fr
        first_faulty = self.injected and not self.fault_reported and s == self.fault_step
        for body, npts, ranks in bodies:
            cb = self.note_ack("step")
            if first_faulty and f in ("nan_loss", "loss_spike", "straggler_fwd",
                                      "straggler_data", "ecc", "xid", "config") and fr in ranks:
                cb2 = self.report_fault({"rank": fr})
                cb = self._both(cb, cb2)
            elif first_faulty and f in ("divergence", "grad_spike", "loss_scale",
                                        "throughput") and ranks[0] == 0:
                cb = self._both(cb, self.report_fault({}))
            self.sender.submit("POST", "/api/v1/write", body, npts, cb)

    @staticmethod
    def _both(a, b):
        def cb(t):
            a(t)
            b(t)
        return cb

    def run(self):
        a = self.a
        scale = 2.2 if self.fault == "mfu_low" else 1.0
        self.put_meta(scale)
        emit({"ev": "start", "job": self.job, "ranks": self.n, "fault": self.fault,
              "fault_rank": self.fr, "t": time.time()})
        hb = threading.Thread(target=self.heartbeats, daemon=True)
        hb.start()
        self.hb_thread = hb
        t_start = time.time()
        t_next = t_start
        deadline = t_start + a.duration_s
        inject_at = t_start + a.inject_after_s
        hang_sent = False
        overheat_reported = False
        cpu0 = resource.getrusage(resource.RUSAGE_SELF)
        while time.time() < deadline and not self.stop.is_set():
            s = self.step
            if self.fault and not self.injected and time.time() >= inject_at:
                self.inject(s)
                if self.fault in ("hang", "rank_down", "job_down"):
                    with self.ack_lock:
                        last = self.last_ack.get("step")
                    if self.fault == "rank_down":
                        self.dead.add(self.fr)
                        time.sleep(0.6)  # a heartbeat body built before may still go out
                        self.sender.drain()
                        with self.ack_lock:  # the last step's bodies are acked by now
                            last = max(self.last_ack.get("step", 0),
                                       self.last_ack.get("heartbeat_fault_rank", 0))
                    if self.fault == "job_down":
                        self.dead.update(range(self.n))
                        self.hb_stop.set()
                        self.hb_thread.join()
                        self.sender.drain()
                        with self.ack_lock:
                            last = max(self.last_ack.get("step", 0),
                                       self.last_ack.get("heartbeat", 0))
                        emit({"ev": "fault", "fault": self.fault, "t_ack": last, "step": s,
                              "ref": "last write of any rank"})
                    elif self.fault == "rank_down":
                        emit({"ev": "fault", "fault": self.fault, "t_ack": last, "step": s,
                              "rank": self.fr, "ref": "last write of the rank"})
                    if self.fault in ("hang", "rank_down") and not hang_sent:
                        # the peers get through dataloader/forward/backward of step s
                        time.sleep(0.82)
                        body, n = self.partial_spans(s, self.fr, time.time_ns() - 840_000_000)
                        done = threading.Event()
                        holder = {}

                        def cb(t, holder=holder, done=done):
                            holder["t"] = t
                            done.set()
                        self.sender.submit("POST", "/api/v1/write", body, 0, cb)
                        done.wait(30)
                        hang_sent = True
                        if self.fault == "hang":
                            emit({"ev": "fault", "fault": "hang", "t_ack": holder.get("t"),
                                  "step": s, "rank": self.fr,
                                  "ref": "last step progress (the peers' spans of step %d)" % s})
                    # nothing moves any more; heartbeats go on (except the dead)
                    self.stop.wait(max(0.0, deadline - time.time()))
                    break
                if self.fault == "config":
                    # crash, 3 s gap, restart from the last checkpoint as attempt 1
                    self.sender.drain()
                    time.sleep(3.0)
                    self.attempt = 1
                    self.step = s = self.last_ckpt_step + 1
                    self.fault_step = s
                    self.sent_config = [False] * self.n
                    t_next = time.time()
            ph = self.phases(s, scale)
            st_med = sorted(p[6] for p in ph)[self.n // 2]
            t_next += st_med
            now = time.time()
            if now < t_next:
                self.stop.wait(t_next - now)
            lag = time.time() - t_next
            self.lag_max = max(self.lag_max, lag)
            self.lag_sum += max(0.0, lag)
            bodies = self.build_step(s, ph, time.time_ns())
            if self.fault == "overheat" and self.injected and not overheat_reported:
                # the first point above 85 C is the first faulty one
                temp = 74 + 3 * (s - self.fault_step + 1)
                if temp > 85:
                    overheat_reported = True
                    for body, npts, ranks in bodies:
                        cb = self.note_ack("step")
                        if self.fr in ranks:
                            cb = self._both(cb, self.report_fault({"rank": self.fr, "step": s,
                                                                   "temp": temp}))
                        self.sender.submit("POST", "/api/v1/write", body, npts, cb)
                    bodies = []
            if self.fault == "mfu_low" and s == 0:
                for body, npts, ranks in bodies:
                    cb = self.note_ack("step")
                    if ranks[0] == 0:
                        self.fault_step = 0
                        self.injected = True
                        cb = self._both(cb, self.report_fault({"ref": "first tokens_per_sec"}))
                    self.sender.submit("POST", "/api/v1/write", body, npts, cb)
                bodies = []
            if self.fault == "ckpt_stale" and self.injected and not self.fault_reported:
                with self.ack_lock:
                    t_ck = self.last_ack.get("ckpt")
                emit({"ev": "fault", "fault": "ckpt_stale", "t_ack": t_ck,
                      "step": self.last_ckpt_step, "ref": "last checkpoint.duration point"})
                self.fault_reported = True
            if self.ckpt_every and s > 0 and s % self.ckpt_every == 0 and ph[0][5] > 0:
                self.last_ckpt_step = s
                for body, npts, ranks in bodies:
                    self.sender.submit("POST", "/api/v1/write", body, npts,
                                       self._both(self.note_ack("step"), self.note_ack("ckpt")))
                bodies = []
            self.send_step(bodies, s)
            self.step += 1
            if s % 30 == 0:
                emit({"ev": "progress", "step": s, "t": time.time(),
                      "lag_s": round(lag, 3), "queue": self.sender.q.qsize()})
        self.hb_stop.set()
        self.sender.drain()
        cpu1 = resource.getrusage(resource.RUSAGE_SELF)
        wall = time.time() - t_start
        emit({"ev": "end", "steps": self.step, "bodies": self.sender.bodies,
              "points": self.sender.points, "errors": self.sender.errors,
              "last_error": self.sender.last_error, "wall_s": round(wall, 1),
              "lag_max_s": round(self.lag_max, 3),
              "cpu_s": round(cpu1.ru_utime + cpu1.ru_stime - cpu0.ru_utime - cpu0.ru_stime, 1),
              "t": time.time()})
        return 0 if self.sender.errors == 0 else 1


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int)
    p.add_argument("--job", default="faultgen")
    p.add_argument("--ranks", type=int, default=64)
    p.add_argument("--fault", choices=sorted(FAULTS), default=None)
    p.add_argument("--fault-rank", type=int, default=None)
    p.add_argument("--inject-after-s", type=float, default=40)
    p.add_argument("--duration-s", type=float, default=120)
    p.add_argument("--ckpt-every", type=int, default=300, help="steps between checkpoints")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--ranks-per-body", type=int, default=8)
    p.add_argument("--connections", type=int, default=8)
    p.add_argument("--no-spans", dest="spans", action="store_false")
    p.add_argument("--list", action="store_true", help="list the faults and exit")
    a = p.parse_args()
    if a.list:
        for k in sorted(FAULTS):
            print("%-15s %s" % (k, FAULTS[k][0]))
        return 0
    if not a.port:
        p.error("--port is required")
    if a.ranks < 3:
        p.error("--ranks must be at least 3")
    return Run(a).run()


if __name__ == "__main__":
    sys.exit(main())

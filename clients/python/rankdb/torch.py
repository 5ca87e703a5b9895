"""PyTorch helpers for rankdb (import only where torch is installed).

    import rankdb, rankdb.torch
    rankdb.init(config=cfg)
    model = DDP(model)
    rankdb.torch.time_collectives(model)          # step_time.collective
    ...
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    rankdb.log({"loss": loss.detach(), "grad_norm": norm}, step=step)  # tensors: converted off-thread

- grad_norm(params): the total gradient norm as a 0-d tensor, no host sync
  (log() converts tensors on its background thread).
- ScalerWatch: loss_scale and skipped_steps (cumulative) of a GradScaler.
- time_collectives(ddp_model): a DDP communication hook that wraps the
  all-reduce (or your hook) and measures how long this rank waits for it
  after its backward compute is done: `step_time.collective` plus a
  `collective` span; that wait is taken out of the enclosing phase
  (`backward`), so phases hold the rank's own work and a straggler's
  peers do not look slow.
- count_tokens(input_ids, pad_id): tokens in a batch, for
  rankdb.step_done(step, tokens=n) -> tokens_per_sec.
- GPU gauges come from NVML in the heartbeat thread (rankdb.nvml); nothing
  to call here.
"""

import threading
import time

import torch

import rankdb


def grad_norm(parameters, norm_type=2.0):
    """Total norm of the gradients (as clip_grad_norm_ computes it) as a
    0-d tensor on the gradients' device; None when there are no gradients."""
    if isinstance(parameters, torch.nn.Module):
        parameters = parameters.parameters()
    grads = [p.grad.detach() for p in parameters if p.grad is not None]
    if not grads:
        return None
    norm_type = float(norm_type)
    dev = grads[0].device
    norms = [torch.linalg.vector_norm(g, norm_type).to(dev) for g in grads]
    return torch.linalg.vector_norm(torch.stack(norms), norm_type)


class ScalerWatch:
    """Follows a torch.cuda.amp.GradScaler: call metrics() after
    scaler.update(). A scale that went down means the step was skipped
    (inf/NaN gradients). get_scale() reads one number from the GPU; the
    scaler's own step() already synchronises each step."""

    def __init__(self, scaler):
        self.scaler = scaler
        self.skipped = 0
        self.last = None

    def metrics(self):
        if not self.scaler.is_enabled():
            return {}
        scale = float(self.scaler.get_scale())
        if self.last is not None and scale < self.last:
            self.skipped += 1
        self.last = scale
        return {"loss_scale": scale, "skipped_steps": self.skipped}


def count_tokens(input_ids, pad_id=None):
    """Tokens in a batch (not counting pad_id)."""
    if pad_id is None:
        return int(input_ids.numel())
    return int((input_ids != pad_id).sum())


class _CollectiveTimer:
    """State of the timing hook. Launch/done events come from DDP's
    autograd and communication threads."""

    def __init__(self):
        self.lock = threading.Lock()
        self.inflight = 0
        self.last_launch_ns = None
        self.last_launch_wall = None
        self.wait = None  # (wall start ns, duration ns) of the latest wait

    def launched(self):
        with self.lock:
            self.inflight += 1
            self.last_launch_ns = time.perf_counter_ns()
            self.last_launch_wall = time.time_ns()

    def done(self):
        with self.lock:
            self.inflight -= 1
            if self.inflight == 0 and self.last_launch_ns is not None:
                # everything launched so far is done: from the last launch
                # (this rank's backward compute was over) to now it waited
                self.wait = (self.last_launch_wall, time.perf_counter_ns() - self.last_launch_ns)

    def take_wait(self):
        with self.lock:
            w, self.wait = self.wait, None
        return [] if w is None else [("collective", w[0], w[1])]


def time_collectives(ddp_model, hook=None, state=None, client=None):
    """Registers a communication hook on a DistributedDataParallel model
    that runs `hook` (default: DDP's all-reduce, as without a hook) and
    times the wait. Call once, before the first forward."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    c = client or rankdb.client()
    if c is None:
        raise RuntimeError("call rankdb.init() before rankdb.torch.time_collectives()")
    inner = hook or default_hooks.allreduce_hook
    timer = _CollectiveTimer()

    def timed_hook(st, bucket):
        timer.launched()
        fut = inner(st, bucket)

        def finished(f):
            timer.done()
            return f.value()

        return fut.then(finished)

    ddp_model.register_comm_hook(state, timed_hook)
    c._wait_sources.append(timer)
    return timer

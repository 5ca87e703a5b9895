"""rankdb: rank-aware training telemetry that never stalls the training loop.

    import rankdb
    rankdb.init(config=cfg)                 # job, rank, world size from torchrun/SLURM
    for step, batch in enumerate(loader):
        with rankdb.phase("forward"):
            loss = model(batch)
        ...
        rankdb.log({"loss": loss.item(), "lr": lr}, step=step)
        rankdb.step_done(step)
    rankdb.finish()

Every function here is safe to call before init() (it does nothing) and
never raises or blocks because the server is slow or down: records go to a
bounded in-memory queue, a background thread batches and sends them, and
an on-disk spool keeps what the server has not acknowledged (replayed
exactly once when it is back, also by the next process of the same rank).
Standard library only; rankdb.torch has the PyTorch helpers.
"""

import threading

from ._client import Client, LogHandler, config_hash  # noqa: F401
from ._env import settings_from_env  # noqa: F401  (public: the launcher defaults)

__version__ = "0.1.0"
__all__ = ["init", "log", "phase", "step_done", "checkpoint", "log_message", "finish",
           "flush", "stats", "client", "Client", "LogHandler", "config_hash", "settings_from_env"]

_client = None
_lock = threading.Lock()


class _NullPhase:
    __slots__ = ()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


_NULL_PHASE = _NullPhase()


def _current():
    return _client


def init(url=None, job=None, rank=None, world_size=None, attempt=None, config=None, **kw):
    """Starts the client of this process (once; a second call returns the
    first client unless finish() was called).

    Defaults: url RANKDB_URL (http://127.0.0.1:7461); job RANKDB_JOB, else
    TORCHELASTIC_RUN_ID, else "slurm-$SLURM_JOB_ID"; rank RANK or
    SLURM_PROCID; world_size WORLD_SIZE or SLURM_NTASKS; attempt
    TORCHELASTIC_RESTART_COUNT or SLURM_RESTART_COUNT; local rank LOCAL_RANK
    or SLURM_LOCALID; spool RANKDB_SPOOL_DIR or ~/.cache/rankdb/spool.

    config (any JSON-able object) is hashed into `config_hash`; rank 0 also
    puts it in the job metadata with `meta` (a dict: global_batch,
    micro_batch, grad_accum, flops_per_token, gpu_peak_flops ...). Other
    keyword arguments: see Client (heartbeat_s, flush_interval_s,
    batch_max_bytes, queue_max_records, spool_max_bytes, http_timeout_s,
    gpu, capture_logging, finish_timeout_s).
    """
    global _client
    with _lock:
        if _client is not None and not _client._closed:
            return _client
        _client = Client(url=url, job=job, rank=rank, world_size=world_size, attempt=attempt,
                         config=config, **kw)
        return _client


def client():
    """The current Client, or None before init()."""
    return _client


def log(metrics, step=None):
    """Queues metrics (a dict name -> number) for `step` (default: the
    current step). Returns at once; never raises."""
    c = _client
    if c is not None:
        c.log(metrics, step)


def phase(name, step=None):
    """`with rankdb.phase("forward"):` records step_time.forward (summed over
    the step, sent at step_done) and a span."""
    c = _client
    if c is None:
        return _NULL_PHASE
    return c.phase(name, step)


def step_done(step=None, tokens=None, samples=None, metrics=None):
    """Ends the step: step_time, the phase totals, tokens_per_sec and
    samples_per_sec when counts are given; the current step becomes step+1."""
    c = _client
    if c is not None:
        c.step_done(step, tokens=tokens, samples=samples, metrics=metrics)


def checkpoint(duration_s, step=None):
    """A completed checkpoint that took duration_s seconds."""
    c = _client
    if c is not None:
        c.checkpoint(duration_s, step)


def log_message(message, level="info", step=None, **fields):
    """A log record (level debug/info/warn/error/fatal) with flat fields."""
    c = _client
    if c is not None:
        c.log_message(message, level=level, step=step, fields=fields or None)


def flush(timeout_s=5.0):
    """Waits until what was logged so far is acknowledged (not for the loop)."""
    c = _client
    return True if c is None else c.flush(timeout_s)


def finish(status="finished", timeout_s=None):
    """Flushes within timeout_s and stops; rank 0 records the job status.
    True if everything reached the server (the rest stays in the spool)."""
    c = _client
    if c is None:
        return True
    return c.finish(status=status, timeout_s=timeout_s)


def stats():
    c = _client
    return {} if c is None else c.stats()

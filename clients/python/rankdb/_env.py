"""Defaults from the launcher's environment (torchrun, SLURM, MPI).

Every value rankdb.init() does not receive as an argument comes from here.
Pure functions of an environment mapping, so tests pass their own dict.
"""

import os
import re
import socket

DEFAULT_URL = "http://127.0.0.1:7461"
JOB_RE = re.compile(r"^[A-Za-z0-9._-]{1,128}$")


def _int(env, names, default=None):
    for n in names:
        v = env.get(n)
        if v is None or v == "":
            continue
        try:
            return int(v.strip())
        except ValueError:
            continue
    return default


def sanitize_job(job):
    """A job id the server accepts: [A-Za-z0-9._-]{1,128}; other characters
    become '_'. Returns (job, changed)."""
    s = str(job)
    if JOB_RE.match(s):
        return s, False
    s = re.sub(r"[^A-Za-z0-9._-]", "_", s)[:128] or "default"
    return s, True


def job_from_env(env):
    """RANKDB_JOB, else torchrun's run id, else the SLURM job id, else None."""
    j = env.get("RANKDB_JOB")
    if j:
        return j
    j = env.get("TORCHELASTIC_RUN_ID")
    if j and j != "none":
        return j
    j = env.get("SLURM_JOB_ID")
    if j:
        arr = env.get("SLURM_ARRAY_TASK_ID")
        return "slurm-%s" % j + ("_%s" % arr if arr else "")
    return None


def launcher(env):
    if "TORCHELASTIC_RUN_ID" in env or "TORCHELASTIC_RESTART_COUNT" in env:
        return "torchrun"
    if "SLURM_JOB_ID" in env:
        return "slurm"
    if "OMPI_COMM_WORLD_RANK" in env or "PMI_RANK" in env:
        return "mpi"
    return "none"


def settings_from_env(env=None):
    """-> dict(url, job, rank, world_size, local_rank, attempt, launcher, host)."""
    env = os.environ if env is None else env
    return {
        "url": env.get("RANKDB_URL") or DEFAULT_URL,
        "job": job_from_env(env),
        "rank": _int(env, ("RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK"), 0),
        "world_size": _int(env, ("WORLD_SIZE", "SLURM_NTASKS", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE"), 1),
        "local_rank": _int(env, ("LOCAL_RANK", "SLURM_LOCALID", "OMPI_COMM_WORLD_LOCAL_RANK"), 0),
        "attempt": _int(env, ("TORCHELASTIC_RESTART_COUNT", "SLURM_RESTART_COUNT"), 0),
        "launcher": launcher(env),
        "host": socket.gethostname(),
        "spool_dir": env.get("RANKDB_SPOOL_DIR") or default_spool_dir(env),
    }


def default_spool_dir(env):
    base = env.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "rankdb", "spool")

"""Shared by the client tests: import paths, the fake server, subprocess helpers."""

import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
PYCLIENT = os.path.join(REPO, "clients", "python")
sys.path.insert(0, HERE)
sys.path.insert(0, PYCLIENT)
sys.path.insert(0, os.path.join(REPO, "tests", "integration"))

_torch_python = []


def torch_python():
    """A Python interpreter that can import torch (Debian's python3-torch
    installs into /usr/bin/python3's path, which may not be the python3
    first in PATH)."""
    if _torch_python:
        return _torch_python[0]
    for exe in (sys.executable, "/usr/bin/python3", "/usr/local/bin/python3"):
        if not os.path.exists(exe):
            continue
        r = subprocess.run([exe, "-c", "import torch, torch.distributed"], capture_output=True)
        if r.returncode == 0:
            _torch_python.append(exe)
            return exe
    raise AssertionError("no Python with torch found (tried %s and /usr/bin/python3): "
                         "run tools/install-deps.sh (Debian python3-torch)" % sys.executable)


def client_env(**extra):
    env = dict(os.environ)
    env["PYTHONPATH"] = PYCLIENT + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "TORCHELASTIC_RUN_ID", "TORCHELASTIC_RESTART_COUNT",
              "SLURM_JOB_ID", "SLURM_PROCID", "SLURM_NTASKS", "RANKDB_URL", "RANKDB_JOB"):
        env.pop(k, None)
    env.update({k: str(v) for k, v in extra.items()})
    return env

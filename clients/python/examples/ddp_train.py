#!/usr/bin/env python3
"""A small PyTorch DDP training run instrumented with rankdb.

With torchrun (rank, world size, job id and restart count come from its
environment; RANKDB_URL and RANKDB_JOB from yours):

    RANKDB_URL=http://127.0.0.1:7461 RANKDB_JOB=demo \\
        torchrun --standalone --nproc-per-node 4 ddp_train.py --steps 200

Without torchrun (CPU, gloo, 4 processes through torch.multiprocessing):

    python3 ddp_train.py --procs 4 --url http://127.0.0.1:7461 --job demo --slow-rank 2

--slow-rank R makes rank R's forward pass --slow-ms slower: the straggler
that `GET /api/v1/query/outliers?job=demo&metric=step_time&mode=phases`
then names, with its slow phase.
"""

import argparse
import json
import logging
import os
import socket
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

import rankdb
import rankdb.torch


class Net(nn.Module):
    def __init__(self, slow_s):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(),
                                  nn.Linear(256, 1))
        self.slow_s = slow_s

    def forward(self, x):
        if self.slow_s:
            time.sleep(self.slow_s)  # the straggler: a slow forward pass on this rank only
        return self.body(x)


def batches(rank, n, batch_size):
    g = torch.Generator().manual_seed(1234 + rank)
    w = torch.randn(64, 1, generator=torch.Generator().manual_seed(7))
    for _ in range(n):
        x = torch.randn(batch_size, 64, generator=g)
        yield x, x @ w + 0.1 * torch.randn(batch_size, 1, generator=g)


def train(args):
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)  # the model's initial weights (DDP broadcasts rank 0's)
    dist.init_process_group("gloo")  # MASTER_ADDR/PORT, RANK, WORLD_SIZE from the environment
    rank = dist.get_rank()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s rank" + str(rank) + " %(message)s")
    log = logging.getLogger("train")

    # --- rankdb: the three lines ---------------------------------------------
    rankdb.init(url=args.url, job=args.job, config=vars(args),
                meta={"global_batch": args.batch * dist.get_world_size(), "micro_batch": args.batch,
                      "grad_accum": 1})
    model = DDP(Net(args.slow_ms / 1000.0 if rank == args.slow_rank else 0.0))
    rankdb.torch.time_collectives(model)  # step_time.collective, and spans
    # ---------------------------------------------------------------------------

    opt = torch.optim.SGD(model.parameters(), lr=args.lr)
    data = batches(rank, args.steps, args.batch)
    for step in range(args.steps):
        with rankdb.phase("dataloader"):
            x, y = next(data)
        with rankdb.phase("forward"):
            time.sleep(args.base_ms / 1000.0)  # stands in for real compute
            loss = nn.functional.mse_loss(model(x), y)
        with rankdb.phase("backward"):
            opt.zero_grad()
            loss.backward()
        with rankdb.phase("optimizer"):
            norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 10.0)
            opt.step()
        rankdb.log({"loss": loss.item(), "grad_norm": norm, "lr": args.lr}, step=step)
        if step % args.log_every == 0:
            log.info("step %d loss %.4f", step, loss.item())  # sent with rank and step
        rankdb.step_done(step, samples=args.batch)
    log.info("training done after %d steps", args.steps)
    ok = rankdb.finish("finished")
    if args.stats_dir:  # the client's counters: sent, retried, spooled, dropped
        with open(os.path.join(args.stats_dir, "rank%d.json" % rank), "w") as f:
            json.dump(rankdb.stats(), f)
    if rank == 0:
        print("rankdb: everything delivered" if ok else "rankdb: some batches left in the spool",
              flush=True)
    dist.destroy_process_group()


def _spawned(local_rank, args, port):
    os.environ.update(RANK=str(local_rank), LOCAL_RANK=str(local_rank),
                      WORLD_SIZE=str(args.procs), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    train(args)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--procs", type=int, default=0, help="spawn this many ranks (without torchrun)")
    ap.add_argument("--url", default=None, help="rankdb server (default $RANKDB_URL)")
    ap.add_argument("--job", default=None, help="job id (default $RANKDB_JOB or torchrun's run id)")
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--lr", type=float, default=0.01)
    ap.add_argument("--seed", type=int, default=0,
                    help="model initialisation seed (the data is seeded per rank): a run is "
                         "repeatable")
    ap.add_argument("--base-ms", type=float, default=5.0, help="simulated compute per forward")
    ap.add_argument("--slow-rank", type=int, default=-1)
    ap.add_argument("--slow-ms", type=float, default=30.0)
    ap.add_argument("--log-every", type=int, default=10)
    ap.add_argument("--stats-dir", default=None, help="write each rank's client counters here")
    args = ap.parse_args()
    if args.procs:
        with socket.socket() as s:  # a free port for the gloo rendezvous
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        torch.multiprocessing.spawn(_spawned, args=(args, port), nprocs=args.procs)
    else:
        train(args)


if __name__ == "__main__":
    main()

"""Process-group setup from torchrun or SLURM variables, and the few collectives the recipe uses."""
from __future__ import annotations

import datetime
import os
import sys
from dataclasses import dataclass

import torch
import torch.distributed as dist

from utils import affinity


@dataclass
class DistributedEnv:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    local_world_size: int = 1
    node_rank: int = 0
    master_addr: str = "127.0.0.1"
    master_port: int = 29500

    @property
    def distributed(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def _first_slurm_host(nodelist: str) -> str:
    """First host of a SLURM node list such as ``gpu[03-05,07],cpu1`` → ``gpu03``."""
    head = nodelist.split(",")[0] if "[" not in nodelist.split(",")[0] else nodelist.split("]")[0] + "]"
    if "[" not in head:
        return head
    prefix, ranges = head.split("[", 1)
    first = ranges.rstrip("]").split(",")[0].split("-")[0]
    return prefix + first


def read_env(environ=None) -> DistributedEnv:
    """torchrun's variables win; SLURM's are used when a job step was started with srun."""
    env = os.environ if environ is None else environ
    if "RANK" in env and "WORLD_SIZE" in env:
        local_world = int(env.get("LOCAL_WORLD_SIZE", env.get("WORLD_SIZE")))
        return DistributedEnv(rank=int(env["RANK"]), world_size=int(env["WORLD_SIZE"]),
                              local_rank=int(env.get("LOCAL_RANK", 0)), local_world_size=local_world,
                              node_rank=int(env.get("GROUP_RANK", env.get("NODE_RANK", int(env["RANK"]) // local_world))),
                              master_addr=env.get("MASTER_ADDR", "127.0.0.1"),
                              master_port=int(env.get("MASTER_PORT", 29500)))
    if "SLURM_PROCID" in env and int(env.get("SLURM_NTASKS", 1)) > 1:
        world = int(env["SLURM_NTASKS"])
        nodes = int(env.get("SLURM_NNODES", 1))
        return DistributedEnv(rank=int(env["SLURM_PROCID"]), world_size=world,
                              local_rank=int(env.get("SLURM_LOCALID", 0)), local_world_size=world // nodes,
                              node_rank=int(env.get("SLURM_NODEID", 0)),
                              master_addr=env.get("MASTER_ADDR") or _first_slurm_host(env.get("SLURM_JOB_NODELIST", "127.0.0.1")),
                              master_port=int(env.get("MASTER_PORT", 29500)))
    return DistributedEnv()


def init_distributed(env: DistributedEnv | None = None, backend: str | None = None,
                     timeout_minutes: float | None = None) -> DistributedEnv:
    """Join the process group (NCCL on CUDA, gloo on CPU); sets the CUDA device. No-op for one process.
    ``timeout_minutes``: how long a collective waits for the other ranks before it fails (torch's
    default otherwise), so a hung or dead rank ends the job instead of blocking it."""
    env = env or read_env()
    if torch.cuda.is_available():
        torch.cuda.set_device(env.local_rank % torch.cuda.device_count())
    if env.distributed and not dist.is_initialized():
        os.environ.setdefault("MASTER_ADDR", env.master_addr)
        os.environ.setdefault("MASTER_PORT", str(env.master_port))
        backend = backend or ("nccl" if torch.cuda.is_available() else "gloo")
        timeout = {"timeout": datetime.timedelta(minutes=timeout_minutes)} if timeout_minutes else {}
        dist.init_process_group(backend=backend, rank=env.rank, world_size=env.world_size, **timeout)
    return env


def cleanup() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()


def world_size() -> int:
    return dist.get_world_size() if dist.is_initialized() else 1


def rank() -> int:
    return dist.get_rank() if dist.is_initialized() else 0


def is_main_process() -> bool:
    return rank() == 0


def barrier() -> None:
    if dist.is_initialized():
        dist.barrier()


def all_reduce_sum(tensor: torch.Tensor) -> torch.Tensor:
    if dist.is_initialized():
        dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
    return tensor


def all_gather_objects(obj):
    """A list with every rank's ``obj`` (rank order)."""
    if not dist.is_initialized():
        return [obj]
    out = [None] * dist.get_world_size()
    dist.all_gather_object(out, obj)
    return out


def set_cpu_affinity(mode: str, env: DistributedEnv) -> list[int] | None:
    """Pin this GPU process to CPUs near its GPU as ``--affinity MODE`` says (:mod:`utils.affinity`), and
    say so: one line per rank, a ``note:`` line on stderr for anything not as expected (unreadable
    topology, fewer cores than GPUs). Returns the CPUs, or None where affinity was left alone; never
    raises for the machine's sake."""
    pinned = affinity.pin(mode, env.local_rank, env.local_world_size)
    for note in pinned.notes:
        print(f"note: rank {env.rank}: {note}", file=sys.stderr, flush=True)
    print(f"rank {env.rank}: {pinned.line}", flush=True)
    return pinned.cpus

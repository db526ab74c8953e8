"""Process-group setup from torchrun or SLURM variables, and the few collectives the recipe uses.

Rank and world size come from torchrun or SLURM. The process group is set up under a store prefix of its own per
torchrun attempt (so a restart never reads a dead attempt's addresses), within ``--rendezvous_timeout``.
``set_cpu_affinity`` pins each rank (:mod:`bart.runtime.affinity`) and prints one line per rank.
"""
from __future__ import annotations

import atexit
import datetime
import gc
import os
import re
import sys
import time
import uuid
from dataclasses import dataclass

import torch
import torch.distributed as dist

from bart.errors import DistributedTimeout, UserError, one_line
from bart.runtime import affinity


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


DEFAULT_RENDEZVOUS_TIMEOUT_S = 600.0  # as torchrun's own rendezvous: how long the processes wait for each other
_RDZV = "bart_rdzv"  # this module's keys in the launcher's store
_HEARTBEAT_PREFIX = "bart_hb/{token}"  # the heartbeats' (bart.runtime.heartbeat), per attempt
_ATTEMPT: list = []  # the token of this process's attempt (attempt_store)
_POLL_S = 0.05


def init_distributed(env: DistributedEnv | None = None, backend: str | None = None,
                     timeout_minutes: float | None = None,
                     rendezvous_timeout_s: float | None = None,
                     heartbeat_timeout_s: float | None = None) -> DistributedEnv:
    """Join the process group (NCCL on CUDA, gloo on CPU); sets the CUDA device. No-op for one process.
    ``timeout_minutes``: how long a collective waits for the other ranks before it fails (torch's
    default otherwise), so a hung or dead rank ends the job instead of blocking it.
    ``rendezvous_timeout_s`` (``--rendezvous_timeout``): how long the processes wait for each other at
    start-up; a process that does not come is named in one line (:class:`RendezvousTimeout`).
    ``heartbeat_timeout_s`` (``--heartbeat_timeout``; None: 60 s, 0: off): a rank whose process stops (SIGSTOP,
    a frozen machine) ends the job that long after, named in one line (:mod:`bart.runtime.heartbeat`).

    The group is set up under a key prefix of the launcher's store that only this attempt's processes
    share (:func:`attempt_store`): torchrun keeps one store across ``--max_restarts`` restarts (static and
    c10d rendezvous alike) and torch's own ``env://`` set-up would read the dead attempt's addresses
    from it (gloo: "Connection refused", or a hang until the timeout)."""
    env = env or read_env()
    if torch.cuda.is_available():
        torch.cuda.set_device(env.local_rank % torch.cuda.device_count())
    if env.distributed and not dist.is_initialized():
        os.environ.setdefault("MASTER_ADDR", env.master_addr)
        os.environ.setdefault("MASTER_PORT", str(env.master_port))
        backend = backend or ("nccl" if torch.cuda.is_available() else "gloo")
        waited = rendezvous_timeout_s or DEFAULT_RENDEZVOUS_TIMEOUT_S
        launcher = _launcher_store(env.rank, env.world_size, waited)
        store = attempt_store(env.rank, env.world_size, waited, store=launcher)
        timeout = datetime.timedelta(minutes=timeout_minutes) if timeout_minutes else None
        if timeout is not None:
            store.set_timeout(timeout)
        dist.init_process_group(backend=backend, store=store, rank=env.rank, world_size=env.world_size,
                                **({"timeout": timeout} if timeout is not None else {}))
        restart = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
        if env.is_main and restart not in ("", "0"):
            print(f"[distributed] torchrun restart {restart} of {os.environ.get('TORCHELASTIC_MAX_RESTARTS', '?')}: "
                  f"all {env.world_size} processes joined again", flush=True)
        start_heartbeat(env, store, heartbeat_timeout_s)
    return env


_HEARTBEAT: list = []  # this process's bart.runtime.heartbeat.Heartbeat, stopped by cleanup()


def start_heartbeat(env: DistributedEnv, attempt: dist.PrefixStore, timeout_s: float | None) -> None:
    """This rank's heartbeat (:mod:`bart.runtime.heartbeat`) under this attempt's prefix, over a store connection of
    its own to MASTER_ADDR:MASTER_PORT (torchrun's agent store, or rank 0's); ``timeout_s`` 0: none."""
    from bart.runtime import heartbeat

    timeout_s = heartbeat.DEFAULT_HEARTBEAT_TIMEOUT_S if timeout_s is None else timeout_s
    if not timeout_s or _HEARTBEAT:
        return
    client = heartbeat.store_client(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]),
                                    2 * heartbeat.interval_for(timeout_s))
    own = dist.PrefixStore(_HEARTBEAT_PREFIX.format(token=_ATTEMPT[-1]), client)
    _HEARTBEAT.append(heartbeat.Heartbeat(own, env.rank, env.world_size, timeout_s).start())
    atexit.register(stop_heartbeat)  # a process that ends (well or not) is not a hung one: its launcher sees it


def stop_heartbeat() -> None:
    while _HEARTBEAT:
        _HEARTBEAT.pop().stop()


class RendezvousTimeout(DistributedTimeout):
    """The processes of a job did not all arrive within ``--rendezvous_timeout``."""


def _launcher_store(rank: int, world_size: int, timeout_s: float):
    """The store the launcher points the processes at (``env://``: MASTER_ADDR/MASTER_PORT): under torchrun
    its agent's, which lives across restarts; else one rank 0 serves."""
    try:
        store, _, _ = next(dist.rendezvous("env://", rank, world_size,
                                           timeout=datetime.timedelta(seconds=timeout_s)))
    except RuntimeError as err:  # DistNetworkError, DistStoreError: no store there within the timeout
        taken = port_in_use_line(err, "MASTER_PORT")
        if taken:  # rank 0 serves the store itself (srun, or RANK/WORLD_SIZE set by hand) and its port is taken
            raise UserError(f"rank {rank} of {world_size}: {taken}") from None
        where = f"{os.environ.get('MASTER_ADDR')}:{os.environ.get('MASTER_PORT')}"
        raise RendezvousTimeout(
            f"rank {rank} of {world_size}: could not reach the rendezvous store at {where} within "
            f"--rendezvous_timeout {timeout_s:g} s ({one_line(err)[:200]}); check MASTER_ADDR/MASTER_PORT, or "
            f"raise --rendezvous_timeout if the nodes start further apart") from None
    return store


_PORT_IN_USE = re.compile(r"port: (\d+).*EADDRINUSE|EADDRINUSE.*port: (\d+)", re.S)


def port_in_use_line(err: BaseException, flag: str) -> str | None:
    """The line for a rendezvous store that could not listen because its port is taken (torch's DistNetworkError
    "... port: N ... EADDRINUSE", anywhere in ``err``'s chain), naming the port and the fix; None for any other
    error. ``flag``: how the port was given (``--master_port``, ``MASTER_PORT``)."""
    seen = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        found = _PORT_IN_USE.search(str(err))
        if found:
            port = found.group(1) or found.group(2)
            return (f"the rendezvous port {port} ({flag}) is already in use on this machine (another job's "
                    f"rendezvous, or another program): give another one (MASTER_PORT=<a free port>, the same on every "
                    f"node; the scripts pick a free one themselves on one node when MASTER_PORT is not set)")
        err = err.__cause__ or err.__context__
    return None


def attempt_store(rank: int, world_size: int, timeout_s: float, store=None):
    """A prefix of the launcher's store (``store``: given in tests) that only the processes of this start
    share, whatever keys an earlier attempt left there. Rank 0 publishes a new random token; each other
    rank acknowledges the token it reads with a nonce of its own and goes on once rank 0 has echoed that
    nonce under that token: a token read from a dead attempt is never echoed with a live nonce, so that
    rank reads again. Every wait ends after ``timeout_s`` with one line naming the ranks missing."""
    store = store if store is not None else _launcher_store(rank, world_size, timeout_s)
    deadline = time.monotonic() + timeout_s
    leader = f"{_RDZV}/leader"
    if rank == 0:
        token = uuid.uuid4().hex
        store.set(leader, token)
        acks = {r: f"{_RDZV}/{token}/ack/{r}" for r in range(1, world_size)}
        missing = set(acks)
        while missing:
            missing = {r for r in missing if not store.check([acks[r]])}
            if missing and time.monotonic() > deadline:
                listed = ", ".join(str(r) for r in sorted(missing)[:8]) + (" ..." if len(missing) > 8 else "")
                raise RendezvousTimeout(
                    f"rank 0 of {world_size}: {len(missing)} process(es) did not join within --rendezvous_timeout "
                    f"{timeout_s:g} s (rank {listed}): one failed to start (see its log) or its node did not "
                    f"start; raise --rendezvous_timeout if the nodes start further apart")
            if missing:
                time.sleep(_POLL_S)
        for r, key in acks.items():
            store.set(f"{_RDZV}/{token}/go/{r}", store.get(key))
    else:
        nonce, acked = uuid.uuid4().hex.encode(), None
        while True:
            token = store.get(leader).decode() if store.check([leader]) else None
            if token is not None and token != acked:
                store.set(f"{_RDZV}/{token}/ack/{rank}", nonce)
                acked = token
            go = f"{_RDZV}/{token}/go/{rank}"
            if token is not None and store.check([go]) and store.get(go) == nonce:
                break
            if time.monotonic() > deadline:
                raise RendezvousTimeout(
                    f"rank {rank} of {world_size}: rank 0 did not "
                    f"{'start' if token is None else 'answer'} the process group within --rendezvous_timeout "
                    f"{timeout_s:g} s: rank 0's process failed to start (see its log) or its node did not start; "
                    f"raise --rendezvous_timeout if the nodes start further apart")
            time.sleep(_POLL_S)
    _ATTEMPT.append(token)
    return dist.PrefixStore(f"{_RDZV}/{token}/pg", store)


def cleanup() -> None:
    """The end of a run that went well on every rank, in an order that cannot deadlock (see :func:`outlive_reducer`):
    what the run left unreachable (a model wrapper in a reference cycle, a stopped run's) is collected first, while
    the group is whole, so that no DDP Reducer is left to destroy it later; then a barrier, so that no rank closes
    its connections while a peer is still in the last collective (gloo aborts a process whose peer hung up
    mid-operation). After the barrier every rank is at its end: the heartbeats stop (none is a hung rank) and the
    group is destroyed: its last reference is a Python one, which torch drops with the GIL released."""
    if dist.is_initialized():
        gc.collect()
        dist.barrier()
        stop_heartbeat()
        dist.destroy_process_group()


_AFTER_REDUCER = "_process_group_after_reducer"  # a DDP wrapper's last attribute (outlive_reducer)


def outlive_reducer(wrapper: torch.nn.Module) -> torch.nn.Module:
    """Keep ``wrapper``'s (a DistributedDataParallel's) process group alive until its Reducer is gone, however and
    whenever the wrapper is freed; returns the wrapper.

    Why: a gloo group is destroyed by whatever drops its last reference, and its destructor waits for its worker
    threads. A worker that finished a collective still holds the work's tensors, and releasing a tensor that has a
    Python object needs the GIL (torch's PyObject preservation). The group's Python object is freed with the GIL
    released (torch binds it so); the Reducer, a C++ object freed with its Python wrapper, is not: a Reducer
    dropping the last reference (after ``destroy_process_group``, when the trainer goes) joined the workers while
    holding the GIL one of them was waiting for, and both ranks hung at 0% CPU (issue 52: ``~Reducer`` ->
    ``~ProcessGroupGloo`` -> ``thread::join`` in the main thread; ``~AsyncBarrierWork`` -> ``~AsyncAllgatherWork``
    -> ``decref_pyobject`` -> ``take_gil`` in gloo's worker). A reference to the group's Python object stored after
    every attribute DDP set (the Reducer, its Logger) is dropped after them when the wrapper's attributes are
    freed (in the order they were set), so the Reducer never holds the last reference."""
    wrapper.__dict__.pop(_AFTER_REDUCER, None)  # set again: last again
    setattr(wrapper, _AFTER_REDUCER, wrapper.process_group)
    return wrapper


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
    """Pin this GPU process to CPUs near its GPU as ``--affinity MODE`` says (:mod:`bart.runtime.affinity`), and
    say so: one line per rank, a ``note:`` line on stderr for anything not as expected (unreadable
    topology, fewer cores than GPUs). Returns the CPUs, or None where affinity was left alone; never
    raises for the machine's sake."""
    pinned = affinity.pin(mode, env.local_rank, env.local_world_size)
    for note in pinned.notes:
        print(f"note: rank {env.rank}: {note}", file=sys.stderr, flush=True)
    print(f"rank {env.rank}: {pinned.line}", flush=True)
    return pinned.cpus

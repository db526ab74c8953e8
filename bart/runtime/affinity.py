"""CPU affinity of GPU processes (``--affinity``), with the modes of NVIDIA's reference recipes.

Each process of a node is pinned to CPUs near its GPU:

- ``socket``: every CPU of the GPU's NUMA node (shared by the GPUs of that node);
- ``single``: the first core of the GPU's NUMA node (shared, one CPU);
- ``single_unique``: one core of its own per GPU, near it (one CPU);
- ``socket_unique_interleaved`` (the default): the cores of a NUMA node dealt out among the GPUs on it
  in turn (core i to GPU i mod k), each with its SMT siblings;
- ``socket_unique_continuous``: the same in contiguous blocks (floor(cores / k) each);
- ``disabled``: affinity left as the process found it.

Differences from the reference: everything happens inside the CPUs this process may use
(``os.sched_getaffinity``), so two jobs that a scheduler gave different CPU sets never pin the same
CPUs; physical cores are told apart by their SMT siblings (any number per core); a GPU whose node has
none of those CPUs, or fewer cores than GPUs, gets a note and a shared or nearest choice instead of a
crash; a topology that cannot be read is a note and the allowed CPUs treated as one socket.

Where a GPU is: NVML (``pynvml``, if importable: the GPU's NUMA node from its memory affinity, else its
CPU mask), else sysfs (``/sys/bus/pci/devices/<bus id>/numa_node``), else ``nvidia-smi topo -m``. NUMA
nodes' CPUs come from ``/sys/devices/system/node/node*/cpulist``, SMT siblings from
``/sys/devices/system/cpu/cpu*/topology/thread_siblings_list``. Every reader takes the sysfs root or the
command's output, so tests describe a machine with files. Nothing here knows about BART.
"""
from __future__ import annotations

import glob
import math
import os
import re
import subprocess
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from bart.errors import UserError

MODES = ("socket", "single", "single_unique", "socket_unique_interleaved", "socket_unique_continuous", "disabled")
DEFAULT_MODE = "socket_unique_interleaved"  # the reference's default (training_base.py)


def check_mode(mode: str) -> str:
    if mode not in MODES:
        raise UserError(f"--affinity {mode!r} is not a CPU affinity mode; use one of {', '.join(MODES)}")
    return mode


# -- CPU lists ----------------------------------------------------------------------------------------
def parse_cpulist(text: str) -> list[int]:
    """Linux's list format, ``0-3,8,10-11`` -> [0, 1, 2, 3, 8, 10, 11]; ValueError when it is not one."""
    cpus: set[int] = set()
    for part in text.strip().split(","):
        part = part.strip()
        if not part:
            continue
        low, _, high = part.partition("-")
        first, last = int(low), int(high or low)
        if last < first:
            raise ValueError(f"descending range {part!r}")
        cpus.update(range(first, last + 1))
    return sorted(cpus)


def format_cpulist(cpus) -> str:
    """[0, 1, 2, 3, 8] -> ``0-3,8`` (sorted, runs as ranges)."""
    cpus = sorted(set(cpus))
    runs: list[str] = []
    i = 0
    while i < len(cpus):
        j = i
        while j + 1 < len(cpus) and cpus[j + 1] == cpus[j] + 1:
            j += 1
        runs.append(str(cpus[i]) if i == j else f"{cpus[i]}-{cpus[j]}")
        i = j + 1
    return ",".join(runs)


def _read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None


# -- the machine --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Topology:
    """``allowed``: the CPUs this process may run on; ``nodes``: NUMA node -> its CPUs; ``siblings``:
    CPU -> the hardware threads of its core (itself included). Missing parts are empty."""
    allowed: frozenset
    nodes: dict = field(default_factory=dict)
    siblings: dict = field(default_factory=dict)

    def cores(self, cpus) -> list[tuple[int, ...]]:
        """The physical cores among ``cpus`` & allowed, each as its usable threads (lowest first), in
        order of their first thread."""
        usable = set(cpus) & self.allowed
        seen: set[int] = set()
        cores = []
        for cpu in sorted(usable):
            if cpu in seen:
                continue
            threads = tuple(sorted((set(self.siblings.get(cpu, ())) | {cpu}) & usable))
            seen.update(threads)
            cores.append(threads)
        return cores


def read_topology(root: str = "/", allowed=None) -> tuple[Topology, list[str]]:
    """The NUMA nodes and SMT siblings under ``root`` (``/`` on a real machine), and notes on what could
    not be read. ``allowed``: the process's CPUs (default: ``os.sched_getaffinity(0)``)."""
    notes = []
    allowed = frozenset(os.sched_getaffinity(0) if allowed is None else allowed)
    nodes = {}
    for path in glob.glob(os.path.join(root, "sys/devices/system/node/node[0-9]*/cpulist")):
        text = _read(path)
        try:
            nodes[int(os.path.basename(os.path.dirname(path))[4:])] = frozenset(parse_cpulist(text or ""))
        except ValueError:
            notes.append(f"unreadable NUMA CPU list {path}: {text!r}")
    nodes = {n: cpus for n, cpus in nodes.items() if cpus}  # memory-only nodes have no CPUs
    if not nodes:
        notes.append("no NUMA node CPU lists (sys/devices/system/node/node*/cpulist)")
    siblings = {}
    for path in glob.glob(os.path.join(root, "sys/devices/system/cpu/cpu[0-9]*/topology/thread_siblings_list")):
        text = _read(path)
        try:
            threads = frozenset(parse_cpulist(text or ""))
        except ValueError:
            continue
        for cpu in threads:
            siblings[cpu] = threads
    if not siblings:
        notes.append("no SMT sibling lists (sys/devices/system/cpu/cpu*/topology/thread_siblings_list): "
                     "every CPU counted as a core")
    return Topology(allowed, nodes, siblings), notes


@dataclass(frozen=True)
class Gpu:
    """A local rank's GPU: ``index`` as this process numbers it (CUDA), ``physical`` as nvidia-smi and
    NVML number it (None when CUDA_VISIBLE_DEVICES names it otherwise), ``pci`` its sysfs address."""
    index: int
    physical: int | None = None
    pci: str | None = None


def cuda_gpus(count: int) -> list[Gpu]:
    """The GPUs of local ranks 0..count-1 (rank r on CUDA device r mod device count), with their PCI
    addresses from torch where it reports them."""
    import torch

    n = torch.cuda.device_count()
    visible = [v.strip() for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
    gpus = []
    for rank in range(count):
        index = rank % n
        physical = (int(visible[index]) if index < len(visible) and visible[index].isdigit() else None) \
            if visible else index
        props = torch.cuda.get_device_properties(index)
        parts = [getattr(props, f"pci_{name}_id", None) for name in ("domain", "bus", "device")]
        pci = f"{parts[0]:04x}:{parts[1]:02x}:{parts[2]:02x}.0" if None not in parts else None
        gpus.append(Gpu(index, physical, pci))
    return gpus


# -- where each GPU is: its CPUs, and a few words saying how that was found ---------------------------
Place = tuple  # (frozenset of CPUs, description)


def _mask_bits(words) -> list[int]:
    """NVML's bitmasks: 64-bit words, word j bit b -> 64 * j + b."""
    return [64 * j + b for j, word in enumerate(words) for b in range(64) if int(word) >> b & 1]


def _node_place(nodes_of_gpu, topology: Topology, how: str) -> Place | None:
    nodes_of_gpu = sorted(set(nodes_of_gpu))
    if not nodes_of_gpu or any(n not in topology.nodes for n in nodes_of_gpu):
        return None
    cpus = frozenset().union(*(topology.nodes[n] for n in nodes_of_gpu))
    word = "node" if len(nodes_of_gpu) == 1 else "nodes"
    return cpus, f"NUMA {word} {format_cpulist(nodes_of_gpu)} ({how})"


def nvml_places(gpus, topology: Topology, nvml) -> list[Place | None]:
    """Through NVML (a ``pynvml`` module): the GPU's NUMA node(s) from its memory affinity, else its
    ideal CPU mask. Raises what NVML raises (the caller turns it into a note)."""
    nvml.nvmlInit()
    try:
        cpu_words = max(1, math.ceil((max(topology.allowed | set(topology.siblings), default=0) + 1) / 64))
        node_words = max(1, math.ceil((max(topology.nodes, default=0) + 1) / 64))
        places = []
        for gpu in gpus:
            if gpu.pci is not None:
                handle = nvml.nvmlDeviceGetHandleByPciBusId(gpu.pci)
            elif gpu.physical is not None:
                handle = nvml.nvmlDeviceGetHandleByIndex(gpu.physical)
            else:
                places.append(None)
                continue
            place = None
            if hasattr(nvml, "nvmlDeviceGetMemoryAffinity") and topology.nodes:
                try:
                    scope = getattr(nvml, "NVML_AFFINITY_SCOPE_NODE", 0)
                    words = nvml.nvmlDeviceGetMemoryAffinity(handle, node_words, scope)
                    place = _node_place(_mask_bits(words), topology, "NVML")
                except Exception:  # older drivers: not supported; the CPU mask below answers
                    place = None
            if place is None:
                cpus = frozenset(_mask_bits(nvml.nvmlDeviceGetCpuAffinity(handle, cpu_words)))
                place = (cpus, "its CPU mask (NVML)") if cpus else None
            places.append(place)
        return places
    finally:
        try:
            nvml.nvmlShutdown()
        except Exception:
            pass


def sysfs_place(gpu: Gpu, topology: Topology, root: str = "/") -> Place | None:
    """``<root>/sys/bus/pci/devices/<pci>/numa_node`` (-1: none; then the device's local_cpulist)."""
    if gpu.pci is None:
        return None
    device = os.path.join(root, "sys/bus/pci/devices", gpu.pci)
    text = _read(os.path.join(device, "numa_node"))
    if text is not None and text.lstrip("-").isdigit() and int(text) >= 0:
        place = _node_place([int(text)], topology, "sysfs")
        if place is not None:
            return place
    text = _read(os.path.join(device, "local_cpulist"))
    try:
        cpus = frozenset(parse_cpulist(text)) if text else frozenset()
    except ValueError:
        return None
    return (cpus, "its PCI local CPU list (sysfs)") if cpus else None


_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def parse_topo_matrix(output: str) -> dict[int, tuple[str | None, str | None]]:
    """``nvidia-smi topo -m`` -> {GPU index: (CPU Affinity, NUMA Affinity)} as printed (None: no such
    column or N/A). Columns are found by counting the device columns before ``CPU Affinity``."""
    lines = [_ANSI.sub("", line) for line in output.splitlines()]
    header = next((line.split() for line in lines if "CPU" in line.split() and "Affinity" in line), None)
    if header is None:
        return {}
    devices = header.index("CPU")
    has_numa = "NUMA" in header[devices:]
    rows = {}
    for line in lines:
        tokens = line.split()
        match = re.fullmatch(r"GPU(\d+)", tokens[0]) if tokens else None
        if not match or len(tokens) < devices + 2:
            continue
        cpu = tokens[devices + 1]
        numa = tokens[devices + 2] if has_numa and len(tokens) > devices + 2 else None
        rows[int(match.group(1))] = tuple(None if v in (None, "N/A") else v for v in (cpu, numa))
    return rows


def smi_place(gpu: Gpu, topology: Topology, rows: dict) -> Place | None:
    if gpu.physical is None or gpu.physical not in rows:
        return None
    cpu_text, numa_text = rows[gpu.physical]
    try:
        if numa_text:
            place = _node_place(parse_cpulist(numa_text), topology, "nvidia-smi")
            if place is not None:
                return place
        if cpu_text:
            cpus = frozenset(parse_cpulist(cpu_text))
            return (cpus, "its CPU affinity (nvidia-smi)") if cpus else None
    except ValueError:
        return None
    return None


def run_topo_matrix() -> str | None:
    """``nvidia-smi topo -m``'s output, or None without nvidia-smi."""
    try:
        out = subprocess.run(["nvidia-smi", "topo", "-m"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout if out.returncode == 0 else None


def _import_nvml():
    try:
        import pynvml
    except Exception:
        return None
    return pynvml


def locate(gpus, topology: Topology, root: str = "/", nvml=None, topo_matrix: Callable[[], str | None] = run_topo_matrix
           ) -> tuple[list[Place | None], list[str]]:
    """Each GPU's place: NVML, else sysfs, else nvidia-smi; None where no source knows it."""
    notes = []
    places: list = [None] * len(gpus)
    if nvml is not None:
        try:
            places = nvml_places(gpus, topology, nvml)
        except Exception as err:
            notes.append(f"NVML did not answer ({' '.join(str(err).split()) or type(err).__name__})")
    for i, gpu in enumerate(gpus):
        if places[i] is None:
            places[i] = sysfs_place(gpu, topology, root)
    if any(p is None for p in places):
        output = topo_matrix()
        rows = parse_topo_matrix(output) if output else {}
        for i, gpu in enumerate(gpus):
            if places[i] is None:
                places[i] = smi_place(gpu, topology, rows)
    unknown = [gpu.index for gpu, p in zip(gpus, places) if p is None]
    if unknown:
        notes.append(f"NUMA node of GPU{'s' * (len(unknown) > 1)} {format_cpulist(unknown)} unknown (no answer from "
                     f"NVML, sysfs numa_node or nvidia-smi topo -m): the {len(topology.allowed)} allowed CPUs "
                     f"counted as one socket")
    return places, notes


# -- the choice ---------------------------------------------------------------------------------------
def plan(mode: str, places, topology: Topology) -> tuple[list[list[int]], list[list[str]]]:
    """Every local rank's CPUs (physical cores first, then their SMT siblings) and notes, for local
    ranks 0..len(places)-1 whose GPUs are at ``places`` (None: unknown)."""
    check_mode(mode)
    allowed = topology.allowed
    sets, notes = [], []
    for rank, place in enumerate(places):
        mine = []
        cpus = frozenset(place[0]) & allowed if place else frozenset()
        if place and not cpus:
            mine.append(f"GPU of local rank {rank} is on {place[1]}: CPUs {format_cpulist(place[0])}, none of them "
                        f"among the CPUs this job may use ({format_cpulist(allowed)}); pinned among those instead")
        sets.append(cpus or allowed)
        notes.append(mine)
    cores = [topology.cores(s) for s in sets]

    def spread(chosen) -> list[int]:
        return [c[0] for c in chosen] + [t for c in chosen for t in c[1:]]

    if mode == "disabled":
        return [sorted(allowed) for _ in places], notes
    if mode == "socket":
        return [spread(c) for c in cores], notes
    if mode == "single":
        return [[c[0][0]] for c in cores], notes
    groups: dict[frozenset, list[int]] = {}
    for rank, s in enumerate(sets):
        groups.setdefault(s, []).append(rank)
    result: list[list[int]] = [[] for _ in places]
    if mode == "single_unique":
        taken: set[int] = set()
        for rank, own in enumerate(cores):
            free = [c for c in own if c[0] not in taken]
            if free:
                result[rank] = [free[0][0]]
                taken.add(free[0][0])
            else:
                group = groups[sets[rank]]
                result[rank] = [own[group.index(rank) % len(own)][0]]
                notes[rank].append(f"{len(group)} GPUs share the {len(own)} cores of {_where(places[rank])}: "
                                   f"local rank {rank} shares core {result[rank][0]}")
        return result, notes
    for ranks in groups.values():
        own, k = cores[ranks[0]], len(ranks)
        for i, rank in enumerate(ranks):
            if len(own) < k:
                chosen = [own[i % len(own)]]
                notes[rank].append(f"{k} GPUs share the {len(own)} cores of {_where(places[rank])}: "
                                   f"local rank {rank} shares core {chosen[0][0]}")
            elif mode == "socket_unique_interleaved":
                chosen = own[i::k]
            else:
                per = len(own) // k
                chosen = own[i * per:(i + 1) * per]
            result[rank] = spread(chosen)
    return result, notes


def _where(place) -> str:
    return place[1] if place else "the allowed CPUs"


# -- doing it -----------------------------------------------------------------------------------------
def set_process_affinity(cpus) -> None:
    """Pin the calling thread and every thread that still had its old CPU set (threads that CUDA or a
    library started already), as torch's NUMA binding does; threads started later inherit it."""
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, cpus)
    me = threading.get_native_id()
    for name in os.listdir("/proc/self/task") if os.path.isdir("/proc/self/task") else ():
        try:
            tid = int(name)
            if tid != me and os.sched_getaffinity(tid) == before:
                os.sched_setaffinity(tid, cpus)
        except (OSError, ValueError):
            pass  # the thread ended meanwhile, or may not be changed


@dataclass
class Host:
    """Where ``pin`` reads the machine and sets the affinity; tests give fakes."""
    root: str = "/"
    nvml: object = None  # a pynvml module; None: imported if installed
    topo_matrix: Callable[[], str | None] = run_topo_matrix
    gpus: Callable[[int], list] = cuda_gpus
    getaffinity: Callable[[], set] | None = None
    setaffinity: Callable[[list], None] = set_process_affinity


@dataclass
class Pinning:
    """What ``pin`` did: ``cpus`` set (None: affinity left alone), ``line`` says it in one line,
    ``notes`` what was not as expected."""
    cpus: list | None
    line: str
    notes: list = field(default_factory=list)


def pin(mode: str, local_rank: int, local_world_size: int, host: Host | None = None) -> Pinning:
    """Pin this process (local rank ``local_rank`` of ``local_world_size`` GPU processes on the node) as
    ``mode`` says. A topology that cannot be read, or an affinity the OS refuses, is a note, never an
    exception; only an unknown mode raises (UserError)."""
    check_mode(mode)
    host = host or Host()
    if mode == "disabled":
        return Pinning(None, "CPU affinity: disabled (left as the process started)")
    try:
        allowed = set(host.getaffinity() if host.getaffinity else os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return Pinning(None, f"CPU affinity {mode}: not supported on this platform (left alone)")
    topology, notes = read_topology(host.root, allowed)
    try:
        gpus = host.gpus(local_world_size)
    except Exception as err:  # no usable CUDA: no GPU to be near
        gpus, notes = [Gpu(i) for i in range(local_world_size)], notes + [f"GPUs not listed ({err})"]
    nvml = host.nvml if host.nvml is not None else _import_nvml()
    places, found = locate(gpus, topology, host.root, nvml, host.topo_matrix)
    sets, per_rank = plan(mode, places, topology)
    notes = notes + found + per_rank[local_rank]
    cpus = sets[local_rank]
    try:
        host.setaffinity(cpus)
    except OSError as err:
        notes.append(f"the OS refused CPUs {format_cpulist(cpus)} ({err.strerror or err}): affinity left alone")
        return Pinning(None, f"CPU affinity {mode}: not set", notes)
    cores = len(topology.cores(cpus))
    smt = len(cpus) - cores
    gpu, place = gpus[local_rank], places[local_rank]
    line = (f"CPU affinity {mode}: CPUs {format_cpulist(cpus)} ({cores} core{'s' * (cores != 1)}"
            f"{f' + {smt} SMT sibling' + 's' * (smt != 1) if smt else ''}) for GPU {gpu.index} on "
            f"{place[1] if place else 'an unknown NUMA node'}")
    return Pinning(cpus, line, notes)

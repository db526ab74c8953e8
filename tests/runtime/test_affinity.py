"""--affinity: the reference's CPU affinity modes on faked machines (sysfs laid out in a temp folder, NVML
and nvidia-smi as doubles), inside the CPUs a job was given; and the flag on pretrain.py / finetune.py."""
import os
import shutil

import pytest
import torch

from bart.runtime import affinity
from bart.runtime.affinity import Gpu, Host, Topology, format_cpulist, parse_cpulist

# Two sockets x 8 cores, 2 threads per core, Linux numbering: cores 0-7 (node 0), 8-15 (node 1), their
# second threads 16-23 and 24-31. Eight GPUs, four per node (a DGX A100's bus ids).
SOCKETS, CORES = 2, 8
BUSES = ("07", "0f", "47", "4e", "87", "90", "b7", "bd")
NODE_OF_GPU = (0, 0, 0, 0, 1, 1, 1, 1)
ALL = frozenset(range(32))


def node_cpus(node):
    return sorted(range(node * CORES, (node + 1) * CORES)) + sorted(range(16 + node * CORES, 16 + (node + 1) * CORES))


def write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text + "\n")


@pytest.fixture
def machine(tmp_path):
    """The sysfs files of the machine above under tmp_path."""
    root = str(tmp_path)
    for node in range(SOCKETS):
        write(f"{root}/sys/devices/system/node/node{node}/cpulist", f"{node * 8}-{node * 8 + 7},{16 + node * 8}-{23 + node * 8}")
    write(f"{root}/sys/devices/system/node/node2/cpulist", "")  # a memory-only node (CXL/HBM) has no CPUs
    for cpu in range(32):
        write(f"{root}/sys/devices/system/cpu/cpu{cpu}/topology/thread_siblings_list", f"{cpu % 16},{cpu % 16 + 16}")
    for bus, node in zip(BUSES, NODE_OF_GPU):
        write(f"{root}/sys/bus/pci/devices/0000:{bus}:00.0/numa_node", str(node))
    return root


def gpus(n=8, first=0):
    return [Gpu(i, first + i, f"0000:{BUSES[first + i]}:00.0") for i in range(n)]


def host(root, allowed=ALL, n_first=0, nvml=None, smi=None, calls=None, gpu_list=None):
    calls = [] if calls is None else calls
    return Host(root=root, nvml=nvml, topo_matrix=lambda: smi, getaffinity=lambda: set(allowed),
                gpus=lambda count: gpu_list if gpu_list is not None else gpus(count, n_first), setaffinity=calls.append)


def pinned(mode, root, n=8, **kw):
    """Every local rank's CPUs and notes, each rank pinned by its own call of pin as in a real job."""
    out = []
    for rank in range(n):
        calls = []
        result = affinity.pin(mode, rank, n, host(root, calls=calls, **kw))
        assert calls == ([result.cpus] if result.cpus is not None else [])
        out.append(result)
    return out


def test_cpulists_read_and_written_as_linux_does():
    assert parse_cpulist("0-3,8,10-11\n") == [0, 1, 2, 3, 8, 10, 11]
    assert parse_cpulist("") == []
    assert format_cpulist([11, 0, 1, 2, 3, 8, 10]) == "0-3,8,10-11"
    with pytest.raises(ValueError):
        parse_cpulist("3-1")
    with pytest.raises(ValueError):
        parse_cpulist("zero")


def test_topology_from_sysfs(machine):
    topology, notes = affinity.read_topology(machine, ALL)
    assert notes == []
    assert topology.nodes == {0: frozenset(node_cpus(0)), 1: frozenset(node_cpus(1))}  # node 2: memory only
    assert topology.siblings[3] == topology.siblings[19] == frozenset({3, 19})
    assert topology.cores([19, 3, 4]) == [(3, 19), (4,)]  # a core by its usable threads, first thread first


# Expected CPUs of local ranks 0, 1, 3, 4 and 7 (GPUs 0-3 on node 0, 4-7 on node 1): physical cores first,
# then their SMT siblings; node 0's cores 0-7, node 1's 8-15.
EXPECTED = {
    "socket": {0: node_cpus(0), 3: node_cpus(0), 4: node_cpus(1), 7: node_cpus(1)},
    "single": {0: [0], 1: [0], 3: [0], 4: [8], 7: [8]},
    "single_unique": {0: [0], 1: [1], 3: [3], 4: [8], 7: [11]},
    "socket_unique_interleaved": {0: [0, 4, 16, 20], 1: [1, 5, 17, 21], 3: [3, 7, 19, 23], 4: [8, 12, 24, 28],
                                  7: [11, 15, 27, 31]},
    "socket_unique_continuous": {0: [0, 1, 16, 17], 1: [2, 3, 18, 19], 3: [6, 7, 22, 23], 4: [8, 9, 24, 25],
                                 7: [14, 15, 30, 31]},
}


@pytest.mark.parametrize("mode", sorted(EXPECTED))
def test_each_mode_pins_near_the_gpu_physical_cores_first(machine, mode):
    results = pinned(mode, machine)
    for rank, cpus in EXPECTED[mode].items():
        assert results[rank].cpus == cpus, (rank, results[rank].line)
    for rank, result in enumerate(results):
        assert set(result.cpus) <= set(node_cpus(NODE_OF_GPU[rank])), rank  # the GPU's own node
        assert result.notes == []
        assert f"for GPU {rank} on NUMA node {NODE_OF_GPU[rank]} (sysfs)" in result.line
    if "unique" in mode:  # no two ranks share a CPU
        flat = [c for r in results for c in r.cpus]
        assert len(flat) == len(set(flat))
    assert "CPUs 0,4,16,20 (2 cores + 2 SMT siblings)" in pinned("socket_unique_interleaved", machine)[0].line


TOPO_MATRIX = (  # nvidia-smi topo -m of driver 535 on this machine: underlined header, NICs, GPU NUMA ID
    "\x1b[4m\tGPU0\tGPU1\tGPU2\tGPU3\tGPU4\tGPU5\tGPU6\tGPU7\tNIC0\tNIC1\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\x1b[0m\n"
    + "".join(f"GPU{g}\t" + "\t".join(" X " if h == g else "NV12" for h in range(8))
              + f"\tPXB\tSYS\t{format_cpulist(node_cpus(NODE_OF_GPU[g]))}\t{NODE_OF_GPU[g]}\t\tN/A\n" for g in range(8))
    + "NIC0\tPXB\tPXB\tSYS\tSYS\tSYS\tSYS\tSYS\tSYS\t X \tSYS\t\t\t\t\n"
    "\nLegend:\n\n  X    = Self\n  SYS  = Connection traversing PCIe\n\nNIC Legend:\n\n  NIC0: mlx5_0\n")
OLD_MATRIX = (  # older drivers: no NUMA Affinity column, spaces
    "        GPU0    GPU1    CPU Affinity\n"
    "GPU0     X      SYS     0-7,16-23\n"
    "GPU1    SYS      X      8-15,24-31\n")


class FakeNvml:
    """pynvml's calls that bart.runtime.affinity makes, answering for the machine above."""
    NVML_AFFINITY_SCOPE_NODE = 0

    def __init__(self, fail=False):
        self.fail = fail

    def nvmlInit(self):
        if self.fail:
            raise RuntimeError("NVML Shared Library Not Found")

    def nvmlShutdown(self):
        pass

    def nvmlDeviceGetHandleByPciBusId(self, bus_id):
        return BUSES.index(bus_id.split(":")[1])

    def nvmlDeviceGetHandleByIndex(self, index):
        return index

    def nvmlDeviceGetMemoryAffinity(self, handle, node_words, scope):
        assert scope == 0 and node_words == 1
        return [1 << NODE_OF_GPU[handle]]

    def nvmlDeviceGetCpuAffinity(self, handle, cpu_words):
        assert cpu_words == 1
        return [sum(1 << c for c in node_cpus(NODE_OF_GPU[handle]))]


class OldDriverNvml(FakeNvml):
    def nvmlDeviceGetMemoryAffinity(self, handle, node_words, scope):
        raise RuntimeError("Not Supported")


def test_every_source_finds_the_same_node(machine, tmp_path_factory):
    topology, _ = affinity.read_topology(machine, ALL)
    expected = [(frozenset(node_cpus(n)), n) for n in NODE_OF_GPU]
    no_pci = tmp_path_factory.mktemp("no_pci")  # sysfs with nodes and siblings but no PCI devices
    shutil.copytree(os.path.join(machine, "sys/devices/system"), no_pci / "sys/devices/system")
    cases = {
        "NVML": dict(root=machine, nvml=FakeNvml()),
        "its CPU mask (NVML)": dict(root=machine, nvml=OldDriverNvml()),
        "sysfs": dict(root=machine, nvml=FakeNvml(fail=True)),
        "nvidia-smi": dict(root=str(no_pci), topo_matrix=lambda: TOPO_MATRIX),
    }
    for how, kw in cases.items():
        places, notes = affinity.locate(gpus(), topology, kw["root"], kw.get("nvml"), kw.get("topo_matrix", lambda: None))
        assert [p[0] for p in places] == [e[0] for e in expected], how
        assert all(how in p[1] for p in places), (how, places)
        assert notes == (["NVML did not answer (NVML Shared Library Not Found)"] if how == "sysfs" else []), how
    # nvidia-smi numbers GPUs physically: CUDA_VISIBLE_DEVICES=5,6 makes local ranks 0, 1 GPUs 5 and 6
    visible = [Gpu(0, 5), Gpu(1, 6)]
    places, _ = affinity.locate(visible, topology, str(no_pci), None, lambda: TOPO_MATRIX)
    assert [p[0] for p in places] == [frozenset(node_cpus(1))] * 2
    old = affinity.parse_topo_matrix(OLD_MATRIX)
    assert old == {0: ("0-7,16-23", None), 1: ("8-15,24-31", None)}
    places, _ = affinity.locate([Gpu(0, 1)], topology, str(no_pci), None, lambda: OLD_MATRIX)
    assert places == [(frozenset(node_cpus(1)), "its CPU affinity (nvidia-smi)")]


def test_two_jobs_given_different_cpus_never_share_one(machine):
    """Two 2-GPU jobs on node 0, a scheduler gave each half of node 0's cores (with siblings): every
    mode pins each job inside its own set, and the unique modes keep its ranks apart."""
    job_a = {0, 1, 2, 3, 16, 17, 18, 19}
    job_b = {4, 5, 6, 7, 20, 21, 22, 23}
    for mode in sorted(EXPECTED):
        a = pinned(mode, machine, n=2, allowed=job_a)
        b = pinned(mode, machine, n=2, allowed=job_b, n_first=2)
        used_a, used_b = {c for r in a for c in r.cpus}, {c for r in b for c in r.cpus}
        assert used_a <= job_a and used_b <= job_b and not used_a & used_b, mode
        if "unique" in mode:
            assert not set(a[0].cpus) & set(a[1].cpus) and not set(b[0].cpus) & set(b[1].cpus), mode
    assert [r.cpus for r in pinned("socket_unique_interleaved", machine, n=2, allowed=job_a)] == [[0, 2, 16, 18],
                                                                                                  [1, 3, 17, 19]]


def test_fewer_cores_than_gpus_is_a_note_not_a_crash(machine):
    """A job given one core (two threads) on node 0 for 8 GPUs: everyone shares it, with notes."""
    for mode in sorted(EXPECTED):
        results = pinned(mode, machine, allowed={0, 16})
        for rank, result in enumerate(results):
            assert result.cpus and set(result.cpus) <= {0, 16}, (mode, rank)
            text = " ".join(result.notes)
            if NODE_OF_GPU[rank] == 1:
                assert "none of them among the CPUs this job may use (0,16)" in text, (mode, text)
            elif mode in ("single_unique", "socket_unique_interleaved", "socket_unique_continuous") and rank:
                assert "GPUs share the 1 cores" in text, (mode, rank, text)
    assert pinned("socket_unique_interleaved", machine, allowed={0, 16})[3].cpus == [0, 16]


def test_no_topology_at_all(tmp_path):
    """No sysfs, NVML or nvidia-smi (a container without /sys): the allowed CPUs count as one socket;
    the unique modes still keep ranks apart, with notes; nothing raises."""
    results = pinned("socket_unique_interleaved", str(tmp_path), n=2, allowed=range(8),
                     gpu_list=[Gpu(0, 0, "0000:07:00.0"), Gpu(1, 1, "0000:0f:00.0")])
    assert [r.cpus for r in results] == [[0, 2, 4, 6], [1, 3, 5, 7]]
    assert any("no NUMA node CPU lists" in n for n in results[0].notes)
    assert any("every CPU counted as a core" in n for n in results[0].notes)
    assert any("NUMA node of GPUs 0-1 unknown" in n for n in results[0].notes)
    assert "an unknown NUMA node" in results[0].line
    single = pinned("single_unique", str(tmp_path), n=2, allowed=range(8), gpu_list=[Gpu(0), Gpu(1)])
    assert [r.cpus for r in single] == [[0], [1]]


def test_unreadable_topology_and_refused_affinity_are_notes(machine, tmp_path):
    write(f"{machine}/sys/devices/system/node/node1/cpulist", "garbage")
    result = affinity.pin("socket", 0, 1, host(machine, nvml=FakeNvml(fail=True)))
    assert result.cpus == node_cpus(0)
    assert any("unreadable NUMA CPU list" in n and "garbage" in n for n in result.notes)

    def refuse(cpus):
        raise OSError(22, "Invalid argument")
    result = affinity.pin("socket", 0, 1, Host(root=machine, setaffinity=refuse, getaffinity=lambda: ALL,
                                                gpus=lambda n: gpus(n), topo_matrix=lambda: None))
    assert result.cpus is None and "not set" in result.line
    assert any("the OS refused CPUs 0-7,16-23 (Invalid argument)" in n for n in result.notes)

    def no_cuda(n):
        raise RuntimeError("Found no NVIDIA driver on your system")
    result = affinity.pin("single_unique", 1, 2, Host(root=str(tmp_path), getaffinity=lambda: {0, 1, 2},
                                                      gpus=no_cuda, topo_matrix=lambda: None, setaffinity=lambda c: None))
    assert result.cpus == [1] and any("Found no NVIDIA driver" in n for n in result.notes)


def test_disabled_touches_nothing(machine):
    def forbidden(*_):
        raise AssertionError("disabled must not read or set affinity")
    before = os.sched_getaffinity(0)
    result = affinity.pin("disabled", 0, 8, Host(root=machine, gpus=forbidden, getaffinity=forbidden,
                                                 setaffinity=forbidden, topo_matrix=forbidden))
    assert result.cpus is None and "disabled" in result.line
    assert os.sched_getaffinity(0) == before
    with pytest.raises(affinity.UserError, match="--affinity 'sockets' is not a CPU affinity mode"):
        affinity.pin("sockets", 0, 1, Host())


def test_threads_started_before_pinning_follow(tmp_path):
    """set_process_affinity pins threads that already run with the old set (CUDA's, a library's), as
    torch's NUMA binding does; it is set on this process for real, then restored."""
    import threading

    before = os.sched_getaffinity(0)
    target = {min(before)}
    seen, release = {}, threading.Event()

    def worker():
        release.wait()
        seen["cpus"] = os.sched_getaffinity(0)
    thread = threading.Thread(target=worker)
    thread.start()
    try:
        affinity.set_process_affinity(sorted(target))
        assert os.sched_getaffinity(0) == target
    finally:
        release.set()
        thread.join()
        affinity.set_process_affinity(sorted(before))
    assert seen["cpus"] == target
    assert os.sched_getaffinity(0) == before


# -- the flag and its wiring -----------------------------------------------------------------------
def _parse(script, *extra):
    import finetune
    import pretrain
    base = ["--config_path", "c.json", "--data_dir", "d", "--max_steps", "1"]
    if script == "finetune.py":
        return finetune.parse_args(base + ["--from_scratch", *extra])
    return pretrain.parse_args(base + list(extra))


@pytest.mark.parametrize("script", ["pretrain.py", "finetune.py"])
def test_flag_parses_with_the_reference_default_and_bad_value_is_one_line(script, capsys):
    assert _parse(script).distributed.affinity == "socket_unique_interleaved"
    for mode in affinity.MODES:
        assert _parse(script, "--affinity", mode).distributed.affinity == mode
    with pytest.raises(SystemExit) as stop:
        _parse(script, "--affinity", "numa")
    assert stop.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "--affinity" in err and "'numa'" in err and "socket_unique_continuous" in err and "disabled" in err


@pytest.fixture
def gpu_rank(monkeypatch, machine):
    """setup_distributed as local rank 4 of 8 on a GPU node (the machine above), the process group and
    the pinning itself faked; returns the CPU sets the run asked for."""
    from bart.runtime import distributed as dist_utils
    for name, value in (("RANK", "4"), ("WORLD_SIZE", "8"), ("LOCAL_RANK", "4"), ("LOCAL_WORLD_SIZE", "8")):
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(dist_utils, "init_distributed", lambda env, timeout_minutes=None, rendezvous_timeout_s=None, **_: env)
    calls = []
    real = affinity.Host
    monkeypatch.setattr(affinity, "Host", lambda: real(root=machine, topo_matrix=lambda: None, gpus=gpus,
                                                       getaffinity=lambda: ALL, setaffinity=calls.append))
    return calls


def test_setup_distributed_pins_as_the_flag_says(gpu_rank, capsys):
    from bart.cli import start
    env = start.setup_distributed(_parse("pretrain.py"))
    assert env.local_rank == 4 and gpu_rank == [[8, 12, 24, 28]]  # GPU 4 is on node 1
    out = capsys.readouterr().out.strip().splitlines()
    assert out == ["rank 4: CPU affinity socket_unique_interleaved: CPUs 8,12,24,28 (2 cores + 2 SMT siblings) "
                   "for GPU 4 on NUMA node 1 (sysfs)"]
    start.setup_distributed(_parse("finetune.py", "--affinity", "single_unique"))
    assert gpu_rank[-1] == [8] and "CPU affinity single_unique: CPUs 8 (1 core)" in capsys.readouterr().out
    gpu_rank.clear()
    start.setup_distributed(_parse("finetune.py", "--affinity", "disabled"))
    assert gpu_rank == [] and capsys.readouterr().out == ""


def test_cpu_run_leaves_affinity_alone_and_says_so(monkeypatch, capsys):
    from bart.cli import start
    from bart.runtime import distributed as dist_utils
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(dist_utils, "set_cpu_affinity", lambda *a: pytest.fail("pinned a CPU run"))
    before = os.sched_getaffinity(0)
    start.setup_distributed(_parse("pretrain.py"))
    assert capsys.readouterr().err == ""  # the default: nothing to say
    start.setup_distributed(_parse("pretrain.py", "--affinity", "socket"))
    assert "--affinity socket pins GPU processes near their GPU; this run has no GPU" in capsys.readouterr().err
    assert os.sched_getaffinity(0) == before


def test_topology_dataclass_defaults():
    assert Topology(frozenset({0, 1})).cores([1, 0, 5]) == [(0,), (1,)]

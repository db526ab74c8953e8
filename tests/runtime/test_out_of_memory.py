"""Out of memory named in one line (exit 2, no traceback): the size asked for and the limit that applies (the
machine's RAM, a ulimit, a cgroup v1 or v2 limit, the GPU's), before the kernel kills where the memory ahead
is known; the memory training adds per parameter is the chosen optimizer's."""
import json
import os
import subprocess
import sys

import pytest
import torch

from tests.helpers import ROOT
from tests.helpers.entry import run_entry as _main
from tests.helpers.user_inputs import (
    CONFIG,
    FT,
    PT,
)
from tests.helpers.user_inputs import argv as _argv
from tests.helpers.user_inputs import one_line as _one_line


@pytest.mark.parametrize("script", ["pretrain.py", "finetune.py"])
def test_a_model_too_big_for_the_memory_is_one_line(script, user_inputs, tmp_path, capsys):
    """One line naming the size asked for, the limit and what to reduce; no allocator traceback."""
    config = tmp_path / "huge.json"
    config.write_text(json.dumps({**CONFIG, "encoder_ffn_dim": 2 ** 38}))  # fc1 alone: 32 TiB
    out = str(tmp_path / "out")
    argv = _argv(PT if script == "pretrain.py" else FT + ["--from_scratch"], user_inputs, out, cfg=str(config))
    line = _one_line(capsys, _main(script, argv), script)
    assert "out of memory: asked for 32.0 TiB; the limit that applies is " in line, line
    assert "--train_batch_size" in line and "d_model, layers, ffn dims" in line, line


def test_out_of_memory_under_a_ulimit_names_the_limit_and_the_size(user_inputs, tmp_path):
    """pretrain.py under a real RLIMIT_AS (``ulimit -v``) smaller than the machine's RAM: the line names the
    ulimit that refuses the size, not the machine's RAM."""
    import resource

    from bart.runtime.memory import host_memory

    limit = 6 * 2 ** 30
    if (host_memory()[0] or 0) <= limit:
        pytest.skip("the machine's RAM is below the ulimit this test sets")
    config = tmp_path / "huge.json"
    config.write_text(json.dumps({**CONFIG, "encoder_ffn_dim": 2 ** 38}))  # fc1 alone: 32 TiB
    argv = _argv(PT, user_inputs, str(tmp_path / "out"), cfg=str(config))
    out = subprocess.run([sys.executable, "pretrain.py", *argv], cwd=ROOT, capture_output=True, text=True, timeout=300,
                         env=dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=ROOT),
                         preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (limit, limit)))
    lines = [line for line in out.stderr.strip().splitlines() if not line.startswith(("note:", "LDDL - "))]
    assert out.returncode == 2 and len(lines) == 1, out.stderr[-3000:]
    assert lines[0].startswith("pretrain.py: error: out of memory: asked for 32.0 TiB; the limit that applies is this "
                               "process's RLIMIT_AS 6.0 GiB (ulimit -v), "), lines
    assert " of it in use (this machine has " in lines[0], lines


def _in_a_memory_cgroup(limit: int, command: list[str]):
    """``command`` run inside a new cgroup-v1 memory cgroup of ``limit`` bytes (swap included where the kernel
    accounts it); None where this machine does not let the test make one (no root, no v1 memory controller)."""
    folder = f"/sys/fs/cgroup/memory/bart_test_{os.getpid()}"
    try:
        os.mkdir(folder)
    except OSError:
        return None
    try:
        with open(os.path.join(folder, "memory.limit_in_bytes"), "w") as f:
            f.write(str(limit))
        if os.path.exists(os.path.join(folder, "memory.memsw.limit_in_bytes")):
            with open(os.path.join(folder, "memory.memsw.limit_in_bytes"), "w") as f:
                f.write(str(limit))
        return subprocess.run(["sh", "-c", f'echo $$ > {folder}/cgroup.procs && exec "$@"', "sh", *command], cwd=ROOT,
                              capture_output=True, text=True, timeout=300,
                              env=dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=ROOT))
    finally:
        os.rmdir(folder)


def test_out_of_memory_in_a_real_cgroup_is_one_line_before_the_kernel_kills(user_inputs, tmp_path):
    """finetune.py in a real memory cgroup whose limit holds the model (51M parameters, 0.2 GiB) but not its
    gradients and optimizer state: one line before training starts, not the kernel's kill (exit 137, no line)."""
    config = tmp_path / "wide.json"
    config.write_text(json.dumps({**CONFIG, "d_model": 768, "encoder_ffn_dim": 3072, "decoder_ffn_dim": 3072,
                                  "encoder_layers": 3, "decoder_layers": 3}))
    argv = _argv(FT + ["--from_scratch"], user_inputs, str(tmp_path / "out"), cfg=str(config))
    out = _in_a_memory_cgroup(900 * 2 ** 20, [sys.executable, "finetune.py", *argv])
    if out is None:
        pytest.skip("this machine does not let the test make a memory cgroup (cgroup v1, root)")
    lines = [line for line in out.stderr.strip().splitlines() if not line.startswith(("note:", "["))]
    assert out.returncode == 2 and len(lines) == 1, (out.returncode, out.stderr[-3000:])
    assert lines[0].startswith("finetune.py: error: out of memory ahead: training ") and \
        "parameters needs about " in lines[0] and "the cgroup's memory limit 900.0 MiB (/sys/fs/cgroup/memory/bart_test_" \
        in lines[0] and "--train_batch_size" in lines[0], lines


def _fake_root(tmp_path, cgroup_lines, files):
    for path, text in {"proc/self/cgroup": "\n".join(cgroup_lines) + "\n",
                       "proc/meminfo": "MemTotal:       67108864 kB\nMemAvailable:   33554432 kB\n", **files}.items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(text)
    return str(tmp_path)


@pytest.mark.parametrize("version", ["v2", "v1"])
def test_out_of_memory_in_a_cgroup_names_its_limit(tmp_path, version):
    """A SLURM job's cgroup (the job's limit on its folder; the step's below says none): the cgroup's limit is the
    one named, with its usage, and a size the allocator gave in MiB reads in MiB (not the machine's RAM, not
    "asked for 0.1 GiB")."""
    from bart.runtime.memory import out_of_memory

    gib = 2 ** 30
    if version == "v2":
        root = _fake_root(tmp_path, ["0::/system.slice/slurmstepd.scope/job_7/step_0"], {
            "sys/fs/cgroup/system.slice/slurmstepd.scope/job_7/memory.max": f"{4 * gib}\n",
            "sys/fs/cgroup/system.slice/slurmstepd.scope/job_7/step_0/memory.max": "max\n",
            "sys/fs/cgroup/system.slice/slurmstepd.scope/job_7/memory.current": f"{3 * gib}\n"})
        named = "the cgroup's memory.max 4.0 GiB (/sys/fs/cgroup/system.slice/slurmstepd.scope/job_7/memory.max)"
    else:
        root = _fake_root(tmp_path, ["5:cpuset:/slurm/uid_0/job_7", "4:memory:/slurm/uid_0/job_7/step_0"], {
            "sys/fs/cgroup/memory/slurm/uid_0/job_7/memory.limit_in_bytes": f"{4 * gib}\n",
            "sys/fs/cgroup/memory/slurm/uid_0/job_7/memory.usage_in_bytes": f"{3 * gib}\n",
            "sys/fs/cgroup/memory/slurm/uid_0/job_7/step_0/memory.limit_in_bytes": "9223372036854771712\n",
            "sys/fs/cgroup/memory/memory.limit_in_bytes": "9223372036854771712\n"})
        named = "the cgroup's memory limit 4.0 GiB (/sys/fs/cgroup/memory/slurm/uid_0/job_7/memory.limit_in_bytes)"
    err = RuntimeError("[enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: can't allocate memory: you "
                       "tried to allocate 67108864 bytes. Error code 12 (Cannot allocate memory)")
    said = out_of_memory(err, root=root)
    assert said.startswith(f"out of memory: asked for 64.0 MiB; the limit that applies is {named}"), said
    if version == "v2":
        assert ", 3.0 GiB of it in use (this machine has 64.0 GiB, 32.0 GiB available)" in said, said


def test_out_of_memory_of_unknown_size_says_so():
    """Python's MemoryError gives no size: the line says so instead of a size it does not know."""
    from bart.runtime.memory import UNKNOWN_SIZE, out_of_memory

    assert out_of_memory(MemoryError()).startswith(f"out of memory: asked for {UNKNOWN_SIZE}; the limit that applies")


def test_cuda_out_of_memory_reads_as_one_sentence():
    from bart.runtime.memory import out_of_memory
    err = torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 256.00 GiB. GPU 0 has a total capacity of "
                                 "139.80 GiB of which 120.12 GiB is free. Including non-PyTorch memory, ...")
    said = out_of_memory(err)
    assert said.startswith("out of GPU memory: asked for 256.00 GiB"), said
    assert out_of_memory(RuntimeError("shape mismatch")) is None


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_a_batch_too_big_for_the_gpu_is_one_line(user_inputs, tmp_path, capsys):
    """Logits of 256 rows x 32 tokens x a 4M-token vocabulary: 128 GiB asked of the GPU at the first update."""
    from tests.helpers.summaries import write_summarization_data
    config = tmp_path / "wide.json"
    config.write_text(json.dumps({**CONFIG, "vocab_size": 2 ** 22}))
    data = write_summarization_data(str(tmp_path / "data"), sizes=(("train", 256), ("val", 4), ("test", 4)))
    argv = _argv(FT + ["--from_scratch"], user_inputs, str(tmp_path / "out"), cfg=str(config), data=data)
    line = _one_line(capsys, _main("finetune.py", argv + ["--train_batch_size", "256"]), "finetune.py")
    assert line.startswith("finetune.py: error: out of GPU memory: asked for ") and " GiB free now)" in line, line


def test_the_memory_ahead_is_the_optimizers_own(tmp_path):
    """What training adds per parameter is the chosen optimizer's (bart.optim.TRAINING_BYTES): under a 1 GiB cgroup
    with 0.5 GiB in use, 50M parameters fit with Adafactor's factored state and not with AdamW's two moments."""
    from bart.optim import TRAINING_BYTES
    from bart.runtime.memory import MemoryAhead, check_training_fits

    gib = 2 ** 30
    root = _fake_root(tmp_path, ["0::/job"], {"sys/fs/cgroup/job/memory.max": f"{gib}\n",
                                              "sys/fs/cgroup/job/memory.current": f"{gib // 2}\n"})
    check_training_fits(50_000_000, TRAINING_BYTES["adafactor"], root=root)  # 191 MiB: fits
    with pytest.raises(MemoryAhead, match=r"training 50,000,000 parameters needs about 572\.2 MiB more"):
        check_training_fits(50_000_000, TRAINING_BYTES["adamw"], root=root)

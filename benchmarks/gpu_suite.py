"""The one-command GPU suite: versions, tests/e2e/test_gpu.py, the bf16 matmul peak and memory bandwidth
measured in the run, pretraining and fine-tuning throughput with MFU (this project against
transformers + fused AdamW), beam search against transformers, and the top kernels of one training
step and one decode step, in one Markdown report (OUT_DIR/report.md) with every part's raw log and
figures beside it (OUT_DIR/<part>.log, <part>.json; OUT_DIR/suite.json: statuses and figures).

    bash benchmarks/gpu_suite.sh OUT_DIR [--budget 540] [--parts tests,env,...] [--dry-run]

The parts run in this order: the tests first (correctness before speed), the versions, the peaks, training, beam
search, the profile, and the configuration matrix (every choice a user makes, each row one whole bart-base
fine-tuning job: benchmarks/config_matrix.py) with the time left; the matrix whole is a call of its own
(--parts matrix). Every part runs in its own process with a time limit. The limits
share the budget (default 540 s: one 9-minute command, a few seconds kept for the report): a part may
use the time left times its weight (the seconds it is expected to need on an H100; equal weights in a
dry run) over the weights of the parts still to run, so time a part leaves unused goes to the ones
after it. Compile time is reported apart from step time (a compiled contender's first update is timed
on its own); inductor's graph caches (FX graph and AOTAutograd, one cache folder for every part) let a
graph compiled once be reused by the contenders and parts that compile it again. When the suite ends
(or is stopped) the whole OUT_DIR is also written as one OUT_DIR.tar.gz beside it. A part that
fails, runs out of memory or out of time is reported as such (with the end of its log) and the next
part runs; report.md is rewritten after every part, and the training and beam-search parts keep the
rows they finished before being stopped. The parts run with $PYTHON, the interpreter gpu_suite.sh started this
script with (default: this one). Ctrl-C or SIGTERM ends the running part's processes (each
part runs in its own session) and leaves the report of what finished. Training and beam search run the existing benchmarks
(benchmarks/bench_gpu_training.py, bench_generation.py); the suite passes them the peaks its peaks
part measured, so every MFU and bandwidth share divides by the same figures.

--dry-run runs the same parts and commands on CPU (CUDA hidden from them) with a tiny model and tiny
shapes, one or two steps, two beams and small beam-search batches, pretrain512 without the contender pretrain128's
dry run already traced (DRY_CONTENDERS), and torch.compile's eager backend (dynamo traces the step, no code
generation): it shows the suite works before a GPU is lent. Its figures are not measurements.

For the suite's own tests, GPU_SUITE_FAULTS="part=error,part=oom,part=hang" replaces those parts'
commands with one that fails, raises torch.OutOfMemoryError, or sleeps past its limit.
"""
from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ElementTree

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, ROOT)
from gpu_suite_report import (  # noqa: E402, F401
    BEAM,
    DRY_BEAM,
    DRY_TRAIN_SHAPES,
    REPORT_ORDER,
    TARGETS,
    TRAIN_SHAPES,
    render,
)

from bart.errors import RunStopped, UserError  # noqa: E402
from bart.files.checkpoint_io import atomic_write_text  # noqa: E402

DEFAULT_BUDGET = 540.0
# Dense bf16 TFLOP/s and memory TB/s from NVIDIA's datasheets, by the device name torch reports
# ("NVIDIA H100 80GB HBM3" is the SXM part); first match wins, so specific names come first.
DATASHEET = (("gh200", 989.0, None), ("h100 pcie", 756.0, 2.0), ("h100 nvl", 835.0, 3.9), ("h100", 989.0, 3.35),
             ("h200 nvl", 835.0, 4.8), ("h200", 989.0, 4.8), ("a100 sxm4 80gb", 312.0, 2.039),
             ("a100 80gb pcie", 312.0, 1.935), ("a100", 312.0, 1.555))
FAULTS_ENV = "GPU_SUITE_FAULTS"
DRY_CONFIG = dict(d_model=32, encoder_layers=1, decoder_layers=1, encoder_attention_heads=4, decoder_attention_heads=4,
                  encoder_ffn_dim=64, decoder_ffn_dim=64, vocab_size=512, max_position_embeddings=128)


def datasheet_peaks(device_name: str) -> tuple:
    """(dense bf16 TFLOP/s, memory TB/s) of the datasheet for a torch device name; None where unknown."""
    name = device_name.lower().replace("-", " ")
    for key, tflops, tbps in DATASHEET:
        if key in name:
            return tflops, tbps
    return None, None


def part_limits(remaining: float, weights: list) -> float:
    """The limit of the next part: the time left times its weight over the weights still to run."""
    return remaining * weights[0] / sum(weights)


# ---------------------------------------------------------------------------------------------
# Parts run in their own processes: `gpu_suite.py --part NAME OUT_DIR [--dry-run]` for those
# implemented here (env, peaks, profile); the training, beam-search and test parts run their scripts.

def _write_json(path: str, value) -> None:
    atomic_write_text(path, json.dumps(value, indent=1))


def _config_values(dry_run: bool) -> dict:
    values = json.load(open(os.path.join(ROOT, "configs", "config.json")))
    return dict(values, **DRY_CONFIG) if dry_run else values


def part_env(out_dir: str, dry_run: bool) -> None:
    import importlib.metadata as metadata

    import torch

    def version(package):
        try:
            return metadata.version(package)
        except metadata.PackageNotFoundError:
            return None

    try:
        smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=60)
        driver = smi.stdout.strip().splitlines()[0].split(", ")[1] if smi.returncode == 0 and smi.stdout.strip() \
            else f"nvidia-smi failed: {(smi.stderr or smi.stdout).strip()[:200]}"
    except (OSError, subprocess.TimeoutExpired) as err:
        driver = f"nvidia-smi not available ({type(err).__name__})"
    from bart.optim import _apex_lamb
    fused_lamb = _apex_lamb() is not None  # importable with its CUDA extensions
    apex = version("apex")
    apex = (f"present ({apex or 'no version'}), FusedLAMB " + ("usable" if fused_lamb else "not usable")) \
        if apex or fused_lamb else "absent"
    cuda = torch.cuda.is_available()
    _write_json(os.path.join(out_dir, "env.json"), {
        "gpu": torch.cuda.get_device_name() if cuda else "none visible (CPU)",
        "gpu_memory_gib": torch.cuda.get_device_properties(0).total_memory / 2**30 if cuda else None,
        "gpu_count": torch.cuda.device_count() if cuda else 0, "driver": driver,
        "cuda": torch.version.cuda, "cudnn": torch.backends.cudnn.version() if cuda else None,
        "torch": torch.__version__, "transformers": version("transformers"), "apex": apex,
        "apex_fused_lamb": fused_lamb, "fp8_training": _fp8_problem() or "yes",
        "dllogger": version("dllogger"), "python": sys.version.split()[0],
        "container": os.environ.get("NVIDIA_PYTORCH_VERSION") or os.environ.get("PYTORCH_BUILD_VERSION")
        or "none (NVIDIA_PYTORCH_VERSION and PYTORCH_BUILD_VERSION not set)"})


def _fp8_problem():
    """Why --fp8 cannot run here (torchao missing, no GPU with float8 tensor cores), or None."""
    from bart.runtime.precision import Precision
    try:
        Precision("fp8").require_supported()
    except ValueError as err:
        return str(err)
    return None


def part_peaks(out_dir: str, dry_run: bool) -> None:
    import bench_generation
    import bench_gpu_training
    import torch
    device = "cpu" if dry_run else "cuda"
    size, nbytes = (256, 2**24) if dry_run else (8192, 2**30)
    _write_json(os.path.join(out_dir, "peaks.json"), {
        "device": torch.cuda.get_device_name() if device == "cuda" else "CPU",
        "matmul_size": size, "matmul_tflops": bench_gpu_training.measured_peak_tflops(size, device),
        "copy_bytes": nbytes, "bandwidth_bytes_s": bench_generation._copy_bandwidth(device, nbytes)})


def part_profile(out_dir: str, dry_run: bool, train_batch: int = 0) -> None:
    """Top kernels of one training step (this project, LAMB + fused cross-entropy, pretraining at 128)
    and of one beam-search decode step (XSum shape, batch 32, bf16, the middle step)."""
    import bench_gpu_training as training
    import torch
    from torch.profiler import ProfilerActivity, profile, schedule

    from bart.configuration import BartConfig
    from bart.modeling import BartForConditionalGeneration
    device = "cpu" if dry_run else "cuda"
    values = _config_values(dry_run)
    config = BartConfig(**values)
    torch.manual_seed(0)
    state = BartForConditionalGeneration(config).state_dict()
    batch, source, target = (DRY_TRAIN_SHAPES if dry_run else TRAIN_SHAPES)["pretrain128"]
    batch = train_batch or batch
    step, label = training.project_step_fn(state, config, "lamb_fce", device)
    train = training.profile_step(step, training.make_batches(2, batch, source, target, config.vocab_size,
                                                              device=device), device=device)
    result = {"train": dict(train, label=label, shape=f"batch {batch} x {source}/{target}")}
    _write_json(os.path.join(out_dir, "profile.json"), result)
    del step
    gc.collect()
    if device == "cuda":
        torch.cuda.empty_cache()

    beam = DRY_BEAM if dry_run else BEAM
    model = BartForConditionalGeneration(BartConfig(**dict(values, dropout=0.0)))
    model.load_state_dict(state)
    model = model.to(device, torch.bfloat16).eval()
    ids = torch.randint(4, config.vocab_size - 1, (beam["profile"], beam["source_length"]), device=device)
    ids[:, 0], ids[:, -1] = 0, 2
    settings = dict(num_beams=beam["num_beams"], max_length=beam["new_tokens"] + 1, min_length=beam["new_tokens"],
                    no_repeat_ngram_size=3, length_penalty=1.0, early_stopping=True)
    middle = beam["new_tokens"] // 2
    decoder = model.model.decoder
    with torch.no_grad():
        model.generate(ids, **settings)  # warm-up
        activity = ProfilerActivity.CUDA if device == "cuda" else ProfilerActivity.CPU
        # one profiler step per decoder call: the active one is decode step `middle`, from its decoder
        # call to the next (decoder, LM head, log-softmax, processors, beam step, cache reorder)
        with profile(activities=[activity], schedule=schedule(wait=middle - 1, warmup=1, active=1, repeat=1)) as prof:
            forward = decoder.forward

            def stepping(*args, **kwargs):
                prof.step()
                return forward(*args, **kwargs)

            decoder.forward = stepping
            try:
                model.generate(ids, **settings)
            finally:
                del decoder.forward
        training.synchronize(device)
    total, rows = training.top_kernels(prof, device)
    training.print_kernels("one decode step", total, rows)
    result["decode"] = {"total_ms": total, "rows": rows, "label": "this project, bf16",
                        "shape": f"batch {ids.shape[0]} x beams {beam['num_beams']}, source {beam['source_length']}, "
                                 f"step {middle} of {beam['new_tokens']}"}
    _write_json(os.path.join(out_dir, "profile.json"), result)


# the configuration matrix (benchmarks/config_matrix.py) on the GPU: bart-base with a short generation, 3 updates of
# 2 sequences a process per job; the dry run: one row, one process, the tiny model (GPT-2's vocabulary)
# no_repeat_ngram_size 3 (the real configs' own): a random bart-base after 3 updates repeats one token under
# plain beam search (seen on an H200), which makes the token comparisons with transformers trivially equal
MATRIX_CONFIG = {"min_length": 5, "max_length": 64, "num_beams": 2, "no_repeat_ngram_size": 3}
DRY_MATRIX_ROWS = ("fp32_eager",)
# the GPU's row order: the CUDA defaults and the GPU-only choices first (inductor, FP8, fp16's scaler), so the
# rows that fit the part's limit are the likeliest to break
GPU_MATRIX_ROWS = ("bf16_compiled", "fp8_compiled", "fp16_eager", "fp8_eager", "bf16_eager", "fp16_compiled",
                   "fp32_compiled", "fp32_eager")


def part_matrix(out_dir: str, dry_run: bool) -> None:
    """The configuration matrix's rows, each one whole fine-tuning job (stopped, resumed, evaluated, exported,
    loaded by transformers), before the timings: a broken configuration shows first. One process per GPU, at most
    two (NCCL runs one rank a GPU): on one GPU the strategies run in their single-process form (the model as it
    is); the dry run: one row in one process on CPU. matrix.json: each row's problems (none: it did the whole job),
    seconds and compile figures; the part fails (exit 1) when a row has a problem."""
    from bart.tokenization.build_tokenizer import build_tokenizer_folder
    from benchmarks import config_matrix
    from benchmarks.corpora import write_summarization_data

    inputs = os.path.join(out_dir, "matrix_inputs")
    if dry_run:
        processes = 1
    else:
        import torch
        processes = max(1, min(2, torch.cuda.device_count()))
    data = write_summarization_data(os.path.join(inputs, "data"), sizes=(("train", 8 * processes), ("val", 2),
                                                                          ("test", 2)))
    tokenizer = build_tokenizer_folder(os.path.join(inputs, "tokenizer"))
    if dry_run:
        # GPT-2's vocabulary (the tokenizer's), weights large enough for a random model to generate words
        config = dict(_config_values(True), vocab_size=50265, init_std=0.2, **MATRIX_CONFIG)
    else:
        with open(os.path.join(ROOT, "configs", "config_base.json")) as f:
            config = dict(json.load(f), **MATRIX_CONFIG)
    spec = config_matrix.make_spec(os.path.join(out_dir, "matrix_jobs"), data, tokenizer, config,
                     device="cpu" if dry_run else "cuda", rows=DRY_MATRIX_ROWS if dry_run else GPU_MATRIX_ROWS,
                     learning_rate=3e-3 if dry_run else 1e-4, resume_rtol=1e-6 if dry_run else 1e-3,
                     keep_weights=dry_run, summary=os.path.join(out_dir, "matrix.json"))
    spec_path = os.path.join(inputs, "spec.json")
    _write_json(spec_path, spec)
    if processes == 1:  # this process is the one (no launcher, no process group)
        code = config_matrix.main([spec_path])
    else:
        import socket
        with socket.socket() as free:  # a port for the launch's rendezvous
            free.bind(("127.0.0.1", 0))
            port = free.getsockname()[1]
        code = subprocess.call([sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={processes}",
                                f"--master_port={port}", "-m", "benchmarks.config_matrix", spec_path], cwd=ROOT)
    if code:
        raise SystemExit(code)


PART_FUNCTIONS = {"env": part_env, "peaks": part_peaks, "profile": part_profile, "matrix": part_matrix}


# ---------------------------------------------------------------------------------------------
# The driver: part commands, limits, statuses, the report.

# The parts in the order they run, with their weights: the seconds each needs on one GPU, measured on an H200 with
# cold compile caches (2026-11-29): tests/e2e/test_gpu.py 108 s; at 128 transformers 21 s, the model compiled in one
# graph 63 s (60 s of it the compile), the eager contenders 4 s each; FP8's compile is not measured yet, nor
# --compile_scope layers' on a GPU (on CPU it took 37% of the model's). The speed targets' parts come before the
# configuration matrix, which gets the time left (a bart-base row took 65 s to compile; run second, the matrix left
# the training parts short of time and finished no row). They add up to the 540 s budget (one 9-minute command) less the 10 s kept for
# the report.
PART_WEIGHTS = {"tests": 110, "env": 5, "peaks": 5, "pretrain128": 150, "pretrain512": 70, "finetune_xsum": 50,
                "finetune_lengths": 60, "beam": 50, "profile": 15, "matrix": 15}
PART_NAMES = tuple(PART_WEIGHTS)
# Each part: transformers and the default first (the targets' figures), then FP8 where it runs (at 128, after the
# default), then the candidates and the eager rows: a part stopped at its limit keeps the rows it finished.
# pretraining: transformers, the default (--compile: the model in one graph), transformers compiled (the peer of the
# 1.6x target), each layer compiled, eager LAMB and its fused loss; 512: the default first (its target), transformers,
# the layers; fine-tuning: eager AdamW before the compiled default (its compile is the longest wait), then the layers
CONTENDERS = {"pretrain128": "hf,lamb_compile,hf_compile,lamb_layers_compile,lamb,lamb_fce",
              "pretrain512": "lamb_compile,hf,lamb_layers_compile",
              "finetune_xsum": "hf,adamw,adamw_compile,adamw_layers_compile",
              # XSum's length distribution (bench_gpu_training --lengths xsum): transformers as its Trainer runs by
              # default (padded batches, eager), the default (compiled for any length), token-budget batches
              "finetune_lengths": "hf,adamw_compile,adamw_compile_tokens,adamw_tokens,adamw_layers_compile_tokens"}
LENGTHS = dict(examples=2000, batch=40)  # every contender trains on the same examples, in batches of 40 or budgets
DRY_LENGTHS = dict(examples=24, batch=4, source_length=64, target_length=8, warmup=1)
# the dry run: each contender's code path once, each part still with a compiled and an eager row
DRY_CONTENDERS = dict(CONTENDERS, pretrain512="lamb_compile,hf,lamb", finetune_xsum="hf,adamw,adamw_fce",
                      finetune_lengths="hf,adamw_compile_tokens")
FP8_CONTENDERS = {"pretrain128": "lamb_fce_fp8_compile"}  # where env.json says the GPU and torchao can run --fp8
FP8_AFTER = "lamb_compile"  # FP8's row comes right after the default's
BEAM_CONTENDERS = "ours,ours_compiled,hf"  # compile_generation (CUDA graphs) a contender of its own
TRAIN_STEPS, TRAIN_WARMUP = 5, 2  # timed updates and warm-up ones: the figures were stable at 8 and 3


TARBALL_SUFFIXES = (".md", ".log", ".json", ".xml", ".txt", ".csv")


class Suite:
    def __init__(self, out_dir: str, dry_run: bool, budget: float, parts: list, datasheet: tuple, started: float):
        self.out, self.dry_run, self.budget, self.parts = out_dir, dry_run, budget, parts
        self.datasheet_override = datasheet
        self.status: dict = {}  # part -> dict(status, seconds, limit, reason)
        self.started = started

    def path(self, name: str) -> str:
        return os.path.join(self.out, name)

    def figures(self, part: str):
        """The part's figures (its JSON, or the pytest XML of the tests), or None."""
        if part == "tests":  # pytest's XML; from its -v log when it was stopped before writing it
            return _junit_counts(self.path("tests.xml")) or _pytest_log_counts(self.path("tests.log"))
        try:
            with open(self.path(f"{part}.json")) as f:
                return json.load(f)
        except (OSError, ValueError):
            return None

    def datasheet(self) -> tuple:
        tflops, tbps = self.datasheet_override
        env = self.figures("env") or {}
        if self.dry_run:
            name = "NVIDIA H100 80GB HBM3"  # a stand-in, so that the dry run fills the same columns
        else:
            name = env.get("gpu") or (self.figures("peaks") or {}).get("device", "")
        found = datasheet_peaks(name)
        source = "H100 SXM, a stand-in for the dry run" if self.dry_run else name
        return tflops or found[0], tbps or found[1], source

    def command(self, part: str) -> list:
        py, dry = os.environ.get("PYTHON") or sys.executable, self.dry_run
        if part in PART_FUNCTIONS:
            command = [py, os.path.join(HERE, "gpu_suite.py"), "--part", part, self.out] + ["--dry-run"] * dry
            if part == "profile":  # at the batch the pretraining part could run
                rows = [r for r in (self.figures("pretrain128") or {}).get("rows", [])
                        if r.get("contender") == "lamb_fce"]
                if rows and rows[0].get("batch"):
                    command += ["--train_batch", str(rows[0]["batch"])]
            return command
        peaks = self.figures("peaks") or {}
        if part == "tests":
            return [py, "-m", "pytest", os.path.join(ROOT, "tests", "e2e", "test_gpu.py"), "-v",
                    "-p", "no:cacheprovider", f"--junitxml={self.path('tests.xml')}"]
        config = self.path("dry_run_config.json") if dry else os.path.join(ROOT, "configs", "config.json")
        if part == "beam":
            beam = DRY_BEAM if dry else BEAM
            command = [py, os.path.join(HERE, "bench_generation.py"), "--config", config, "--dtype", "bf16",
                       "--num_beams", str(beam["num_beams"]), "--new_tokens", str(beam["new_tokens"]),
                       "--source_length", str(beam["source_length"]), "--allow_mismatch",
                       "--json", self.path("beam.json"), "--batch_sizes", *map(str, beam["batch_sizes"]),
                       "--contenders", BEAM_CONTENDERS, "--device", "cpu" if dry else "cuda"]
            command += ["--compile_backend", "eager", "--threads", "1"] if dry else []
            if peaks.get("bandwidth_bytes_s"):
                command += ["--bandwidth", repr(peaks["bandwidth_bytes_s"] / 1e9)]
            return command
        if part == "finetune_lengths":
            lengths = DRY_LENGTHS if dry else LENGTHS
            command = [py, os.path.join(HERE, "bench_gpu_training.py"), "--lengths", "xsum", "--config", config,
                       "--contenders", (DRY_CONTENDERS if dry else CONTENDERS)[part],
                       "--json", self.path(f"{part}.json")]
            command += [arg for key, value in lengths.items() for arg in (f"--{key}", str(value))]
            return command + (["--device", "cpu", "--compile_backend", "eager"] if dry else [])
        batch, source, target = (DRY_TRAIN_SHAPES if dry else TRAIN_SHAPES)[part]
        contenders = (DRY_CONTENDERS if dry else CONTENDERS)[part]
        names = contenders.split(",")
        if "lamb" in names and (self.figures("env") or {}).get("apex_fused_lamb"):  # apex's LAMB and ours, both eager
            names.insert(names.index("lamb") + 1, "lamb_foreach")
            contenders = ",".join(names)
        if (self.figures("env") or {}).get("fp8_training") == "yes" and part in FP8_CONTENDERS:
            names = contenders.split(",")
            names.insert(names.index(FP8_AFTER) + 1 if FP8_AFTER in names else len(names), FP8_CONTENDERS[part])
            contenders = ",".join(names)
        shape = "xsum" if part == "finetune_xsum" else part
        command = [py, os.path.join(HERE, "bench_gpu_training.py"), "--config", config, "--shapes", shape,
                   "--contenders", contenders, "--batch", str(batch), "--source_length", str(source),
                   "--target_length", str(target), "--steps", "1" if dry else str(TRAIN_STEPS),
                   "--warmup", "1" if dry else str(TRAIN_WARMUP),
                   "--shrink_on_oom", "--json", self.path(f"{part}.json")]
        tflops = self.datasheet()[0]
        command += ["--peak_tflops", repr(tflops)] if tflops else []
        command += ["--measured_tflops", repr(peaks["matmul_tflops"])] if peaks.get("matmul_tflops") else []
        return command + (["--device", "cpu", "--compile_backend", "eager"] if dry else [])

    def run(self) -> int:
        os.makedirs(self.out, exist_ok=True)
        if self.dry_run:
            _write_json(self.path("dry_run_config.json"), _config_values(True))
        for part in self.parts:
            for stale in (f"{part}.json", f"{part}.log") + (("tests.xml",) if part == "tests" else ()):
                if os.path.exists(self.path(stale)):
                    os.remove(self.path(stale))
        deadline = self.started + self.budget - min(10.0, 0.05 * self.budget)  # kept for the report
        faults = _faults()
        todo = [p for p in PART_NAMES if p in self.parts]
        for i, part in enumerate(todo):
            remaining = deadline - time.time()
            if remaining < 1:
                self.status[part] = dict(status="not run: the suite's budget was spent", seconds=0, limit=0)
                self.write_report()
                continue
            limit = part_limits(remaining, [1.0 if self.dry_run else PART_WEIGHTS[p] for p in todo[i:]])
            part_start = time.time()
            try:
                self.status[part] = self.run_part(part, limit, faults.get(part))
            except Stopped as stop:  # the part's processes were ended; the report keeps what finished
                self.status[part] = dict(status=f"interrupted by {stop.signal}: the suite stopped here",
                                         seconds=time.time() - part_start, limit=limit)
                for later in todo[i + 1:]:
                    self.status[later] = dict(status="not run: the suite was stopped", seconds=0, limit=0)
                self.write_report()
                self.write_tarball()
                raise
            self.write_report()
        self.write_report()
        self.write_tarball()
        return 0

    def write_tarball(self) -> str:
        """OUT_DIR.tar.gz beside OUT_DIR: its report, logs and figures (TARBALL_SUFFIXES), written atomically.
        Weights and checkpoints stay out: on an H200 the matrix's bart-base checkpoints made the tarball outlast
        the suite's window, and none came back."""
        import tarfile
        target = self.out.rstrip(os.sep) + ".tar.gz"
        partial = target + ".partial"

        def text_only(info):
            return info if info.isdir() or info.name.endswith(TARBALL_SUFFIXES) else None

        with tarfile.open(partial, "w:gz") as tar:
            tar.add(self.out, arcname=os.path.basename(self.out.rstrip(os.sep)), filter=text_only)
        os.replace(partial, target)
        return target

    def run_part(self, part: str, limit: float, fault=None) -> dict:
        command = _fault_command(fault) if fault else self.command(part)
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [ROOT, HERE, os.environ.get("PYTHONPATH")])))
        # inductor's caches on, one folder for every part: a graph compiled once is reused where it comes again
        env.setdefault("TORCHINDUCTOR_FX_GRAPH_CACHE", "1")
        env.setdefault("TORCHINDUCTOR_AUTOGRAD_CACHE", "1")
        env.setdefault("TORCHINDUCTOR_CACHE_DIR", os.path.join(tempfile.gettempdir(), f"gpu_suite_inductor_{os.getuid()}"))
        if self.dry_run:
            env.update(CUDA_VISIBLE_DEVICES="", OMP_NUM_THREADS=env.get("OMP_NUM_THREADS", "1"))
        log_path = self.path(f"{part}.log")
        start = time.time()
        with open(log_path, "w") as log:
            log.write(f"$ {' '.join(command)}\n(limit {limit:.0f} s)\n")
            log.flush()
            with _stop_signals_held():  # one arriving while the part starts ends it below, not before it is known
                process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
                                           start_new_session=True)
            try:
                _raise_held()
                code = process.wait(timeout=limit)
            except subprocess.TimeoutExpired:
                _stop(process)
                code = None
            except Stopped:  # a part in its own session would run on without this
                _stop(process)
                raise
        seconds = time.time() - start
        tail = _last_line(log_path)
        if code is None:
            return dict(status=f"timed out after {limit:.0f} s", seconds=seconds, limit=limit, reason=tail)
        if code == 0:
            if self.figures(part) is None:
                return dict(status="failed: exited 0 without its figures", seconds=seconds, limit=limit, reason=tail)
            return dict(status="ok", seconds=seconds, limit=limit)
        if "OutOfMemoryError" in tail or "out of memory" in tail:  # the traceback's last line
            return dict(status="out of memory", seconds=seconds, limit=limit, reason=tail)
        if part == "tests" and code == 1 and self.figures("tests"):
            return dict(status="tests failed", seconds=seconds, limit=limit, reason=tail)
        return dict(status=f"failed (exit {code})", seconds=seconds, limit=limit, reason=tail)

    # -- the report ------------------------------------------------------------------------
    def write_report(self) -> None:
        text = render(self)
        atomic_write_text(self.path("report.md"), text)
        _write_json(self.path("suite.json"), {
            "dry_run": self.dry_run, "budget_s": self.budget, "elapsed_s": time.time() - self.started,
            "parts": self.status, "figures": {p: self.figures(p) for p in self.parts}})


class Stopped(RunStopped):
    """Ctrl-C, SIGTERM or SIGHUP reached the suite (a terminal, docker stop, a scheduler)."""

    def __init__(self, signum: int):
        self.signal = signal.Signals(signum).name
        self.exit_code = 128 + signum
        super().__init__(f"{self.signal}: the running part was ended; report.md has the parts that finished")


_HOLD: dict = {"on": False, "received": None}  # a stop signal that came while a part was being started


def _raise_stopped(signum, frame):
    if _HOLD["on"]:
        _HOLD["received"] = _HOLD["received"] or signum
        return
    raise Stopped(signum)


@contextlib.contextmanager
def _stop_signals_held():
    """A stop signal received inside is kept for :func:`_raise_held`: raised while ``subprocess.Popen`` was starting a
    part (its process already forked, its pid not yet known), it left that part running in its own session."""
    _HOLD["on"] = True
    try:
        yield
    finally:
        _HOLD["on"] = False


def _raise_held() -> None:
    received, _HOLD["received"] = _HOLD["received"], None
    if received is not None:
        raise Stopped(received)


def _junit_counts(path: str):
    try:
        suite = ElementTree.parse(path).getroot()
    except (OSError, ElementTree.ParseError):
        return None
    suite = suite if suite.tag == "testsuite" else suite.find("testsuite")
    counts = {k: int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped")}
    counts["passed"] = counts["tests"] - counts["failures"] - counts["errors"] - counts["skipped"]
    counts["failed_tests"] = [f"{case.get('classname')}::{case.get('name')}" for case in suite.iter("testcase")
                              if case.find("failure") is not None or case.find("error") is not None]
    skipped = [case.find("skipped") for case in suite.iter("testcase")]
    counts["skip_reasons"] = sorted({s.get("message", "") for s in skipped if s is not None})
    return counts


_OUTCOME = re.compile(r"^(\S+::\S+) (PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS)\b")


def _pytest_log_counts(path: str):
    """Counts from the lines of ``pytest -v`` (a run stopped before its XML), marked partial; or None."""
    try:
        found = [m.groups() for m in map(_OUTCOME.match, open(path, errors="replace")) if m]
    except OSError:
        return None
    if not found:
        return None
    outcome = {}
    for test, result in found:
        outcome[test] = result
    results = list(outcome.values())
    counts = {"tests": len(results), "failures": results.count("FAILED"), "errors": results.count("ERROR"),
              "skipped": results.count("SKIPPED") + results.count("XFAIL"), "partial": True, "skip_reasons": []}
    counts["passed"] = counts["tests"] - counts["failures"] - counts["errors"] - counts["skipped"]
    counts["failed_tests"] = [t for t, r in outcome.items() if r in ("FAILED", "ERROR")]
    return counts


def _faults() -> dict:
    spec = os.environ.get(FAULTS_ENV, "")
    faults = {}
    for item in filter(None, (s.strip() for s in spec.split(","))):
        part, _, kind = item.partition("=")
        if part not in PART_NAMES or kind not in ("error", "oom", "hang"):
            raise UserError(f"{FAULTS_ENV}: {item!r} is not PART=error|oom|hang with PART one of "
                            f"{', '.join(PART_NAMES)}")
        faults[part] = kind
    return faults


def _fault_command(kind: str) -> list:
    code = {"error": f"raise RuntimeError('injected failure ({FAULTS_ENV})')",
            "oom": f"import torch; raise torch.OutOfMemoryError('injected out of memory ({FAULTS_ENV})')",
            "hang": "import time; print('injected hang', flush=True); time.sleep(3600)"}[kind]
    return [sys.executable, "-c", code]


def _stop(process: subprocess.Popen) -> None:
    """SIGTERM to the part's process group, SIGKILL 5 s later if it is still there."""
    for sig, wait in ((signal.SIGTERM, 5), (signal.SIGKILL, 5)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def _last_line(path: str) -> str:
    """The last line of a log that is not a warning or profiler chatter: usually the error."""
    try:
        lines = [line.strip() for line in open(path, errors="replace").read().splitlines() if line.strip()]
    except OSError:
        return ""
    noise = ("USDT:", "warnings.warn", "Warning:")
    lines = [line for line in lines if not any(n in line for n in noise)]
    return lines[-1][:300] if lines else ""


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, got {text!r}")
    return value


def main(argv=None) -> int:
    started = time.time()
    from bart.cli.args import ArgumentParser  # errors in one line
    parser = ArgumentParser(prog="gpu_suite.py", description=__doc__,
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out_dir", help="folder for report.md and the raw logs (created)")
    parser.add_argument("--dry-run", "--dry_run", dest="dry_run", action="store_true",
                        help="CPU, tiny shapes, few steps: the same parts and report, figures not measurements")
    parser.add_argument("--budget", type=_positive, default=DEFAULT_BUDGET, help="seconds for the whole suite")
    parser.add_argument("--parts", default=",".join(PART_NAMES), help=f"comma-separated, of {', '.join(PART_NAMES)}")
    parser.add_argument("--datasheet_tflops", type=_positive, help="dense bf16 TFLOP/s (default: from the GPU's name)")
    parser.add_argument("--datasheet_tbps", type=_positive, help="memory TB/s (default: from the GPU's name)")
    parser.add_argument("--part", choices=sorted(PART_FUNCTIONS), help=argparse.SUPPRESS)  # a part's own process
    parser.add_argument("--train_batch", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.part:
        sys.path.insert(0, HERE)
        kwargs = {"train_batch": args.train_batch} if args.part == "profile" else {}
        PART_FUNCTIONS[args.part](os.path.abspath(args.out_dir), args.dry_run, **kwargs)
        return 0
    parts = [p.strip() for p in args.parts.split(",") if p.strip()]
    unknown = [p for p in parts if p not in PART_NAMES]
    if unknown or not parts:
        raise UserError(f"--parts {args.parts!r}: unknown part(s) {unknown}; choose from {', '.join(PART_NAMES)}")
    out_dir = os.path.abspath(args.out_dir)
    if os.path.exists(out_dir) and not os.path.isdir(out_dir):
        raise UserError(f"OUT_DIR {args.out_dir} is a file; give a folder for the report and logs")
    _faults()  # a malformed GPU_SUITE_FAULTS is refused before anything runs
    if not args.dry_run:
        import torch
        if not torch.cuda.is_available():
            raise UserError("no CUDA GPU is visible (torch.cuda.is_available() is False): the suite measures a GPU; "
                            "--dry-run runs its code paths on CPU")
    sys.path.insert(0, HERE)
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):  # parts run in their own sessions: ended here
        signal.signal(sig, _raise_stopped)
    suite = Suite(out_dir, args.dry_run, args.budget, parts, (args.datasheet_tflops, args.datasheet_tbps), started)
    code = suite.run()
    print(f"gpu_suite: report in {os.path.join(out_dir, 'report.md')}" + (" (dry run)" if args.dry_run else ""))
    for name, status in suite.status.items():
        print(f"  {name}: {status['status']} ({status['seconds']:.0f} s)")
    return code


if __name__ == "__main__":
    from bart.cli.exits import run_main
    run_main(lambda: sys.exit(main()), "gpu_suite.py")

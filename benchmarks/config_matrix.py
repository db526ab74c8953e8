"""The configuration matrix: every choice a GPU user makes, each row one whole fine-tuning job.

    python -m torch.distributed.run --nproc_per_node 2 -m benchmarks.config_matrix SPEC.json

The choices (``CHOICES``) are the precision, ``--compile`` (inductor, the CUDA default, or the eager backend:
dynamo's graphs alone, the same graph breaks and recompiles without AOTAutograd or code generation),
``--fused_cross_entropy``, the distribution strategy, the layer-norm placement and the padded vocabulary.
``ROWS`` is a covering set: every pair of two choices' values meets in at least one row (tests/e2e/test_matrix.py
checks it), 8 rows instead of the 256 of every combination.

Each row, in the launch's processes one after another (``finetune.py``'s own ``main`` through
``bart.cli.exits.run_main``, as ``python finetune.py`` ends; the process group is the launch's):

1. ``straight``: the job uninterrupted: ``steps`` updates with a validation (generation and ROUGE) at update
   ``val_every`` and at the end, the best checkpoint kept (best-k), ``--do_predict``;
2. ``stopped``: the same job, a real SIGTERM raised on rank 0 right after update ``stop_after`` (a global
   optimizer-step hook): the run abandons the validation of that update and checkpoints it (exit 75);
3. ``resumed``: the same command with ``--resume_from_checkpoint auto`` in the stopped run's folder: it
   validates that update first, trains to the end, predicts;
4. ``run_eval.py`` on the resumed run's final weights at the precision an evaluation of them takes (fp8: bf16,
   the tokens validation and prediction decoded);
5. rank 0: ``python -m bart.export`` of the resumed run's last checkpoint, and transformers' model loaded from
   the export generating for the test sources next to this project's model of the same checkpoint (fp32).

:func:`check_row` says what of that went wrong (nothing: the row passes): exit codes, the validations, the
files, the resumed run's losses, metrics, best checkpoint and predictions against the uninterrupted run's,
run_eval.py's and transformers' tokens, a compiled run's compile and recompiles.

Rank 0 writes ``OUT/<row>/result.json``: exit codes, each run's logged losses and validation metrics, the
files of each folder, the predictions, the evaluation's and transformers' tokens, compile figures, and the
wall and CPU seconds of each part; after every row, ``matrix.json`` (SPEC's ``summary``, else in ``out``): each
row's choices, problems, seconds and every rank's CPU seconds; the launch exits 1 when a row has a problem.
SPEC.json: :func:`make_spec`'s. The
inductor row's ranks compile in turn (:func:`compile_in_turn`): rank 1 reads rank 0's graphs from inductor's
cache instead of compiling them again at the same time. tests/e2e/test_matrix.py runs the matrix on CPU with tiny
models; benchmarks/gpu_suite.py on a GPU at bart-base size before its timings (one process per GPU, at most 2:
on one GPU the strategies' single-process form, the model as it is).
"""
from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import time
from dataclasses import dataclass

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

# every choice and its values (compile: "off" or the backend; inductor and aot_eager both count as "on")
CHOICES = {"precision": ("fp32", "bf16", "fp16", "fp8"), "compile": ("off", "on"), "fused_ce": ("off", "on"),
           "strategy": ("ddp", "fsdp"), "layer_norm": ("pre", "post"), "vocab": ("padded", "exact")}


@dataclass(frozen=True)
class Row:
    name: str
    precision: str
    compile: str      # off, or a backend (inductor, aot_eager, eager) and :layers for --compile_scope layers
    fused_ce: str
    strategy: str
    layer_norm: str
    vocab: str

    def choice(self, name: str) -> str:
        value = getattr(self, name)
        return "on" if name == "compile" and value != "off" else value


# The covering set: each precision in two rows whose other choices are opposite, the five two-valued choices
# given pairwise-different patterns over the precisions, so every pair of values meets (test_matrix checks it).
# The inductor row is bf16 with the fused loss under DDP, a GPU run's usual choice; the other compiled rows trace
# with the eager backend (dynamo's graphs: the same graph breaks and recompiles). One compiled row is FSDP, with
# --compile_scope layers: each layer compiled inside its own FSDP unit, whose hooks stay outside the graphs.
ROWS = (
    #    name              precision compile      fused CE strategy layer norm vocabulary
    Row("fp32_eager",      "fp32", "off",       "on",  "fsdp", "pre",  "padded"),
    Row("fp32_compiled",   "fp32", "eager",     "off", "ddp",  "post", "exact"),
    Row("bf16_eager",      "bf16", "off",       "off", "fsdp", "pre",  "padded"),
    Row("bf16_compiled",   "bf16", "inductor",  "on",  "ddp",  "post", "exact"),
    Row("fp16_eager",      "fp16", "off",       "on",  "ddp",  "pre",  "exact"),
    Row("fp16_compiled",   "fp16", "eager:layers", "off", "fsdp", "post", "padded"),
    Row("fp8_eager",       "fp8",  "off",       "off", "fsdp", "post", "exact"),
    Row("fp8_compiled",    "fp8",  "eager",     "on",  "ddp",  "pre",  "padded"),
)
ROW = {row.name: row for row in ROWS}

PRECISION_FLAGS = {"fp32": ["--no-tf32"], "bf16": ["--bf16"], "fp16": ["--fp16"], "fp8": ["--fp8"]}
EVAL_PRECISION_FLAGS = {"fp32": ["--no-tf32"], "bf16": ["--bf16"], "fp16": ["--fp16"],
                        "fp8": ["--bf16"]}  # an fp8 run's weights are evaluated as bf16's (bart/training/float8.py)
VOCAB_MULTIPLE = {"padded": 128, "exact": 1}
FP8_LAYERS = 2  # the first and the last layer stay in bf16: fp8 needs a second layer per stack to convert


def row_config(row: Row, base: dict) -> dict:
    """The row's model config: ``base`` with its layer-norm placement and vocabulary padding (fp8: two layers)."""
    config = dict(base, pre_ln=row.layer_norm == "pre", pad_vocab_to_multiple_of=VOCAB_MULTIPLE[row.vocab])
    if row.precision == "fp8":
        config.update(encoder_layers=max(FP8_LAYERS, config["encoder_layers"]),
                      decoder_layers=max(FP8_LAYERS, config["decoder_layers"]))
    return config


def row_flags(row: Row, device: str = "cpu") -> list[str]:
    """finetune.py's flags for the row's choices."""
    flags = list(PRECISION_FLAGS[row.precision])
    if row.precision == "fp8" and device != "cuda":
        flags.append("--fp8_emulate")
    backend, _, scope = row.compile.partition(":")  # a backend, and a --compile_scope where not the default
    flags += ["--no-compile"] if row.compile == "off" else ["--compile", "--compile_backend", backend]
    flags += ["--compile_scope", scope] if scope else []
    if row.fused_ce == "on":
        flags.append("--fused_cross_entropy")
    return flags + ["--distributed_strategy", row.strategy]


# inductor on CPU (the tests): scalar C++ (no vector ISA probe; about half the compile), each g++ run in the
# process (no pool of compile workers, each importing torch, to start), and a C++ wrapper: the kernels and the code
# calling them in one file, one g++ run for the forward and one for the backward where the Python wrapper had one for
# each of 26 kernels, each parsing inductor's C++ prelude (1.5 to 2 CPU-s each)
CPU_INDUCTOR = {"cpp.vec_isa_ok": False, "compile_threads": 1, "cpp_wrapper": True}


def make_spec(out: str, data: str, tokenizer: str, config: dict, device: str = "cpu", rows=None, steps: int = 3,
              val_every: int = 2, stop_after: int = 2, batch: int = 2, n_val: int = 2, n_test: int = 2,
              max_length: int = 8, source_length: int = 48, target_length: int = 16, learning_rate: float = 3e-3,
              resume_rtol: float = 1e-6, inductor=None, keep_weights: bool = True, summary=None) -> dict:
    """The matrix's SPEC.json: where (``out``, ``data``: ``<split>.source/target`` files, ``tokenizer``: a
    folder), the models' base config (each row sets its layer norm and vocabulary padding), the rows (None:
    all), and one job's size: ``steps`` updates of ``batch`` sequences per process, validated at ``val_every``
    and at the end on ``n_val`` examples (2 beams, ``max_length`` tokens), the SIGTERM after ``stop_after``,
    ``n_test`` predictions. ``resume_rtol``: how close a resumed run's losses and metrics must be to the
    uninterrupted run's (CPU: the same up to rounding). ``inductor``: inductor settings for every job
    (default on CPU: ``CPU_INDUCTOR``). ``keep_weights`` False: each row's checkpoints and exported weights are
    deleted once it is checked (bart-base: GBs a row). ``summary``: where matrix.json goes (default: ``out``)."""
    if not 0 < stop_after <= val_every < steps:
        raise ValueError(f"the job needs 0 < stop_after <= val_every < steps, got {stop_after}, {val_every}, {steps}")
    flags = ["--from_scratch", "--max_steps", str(steps), "--train_batch_size", str(batch),
             "--learning_rate", repr(learning_rate), "--val_check_interval", str(val_every),
             "--num_sanity_val_steps", "0", "--n_val", str(n_val), "--eval_beams", "2",
             "--eval_max_gen_length", str(max_length), "--save_top_k", "1", "--do_predict", "--n_test", str(n_test),
             "--num_workers", "0", "--log_freq", "1", "--no_tensorboard", "--max_source_length", str(source_length),
             "--max_target_length", str(target_length), "--seed", "1"]
    eval_flags = ["--n_obs", str(n_test), "--eval_beams", "2", "--max_target_length", str(max_length),
                  "--max_source_length", str(source_length), "--bs", "8"]
    return {"out": out, "data": data, "tokenizer": tokenizer, "config": config, "device": device,
            "rows": None if rows is None else list(rows), "steps": steps, "val_every": val_every,
            "stop_after": stop_after, "n_test": n_test, "max_length": max_length, "source_length": source_length,
            "resume_rtol": resume_rtol, "flags": flags, "eval_flags": eval_flags, "keep_weights": keep_weights,
            "summary": summary,
            "inductor": (CPU_INDUCTOR if device == "cpu" else {}) if inductor is None else inductor}


def check_row(result: dict, spec: dict) -> list[str]:
    """What of the row's job went wrong (its ``result.json``; :func:`make_spec`'s spec): one line each; none
    when it did the whole job. The stopped run exits 75 with the checkpoint of update ``stop_after`` and no best
    checkpoint (the validation of that update abandoned); both whole runs log every update's loss, validate at
    ``val_every`` and at the end, keep one best checkpoint and predict the test split; the resumed run's losses,
    validation metrics, best checkpoint and predictions are the uninterrupted run's; run_eval.py gives the
    prediction's tokens; transformers generates this project's tokens from the export (words, not one token
    repeated); a compiled run compiled (no fall-back to eager) and never recompiled (batch sizes are dynamic)."""
    problems = []
    steps, val_every, stop_after, n_test = spec["steps"], spec["val_every"], spec["stop_after"], spec["n_test"]
    expected = {"straight": 0, "stopped": 75, "resumed": 0, "run_eval": 0, "export": 0}
    if result["codes"] != expected:
        return [f"exit codes {result['codes']}, expected {expected}"]
    logged, files, predictions = result["logged"], result["files"], result["predictions"]
    for run in ("straight", "resumed"):
        validated = sorted(int(step) for step, values in logged[run].items() if "val_rouge2" in values)
        if validated != [val_every, steps]:
            problems.append(f"{run}: validated at updates {validated}, expected {[val_every, steps]}")
        updates = sorted(int(step) for step, values in logged[run].items() if "loss" in values)
        if updates != list(range(1, steps + 1)):
            problems.append(f"{run}: losses logged at updates {updates}, expected 1 to {steps}")
        missing = {"final_step.ckpt", f"_epoch0_step{steps}.ckpt", "best_rouge2.json", "test_rouge.json"} - \
            set(files[run])
        if missing:
            problems.append(f"{run}: no {', '.join(sorted(missing))}")
        best = [f for f in files[run] if f.startswith("best_rouge2_step")]
        if len(best) != 1:
            problems.append(f"{run}: {len(best)} best checkpoints kept ({best}), expected 1 (--save_top_k 1)")
        if len(predictions.get(run, [])) != n_test:
            problems.append(f"{run}: {len(predictions.get(run, []))} predictions, expected {n_test}")
    if f"_step{stop_after}.ckpt" not in files["stopped"]:
        problems.append(f"stopped: no _step{stop_after}.ckpt ({files['stopped']})")
    if any(f.startswith("best_") for f in files["stopped"]):
        problems.append(f"stopped: a best checkpoint, though the validation of update {stop_after} was abandoned")
    straight, resumed, rtol = logged["straight"], logged["resumed"], spec["resume_rtol"]
    for step in sorted(set(straight) | set(resumed), key=int):
        a, b = straight.get(step, {}), resumed.get(step, {})
        if a.keys() != b.keys() or any(abs(a[k] - b[k]) > rtol * max(abs(a[k]), 1e-6) for k in a):
            problems.append(f"resumed: update {step} logged {b}, the uninterrupted run {a}")
    if [f for f in files["resumed"] if f.startswith("best_")] != [f for f in files["straight"] if f.startswith("best_")]:
        problems.append("resumed: another best checkpoint than the uninterrupted run's")
    if predictions.get("resumed") != predictions.get("straight"):
        problems.append("resumed: other predictions than the uninterrupted run's")
    if predictions.get("run_eval") != predictions.get("resumed"):
        problems.append("run_eval.py: other tokens than the resumed run's --do_predict")
    generated = result["generated"]
    if generated["transformers"] != generated["ours"] or len(generated["ours"]) != n_test:
        problems.append(f"transformers generated {generated['transformers']} from the export, this project "
                        f"{generated['ours']}")
    if len({t for ids in generated["ours"] for t in ids}) <= 3:
        problems.append(f"the model generated {generated['ours']}: one token repeated, not words")
    if result["row"]["compile"] != "off":
        for run in ("straight", "resumed"):
            summary = result["summary"][run]
            if summary.get("compiled") is not True or "compile_error" in summary:
                problems.append(f"{run}: not compiled: {summary}")
            elif summary.get("recompiles"):
                problems.append(f"{run}: {summary['recompiles']} recompiles over the batches' lengths")
    return problems


@contextlib.contextmanager
def sigterm_after(update: int, rank: int):
    """A real SIGTERM raised in this process (rank 0 only; the ranks agree on stopping) right after its
    ``update``-th optimizer step: torch's global optimizer-step hook, outside any compiled graph."""
    from torch.optim.optimizer import register_optimizer_step_post_hook

    steps = [0]

    def hook(optimizer, args, kwargs):
        steps[0] += 1
        if steps[0] == update and rank == 0:
            signal.raise_signal(signal.SIGTERM)

    handle = register_optimizer_step_post_hook(hook)
    try:
        yield
    finally:
        handle.remove()


def _logged(folder: str) -> dict:
    """{step: {loss, val_*}} of a run's dllogger.json (LOG records with a step; not val_gen_time)."""
    from bart.records.dllogger_compat import read_dllogger

    path = os.path.join(folder, "dllogger.json")
    steps: dict = {}
    if not os.path.isfile(path):
        return steps
    for record in read_dllogger(path):
        if record["type"] == "LOG" and isinstance(record["step"], int):
            values = {k: v for k, v in record["data"].items()
                      if k == "loss" or k.startswith("val_") and k != "val_gen_time"}  # seconds: the machine's
            if values:
                steps.setdefault(str(record["step"]), {}).update(values)
    return steps


def _summary(folder: str) -> dict:
    """The run's last summary record (compile figures)."""
    from bart.records.dllogger_compat import read_dllogger

    found = {}
    for record in read_dllogger(os.path.join(folder, "dllogger.json")):
        if record["type"] == "LOG" and "final_loss" in record["data"]:
            found = record["data"]
    return {k: found[k] for k in ("compiled", "recompiles", "compile_updates_s", "compile_error") if k in found}


def _lines(path: str) -> list:
    """A generations file's lines as the project reads them (bart.files.text_lines: \\n, \\r\\n, lone \\r)."""
    from bart.files.text_lines import split_lines

    with open(path, encoding="utf-8", newline="") as f:
        return split_lines(f.read())


def _transformers_tokens(export_dir: str, sources: list[str], source_length: int, max_length: int,
                         device: str) -> dict:
    """transformers' model from the export and this project's from the checkpoint, each generating for
    ``sources`` in fp32 with the export's generation settings: {"transformers": ids, "ours": ids}."""
    import torch
    import transformers

    from bart.modeling import BartForConditionalGeneration
    from bart.runtime.foreign_noise import no_transformers_progress_bars
    from bart.tokenization.tokenization_bart import BartTokenizer, model_inputs

    tokenizer = BartTokenizer.from_pretrained(export_dir)
    with no_transformers_progress_bars():
        hf = transformers.AutoModelForSeq2SeqLM.from_pretrained(export_dir).to(device).eval()
    ours = BartForConditionalGeneration.from_pretrained(export_dir).to(device).eval()
    with open(os.path.join(export_dir, "generation_config.json")) as f:
        settings = {k: v for k, v in json.load(f).items() if k in ("num_beams", "no_repeat_ngram_size", "min_length",
                                                                  "length_penalty", "early_stopping")}
    out = {}
    for name, model in (("transformers", hf), ("ours", ours)):
        tokens = []
        for source in sources:  # one source a call: no padding to differ on
            batch = model_inputs(tokenizer, [source], source_length)
            with torch.no_grad():
                ids = model.generate(batch["input_ids"].to(device), attention_mask=batch["attention_mask"].to(device),
                                     max_length=max_length, **settings)
            tokens.append(ids[0].tolist())
        out[name] = tokens
    return out


def run_row(row: Row, spec: dict, rank: int) -> dict:
    """One row's job (see the module's docstring); the result rank 0 writes."""
    from bart.cli.exits import run_entry
    from bart.runtime import distributed as dist_utils

    out = os.path.join(spec["out"], row.name)
    os.makedirs(out, exist_ok=True)
    config_path = os.path.join(out, "config.json")
    if rank == 0:
        with open(config_path, "w") as f:
            json.dump(row_config(row, spec["config"]), f)
    _barrier_file(config_path)
    argv = ["--config_path", config_path, "--data_dir", spec["data"], "--tokenizer", spec["tokenizer"],
            *spec["flags"], *row_flags(row, spec.get("device", "cpu"))]
    result: dict = {"row": row.__dict__, "seconds": {}, "cpu_s": {}, "codes": {}}

    def timed(part, fn):
        start, cpu = time.perf_counter(), _cpu_seconds()
        value = fn()
        result["seconds"][part] = round(time.perf_counter() - start, 2)
        result["cpu_s"][part] = round(_cpu_seconds() - cpu, 2)
        return value

    straight, resumed = os.path.join(out, "straight"), os.path.join(out, "resumed")
    in_turn = compile_in_turn(rank, os.path.join(out, "compiled_on_rank0")) if row.compile == "inductor" and \
        row.strategy == "ddp" else contextlib.nullcontext()
    with in_turn:
        result["codes"]["straight"] = timed("straight", lambda: run_entry("finetune.py",
                                                                          argv + ["--output_dir", straight]))
    with sigterm_after(spec["stop_after"], rank):
        result["codes"]["stopped"] = timed("stopped", lambda: run_entry("finetune.py", argv + ["--output_dir", resumed]))
    stopped_files = sorted(os.listdir(resumed))
    result["codes"]["resumed"] = timed("resumed", lambda: run_entry(
        "finetune.py", argv + ["--output_dir", resumed, "--resume_from_checkpoint", "auto"]))
    evaluated = os.path.join(out, "run_eval")
    result["codes"]["run_eval"] = timed("run_eval", lambda: run_entry("run_eval.py", [
        os.path.join(resumed, "final_step.ckpt"), config_path, spec["data"], evaluated, "--tokenizer", spec["tokenizer"],
        *spec["eval_flags"], *EVAL_PRECISION_FLAGS[row.precision]]))
    if rank == 0:
        last = max((n for n in os.listdir(resumed) if n.startswith("_epoch") and n.endswith(".ckpt")),
                   key=lambda n: int(n.rsplit("_step", 1)[1][:-5]))
        export_dir = os.path.join(out, "export")
        result["codes"]["export"] = timed("export", lambda: run_entry("bart.export", [
            os.path.join(resumed, last), export_dir, "--tokenizer", spec["tokenizer"]]))
        from bart.data.summarization import read_split
        sources, _ = read_split(spec["data"], "test", spec["n_test"])
        result["generated"] = timed("transformers", lambda: _transformers_tokens(
            export_dir, sources, spec["source_length"], spec["max_length"], spec.get("device", "cpu")))
        result["logged"] = {"straight": _logged(straight), "resumed": _logged(resumed)}
        result["summary"] = {"straight": _summary(straight), "resumed": _summary(resumed)}
        result["files"] = {"straight": sorted(os.listdir(straight)), "stopped": stopped_files,
                           "resumed": sorted(os.listdir(resumed))}
        result["predictions"] = {name: _lines(os.path.join(folder, "test_generations.txt"))
                                 for name, folder in (("straight", straight), ("resumed", resumed),
                                                      ("run_eval", evaluated))
                                 if os.path.isfile(os.path.join(folder, "test_generations.txt"))}
    result["seconds"]["total"] = round(sum(result["seconds"].values()), 2)
    result["cpu_s"]["total"] = round(sum(result["cpu_s"].values()), 2)
    if rank == 0:
        with open(os.path.join(out, "result.json"), "w") as f:
            json.dump(result, f, indent=1)
    with open(os.path.join(out, f"seconds_rank{rank}.json"), "w") as f:
        json.dump({"seconds": result["seconds"], "cpu_s": result["cpu_s"]}, f)
    dist_utils.cleanup()
    return result


def _cpu_seconds() -> float:
    """User and system CPU seconds of this process and of its children that ended (inductor's compilers)."""
    import resource

    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


@contextlib.contextmanager
def compile_in_turn(rank: int, flag: str, timeout: float = 1800.0):
    """The ranks of a DDP job compile one after the other: rank 1's first compiled forward waits for rank 0's to
    return, by when rank 0's forward and backward graphs are in inductor's cache (dynamic sizes: AOTAutograd
    compiles the backward with the forward), so rank 1 reads them instead of compiling them at the same time
    (half the CPU time of the row's compile). DDP only: its collectives come before (buffers) and after
    (gradients) the compiled forward; FSDP gathers parameters inside it, where rank 0 would wait for rank 1."""
    from bart.training.compilation import CompiledOrEager

    original = CompiledOrEager.forward
    first = [True]

    def forward(self, *args, **kwargs):
        if not first[0] or self.eager:
            return original(self, *args, **kwargs)
        first[0] = False
        if rank > 0:
            _barrier_file(flag, timeout)
            return original(self, *args, **kwargs)
        try:
            return original(self, *args, **kwargs)
        finally:  # compiled, or failed (then the run goes on eager): rank 1 goes on either way
            with open(flag, "w") as f:
                f.write("compiled\n")

    CompiledOrEager.forward = forward
    try:
        yield
    finally:
        CompiledOrEager.forward = original


def _barrier_file(path: str, timeout: float = 120.0) -> None:
    """Every rank waits for rank 0's file (no process group between the jobs: each run starts its own)."""
    deadline = time.monotonic() + timeout
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} did not appear within {timeout:g} s")
        time.sleep(0.01)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    with open(argv[0]) as f:
        spec = json.load(f)
    rank, world = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    names = spec.get("rows") or [row.name for row in ROWS]
    summary: dict = {}
    with _inductor_options(spec.get("inductor") or {}):
        for name in names:
            run_row(ROW[name], spec, rank)
            if rank == 0:  # after every row: a run stopped part-way says which rows ended
                summary[name] = _row_summary(name, spec, world)
                _write_summary(spec, world, summary)
                if not spec.get("keep_weights", True):  # bart-base: GBs of checkpoints a row, checked already
                    _drop_weights(os.path.join(spec["out"], name))
    if rank:
        return 0
    failed = [name for name in names if summary[name]["problems"]]
    for name in failed:
        print(f"config_matrix: {name}: " + "; ".join(summary[name]["problems"]), file=sys.stderr, flush=True)
    print(f"config_matrix: {len(names) - len(failed)} of {len(names)} rows did the whole job"
          f"{': ' + ', '.join(failed) + ' did not' if failed else ''} ({_summary_path(spec)})", flush=True)
    return 1 if failed else 0


def _summary_path(spec: dict) -> str:
    return spec.get("summary") or os.path.join(spec["out"], "matrix.json")


def _row_summary(name: str, spec: dict, world: int) -> dict:
    """The row's line of ``matrix.json``: its choices, :func:`check_row`'s problems, the wall seconds of its parts
    (rank 0) and every rank's CPU seconds (rank 1 may end the row after rank 0: waited for)."""
    folder = os.path.join(spec["out"], name)
    cpu = []
    for r in range(world):
        path = os.path.join(folder, f"seconds_rank{r}.json")
        _barrier_file(path, timeout=600.0)
        with open(path) as f:
            cpu.append(json.load(f)["cpu_s"])
    with open(os.path.join(folder, "result.json")) as f:
        result = json.load(f)
    return {"row": result["row"], "problems": check_row(result, spec), "seconds": result["seconds"], "cpu_s": cpu,
            "compile": result["summary"]}


def _drop_weights(folder: str) -> None:
    """The row's checkpoints and exported weights, once its result is written (its files listed there)."""
    for parent, _, names in os.walk(folder):
        for name in names:
            if name.endswith((".ckpt", ".safetensors", ".bin")):
                os.remove(os.path.join(parent, name))


def _write_summary(spec: dict, world: int, rows: dict) -> None:
    from bart.files.checkpoint_io import atomic_write_text

    atomic_write_text(_summary_path(spec), json.dumps({"processes": world, "device": spec.get("device", "cpu"),
                                                       "rows": rows}, indent=1))


def _inductor_options(options: dict):
    """The spec's inductor settings for every job (on CPU: ``CPU_INDUCTOR``)."""
    if not options:
        return contextlib.nullcontext()
    import torch._inductor.config

    return torch._inductor.config.patch(options)


if __name__ == "__main__":
    sys.exit(main())

"""The configuration matrix: every choice a GPU user makes, each row one whole fine-tuning job.

    python -m torch.distributed.run --nproc_per_node 2 -m benchmarks.config_matrix SPEC.json

The choices (``CHOICES``) are the precision, ``--compile`` (inductor, the CUDA default, or aot_eager: the same
graphs and graph breaks without code generation), ``--fused_cross_entropy``, the distribution strategy, the
layer-norm placement and the padded vocabulary. ``ROWS`` is a covering set: every pair of two choices' values
meets in at least one row (tests/test_matrix.py checks it), 8 rows instead of the 256 of every combination.

Each row, in the launch's processes one after another (``finetune.py``'s own ``main`` through
``bart.cli.exits.run_main``, as ``python finetune.py`` ends; the process group is the launch's):

1. ``straight``: the job uninterrupted: training with periodic validation (generation and ROUGE), best-k
   checkpoints, ``--do_predict``;
2. ``stopped``: the same job, a real SIGTERM raised on rank 0 right after update ``stop_after`` (a global
   optimizer-step hook): the run abandons the validation of that update and checkpoints it (exit 75);
3. ``resumed``: the same command with ``--resume_from_checkpoint auto`` in the stopped run's folder: it
   validates that update first, trains to the end, predicts;
4. ``run_eval.py`` on the resumed run's final weights at the precision an evaluation of them takes (fp8: bf16,
   the tokens validation and prediction decoded);
5. rank 0: ``python -m bart.export`` of the resumed run's last checkpoint, and transformers' model loaded from
   the export generating for the test sources next to this project's model of the same checkpoint (fp32).

Rank 0 writes ``OUT/<row>/result.json``: exit codes, each run's logged losses and validation metrics, the
files of each folder, the predictions, the evaluation's and transformers' tokens, compile figures and seconds
per part. SPEC.json: ``{"out", "data", "tokenizer", "config": {base config values}, "rows": [names] or null,
"flags": [common finetune.py flags], "eval_flags": [common run_eval.py flags], "stop_after", "n_test",
"max_length", "device": "cpu" or "cuda", "inductor": {inductor config patch}}``. tests/test_matrix.py runs it on CPU with tiny models;
benchmarks/gpu_suite.py on a GPU at bart-base size before its timings.
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
    compile: str      # off, inductor, aot_eager
    fused_ce: str
    strategy: str
    layer_norm: str
    vocab: str

    def choice(self, name: str) -> str:
        value = getattr(self, name)
        return "on" if name == "compile" and value != "off" else value


# The covering set: each precision in two rows whose other choices are opposite, the five two-valued choices
# given pairwise-different patterns over the precisions, so every pair of values meets (test_matrix checks it).
# The inductor row is bf16 under DDP, a GPU run's usual choice; the other compiled rows trace with aot_eager.
ROWS = (
    #    name              precision compile      fused CE strategy layer norm vocabulary
    Row("fp32_eager",      "fp32", "off",       "off", "ddp",  "pre",  "padded"),
    Row("fp32_compiled",   "fp32", "aot_eager", "on",  "fsdp", "post", "exact"),
    Row("bf16_eager",      "bf16", "off",       "off", "fsdp", "post", "padded"),
    Row("bf16_compiled",   "bf16", "inductor",  "on",  "ddp",  "pre",  "exact"),
    Row("fp16_eager",      "fp16", "off",       "on",  "ddp",  "post", "padded"),
    Row("fp16_compiled",   "fp16", "aot_eager", "off", "fsdp", "pre",  "exact"),
    Row("fp8_eager",       "fp8",  "off",       "on",  "fsdp", "pre",  "exact"),
    Row("fp8_compiled",    "fp8",  "aot_eager", "off", "ddp",  "post", "padded"),
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
    flags += ["--no-compile"] if row.compile == "off" else ["--compile", "--compile_backend", row.compile]
    if row.fused_ce == "on":
        flags.append("--fused_cross_entropy")
    return flags + ["--distributed_strategy", row.strategy]


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
    """{step: {loss, val_*}} of a run's dllogger.json (LOG records with a step)."""
    from bart.utils.dllogger_compat import read_dllogger

    path = os.path.join(folder, "dllogger.json")
    steps: dict = {}
    if not os.path.isfile(path):
        return steps
    for record in read_dllogger(path):
        if record["type"] == "LOG" and isinstance(record["step"], int):
            values = {k: v for k, v in record["data"].items() if k == "loss" or k.startswith("val_")}
            if values:
                steps.setdefault(str(record["step"]), {}).update(values)
    return steps


def _summary(folder: str) -> dict:
    """The run's last summary record (compile figures)."""
    from bart.utils.dllogger_compat import read_dllogger

    found = {}
    for record in read_dllogger(os.path.join(folder, "dllogger.json")):
        if record["type"] == "LOG" and "final_loss" in record["data"]:
            found = record["data"]
    return {k: found[k] for k in ("compiled", "recompiles", "compile_updates_s", "compile_error") if k in found}


def _lines(path: str) -> list:
    """A generations file's lines as the project reads them (bart.utils.text_lines: \\n, \\r\\n, lone \\r)."""
    from bart.utils.text_lines import split_lines

    with open(path, encoding="utf-8", newline="") as f:
        return split_lines(f.read())


def _transformers_tokens(export_dir: str, checkpoint: str, sources: list[str], max_length: int, device: str) -> dict:
    """transformers' model from the export and this project's from the checkpoint, each generating for
    ``sources`` in fp32 with the export's generation settings: {"transformers": ids, "ours": ids}."""
    import torch
    import transformers

    from bart.modeling import BartForConditionalGeneration
    from bart.tokenization.tokenization_bart import BartTokenizer, model_inputs

    tokenizer = BartTokenizer.from_pretrained(export_dir)
    hf = transformers.AutoModelForSeq2SeqLM.from_pretrained(export_dir).to(device).eval()
    ours = BartForConditionalGeneration.from_pretrained(export_dir).to(device).eval()
    with open(os.path.join(export_dir, "generation_config.json")) as f:
        settings = {k: v for k, v in json.load(f).items() if k in ("num_beams", "no_repeat_ngram_size", "min_length",
                                                                  "length_penalty", "early_stopping")}
    out = {}
    for name, model in (("transformers", hf), ("ours", ours)):
        tokens = []
        for source in sources:  # one source a call: no padding to differ on
            batch = model_inputs(tokenizer, [source], 48)
            with torch.no_grad():
                ids = model.generate(batch["input_ids"].to(device), attention_mask=batch["attention_mask"].to(device),
                                     max_length=max_length, **settings)
            tokens.append(ids[0].tolist())
        out[name] = tokens
    return out


def run_entry(script: str, argv: list[str]) -> int:
    """``python script argv`` (an entry script, or ``python -m bart.export``) in this process, ending as the
    script ends (``bart.cli.exits.run_main``: one line for a stop or a mistake): its exit code."""
    import importlib

    from bart.cli.exits import run_main

    module = importlib.import_module(script[:-3] if script.endswith(".py") else script)
    if script == "bart.export":
        return module.main(argv)
    try:
        run_main(lambda: module.main(argv), script)
    except SystemExit as stop:
        return stop.code if isinstance(stop.code, int) else 1
    return 0


def run_row(row: Row, spec: dict, rank: int) -> dict:
    """One row's job (see the module's docstring); the result rank 0 writes."""
    from bart.utils import distributed as dist_utils

    out = os.path.join(spec["out"], row.name)
    os.makedirs(out, exist_ok=True)
    config_path = os.path.join(out, "config.json")
    if rank == 0:
        with open(config_path, "w") as f:
            json.dump(row_config(row, spec["config"]), f)
    _barrier_file(config_path)
    argv = ["--config_path", config_path, "--data_dir", spec["data"], "--tokenizer", spec["tokenizer"],
            *spec["flags"], *row_flags(row, spec.get("device", "cpu"))]
    result: dict = {"row": row.__dict__, "seconds": {}, "codes": {}}

    def timed(part, fn):
        start = time.perf_counter()
        value = fn()
        result["seconds"][part] = round(time.perf_counter() - start, 2)
        return value

    straight, resumed = os.path.join(out, "straight"), os.path.join(out, "resumed")
    result["codes"]["straight"] = timed("straight", lambda: run_entry("finetune.py", argv + ["--output_dir", straight]))
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
            export_dir, os.path.join(resumed, last), sources, spec["max_length"], spec.get("device", "cpu")))
        result["logged"] = {"straight": _logged(straight), "resumed": _logged(resumed)}
        result["summary"] = {"straight": _summary(straight), "resumed": _summary(resumed)}
        result["files"] = {"straight": sorted(os.listdir(straight)), "stopped": stopped_files,
                           "resumed": sorted(os.listdir(resumed))}
        result["predictions"] = {name: _lines(os.path.join(folder, "test_generations.txt"))
                                 for name, folder in (("straight", straight), ("resumed", resumed),
                                                      ("run_eval", evaluated))
                                 if os.path.isfile(os.path.join(folder, "test_generations.txt"))}
        result["seconds"]["total"] = round(sum(result["seconds"].values()), 2)
        with open(os.path.join(out, "result.json"), "w") as f:
            json.dump(result, f, indent=1)
    dist_utils.cleanup()
    return result


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
    rank = int(os.environ.get("RANK", "0"))
    with _inductor_options(spec.get("inductor") or {}):
        for name in spec.get("rows") or [row.name for row in ROWS]:
            run_row(ROW[name], spec, rank)
    return 0


def _inductor_options(options: dict):
    """The spec's inductor settings for every job (CPU tests: ``{"cpp.vec_isa_ok": false}``, scalar C++ that
    compiles in about half the time)."""
    if not options:
        return contextlib.nullcontext()
    import torch._inductor.config

    return torch._inductor.config.patch(options)


if __name__ == "__main__":
    sys.exit(main())

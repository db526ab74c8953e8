"""The configuration matrix on CPU: every choice a GPU user makes (precision fp32/bf16/fp16/fp8 emulated, --compile
on and off, --fused_cross_entropy on and off, DDP and FSDP, Pre-LN and post-LN, a padded vocabulary or not) in the
covering set of benchmarks/config_matrix.py's ``ROWS`` (every pair of two choices meets in a row), each row one
whole tiny fine-tuning job under two gloo processes: periodic validation (generation and ROUGE), best-k, a SIGTERM
and a resume, --do_predict, run_eval.py, the export and transformers loading it. All rows run in one launch
(the processes start once); the compiled rows share inductor's cache folder. The models keep the real configs'
dropout (0.1) and the trained vocabulary's softmax (tests.helpers.corpus.micro_config: one layer per stack, fp8 two).
"""
import itertools
import json
import os
import subprocess
import sys

import pytest

from benchmarks.config_matrix import CHOICES, ROWS
from tests.helpers.corpus import micro_config
from tests.helpers.ports import free_port
from tests.helpers.summaries import write_summarization_data

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STEPS, VAL_EVERY, STOP_AFTER, N_TEST, MAX_LENGTH = 4, 2, 2, 2, 8
FLAGS = ["--from_scratch", "--max_steps", str(STEPS), "--train_batch_size", "2", "--learning_rate", "3e-3",
         "--val_check_interval", str(VAL_EVERY), "--num_sanity_val_steps", "0", "--n_val", "2", "--eval_beams", "2",
         "--eval_max_gen_length", str(MAX_LENGTH), "--save_top_k", "1", "--do_predict", "--n_test", str(N_TEST),
         "--num_workers", "0", "--log_freq", "1", "--no_tensorboard", "--max_source_length", "48",
         "--max_target_length", "16", "--seed", "1"]
EVAL_FLAGS = ["--n_obs", str(N_TEST), "--eval_beams", "2", "--max_target_length", str(MAX_LENGTH),
              "--max_source_length", "48", "--bs", "8"]
# the concurrent fix of an exact resume with dropout on (branch `resume`): until it is merged, a resumed run's
# later updates draw other dropout masks than the uninterrupted run's (with --dropout 0 the rows resume exactly)
RESUME_WITH_DROPOUT = "resume to the same losses with dropout on: fixed on branch `resume`, not merged yet"


def test_the_rows_cover_every_pair_of_choices():
    """Every value of every choice appears, and every pair of two choices' values meets in at least one row; at
    least one compiled row uses inductor, the backend a CUDA run compiles with."""
    rows = [{name: row.choice(name) for name in CHOICES} for row in ROWS]
    for a, b in itertools.combinations(CHOICES, 2):
        met = {(row[a], row[b]) for row in rows}
        assert met == set(itertools.product(CHOICES[a], CHOICES[b])), (a, b)
    assert any(row.compile == "inductor" for row in ROWS) and len({row.name for row in ROWS}) == len(ROWS)


@pytest.fixture(scope="module")
def matrix(tmp_path_factory, small_tokenizer_dir):
    """Every row's job, in one two-process launch: {row name: its result.json}."""
    base = tmp_path_factory.mktemp("matrix")
    data = write_summarization_data(str(base / "data"), sizes=(("train", 16), ("val", 2), ("test", N_TEST)))
    spec = {"out": str(base / "jobs"), "data": data, "tokenizer": small_tokenizer_dir, "rows": None,
            # a vocabulary padded (128) or not: 1030 rows, the trained tokenizer's 1024 and spare ones as GPT-2's
            "config": micro_config(vocab_size=1030, init_std=0.2), "flags": FLAGS, "eval_flags": EVAL_FLAGS,
            "stop_after": STOP_AFTER, "n_test": N_TEST, "max_length": MAX_LENGTH, "device": "cpu",
            "inductor": {"cpp.vec_isa_ok": False}}  # scalar C++ (see test_trainer's compile test): half the compile
    (base / "spec.json").write_text(json.dumps(spec))
    env = dict(os.environ, PYTHONPATH=ROOT, OMP_NUM_THREADS="1", TORCHINDUCTOR_CACHE_DIR=str(base / "inductor"))
    run = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2",
                          f"--master_port={free_port()}", "-m", "benchmarks.config_matrix", str(base / "spec.json")],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, (run.stdout[-3000:], run.stderr[-3000:])
    return {row.name: json.loads((base / "jobs" / row.name / "result.json").read_text()) for row in ROWS}


@pytest.mark.slow
@pytest.mark.parametrize("name", [row.name for row in ROWS])
def test_every_row_runs_one_whole_job(matrix, name):
    """The row's job end to end: the run stopped by SIGTERM after update 2 exits 75 with its checkpoint (the
    validation of that update abandoned), the resumed run validates it and ends; both runs validate at every
    interval, keep their best checkpoint and predict the test split; run_eval.py gives the prediction's tokens from
    the final weights (an fp8 run's as bf16's); transformers loads the export and generates this project's tokens;
    a compiled job compiled (no fallback to eager) and recompiled at most twice over its batches' lengths."""
    result = matrix[name]
    assert result["codes"] == {"straight": 0, "stopped": 75, "resumed": 0, "run_eval": 0, "export": 0}
    for run in ("straight", "resumed"):
        validated = sorted(int(step) for step, values in result["logged"][run].items() if "val_rouge2" in values)
        assert validated == list(range(VAL_EVERY, STEPS + 1, VAL_EVERY)), (run, result["logged"][run])
        assert sorted(int(step) for step, values in result["logged"][run].items() if "loss" in values) == \
            list(range(1, STEPS + 1))
        files = result["files"][run]
        assert {"final_step.ckpt", f"_epoch0_step{STEPS}.ckpt", "best_rouge2.json", "test_rouge.json"} <= set(files)
        assert sum(f.startswith("best_rouge2_step") for f in files) == 1, files
        assert len(result["predictions"][run]) == N_TEST
    assert f"_step{STOP_AFTER}.ckpt" in result["files"]["stopped"]
    assert not any(f.startswith("best_") for f in result["files"]["stopped"])  # its validation was abandoned
    assert result["predictions"]["run_eval"] == result["predictions"]["resumed"]
    generated = result["generated"]
    assert generated["transformers"] == generated["ours"] and len(generated["ours"]) == N_TEST
    assert len({t for ids in generated["ours"] for t in ids}) > 3  # words, not one token repeated
    if result["row"]["compile"] != "off":
        for run in ("straight", "resumed"):
            summary = result["summary"][run]
            assert summary["compiled"] is True and "compile_error" not in summary, summary
            assert summary["recompiles"] <= 2, summary


@pytest.mark.slow
@pytest.mark.xfail(reason=RESUME_WITH_DROPOUT, strict=True)
@pytest.mark.parametrize("name", [row.name for row in ROWS])
def test_a_stopped_and_resumed_job_is_the_uninterrupted_one(matrix, name):
    """SIGTERM after update 2 and a resume: the losses of every update, the validation metrics, the best checkpoint
    kept and the test predictions are the uninterrupted job's."""
    result = matrix[name]
    straight, resumed = result["logged"]["straight"], result["logged"]["resumed"]
    assert sorted(straight) == sorted(resumed)
    for step in straight:
        assert resumed[step] == pytest.approx(straight[step], rel=1e-6, abs=1e-6), step
    assert [f for f in result["files"]["resumed"] if f.startswith("best_")] == \
        [f for f in result["files"]["straight"] if f.startswith("best_")]
    assert result["predictions"]["resumed"] == result["predictions"]["straight"]


def test_a_compiled_fine_tuning_run_over_varied_lengths_recompiles_at_most_twice(tmp_path, small_tokenizer_dir):
    """--compile over fine-tuning batches of varied source and target lengths: the batches' sizes are dynamic from
    the first update (bart/training/compilation.py), so the run compiles once and recompiles at most twice (dynamo's
    own rule compiled static shapes first, then again for each size that changed: on an FSDP model 7 graphs three
    times over, 7 recompiles in 4 updates); the count is the run's summary's. aot_eager: dynamo's graphs and their
    guards, which decide recompiles, without inductor's code generation."""
    import finetune
    from bart.data.summarization import build_finetuning_loader
    from bart.tokenization.tokenization_bart import BartTokenizer

    data = write_summarization_data(str(tmp_path / "data"), sizes=(("train", 24), ("val", 2), ("test", 2)))
    (tmp_path / "config.json").write_text(json.dumps(micro_config(vocab_size=1030)))
    steps = 6
    loader = build_finetuning_loader(data, BartTokenizer.from_pretrained(small_tokenizer_dir), 48, 16, 4, seed=1)
    shapes = [(tuple(b["input_ids"].shape), tuple(b["labels"].shape)) for b in itertools.islice(iter(loader), steps)]
    assert len({s for s, _ in shapes}) >= 3 and len({t for _, t in shapes}) >= 2, shapes  # the lengths do vary
    summary = finetune.main(["--config_path", str(tmp_path / "config.json"), "--data_dir", data, "--tokenizer",
                             small_tokenizer_dir, "--from_scratch", "--max_steps", str(steps), "--train_batch_size", "4",
                             "--max_source_length", "48", "--max_target_length", "16", "--n_val", "0", "--seed", "1",
                             "--num_workers", "0", "--no_tensorboard", "--compile", "--compile_backend", "aot_eager",
                             "--output_dir", str(tmp_path / "out")])
    assert summary["compiled"] is True and "compile_error" not in summary and summary["steps"] == steps
    assert summary["recompiles"] <= 2, summary

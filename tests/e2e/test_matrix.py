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
import sys

import pytest

from benchmarks.config_matrix import CHOICES, ROWS, check_row, make_spec
from tests.helpers import ROOT
from tests.helpers.corpus import micro_config
from tests.helpers.forked import fork_ranks
from tests.helpers.summaries import write_summarization_data

N_TEST = 2


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
    """Every row's job, in one two-process launch: (the spec, {row name: its result.json}, matrix.json)."""
    base = tmp_path_factory.mktemp("matrix")
    data = write_summarization_data(str(base / "data"), sizes=(("train", 16), ("val", 2), ("test", N_TEST)))
    # a vocabulary padded (128) or not: 1030 rows, the trained tokenizer's 1024 and spare ones as GPT-2's
    spec = make_spec(str(base / "jobs"), data, small_tokenizer_dir, micro_config(vocab_size=1030, init_std=0.2),
                     n_test=N_TEST)
    (base / "spec.json").write_text(json.dumps(spec))
    env = dict(os.environ, PYTHONPATH=ROOT, OMP_NUM_THREADS="1", TORCHINDUCTOR_CACHE_DIR=str(base / "inductor"))
    # the launch's two ranks forked from this process (torchrun's variables, not its agent: not what is tested); an
    # inductor compile prints nothing for a while, but uses CPU, so it is not taken for a hang
    code, output = fork_ranks(2, [sys.executable, "-m", "benchmarks.config_matrix", str(base / "spec.json")],
                              env=env, cwd=ROOT)
    # exit 1: a row did not do its whole job (its test says what); every row's result is there either way
    assert code in (0, 1) and (base / "jobs" / "matrix.json").is_file(), (code, output[-6000:])
    results = {row.name: json.loads((base / "jobs" / row.name / "result.json").read_text()) for row in ROWS}
    return spec, results, json.loads((base / "jobs" / "matrix.json").read_text())


@pytest.mark.slow
@pytest.mark.parametrize("name", [row.name for row in ROWS])
def test_every_row_runs_one_whole_job(matrix, name):
    """The row's job end to end (benchmarks.config_matrix.check_row): the run stopped by SIGTERM after update 2
    exits 75 with its checkpoint (the validation of that update abandoned), the resumed run validates it and
    ends; both runs validate at update 2 and at the end, keep their best checkpoint and predict the test split;
    run_eval.py gives the prediction's tokens from the final weights (an fp8 run's as bf16's); transformers loads
    the export and generates this project's tokens; a compiled job compiled (no fallback to eager) and never
    recompiled over its batches' lengths."""
    spec, results, _ = matrix
    result = results[name]
    assert result["codes"] == {"straight": 0, "stopped": 75, "resumed": 0, "run_eval": 0, "export": 0}
    problems = [p for p in check_row(result, spec) if not p.startswith("resumed:")]  # the next test's
    assert problems == []
    assert len(result["generated"]["ours"]) == N_TEST and result["predictions"]["run_eval"]
    if result["row"]["compile"] != "off":
        assert all(result["summary"][run]["recompiles"] == 0 for run in ("straight", "resumed")), result["summary"]


@pytest.mark.slow
@pytest.mark.parametrize("name", [row.name for row in ROWS])
def test_a_stopped_and_resumed_job_is_the_uninterrupted_one(matrix, name):
    """SIGTERM after update 2 and a resume, with the configs' dropout (0.1): the losses of every update, the
    validation metrics, the best checkpoint kept and the test predictions are the uninterrupted job's."""
    spec, results, _ = matrix
    result = results[name]
    straight, resumed = result["logged"]["straight"], result["logged"]["resumed"]
    assert sorted(straight, key=int) == sorted(resumed, key=int) == [str(s) for s in range(1, spec["steps"] + 1)]
    for step in straight:
        assert resumed[step] == pytest.approx(straight[step], rel=1e-6, abs=1e-6), step
    assert [p for p in check_row(result, spec) if p.startswith("resumed:")] == []


def test_the_matrix_says_which_rows_did_their_whole_job(matrix):
    """matrix.json (what the GPU suite reports): every row, no problem, the CPU seconds of both processes."""
    _, _, summary = matrix
    assert summary["processes"] == 2 and list(summary["rows"]) == [row.name for row in ROWS]
    assert all(not row["problems"] and len(row["cpu_s"]) == 2 for row in summary["rows"].values())


def test_a_compiled_fine_tuning_run_over_varied_lengths_never_recompiles(tmp_path, small_tokenizer_dir):
    """--compile with --fused_cross_entropy over fine-tuning batches of varied source and target lengths: the
    batches' sizes are dynamic from the first update (bart/training/compilation.py) and the fused loss loops over
    chunks, not tokens, so the run compiles once and never again (dynamo's own rule compiled static shapes first,
    then again for each size that changed: on an FSDP model 7 graphs three times over; the fused loss's loop over
    range(0, tokens, chunk) then made every graph guard on the batch's token count: a recompile for each new
    count); the count is the run's summary's. Nor does dynamo trace the model twice: Python floats (the label
    smoothing, a layer norm's eps) traced as symbols made AOTAutograd restart dynamo's analysis once they were
    found specialized, a quarter of the compile (bart/training/compilation.py). aot_eager: dynamo's graphs and
    AOTAutograd's, and their guards, which decide recompiles and restarts, without inductor's code generation."""
    import logging

    import finetune
    from bart.data.summarization import build_finetuning_loader
    from bart.tokenization.tokenization_bart import BartTokenizer

    data = write_summarization_data(str(tmp_path / "data"), sizes=(("train", 24), ("val", 2), ("test", 2)))
    (tmp_path / "config.json").write_text(json.dumps(micro_config(vocab_size=1030)))
    steps = 6
    loader = build_finetuning_loader(data, BartTokenizer.from_pretrained(small_tokenizer_dir), 48, 16, 4, seed=1)
    shapes = [(tuple(b["input_ids"].shape), tuple(b["labels"].shape)) for b in itertools.islice(iter(loader), steps)]
    assert len({s for s, _ in shapes}) >= 3 and len({t for _, t in shapes}) >= 2, shapes  # the lengths do vary
    restarts = []
    handler = logging.Handler()
    handler.emit = lambda record: restarts.append(record.getMessage()) if "Restarting analysis" in record.msg else None
    logger = logging.getLogger("torch._dynamo.convert_frame")
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        summary = finetune.main(["--config_path", str(tmp_path / "config.json"), "--data_dir", data, "--tokenizer",
                                 small_tokenizer_dir, "--from_scratch", "--max_steps", str(steps), "--train_batch_size",
                                 "4", "--max_source_length", "48", "--max_target_length", "16", "--n_val", "0",
                                 "--seed", "1", "--num_workers", "0", "--no_tensorboard", "--compile",
                                 "--compile_backend", "aot_eager", "--fused_cross_entropy", "--label_smoothing", "0.1",
                                 "--output_dir", str(tmp_path / "out")])
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    assert summary["compiled"] is True and "compile_error" not in summary and summary["steps"] == steps
    assert summary["recompiles"] == 0, summary
    assert restarts == []

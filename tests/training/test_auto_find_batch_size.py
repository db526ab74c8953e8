"""--auto_find_batch_size (transformers' flag): an update that runs out of memory before the run's first record
starts the run again with half the per-process batch and twice the accumulation, and the run is then the one
started with that batch: the same weights and losses, bit for bit (on the CPU the same kernels sum the same
micro-batches in the same order). Out of memory is injected in this process: the model's forward raises it for
micro-batches larger than a limit, as a GPU of that size would."""
import json

import pytest
import torch

from bart.files.checkpoint_io import safe_load
from bart.modeling.modeling_bart import BartForConditionalGeneration
from bart.records.dllogger_compat import read_dllogger
from bart.training.trainer import smaller_batch
from tests.helpers.corpus import micro_config
from tests.helpers.entry import run_entry

CUDA_OOM = "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.11 GiB"
CPU_OOM = "[enforce fail at alloc_cpu.cpp:117] DefaultCPUAllocator: can't allocate memory: you tried to allocate 2147483648 bytes"


@pytest.fixture(scope="module")
def world(tmp_path_factory, small_tokenizer_dir):
    from benchmarks.corpora import write_summarization_data

    base = tmp_path_factory.mktemp("auto_batch")
    (base / "config.json").write_text(json.dumps(micro_config(dropout=0.0)))
    data = write_summarization_data(str(base / "data"), sizes=(("train", 40), ("val", 4), ("test", 4)))
    argv = ["--config_path", str(base / "config.json"), "--tokenizer", small_tokenizer_dir, "--from_scratch",
            "--data_dir", data, "--max_steps", "3", "--max_source_length", "32", "--max_target_length", "16",
            "--n_val", "0", "--num_workers", "0", "--no_tensorboard", "--log_freq", "1", "--learning_rate", "1e-3"]
    return {"base": base, "argv": argv}


def _out_of_memory_above(monkeypatch, limit: int, message: str = CUDA_OOM, after: int = 0) -> list:
    """The model's forward raises out of memory for micro-batches of more than ``limit`` sequences, from its
    ``after``-th call on; the batch sizes it was called with are returned (as they come)."""
    forward, calls = BartForConditionalGeneration.forward, []

    def limited(self, *args, **kwargs):
        rows = kwargs["input_ids"].shape[0]
        calls.append(rows)
        if rows > limit and len(calls) > after:
            raise (torch.OutOfMemoryError if message == CUDA_OOM else RuntimeError)(message)
        return forward(self, *args, **kwargs)

    monkeypatch.setattr(BartForConditionalGeneration, "forward", limited)
    return calls


def _run(world, name: str, *extra) -> tuple:
    out = world["base"] / name
    code = run_entry("finetune.py", world["argv"] + ["--output_dir", str(out), *extra])
    return code, out


def _losses(out) -> list:
    return [r["data"]["loss"] for r in read_dllogger(str(out / "dllogger.json"))
            if r["type"] == "LOG" and "loss" in r["data"]]


def _same_run(out, reference) -> None:
    mine, theirs = safe_load(str(out / "final_step.ckpt")), safe_load(str(reference / "final_step.ckpt"))
    assert mine.keys() == theirs.keys()
    assert all(torch.equal(mine[k], theirs[k]) for k in mine), [k for k in mine if not torch.equal(mine[k], theirs[k])]
    assert _losses(out) == _losses(reference) and len(_losses(out)) == 3


def test_smaller_batch_keeps_the_global_batch_whole():
    assert [smaller_batch(b) for b in (32, 16, 12, 6, 5, 3, 2)] == [16, 8, 6, 3, 1, 1, 1]


@pytest.mark.parametrize("message", [CUDA_OOM, CPU_OOM], ids=["cuda", "cpu"])
def test_out_of_memory_halves_the_batch_until_it_fits_and_the_run_is_the_one_started_with_it(world, monkeypatch,
                                                                                           capsys, message):
    """8 x 1 runs out, 4 x 2 runs out, 2 x 4 fits: the run is the run of --train_batch_size 2
    --gradient_accumulation_steps 4, and its records and a resume of it say so."""
    kind = "cuda" if message == CUDA_OOM else "cpu"
    code, reference = _run(world, f"reference_2x4_{kind}", "--train_batch_size", "2", "--gradient_accumulation_steps",
                           "4")
    assert code == 0
    calls = _out_of_memory_above(monkeypatch, 2, message)
    capsys.readouterr()
    code, out = _run(world, f"auto_{kind}", "--train_batch_size", "8", "--auto_find_batch_size")
    said = capsys.readouterr().out
    assert code == 0, said
    assert [line for line in said.splitlines() if line.startswith("[auto_find_batch_size]")] == [
        "[auto_find_batch_size] out of memory at batch 8: retrying with 4 x 2 accumulation",
        "[auto_find_batch_size] out of memory at batch 4: retrying with 2 x 4 accumulation"]
    assert calls[:2] == [8, 4] and set(calls[2:]) == {2}  # no sequence of the failed updates is lost
    _same_run(out, reference)
    record = json.loads((out / "run_config.json").read_text())
    assert (record["train_batch_size"], record["gradient_accumulation_steps"]) == (2, 4)
    assert record["run_banner"]["global_batch"].startswith("8 sequences per update")
    args = safe_load(str(out / "_epoch0_step3.ckpt"))["args"]
    assert (args["train_batch_size"], args["gradient_accumulation_steps"]) == (2, 4)
    # the same command again, resumed for one more update: it goes on with the batch found
    code, _ = _run(world, out.name, "--train_batch_size", "8", "--auto_find_batch_size", "--max_steps", "4",
                   "--allow_resume_change", "max_steps", "--resume_from_checkpoint", "auto")
    said = capsys.readouterr()
    assert code == 0, said.err
    assert (f"[auto_find_batch_size] resuming with batch 2 x 4 accumulation, the batch the run found "
            f"({out / 'run_config.json'})") in said.out
    assert "retrying" not in said.out and _losses(out)[:3] == _losses(reference)


def test_out_of_memory_after_updates_starts_the_run_again_from_its_first(world, monkeypatch, capsys):
    """Updates 1 and 2 applied at 8 x 1, update 3 out of memory: the weights, optimizer, schedule and data go back
    to the run's start, and the run is the one of 4 x 2."""
    code, reference = _run(world, "reference_4x2", "--train_batch_size", "4", "--gradient_accumulation_steps", "2")
    assert code == 0
    calls = _out_of_memory_above(monkeypatch, 4, after=2)
    capsys.readouterr()
    code, out = _run(world, "auto_late", "--train_batch_size", "8", "--auto_find_batch_size", "--log_freq", "10")
    said = capsys.readouterr().out
    assert code == 0 and "[auto_find_batch_size] out of memory at batch 8: retrying with 4 x 2 accumulation" in said
    assert calls == [8, 8, 8] + [4] * 6
    mine, theirs = safe_load(str(out / "final_step.ckpt")), safe_load(str(reference / "final_step.ckpt"))
    assert all(torch.equal(mine[k], theirs[k]) for k in mine)


def test_at_batch_one_the_out_of_memory_line_ends_the_run(world, monkeypatch, capsys):
    _out_of_memory_above(monkeypatch, 0)
    code, out = _run(world, "auto_never_fits", "--train_batch_size", "2", "--auto_find_batch_size")
    said = capsys.readouterr()
    assert "[auto_find_batch_size] out of memory at batch 2: retrying with 1 x 2 accumulation" in said.out
    errors = [line for line in said.err.splitlines() if line.startswith("finetune.py")]
    assert code == 2 and errors == [
        "finetune.py: error: out of GPU memory: asked for 2.00 GiB: lower --train_batch_size (--gradient_accumulation_steps "
        "keeps the global batch) or --max_source_length / --max_target_length, add --gradient_checkpointing or --bf16, "
        "or use a smaller model (the config's d_model, layers, ffn dims, vocab_size)"], said.err


def test_without_the_flag_out_of_memory_ends_the_run_at_once(world, monkeypatch, capsys):
    calls = _out_of_memory_above(monkeypatch, 4)
    code, _ = _run(world, "no_auto", "--train_batch_size", "8")
    said = capsys.readouterr()
    assert code == 2 and calls == [8] and "retrying" not in said.out
    assert "finetune.py: error: out of GPU memory: asked for 2.00 GiB" in said.err


def test_pretraining_finds_its_batch_too(tmp_path, monkeypatch, small_tokenizer_dir):
    """pretrain.py: its loader rebuilt for 4 x 2 and its noise drawn again from the run's start; without capsys
    (LDDL's dataset logger keeps the stderr it finds): the log's record says what was found."""
    import os

    from tests.helpers.corpus import write_shards

    config = tmp_path / "config.json"
    config.write_text(json.dumps(micro_config(dropout=0.0)))
    data = os.path.dirname(write_shards(str(tmp_path / "shards"), [40, 40])[0])
    argv = ["--config_path", str(config), "--data_dir", data, "--tokenizer", small_tokenizer_dir, "--max_steps", "3",
            "--max_source_length", "32", "--num_workers", "0", "--log_freq", "1", "--no_tensorboard"]
    assert run_entry("pretrain.py", argv + ["--output_dir", str(tmp_path / "reference"), "--train_batch_size", "4",
                                            "--gradient_accumulation_steps", "2"]) == 0
    _out_of_memory_above(monkeypatch, 4)
    assert run_entry("pretrain.py", argv + ["--output_dir", str(tmp_path / "auto"), "--train_batch_size", "8",
                                            "--auto_find_batch_size"]) == 0
    found = [r["data"]["auto_find_batch_size"] for r in read_dllogger(str(tmp_path / "auto" / "dllogger.json"))
             if r["type"] == "LOG" and "auto_find_batch_size" in r["data"]]
    assert found == ["4 x 2"]
    _same_run_at(tmp_path / "auto" / "_step3.ckpt", tmp_path / "reference" / "_step3.ckpt")
    assert _losses(tmp_path / "auto") == _losses(tmp_path / "reference")


def _same_run_at(mine, theirs) -> None:
    mine, theirs = safe_load(str(mine))["model"], safe_load(str(theirs))["model"]
    assert all(torch.equal(mine[k], theirs[k]) for k in mine)

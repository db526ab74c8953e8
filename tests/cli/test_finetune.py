"""finetune.py and run_eval.py end to end on a small generated summarization set (CPU)."""
import json
import os
import sys

import pytest
import torch

from bart.configuration import BartConfig
from bart.data.summarization import SortishSampler, build_finetuning_loader, read_split
from bart.modeling import BartForConditionalGeneration
from tests.helpers import ROOT
from tests.helpers.corpus import SMALL_VOCAB_SIZE
from tests.helpers.entry import run_entry
from tests.helpers.forked import fork_ranks
from tests.helpers.summaries import write_summarization_data


def _run(script, *args, nproc):
    """``torchrun --nproc_per_node=NPROC SCRIPT ARGS``'s ranks (forked, with torchrun's variables): their output."""
    # one thread: a tiny model's ops gain little from two, and when other work shares the cores,
    # spinning OpenMP threads made steps an order of magnitude slower (timeouts)
    code, out = fork_ranks(nproc, [sys.executable, script, *args], env=dict(os.environ, OMP_NUM_THREADS="1"), cwd=ROOT)
    assert code == 0, out[-3000:]
    return out


FINETUNED_STEPS = 80


@pytest.fixture(scope="module")
def finetuned(tmp_path_factory, small_tokenizer_dir):
    # The small trained vocabulary (1024 tokens, not GPT-2's 50,265): the softmax no longer dominates
    # a step, so batches of 32 cost less than batches of 16 did. At a constant 3e-3 validation ROUGE-1
    # climbs steadily (about 1 → 8 → 11 → 23 at steps 0, 50, 100, 200: words of the first sentence, not
    # just the unigram guess); 300 decaying steps at 2e-3 reached about 40 for half again the time.
    # FINETUNED_STEPS updates are enough for the test's rise of 5.
    base = tmp_path_factory.mktemp("ft")
    data = write_summarization_data(str(base / "data"))
    values = json.load(open(os.path.join(ROOT, "configs", "config_tiny.json")))
    values.update(max_position_embeddings=128, dropout=0.0, vocab_size=SMALL_VOCAB_SIZE)
    config = base / "config.json"
    config.write_text(json.dumps(values))
    # in this process (about the run's results: the process-level runs are below, forked with torchrun's variables)
    assert run_entry("finetune.py", [
        "--config_path", str(config), "--data_dir", data, "--tokenizer", small_tokenizer_dir,
        "--from_scratch", "--max_steps", str(FINETUNED_STEPS), "--train_batch_size", "32", "--learning_rate", "3e-3",
        "--lr_scheduler", "constant", "--warmup_steps", "20", "--max_source_length", "64", "--max_target_length", "24",
        "--val_check_interval", str(FINETUNED_STEPS // 2), "--n_val", "16", "--eval_beams", "2",
        "--eval_max_gen_length", "24", "--sortish_sampler", "--label_smoothing", "0.1", "--log_freq", "50",
        "--save_top_k", "1", "--num_workers", "0", "--output_dir", str(base / "out")]) == 0
    return base, data, str(config)


def _val_rouge(out_dir):
    from bart.records.dllogger_compat import read_dllogger
    return [(r["step"], r["data"]["val_rouge1"]) for r in read_dllogger(os.path.join(out_dir, "dllogger.json"))
            if r["type"] == "LOG" and "val_rouge1" in r["data"]]


@pytest.mark.slow
def test_validation_rouge_rises_and_checkpoints_are_named(finetuned):
    base, _, _ = finetuned
    rouge = _val_rouge(str(base / "out"))
    assert [s for s, _ in rouge] == [0, FINETUNED_STEPS // 2, FINETUNED_STEPS]
    assert rouge[-1][1] > rouge[0][1] + 5.0, rouge
    names = os.listdir(base / "out")
    assert any(n.startswith("_epoch") and n.endswith(f"_step{FINETUNED_STEPS}.ckpt") for n in names)
    assert sum(n.startswith("best_rouge2_step") for n in names) == 1


@pytest.mark.slow
def test_final_checkpoint_loads_in_snippet_and_run_eval(finetuned, small_tokenizer_dir, tmp_path):
    base, data, config = finetuned
    ckpt = next(str(base / "out" / n) for n in os.listdir(base / "out") if n.startswith("_epoch"))
    cfg = BartConfig(**json.load(open(config)))
    cfg.dtype, cfg.pre_ln = None, True
    model = BartForConditionalGeneration.from_pretrained(ckpt, config=cfg)
    assert not model.training
    # the one-process runs in this process (tests.helpers.entry), the three-process one forked with torchrun's variables
    assert run_entry("run_eval.py", [
        ckpt, config, data, str(tmp_path / "one"), "--tokenizer", small_tokenizer_dir, "--bs", "4", "--n_obs", "8",
        "--eval_beams", "2", "--max_target_length", "24", "--max_source_length", "64", "--no_repeat_ngram_size", "2"]) == 0
    one = (tmp_path / "one" / "test_generations.txt").read_text().splitlines()
    rouge = json.load(open(tmp_path / "one" / "test_rouge.json"))
    assert len(one) == 8 and set(rouge) >= {"rouge1", "rouge2", "rougeL", "rougeLsum"}
    # three processes write the same lines in the same order: 2 batches of 4 dealt to 3 ranks, one from each
    # of ranks 0 and 1 and none to rank 2 (more ranks than batches: a rank with no examples)
    _run("run_eval.py", ckpt, config, data, str(tmp_path / "three"), "--tokenizer", small_tokenizer_dir, "--bs", "4",
         "--n_obs", "8", "--eval_beams", "2", "--max_target_length", "24", "--max_source_length", "64",
         "--no_repeat_ngram_size", "2", nproc=3)
    assert (tmp_path / "three" / "test_generations.txt").read_text().splitlines() == one
    # the same settings from a generation_config.json (as transformers writes it) passed through to generate
    (tmp_path / "gen").mkdir()
    (tmp_path / "gen" / "generation_config.json").write_text(json.dumps(
        {"num_beams": 2, "no_repeat_ngram_size": 2, "transformers_version": "4.57.6"}))
    assert run_entry("run_eval.py", [
        ckpt, config, data, str(tmp_path / "four"), "--tokenizer", small_tokenizer_dir, "--bs", "4", "--n_obs", "8",
        "--max_target_length", "24", "--max_source_length", "64", "--generation_config", str(tmp_path / "gen")]) == 0
    assert (tmp_path / "four" / "test_generations.txt").read_text().splitlines() == one
    logs = (tmp_path / "one" / "dllogger.json").read_text()
    assert "latency_p99_s" in logs and "throughput_seq_per_s" in logs


# fine-tuning on from the fixture's weights, the same seed under each strategy: 2 updates, validation at steps 0, 1
# and 2 (rouge2, the default), the best 2 kept, the test split predicted, the final weights written
STRATEGY_LR = 1e-3


@pytest.fixture(scope="module")
def ddp_and_fsdp(finetuned):
    base, data, config = finetuned
    runs = {}
    for strategy in ("ddp", "fsdp"):
        runs[strategy] = base / f"strategy_{strategy}"
        runs[strategy + "_output"] = _run("finetune.py", "--config_path", config, "--data_dir", data, "--init_checkpoint",
             str(base / "out" / "final_step.ckpt"), "--max_steps", "2", "--train_batch_size", "4", "--learning_rate",
             str(STRATEGY_LR), "--lr_scheduler", "constant", "--warmup_steps", "0", "--max_source_length", "64",
             "--max_target_length", "24", "--val_check_interval", "1", "--n_val", "6", "--eval_beams", "2",
             "--eval_max_gen_length", "24", "--save_top_k", "2", "--do_predict", "--n_test", "6", "--no_tensorboard",
             "--log_freq", "1", "--num_workers", "0", "--distributed_strategy", strategy, "--output_dir", str(runs[strategy]), nproc=2)
    # FSDP2's warning about the logits returned as a slice of the padded vocabulary, on every rank and step: not shown
    assert "returned a view tensor" not in runs["fsdp_output"]
    return base / "out" / "final_step.ckpt", runs["ddp"], runs["fsdp"]


def _close_weights(fsdp: dict, ddp: dict) -> None:
    assert list(fsdp) == list(ddp)  # every name, tied ones included, in the same order
    for name, value in ddp.items():
        assert type(fsdp[name]) is torch.Tensor and fsdp[name].shape == value.shape, name
        # a key projection's bias has no gradient in exact arithmetic (softmax ignores a constant added to every
        # score): AdamW turns the strategies' different rounding of that zero into steps of up to the learning rate
        atol = 2 * STRATEGY_LR if name.endswith("k_proj.bias") else 1e-5
        torch.testing.assert_close(fsdp[name], value, atol=atol, rtol=1e-4, msg=name)


@pytest.mark.slow
def test_every_validation_logs_the_loss_the_scores_and_the_generated_length(finetuned):
    """What transformers' Seq2SeqTrainer (eval_loss, ROUGE, gen_len) and the reference (val_loss, gen_len, gen_time)
    show at each validation. Rules out: ROUGE only (or the loss only, with --val_metric loss)."""
    from bart.records.dllogger_compat import read_dllogger

    base, _, _ = finetuned
    records = [r["data"] for r in read_dllogger(str(base / "out" / "dllogger.json"))
               if r["type"] == "LOG" and "val_rouge2" in r["data"]]
    assert len(records) == 3
    for data in records:
        assert {"val_loss", "val_rouge1", "val_rouge2", "val_rougeL", "val_rougeLsum", "val_gen_len",
                "val_gen_time"} <= set(data), data
        assert 1 < data["val_gen_len"] <= 30 and data["val_gen_time"] > 0 and data["val_loss"] > 0, data  # 24 generated
    assert records[-1]["val_loss"] < records[0]["val_loss"]


def test_ranking_by_any_score_a_threshold_and_the_validation_label_length(tmp_path, small_tokenizer_dir, capsys):
    """--metric_for_best_model eval_rougeL (transformers' spelling) ranks by ROUGE-L; an improvement not above
    --early_stopping_threshold does not reset the patience; --val_max_target_length cuts the validation labels
    (the loss changes); a score the task does not give is one line."""
    from bart.records.dllogger_compat import read_dllogger
    from tests.helpers.corpus import micro_config

    data = write_summarization_data(str(tmp_path / "data"), sizes=(("train", 16), ("val", 4), ("test", 4)))
    (tmp_path / "config.json").write_text(json.dumps(micro_config()))
    argv = ["--config_path", str(tmp_path / "config.json"), "--data_dir", data, "--tokenizer", small_tokenizer_dir,
            "--from_scratch", "--max_steps", "4", "--train_batch_size", "4", "--max_source_length", "32",
            "--max_target_length", "16", "--eval_max_gen_length", "8", "--eval_beams", "1", "--n_val", "4",
            "--val_check_interval", "1", "--num_workers", "0", "--no_tensorboard"]
    out = tmp_path / "ranked"
    assert run_entry("finetune.py", argv + ["--output_dir", str(out), "--metric_for_best_model", "eval_rougeL",
                                            "--early_stopping_patience", "1", "--early_stopping_threshold", "1000"]) == 0
    summary = [r["data"] for r in read_dllogger(str(out / "dllogger.json")) if "stopped_early" in r.get("data", {})][-1]
    assert summary["stopped_early"] is True and summary["steps"] == 1, summary  # step 1 did not beat step 0 by 1000
    assert (out / "best_rougeL.json").is_file() and not (out / "best_rouge2.json").exists()

    def val_loss(folder):
        return [r["data"]["val_loss"] for r in read_dllogger(str(folder / "dllogger.json"))
                if r["type"] == "LOG" and "val_loss" in r["data"]][0]
    cut = tmp_path / "cut"
    assert run_entry("finetune.py", argv + ["--output_dir", str(cut), "--max_steps", "1", "--val_max_target_length",
                                            "3"]) == 0
    assert val_loss(cut) != pytest.approx(val_loss(out))  # the step-0 loss over 3 label tokens, not 16
    capsys.readouterr()
    assert run_entry("finetune.py", argv + ["--output_dir", str(tmp_path / "bleu"), "--val_metric", "bleu"]) == 2
    assert "--val_metric bleu: summarization validation gives rouge1, rouge2, rougeL, rougeLsum, loss" in \
        capsys.readouterr().err


def test_fsdp_fine_tuning_writes_what_ddp_writes(ddp_and_fsdp):
    """Fine-tuning under FSDP validates (generation + ROUGE), keeps best-k, predicts and writes the final weights
    as under DDP: the same files, the same ROUGE and predictions, the same weights within float tolerance (no
    crash of generation on the sharded model: `aten.embedding.default got mixed torch.Tensor and DTensor`)."""
    from bart.files.checkpoint_io import safe_load
    from bart.records.dllogger_compat import read_dllogger

    start, ddp, fsdp = ddp_and_fsdp
    assert sorted(os.listdir(fsdp)) == sorted(os.listdir(ddp))
    names = set(os.listdir(ddp))
    assert {"final_step.ckpt", "_epoch0_step2.ckpt", "best_rouge2.json", "test_generations.txt",
            "test_rouge.json"} <= names and sum(n.startswith("best_rouge2_step") for n in names) == 2
    for name in ("test_generations.txt", "test_rouge.json", "best_rouge2.json"):
        assert (fsdp / name).read_text() == (ddp / name).read_text(), name
    predictions = (ddp / "test_generations.txt").read_text().splitlines()
    assert len(predictions) == 6 and all(p.split() for p in predictions)  # words, not empty lines
    logged = {}
    for run in (ddp, fsdp):
        records = [r for r in read_dllogger(str(run / "dllogger.json")) if r["type"] == "LOG" and isinstance(r["step"], int)]
        logged[run] = {(r["step"], k): v for r in records for k, v in r["data"].items()
                       if k.startswith(("val_", "loss")) and k != "val_gen_time"}  # seconds: the machine's
    assert {k for k in logged[ddp] if k[1] == "val_rouge1"} == {(0, "val_rouge1"), (1, "val_rouge1"), (2, "val_rouge1")}
    assert max(v for k, v in logged[ddp].items() if k[1] == "val_rouge1") > 0
    assert logged[fsdp] == pytest.approx(logged[ddp], abs=1e-5)
    moved = 0.0
    for name in sorted(names):
        if not name.endswith(".ckpt"):
            continue
        a, b = safe_load(str(ddp / name)), safe_load(str(fsdp / name))
        if name == "final_step.ckpt":  # the reference's raw state dict
            _close_weights(b, a)
            initial = safe_load(str(start))
            moved = max(float((a[k] - initial[k]).abs().max()) for k in a if not k.endswith("k_proj.bias"))
            continue
        assert sorted(a) == sorted(b) and a["kind"] == b["kind"], name
        _close_weights(b["model"], a["model"])
        assert b.get("metrics") == pytest.approx(a.get("metrics"), abs=1e-5) and b["config"] == a["config"], name
        if "optimizer" in a:  # a training checkpoint: the optimizer state in optimizer.state_dict()'s layout
            assert b["optimizer"]["param_groups"] == a["optimizer"]["param_groups"]
            assert sorted(b["optimizer"]["state"]) == sorted(a["optimizer"]["state"])
            for number, state in a["optimizer"]["state"].items():
                for key, value in state.items():
                    torch.testing.assert_close(b["optimizer"]["state"][number][key], value, atol=1e-5, rtol=1e-4)
    assert moved > 100 * 1e-5  # the weights trained: their agreement is not the starting weights'
    model = BartForConditionalGeneration(BartConfig(**json.load(open(ddp.parent / "config.json"))))
    model.load_state_dict(safe_load(str(fsdp / "final_step.ckpt")))  # as the reference loads final_step.ckpt


def test_one_precision_travels_through_the_run(tmp_path, small_tokenizer_dir, monkeypatch):
    """A run makes its Precision once (at parse time) and every autocast of it, training, validation's generation
    and prediction, is opened by that one object; --no-tf32 reaches the process-wide TF32 switch."""
    import finetune
    from bart.runtime.precision import Precision
    from tests.helpers.corpus import micro_config

    data = write_summarization_data(str(tmp_path / "data"), sizes=(("train", 8), ("val", 2), ("test", 2)))
    (tmp_path / "config.json").write_text(json.dumps(micro_config(dropout=0.0)))
    made, opened = [], []
    post_init, autocast = Precision.__post_init__, Precision.autocast
    monkeypatch.setattr(Precision, "__post_init__", lambda self: (made.append(self), post_init(self))[1])
    monkeypatch.setattr(Precision, "autocast", lambda self, device: (opened.append(self), autocast(self, device))[1])
    tf32 = torch.backends.cuda.matmul.allow_tf32
    try:
        torch.backends.cuda.matmul.allow_tf32 = True
        finetune.main(["--config_path", str(tmp_path / "config.json"), "--data_dir", data, "--tokenizer",
                       small_tokenizer_dir, "--from_scratch", "--max_steps", "1", "--train_batch_size", "4",
                       "--max_source_length", "32", "--max_target_length", "8", "--val_check_interval", "1",
                       "--n_val", "2", "--eval_max_gen_length", "6", "--do_predict", "--n_test", "2", "--bf16",
                       "--no-tf32", "--no_tensorboard", "--num_workers", "0", "--output_dir", str(tmp_path / "out")])
        assert torch.backends.cuda.matmul.allow_tf32 is False
    finally:
        torch.backends.cuda.matmul.allow_tf32 = tf32
    [run_precision] = made
    assert (run_precision.name, run_precision.allow_tf32) == ("bf16", False)
    # 1 update, validation before training and after it (the loss and the generation, 1 batch each), prediction
    assert len(opened) == 6 and all(p is run_precision for p in opened)


def test_bad_inputs_are_explained(tmp_path, finetuned, capsys):
    _, data, config = finetuned
    folder = tmp_path / "bad"
    folder.mkdir()
    (folder / "train.source").write_text("a b c\nd e f\n")
    (folder / "train.target").write_text("a\n")
    with pytest.raises(ValueError, match="train.source has 2 lines but .*train.target has 1"):
        read_split(str(folder), "train")
    with pytest.raises(FileNotFoundError, match="missing .*val.source"):
        read_split(str(folder), "val")
    (folder / "test.source").write_bytes(b"good line\n\xff\xfe bad\n")
    (folder / "test.target").write_text("x\ny\n")
    with pytest.raises(ValueError, match="test.source:2 is not UTF-8"):
        read_split(str(folder), "test")
    (folder / "dev.source").write_text("one\n\nthree\n")
    (folder / "dev.target").write_text("1\n2\n3\n")
    with pytest.raises(ValueError, match="dev.source:2 is empty"):
        read_split(str(folder), "dev")
    capsys.readouterr()
    code = run_entry("finetune.py", ["--config_path", config, "--data_dir", data, "--max_steps", "1",
                                     "--init_checkpoint", str(tmp_path), "--output_dir", str(tmp_path / "out")])
    assert code != 0 and "holds no checkpoint" in capsys.readouterr().err


def test_an_empty_training_example_is_refused_naming_its_line(tmp_path, small_tokenizer_dir):
    """An empty (or whitespace) source or target line in the training split is refused, naming the file and line,
    as run_eval.py and validation refuse it (not: the pair left out, 31 rows for 32 lines)."""
    from bart.errors import UserError
    from bart.tokenization.tokenization_bart import BartTokenizer

    tokenizer = BartTokenizer.from_pretrained(small_tokenizer_dir)  # the file's other tests' (no GPT-2 folder to build)
    folder = tmp_path / "data"
    folder.mkdir()
    (folder / "train.source").write_text("one two\nthree four\n \t \nfive six\n")
    (folder / "train.target").write_text("one\ntwo\nthree\nfour\n")
    with pytest.raises(UserError, match=f"^{folder / 'train.source'}:3 is empty; every line must hold one example"):
        build_finetuning_loader(str(folder), tokenizer, 16, 8, batch_size=2)
    (folder / "train.source").write_text("one two\nthree four\nfive\nfive six\n")
    (folder / "train.target").write_text("one\n\nthree\nfour\n")
    with pytest.raises(UserError, match=f"^{folder / 'train.target'}:2 is empty"):
        build_finetuning_loader(str(folder), tokenizer, 16, 8, batch_size=2)
    assert len(build_finetuning_loader(str(folder), tokenizer, 16, 8, batch_size=1, n_obs=1).dataset) == 1


@pytest.mark.parametrize("mode", ["random", "sortish", "max_tokens"])
def test_finetuning_loader_seeks_to_its_position(tmp_path, small_tokenizer_dir, mode):
    """Each fine-tuning loader (random batches, sortish, token budget), two ranks of it, with and
    without loader workers: started at the position saved after k batches it yields the rest of the
    epoch exactly, and never collates (tokenizes) a batch it skips; one process of the same global batch started
    there yields the same updates."""
    from bart.tokenization.tokenization_bart import BartTokenizer

    data = write_summarization_data(str(tmp_path), sizes=(("train", 90),))
    tokenizer = BartTokenizer.from_pretrained(small_tokenizer_dir)
    options = {"random": {}, "sortish": {"sortish": True}, "max_tokens": {"max_tokens": 160}}[mode]

    def loader(rank, workers=0):
        made = build_finetuning_loader(data, tokenizer, 64, 24, 8, world_size=2, rank=rank, seed=3,
                                       num_workers=workers, **options)
        made.set_epoch(1)
        return made

    for rank in (0, 1):
        straight, positions = [], []
        for batch in (first := loader(rank)):
            straight.append(batch["input_ids"].tolist())
            positions.append(first.position())
        assert len(straight) >= 5
        for k, workers in ((0, 0), (2, 2), (len(straight) - 2, 0), (len(straight) - 1, 0)):
            resumed = loader(rank, workers)
            collated = []
            if not workers:  # in this process: the collations can be counted
                collate = resumed.dataset.collate
                resumed.dataset.collate = lambda items, seen=collated, collate=collate: \
                    seen.append([i["index"] for i in items]) or collate(items)
            resumed.seek(positions[k])
            assert [b["input_ids"].tolist() for b in resumed] == straight[k + 1:]
            if not workers:
                assert len(collated) == len(straight) - k - 1
    # the position is global: one process with the same global batch (2 x 8 sequences: 1 x 8 x accumulation 2,
    # or 1 x 16; with a token budget, 2 micro-batches per update) takes up the same updates in the same order
    ranks = [list(loader(rank).sampler) for rank in (0, 1)]
    shapes = {"accumulation": 2} if mode == "max_tokens" else {"batch_size": 16}
    for layout in ({"batch_size": 8, "accumulation": 2}, shapes):
        one = build_finetuning_loader(data, tokenizer, 64, 24, world_size=1, seed=3, **{"batch_size": 8, **layout},
                                      **options)
        one.set_epoch(1)
        one.seek(positions[1])  # after 2 batches of each rank: 2 updates
        if layout.get("accumulation") == 2:
            assert list(one.sampler) == [batch for pair in list(zip(*ranks))[2:] for batch in pair]
        else:
            assert list(one.sampler) == [a + b for a, b in list(zip(*ranks))[2:]]
    with pytest.raises(ValueError, match=r"does not fit this run's data \(examples 90 → 80\)"):
        made = build_finetuning_loader(data, tokenizer, 64, 24, 8, world_size=2, rank=0, seed=3, n_obs=80, **options)
        made.set_epoch(1)
        made.seek(positions[1])


def test_sortish_sampler_covers_every_example_once():
    lengths = [(i * 7) % 23 for i in range(103)]
    for world in (1, 2, 3):
        for max_tokens in (None, 60):
            seen, counts = [], []
            for rank in range(world):
                sampler = SortishSampler(lengths, 8, world, rank, seed=1, max_tokens=max_tokens)
                sampler.set_epoch(2)
                batches = list(sampler)
                counts.append(len(batches))
                seen.extend(i for b in batches for i in b)
                if max_tokens:
                    assert all(max(lengths[i] for i in b) * len(b) <= max_tokens or len(b) == 1 for b in batches)
            assert sorted(seen) == list(range(103)) and len(set(counts)) == 1
    a = list(SortishSampler(lengths, 8, seed=1))
    b = SortishSampler(lengths, 8, seed=1)
    b.set_epoch(1)
    assert a != list(b) and a == list(SortishSampler(lengths, 8, seed=1))


def _updates(lengths, ranks, accumulation, batch_size, **options):
    """An epoch's updates as a SortishSampler deals them: per update, its micro-batches (a x ranks + rank)."""
    dealt = []
    for rank in range(ranks):
        sampler = SortishSampler(lengths, batch_size, ranks, rank, seed=1, accumulation=accumulation, **options)
        sampler.set_epoch(2)
        dealt.append(list(sampler))
    assert len({len(batches) for batches in dealt}) == 1 and len(dealt[0]) % accumulation == 0
    return [[dealt[rank][u * accumulation + a] for a in range(accumulation) for rank in range(ranks)]
            for u in range(len(dealt[0]) // accumulation)]


@pytest.mark.parametrize("options", [{}, {"max_tokens": 60}])
def test_an_epochs_updates_do_not_depend_on_the_processes_that_share_them(options):
    """The same global batch (2 x 4, 1 x 4 x accumulation 2, 1 x 8; with a token budget, 2 micro-batches per update)
    deals the same examples to each update, in the same order; an update short of examples (the epoch's last chunk
    holds 103 = 12 x 8 + 7; 4 ranks x 2 micro-batches of 1 need 8) fills its empty micro-batch with a filler index
    (len + i: the update's last example, its labels ignored) and every example appears once."""
    lengths = [(i * 7) % 23 for i in range(103)]
    flat = [[i for batch in update for i in batch] for update in _updates(lengths, 2, 1, 4, **options)]
    shapes = ((1, 2, 4), (1, 2, 8)) if options else ((1, 2, 4), (1, 1, 8), (4, 2, 1))
    for ranks, accumulation, batch_size in shapes:
        updates = _updates(lengths, ranks, accumulation, batch_size, **options)
        fillers = [i for update in updates for batch in update for i in batch if i >= len(lengths)]
        assert [[i for batch in update for i in batch if i < len(lengths)] for update in updates] == flat
        short = [update for update in flat if len(update) < 8]
        assert fillers == ([len(lengths) + short[0][-1]] if (ranks, batch_size) == (4, 1) else [])
    assert sorted(i for update in flat for i in update) == list(range(103))


@pytest.mark.parametrize("sortish", [False, True])
def test_a_position_counted_in_one_process_batches_resumes_exactly(tmp_path, small_tokenizer_dir, sortish):
    """A checkpoint whose data position counts one process's batches (``{"epoch", "batches", "layout"}``: checkpoints
    written before positions counted the epoch's examples) resumes where it stopped: one process without accumulation
    is dealt the same order either way, so the rest of the epoch is the batches after the k-th. A position of several
    processes, or of token budgets, dealt another order: one line naming --init_checkpoint."""
    from bart.tokenization.tokenization_bart import BartTokenizer

    data = write_summarization_data(str(tmp_path), sizes=(("train", 90),))
    tokenizer = BartTokenizer.from_pretrained(small_tokenizer_dir)

    def loader(**extra):
        made = build_finetuning_loader(data, tokenizer, 64, 24, 8, seed=3, sortish=sortish, **extra)
        made.set_epoch(1)
        return made

    straight = [batch["input_ids"].tolist() for batch in loader()]
    for k in (0, 3, len(straight) - 1):
        resumed = loader()
        resumed.seek({"epoch": 1, "batches": k, "layout": {"examples": 90, "batch_size": 8, "max_tokens": None,
                                                            "processes": 1}})
        assert [b["input_ids"].tolist() for b in resumed] == straight[k:]
    for layout, extra in (({"processes": 2, "batch_size": 8, "max_tokens": None}, {}),
                          ({"processes": 1, "batch_size": 8, "max_tokens": 160}, {"max_tokens": 160}),
                          ({"processes": 1, "batch_size": 4, "max_tokens": None}, {})):
        with pytest.raises(ValueError, match="start a new run from its weights with --init_checkpoint"):
            loader(**extra).seek({"epoch": 1, "batches": 2, "layout": {"examples": 90, **layout}})

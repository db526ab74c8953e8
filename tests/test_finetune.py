"""finetune.py and run_eval.py end to end on a small generated summarization set (CPU)."""
import json
import os
import socket
import subprocess
import sys

import pytest
import torch

from bart.configuration import BartConfig
from bart.data.summarization import SortishSampler, build_finetuning_loader, read_split
from bart.modeling import BartForConditionalGeneration
from tests.helpers.corpus import SMALL_VOCAB_SIZE
from tests.helpers.summaries import write_summarization_data

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _run(script, *args, nproc=1, timeout=600):
    # one thread: a tiny model's ops gain little from two, and when other work shares the cores,
    # spinning OpenMP threads made steps an order of magnitude slower (timeouts)
    env = dict(os.environ, PYTHONPATH=ROOT, OMP_NUM_THREADS="1")
    cmd = [sys.executable, script, *args]
    if nproc > 1:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={nproc}", f"--master_port={port}",
               script, *args]
    out = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    assert out.returncode == 0, out.stderr[-3000:]
    return out


@pytest.fixture(scope="module")
def finetuned(tmp_path_factory, small_tokenizer_dir):
    # The small trained vocabulary (1024 tokens, not GPT-2's 50,265): the softmax no longer dominates
    # a step, so batches of 32 cost less than batches of 16 did. At a constant 3e-3 validation ROUGE-1
    # climbs steadily (about 1 → 11 → 23 at steps 0, 100, 200: words of the first sentence, not
    # just the unigram guess); 300 decaying steps at 2e-3 reached about 40 for half again the time.
    base = tmp_path_factory.mktemp("ft")
    data = write_summarization_data(str(base / "data"))
    values = json.load(open(os.path.join(ROOT, "configs", "config_tiny.json")))
    values.update(max_position_embeddings=128, dropout=0.0, vocab_size=SMALL_VOCAB_SIZE)
    config = base / "config.json"
    config.write_text(json.dumps(values))
    _run("finetune.py", "--config_path", str(config), "--data_dir", data, "--tokenizer", small_tokenizer_dir,
         "--from_scratch", "--max_steps", "200", "--train_batch_size", "32", "--learning_rate", "3e-3",
         "--lr_scheduler", "constant", "--warmup_steps", "20", "--max_source_length", "64", "--max_target_length", "24",
         "--val_check_interval", "100", "--n_val", "16", "--eval_beams", "2", "--eval_max_gen_length", "24",
         "--sortish_sampler", "--label_smoothing", "0.1", "--log_freq", "50", "--save_top_k", "1",
         "--output_dir", str(base / "out"))
    return base, data, str(config)


def _val_rouge(out_dir):
    from utils.dllogger_compat import read_dllogger
    return [(r["step"], r["data"]["val_rouge1"]) for r in read_dllogger(os.path.join(out_dir, "dllogger.json"))
            if r["type"] == "LOG" and "val_rouge1" in r["data"]]


@pytest.mark.slow
def test_validation_rouge_rises_and_checkpoints_are_named(finetuned):
    base, _, _ = finetuned
    rouge = _val_rouge(str(base / "out"))
    assert [s for s, _ in rouge] == [0, 100, 200]
    assert rouge[-1][1] > rouge[0][1] + 5.0, rouge
    names = os.listdir(base / "out")
    assert any(n.startswith("_epoch") and n.endswith("_step200.ckpt") for n in names)
    assert sum(n.startswith("best_rouge2_step") for n in names) == 1


@pytest.mark.slow
def test_final_checkpoint_loads_in_snippet_and_run_eval(finetuned, small_tokenizer_dir, tmp_path):
    base, data, config = finetuned
    ckpt = next(str(base / "out" / n) for n in os.listdir(base / "out") if n.startswith("_epoch"))
    cfg = BartConfig(**json.load(open(config)))
    cfg.dtype, cfg.pre_ln = None, True
    model = BartForConditionalGeneration.from_pretrained(ckpt, config=cfg)
    assert not model.training
    _run("run_eval.py", ckpt, config, data, str(tmp_path / "one"), "--tokenizer", small_tokenizer_dir, "--bs", "3",
         "--n_obs", "8", "--eval_beams", "2", "--max_target_length", "24", "--max_source_length", "64",
         "--no_repeat_ngram_size", "2")
    one = (tmp_path / "one" / "test_generations.txt").read_text().splitlines()
    rouge = json.load(open(tmp_path / "one" / "test_rouge.json"))
    assert len(one) == 8 and set(rouge) >= {"rouge1", "rouge2", "rougeL", "rougeLsum"}
    # two processes write the same lines in the same order
    _run("run_eval.py", ckpt, config, data, str(tmp_path / "two"), "--tokenizer", small_tokenizer_dir, "--bs", "3",
         "--n_obs", "8", "--eval_beams", "2", "--max_target_length", "24", "--max_source_length", "64", "--no_repeat_ngram_size", "2",
         nproc=2)
    assert (tmp_path / "two" / "test_generations.txt").read_text().splitlines() == one
    # the same settings from a generation_config.json (as transformers writes it) passed through to generate
    (tmp_path / "gen").mkdir()
    (tmp_path / "gen" / "generation_config.json").write_text(json.dumps(
        {"num_beams": 2, "no_repeat_ngram_size": 2, "transformers_version": "4.57.6"}))
    _run("run_eval.py", ckpt, config, data, str(tmp_path / "four"), "--tokenizer", small_tokenizer_dir, "--bs", "3",
         "--n_obs", "8", "--max_target_length", "24", "--max_source_length", "64",
         "--generation_config", str(tmp_path / "gen"))
    assert (tmp_path / "four" / "test_generations.txt").read_text().splitlines() == one
    # more ranks than examples (a rank with none)
    _run("run_eval.py", ckpt, config, data, str(tmp_path / "three"), "--tokenizer", small_tokenizer_dir, "--bs", "1",
         "--n_obs", "1", "--eval_beams", "2", "--max_target_length", "24", "--max_source_length", "64", nproc=2)
    three = (tmp_path / "three" / "test_generations.txt").read_text().splitlines()
    assert len(three) == 1
    logs = (tmp_path / "one" / "dllogger.json").read_text()
    assert "latency_p99_s" in logs and "throughput_seq_per_s" in logs


def test_bad_inputs_are_explained(tmp_path, finetuned):
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
    env = dict(os.environ, PYTHONPATH=ROOT)
    out = subprocess.run([sys.executable, "finetune.py", "--config_path", config, "--data_dir", data, "--max_steps",
                          "1", "--init_checkpoint", str(tmp_path)], cwd=ROOT, env=env, capture_output=True, text=True)
    assert out.returncode != 0 and "holds no checkpoint" in out.stderr


def test_empty_training_examples_are_skipped_and_counted(tmp_path, tokenizer, capsys):
    """An empty source or target line in the training split leaves that example out, says which lines,
    and the count reaches the log (skipped_rows); --n_train counts usable examples."""
    folder = tmp_path / "data"
    folder.mkdir()
    (folder / "train.source").write_text("one two\n\nthree four\n \t \nfive six\nseven\n")
    (folder / "train.target").write_text("one\ntwo\nthree\nfour\n\nsix\n")
    loader = build_finetuning_loader(str(folder), tokenizer, 16, 8, batch_size=2)
    assert loader.dataset.sources == ["one two", "three four", "seven"] and loader.dataset.targets == ["one", "three", "six"]
    assert loader.skipped_rows == 3 and loader.dataset.skipped_lines == [2, 4, 5]
    assert "3 example(s) with an empty source or target skipped (line 2, 4, 5)" in capsys.readouterr().out
    first_two = build_finetuning_loader(str(folder), tokenizer, 16, 8, batch_size=2, n_obs=2)
    assert first_two.dataset.sources == ["one two", "three four"] and first_two.skipped_rows == 1
    assert sum(len(b["input_ids"]) for b in loader) == 3
    ranks = [build_finetuning_loader(str(folder), tokenizer, 16, 8, batch_size=1, world_size=2, rank=r) for r in (0, 1)]
    assert sum(r.skipped_rows for r in ranks) == 3  # the trainer's sum over ranks counts each skipped line once
    (folder / "train.source").write_text("\n \n")
    (folder / "train.target").write_text("a\nb\n")
    with pytest.raises(ValueError, match="train.source has no examples \\(all lines empty\\)"):
        build_finetuning_loader(str(folder), tokenizer, 16, 8, batch_size=2)


@pytest.mark.parametrize("mode", ["random", "sortish", "max_tokens"])
def test_finetuning_loader_seeks_to_its_position(tmp_path, small_tokenizer_dir, mode):
    """Each fine-tuning loader (random batches, sortish, token budget), two ranks of it, with and
    without loader workers: started at the position saved after k batches it yields the rest of the
    epoch exactly, and never collates (tokenizes) a batch it skips."""
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
                resumed.dataset.collate = lambda items: collated.append([i["index"] for i in items]) or collate(items)
            resumed.seek(positions[k])
            assert [b["input_ids"].tolist() for b in resumed] == straight[k + 1:]
            if not workers:
                assert len(collated) == len(straight) - k - 1
    with pytest.raises(ValueError, match="batch_size 8 → 4"):
        build_finetuning_loader(data, tokenizer, 64, 24, 4, world_size=2, rank=0, seed=3, **options).seek(positions[1])


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

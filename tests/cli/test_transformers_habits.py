"""What a user of transformers' run_summarization.py brings: table files (--train_file, CSV/JSON), a source prefix
the model keeps (--source_prefix, applied again by run_eval.py), and a hub revision (--model_revision); each
through the entry scripts, with a mistake one line."""
import csv
import json

import pytest
import torch

from bart.data.summarization import read_split
from bart.records.dllogger_compat import read_dllogger
from tests.helpers.corpus import micro_config
from tests.helpers.entry import run_entry


@pytest.fixture(scope="module")
def world(tmp_path_factory, inputs):
    base = tmp_path_factory.mktemp("habits")
    config, data, small_tokenizer_dir = inputs.config(dropout=0.0), inputs.summaries(16, 4, 4), inputs.tokenizer
    for split, name in (("train", "train.csv"), ("val", "validation.csv"), ("test", "test.csv")):
        sources, targets = read_split(data, split)
        with open(base / name, "w", newline="", encoding="utf-8") as f:
            writer = csv.writer(f)
            writer.writerow(["document", "summary"])
            writer.writerows(zip(sources, targets))
    argv = ["--config_path", config, "--tokenizer", small_tokenizer_dir, "--from_scratch",
            "--max_steps", "2", "--train_batch_size", "4", "--max_source_length", "32", "--max_target_length", "16",
            "--eval_max_gen_length", "8", "--eval_beams", "1", "--num_workers", "0", "--no_tensorboard"]
    return {"base": base, "config": config, "data": data, "argv": argv, "tokenizer": small_tokenizer_dir}


def _errors(capsys) -> list[str]:
    return [line for line in capsys.readouterr().err.strip().splitlines() if not line.startswith(("note:", "["))]


def test_a_fine_tuning_run_from_csv_files_validates_and_predicts(world, capsys):
    """Rules out: --train_file unrecognized; fine-tuning read only {split}.source/.target."""
    base, out = world["base"], world["base"] / "from_csv"
    files = ["--train_file", str(base / "train.csv"), "--validation_file", str(base / "validation.csv"),
             "--test_file", str(base / "test.csv")]
    assert run_entry("finetune.py", world["argv"] + files + ["--output_dir", str(out), "--n_val", "4",
                                                             "--val_check_interval", "1", "--do_predict"]) == 0
    said = capsys.readouterr().out
    assert f"[data] train 16, val 4, test 4 examples from {base / 'train.csv'}" in said, said
    assert read_split(str(out / "data"), "train") == read_split(world["data"], "train")  # every row, as written
    assert json.loads((out / "run_config.json").read_text())["data_dir"] == str(out / "data")
    validation = [r["data"] for r in read_dllogger(str(out / "dllogger.json"))
                  if r["type"] == "LOG" and "val_rouge2" in r["data"]]
    assert validation and {"val_loss", "val_rouge1", "val_rougeL", "val_gen_len"} <= set(validation[-1])
    assert len((out / "test_generations.txt").read_text().splitlines()) == 4


@pytest.mark.parametrize("extra, said", [
    (["--data_dir", "{data}"], "--data_dir and --train_file: the data comes from one place; give one"),
    ([], "--train_file without --validation_file: add --validation_file FILE, or --n_val 0 (no validation)"),
    (["--n_val", "0", "--text_column", "body"], "train.csv has columns ['document', 'summary']; name the text and "
                                                "summary columns (--text_column and --summary_column)"),
])
def test_table_file_mistakes_are_one_line(world, capsys, extra, said):
    out = world["base"] / "mistake"
    code = run_entry("finetune.py", world["argv"] + ["--train_file", str(world["base"] / "train.csv"), "--output_dir",
                                                     str(out), *[e.format(data=world["data"]) for e in extra]])
    err = _errors(capsys)
    assert code == 2 and len(err) == 1 and said in err[0], err


def test_the_source_prefix_is_trained_with_kept_by_the_model_and_applied_by_run_eval(world, capsys):
    """--source_prefix: the training and validation sources carry it, the checkpoints' config records it, and
    run_eval.py puts it in front of every source by default (the same generations as --prefix given by hand)."""
    from bart.data.summarization import build_finetuning_loader
    from bart.files.checkpoint_io import safe_load
    from bart.tokenization.tokenization_bart import BartTokenizer

    loader = build_finetuning_loader(world["data"], BartTokenizer.from_pretrained(world["tokenizer"]), 32, 16, 4,
                                     prefix="summarize: ")
    assert loader.dataset[0]["source"] == "summarize: " + read_split(world["data"], "train")[0][0]
    out = world["base"] / "prefixed"
    assert run_entry("finetune.py", world["argv"] + ["--data_dir", world["data"], "--output_dir", str(out),
                                                     "--source_prefix", "summarize: ", "--n_val", "2"]) == 0
    assert safe_load(str(out / "_epoch0_step2.ckpt"))["config"]["prefix"] == "summarize: "
    assert json.loads((out / "best_tfmr" / "config.json").read_text())["prefix"] == "summarize: "  # the export
    capsys.readouterr()
    evaluate = [str(out / "final_step.ckpt"), world["config"], world["data"]]
    assert run_entry("run_eval.py", evaluate + [str(world["base"] / "eval_default"), "--n_obs", "2"]) == 0
    assert "[eval] the model's source prefix 'summarize: '" in capsys.readouterr().out
    assert run_entry("run_eval.py", evaluate + [str(world["base"] / "eval_given"), "--n_obs", "2", "--prefix",
                                                "summarize: "]) == 0
    generated = [(world["base"] / name / "test_generations.txt").read_text() for name in ("eval_default", "eval_given")]
    assert generated[0] == generated[1]
    capsys.readouterr()
    again = world["argv"] + ["--data_dir", world["data"], "--output_dir", str(out), "--max_steps", "3",
                             "--allow_resume_change", "max_steps", "--resume_from_checkpoint", "True", "--n_val", "2"]
    assert run_entry("finetune.py", again) == 2  # resumed without the prefix it was trained with
    assert "prefix: 'summarize: ' in the checkpoint, '' now (--source_prefix)" in _errors(capsys)[0]


def test_model_revision_takes_that_revision_of_a_hub_id(world, tmp_path, monkeypatch, capsys):
    """Two revisions of one repository in the hub cache (offline): --model_revision picks the weights fine-tuning
    starts from (not: no flag; the hub id's main only)."""
    from bart.configuration import BartConfig
    from bart.modeling import BartForConditionalGeneration
    from bart.tokenization.tokenization_bart import BartTokenizer
    from tests.helpers.hub_cache import add_to_hub_cache

    cache = tmp_path / "hub"
    first = {}
    for seed, revision in ((0, "main"), (1, "v2")):
        torch.manual_seed(seed)
        model = BartForConditionalGeneration(BartConfig(**micro_config(dropout=0.0)))
        folder = tmp_path / revision
        model.save_pretrained(str(folder))
        BartTokenizer.from_pretrained(world["tokenizer"]).save_pretrained(str(folder))
        add_to_hub_cache(str(cache), "org/tiny-bart", str(folder), revision=revision)
        first[revision] = model.model.shared.weight.detach().clone()
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.delenv("HF_HOME", raising=False)
    argv = [a for a in world["argv"] if a != "--from_scratch"] + ["--data_dir", world["data"], "--n_val", "0",
                                                                  "--init_checkpoint", "org/tiny-bart",
                                                                  "--max_steps", "1", "--learning_rate", "0"]
    for revision in ("main", "v2"):
        out = tmp_path / f"from_{revision}"
        assert run_entry("finetune.py", argv + ["--output_dir", str(out), "--model_revision", revision]) == 0
        from bart.files.checkpoint_io import safe_load
        weights = safe_load(str(out / "final_step.ckpt"))
        shared = next(v for k, v in weights.items() if k.endswith("shared.weight"))
        assert torch.equal(shared[: first[revision].shape[0]], first[revision]), revision

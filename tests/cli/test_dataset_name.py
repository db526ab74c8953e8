"""transformers' --dataset_name / --dataset_config_name for finetune.py, through the optional ``datasets``
package: a local folder of Parquet files and a hub dataset read from the datasets cache offline (written by
tests/helpers/datasets_cache.py in datasets' own layout) become OUTPUT_DIR/data as --train_file's rows do; a
mistake is one line.

The runs are in this process: the environment's HF_HUB_OFFLINE=1 and HF_DATASETS_CACHE are what ``datasets.config``
holds once imported, so the tests set those attributes."""
import json

import pytest

from bart.data.summarization import read_split
from bart.records.dllogger_compat import read_dllogger
from tests.helpers.corpus import micro_config
from tests.helpers.entry import run_entry

datasets = pytest.importorskip("datasets", reason="--dataset_name reads through the optional datasets package "
                                                  "(pip install datasets)")
COMMIT = "c0ffee0000000000000000000000000000000001"


def _write_jsonl(path, rows):
    with open(path, "w", encoding="utf-8") as f:
        f.writelines(json.dumps(row) + "\n" for row in rows)


@pytest.fixture(scope="module")
def world(tmp_path_factory, small_tokenizer_dir):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from benchmarks.corpora import write_summarization_data
    from tests.helpers.datasets_cache import add_to_datasets_cache

    base = tmp_path_factory.mktemp("dataset_name")
    (base / "config.json").write_text(json.dumps(micro_config(dropout=0.0)))
    data = write_summarization_data(str(base / "data"), sizes=(("train", 16), ("val", 4), ("test", 4)))
    other = write_summarization_data(str(base / "other"), sizes=(("train", 16), ("val", 4)), seed=1)
    local = base / "local"  # a folder load_dataset reads: Parquet files named by split
    local.mkdir()
    for split, name in (("train", "train"), ("val", "validation"), ("test", "test")):
        sources, targets = read_split(data, split)
        pq.write_table(pa.table({"article": sources, "highlights": targets}), str(local / f"{name}.parquet"))
    cache = base / "datasets_cache"  # a hub dataset downloaded before: samsum's columns (dialogue, summary)
    for config, folder in (("3.0.0", data), ("1.0.0", other)):
        files = {}
        for split, name in (("train", "train"), ("val", "validation")):
            sources, targets = read_split(folder, split)
            _write_jsonl(base / f"{config}-{name}.jsonl", [{"id": str(i), "dialogue": s, "summary": t}
                                                           for i, (s, t) in enumerate(zip(sources, targets))])
            files[name] = str(base / f"{config}-{name}.jsonl")
        add_to_datasets_cache(str(cache), "org/samsum", files, config=config, commit=COMMIT)
    argv = ["--config_path", str(base / "config.json"), "--tokenizer", small_tokenizer_dir, "--from_scratch",
            "--max_steps", "2", "--train_batch_size", "4", "--max_source_length", "32", "--max_target_length", "16",
            "--eval_max_gen_length", "8", "--eval_beams", "1", "--num_workers", "0", "--no_tensorboard"]
    return {"base": base, "data": data, "other": other, "local": local, "cache": cache, "argv": argv}


@pytest.fixture
def offline(world, monkeypatch):
    """What HF_HUB_OFFLINE=1 and HF_DATASETS_CACHE=<the test's cache> give datasets.config at its import."""
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", world["cache"])
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    return world


def _errors(capsys) -> list[str]:
    return [line for line in capsys.readouterr().err.strip().splitlines() if not line.startswith(("note:", "["))]


def _validations(out) -> list[dict]:
    return [r["data"] for r in read_dllogger(str(out / "dllogger.json"))
            if r["type"] == "LOG" and "val_rouge2" in r["data"]]


def test_a_fine_tuning_run_from_a_local_dataset_folder_validates_and_predicts(offline, capsys):
    out = offline["base"] / "from_local"
    assert run_entry("finetune.py", offline["argv"] + ["--dataset_name", str(offline["local"]), "--output_dir", str(out),
                                                       "--n_val", "4", "--val_check_interval", "1",
                                                       "--do_predict"]) == 0
    said = capsys.readouterr().out
    assert f"[data] train 16, val 4, test 4 examples from {offline['local']}, as {out / 'data'}" in said, said
    for split in ("train", "val", "test"):
        assert read_split(str(out / "data"), split) == read_split(offline["data"], split)  # every row, as written
    record = json.loads((out / "run_config.json").read_text())
    assert record["data_dir"] == str(out / "data") and record["dataset_name"] == str(offline["local"])
    source = record["data_source"]
    assert source["dataset_name"] == str(offline["local"]) and "revision" not in source  # a folder: no hub commit
    assert {split: (s["split"], s["rows"], s["columns"]) for split, s in source["splits"].items()} == {
        "train": ("train", 16, ["article", "highlights"]), "val": ("validation", 4, ["article", "highlights"]),
        "test": ("test", 4, ["article", "highlights"])}
    assert all(len(s["fingerprint"]) == 16 for s in source["splits"].values())
    validation = _validations(out)
    assert [r["val_gen_len"] > 0 for r in validation] == [True] * 3  # the untrained model's, updates 1 and 2
    assert {"val_loss", "val_rouge1", "val_rouge2", "val_rougeL", "val_gen_len"} <= set(validation[-1])
    assert len((out / "test_generations.txt").read_text().splitlines()) == 4


def test_a_hub_dataset_is_read_from_the_datasets_cache_offline(offline, capsys):
    """org/samsum's columns are transformers' for samsum (dialogue, summary: no pair the recipe finds by itself);
    the configuration asked for is read, and the record names it and the commit the cache was read at."""
    out = offline["base"] / "from_hub"
    argv = offline["argv"] + ["--dataset_name", "org/samsum", "--dataset_config_name", "1.0.0", "--output_dir",
                              str(out), "--n_val", "4", "--val_check_interval", "1"]
    assert run_entry("finetune.py", argv) == 0
    assert "[data] train 16, val 4 examples from org/samsum (1.0.0)" in capsys.readouterr().out
    assert read_split(str(out / "data"), "train") == read_split(offline["other"], "train")
    source = json.loads((out / "run_config.json").read_text())["data_source"]
    assert (source["dataset_name"], source["dataset_config_name"], source["revision"]) == ("org/samsum", "1.0.0",
                                                                                        COMMIT)
    assert source["splits"]["train"]["columns"] == ["dialogue", "summary"]
    assert {"val_loss", "val_rouge1", "val_rouge2", "val_rougeL", "val_gen_len"} <= set(_validations(out)[-1])
    # a resume reads the dataset again and checks its rows: another configuration is other training data
    again = [a if a != "1.0.0" else "3.0.0" for a in argv] + ["--max_steps", "3", "--allow_resume_change",
                                                               "max_steps", "--resume_from_checkpoint", "auto"]
    assert run_entry("finetune.py", again) == 2
    err = _errors(capsys)
    assert len(err) == 1 and "training_data: 16 examples" in err[0] and "(the training split's files)" in err[0], err


@pytest.mark.parametrize("extra, said", [
    (["--dataset_name", "org/samsum", "--dataset_config_name", "2.0.0"],
     "--dataset_name org/samsum --dataset_config_name 2.0.0: org/samsum has no configuration '2.0.0' (the datasets "
     "cache holds ['1.0.0', '3.0.0']"),
    (["--dataset_name", "org/absent"],
     "--dataset_name org/absent: no local folder of that name, the hub is off (HF_HUB_OFFLINE / HF_DATASETS_OFFLINE), "
     "and the datasets cache {cache} holds no copy of it; run datasets.load_dataset('org/absent') once where the hub "
     "is reachable"),
    (["--dataset_name", "org/samsum", "--dataset_config_name", "3.0.0", "--text_column", "body"],
     "--dataset_name org/samsum train has no column 'body' (--text_column); its columns: id, dialogue, summary"),
    (["--dataset_name", "{local}", "--summary_column", "abstract"],
     "--dataset_name {local} train has no column 'abstract' (--summary_column); its columns: article, highlights"),
    (["--dataset_name", "org/samsum", "--dataset_config_name", "3.0.0", "--do_predict"],
     "--dataset_name org/samsum has no test split (its splits: train, validation); drop --do_predict"),
    (["--dataset_name", "{base}/data"],
     "--dataset_name {base}/data: No (supported) data files found in {base}/data (it reads a folder of .csv, .json, "
     ".jsonl or .parquet files named by split: train, validation, test; a folder of .source/.target files is "
     "--data_dir, a single file --train_file)"),
    (["--dataset_name", "{local}", "--train_file", "{base}/x.csv"],
     "--train_file and --dataset_name: the data comes from one place; give one"),
    (["--data_dir", "{base}/data", "--dataset_config_name", "3.0.0"],
     "--dataset_config_name names a configuration of --dataset_name NAME: add --dataset_name, or drop it"),
])
def test_dataset_mistakes_are_one_line_before_training(offline, capsys, extra, said):
    out = offline["base"] / "mistake"
    given = {"local": offline["local"], "base": offline["base"], "cache": offline["cache"]}
    code = run_entry("finetune.py", offline["argv"] + ["--output_dir", str(out), "--n_val", "2",
                                                       *[e.format(**given) for e in extra]])
    err = _errors(capsys)
    assert code == 2 and len(err) == 1 and said.format(**given) in err[0], err
    assert not (out / "dllogger.json").exists()  # nothing trained


def test_without_the_datasets_package_the_line_says_how_to_install_it(offline, capsys, monkeypatch):
    monkeypatch.setitem(__import__("sys").modules, "datasets", None)  # what `import datasets` meets uninstalled
    code = run_entry("finetune.py", offline["argv"] + ["--output_dir", str(offline["base"] / "no_datasets"),
                                                       "--dataset_name", str(offline["local"])])
    err = _errors(capsys)
    assert code == 2 and len(err) == 1, err
    assert "--dataset_name reads through the datasets package, which is not installed in this Python" in err[0]
    assert "pip install datasets (or pip install 'bart-recipe[datasets]')" in err[0]

"""benchmarks/bench_generation.py's whole path on CPU, in this process: a tiny post-LN BART (configs/config_tiny.json
as transformers' BART can load it), two batch sizes, every contender that runs here (CTranslate2's when it is
installed); the printed table and the JSON: every contender's row, transformers and CTranslate2 fp32 token-identical
to this project, the figures positive."""
import gc
import importlib.util
import json
import os
import re
import sys

import pytest
import torch

from tests.helpers import ROOT

sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
import bench_generation  # noqa: E402

HAS_CT2 = importlib.util.find_spec("ctranslate2") is not None
# ours_compiled left out: torch.compile's first call costs tens of seconds
CONTENDERS = ["ours", "hf", "ours_unpacked", "ours_int8"] + (["ct2_fp32", "ct2_int8"] if HAS_CT2 else [])
BATCHES, NEW_TOKENS = (1, 2), 6


@pytest.mark.slow  # about 10-15 s on 2 cores: two models' imports and builds, CTranslate2's conversion
def test_benchmark_prints_and_writes_every_contender_checked_against_ours(tmp_path, capsys, tokenizer_dir):
    values = json.load(open(os.path.join(ROOT, "configs", "config_tiny.json")))
    values.update(pre_ln=False)  # transformers' BART is post-LN (no final layer norms)
    (tmp_path / "config.json").write_text(json.dumps(values))
    threads = torch.get_num_threads()
    try:
        bench_generation.main(["--config", str(tmp_path / "config.json"), "--device", "cpu",
                               "--batch_sizes", *map(str, BATCHES), "--new_tokens", str(NEW_TOKENS),
                               "--source_length", "16", "--threads", "1", "--repeats", "1",
                               "--contenders", ",".join(CONTENDERS), "--tokenizer", tokenizer_dir,
                               "--json", str(tmp_path / "beam.json")])
    finally:
        torch.set_num_threads(threads)
        gc.unfreeze()  # main freezes what exists for its runs' collections
    printed = capsys.readouterr().out

    report = json.loads((tmp_path / "beam.json").read_text())
    assert report["skipped"] == {} and report["device"] == "CPU" and report["workload"] == "full"
    assert report["settings"] == dict(num_beams=4, max_length=NEW_TOKENS + 1, min_length=NEW_TOKENS,
                                      no_repeat_ngram_size=3, length_penalty=1.0, early_stopping=True)
    assert [r["batch"] for r in report["rows"]] == list(BATCHES)
    for batch, row in zip(BATCHES, report["rows"]):
        # full workload: EOS held back to the last step, so every source decodes every new token
        assert row["new_tokens"] == batch * NEW_TOKENS and row["out_of_memory"] is None
        assert row["identical_rows"] == batch and row["token_agreement"] == 1.0
        for name in ("ours", "hf"):
            assert row[f"{name}_seconds"] > 0 and row[f"{name}_summaries_s"] > 0 and row[f"{name}_peak_mib"] >= 0
        assert row["speedup"] > 0
        assert list(row["contenders"]) == CONTENDERS
        for name, entry in row["contenders"].items():
            assert entry["seconds"] > 0 and entry["vs_ours"] > 0 and len(entry["times"]) == 1
            assert not entry["out_of_memory"] and entry["failed"] is None
            if name not in ("ours", "hf"):
                assert 0 <= entry["token_agreement"] <= 1
                assert entry["identical_rows"] == batch or entry["reason"]  # a difference always says why
        for name in ("ours_unpacked", "ct2_fp32"):  # the same fp32 numbers: the same tokens
            if name in row["contenders"]:
                assert row["contenders"][name]["identical_rows"] == batch
        assert 0 <= row["contenders"]["ours_int8"]["rougeL_vs_fp32"] <= 100
        assert "rougeL_vs_fp32" not in row["contenders"]["ours_unpacked"]

    table = [line.split("|")[1:-1] for line in printed.splitlines() if re.match(r"^\| \d+ \|", line)]
    labels = {name: entry["label"] for name, entry in report["rows"][0]["contenders"].items()}
    # transformers first (the speedup's reference), then the others in the order asked
    order = [labels["hf"]] + [labels[n] for n in CONTENDERS if n != "hf"]
    assert [(int(c[0]), c[1].strip()) for c in table] == [(b, label) for b in BATCHES for label in order]
    for cells in table:
        batch, label = int(cells[0]), cells[1].strip()
        seconds, per_second, tokens_per_second = (float(c) for c in cells[2:5])
        assert seconds > 0 and per_second > 0 and tokens_per_second > 0 and float(cells[5]) >= 0
        assert cells[6].strip().endswith("x") and cells[7].strip().endswith("x")
        same = cells[8].strip()  # rows as this project fp32: the same fp32 numbers give every row
        if label == labels["ours"]:
            assert same == "-"
        elif label in (labels["hf"], labels["ours_unpacked"], labels.get("ct2_fp32")):
            assert same == f"{batch}/{batch}"
        else:
            assert re.fullmatch(rf"\d+/{batch}", same)
    assert "token-identical rows (ours vs transformers): 1/1, 2/2" in printed


def test_a_pre_ln_config_is_benchmarked_against_transformers_mbart(tmp_path, capsys):
    """A Pre-LN config (configs/config_tiny.json as shipped) runs against transformers' mBART, the Pre-LN layout,
    with the same weights: every row token-identical, where transformers' BART could not load them."""
    argv = ["--config", os.path.join(ROOT, "configs", "config_tiny.json"), "--device", "cpu", "--threads", "1",
            "--batch_sizes", "2", "--new_tokens", "4", "--source_length", "12", "--contenders", "ours,hf"]
    threads = torch.get_num_threads()
    try:
        assert type(bench_generation.build(*bench_generation.parse_args(argv)).hf).__name__ == \
            "MBartForConditionalGeneration"
        bench_generation.main(argv + ["--json", str(tmp_path / "beam.json")])
    finally:
        torch.set_num_threads(threads)
        gc.unfreeze()  # main freezes what exists for its runs' collections
    capsys.readouterr()
    report = json.loads((tmp_path / "beam.json").read_text())
    assert [(row["batch"], row["identical_rows"]) for row in report["rows"]] == [(2, 2)]

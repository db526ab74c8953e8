"""benchmarks/count_step_ops.py in this process, at tiny widths (training: 2+2 layers): the operator counts per
training update (the project's multi-tensor LAMB against its per-tensor loop, --cast_weights_once against autocast's
casts, transformers' peer in the same table) and the host reads per decode at sync_every 1 and 4."""
import json
import os
import sys

import pytest
import torch

from tests.helpers import ROOT

sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
import count_step_ops  # noqa: E402


@pytest.mark.slow  # about 25 s on 2 cores: six profiled updates, transformers' model, four decodes of 12 layers
def test_counts_of_each_contender_and_of_the_decode_reads(tmp_path, capsys):
    values = json.load(open(os.path.join(ROOT, "configs", "config_base.json")))
    (tmp_path / "config.json").write_text(json.dumps(dict(values, encoder_layers=2, decoder_layers=2)))
    threads = torch.get_num_threads()
    try:
        rows = count_step_ops.main(["--config", str(tmp_path / "config.json"), "--precisions", "bf16", "--micro_batches", "2", "--source", "16", "--target", "8",
                                    "--sync_every", "4", "--json", str(tmp_path / "c.json")])
    finally:
        torch.set_num_threads(threads)
    printed = capsys.readouterr().out
    train = {r["contender"]: r for r in rows if r["part"] == "train"}
    assert list(train) == list(count_step_ops.CONTENDERS)
    # multi-tensor LAMB: a few dozen operator calls per step, whatever the number of tensors (91 here); the loop:
    # several per tensor
    assert train["lamb"]["optimizer"] < 60 and train["lamb_loop"]["optimizer"] > 10 * 91
    assert train["lamb"]["host reads"] < 10 and train["lamb"]["kernels"] < train["lamb_loop"]["kernels"]
    # the weights cast once for the update's 2 micro-batches: fewer casts and concatenations, the rest as autocast's
    once, autocast = train["adamw_cast_once"], train["adamw"]
    assert once["casts"] < autocast["casts"] and once["layout"] < autocast["layout"]
    assert once["elementwise"] == autocast["elementwise"] and once["optimizer"] == autocast["optimizer"]
    assert train["hf_fused"]["optimizer"] <= 2  # torch's fused AdamW: one call for all tensors
    decode = [r for r in rows if r["part"] == "decode"]
    for search in ("beam 4", "greedy"):
        every, fourth = [r for r in decode if r["search"] == search]
        assert every["sync_every"] == 1 and fourth["sync_every"] == 4 and fourth["same_tokens"]
        assert every["host_reads"] >= every["steps"] > 20 and fourth["host_reads"] <= every["steps"] / 4 + 2
    assert "| this project: multi-tensor LAMB |" in printed and "| beam 4 | 4 |" in printed
    assert (tmp_path / "c.json").exists()

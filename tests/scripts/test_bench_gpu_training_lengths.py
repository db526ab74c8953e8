"""benchmarks/bench_gpu_training.py --lengths xsum on CPU: XSum's length distribution, the padded and the token-budget
batches built from it, and a dry run of two contenders (transformers and this project's token-budget batches)."""
import json
import os
import sys

import pytest
import torch

from tests.helpers import ROOT

sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
import bench_gpu_training  # noqa: E402


def test_lengths_follow_xsum_and_every_example_is_batched_once():
    sources, targets = bench_gpu_training.xsum_like_lengths(4000, 1024, 60)
    assert 400 < sum(sources) / len(sources) < 440 and 21 < sum(targets) / len(targets) < 25  # 431 and 23, cut
    assert max(sources) <= 1024 and max(targets) <= 60 and min(sources + targets) >= 4
    sources, targets = sources[:300], targets[:300]
    real = sum(sources) + sum(targets)
    padded = bench_gpu_training.length_batches(sources, targets, 100, 8, None, device="cpu")
    budget = bench_gpu_training.length_batches(sources, targets, 100, 8, 8 * 1024, device="cpu")
    for batches in (padded, budget):
        assert sum(bench_gpu_training.real_tokens(b) for b in batches) == real  # every example, once
        for b in batches:
            assert torch.equal(b["attention_mask"].sum(1) > 0, torch.ones(b["input_ids"].shape[0], dtype=torch.bool))
            assert (b["decoder_input_ids"][:, 0] == 2).all() and ((b["labels"] == -100) == (b["labels"] < 0)).all()
    assert all(b["input_ids"].shape[0] == 8 for b in padded[:-1])
    assert all(b["input_ids"].numel() <= 8 * 1024 for b in budget) and len(budget) < len(padded)
    padding = [sum(b["input_ids"].numel() for b in batches) for batches in (padded, budget)]
    assert padding[1] < padding[0]  # the budget groups similar lengths


@pytest.mark.slow  # about 10 s: two tiny models, a few updates each
def test_dry_run_reports_real_tokens_per_second(tmp_path, monkeypatch):
    values = json.load(open(os.path.join(ROOT, "configs", "config_tiny.json")))
    values.update(pre_ln=False, d_model=32, encoder_ffn_dim=64, decoder_ffn_dim=64, vocab_size=256,
                  max_position_embeddings=66, encoder_layers=1, decoder_layers=1)
    (tmp_path / "config.json").write_text(json.dumps(values))
    monkeypatch.setattr(sys, "argv", ["bench_gpu_training.py", "--lengths", "xsum", "--device", "cpu", "--config",
                                      str(tmp_path / "config.json"), "--source_length", "64", "--target_length", "8",
                                      "--batch", "4", "--examples", "24", "--warmup", "1",
                                      "--contenders", "hf,adamw_tokens", "--json", str(tmp_path / "rows.json")])
    threads = torch.get_num_threads()
    try:
        bench_gpu_training.main()
    finally:
        torch.set_num_threads(threads)
    rows = json.loads((tmp_path / "rows.json").read_text())["rows"]
    assert [(r["contender"], r["batching"]) for r in rows] == [("hf", "padded"), ("adamw_tokens", "tokens")]
    assert all(r["real_tokens_s"] > 0 and 0 <= r["padding"] < 1 for r in rows) and rows[0]["vs_hf"] == 1.0
    assert rows[1]["padding"] < rows[0]["padding"] and rows[1]["sequences_per_update"] > 4

"""Checkpoint files: a killed writer never leaves a loadable half file; RNG round trip; pruning; the best-k
checkpoints across a resume and on ties."""
import os
import random
import signal
import sys

import numpy as np
import pytest
import torch

from bart.training.checkpoint import (
    capture_rng_state,
    latest_checkpoint,
    load_checkpoint,
    prune_checkpoints,
    restore_rng_state,
    save_checkpoint,
)
from tests.helpers.processes import Watched

WRITER = """
import sys, torch
from tests.helpers.write_faults import install
install("hold_write:1")  # the write waits, its partial file there, until the kill
from bart.training.checkpoint import save_checkpoint
save_checkpoint({path!r}, {{"step": 2, "w": torch.randn(1000)}})
"""


def test_killed_writer_leaves_previous_checkpoint_intact(tmp_path):
    save_checkpoint(str(tmp_path / "_step1.ckpt"), {"step": 1, "w": torch.ones(3)})
    run = Watched([sys.executable, "-c", WRITER.format(path=str(tmp_path / "_step2.ckpt"))], forked=True)
    run.wait_for("write_faults: held in the write of")
    assert any(n.endswith(".partial") for n in os.listdir(tmp_path))  # the write has started
    run.proc.send_signal(signal.SIGKILL)
    assert run.finish()[0] == -signal.SIGKILL
    assert not (tmp_path / "_step2.ckpt").exists()
    assert latest_checkpoint(str(tmp_path)) == str(tmp_path / "_step1.ckpt")
    assert load_checkpoint(latest_checkpoint(str(tmp_path)))["step"] == 1


def test_truncated_file_is_named(tmp_path):
    save_checkpoint(str(tmp_path / "_step3.ckpt"), {"step": 3, "w": torch.ones(1000)})
    data = (tmp_path / "_step3.ckpt").read_bytes()
    (tmp_path / "_step3.ckpt").write_bytes(data[:100])
    with pytest.raises(ValueError, match="_step3.ckpt is not a readable checkpoint"):
        load_checkpoint(str(tmp_path / "_step3.ckpt"))


def test_rng_state_round_trip_through_a_file(tmp_path):
    state = capture_rng_state()
    expected = (random.random(), np.random.rand(), torch.rand(2))
    save_checkpoint(str(tmp_path / "_step1.ckpt"), {"rng": state})
    random.random(), np.random.rand(), torch.rand(5)
    restore_rng_state(load_checkpoint(str(tmp_path / "_step1.ckpt"))["rng"])
    again = (random.random(), np.random.rand(), torch.rand(2))
    assert again[0] == expected[0] and again[1] == expected[1] and torch.equal(again[2], expected[2])


def test_prune_keeps_newest(tmp_path):
    for step in (5, 10, 15, 20):
        save_checkpoint(str(tmp_path / f"_step{step}.ckpt"), {"step": step})
    prune_checkpoints(str(tmp_path), keep=2)
    assert sorted(os.listdir(tmp_path)) == ["_step15.ckpt", "_step20.ckpt"]


def test_best_checkpoints_survive_a_resume(tmp_path):
    from bart.modeling import BartForConditionalGeneration
    from bart.training.checkpoint import BestCheckpoints
    from tests.helpers.synthetic import tiny_config

    model = BartForConditionalGeneration(tiny_config())
    best = BestCheckpoints(str(tmp_path), "rouge2", 1, lower_is_better=False)
    best.consider(10.0, 2, model, {"rouge2": 10.0})
    best.consider(12.0, 4, model, {"rouge2": 12.0})
    (tmp_path / "best_rouge2_step6.ckpt").write_bytes(b"killed before it was ranked")
    again = BestCheckpoints(str(tmp_path), "rouge2", 1, lower_is_better=False)  # the resumed run
    assert [v for v, _ in again.restore()] == [12.0]
    assert again.consider(11.0, 6, model, {"rouge2": 11.0}) is None  # worse than the kept best: not written
    assert sorted(p.name for p in tmp_path.glob("best_*.ckpt")) == ["best_rouge2_step4.ckpt"]
    again.consider(13.0, 8, model, {"rouge2": 13.0})
    assert sorted(p.name for p in tmp_path.glob("best_*.ckpt")) == ["best_rouge2_step8.ckpt"]


@pytest.mark.parametrize("lower_is_better", [False, True])
def test_a_tie_keeps_the_later_trained_weights_not_the_step_0_ones(tmp_path, lower_is_better):
    """Tied scores (every ROUGE-2 0 on a small run) keep the later trained weights, not the step-0 validation's
    untrained ones, so EVAL_CHECKPOINT=best evaluates a trained model."""
    from bart.modeling import BartForConditionalGeneration
    from bart.training.checkpoint import BestCheckpoints, best_checkpoint
    from tests.helpers.synthetic import tiny_config

    model = BartForConditionalGeneration(tiny_config())
    best = BestCheckpoints(str(tmp_path), "rouge2", 1, lower_is_better=lower_is_better)
    for step in (0, 2, 4):
        best.consider(0.0, step, model, {"rouge2": 0.0})
    assert sorted(p.name for p in tmp_path.glob("best_*.ckpt")) == ["best_rouge2_step4.ckpt"]
    assert best_checkpoint(str(tmp_path)).endswith("best_rouge2_step4.ckpt")
    again = BestCheckpoints(str(tmp_path), "rouge2", 2, lower_is_better=lower_is_better)  # resumed with k 2
    again.restore()
    again.consider(0.0, 6, model, {"rouge2": 0.0})
    assert [os.path.basename(p) for _, p in again.best] == ["best_rouge2_step6.ckpt", "best_rouge2_step4.ckpt"]

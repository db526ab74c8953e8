"""The flags the trainer reads reach it by name: ``bart.cli.builder.trainer_config`` gives every
``TrainerConfig`` field that is also a ``Settings`` field the value the command line gave."""
import dataclasses

import pytest

from bart.cli.builder import trainer_config
from bart.cli.settings import FINETUNE, PRETRAIN, Settings, parse_command_line
from bart.training.trainer import TrainerConfig

GIVEN = {"--label_smoothing": ("label_smoothing", 0.1), "--log_freq": ("log_freq", 3),
         "--gradient_clip_val": ("gradient_clip_val", 0.5), "--save_checkpoint_steps": ("save_checkpoint_steps", 7),
         "--keep_checkpoints": ("keep_checkpoints", 2), "--gradient_accumulation_steps": ("gradient_accumulation_steps", 2),
         "--max_consecutive_nonfinite": ("max_consecutive_nonfinite", 9), "--fused_cross_entropy": ("fused_cross_entropy", True)}


@pytest.mark.parametrize("script", [PRETRAIN, FINETUNE])
def test_the_trainer_gets_every_same_named_flag_as_given(tmp_path, script):
    argv = ["--config_path", str(tmp_path / "config.json"), "--data_dir", str(tmp_path), "--output_dir",
            str(tmp_path / "out"), "--max_steps", "5"]  # nothing is read from the disk at parse time
    argv += ["--from_scratch"] if script == FINETUNE else []
    for flag, (_, value) in GIVEN.items():
        if script == PRETRAIN and flag == "--label_smoothing":
            continue  # fine-tuning's: pretrain.py refuses it when set
        argv += [flag] if value is True else [flag, str(value)]
    settings = parse_command_line(script, argv)
    config = trainer_config(settings, compile=False)
    for flag, (name, value) in GIVEN.items():
        expected = 0.0 if script == PRETRAIN and name == "label_smoothing" else value
        assert getattr(config, name) == expected, (script, name)
    assert config.max_steps == 5 and config.output_dir == str(tmp_path / "out")
    assert config.precision is settings.precision  # the run's one Precision travels, not a copy
    shared = [f.name for f in dataclasses.fields(TrainerConfig) if f.name in Settings.__dataclass_fields__]
    assert set(name for name, _ in GIVEN.values()) <= set(shared)
    assert trainer_config(settings, log_freq=11).log_freq == 11  # what the builder gives itself wins

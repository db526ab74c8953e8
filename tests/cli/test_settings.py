"""The flags the trainer reads reach it in the run's one record: the Trainer reads its sections of the Settings
the command line made (not: ``builder.trainer_config`` copied every same-named flag into a ``TrainerConfig``)."""
import pytest
import torch

from bart.cli.parsing import parse_command_line
from bart.cli.settings import FINETUNE, PRETRAIN
from bart.modeling import BartForConditionalGeneration
from bart.optim import build_optimizer, build_scheduler
from bart.training.strategy import prepared_strategy
from bart.training.trainer import Trainer
from tests.helpers.synthetic import SyntheticBatches, tiny_config

GIVEN = {"--label_smoothing": ("loss", "label_smoothing", 0.1), "--log_freq": ("logging", "log_freq", 3),
         "--gradient_clip_val": ("optimization", "gradient_clip_val", 0.5),
         "--save_checkpoint_steps": ("checkpoints", "save_checkpoint_steps", 7),
         "--keep_checkpoints": ("checkpoints", "keep_checkpoints", 2),
         "--gradient_accumulation_steps": ("optimization", "gradient_accumulation_steps", 2),
         "--max_consecutive_nonfinite": ("optimization", "max_consecutive_nonfinite", 9),
         "--fused_cross_entropy": ("loss", "fused_cross_entropy", True)}


@pytest.mark.parametrize("script", [PRETRAIN, FINETUNE])
def test_the_trainer_reads_the_flags_as_given_from_the_one_record(tmp_path, script):
    argv = ["--config_path", str(tmp_path / "config.json"), "--data_dir", str(tmp_path), "--output_dir",
            str(tmp_path / "out"), "--max_steps", "5", "--phase1_end_step", "4"]  # nothing read from the disk
    argv += ["--from_scratch"] if script == FINETUNE else []
    for flag, (_, _, value) in GIVEN.items():
        argv += [flag] if value is True else [flag, str(value)]
    settings = parse_command_line(script, argv)
    for flag, (section, name, value) in GIVEN.items():
        assert getattr(getattr(settings, section), name) == value == settings.as_dict()[name], (script, flag)
    model = BartForConditionalGeneration(tiny_config())
    strategy = prepared_strategy(None, 1, torch.device("cpu"), model)
    optimizer, clips = build_optimizer(model, "adamw", lr=1e-3, weight_decay=0.0)
    trainer = Trainer(model, optimizer, build_scheduler(optimizer, "linear", 0, 5), SyntheticBatches(2, 2), settings,
                      strategy=strategy, clips_internally=clips, progress_bar=False)
    assert trainer.settings is settings and trainer.precision is settings.precision  # the record, not a copy
    assert trainer.global_step == 4 and trainer.strategy is strategy  # --phase1_end_step numbers the updates


def test_the_trainer_takes_a_strategy_prepared_for_its_model():
    """The strategy is built and prepared once, by the builder, before the optimizer: a Trainer given one prepared
    for another model (or none at all) refuses, instead of preparing it again (not: three times)."""
    model, other = BartForConditionalGeneration(tiny_config()), BartForConditionalGeneration(tiny_config())
    settings = parse_command_line(PRETRAIN, ["--config_path", "c.json", "--data_dir", ".", "--max_steps", "1"])
    optimizer, _ = build_optimizer(model, "adamw", lr=1e-3, weight_decay=0.0)
    with pytest.raises(ValueError, match="prepared for this model"):
        Trainer(model, optimizer, build_scheduler(optimizer, "linear", 0, 1), [], settings,
                strategy=prepared_strategy(None, 1, torch.device("cpu"), other))
    with pytest.raises(TypeError, match="strategy"):
        Trainer(model, optimizer, build_scheduler(optimizer, "linear", 0, 1), [], settings)

"""Flags that contradict each other are refused at parse time in one line naming both (exit 2, nothing made);
the combinations the scripts and the reference use still parse."""
import os

import pytest

from tests.helpers.entry import run_entry as _main
from tests.helpers.user_inputs import FT, PT
from tests.helpers.user_inputs import argv as _argv
from tests.helpers.user_inputs import one_line as _one_line

# -- case 3: contradictory flags -------------------------------------------------------------------------------
# (id, script, extra flags, words the one line must contain): refused, not run with one flag silently winning.
CONTRADICTIONS = [
    ("scratch-init", "finetune.py", ["--from_scratch", "--init_checkpoint", "{weights}"],
     ["--from_scratch", "--init_checkpoint"]),
    ("scratch-model_name_or_path", "finetune.py", ["--from_scratch", "--model_name_or_path", "{weights}"],
     ["--from_scratch", "--model_name_or_path"]),
    ("scratch-weights_only", "finetune.py", ["--from_scratch", "--load_model_weights_only", "{weights}"],
     ["--from_scratch", "--load_model_weights_only"]),
    ("init-and-model_name_or_path", "finetune.py", ["--init_checkpoint", "{weights}", "--model_name_or_path",
                                                     "{hf_nan}"], ["--init_checkpoint", "--model_name_or_path"]),
    ("no_tensorboard-tensorboard_dir", "finetune.py", ["--init_checkpoint", "{weights}", "--no_tensorboard",
                                                        "--tensorboard_dir", "{base}/tb"],
     ["--no_tensorboard", "--tensorboard_dir"]),
    ("pt-no_tensorboard-tensorboard_dir", "pretrain.py", ["--no_tensorboard", "--tensorboard_dir", "{base}/tb"],
     ["--no_tensorboard", "--tensorboard_dir"]),
    ("use_nvlamb-without-lamb", "pretrain.py", ["--use_nvlamb"], ["--use_nvlamb", "--lamb"]),
    ("val_check_interval-n_val-0", "finetune.py", ["--init_checkpoint", "{weights}", "--val_check_interval", "2"],
     ["--val_check_interval 2", "--n_val 0"]),
    ("auto-weights_only", "finetune.py", ["--init_checkpoint", "{weights}", "--resume_from_checkpoint", "auto",
                                          "--load_model_weights_only"], ["--load_model_weights_only", "PATH"]),
]


@pytest.mark.parametrize("case", CONTRADICTIONS, ids=[c[0] for c in CONTRADICTIONS])
def test_contradictory_flags_are_one_line(case, user_inputs, tmp_path, capsys):
    name, script, extra, words = case
    out = str(tmp_path / "out")
    code = _main(script, _argv((FT if script == "finetune.py" else PT) + extra, user_inputs, out))
    line = _one_line(capsys, code, script)
    for word in words:
        assert word in line, (word, line)
    assert not os.path.exists(out)  # refused at parse time: nothing made


@pytest.mark.parametrize("extra", [
    ["--init_checkpoint", "{weights}", "--resume_from_checkpoint", "auto"],      # the scripts' phase 2 / restarts
    ["--init_checkpoint", "{weights}", "--resume_from_checkpoint", "True"],      # "the same command, resumed"
    ["--from_scratch", "--resume_from_checkpoint", "auto"],
    ["--init_checkpoint", "{weights}", "--model_name_or_path", "{weights}"],     # the same weights twice
    ["--resume_from_checkpoint={weights}", "--load_model_weights_only"],         # the reference's spelling
    ["--init_checkpoint", "{weights}", "--lamb", "--use_nvlamb", "--no_tensorboard"],
    ["--init_checkpoint", "{weights}", "--val_check_interval", "0"],  # run_summarization.sh with N_VAL=0
], ids=["auto", "true", "scratch-auto", "same-weights", "reference-weights-only", "nvlamb", "script-n_val-0"])
def test_compatible_flags_still_parse(extra, user_inputs, tmp_path):
    import finetune
    args = finetune.parse_args(_argv(FT + extra, user_inputs, str(tmp_path / "out")))
    assert args.checkpoints.init_checkpoint in (None, user_inputs["weights"])

"""The model config file against the rest of the run: a key nothing reads is named in one line (and changes
nothing), a vocab_size below the tokenizer's is one line and exit 2 from every entry script."""
import json

import pytest

from tests.helpers.corpus import SMALL_VOCAB_SIZE
from tests.helpers.entry import run_entry as _main
from tests.helpers.user_inputs import (
    CONFIG,
    EV,
    FT,
    PT,
)
from tests.helpers.user_inputs import argv as _argv
from tests.helpers.user_inputs import first_loss as _first_loss
from tests.helpers.user_inputs import one_line as _one_line


@pytest.mark.parametrize("script", ["finetune.py", "pretrain.py", "run_eval.py"])
def test_config_vocab_size_below_the_tokenizer_exits_2(script, user_inputs, tmp_path, capsys):
    """One line and exit 2 (a user's mistake), not exit 1 (a crash)."""
    out = str(tmp_path / "out")
    if script == "run_eval.py":  # the checkpoint decides the architecture there
        argv = _argv(EV, user_inputs, out, model=user_inputs["small_vocab_ckpt"])
    else:
        argv = _argv(FT + ["--from_scratch"] if script == "finetune.py" else PT, user_inputs, out, cfg=user_inputs["cfg_small_vocab"])
    line = _one_line(capsys, _main(script, argv), script)
    assert f"has {SMALL_VOCAB_SIZE} tokens but" in line and f"vocab_size {SMALL_VOCAB_SIZE - 10}" in line, line


def test_a_config_key_nothing_reads_is_named_in_one_line(user_inputs, plain_loss, tmp_path, capsys):
    """Each unread key is named in one note (with the keys it might mean), and the run is the plain one."""
    config = tmp_path / "config.json"
    config.write_text(json.dumps({**CONFIG, "foo_bar": 1, "dropuot_prob": 0.3}))
    out = str(tmp_path / "out")
    capsys.readouterr()
    assert _main("finetune.py", _argv(FT + ["--init_checkpoint", "{weights}", "--log_freq", "1"], user_inputs, out,
                                      cfg=str(config))) == 0
    said = [line for line in capsys.readouterr().err.splitlines() if "read by no part" in line]
    assert said == [f"note: BartConfig: key 'foo_bar' (in {config}) is read by no part of this project: it changes "
                    f"nothing",
                    f"note: BartConfig: key 'dropuot_prob' (in {config}) is read by no part of this project: it "
                    f"changes nothing (keys it might mean: dropout)"], said
    assert _first_loss(out) == pytest.approx(plain_loss, abs=1e-6)

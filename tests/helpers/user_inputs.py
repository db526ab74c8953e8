"""Inputs a user gives the entry scripts, usable and not, for the tests of what a run refuses in one line:
``write_user_inputs`` gathers them (the micro config and one with a smaller vocabulary, summarization splits, LDDL shards,
seed-0 weights; weight files holding int32, int8 or NaN tensors, a checkpoint of a smaller vocabulary, splits with
CR-only line ends, a one-example train split); ``FT``, ``EV`` and ``PT`` are short fine-tuning, evaluation and
pretraining command lines over them (``argv`` fills them in); ``one_line`` checks that a refused run printed one
line, exit 2, no traceback."""
import json
import os
import re

import torch

from tests.helpers.corpus import SMALL_VOCAB_SIZE, micro_config
from tests.helpers.entry import run_entry

CONFIG = micro_config()
TIED = ("model.encoder.embed_tokens.weight", "model.decoder.embed_tokens.weight", "lm_head.weight")


def model(**changes):
    from bart.configuration import BartConfig
    from bart.modeling import BartForConditionalGeneration
    torch.manual_seed(0)
    return BartForConditionalGeneration(BartConfig(**{**CONFIG, **changes})).eval()


def hf_folder(folder: str, state: dict) -> str:
    """A Hugging Face folder (config.json from save_pretrained) whose model.safetensors holds ``state``."""
    from safetensors.torch import save_file

    from bart.modeling.weights import save_pretrained
    save_pretrained(model(), folder)
    save_file({k: v.contiguous() for k, v in state.items()}, os.path.join(folder, "model.safetensors"),
              metadata={"format": "pt"})
    return folder


def state(**changes) -> dict:
    return {k: v.clone() for k, v in model(**changes).state_dict().items() if k not in TIED}


def write_user_inputs(inputs, base) -> dict:
    """The inputs by name: the usable ones from ``inputs`` (tests/helpers/inputs.py, shared), the others written into
    ``base`` (a pathlib.Path)."""
    w = {"tok": inputs.tokenizer, "base": str(base), "cfg": inputs.config()}
    (base / "cfg_small_vocab.json").write_text(json.dumps({**CONFIG, "vocab_size": SMALL_VOCAB_SIZE - 10}))
    w["cfg_small_vocab"] = str(base / "cfg_small_vocab.json")
    w["data"] = inputs.summaries(16, 4, 4)
    w["shards"] = inputs.shards((8, 8))
    w["weights"] = inputs.weights()  # model()'s: the seed-0 weights of CONFIG
    # weight files the model cannot use: an int32 safetensors folder (fine-tuning from it would train whole-number
    # weights to loss ln(vocab)), an int8 .ckpt, a NaN in a float table
    w["hf_int32"] = hf_folder(str(base / "hf_int32"), {k: v.to(torch.int32) for k, v in state().items()})
    w["int8_ckpt"] = str(base / "int8.ckpt")
    torch.save({k: v.to(torch.int8) for k, v in model().state_dict().items()}, w["int8_ckpt"])
    nan = state()
    nan["model.encoder.layers.0.fc1.weight"][3, 5] = float("nan")
    w["hf_nan"] = hf_folder(str(base / "hf_nan"), nan)
    # a checkpoint whose vocabulary is smaller than the tokenizer's (run_eval.py takes the architecture from the
    # checkpoint), CR-only split files, a one-example train split
    small = model(vocab_size=SMALL_VOCAB_SIZE - 10)
    w["small_vocab_ckpt"] = str(base / "small_vocab.ckpt")
    torch.save({"model": small.state_dict(), "config": small.config.to_dict()}, w["small_vocab_ckpt"])
    w["data_cr"] = str(base / "data_cr")
    os.makedirs(w["data_cr"])
    for name in os.listdir(w["data"]):
        with open(os.path.join(w["data"], name), "rb") as f:
            data = f.read()
        with open(os.path.join(w["data_cr"], name), "wb") as f:
            f.write(data.replace(b"\n", b"\r"))
    w["data_one"] = inputs.summaries(1, 4, 4)
    return w


def one_line(capsys, code: int, script: str) -> str:
    # LDDL's logger keeps the stream of an earlier in-process run (closed by pytest's capture): logging's own
    # "--- Logging error ---" report of that, not the run's output
    err = re.sub(r"--- Logging error ---\n.*?\nArguments: \(.*?\)\n", "", capsys.readouterr().err, flags=re.S)
    lines = [line for line in err.strip().splitlines()
             if not line.startswith(("note:", "[checkpoint]", "[generate]", "[data]", "[train]", "LDDL - "))]
    assert code == 2, f"exit {code}, stderr:\n{err[-3000:]}"
    assert "Traceback" not in err, err[-3000:]
    prefix = "bart.export" if script == "bart.export" else script
    assert len(lines) == 1 and lines[0].startswith(f"{prefix}: error:"), err[-3000:]
    return lines[0]


def written(folder: str) -> list[str]:
    return sorted(os.listdir(folder)) if os.path.isdir(folder) else []


FT = ["--config_path", "{cfg}", "--data_dir", "{data}", "--tokenizer", "{tok}", "--max_steps", "1",
      "--train_batch_size", "4", "--n_val", "0", "--num_workers", "0", "--max_source_length", "32",
      "--max_target_length", "16", "--output_dir", "{out}"]
EV = ["{model}", "{cfg}", "{data}", "{out}", "--tokenizer", "{tok}", "--max_source_length", "32",
      "--max_target_length", "8", "--bs", "2"]
PT = ["--config_path", "{cfg}", "--data_dir", "{shards}", "--tokenizer", "{tok}", "--max_steps", "1",
      "--train_batch_size", "2", "--max_source_length", "32", "--num_workers", "0", "--output_dir", "{out}"]


def argv(template: list[str], world: dict, out: str, **values) -> list[str]:
    return [a.format(**{**world, "out": out, **values}) for a in template]


def first_loss(out: str) -> float:
    from bart.records.dllogger_compat import read_dllogger
    return next(r["data"]["loss"] for r in read_dllogger(os.path.join(out, "dllogger.json"))
                if r["type"] == "LOG" and r["step"] == 1 and "loss" in r["data"])


def one_update_first_loss(world: dict, out: str) -> float:
    """The first loss of one fine-tuning update from ``world``'s seed-0 weights on its plain files, run into
    ``out`` (conftest.py's ``plain_loss``: the peer of the tests that change a file and expect the same run)."""
    assert run_entry("finetune.py", argv(FT + ["--init_checkpoint", "{weights}", "--log_freq", "1"], world, out)) == 0
    return first_loss(out)

"""Weights the model cannot use (integer, bool, complex or float8 tensors, NaN/inf, a table of the wrong rank),
in every kind of weight file and through every entry point: refused in one line naming the file and the tensor
(exit 2, no traceback, nothing written); floating tables of any width load unchanged."""
import json
import os

import pytest
import torch

from bart.modeling.weights import CheckpointError
from tests.helpers.corpus import SMALL_VOCAB_SIZE
from tests.helpers.entry import run_entry as _main
from tests.helpers.user_inputs import (
    EV,
    FT,
    TIED,
)
from tests.helpers.user_inputs import argv as _argv
from tests.helpers.user_inputs import model as _model
from tests.helpers.user_inputs import one_line as _one_line
from tests.helpers.user_inputs import state as _state
from tests.helpers.user_inputs import written as _written

# -- case 2: weights the model cannot use ---------------------------------------------------------------------
# (entry point, argv, the file and the tensor the line must name). Refused before anything runs: not a
# fine-tuning run on whole-number weights (loss ln(1024) = 6.931), a run_eval.py writing "!!!", a bart.export
# folder, or a run stopped after 5 NaN updates (exit 3) naming no tensor.
ENTRY_CASES = [
    ("finetune-int32-safetensors", "finetune.py", FT + ["--init_checkpoint", "{hf_int32}"],
     ["hf_int32/model.safetensors", "final_logits_bias", "int32"]),
    ("finetune-nan-safetensors", "finetune.py", FT + ["--init_checkpoint", "{hf_nan}"],
     ["hf_nan/model.safetensors", "model.encoder.layers.0.fc1.weight", "1 NaN/inf"]),
    ("run_eval-int8-ckpt", "run_eval.py", EV, ["int8.ckpt", "int8"]),
    ("export-int32-safetensors", "bart.export", ["{hf_int32}", "{out}", "--tokenizer", "{tok}"],
     ["hf_int32/model.safetensors", "int32"]),
    ("export-nan-safetensors", "bart.export", ["{hf_nan}", "{out}", "--tokenizer", "{tok}"],
     ["hf_nan/model.safetensors", "model.encoder.layers.0.fc1.weight"]),
]


@pytest.mark.parametrize("case", ENTRY_CASES, ids=[c[0] for c in ENTRY_CASES])
def test_unusable_weights_are_refused_by_each_entry_point(case, user_inputs, tmp_path, capsys):
    name, script, template, words = case
    out = str(tmp_path / "out")
    code = _main(script, _argv(template, user_inputs, out, model=user_inputs["int8_ckpt"]))
    line = _one_line(capsys, code, script)
    for word in words:
        assert word in line, (word, line)
    assert not [f for f in _written(out) if f.endswith((".ckpt", ".safetensors", ".txt", ".json"))], _written(out)


def test_a_resumed_training_checkpoint_with_nan_weights_is_refused_naming_the_tensor(user_inputs, tmp_path, capsys):
    """A run's own _step{N}.ckpt whose weights went bad on disk: refused naming the file and the tensor, not resumed
    to train on NaN until --max_consecutive_nonfinite stops it (exit 3)."""
    out = tmp_path / "out"
    argv = _argv(FT, user_inputs, str(out)) + ["--init_checkpoint", user_inputs["weights"]]
    assert _main("finetune.py", argv) == 0
    path = out / "_epoch0_step1.ckpt"
    state = torch.load(path, weights_only=True)
    state["model"]["model.decoder.layers.0.fc2.weight"][0, 0] = float("inf")
    torch.save(state, path)
    capsys.readouterr()
    code = _main("finetune.py", argv + ["--max_steps", "2", "--resume_from_checkpoint", str(path),
                                        "--allow_resume_change", "max_steps"])
    line = _one_line(capsys, code, "finetune.py")
    assert "_epoch0_step1.ckpt" in line and "model.decoder.layers.0.fc2.weight" in line, line


def _sharded(folder, state: dict) -> str:
    """transformers' sharded layout: model.safetensors.index.json and two shards."""
    from safetensors.torch import save_file

    from bart.modeling.weights import save_pretrained
    save_pretrained(_model(), str(folder))  # config.json and generation_config.json
    os.remove(os.path.join(folder, "model.safetensors"))
    keys = sorted(state)
    shards = {"model-00001-of-00002.safetensors": keys[: len(keys) // 2],
              "model-00002-of-00002.safetensors": keys[len(keys) // 2:]}
    for shard, names in shards.items():
        save_file({k: state[k].contiguous() for k in names}, os.path.join(folder, shard), metadata={"format": "pt"})
    with open(os.path.join(folder, "model.safetensors.index.json"), "w") as f:
        json.dump({"weight_map": {k: s for s, names in shards.items() for k in names}}, f)
    return str(folder)


def _fairseq(path, state: dict) -> str:
    """The weights named and laid out as fairseq's BARTModel.state_dict() (bart.large/model.pt)."""
    out = {k[len("model."):]: v for k, v in state.items() if k.startswith("model.") and k != "model.shared.weight"}
    out["encoder.embed_tokens.weight"] = out["decoder.embed_tokens.weight"] = state["model.shared.weight"]
    torch.save({"model": out, "args": {"arch": "bart_large", "encoder_attention_heads": 4,
                                       "decoder_attention_heads": 4}}, path)
    return str(path)


def _changed(key: str, value) -> dict:
    state = {k: v.clone() for k, v in _model().state_dict().items()}
    state[key] = value(state[key]) if callable(value) else value
    if key == "model.shared.weight":
        for tied in TIED:
            state[tied] = state[key]
    return state


FC1 = "model.decoder.layers.0.fc1.weight"
# (id, write(tmp_path) -> path given to from_pretrained, file named, tensor named, words)
KIND_CASES = [
    ("sharded-safetensors-bool", lambda t: _sharded(t / "sharded", {k: (v.bool() if k == FC1 else v) for k, v in
                                                                    _state().items()}),
     "model-0000", FC1, "bool"),
    ("pytorch_model.bin-complex", lambda t: _bin(t, _changed(FC1, lambda v: v.to(torch.complex64))),
     "pytorch_model.bin", FC1, "complex64"),
    ("training-ckpt-inf-fp16", lambda t: _save(t / "_step5.ckpt", {
        "kind": "bart-training-checkpoint", "model": _changed(FC1, lambda v: v.half().index_fill_(1, torch.tensor([0]),
                                                                                                  float("inf"))),
        "config": _model().config.to_dict(), "step": 5}), "_step5.ckpt", FC1, "NaN/inf"),
    ("weights-ckpt-int64", lambda t: _save(t / "best.ckpt", {"kind": "bart-weights", "model": _changed(
        "model.shared.weight", lambda v: v.long()), "config": _model().config.to_dict()}),
     "best.ckpt", "model.shared.weight", "int64"),
    ("lightning-ckpt-nan", lambda t: _save(t / "lightning.ckpt", {"state_dict": {
        "model." + k: v for k, v in _changed(FC1, lambda v: v * float("nan")).items()}}),
     "lightning.ckpt", FC1, f"{64 * 32} NaN/inf"),
    ("float8", lambda t: _save(t / "fp8.ckpt", _changed(FC1, lambda v: v.to(torch.float8_e4m3fn))),
     "fp8.ckpt", FC1, "float8_e4m3fn"),
    ("fairseq-int32", lambda t: _fairseq(t / "model.pt", _changed(FC1, lambda v: v.int())),
     "model.pt", FC1, "int32"),
    ("fairseq-nan", lambda t: _fairseq(t / "model.pt", _changed("model.shared.weight", lambda v: v.index_fill(
        0, torch.tensor([7]), float("nan")))), "model.pt", "model.shared.weight", f"{32} NaN/inf"),
]


def _save(path, obj) -> str:
    torch.save(obj, path)
    return str(path)


def _bin(tmp_path, state: dict) -> str:
    folder = tmp_path / "bin"
    from bart.modeling.weights import save_pretrained
    save_pretrained(_model(), str(folder))
    os.remove(folder / "model.safetensors")
    torch.save(state, folder / "pytorch_model.bin")
    return str(folder)


@pytest.mark.parametrize("case", KIND_CASES, ids=[c[0] for c in KIND_CASES])
def test_every_weight_file_kind_refuses_unusable_tensors_naming_file_and_tensor(case, tmp_path):
    from bart.modeling import BartForConditionalGeneration
    name, write, file_named, tensor, words = case
    path = write(tmp_path)
    config = None if name.startswith(("sharded", "pytorch", "training", "weights", "fairseq")) else _model().config
    with pytest.raises(CheckpointError) as err:
        BartForConditionalGeneration.from_pretrained(path, config=config)
    text = str(err.value)
    first = text.split(":")[0]
    assert file_named in os.path.basename(first) and os.path.isfile(first), text  # the file itself, not its folder
    assert f"tensor {tensor} " in text and words in text and "\n" not in text, text


def test_fairseq_table_of_the_wrong_rank_is_one_line(tmp_path):
    from bart.modeling import BartForConditionalGeneration
    state = _changed("model.shared.weight", lambda v: v[:, 0].contiguous())
    path = _fairseq(tmp_path / "model.pt", state)  # one line, not a ValueError's traceback
    with pytest.raises(CheckpointError, match=rf"model.pt: tensor encoder.embed_tokens.weight has shape \({SMALL_VOCAB_SIZE},\)"):
        BartForConditionalGeneration.from_pretrained(path)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64])
def test_floating_weights_of_any_width_still_load_unchanged(dtype, tmp_path):
    """No false refusal: half, bfloat16 and double tables load, as the model's float32 of the same values."""
    from bart.modeling import BartForConditionalGeneration
    state = {k: v.to(dtype) for k, v in _model().state_dict().items()}
    model = BartForConditionalGeneration.from_pretrained(_save(tmp_path / "w.ckpt", state), config=_model().config)
    for key, value in model.state_dict().items():
        torch.testing.assert_close(value, state[key].float(), atol=0, rtol=0)


def test_value_check_counts_only_real_nan_and_inf():
    """The fast check sums each tensor: finite values whose sum overflows are not NaN/inf; -inf and +inf
    together (a NaN sum) are counted as two."""
    from bart.modeling.weights import check_weight_values
    large = {"w": torch.full((10,), 3e38)}
    check_weight_values(large, large, "big.ckpt")
    both = {"w": torch.tensor([1.0, float("inf"), float("-inf")])}
    with pytest.raises(CheckpointError, match=r"big.ckpt: tensor w holds 2 NaN/inf value\(s\) of 3"):
        check_weight_values(both, both, "big.ckpt")

"""Checkpoint layouts in, Hugging Face folders out, and clear errors for bad files."""
import json
import os

import pytest
import torch
import transformers

from bart.configuration import BartConfig
from bart.modeling import BartForConditionalGeneration
from bart.modeling.weights import CheckpointError
from tests.helpers import ROOT
from tests.helpers.fairseq import fairseq_state

_TRANSFORMERS_MAJOR = int(transformers.__version__.split(".")[0])

TINY = dict(vocab_size=99, d_model=16, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
            decoder_attention_heads=4, encoder_ffn_dim=32, decoder_ffn_dim=32, max_position_embeddings=64,
            dropout=0.0)
IDS = torch.tensor([[0, 5, 6, 7, 8, 2], [0, 9, 10, 2, 1, 1]])


def _model(pre_ln=False, seed=0):
    torch.manual_seed(seed)
    return BartForConditionalGeneration(BartConfig(**TINY, pre_ln=pre_ln)).eval()


def _logits(model):
    with torch.no_grad():
        return model(input_ids=IDS, attention_mask=(IDS != 1).long(), decoder_input_ids=IDS[:, :4]).logits


def _layouts(model):
    sd = model.state_dict()
    return {
        "raw": sd,
        "model_key": {"model": sd, "config": model.config.to_dict(), "step": 3},
        "lightning": {"state_dict": {"model." + k: v for k, v in sd.items()}},
        "ddp": {"model": {"module." + k: v for k, v in sd.items()}},
        "compiled_ddp": {"module._orig_mod." + k: v for k, v in sd.items()},
        "hf_tied_once": {k: v for k, v in sd.items() if k not in ("lm_head.weight", "model.encoder.embed_tokens.weight",
                                                                   "model.decoder.embed_tokens.weight", "final_logits_bias")},
    }


@pytest.mark.parametrize("pre_ln", [False, True])
def test_every_checkpoint_layout_loads(pre_ln, tmp_path):
    model = _model(pre_ln)
    for name, payload in _layouts(model).items():
        path = tmp_path / f"{name}.ckpt"
        torch.save(payload, path)
        loaded = BartForConditionalGeneration.from_pretrained(str(path), config=BartConfig(**TINY, pre_ln=pre_ln))
        torch.testing.assert_close(_logits(loaded), _logits(model), msg=name)
    # a training checkpoint carries its config: no config needed
    loaded = BartForConditionalGeneration.from_pretrained(str(tmp_path / "model_key.ckpt"))
    assert loaded.config.pre_ln == pre_ln


def test_nvidia_pre_ln_names_load(tmp_path):
    model = _model(pre_ln=True)
    nvidia = {k.replace(".layer_norm.", ".last_layernorm."): v for k, v in model.state_dict().items()
              if not k.startswith(("model.encoder.layers", "model.decoder.layers")) or True}
    assert any("last_layernorm" in k for k in nvidia)
    torch.save({"model": nvidia}, tmp_path / "nv.ckpt")
    loaded = BartForConditionalGeneration.from_pretrained(str(tmp_path / "nv.ckpt"), config=BartConfig(**TINY, pre_ln=True))
    torch.testing.assert_close(_logits(loaded), _logits(model))


@pytest.mark.parametrize("pre_ln,hf_class", [(False, transformers.BartForConditionalGeneration),
                                              (True, transformers.MBartForConditionalGeneration)])
def test_save_pretrained_round_trips_through_transformers(pre_ln, hf_class, tmp_path):
    model = _model(pre_ln)
    model.save_pretrained(tmp_path / "out")
    hf = hf_class.from_pretrained(str(tmp_path / "out")).eval()
    with torch.no_grad():
        expected = hf(input_ids=IDS, attention_mask=(IDS != 1).long(), decoder_input_ids=IDS[:, :4]).logits
    torch.testing.assert_close(_logits(model), expected, atol=1e-6, rtol=1e-6)
    again = BartForConditionalGeneration.from_pretrained(str(tmp_path / "out"))
    torch.testing.assert_close(_logits(again), _logits(model))


def test_missing_truncated_and_foreign_files(tmp_path):
    config = BartConfig(**TINY)
    with pytest.raises(FileNotFoundError, match="nope.ckpt"):
        BartForConditionalGeneration.from_pretrained(str(tmp_path / "nope.ckpt"), config=config)
    torch.save(_model().state_dict(), tmp_path / "good.ckpt")
    data = (tmp_path / "good.ckpt").read_bytes()
    (tmp_path / "truncated.ckpt").write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match="truncated.ckpt.*truncated"):
        BartForConditionalGeneration.from_pretrained(str(tmp_path / "truncated.ckpt"), config=config)
    (tmp_path / "notes.ckpt").write_text("not a checkpoint")
    with pytest.raises(CheckpointError, match="notes.ckpt"):
        BartForConditionalGeneration.from_pretrained(str(tmp_path / "notes.ckpt"), config=config)
    torch.save({"model": object}, tmp_path / "code.ckpt")  # unpickling would need a global: refused
    with pytest.raises(CheckpointError, match="code.ckpt"):
        BartForConditionalGeneration.from_pretrained(str(tmp_path / "code.ckpt"), config=config)


def test_wrong_size_and_pre_ln_mismatch_are_explained(tmp_path):
    torch.save(_model(pre_ln=True).state_dict(), tmp_path / "preln.ckpt")
    with pytest.raises(CheckpointError, match="Pre-LN; set config.pre_ln = True"):
        BartForConditionalGeneration.from_pretrained(str(tmp_path / "preln.ckpt"), config=BartConfig(**TINY))
    torch.save(_model().state_dict(), tmp_path / "post.ckpt")
    with pytest.raises(CheckpointError, match="post-LN"):
        BartForConditionalGeneration.from_pretrained(str(tmp_path / "post.ckpt"), config=BartConfig(**TINY, pre_ln=True))
    bigger = BartConfig(**dict(TINY, vocab_size=120))
    with pytest.raises(CheckpointError, match="another model size"):
        BartForConditionalGeneration.from_pretrained(str(tmp_path / "post.ckpt"), config=bigger)
    torch.save({"model": _model().state_dict(), "config": BartConfig(**TINY).to_dict()}, tmp_path / "cfg.ckpt")
    with pytest.raises(CheckpointError, match="d_model 16 .checkpoint. vs 32"):
        BartForConditionalGeneration.from_pretrained(str(tmp_path / "cfg.ckpt"), config=BartConfig(**dict(TINY, d_model=32)))


def test_config_with_wrong_types_names_the_key(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(dict(TINY, encoder_layers="two")))
    with pytest.raises(ValueError, match="'encoder_layers' must be int.*config.json"):
        BartConfig.from_json_file(str(path))
    with pytest.raises(ValueError, match="not valid JSON"):
        path.write_text("{oops")
        BartConfig.from_json_file(str(path))


def test_readme_inference_snippet(tmp_path, tokenizer_dir, monkeypatch):
    """The README's custom-inference code, run as written against a checkpoint written by the project."""
    os.makedirs(tmp_path / "configs")
    tiny = dict(TINY, vocab_size=50265, d_model=32, pre_ln=True, num_beams=4, max_length=30)
    (tmp_path / "configs" / "config.json").write_text(json.dumps(tiny))
    os.makedirs(tmp_path / "results")
    torch.manual_seed(0)
    trained = BartForConditionalGeneration(BartConfig(**tiny))
    torch.save({"model": trained.state_dict(), "config": trained.config.to_dict()},
               tmp_path / "results" / "_epoch1_step2000.ckpt")
    monkeypatch.chdir(tmp_path)
    from bart.configuration.configuration_bart import BartConfig as SnippetConfig
    from bart.modeling.modeling_bart import BartForConditionalGeneration as SnippetModel
    from bart.tokenization.tokenization_bart import BartTokenizer
    config = SnippetConfig(**json.load(open('configs/config.json')))
    config.dtype = None
    config.pre_ln = True
    model_path = 'results/_epoch1_step2000.ckpt'
    model = SnippetModel.from_pretrained(model_path, config=config)
    tokenizer = BartTokenizer.from_pretrained(tokenizer_dir)
    inputs = tokenizer(["NVIDIA Geforce Won't Run or Uninstall"], max_length=1024, truncation=True, return_tensors='pt')
    summary_ids = model.generate(inputs['input_ids'], num_beams=4, max_length=50, num_beam_groups=1,
                                 output_scores=False, return_dict_in_generate=False, encoder_no_repeat_ngram_size=0,
                                 diversity_penalty=0.0, early_stopping=True)
    summaries = [tokenizer.decode(g, skip_special_tokens=True, clean_up_tokenization_spaces=False) for g in summary_ids]
    assert len(summaries) == 1 and isinstance(summaries[0], str)
    assert summary_ids.shape[0] == 1 and 2 <= summary_ids.shape[1] <= 50 and summary_ids[0, 0] == 2
    torch.testing.assert_close(model.model.shared.weight, trained.model.shared.weight)


# -- folders written by transformers itself --------------------------------------------------------------
FIXTURES = os.path.join(ROOT, "tests", "data", "transformers5")


def _hf_logits(folder):
    # the weights as stored, computed in fp32 (5.x loads at the config's dtype unless told; 4.57 in fp32)
    hf = transformers.AutoModelForSeq2SeqLM.from_pretrained(folder, dtype=torch.float32).eval()
    with torch.no_grad():
        return hf(input_ids=IDS, attention_mask=(IDS != 1).long(), decoder_input_ids=IDS[:, :4]).logits


@pytest.mark.parametrize("name,pre_ln,generation", [
    ("bart", False, dict(num_beams=4, max_length=30, no_repeat_ngram_size=3)),
    ("bart_sharded", False, dict(num_beams=4, max_length=30, no_repeat_ngram_size=3)),
    ("mbart", True, dict(num_beams=1, max_length=20, decoder_start_token_id=2)),
])
def test_transformers5_folders_load(name, pre_ln, generation):
    """Folders written by transformers 5.23's save_pretrained (tests/data/transformers5/make_fixtures.py)."""
    folder = os.path.join(FIXTURES, name)
    assert json.load(open(os.path.join(folder, "config.json")))["transformers_version"].startswith("5.")
    model = BartForConditionalGeneration.from_pretrained(folder)
    assert model.config.pre_ln is pre_ln and model.config.dtype is None and model.dtype == torch.float32
    for key, value in generation.items():  # generation_config.json is read for generation defaults
        assert getattr(model.config, key) == value, key
    torch.testing.assert_close(_logits(model), _hf_logits(folder), atol=1e-6, rtol=1e-6)


def test_transformers457_folder_with_null_generation_keys(tmp_path):
    """transformers 4.57 moves generation keys of a hub config (as facebook/bart-large-cnn's) to
    generation_config.json and writes them as null in config.json; pytorch_model.bin, sharded or not."""
    values = dict(TINY, model_type="bart", num_beams=4, max_length=142, min_length=56, length_penalty=2.0,
                  no_repeat_ngram_size=3, early_stopping=True, forced_bos_token_id=0, torch_dtype="bfloat16",
                  task_specific_params={"summarization": {"num_beams": 4}})
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "config.json").write_text(json.dumps(values))
    torch.manual_seed(0)
    hf = transformers.AutoModelForSeq2SeqLM.from_config(transformers.AutoConfig.from_pretrained(str(tmp_path / "src")))
    layouts = (("safetensors", {}), ("bin", dict(safe_serialization=False)),
               ("bin_sharded", dict(safe_serialization=False, max_shard_size="20KB")))
    if _TRANSFORMERS_MAJOR >= 5:  # 5.x writes safetensors only (safe_serialization=False is ignored)
        layouts = (("safetensors", {}), ("safetensors_sharded", dict(max_shard_size="20KB")))
    for layout, kwargs in layouts:
        folder = str(tmp_path / layout)
        if _TRANSFORMERS_MAJOR < 5:
            with pytest.warns(UserWarning, match="generation config") if layout == "safetensors" else _nothing():
                hf.save_pretrained(folder, **kwargs)
        else:  # 5.x drops the generation keys from config.json: write them back as 4.57 leaves them (null)
            hf.save_pretrained(folder, **kwargs)
            path = os.path.join(folder, "config.json")
            config = json.load(open(path))
            moved = {k: values[k] for k in ("num_beams", "max_length", "min_length", "length_penalty",
                                            "no_repeat_ngram_size", "early_stopping", "forced_bos_token_id")}
            config.update({k: None for k in moved})
            json.dump(config, open(path, "w"))
            generation = os.path.join(folder, "generation_config.json")
            json.dump({**(json.load(open(generation)) if os.path.exists(generation) else {}), **moved},
                      open(generation, "w"))
        written = json.load(open(os.path.join(folder, "config.json")))
        assert written["num_beams"] is None and written["max_length"] is None and written["transformers_version"]
        if layout.endswith("_sharded"):
            assert os.path.isfile(os.path.join(folder, "pytorch_model.bin.index.json" if layout == "bin_sharded"
                                               else "model.safetensors.index.json"))
        model = BartForConditionalGeneration.from_pretrained(folder)
        assert (model.config.num_beams, model.config.max_length, model.config.min_length, model.config.length_penalty,
                model.config.no_repeat_ngram_size, model.config.early_stopping, model.config.forced_bos_token_id) == \
            (4, 142, 56, 2.0, 3, True, 0)
        assert model.config.dtype is None and model.dtype == torch.float32, "storage dtype must not cast the model"
        torch.testing.assert_close(_logits(model), _hf_logits(folder), atol=1e-6, rtol=1e-6)


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def test_damaged_folders_name_the_file(tmp_path):
    import shutil
    folder = tmp_path / "sharded"
    shutil.copytree(os.path.join(FIXTURES, "bart_sharded"), folder)
    os.remove(folder / "model-00002-of-00004.safetensors")
    with pytest.raises(CheckpointError, match="lists the shard model-00002-of-00004.safetensors, which is missing"):
        BartForConditionalGeneration.from_pretrained(str(folder))
    folder = tmp_path / "cut"
    shutil.copytree(os.path.join(FIXTURES, "bart"), folder)
    data = (folder / "model.safetensors").read_bytes()
    (folder / "model.safetensors").write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match=r"cut/model.safetensors is not a readable safetensors file"):
        BartForConditionalGeneration.from_pretrained(str(folder))
    (folder / "config.json").write_text(json.dumps(dict(TINY, model_type="t5")))
    with pytest.raises(CheckpointError, match="model_type 't5' is not BART"):
        BartForConditionalGeneration.from_pretrained(str(folder))


# -- the project's best-validation checkpoint ----------------------------------------------------------------
def test_checkpoint_with_numpy_scalars_loads_safely(tmp_path):
    """finetune.py's best_*.ckpt stores the validation metrics, which may be numpy scalars."""
    import numpy as np
    model = _model()
    metrics = {"rouge1": np.float64(41.5), "rougeL": np.float32(30.25), "n": np.int64(8), "ok": np.bool_(True),
               "per_example": np.arange(3)}
    path = tmp_path / "best_rouge1_step9.ckpt"
    torch.save({"model": model.state_dict(), "config": model.config.to_dict(), "step": 9, "metrics": metrics}, path)
    with pytest.raises(Exception, match="Weights only load failed"):  # what plain safe loading says
        torch.load(path, weights_only=True)
    loaded = BartForConditionalGeneration.from_pretrained(str(path))
    torch.testing.assert_close(_logits(loaded), _logits(model))
    from bart.modeling.weights import read_checkpoint_file
    assert read_checkpoint_file(str(path))["metrics"]["rouge1"] == 41.5


def test_unreadable_files_are_described_not_blamed_on_truncation(tmp_path):
    config = BartConfig(**TINY)
    (tmp_path / "notes.ckpt").write_text("these are my notes")
    with pytest.raises(CheckpointError) as err:
        BartForConditionalGeneration.from_pretrained(str(tmp_path / "notes.ckpt"), config=config)
    assert "notes.ckpt" in str(err.value) and "bytes are not a torch checkpoint" in str(err.value)
    assert "truncated" not in str(err.value)

    class Custom:  # a class the file needs to be rebuilt: refused, and named
        pass
    import types
    module = types.ModuleType("my_research_code")
    module.Custom = Custom
    Custom.__module__, Custom.__qualname__ = "my_research_code", "Custom"
    import sys
    sys.modules["my_research_code"] = module
    try:
        torch.save({"model": _model().state_dict(), "extra": Custom()}, tmp_path / "custom.ckpt")
    finally:
        del sys.modules["my_research_code"]
    with pytest.raises(CheckpointError) as err:
        BartForConditionalGeneration.from_pretrained(str(tmp_path / "custom.ckpt"), config=config)
    assert "custom.ckpt" in str(err.value) and "my_research_code.Custom" in str(err.value)
    assert "truncated" not in str(err.value) and "\n" not in str(err.value)
    (tmp_path / "empty.ckpt").write_bytes(b"")
    with pytest.raises(CheckpointError, match="empty.ckpt is empty"):
        BartForConditionalGeneration.from_pretrained(str(tmp_path / "empty.ckpt"), config=config)


# -- fairseq ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("pre_ln,holder", [(False, "args"), (False, "cfg"), (True, "args")])
def test_fairseq_checkpoint_imports(pre_ln, holder, tmp_path):
    import argparse
    model = _model(pre_ln)
    state = fairseq_state(model)
    assert "encoder.layers.0.self_attn.k_proj.weight" in state and "encoder.layers.1.fc2.bias" in state
    assert "decoder.layers.0.encoder_attn_layer_norm.weight" in state and "encoder.layernorm_embedding.weight" in state
    assert not any(k.startswith(("model.", "shared.", "lm_head")) for k in state)
    model_args = dict(arch="mbart_large" if pre_ln else "bart_large", encoder_attention_heads=4,
                      decoder_attention_heads=4, activation_fn="gelu", dropout=0.0, attention_dropout=0.0,
                      relu_dropout=0.0, encoder_normalize_before=pre_ln, decoder_normalize_before=pre_ln,
                      no_scale_embedding=True, share_all_embeddings=True)
    extra = {"args": argparse.Namespace(**model_args)} if holder == "args" else {"cfg": {"model": model_args}}
    folder = tmp_path / "bart.large"
    folder.mkdir()
    torch.save({"model": state, **extra, "extra_state": {"val_loss": 3.2}}, folder / "model.pt")
    (folder / "dict.txt").write_text("4 100\n")
    for path in (folder / "model.pt", folder):  # the file, or fairseq's extracted folder (no config.json)
        loaded = BartForConditionalGeneration.from_pretrained(str(path))
        assert loaded.config.pre_ln is pre_ln
        assert (loaded.config.encoder_attention_heads, loaded.config.d_model, loaded.config.encoder_layers,
                loaded.config.max_position_embeddings, loaded.config.vocab_size) == (4, 16, 2, 64, 99)
        torch.testing.assert_close(_logits(loaded), _logits(model), atol=0, rtol=0)
    # with the project's config given, geometry is checked against the tensors
    with pytest.raises(CheckpointError, match="d_model 16 .checkpoint. vs 32"):
        BartForConditionalGeneration.from_pretrained(str(folder / "model.pt"), config=BartConfig(**dict(TINY, d_model=32)))


def test_fairseq_untied_output_projection_is_refused(tmp_path):
    state = fairseq_state(_model())
    state["decoder.output_projection.weight"] = torch.randn_like(state["decoder.output_projection.weight"])
    torch.save({"model": state, "cfg": {"model": {"arch": "bart_large", "encoder_attention_heads": 4,
                                                  "decoder_attention_heads": 4}}}, tmp_path / "model.pt")
    with pytest.raises(CheckpointError, match="decoder.output_projection.weight differs"):
        BartForConditionalGeneration.from_pretrained(str(tmp_path / "model.pt"))


def test_every_generation_setting_of_a_saved_folder_is_used_or_refused(tmp_path):
    """A generation_config.json written by transformers' save_pretrained with settings beyond the classic
    ones (repetition_penalty, sampling, suppress_tokens, sequence_bias, ...): generate uses all of them,
    as transformers' generate from the same folder does; a setting this project does not implement
    (penalty_alpha: contrastive search) makes generate refuse, naming it, instead of decoding otherwise."""
    torch.manual_seed(3)
    hf = transformers.BartForConditionalGeneration(transformers.BartConfig(**dict(TINY, init_std=0.3))).eval()
    ids, mask = IDS, (IDS != 1).long()
    plain = hf.generate(ids, attention_mask=mask, max_length=12)
    settings = [dict(repetition_penalty=1.6, no_repeat_ngram_size=2, num_beams=3),
                dict(suppress_tokens=[int(plain[0, 1]), int(plain[1, 2])], begin_suppress_tokens=[int(plain[1, 1])]),
                dict(sequence_bias=[[[int(plain[0, 1])], -10.0]], exponential_decay_length_penalty=(2, 1.5),
                     renormalize_logits=True),
                dict(do_sample=True, top_k=0, typical_p=0.8, temperature=0.9),
                dict(max_new_tokens=5, min_new_tokens=4, bad_words_ids=[[int(plain[0, 2])]])]
    for index, values in enumerate(settings):
        folder = str(tmp_path / f"case{index}")
        hf.generation_config = transformers.GenerationConfig(**values, max_length=12, bos_token_id=0, eos_token_id=2,
                                                             pad_token_id=1, decoder_start_token_id=2)
        hf.save_pretrained(folder)
        reloaded = transformers.BartForConditionalGeneration.from_pretrained(folder).eval()
        model = BartForConditionalGeneration.from_pretrained(folder)
        torch.manual_seed(index)
        expected = reloaded.generate(ids, attention_mask=mask)
        torch.manual_seed(index)
        got = model.generate(ids, attention_mask=mask)
        assert torch.equal(got, expected), (values, got, expected)
        assert not torch.equal(expected, plain[:, :expected.shape[1]]) or expected.shape != plain.shape, values
        model.save_pretrained(folder + "_saved")  # and written back, transformers decodes the same
        torch.manual_seed(index)
        again = transformers.BartForConditionalGeneration.from_pretrained(folder + "_saved").eval().generate(
            ids, attention_mask=mask)
        assert torch.equal(again, expected), (values, again, expected)
    hf.generation_config = transformers.GenerationConfig(max_length=12)
    hf.save_pretrained(str(tmp_path / "contrastive"))
    path = tmp_path / "contrastive" / "generation_config.json"
    path.write_text(json.dumps(dict(json.loads(path.read_text()), penalty_alpha=0.6, top_k=4)))  # edited by hand
    model = BartForConditionalGeneration.from_pretrained(str(tmp_path / "contrastive"))
    with pytest.raises(ValueError, match="penalty_alpha=0.6.*does not implement"):
        model.generate(ids, attention_mask=mask)
    model.config.penalty_alpha = None  # the fix the message names
    assert model.generate(ids, attention_mask=mask).shape[0] == 2

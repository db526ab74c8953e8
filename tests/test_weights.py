"""Checkpoint layouts in, Hugging Face folders out, and clear errors for bad files."""
import json
import os

import pytest
import torch
import transformers

from bart.configuration import BartConfig
from bart.modeling import BartForConditionalGeneration
from bart.modeling.weights import CheckpointError

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
    from bart.modeling.modeling_bart import BartForConditionalGeneration as SnippetModel
    from bart.tokenization.tokenization_bart import BartTokenizer
    from bart.configuration.configuration_bart import BartConfig as SnippetConfig
    config = SnippetConfig(**json.load(open('configs/config.json', "r")))
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

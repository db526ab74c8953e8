"""The vocabulary padded for the hardware (bart.modeling.vocab_padding): aligned matrix products, and on the
real rows the unpadded model's logits, loss, gradients and tokens; files keep the tokenizer's rows."""
import json

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from bart.configuration import BartConfig
from bart.generation.session import Decoder
from bart.modeling import BartForConditionalGeneration
from bart.modeling.vocab_padding import padded_vocab_size
from tests.helpers.synthetic import TINY

CONFIG = dict(TINY, vocab_size=99, dropout=0.0)  # padded: 128 rows


def _pair(**changes):
    """The same seed, padded (the default, 128) and unpadded (1): the same random draws for the real rows."""
    models = []
    for multiple in (128, 1):
        torch.manual_seed(0)
        models.append(BartForConditionalGeneration(BartConfig(**CONFIG, **changes, pad_vocab_to_multiple_of=multiple)))
    return models


def _batch():
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(4, 99, (3, 9), generator=g)
    ids[:, -1] = 2
    labels = torch.randint(4, 99, (3, 6), generator=g)
    labels[2, 4:] = -100
    return ids, labels


def test_padding_geometry_and_initialisation():
    padded, plain = _pair()
    assert padded.config.vocab_size == plain.config.vocab_size == 99
    assert padded.lm_head.weight.shape == (128, 16) and padded.final_logits_bias.shape == (1, 128)
    assert plain.lm_head.weight.shape == (99, 16)
    assert padded.lm_head.weight is padded.model.shared.weight and padded.lm_head.out_features == 128
    assert not padded.model.shared.weight[99:].any()  # padded rows: zero
    # the same seed gives the same model as before padding (real rows drawn alike, every other weight too)
    for (name, a), b in zip(padded.state_dict().items(), plain.state_dict().values()):
        assert torch.equal(a, b), name
    assert padded_vocab_size(BartConfig(vocab_size=50265)) == 50304


@pytest.mark.parametrize("fused", [False, True])
@pytest.mark.parametrize("smoothing", [0.0, 0.1])
def test_logits_loss_and_gradients_equal_the_unpadded_model(fused, smoothing):
    padded, plain = _pair()
    ids, labels = _batch()
    outs = [m(input_ids=ids, attention_mask=torch.ones_like(ids), labels=labels, label_smoothing=smoothing,
              fused_cross_entropy=fused) for m in (padded, plain)]
    if not fused:
        assert outs[0].logits.shape == outs[1].logits.shape == (3, 6, 99)
        torch.testing.assert_close(outs[0].logits, outs[1].logits, atol=0, rtol=0)
    torch.testing.assert_close(outs[0].loss, outs[1].loss, atol=1e-7, rtol=1e-6)
    for out in outs:
        out.loss.backward()
    grads = dict(plain.named_parameters())
    for name, param in padded.named_parameters():
        rows = grads[name].shape[0]
        torch.testing.assert_close(param.grad[:rows], grads[name].grad, atol=1e-7, rtol=1e-5, msg=name)
        assert not param.grad[rows:].any(), f"{name}: a padded row got a gradient"


GENERATIONS = [dict(num_beams=1), dict(num_beams=4, no_repeat_ngram_size=2), dict(num_beams=4, num_beam_groups=2,
               diversity_penalty=0.5), dict(do_sample=True, top_k=0, num_return_sequences=2)]


def test_generated_tokens_equal_and_padded_rows_never_win():
    padded, plain = _pair(init_std=0.3)
    padded.eval(), plain.eval()
    ids, labels = _batch()
    # padded rows that would win every step if they were scored: large, aligned with any hidden state's sign
    with torch.no_grad():
        padded.model.shared.weight[99:] = 50.0
        padded.final_logits_bias[0, 99:] = 1e4
    for settings in GENERATIONS:
        got = [m.generate(ids, max_length=10, generator=torch.Generator().manual_seed(3), **settings)
               for m in (padded, plain)]
        assert torch.equal(got[0], got[1]), settings
        assert int(got[0].max()) < 99
    logits = padded(input_ids=ids, labels=labels).logits
    assert logits.shape[-1] == 99 and torch.equal(logits, plain(input_ids=ids, labels=labels).logits)
    # the loss gives the padded columns nothing either
    for fused in (False, True):
        torch.testing.assert_close(padded(input_ids=ids, labels=labels, fused_cross_entropy=fused).loss,
                                   plain(input_ids=ids, labels=labels).loss, atol=1e-6, rtol=1e-6)


def test_files_hold_the_tokenizers_rows_and_load_into_transformers(tmp_path):
    transformers = pytest.importorskip("transformers")
    padded, plain = _pair()
    state = padded.state_dict()
    for key in ("model.shared.weight", "model.encoder.embed_tokens.weight", "lm_head.weight"):
        assert state[key].shape == (99, 16), key
    assert state["final_logits_bias"].shape == (1, 99)
    padded.save_pretrained(tmp_path / "hf")
    assert json.loads((tmp_path / "hf" / "config.json").read_text())["vocab_size"] == 99
    from safetensors import safe_open
    with safe_open(str(tmp_path / "hf" / "model.safetensors"), "pt") as f:
        assert f.get_slice("model.shared.weight").get_shape() == [99, 16]
    hf = transformers.BartForConditionalGeneration.from_pretrained(str(tmp_path / "hf")).eval()
    ids, _ = _batch()
    padded.eval()
    torch.testing.assert_close(hf(input_ids=ids).logits, padded(input_ids=ids).logits, atol=1e-5, rtol=1e-5)
    # and back: any rows load (an unpadded state, transformers', a padded one), padded to ours
    again = BartForConditionalGeneration.from_pretrained(str(tmp_path / "hf")).eval()
    assert again.lm_head.weight.shape == (128, 16) and not again.lm_head.weight[99:].any()
    torch.testing.assert_close(again(input_ids=ids).logits, padded(input_ids=ids).logits, atol=0, rtol=0)
    plain.load_state_dict(hf.state_dict())
    fresh = BartForConditionalGeneration(BartConfig(**CONFIG))
    fresh.load_state_dict(dict(padded.state_dict(), **{"lm_head.weight": padded.lm_head.weight.detach()}))
    assert torch.equal(fresh.lm_head.weight, padded.lm_head.weight)


def test_a_run_saved_before_padding_resumes(tmp_path):
    """A training checkpoint written by an unpadded model (as before this change: 99 rows in the model and the
    optimizer state) resumes in a padded one, and continues as the unpadded run does."""
    from bart.optim import build_optimizer, build_scheduler
    from bart.training.trainer import Trainer
    from tests.helpers.synthetic import SyntheticBatches, one_process, run_settings

    def trainer(folder, multiple, max_steps):
        torch.manual_seed(0)
        model = BartForConditionalGeneration(BartConfig(**CONFIG, pad_vocab_to_multiple_of=multiple))
        opt, clips = build_optimizer(model, "lamb", lr=1e-2, weight_decay=0.01, max_grad_norm=1.0)
        settings = run_settings("fp32", output_dir=str(folder), max_steps=max_steps, log_freq=1, keep_checkpoints=0,
                                save_checkpoint_steps=1 if max_steps == 2 else 0,  # the 2-update run resumed as 4:
                                allow_resume_change=("max_steps",) if max_steps == 4 else ())  # its record says so
        return Trainer(model, opt, build_scheduler(opt, "linear", 1, 4), SyntheticBatches(4, 2), settings,
                       strategy=one_process(model), clips_internally=clips, progress_bar=False)

    old = trainer(tmp_path / "old", 1, 2)
    old.fit()
    checkpoint = tmp_path / "old" / "_step1.ckpt"
    saved = torch.load(checkpoint, weights_only=True)
    assert saved["model"]["model.shared.weight"].shape == (99, 16)
    straight = trainer(tmp_path / "straight", 1, 4)
    straight.resume(str(checkpoint))
    straight.fit()
    resumed = trainer(tmp_path / "resumed", 128, 4)
    resumed.resume(str(checkpoint))
    resumed.fit()
    assert [h["loss"] for h in resumed.history] == pytest.approx([h["loss"] for h in straight.history], rel=1e-5)
    assert not resumed.model.lm_head.weight[99:].any()
    torch.testing.assert_close(resumed.model.lm_head.weight[:99], straight.model.lm_head.weight, atol=1e-6, rtol=1e-5)
    # and a padded run's checkpoint holds the tokenizer's rows, its optimizer state the padded ones
    resumed.save("_step9.ckpt")
    state = torch.load(tmp_path / "resumed" / "_step9.ckpt", weights_only=True)
    assert state["model"]["lm_head.weight"].shape == (99, 16)


# --- every matrix product of bart-large aligned ---------------------------------------------------------------

_ATEN = torch.ops.aten
_PRODUCTS = {_ATEN.mm: 0, _ATEN.addmm: 1, _ATEN.bmm: 0, _ATEN.baddbmm: 1}  # any overload (out= too): first operand


class _Products(TorchDispatchMode):
    """Records the operand shapes of every matrix product (mm, addmm, bmm, baddbmm) run under it."""

    def __init__(self):
        super().__init__()
        self.shapes = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.overloadpacket in _PRODUCTS:
            first = _PRODUCTS[func.overloadpacket]
            self.shapes.append((tuple(args[first].shape), tuple(args[first + 1].shape)))
        return func(*args, **(kwargs or {}))


def unaligned_products(model, batch=3, source=7, target=5, beams=3):
    """The products of one training step (plain and fused loss) and one beam-search decode step of ``model``
    (on the meta device: shapes only) with a dimension of the model's own (anything but the tokens, rows
    and batch x heads, all made of the odd sizes below, and the decoder's 2 positions) that is not a multiple
    of 64."""
    data = {1, 2, batch, source, target, batch * source, batch * target, batch * beams, batch * beams * source}
    ids = torch.randint(4, 99, (batch, source), device="meta")
    labels = torch.randint(4, 99, (batch, target), device="meta")
    recorder = _Products()
    with recorder:
        for fused in (False, True):
            model(input_ids=ids, attention_mask=torch.ones_like(ids), labels=labels,
                  fused_cross_entropy=fused).loss.backward()
        with torch.no_grad():
            encoded = model.model.encoder(ids, torch.ones_like(ids)).repeat_interleave(beams, 0)
            decoder = Decoder(model, encoded, torch.ones(batch * beams, source, device="meta"), True, 1, 8)
            tokens = torch.full((batch * beams, 2), 2, device="meta")
            decoder.next_logits(tokens[:, :1])
            decoder.next_logits(tokens)  # one cached step: one token per row
    bad = []
    for a, b in recorder.shapes:
        own = [d for d in (a[-2:] + b[-1:]) if d not in data]  # (M, K) @ (K, N); a bmm's batch is batch x heads
        if any(d % 64 for d in own):
            bad.append((a, b))
    return bad, len(recorder.shapes)


def test_every_matrix_product_of_bart_large_is_aligned(monkeypatch):
    """One bart-large training step (plain and fused loss) and one decode step: every dimension of the model's
    own in every product is a multiple of 64 (before padding the LM head's vocabulary, 50,265, was not)."""
    monkeypatch.setattr(torch.nn.init, "normal_", lambda tensor, *args, **kwargs: tensor)  # slow on meta
    with torch.device("meta"):  # bart-large's widths and vocabulary; two layers a stack have all its products
        model = BartForConditionalGeneration(BartConfig(dropout=0.0, encoder_layers=2, decoder_layers=2))
    bad, total = unaligned_products(model)
    assert total > 250
    assert not bad, f"{len(bad)} of {total} products unaligned, e.g. {bad[:4]}"

"""Numerical parity with transformers (post-LN BART, Pre-LN as mBART), weights through our loader."""
import pytest
import torch
import torch.nn.functional as F
import transformers

from bart.configuration import BartConfig
from bart.modeling import BartForConditionalGeneration

TINY = dict(vocab_size=99, d_model=16, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
            decoder_attention_heads=4, encoder_ffn_dim=32, decoder_ffn_dim=32, max_position_embeddings=64,
            dropout=0.0)


def _hf_model(kind: str, scale_embedding: bool):
    torch.manual_seed(0)
    if kind == "bart":
        return transformers.BartForConditionalGeneration(
            transformers.BartConfig(**TINY, scale_embedding=scale_embedding, attn_implementation="sdpa"))
    return transformers.MBartForConditionalGeneration(
        transformers.MBartConfig(**TINY, scale_embedding=scale_embedding, attn_implementation="sdpa"))


def _batch():
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(4, 99, (3, 11), generator=g)
    ids[:, -1] = 2
    ids[1, 7:], ids[1, 6] = 1, 2
    labels = torch.randint(4, 99, (3, 7), generator=g)
    labels[2, 5:] = -100
    decoder_input_ids = torch.cat([torch.full((3, 1), 2), labels[:, :-1]], 1).masked_fill(
        torch.cat([torch.zeros(3, 1, dtype=torch.bool), labels[:, :-1] == -100], 1), 1)
    return ids, (ids != 1).long(), labels, decoder_input_ids


@pytest.mark.parametrize("kind,scale_embedding", [("bart", False), ("bart", True), ("mbart", False), ("mbart", True)])
def test_logits_loss_and_gradients_match(kind, scale_embedding, tmp_path):
    hf = _hf_model(kind, scale_embedding)
    hf.save_pretrained(tmp_path / "hf")
    ours = BartForConditionalGeneration.from_pretrained(str(tmp_path / "hf"))
    assert ours.config.pre_ln == (kind == "mbart")
    hf.train(), ours.train()  # dropout is 0: train mode keeps parity and exercises the training path
    ids, mask, labels, decoder_input_ids = _batch()
    expected = hf(input_ids=ids, attention_mask=mask, decoder_input_ids=decoder_input_ids, labels=labels)
    got = ours(input_ids=ids, attention_mask=mask, labels=labels)
    torch.testing.assert_close(got.logits, expected.logits, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(got.loss, expected.loss, atol=1e-6, rtol=1e-6)
    expected.loss.backward()
    got.loss.backward()
    hf_grads = dict(hf.named_parameters())
    for name, param in ours.named_parameters():
        rows = hf_grads[name].shape[0]  # the vocabulary's: ours is padded (bart.modeling.vocab_padding)
        torch.testing.assert_close(param.grad[:rows], hf_grads[name].grad, atol=1e-5, rtol=1e-4, msg=name)
        assert not param.grad[rows:].any(), f"{name}: the padded rows got a gradient"


def test_cached_decoding_equals_full_decoding():
    torch.manual_seed(0)
    model = BartForConditionalGeneration(BartConfig(**TINY, pre_ln=True)).eval()
    ids, mask, labels, decoder_input_ids = _batch()
    encoded = model.model.encoder(ids, mask)
    full, _ = model.model.decoder(decoder_input_ids, encoded, mask)
    _, cache = model.model.decoder(decoder_input_ids[:, :3], encoded, mask, use_cache=True)
    for t in range(3, decoder_input_ids.shape[1]):
        step, cache = model.model.decoder(decoder_input_ids[:, t:t + 1], encoded, mask, past_key_values=cache,
                                          use_cache=True)
        torch.testing.assert_close(step[:, 0], full[:, t], atol=1e-5, rtol=1e-5)


def test_label_smoothing_equals_direct_computation():
    torch.manual_seed(0)
    model = BartForConditionalGeneration(BartConfig(**TINY)).eval()
    ids, mask, labels, _ = _batch()
    out = model(input_ids=ids, attention_mask=mask, labels=labels, label_smoothing=0.1)
    log_probs = F.log_softmax(out.logits.float(), -1)
    keep = labels != -100
    nll = -log_probs.gather(-1, labels.clamp(min=0)[..., None])[..., 0]
    uniform = -log_probs.mean(-1)
    expected = ((0.9 * nll + 0.1 * uniform)[keep]).mean()
    torch.testing.assert_close(out.loss, expected, atol=1e-6, rtol=1e-6)
    summed = model(input_ids=ids, attention_mask=mask, labels=labels, label_smoothing=0.1, reduction="sum").loss
    torch.testing.assert_close(summed, expected * keep.sum(), atol=1e-5, rtol=1e-6)


def test_gradient_checkpointing_gives_same_gradients():
    torch.manual_seed(0)
    ids, mask, labels, _ = _batch()
    grads = []
    for checkpointing in (False, True):
        torch.manual_seed(0)
        model = BartForConditionalGeneration(BartConfig(**TINY)).train()
        model.gradient_checkpointing_enable(checkpointing)
        model(input_ids=ids, attention_mask=mask, labels=labels).loss.backward()
        grads.append({n: p.grad.clone() for n, p in model.named_parameters()})
    for name in grads[0]:
        torch.testing.assert_close(grads[0][name], grads[1][name], atol=1e-6, rtol=1e-5, msg=name)

"""BART's noise: statistics over a few thousand documents, alignment with the target, determinism."""
import numpy as np
import pytest
import torch

from bart.data.noise import (
    DenoisingCollator,
    DenoisingNoise,
    NoiseConfig,
    poisson_draws,
    poisson_table,
    sample_keys,
    span_plan,
)

WORDS = ("the quick brown fox jumps over lazy dog while researchers train large language models on "
         "many thousands of documents about science history music and sports in several countries").split()


def _documents(tokenizer, count, seed=0, sentences_per_doc=(2, 6)):
    rng = np.random.default_rng(seed)
    texts = []
    for _ in range(count):
        sentences = []
        for _ in range(rng.integers(*sentences_per_doc)):
            words = rng.choice(WORDS, size=rng.integers(4, 12))
            sentences.append(" ".join(words).capitalize() + rng.choice([".", "!", "?"]))
        texts.append(" ".join(sentences))
    return [np.array(ids) for ids in tokenizer.encode_batch_fast(texts)]


def _noise(tokenizer, **overrides):
    config = NoiseConfig(**overrides)
    return DenoisingNoise(config, tokenizer.word_start_mask(), tokenizer.sentence_end_mask(),
                          tokenizer.mask_token_id, seed=7)


def _is_subsequence(short, long):
    it = iter(long.tolist())
    return all(any(x == y for y in it) for x in short.tolist())


def test_mask_statistics_and_alignment(tokenizer):
    docs = _documents(tokenizer, 2000, sentences_per_doc=(8, 40))  # ~100-300 words, like 512-token samples
    starts = tokenizer.word_start_mask().numpy()
    mask_id = tokenizer.mask_token_id
    # every token of a masked word becomes <mask>: lengths are kept, so coverage is visible
    # (the masking step alone: zero-length spans are inserted afterwards, by the insertion step)
    every = _noise(tokenizer, permute_sentence_ratio=0.0, mask_random=0.0, replace_length=-1)
    covered = total = 0
    masked_docs, _ = every.mask_spans(every.flatten(docs, [0] * len(docs), range(len(docs))))
    for doc, source in zip(docs, masked_docs.documents(0, 2)):
        assert len(source) == len(doc) and source[0] == 0 and source[-1] == 2
        word_start = starts[doc].copy()
        word_start[1] = True
        inner = slice(1, len(doc) - 1)
        masked = source[inner] == mask_id
        unmasked_equal = source[inner][~masked] == doc[inner][~masked]
        assert unmasked_equal.all()
        covered += int((masked & word_start[inner]).sum())
        total += int(word_start[inner].sum())
        # masks cover whole words: a masked token's word start is masked too
        word_id = np.cumsum(word_start[inner]) - 1
        assert set(word_id[masked]) <= set(word_id[masked & word_start[inner]])
    assert covered / total == pytest.approx(0.30, abs=0.02)
    # the default (one <mask> per span): unmasked tokens appear in the target in order
    default = _noise(tokenizer, permute_sentence_ratio=0.0, mask_random=0.0)
    for doc, source in zip(docs, default.batch(docs, [0] * len(docs), range(len(docs)))):
        assert _is_subsequence(source[source != mask_id], doc)
    n_words = np.array([int(starts[d[2:-1]].sum()) + 1 for d in docs])
    keys = sample_keys(7, [0] * len(docs), range(len(docs)))
    _, _, span_lengths, _ = span_plan(n_words, keys, 0.3, 3.5, poisson_table(3.5))
    assert np.mean(span_lengths) == pytest.approx(3.5, abs=0.2)


def test_span_plan_covers_the_budget_without_overlap():
    n_words = np.array([50, 1, 17, 0, 300, 9])
    sample, first, length, zero = span_plan(n_words, sample_keys(0, [0] * 6, range(6)), 0.3, 3.5, poisson_table(3.5))
    for s, n in enumerate(n_words):
        mine = sample == s
        assert length[mine].sum() == np.ceil(n * 0.3)  # the budget, exactly
        ends = first[mine] + length[mine]
        assert (first[mine][1:] >= ends[:-1]).all() and (first[mine] >= 0).all() and (ends <= n).all()
    assert (length > 0).all() and (zero >= 0).all()


def test_span_lengths_follow_poisson():
    draws = poisson_draws(sample_keys(1, [0] * 2000, range(2000)), 20, poisson_table(3.5))
    assert draws.mean() == pytest.approx(3.5, abs=0.05) and draws.var() == pytest.approx(3.5, abs=0.15)
    assert (draws == 0).mean() == pytest.approx(np.exp(-3.5), abs=0.005)
    assert np.array_equal(draws[:, :5], poisson_draws(sample_keys(1, [0] * 2000, range(2000)), 5, poisson_table(3.5)))


def test_noise_does_not_depend_on_the_batch(tokenizer):
    noise = _noise(tokenizer, insert_ratio=0.1, rotate_ratio=0.5)
    docs = _documents(tokenizer, 12, seed=5)
    together = noise.batch(docs, [2] * 12, range(100, 112))
    for i, doc in enumerate(docs):
        assert np.array_equal(together[i], noise(doc, 2, 100 + i))
    reordered = noise.batch(docs[::-1], [2] * 12, range(111, 99, -1))
    assert all(np.array_equal(a, b) for a, b in zip(together, reordered[::-1]))


def test_specials_never_masked_and_determinism(tokenizer):
    noise = _noise(tokenizer)
    docs = _documents(tokenizer, 200, seed=1)
    for index, doc in enumerate(docs):
        a = noise(doc, epoch=3, index=index)
        assert a[0] == 0 and a[-1] == 2 and (a[1:-1] != 0).all() and (a[1:-1] != 2).all()
        assert np.array_equal(a, noise(doc, epoch=3, index=index))
    changed = sum(not np.array_equal(noise(d, 3, i), noise(d, 4, i)) for i, d in enumerate(docs))
    assert changed > 190  # a new epoch, new noise


def test_sentence_permutation_keeps_tokens(tokenizer):
    noise = _noise(tokenizer, mlm_probability=0.0, permute_sentence_ratio=1.0)
    docs = _documents(tokenizer, 100, seed=2)
    moved = 0
    for index, doc in enumerate(docs):
        out = noise(doc, 0, index)
        assert sorted(out.tolist()) == sorted(doc.tolist()) and out[0] == 0 and out[-1] == 2
        moved += not np.array_equal(out, doc)
    assert moved > 50


def test_insertion_and_rotation(tokenizer):
    noise = _noise(tokenizer, mlm_probability=0.0, permute_sentence_ratio=0.0, insert_ratio=0.2, rotate_ratio=1.0)
    doc = _documents(tokenizer, 1, seed=3)[0]
    out = noise(doc, 0, 0)
    assert len(out) == len(doc) + int(np.ceil(len(doc) * 0.2))
    assert out[0] == 0 and out[-1] == 2


def test_collator_batch(tokenizer):
    noise = _noise(tokenizer)
    docs = _documents(tokenizer, 4, seed=4)
    batch = DenoisingCollator(noise, max_length=40)([{"input_ids": d, "index": i, "epoch": 0} for i, d in enumerate(docs)])
    assert batch["input_ids"].shape[1] <= 40 and batch["labels"].shape[1] <= 40
    assert (batch["attention_mask"] == (batch["input_ids"] != 1)).all()
    assert batch["decoder_input_ids"][0, 0] == 2
    first = docs[0][:40]
    assert torch.equal(batch["labels"][0, :len(first)], torch.from_numpy(first))
    assert torch.equal(batch["decoder_input_ids"][0, 1:len(first)], torch.from_numpy(first[:-1]))
    assert (batch["labels"][batch["labels"] != -100] != 1).all()


def test_bad_ratios_fail():
    with pytest.raises(ValueError, match="mlm_probability"):
        NoiseConfig(mlm_probability=1.5)

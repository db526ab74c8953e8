import json
import os

import pytest
import torch
from transformers import BartTokenizerFast

from bart.tokenization.build_tokenizer import FOLDER_FILES, build_tokenizer_folder
from bart.tokenization.tokenization_bart import BartTokenizer

TEXTS = ["Hello world. It works!", "BART is a denoising autoencoder.", "  spaces  and\nnewlines ", "ünïcödé → ok"]


def test_special_ids_and_size(tokenizer):
    assert (tokenizer.bos_token_id, tokenizer.pad_token_id, tokenizer.eos_token_id, tokenizer.unk_token_id) == (0, 1, 2, 3)
    assert len(tokenizer) == 50262 and tokenizer.mask_token_id == 50261
    vocab = json.load(open(os.path.join(tokenizer.backend.name_or_path, "vocab.json")))
    assert vocab["!"] == 4  # GPT-2 id 0 shifted by 4


def test_matches_transformers_fast_tokenizer(tokenizer, tokenizer_dir):
    reference = BartTokenizerFast.from_pretrained(tokenizer_dir)
    assert tokenizer(TEXTS)["input_ids"] == reference(TEXTS)["input_ids"]
    assert tokenizer.encode_batch_fast(TEXTS) == reference(TEXTS)["input_ids"]
    # a truncating, padding call (the fine-tuning collator's) leaves the fast path untouched, and its own settings
    truncated = tokenizer(TEXTS, max_length=4, truncation=True, padding=True)["input_ids"]
    assert tokenizer.encode_batch_fast(TEXTS) == reference(TEXTS)["input_ids"]
    assert tokenizer(TEXTS, max_length=4, truncation=True, padding=True)["input_ids"] == truncated
    assert {len(ids) for ids in truncated} == {4}
    for text in TEXTS:
        ids = tokenizer(text)["input_ids"]
        assert ids[0] == 0 and ids[-1] == 2
        assert tokenizer.decode(ids, skip_special_tokens=True) == text


def test_padding_truncation_tensors(tokenizer):
    batch = tokenizer(TEXTS, max_length=6, truncation=True, padding=True, return_tensors="pt")
    assert batch["input_ids"].shape[1] <= 6 and batch["input_ids"].dtype == torch.long
    assert (batch["input_ids"][:, -1] == 2).all()  # truncation keeps </s>
    short = tokenizer(["a", "a much longer sentence here"], padding=True, return_tensors="pt")
    assert short["input_ids"][0, -1] == 1 and short["attention_mask"][0, -1] == 0


def test_word_start_and_sentence_end_tables(tokenizer):
    starts, ends = tokenizer.word_start_mask(), tokenizer.sentence_end_mask()
    assert starts.shape == ends.shape == (len(tokenizer),)
    ids = tokenizer.convert_tokens_to_ids
    assert starts[ids("Ġworld")] and not starts[ids("world")] and starts[0] and starts[2] and starts[50261]
    assert ends[ids(".")] and ends[ids("?")] and ends[ids("!\"")]
    assert not ends[ids("Ġworld")] and not ends[ids(",")] and not ends[2]


def test_build_is_idempotent(tokenizer_dir):
    before = {n: os.path.getmtime(os.path.join(tokenizer_dir, n)) for n in FOLDER_FILES}
    assert build_tokenizer_folder(tokenizer_dir) == tokenizer_dir
    assert before == {n: os.path.getmtime(os.path.join(tokenizer_dir, n)) for n in FOLDER_FILES}


def test_missing_folder_and_files_are_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="build_tokenizer"):
        BartTokenizer.from_pretrained(str(tmp_path / "nope"))
    (tmp_path / "vocab.json").write_text("{}")
    with pytest.raises(FileNotFoundError, match="merges.txt"):
        BartTokenizer.from_pretrained(str(tmp_path))


def test_saved_copy_loads(tokenizer, tmp_path):
    tokenizer.save_pretrained(tmp_path / "copy")
    again = BartTokenizer.from_pretrained(str(tmp_path / "copy"))
    assert again(TEXTS)["input_ids"] == tokenizer(TEXTS)["input_ids"]

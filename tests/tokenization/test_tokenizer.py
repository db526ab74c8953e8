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


# -- the native path (Rust tokenizer without transformers) against transformers' BartTokenizerFast ----------
PARITY_TEXTS = TEXTS + ["", "Café naïve façade — “quoted” 中文 🙂 ok?", "a <mask> b<mask>c  <mask>", "<s> literal </s> <pad>",
                        "tab\there\r\nand  double  spaces ", "Don't stop , please ! It 's fine .", " ".join(["word"] * 300)]


def _hub_snapshot(tmp_path, tokenizer_dir):
    """The layout facebook/bart-large has in a hub cache: symlinked blobs, tokenizer.json beside the BPE
    pair, a tokenizer_config.json holding only model_max_length, no special_tokens_map.json."""
    from tests.helpers.hub_cache import add_to_hub_cache
    repo = tmp_path / "repo"
    repo.mkdir()
    for name in ("tokenizer.json", "vocab.json", "merges.txt"):
        (repo / name).write_bytes(open(os.path.join(tokenizer_dir, name), "rb").read())
    (repo / "tokenizer_config.json").write_text('{"model_max_length": 1024}')
    (repo / "config.json").write_text('{"model_type": "bart"}')
    return add_to_hub_cache(str(tmp_path / "hub"), "facebook/bart-large", str(repo))


@pytest.fixture(params=["built", "trained", "hub_snapshot"])
def plain_folder(request, tokenizer_dir, small_tokenizer_dir, tmp_path):
    return {"built": lambda: tokenizer_dir, "trained": lambda: small_tokenizer_dir,
            "hub_snapshot": lambda: _hub_snapshot(tmp_path, tokenizer_dir)}[request.param]()


def _assert_same_as_transformers(ours, reference):
    for max_length in (6, 64, 1024):
        encoded = ours.encode_for_model(PARITY_TEXTS, max_length)
        expected = reference(PARITY_TEXTS, max_length=max_length, truncation=True, padding=True, return_tensors="pt")
        assert encoded["input_ids"].tolist() == expected["input_ids"].tolist()
        assert encoded["attention_mask"].tolist() == expected["attention_mask"].tolist()
        assert encoded["input_ids"].dtype == expected["input_ids"].dtype == torch.long
    assert ours.encode_batch_fast(PARITY_TEXTS) == reference(PARITY_TEXTS)["input_ids"]
    generator = torch.Generator().manual_seed(0)
    sequences = [reference(PARITY_TEXTS)["input_ids"][:8],
                 torch.randint(0, len(reference), (12, 24), generator=generator).tolist()]
    for ids in sequences:
        for skip in (True, False):
            for clean_up in (None, False, True):
                kwargs = dict(skip_special_tokens=skip, clean_up_tokenization_spaces=clean_up)
                assert ours.batch_decode(ids, **kwargs) == reference.batch_decode(ids, **kwargs)
                assert [ours.decode(s, **kwargs) for s in ids] == [reference.decode(s, **kwargs) for s in ids]
    tensor = torch.tensor(sequences[1])
    assert ours.batch_decode(tensor, skip_special_tokens=True) == reference.batch_decode(tensor, skip_special_tokens=True)
    assert ours.decode(tensor[0]) == reference.decode(tensor[0]) and ours.decode(5) == reference.decode(5)
    for name in ("bos_token_id", "eos_token_id", "pad_token_id", "unk_token_id", "mask_token_id", "all_special_ids",
                 "model_max_length"):
        assert getattr(ours, name) == getattr(reference, name), name
    assert len(ours) == len(reference)
    every = list(range(len(reference)))
    assert ours.convert_ids_to_tokens(every) == reference.convert_ids_to_tokens(every)


def test_native_path_gives_transformers_ids_and_texts(plain_folder, tmp_path):
    ours, reference = BartTokenizer.from_pretrained(plain_folder), BartTokenizerFast.from_pretrained(plain_folder)
    assert ours.native
    _assert_same_as_transformers(ours, reference)
    through_transformers = BartTokenizer(reference)
    assert ours.word_start_mask().tolist() == through_transformers.word_start_mask().tolist()
    assert ours.sentence_end_mask().tolist() == through_transformers.sentence_end_mask().tolist()
    # the saved copy (what training writes next to its checkpoints) loads as the original, in AutoTokenizer too
    from transformers import AutoTokenizer
    ours.save_pretrained(tmp_path / "copy")
    copy = AutoTokenizer.from_pretrained(str(tmp_path / "copy"))
    assert isinstance(copy, BartTokenizerFast) and copy(PARITY_TEXTS)["input_ids"] == reference(PARITY_TEXTS)["input_ids"]
    assert copy.model_max_length == reference.model_max_length
    umask = os.umask(0)
    os.umask(umask)  # the copy's files get a new file's permissions (transformers' too), never mkstemp's 0600
    assert {oct(os.stat(tmp_path / "copy" / n).st_mode & 0o777) for n in os.listdir(tmp_path / "copy")} \
        == {oct(0o666 & ~umask)}
    assert BartTokenizer.from_pretrained(str(tmp_path / "copy")).native


def _variant(tmp_path, source, name, change):
    import shutil
    folder = tmp_path / name
    shutil.copytree(source, folder)
    change(folder)
    return str(folder)


def _edit_json(path, edit):
    value = json.load(open(path))
    edit(value)
    json.dump(value, open(path, "w"))


def test_folders_the_native_path_does_not_mirror_go_to_transformers(small_tokenizer_dir, tmp_path):
    def extra_added_token(folder):
        from tokenizers import AddedToken, Tokenizer
        rust = Tokenizer.from_file(str(folder / "tokenizer.json"))
        rust.add_special_tokens([AddedToken("<sep2>", special=True)])
        rust.save(str(folder / "tokenizer.json"))

    variants = {
        "prefix_space": lambda f: _edit_json(f / "tokenizer_config.json", lambda c: c.update(add_prefix_space=True)),
        "additional_specials": lambda f: _edit_json(f / "tokenizer_config.json",
                                                    lambda c: c.update(additional_special_tokens=["<extra>"])),
        "unknown_key": lambda f: _edit_json(f / "tokenizer_config.json", lambda c: c.update(do_lower_case=True)),
        "added_tokens_json": lambda f: (f / "added_tokens.json").write_text('{"<new>": 5000}'),
        "bpe_pair_only": lambda f: (f / "tokenizer.json").unlink(),
        "extra_added_token": extra_added_token,
        "clean_up_on": lambda f: _edit_json(f / "tokenizer_config.json",
                                            lambda c: c.update(clean_up_tokenization_spaces=True)),
    }
    for name, change in variants.items():
        folder = _variant(tmp_path, small_tokenizer_dir, name, change)
        ours, reference = BartTokenizer.from_pretrained(folder), BartTokenizerFast.from_pretrained(folder)
        assert ours.native == (name == "clean_up_on"), name  # a clean-up default is honoured natively by delegating
        _assert_same_as_transformers(ours, reference)
    # the prefix-space folder really tokenizes differently: the fallback is what keeps it right
    plain = BartTokenizer.from_pretrained(small_tokenizer_dir).encode_batch_fast(["river"])
    spaced = BartTokenizer.from_pretrained(str(tmp_path / "prefix_space")).encode_batch_fast(["river"])
    assert plain != spaced


# --- a folder does not depend on which transformers wrote it ---------------------------------------
# The bytes build_tokenizer and train_tokenizer write (sha256), recorded under transformers 4.57.6 with
# tokenizers 0.22.2 and equal under 5.24.0 with tokenizers 0.23.3; the ids transformers 4.57.6 gave
# for the probes from the GPT-2 folder (<mask> takes the space before it: lstrip).
RECORDED_GPT2_FOLDER = {
    "merges.txt": "1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5",
    "special_tokens_map.json": "8293ae960b0a0852d4d3813118030a1149a3ed9fe37bc2e1e7b3c2e62eb2d4b7",
    "tokenizer.json": "dc385cc50303fc3d9d8593c6b2d177279d12a00341547ac6b7cbbe85ec49a097",
    "tokenizer_config.json": "41369d20a9123f61809bed0b02e7a84fc7c240fe6729599dac9c30692fe6e242",
    "vocab.json": "c6b309a9c9b07c2ed170bf412558696cab7d17a65900d8988c0ea858a08e069e",
}
RECORDED_TRAINED_FOLDER = {
    "merges.txt": "196236c26130bf2cbe3502fc8bd7ebc25f694b1d558150cefd6f77017e0ee478",
    "special_tokens_map.json": "8293ae960b0a0852d4d3813118030a1149a3ed9fe37bc2e1e7b3c2e62eb2d4b7",
    "tokenizer.json": "32b0de0252fd0c20ffaddb826366be0776c26830b5cf2ff5e8b7d6c08224a6cc",
    "tokenizer_config.json": "fb5208262eac63809b8800007cd05fc6721994a5f23b15de4e0f186516907454",
    "vocab.json": "246a37038abd2cbd9b60c28feee3774a272565397c048539410e91c4d42e6f09",
}
TRAINING_TEXT = ("The tokenizer folder must not depend on which transformers wrote it.\n"
                 "A <mask> in the middle keeps the space before it.\n"
                 "Über naïve café façade, ünïcödé, 数据 and 🙂.\n") * 20
PROBES = ["a <mask> in the middle", "<mask> first and last <mask>", "Über naïve café 🙂"]
RECORDED_GPT2_IDS = [[0, 68, 50261, 291, 266, 3508, 2], [0, 50261, 721, 294, 942, 50261, 2],
                     [0, 131, 254, 531, 41496, 40308, 32489, 2]]


def _hashes(folder):
    import hashlib

    return {name: hashlib.sha256(open(os.path.join(folder, name), "rb").read()).hexdigest()
            for name in sorted(os.listdir(folder))}


def test_folders_are_the_same_bytes_under_either_transformers_major(tokenizer_dir, tmp_path):
    """build_tokenizer and train_tokenizer write the bytes recorded under transformers 4.57 whichever
    major is installed, and the installed transformers reads them as 4.57 does: BART's class, <mask>
    with lstrip, the same ids as the project's native path (on, for these folders). Under transformers 5.x
    too: not another tokenizer_class, not without special_tokens_map.json, not <mask> without lstrip."""
    import transformers
    from transformers import AutoTokenizer

    from bart.tokenization.train_tokenizer import train_tokenizer

    corpus = tmp_path / "corpus.txt"
    corpus.write_text(TRAINING_TEXT, encoding="utf-8")
    trained = train_tokenizer([str(corpus)], str(tmp_path / "trained"), 300)["folder"]
    assert _hashes(tokenizer_dir) == RECORDED_GPT2_FOLDER, transformers.__version__
    assert _hashes(trained) == RECORDED_TRAINED_FOLDER, transformers.__version__
    for folder in (tokenizer_dir, trained):
        config = json.load(open(os.path.join(folder, "tokenizer_config.json"), encoding="utf-8"))
        assert config["tokenizer_class"] == "BartTokenizer"
        ours, auto = BartTokenizer.from_pretrained(folder), AutoTokenizer.from_pretrained(folder)
        assert ours.native
        assert isinstance(auto, transformers.BartTokenizerFast)  # 5.x: RoBERTa's class, which BART's names
        mask = auto.convert_ids_to_tokens(auto.mask_token_id)
        assert auto.added_tokens_decoder[auto.mask_token_id].lstrip and mask == "<mask>"
        expected = [ours(p)["input_ids"] for p in PROBES]
        assert [auto(p)["input_ids"] for p in PROBES] == expected
        assert expected[0][2] == auto.mask_token_id  # "a", then <mask>: no space token between them
    assert [AutoTokenizer.from_pretrained(tokenizer_dir)(p)["input_ids"] for p in PROBES] == RECORDED_GPT2_IDS

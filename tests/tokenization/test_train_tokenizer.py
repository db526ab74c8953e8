"""python -m bart.tokenization.train_tokenizer: byte-level BPE trained on a corpus, BART's layout,
loadable by BartTokenizer and AutoTokenizer; the config's vocab_size checked against it."""
import json
import os
import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import transformers
from transformers import AutoTokenizer

from bart.tokenization.build_tokenizer import FOLDER_FILES
from bart.tokenization.tokenization_bart import BartTokenizer
from bart.tokenization.train_tokenizer import MIN_VOCAB_SIZE, main, train_tokenizer
from bart.tokenization.vocab_check import (
    SPARE_ROWS,
    VocabSizeMismatch,
    check_vocab_size,
)
from tests.helpers import ROOT
from tests.helpers.corpus import (
    NON_ASCII,
    SMALL_VOCAB_SIZE,
    write_shards,
    write_tokenizer_corpus,
)
from tests.helpers.forked import run_python

TEXTS = ["Hello world. It works!", "Café crème brûlée, naïve.", "中文分词 and 日本語 too", "Emoji 🤗🚀 at the end 👍🏽",
         "  spaces  and\nnewlines ", "a <mask> in the middle"]


def _cli(*args, timeout=None):
    env = dict(os.environ, PYTHONPATH=ROOT, TOKENIZERS_PARALLELISM="false")
    return run_python([sys.executable, "-m", "bart.tokenization.train_tokenizer", *args], cwd=ROOT, env=env, timeout=timeout)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return write_tokenizer_corpus(str(tmp_path_factory.mktemp("corpus")))


def test_folder_loads_in_both_tokenizers_with_bart_special_ids(small_tokenizer_dir):
    assert all(os.path.isfile(os.path.join(small_tokenizer_dir, n)) for n in FOLDER_FILES + ("special_tokens_map.json",))
    ours = BartTokenizer.from_pretrained(small_tokenizer_dir)
    auto = AutoTokenizer.from_pretrained(small_tokenizer_dir)
    # transformers' BART tokenizer class: BartTokenizerFast in 4.57, RoBERTa's in 5.x (BartTokenizer is its alias)
    assert type(auto).__name__ == type(transformers.BartTokenizerFast.from_pretrained(small_tokenizer_dir)).__name__
    assert type(auto).__name__ in ("BartTokenizerFast", "RobertaTokenizer")
    for tok in (ours, auto):
        assert len(tok) == SMALL_VOCAB_SIZE
        assert (tok.bos_token_id, tok.pad_token_id, tok.eos_token_id, tok.unk_token_id) == (0, 1, 2, 3)
        assert tok.convert_ids_to_tokens([0, 1, 2, 3]) == ["<s>", "<pad>", "</s>", "<unk>"]
        assert tok.mask_token == "<mask>" and tok.mask_token_id == SMALL_VOCAB_SIZE - 1
    vocab = json.load(open(os.path.join(small_tokenizer_dir, "vocab.json"), encoding="utf-8"))
    assert sorted(vocab.values()) == list(range(SMALL_VOCAB_SIZE)) and vocab["<mask>"] == SMALL_VOCAB_SIZE - 1
    # the corpus's words became whole tokens, as with GPT-2's vocabulary
    assert {"Ġmountain", "Ġresearchers", "River"} <= set(vocab)


def test_round_trip_including_non_ascii(small_tokenizer_dir):
    ours = BartTokenizer.from_pretrained(small_tokenizer_dir)
    auto = AutoTokenizer.from_pretrained(small_tokenizer_dir)
    assert ours(TEXTS)["input_ids"] == auto(TEXTS)["input_ids"] == ours.encode_batch_fast(TEXTS)
    for text in TEXTS + list(NON_ASCII):
        ids = auto(text)["input_ids"]
        assert ids[0] == 0 and ids[-1] == 2 and 3 not in ids  # bytes: nothing is unknown
        assert max(ids) < SMALL_VOCAB_SIZE
        assert ours.decode(ids, skip_special_tokens=False) == auto.decode(ids, skip_special_tokens=False)
        if "<mask>" not in text:
            assert auto.decode(ids, skip_special_tokens=True) == ours.decode(ids, skip_special_tokens=True) == text
    masked = auto("a <mask> in the middle")["input_ids"]
    assert masked.count(SMALL_VOCAB_SIZE - 1) == 1  # <mask> is one token
    assert auto.decode(masked) == "<s>a<mask> in the middle</s>"  # it takes the space before it, as BART's
    # BART's pair template <s> A </s></s> B </s>
    pair = auto("one", "two")["input_ids"]
    assert pair[0] == 0 and pair[-1] == 2 and pair.count(2) == 3


def test_vocabulary_size_is_honoured(corpus, tmp_path):
    for size in (MIN_VOCAB_SIZE, 300, 777, 2000):
        summary = train_tokenizer([corpus], str(tmp_path / f"v{size}"), size)
        tok = BartTokenizer.from_pretrained(summary["folder"])
        assert summary["vocab_size"] == len(tok) == size
        assert summary["merges"] == size - MIN_VOCAB_SIZE  # 4 specials + 256 bytes + merges + <mask>
        assert tok.mask_token_id == size - 1
        assert tok.decode(tok("Café 中文 🤗")["input_ids"], skip_special_tokens=True) == "Café 中文 🤗"
    # a corpus with fewer pairs than asked for: all it has, <mask> still last
    summary = train_tokenizer([corpus], str(tmp_path / "big"), 20000)
    tok = BartTokenizer.from_pretrained(summary["folder"])
    assert MIN_VOCAB_SIZE < summary["vocab_size"] == len(tok) < 20000 and tok.mask_token_id == len(tok) - 1


def test_lddl_shards_and_folders_are_corpora(tmp_path):
    shards = os.path.dirname(write_shards(str(tmp_path / "shards"), [30, 30])[0])
    (tmp_path / "shards" / ".num_samples.json").write_text("{}")  # LDDL's metadata is not text to learn
    summary = train_tokenizer([shards], str(tmp_path / "from_shards"), 400)
    assert summary["files"] == 2 and summary["texts"] == 60 and summary["vocab_size"] == 400
    vocab = json.load(open(os.path.join(summary["folder"], "vocab.json"), encoding="utf-8"))
    assert "Ġresearchers" in vocab and "Document" in vocab
    texts = tmp_path / "texts"
    (texts / "sub").mkdir(parents=True)
    (texts / "a.txt").write_text("alpha beta gamma\n\n" * 50, encoding="utf-8")
    (texts / "sub" / "b.txt").write_text("delta epsilon\n" * 50, encoding="utf-8")
    (texts / "notes.md").write_text("zzzzzz qqqqqq\n" * 50)  # not a corpus file: skipped in a folder
    summary = train_tokenizer([str(texts)], str(tmp_path / "from_texts"), 300)
    vocab = json.load(open(os.path.join(summary["folder"], "vocab.json"), encoding="utf-8"))
    assert summary["files"] == 2 and summary["texts"] == 100  # blank lines skipped
    assert "Ġepsilon" in vocab and "zz" not in vocab


def test_cli_trains_and_writes_the_config(corpus, tmp_path):
    """--config takes a shipped config's name, as --config_path does (not: the whole tokenizer trained and written,
    then exit 2 'cannot read the model config tiny')."""
    out = _cli(corpus, "--vocab_size", "512", "--out", str(tmp_path / "tok"), "--config", "tiny",
               "--config_out", str(tmp_path / "config.json"))
    assert out.returncode == 0, out.stderr[-2000:]
    assert "(512 tokens, 251 merges, from 1504 texts in 1 files)" in out.stdout
    config = json.load(open(tmp_path / "config.json"))
    tiny = json.load(open(os.path.join(ROOT, "configs", "config_tiny.json")))
    assert config == dict(tiny, vocab_size=512)
    auto = AutoTokenizer.from_pretrained(str(tmp_path / "tok"))
    assert len(auto) == 512 and auto.decode(auto("naïve 中文 👍")["input_ids"], skip_special_tokens=True) == "naïve 中文 👍"

@pytest.mark.parametrize("case", ["unknown_name", "unknown_key", "config_out_folder"])
def test_a_bad_config_is_one_line_before_training(corpus, tmp_path, case):
    """A --config that a run would refuse, or a --config_out that cannot be written, is one line and exit 2 before
    any training: neither the tokenizer folder nor the config copy is written (not: the tokenizer trained and
    written, then the refusal, or for a bad key a config copy no run can read)."""
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(dict(json.load(open(os.path.join(ROOT, "configs", "config_tiny.json"))), d_modle=64)))
    (tmp_path / "folder").mkdir()
    config, config_out, said = {
        "unknown_name": ("bart-huge", tmp_path / "config.json",
                         "train_tokenizer: --config bart-huge: no such file, nor a shipped config's name; give a "
                         "config.json's path or one of bart-large, bart-base, xsum, tiny (see --help)"),
        "unknown_key": (str(bad), tmp_path / "config.json", "train_tokenizer: BartConfig: unknown key 'd_modle'"),
        "config_out_folder": ("tiny", tmp_path / "folder",
                              f"train_tokenizer: --config_out {tmp_path / 'folder'} is a folder; give the config file "
                              f"to write there, e.g. {tmp_path / 'folder' / 'config.json'}"),
    }[case]
    out = _cli(corpus, "--vocab_size", "300", "--out", str(tmp_path / "tok"), "--config", config,
               "--config_out", str(config_out))
    assert out.returncode == 2 and out.stdout == "", out.stdout
    assert len(out.stderr.strip().splitlines()) == 1 and out.stderr.startswith(said), out.stderr
    assert not os.path.exists(tmp_path / "tok") and not os.path.exists(tmp_path / "config.json")
    assert os.listdir(tmp_path / "folder") == []


def test_main_notes_a_short_vocabulary(corpus, tmp_path, capsys):
    summary = main([corpus, "--vocab_size", "100000", "--out", str(tmp_path / "all")])
    printed = capsys.readouterr().out
    assert summary["vocab_size"] < 100000
    assert f"note: the corpus gave only {summary['vocab_size']} of the 100000 tokens asked for" in printed
    assert f'set "vocab_size": {summary["vocab_size"]} in the model config' in printed


def test_out_replaces_an_earlier_tokenizer_and_never_other_files(corpus, tmp_path, capsys):
    """Rules out: --out data removed the whole folder (the user's files with it) to put the tokenizer there."""
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "notes.txt").write_text("the user's")
    with pytest.raises(SystemExit) as stop:
        main([corpus, "--vocab_size", "400", "--out", str(tmp_path / "data")])
    err = capsys.readouterr().err.strip().splitlines()
    assert stop.value.code == 2 and len(err) == 1, err
    advised = tmp_path / "data" / "tokenizer"
    assert f"--out {tmp_path / 'data'} holds notes.txt, which a tokenizer folder does not: it would be replaced; give a " \
           f"new or empty folder, such as {advised}" in err[0], err
    assert os.listdir(tmp_path / "data") == ["notes.txt"]  # nothing written, nothing removed
    for _ in range(2):  # the advised folder, then again over the earlier tokenizer it holds
        assert main([corpus, "--vocab_size", "400", "--out", str(advised)])["folder"] == str(advised)
    assert sorted(os.listdir(tmp_path / "data")) == ["notes.txt", "tokenizer"]


@pytest.mark.parametrize("case, message", [
    ("missing", "no such file or folder: "),
    ("no_files", "holds no .txt or .parquet files"),
    ("empty", "the corpus is empty"),
    ("small_vocab", f"--vocab_size 200 is too small: BART's 5 special tokens and the 256 byte symbols need at least "
                    f"{MIN_VOCAB_SIZE}"),
    ("not_utf8", "bad.txt:2 is not UTF-8 text"),
    ("wrong_shard", "has columns ['text']; an LDDL shard has a 'sentences' column"),
])
def test_bad_input_is_one_line_without_traceback(tmp_path, corpus, case, message):
    args = {"missing": [str(tmp_path / "nope.txt")], "no_files": [str(tmp_path)], "small_vocab": [corpus]}.get(case)
    if case == "empty":
        (tmp_path / "empty.txt").write_text("\n  \n\n")
        args = [str(tmp_path / "empty.txt")]
    elif case == "not_utf8":
        (tmp_path / "bad.txt").write_bytes(b"fine line\n\xff\xfe broken\n")
        args = [str(tmp_path / "bad.txt")]
    elif case == "wrong_shard":
        pq.write_table(pa.table({"text": ["a b c"]}), str(tmp_path / "x.parquet"))
        args = [str(tmp_path / "x.parquet")]
    out = _cli(*args, "--vocab_size", "200" if case == "small_vocab" else "300", "--out", str(tmp_path / "tok"))
    assert out.returncode == 2
    assert "Traceback" not in out.stderr and len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert out.stderr.startswith("train_tokenizer: ") and message in out.stderr, out.stderr
    assert not os.path.exists(tmp_path / "tok")


def test_config_vocab_size_is_checked_against_the_tokenizer(tokenizer_dir, small_tokenizer_dir, tmp_path):
    with pytest.raises(VocabSizeMismatch, match=r"tokenizer tok has 50262 tokens but cfg.json has vocab_size 1024: "
                                                r"set \"vocab_size\": 50262 in cfg.json"):
        check_vocab_size(50262, 1024, "tok", "cfg.json")
    assert check_vocab_size(50262, 50265) is None and check_vocab_size(1024, 1024 + SPARE_ROWS) is None
    note = check_vocab_size(1024, 50265, "tok", "cfg.json")
    assert "50265" in note and "1024" in note and "49241 output rows are never used" in note
    # finetune.py stops with one line before building anything
    values = json.load(open(os.path.join(ROOT, "configs", "config_tiny.json")))
    config = tmp_path / "config.json"
    config.write_text(json.dumps(dict(values, vocab_size=SMALL_VOCAB_SIZE)))
    env = dict(os.environ, PYTHONPATH=ROOT)
    out = subprocess.run([sys.executable, "finetune.py", "--config_path", str(config), "--data_dir", str(tmp_path),
                          "--tokenizer", tokenizer_dir, "--from_scratch", "--max_steps", "1",
                          "--output_dir", str(tmp_path / "out")], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=None)
    assert out.returncode != 0 and "Traceback" not in out.stderr
    assert (f"error: tokenizer {tokenizer_dir} has 50262 tokens but {config} has vocab_size {SMALL_VOCAB_SIZE}: "
            f"set \"vocab_size\": 50262 in {config}") in out.stderr, out.stderr[-2000:]

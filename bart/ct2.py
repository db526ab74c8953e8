"""CTranslate2 decoding as this project's ``generate``: generate's settings mapped onto
``ctranslate2.Translator.translate_batch``, and the conversion ``python -m bart.export CKPT OUT --ct2 DIR`` makes.

    python -m bart.export CKPT OUT_DIR --ct2 CT2_DIR      # OUT_DIR as always, CT2_DIR: CTranslate2's model

    import ctranslate2, transformers
    from bart.ct2 import translate_options
    tokenizer = transformers.AutoTokenizer.from_pretrained(CT2_DIR)   # the export's tokenizer files are there
    translator = ctranslate2.Translator(CT2_DIR)                       # compute_type="int8" etc. at load
    sources = [tokenizer.convert_ids_to_tokens(tokenizer.encode(text)) for text in texts]
    results = translator.translate_batch(sources, **translate_options(CT2_DIR, len(sources)))
    summaries = tokenizer.batch_decode([tokenizer.convert_tokens_to_ids(r.hypotheses[0]) for r in results],
                                       skip_special_tokens=True)

CT2_DIR holds CTranslate2's converted model (``model.bin``, ``config.json``, ``shared_vocabulary.json``), the
tokenizer files of the export and :data:`OPTIONS_FILE`: the model's generation settings (beams, lengths, length
penalty, n-gram blocking, forced BOS: what run_eval.py decodes with) as translate_batch's keyword arguments, and
what CTranslate2 decodes differently from them (:data:`DIFFERENCES`), which the export also prints.

What CTranslate2 4.x does differently from transformers' generate, which this project's follows (read from
CTranslate2's decoding.cc; tests/export/test_ctranslate2.py checks the mapping token for token):

* its log-probs are a log-softmax taken AFTER the bans (n-gram blocking, min length); transformers bans after
  the log-softmax unless ``renormalize_logits=True``. Greedy search picks the same token either way; beam
  search ranks beams by different scores, so CTranslate2 equals ``generate(..., renormalize_logits=True)``.
* min/max lengths count generated tokens (transformers counts the decoder start token too): 1 less.
* a forced first token is a ``target_prefix`` (score 0, as transformers' forced BOS); at the first step after
  it CTranslate2 drops EOS from the beams other than the first (its issue #277), where transformers may
  finish a hypothesis: identical where min_length keeps EOS out of that step.
* there is no forced EOS at max_length (a hypothesis cut there ends without EOS), and early stopping is
  transformers' ``early_stopping=True`` (patience 1).
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable
from typing import NamedTuple

VERSION = "4.8.5"  # requirements.txt's pin
INSTALL = f"pip install ctranslate2=={VERSION}"
OPTIONS_FILE = "bart_translate_options.json"
# the tokenizer files copied into CTranslate2's folder (those the export has)
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.json", "merges.txt",
                   "added_tokens.json")
# generate's settings that map onto translate_batch (plus the token ids, which the converted config holds)
CT2_SETTINGS = ("num_beams", "max_length", "min_length", "no_repeat_ngram_size", "length_penalty", "early_stopping",
                "forced_bos_token_id", "forced_eos_token_id", "renormalize_logits")
_TOKEN_IDS = ("bos_token_id", "eos_token_id", "pad_token_id", "decoder_start_token_id")
# options that say how generate returns its result, not which tokens it picks
_NOT_DECODING = ("use_cache", "output_scores", "return_dict_in_generate", "max_time")
# options only sampling reads (do_sample, which has no mapping here, must be off)
_SAMPLING_ONLY = ("temperature", "top_k", "top_p", "min_p", "typical_p", "epsilon_cutoff", "eta_cutoff")


class Difference(NamedTuple):
    setting: str
    differs: Callable[[dict], bool]
    why: str
    refused: bool  # ct2_options refuses it (no translate_batch option comes near); else a note


DIFFERENCES = (
    Difference("forced_eos_token_id", lambda s: s.get("forced_eos_token_id") is not None,
               "CTranslate2 has no forced EOS at max_length: a hypothesis cut there ends without EOS, and beams may "
               "rank otherwise at that last step", refused=True),
    Difference("early_stopping", lambda s: s.get("early_stopping", True) is not True and s.get("num_beams", 1) > 1,
               "CTranslate2's beam search stops as early_stopping=True does", refused=True),
    Difference("renormalize_logits",
               lambda s: not s.get("renormalize_logits") and s.get("num_beams", 1) > 1
               and bool(s.get("no_repeat_ngram_size") or s.get("min_length", 0) > 1),
               "CTranslate2 takes its log-softmax after the n-gram and length bans: its beams rank as "
               "generate(renormalize_logits=True)", refused=False),
)


def differences(settings: dict) -> dict:
    """What CTranslate2 decodes otherwise than ``generate(**settings)``: {setting: why}."""
    return {d.setting: d.why for d in DIFFERENCES if d.differs(settings)}


def _mapped(settings: dict) -> dict:
    unknown = sorted(set(settings) - set(CT2_SETTINGS))
    if unknown:
        raise ValueError(f"no CTranslate2 equivalent known for {unknown}")
    return dict(beam_size=settings.get("num_beams", 1), length_penalty=settings.get("length_penalty", 1.0),
                no_repeat_ngram_size=settings.get("no_repeat_ngram_size") or 0,
                min_decoding_length=max(settings.get("min_length", 0) - 1, 0),
                max_decoding_length=settings["max_length"] - 1, return_end_token=True, max_input_length=0)


def ct2_options(settings: dict, vocabulary: list, rows: int) -> dict:
    """generate's settings as keyword arguments of ctranslate2.Translator.translate_batch for ``rows`` sources; a
    setting CTranslate2 has no equivalent for (or cannot follow: :data:`DIFFERENCES`' refused ones) is a
    ValueError naming it."""
    options = _mapped(settings)
    for d in DIFFERENCES:
        if d.refused and d.differs(settings):
            raise ValueError(f"{d.setting}={settings[d.setting]!r}: {d.why}")
    if settings.get("forced_bos_token_id") is not None:
        options["target_prefix"] = [[vocabulary[settings["forced_bos_token_id"]]]] * rows
    return options


def ct2_vocabulary(folder: str) -> list:
    """CTranslate2's vocabulary in id order: a converted folder's ``shared_vocabulary.json``, else the tokens of
    an exported folder's tokenizer."""
    import transformers

    converted = os.path.join(folder, "shared_vocabulary.json")
    if os.path.isfile(converted):
        with open(converted, encoding="utf-8") as f:
            return json.load(f)

    vocab = transformers.AutoTokenizer.from_pretrained(folder).get_vocab()
    return [token for token, _ in sorted(vocab.items(), key=lambda item: item[1])]


def ct2_generate(translator, vocabulary: list, index: dict, ids, attention_mask, settings: dict, decoder_start: int,
                 pad: int):
    """CTranslate2's output for generate's inputs and settings, as generate returns it (decoder start token
    first, padded with ``pad``)."""
    import torch

    source = [[vocabulary[i] for i in row[mask.bool()].tolist()] for row, mask in zip(ids.cpu(), attention_mask.cpu())]
    results = translator.translate_batch(source, **ct2_options(settings, vocabulary, len(source)))
    rows = [[decoder_start] + [index[token] for token in result.hypotheses[0]] for result in results]
    width = max(map(len, rows))
    return torch.tensor([row + [pad] * (width - len(row)) for row in rows])


def model_settings(config) -> dict:
    """The model's generation settings (its config and generation_config.json, as generate resolves them with
    no arguments) that CTranslate2 maps; any other decoding option set to other than transformers' default is a
    ValueError naming it (translate_batch would decode otherwise)."""
    from bart.generation.options import OPTIONS, resolve

    values = vars(resolve(config, {}))
    for option in OPTIONS:
        name = option.name
        if name in CT2_SETTINGS + _TOKEN_IDS + _NOT_DECODING + _SAMPLING_ONLY or name not in values:
            continue
        if values[name] != option.default and not (option.off is not None and values[name] == option.off):
            raise ValueError(f"the model's generation settings set {name}={values[name]!r}, which has no "
                             f"CTranslate2 option here; set it to {option.default!r} in the config (or its "
                             f"generation_config.json) or export without --ct2")
    return {name: values[name] for name in CT2_SETTINGS}


def options_record(settings: dict, vocabulary: list) -> dict:
    """What :data:`OPTIONS_FILE` holds: translate_batch's keyword arguments (all but the per-source
    ``target_prefix``, given as one source's), the settings they come from and what CTranslate2 decodes
    otherwise."""
    prefix = settings.get("forced_bos_token_id")
    return {"translate_batch": _mapped(settings),
            "target_prefix": None if prefix is None else [vocabulary[prefix]],
            "generate_settings": settings, "differences": differences(settings)}


def translate_options(folder: str, rows: int) -> dict:
    """translate_batch's keyword arguments for ``rows`` sources, from ``folder``'s :data:`OPTIONS_FILE`."""
    with open(os.path.join(folder, OPTIONS_FILE), encoding="utf-8") as f:
        record = json.load(f)
    options = dict(record["translate_batch"])
    if record.get("target_prefix"):
        options["target_prefix"] = [list(record["target_prefix"])] * rows
    return options


def convert(hf_folder: str, out_dir: str, vocab_size: int, settings: dict) -> dict:
    """CTranslate2's converter on the exported folder ``hf_folder``, into ``out_dir`` (made here; the caller
    moves it into place), with the tokenizer files and :data:`OPTIONS_FILE`. Rows of the model's vocabulary
    the tokenizer lacks (a ``vocab_size`` above it, as the offline GPT-2 tokenizer's 50,262 tokens under
    bart-large's 50,265) are named ``<ct2_unused_{i}>`` in the converter's copy: CTranslate2 needs one token
    per row. Returns the options record and the number of such tokens."""
    import transformers
    from ctranslate2.converters import TransformersConverter

    from bart.runtime.foreign_noise import (
        CONVERTER_NOISE,
        dropped,
        no_transformers_progress_bars,
    )

    with tempfile.TemporaryDirectory(prefix=".ct2-source-", dir=os.path.dirname(out_dir)) as work:
        source = os.path.join(work, "hf")
        shutil.copytree(hf_folder, source)
        tokenizer = transformers.AutoTokenizer.from_pretrained(source)
        missing = vocab_size - len(tokenizer)
        if missing > 0:
            tokenizer.add_tokens([f"<ct2_unused_{i}>" for i in range(missing)])
            tokenizer.save_pretrained(source)
        vocabulary = ct2_vocabulary(source)
        files = [name for name in TOKENIZER_FILES if os.path.isfile(os.path.join(source, name))]
        with no_transformers_progress_bars(), dropped(CONVERTER_NOISE):
            TransformersConverter(source, copy_files=files).convert(out_dir, force=True)
    record = options_record(settings, vocabulary)
    with open(os.path.join(out_dir, OPTIONS_FILE), "w", encoding="utf-8") as f:
        json.dump(record, f, indent=2)
        f.write("\n")
    return dict(record, placeholder_tokens=max(missing, 0))

"""``BartTokenizer``: BART's byte-level BPE tokenizer, fast to start and identical to transformers'.

A local folder in the standard BART layout (``tokenizer.json`` with BART's five special tokens and
template, and a ``tokenizer_config.json`` that sets nothing else) is run directly by the Rust
``tokenizers`` library that transformers' ``BartTokenizerFast`` wraps: what the recipe's own code
calls (:meth:`encode_for_model`, :meth:`encode_batch_fast`, :meth:`decode`/:meth:`batch_decode`,
the special-token ids, ``len``, :meth:`save_pretrained`) then works without importing transformers,
which costs a training or evaluation process about 3 s of start-up. Everything else (``__call__``,
``pad``, any other attribute) is transformers' fast tokenizer, built on first use from the same
folder, so the README's inference snippet works unchanged. Any other folder (extra special tokens,
a prefix space, vocab.json + merges.txt without tokenizer.json) and hub ids go to transformers for
every call. ``tests/tokenization/test_tokenizer.py`` holds the two paths to the same ids and texts.

Also added: per-vocabulary tables of word starts and sentence ends for BART's noise.
"""
from __future__ import annotations

import json
import os
from typing import Any

import torch

from bart.files.checkpoint_io import atomic_copy, atomic_write_text
from bart.hub import TOKENIZER_FILES

_SENTENCE_END = (".", "!", "?")
_CLOSERS = "\"')]}’”»"
# BART's special tokens: (name in tokenizer_config/special_tokens_map, text, lstrip) as transformers'
# BartTokenizerFast defines them (<mask> takes the space before it).
_SPECIALS = (("bos_token", "<s>", False), ("eos_token", "</s>", False), ("unk_token", "<unk>", False),
             ("sep_token", "</s>", False), ("pad_token", "<pad>", False), ("cls_token", "<s>", False),
             ("mask_token", "<mask>", True))
_SPECIAL_TEXTS = {text: lstrip for _, text, lstrip in _SPECIALS}  # the five distinct tokens, in transformers' order
# tokenizer_config.json keys that are metadata or that the native path honours; any other key (or
# another value of these, see _plain_config) sends the folder to transformers.
_CONFIG_KEYS = {"model_max_length", "tokenizer_class", "add_prefix_space", "trim_offsets", "errors",
                "clean_up_tokenization_spaces", "added_tokens_decoder", "extra_special_tokens",
                "additional_special_tokens", "name_or_path", "special_tokens_map_file", "tokenizer_file",
                "padding_side", "truncation_side", "model_input_names", "use_fast"} | {n for n, _, _ in _SPECIALS}
_LARGE = int(1e30)  # transformers' "no limit" model_max_length


def _load_json(path: str) -> dict | None:
    if not os.path.isfile(path):
        return None
    with open(path, encoding="utf-8") as f:
        value = json.load(f)
    return value if isinstance(value, dict) else None


def _token_text(value) -> str | None:
    return value.get("content") if isinstance(value, dict) else value


def _plain_config(folder: str) -> dict | None:
    """The folder's tokenizer_config.json (or {}) when the folder is BART's standard layout, so the
    Rust tokenizer alone behaves as transformers' BartTokenizerFast built from it; else None."""
    if os.path.isfile(os.path.join(folder, "added_tokens.json")):
        return None
    try:
        spec = _load_json(os.path.join(folder, "tokenizer.json"))
        config = _load_json(os.path.join(folder, "tokenizer_config.json")) or {}
        special_map = _load_json(os.path.join(folder, "special_tokens_map.json")) or {}
    except (OSError, ValueError):
        return None  # transformers reports the damage in its own words
    if not spec or set(config) - _CONFIG_KEYS:
        return None
    expected = {"add_prefix_space": False, "trim_offsets": True, "errors": "replace", "padding_side": "right",
                "truncation_side": "right", "use_fast": True,
                "model_input_names": ["input_ids", "attention_mask"]}
    if any(key in config and config[key] != value for key, value in expected.items()):
        return None
    if config.get("tokenizer_class") not in (None, "BartTokenizer", "BartTokenizerFast"):
        return None
    if config.get("extra_special_tokens") or config.get("additional_special_tokens") \
            or special_map.get("additional_special_tokens") or set(special_map) - {n for n, _, _ in _SPECIALS}:
        return None
    for name, text, lstrip in _SPECIALS:
        for source in (config, special_map):
            value = source.get(name, text)
            if _token_text(value) != text:
                return None
            if isinstance(value, dict) and (bool(value.get("lstrip")) != lstrip or value.get("rstrip")
                                            or value.get("single_word")):
                return None
    # the Rust tokenizer: BART's pre-tokenizer, template and exactly its five special tokens
    pre, post, dec = spec.get("pre_tokenizer") or {}, spec.get("post_processor") or {}, spec.get("decoder") or {}
    if spec.get("normalizer") is not None or spec.get("truncation") is not None or spec.get("padding") is not None:
        return None
    if pre.get("type") != "ByteLevel" or pre.get("add_prefix_space") or dec.get("type") != "ByteLevel":
        return None
    if post.get("type") != "RobertaProcessing" or post.get("add_prefix_space") or not post.get("trim_offsets", True) \
            or list(post.get("sep", []))[:1] != ["</s>"] or list(post.get("cls", []))[:1] != ["<s>"]:
        return None
    if (spec.get("model") or {}).get("type") != "BPE":
        return None
    added = spec.get("added_tokens") or []
    if sorted(t.get("content") for t in added) != sorted(_SPECIAL_TEXTS):
        return None
    for token in added:
        if not token.get("special") or bool(token.get("lstrip")) != _SPECIAL_TEXTS[token["content"]] \
                or token.get("rstrip") or token.get("single_word"):
            return None
    decoder = config.get("added_tokens_decoder") or {}
    by_id = {str(t["id"]): t for t in added}
    for key, token in decoder.items():
        if not isinstance(token, dict) or key not in by_id or any(
                token.get(k, False) != by_id[key].get(k, False)
                for k in ("content", "lstrip", "rstrip", "single_word", "normalized", "special")):
            return None
    return config


class BartTokenizer:
    def __init__(self, backend=None, *, rust=None, folder: str | None = None, config: dict | None = None) -> None:
        """``backend``: a transformers ``PreTrainedTokenizerFast`` holding BART's vocabulary; or
        ``rust`` (a ``tokenizers.Tokenizer``) with the ``folder`` it came from, the backend then
        being built from that folder on first use."""
        self._backend = backend
        self._rust = rust
        self._folder = folder
        self._config = config or {}
        self._word_starts: torch.Tensor | None = None
        self._sentence_ends: torch.Tensor | None = None

    # -- loading ------------------------------------------------------------------------------
    @classmethod
    def from_pretrained(cls, name_or_folder: str | os.PathLike, **kwargs: Any) -> BartTokenizer:
        path = os.fspath(name_or_folder)
        if os.path.isdir(path):
            has_fast = os.path.isfile(os.path.join(path, "tokenizer.json"))
            missing = [n for n in ("vocab.json", "merges.txt") if not os.path.isfile(os.path.join(path, n))]
            if not has_fast and missing:
                raise FileNotFoundError(
                    f"BartTokenizer: {path} holds neither tokenizer.json nor {' and '.join(missing)}; "
                    f"build a tokenizer folder with `python -m bart.tokenization.build_tokenizer {path}`")
            config = None if kwargs else _plain_config(path)
            if config is not None:
                from tokenizers import Tokenizer
                try:
                    rust = Tokenizer.from_file(os.path.join(path, "tokenizer.json"))
                except Exception:  # noqa: BLE001 - transformers then reports it in its own words
                    rust = None
                if rust is not None:
                    return cls(rust=rust, folder=path, config=config)
            from transformers import BartTokenizerFast
            return cls(BartTokenizerFast.from_pretrained(path, **kwargs))
        if os.path.exists(path) or path.endswith((".json", ".txt")) or path.startswith((".", "/")):
            raise FileNotFoundError(f"BartTokenizer: no tokenizer folder at {path}; build one with "
                                    f"`python -m bart.tokenization.build_tokenizer {path}`")
        from transformers import BartTokenizerFast
        try:
            return cls(BartTokenizerFast.from_pretrained(path, **kwargs))
        except Exception as err:  # network errors, unknown ids: one clear message
            raise OSError(
                f"BartTokenizer: could not load '{path}' from the model hub ({type(err).__name__}: {err}). "
                f"Offline, pass a local tokenizer folder instead; one can be assembled with "
                f"`python -m bart.tokenization.build_tokenizer data/tokenizer`") from err

    @property
    def native(self) -> bool:
        """True when the recipe's own calls run on the Rust tokenizer without transformers."""
        return self._rust is not None

    @property
    def backend(self):
        """transformers' ``BartTokenizerFast`` for this vocabulary (built from the folder on first use)."""
        if self._backend is None:
            from transformers import BartTokenizerFast
            self._backend = BartTokenizerFast.from_pretrained(self._folder)
        return self._backend

    def save_pretrained(self, folder: str | os.PathLike) -> tuple[str, ...]:
        """Write the tokenizer folder to ``folder``: a native tokenizer's files are copied as they are
        (each replaced atomically), so the copy loads exactly as the original."""
        folder = os.fspath(folder)
        if self._rust is None:
            return tuple(self.backend.save_pretrained(folder))
        os.makedirs(folder, exist_ok=True)
        # tokenizer_config.json names the class, as transformers writes it, so AutoTokenizer loads the copy
        config = dict(self._config, tokenizer_class=self._config.get("tokenizer_class") or "BartTokenizer")
        written = [os.path.join(folder, "tokenizer_config.json")]
        atomic_write_text(written[0], json.dumps(config, indent=2, sort_keys=True, ensure_ascii=False) + "\n")
        for name in TOKENIZER_FILES:
            source, target = os.path.join(self._folder, name), os.path.join(folder, name)
            if name == "tokenizer_config.json":
                continue
            if os.path.isfile(source):
                if not (os.path.exists(target) and os.path.samefile(source, target)):
                    atomic_copy(source, target)
                written.append(target)
            elif os.path.isfile(target) and name in ("special_tokens_map.json", "added_tokens.json"):
                os.remove(target)  # an earlier tokenizer's: it would change what the folder loads as
        if not all(os.path.isfile(os.path.join(folder, n)) for n in ("vocab.json", "merges.txt")):
            written += self._rust.model.save(folder)  # the BPE pair, as transformers also writes it
        return tuple(written)

    # -- the recipe's calls, natively where possible ----------------------------------------------
    def _special_id(text: str, name: str):  # noqa: N805 - builds a property in the class body
        def get(self) -> int:
            return self._rust.token_to_id(text) if self._rust is not None else getattr(self.backend, name)
        return property(get, doc=f"id of {text}")

    bos_token_id = _special_id("<s>", "bos_token_id")
    eos_token_id = _special_id("</s>", "eos_token_id")
    pad_token_id = _special_id("<pad>", "pad_token_id")
    unk_token_id = _special_id("<unk>", "unk_token_id")
    mask_token_id = _special_id("<mask>", "mask_token_id")
    del _special_id

    @property
    def all_special_ids(self) -> list[int]:
        if self._rust is None:
            return self.backend.all_special_ids
        return [self._rust.token_to_id(t) for t in _SPECIAL_TEXTS]

    @property
    def model_max_length(self) -> int:
        return self._config.get("model_max_length", _LARGE) if self._rust is not None else self.backend.model_max_length

    @property
    def name_or_path(self) -> str:
        return self._folder if self._rust is not None else self.backend.name_or_path

    def __len__(self) -> int:
        if self._rust is not None:
            return self._rust.get_vocab_size(with_added_tokens=True)
        return len(self.backend)

    def convert_ids_to_tokens(self, ids, skip_special_tokens: bool = False):
        if self._rust is None:
            return self.backend.convert_ids_to_tokens(ids, skip_special_tokens=skip_special_tokens)
        if isinstance(ids, int):
            return self._rust.id_to_token(ids)
        specials = set(self.all_special_ids) if skip_special_tokens else ()
        return [self._rust.id_to_token(int(i)) for i in ids if int(i) not in specials]

    def convert_tokens_to_string(self, tokens: list[str]) -> str:
        if self._rust is None:
            return self.backend.convert_tokens_to_string(tokens)
        return self._rust.decoder.decode(tokens)

    def encode_for_model(self, texts: list[str], max_length: int) -> dict[str, torch.Tensor]:
        """``input_ids`` and ``attention_mask`` (int64, padded on the right to the longest) of a batch,
        each text truncated to ``max_length`` tokens with BART's ``<s>`` and ``</s>`` around it: what
        ``tokenizer(texts, max_length=..., truncation=True, padding=True, return_tensors="pt")`` gives."""
        if self._rust is None:
            encoded = self.backend(list(texts), max_length=max_length, truncation=True, padding=True,
                                   return_tensors="pt")
            return {"input_ids": encoded["input_ids"], "attention_mask": encoded["attention_mask"]}
        rust = self._rust
        rust.enable_truncation(max_length, stride=0, strategy="longest_first", direction="right")
        rust.enable_padding(direction="right", pad_id=self.pad_token_id, pad_type_id=0, pad_token="<pad>")
        try:
            encodings = rust.encode_batch(list(texts), add_special_tokens=True)
        finally:
            rust.no_truncation()
            rust.no_padding()
        return {"input_ids": torch.tensor([e.ids for e in encodings], dtype=torch.long),
                "attention_mask": torch.tensor([e.attention_mask for e in encodings], dtype=torch.long)}

    def encode_batch_fast(self, texts: list[str], add_special_tokens: bool = True) -> list[list[int]]:
        """Token ids of many texts at once (Rust, parallel), never truncated."""
        backend = self._rust if self._rust is not None else self.backend.backend_tokenizer
        # a call with truncation/padding (the collators') leaves them set on the shared Rust tokenizer
        if backend.truncation is not None:
            backend.no_truncation()
        if backend.padding is not None:
            backend.no_padding()
        encodings = backend.encode_batch(list(texts), add_special_tokens=add_special_tokens)
        return [e.ids for e in encodings]

    @staticmethod
    def _id_lists(sequences) -> list[list[int]] | None:
        if isinstance(sequences, torch.Tensor):
            return sequences.tolist() if sequences.dim() == 2 else None
        if isinstance(sequences, (list, tuple)) and all(
                isinstance(s, (list, tuple)) and all(isinstance(i, int) for i in s) for s in sequences):
            return [list(s) for s in sequences]
        return None

    def _native_decode(self, clean_up: bool | None, kwargs: dict) -> bool:
        """Whether a decode call can run on the Rust tokenizer: only skip_special_tokens and a
        clean-up that resolves to off (transformers' text clean-up is then not involved)."""
        if self._rust is None or kwargs:
            return False
        return not (self._config.get("clean_up_tokenization_spaces", False) if clean_up is None else clean_up)

    def batch_decode(self, sequences, skip_special_tokens: bool = False,
                     clean_up_tokenization_spaces: bool | None = None, **kwargs: Any) -> list[str]:
        ids = self._id_lists(sequences) if self._native_decode(clean_up_tokenization_spaces, kwargs) else None
        if ids is None:
            return self.backend.batch_decode(sequences, skip_special_tokens=skip_special_tokens,
                                             clean_up_tokenization_spaces=clean_up_tokenization_spaces, **kwargs)
        return self._rust.decode_batch(ids, skip_special_tokens=skip_special_tokens)

    def decode(self, token_ids, skip_special_tokens: bool = False,
               clean_up_tokenization_spaces: bool | None = None, **kwargs: Any) -> str:
        ids = None
        if self._native_decode(clean_up_tokenization_spaces, kwargs):
            flat = token_ids.tolist() if isinstance(token_ids, torch.Tensor) and token_ids.dim() <= 1 else token_ids
            ids = self._id_lists([[flat] if isinstance(flat, int) else flat])
        if ids is None:
            return self.backend.decode(token_ids, skip_special_tokens=skip_special_tokens,
                                       clean_up_tokenization_spaces=clean_up_tokenization_spaces, **kwargs)
        return self._rust.decode(ids[0], skip_special_tokens=skip_special_tokens)

    # -- the rest of the transformers API, delegated -------------------------------------------
    def __call__(self, text, *args: Any, **kwargs: Any):
        return self.backend(text, *args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):  # not set yet (unpickling) or private: avoid recursion
            raise AttributeError(name)
        return getattr(self.backend, name)

    # -- additions for the data pipeline -------------------------------------------------------
    def _token_texts(self) -> list[str]:
        """The token of every id (byte-level symbols, not yet turned back into characters)."""
        return self.convert_ids_to_tokens(list(range(len(self))))

    def word_start_mask(self) -> torch.Tensor:
        """BoolTensor over the vocabulary: True where a token begins a word (its text starts with
        the byte-level space marker "Ġ") and for special tokens, which are words of their own."""
        if self._word_starts is None:
            specials = set(self.all_special_ids)
            self._word_starts = torch.tensor(
                [tok is not None and (tok.startswith("Ġ") or i in specials)
                 for i, tok in enumerate(self._token_texts())], dtype=torch.bool)
        return self._word_starts

    def sentence_end_mask(self) -> torch.Tensor:
        """BoolTensor over the vocabulary: True where a token's text ends a sentence ('.', '!' or
        '?', possibly followed by closing quotes or brackets)."""
        if self._sentence_ends is None:
            specials = set(self.all_special_ids)
            ends = []
            for i, tok in enumerate(self._token_texts()):
                text = "" if tok is None or i in specials else self.convert_tokens_to_string([tok]).strip()
                ends.append(text.rstrip(_CLOSERS).endswith(_SENTENCE_END) and len(text.rstrip(_CLOSERS)) > 0
                            and not text.rstrip(_CLOSERS)[:-1].endswith(_SENTENCE_END[0] * 2))
            self._sentence_ends = torch.tensor(ends, dtype=torch.bool)
        return self._sentence_ends

    def __repr__(self) -> str:
        return f"BartTokenizer({self.name_or_path!r}, vocab={len(self)}{', native' if self.native else ''})"


def model_inputs(tokenizer, texts: list[str], max_length: int) -> dict[str, torch.Tensor]:
    """``input_ids`` and ``attention_mask`` of ``texts`` truncated to ``max_length`` and padded to the
    longest, from a :class:`BartTokenizer` (natively where it can) or any transformers tokenizer."""
    if isinstance(tokenizer, BartTokenizer):
        return tokenizer.encode_for_model(texts, max_length)
    encoded = tokenizer(list(texts), max_length=max_length, truncation=True, padding=True, return_tensors="pt")
    return {"input_ids": encoded["input_ids"], "attention_mask": encoded["attention_mask"]}

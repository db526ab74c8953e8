"""``BartTokenizer``: a thin layer over the fast (Rust) byte-level BPE tokenizer.

Loads a local tokenizer folder offline (see :mod:`bart.tokenization.build_tokenizer`) or a hub id
through transformers, and adds what the data pipeline needs: batch encoding without truncation,
and per-vocabulary tables of word starts and sentence ends for BART's noise. Everything else
(``__call__``, ``decode``, ``batch_decode``, ``pad``, ``save_pretrained``, ...) is the wrapped
transformers fast tokenizer's, so the README's inference snippet works unchanged.
"""
from __future__ import annotations

import os
from typing import Any

import torch

_SENTENCE_END = (".", "!", "?")
_CLOSERS = "\"')]}’”»"


class BartTokenizer:
    def __init__(self, backend) -> None:
        """``backend`` is a transformers ``PreTrainedTokenizerFast`` holding BART's vocabulary."""
        self.backend = backend
        self._word_starts: torch.Tensor | None = None
        self._sentence_ends: torch.Tensor | None = None

    # -- loading ------------------------------------------------------------------------------
    @classmethod
    def from_pretrained(cls, name_or_folder: str | os.PathLike, **kwargs: Any) -> "BartTokenizer":
        from transformers import BartTokenizerFast

        path = os.fspath(name_or_folder)
        if os.path.isdir(path):
            has_fast = os.path.isfile(os.path.join(path, "tokenizer.json"))
            missing = [n for n in ("vocab.json", "merges.txt") if not os.path.isfile(os.path.join(path, n))]
            if not has_fast and missing:
                raise FileNotFoundError(
                    f"BartTokenizer: {path} holds neither tokenizer.json nor {' and '.join(missing)}; "
                    f"build a tokenizer folder with `python -m bart.tokenization.build_tokenizer {path}`")
            return cls(BartTokenizerFast.from_pretrained(path, **kwargs))
        if os.path.exists(path) or path.endswith((".json", ".txt")) or path.startswith((".", "/")):
            raise FileNotFoundError(f"BartTokenizer: no tokenizer folder at {path}; build one with "
                                    f"`python -m bart.tokenization.build_tokenizer {path}`")
        try:
            return cls(BartTokenizerFast.from_pretrained(path, **kwargs))
        except Exception as err:  # network errors, unknown ids: one clear message
            raise OSError(
                f"BartTokenizer: could not load '{path}' from the model hub ({type(err).__name__}: {err}). "
                f"Offline, pass a local tokenizer folder instead; one can be assembled with "
                f"`python -m bart.tokenization.build_tokenizer data/tokenizer`") from err

    def save_pretrained(self, folder: str | os.PathLike) -> None:
        self.backend.save_pretrained(os.fspath(folder))

    # -- the transformers API, delegated -----------------------------------------------------
    def __call__(self, text, *args: Any, **kwargs: Any):
        return self.backend(text, *args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        if name == "backend":  # not set yet (unpickling): avoid recursion
            raise AttributeError(name)
        return getattr(self.backend, name)

    def __len__(self) -> int:
        return len(self.backend)

    # -- additions for the data pipeline -------------------------------------------------------
    def encode_batch_fast(self, texts: list[str], add_special_tokens: bool = True) -> list[list[int]]:
        """Token ids of many texts at once (Rust, parallel), never truncated."""
        backend = self.backend.backend_tokenizer
        # a call with truncation/padding (the collators') leaves them set on the shared Rust tokenizer
        if backend.truncation is not None:
            backend.no_truncation()
        if backend.padding is not None:
            backend.no_padding()
        encodings = backend.encode_batch(list(texts), add_special_tokens=add_special_tokens)
        return [e.ids for e in encodings]

    def _token_texts(self) -> list[str]:
        """Decoded text of every id (byte-level tokens turned back into characters)."""
        tokens = self.backend.convert_ids_to_tokens(list(range(len(self.backend))))
        return tokens

    def word_start_mask(self) -> torch.Tensor:
        """BoolTensor over the vocabulary: True where a token begins a word (its text starts with
        the byte-level space marker "Ġ") and for special tokens, which are words of their own."""
        if self._word_starts is None:
            specials = set(self.backend.all_special_ids)
            self._word_starts = torch.tensor(
                [tok is not None and (tok.startswith("Ġ") or i in specials)
                 for i, tok in enumerate(self._token_texts())], dtype=torch.bool)
        return self._word_starts

    def sentence_end_mask(self) -> torch.Tensor:
        """BoolTensor over the vocabulary: True where a token's text ends a sentence ('.', '!' or
        '?', possibly followed by closing quotes or brackets)."""
        if self._sentence_ends is None:
            specials = set(self.backend.all_special_ids)
            ends = []
            for i, tok in enumerate(self._token_texts()):
                text = "" if tok is None or i in specials else self.backend.convert_tokens_to_string([tok]).strip()
                ends.append(text.rstrip(_CLOSERS).endswith(_SENTENCE_END) and len(text.rstrip(_CLOSERS)) > 0
                            and not text.rstrip(_CLOSERS)[:-1].endswith(_SENTENCE_END[0] * 2))
            self._sentence_ends = torch.tensor(ends, dtype=torch.bool)
        return self._sentence_ends

    def __repr__(self) -> str:
        return f"BartTokenizer({self.backend.name_or_path!r}, vocab={len(self)})"

"""The model config's ``vocab_size`` against the tokenizer a run uses.

A tokenizer with more tokens than the config's embedding rows produces ids past the embedding
table (an index error deep in the first forward pass); a config far larger than the tokenizer
trains output rows that no token ever uses (wasted compute: the output softmax is the largest cost
of a small model). The entry points call :func:`require_vocab_size` once, after loading both.
"""
from __future__ import annotations

import sys

from bart.errors import UserError

# Extra rows tolerated without a note: facebook/bart-large's config has 50265 rows for the offline
# tokenizer's 50262 tokens, and vocabularies are often padded to a multiple of 8 or 64.
SPARE_ROWS = 64


class VocabSizeMismatch(UserError):
    pass


def check_vocab_size(tokenizer_size: int, vocab_size: int, tokenizer_name: str = "the tokenizer",
                     config_name: str = "the model config") -> str | None:
    """Raise :class:`VocabSizeMismatch` when the tokenizer has more tokens than ``vocab_size``;
    return a one-line note when the config has more than ``SPARE_ROWS`` unused rows, else None."""
    if tokenizer_size > vocab_size:
        raise VocabSizeMismatch(
            f"tokenizer {tokenizer_name} has {tokenizer_size} tokens but {config_name} has vocab_size {vocab_size}: "
            f"set \"vocab_size\": {tokenizer_size} in {config_name} or pass the tokenizer the model was built for "
            f"(--tokenizer)")
    if vocab_size - tokenizer_size > SPARE_ROWS:
        return (f"note: {config_name} has vocab_size {vocab_size} but tokenizer {tokenizer_name} has only "
                f"{tokenizer_size} tokens; {vocab_size - tokenizer_size} output rows are never used "
                f"(set \"vocab_size\": {tokenizer_size} to save their compute)")
    return None


def require_vocab_size(tokenizer, config, tokenizer_name: str | None = None, config_name: str | None = None) -> None:
    """For entry points: a mismatch raises :class:`VocabSizeMismatch` (a ``UserError``: one line and exit 2
    through ``bart.cli.exits.run_main``); a note goes to stderr."""
    tokenizer_name = tokenizer_name or getattr(tokenizer, "name_or_path", None) or "the tokenizer"
    config_name = config_name or "the model config"
    note = check_vocab_size(len(tokenizer), config.vocab_size, tokenizer_name, config_name)
    if note:
        print(note, file=sys.stderr)

"""Which tokenizer goes with which weights: the one the model was trained with wins.

    choice = choose_tokenizer(model_path, args.tokenizer, allow_mismatch=args.allow_tokenizer_mismatch)
    tokenizer = BartTokenizer.from_pretrained(choice.path)

With starting weights (``model_path``: a checkpoint file, a model folder or a hub snapshot, already
resolved), the tokenizer stored with them is used:
- a model folder or hub snapshot holding tokenizer files (a ``save_pretrained`` or export folder, facebook's
  repositories): those files;
- this project's checkpoints: the tokenizer recorded inside them (fingerprint and name, see
  :mod:`bart.tokenization.identity`), found beside the file (runs save their tokenizer next to their
  checkpoints) or under its recorded name; older checkpoints without a record: the tokenizer beside them;
- public weights without tokenizer files but with a known vocabulary: NGC's reference-format ``.ckpt``
  files (a raw state dict, ``{"model", "optimizer", "scaler"}`` or a Lightning checkpoint, with no config
  stored) and fairseq ``model.pt`` files, with facebook/bart-large's number of rows: the hub id
  ``facebook/bart-large`` (online, or the hub cache; the image bakes its tokenizer files).

``--tokenizer`` (else ``$TOKENIZER``) is the user's explicit choice: with weights, it must have the same
content (vocabulary ids, merges, special tokens; not the same path) as the weights' own tokenizer, else
a :class:`UserError` naming both and the fix, before anything expensive runs; ``allow_mismatch``
(``--allow_tokenizer_mismatch``) uses it anyway, with a warning. Weights that carry no tokenizer and no
known vocabulary need an explicit one.

Without weights (pretraining or fine-tuning from scratch): ``--tokenizer``, else ``$TOKENIZER``, else
``$BART_DEFAULT_TOKENIZER`` (the image's offline GPT-2-vocabulary folder), else facebook/bart-large.
"""
from __future__ import annotations

import contextlib
import io
import os
import sys
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass

from bart.errors import UserError
from bart.hub import (
    HubResolutionError,
    has_tokenizer_files,
    hub_id_of,
    resolve_tokenizer_path,
)
from bart.tokenization.identity import (
    TokenizerFilesError,
    TokenizerIdentity,
    difference,
    read_record,
    remember,
    tokenizer_identity,
)

DEFAULT_ENV = "BART_DEFAULT_TOKENIZER"
FALLBACK = "facebook/bart-large"
PUBLIC_TOKENIZER = "facebook/bart-large"  # the vocabulary of NGC's reference checkpoints and of fairseq's BART
PUBLIC_ROWS = (50264, 50265)  # fairseq's bart.large (50,264 rows) and transformers'/the reference's (50,265)
OVERRIDE_FLAG = "--allow_tokenizer_mismatch"
_REFERENCE_KEYS = {"model", "optimizer", "scaler"}  # the reference recipe's _step{N}.ckpt


@dataclass
class StoredTokenizer:
    """What weights say of their tokenizer. ``where``: a phrase for messages; ``name``: a hub id or folder
    to resolve; ``folder``: a local folder at hand (beside a checkpoint); ``fingerprint``: the recorded one."""
    where: str
    name: str | None = None
    folder: str | None = None
    fingerprint: str | None = None


@dataclass
class Choice:
    path: str    # the local tokenizer folder
    name: str    # where it comes from (hub id or folder)
    reason: str  # why it was chosen


def _is_main() -> bool:
    return os.environ.get("RANK", "0") == "0"


def _note(text: str) -> None:
    if _is_main():
        print(text, file=sys.stderr, flush=True)


def _peek(path: str):
    """The checkpoint's dict with its tensors left on disk where the format allows (zip files: mmap)."""
    from bart.files.checkpoint_io import safe_load
    return safe_load(path, mmap=zipfile.is_zipfile(path))


def _tensors(data) -> dict:
    for key in ("model", "state_dict", "module"):
        if isinstance(data.get(key), dict):
            data = data[key]
            break
    import torch
    return {k: v for k, v in data.items() if isinstance(v, torch.Tensor)}


def _public_format(data) -> str | None:
    """'an NGC reference checkpoint' / 'a fairseq checkpoint' when ``data`` is public weights whose
    vocabulary is facebook/bart-large's; None for anything else (this project's own formats included)."""
    if not isinstance(data, dict) or "kind" in data or isinstance(data.get("config"), dict):
        return None
    state = _tensors(data)
    if not state:
        return None
    from bart.modeling.fairseq import is_fairseq_checkpoint
    if is_fairseq_checkpoint(data, state):
        table = state.get("encoder.embed_tokens.weight")
        rows = int(table.shape[0]) if table is not None and table.dim() == 2 else None
        return "a fairseq checkpoint" if rows in PUBLIC_ROWS else None
    raw = len(state) == len(data)
    reference = "model" in data and set(data) <= _REFERENCE_KEYS
    lightning = "state_dict" in data and "pytorch-lightning_version" in data
    if not (raw or reference or lightning):
        return None
    from bart.modeling.weights import normalize_keys
    table = normalize_keys(state).get("model.shared.weight")
    rows = int(table.shape[0]) if table is not None and table.dim() == 2 else None
    return "an NGC reference checkpoint" if rows in PUBLIC_ROWS else None


def _weights_file_in(folder: str) -> str | None:
    """The checkpoint a folder without config.json stands for (as the model loaders pick it), quietly."""
    from bart.modeling.weights import resolve_weights, single_checkpoint_in
    single = single_checkpoint_in(folder)
    if single:
        return single
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            chosen = resolve_weights(folder)
    except FileNotFoundError:
        return None
    return chosen if os.path.isfile(chosen) else None


def _folder_name(folder: str) -> str:
    return hub_id_of(folder) or os.path.abspath(folder)


def stored_tokenizer(model_path: str | os.PathLike) -> StoredTokenizer | None:
    """What the weights at ``model_path`` (a local file or folder) say of their tokenizer; None when they
    carry none and their vocabulary is not a known one."""
    path = os.fspath(model_path)
    if os.path.isdir(path):
        weights = None if os.path.isfile(os.path.join(path, "config.json")) else _weights_file_in(path)
        if weights is None:
            if has_tokenizer_files(path):
                hub = hub_id_of(path)
                return StoredTokenizer(f"the tokenizer stored with {path}" + (f" ({hub})" if hub else ""),
                                       _folder_name(path), path)
            return None
        path = weights
    data = _peek(path)
    beside = os.path.dirname(os.path.abspath(path))
    beside = beside if has_tokenizer_files(beside) else None
    record = read_record(data)
    if record is not None:
        return StoredTokenizer(f"the tokenizer {path} was trained with ({record.get('name') or 'name not recorded'}; "
                               f"recorded in it)", record.get("name"), beside, record["fingerprint"])
    if beside is not None:
        return StoredTokenizer(f"the tokenizer saved beside {path}", _folder_name(beside), beside)
    kind = _public_format(data)
    if kind is not None:
        return StoredTokenizer(f"the tokenizer {path} was trained with ({PUBLIC_TOKENIZER}: it is {kind})",
                               PUBLIC_TOKENIZER)
    return None


def _identity(folder: str) -> TokenizerIdentity:
    try:
        return tokenizer_identity(folder)
    except TokenizerFilesError as err:
        raise UserError(f"tokenizer {folder}: {err}; pass a complete tokenizer folder") from err


def _candidates(stored: StoredTokenizer):
    """Local folders that may hold the stored tokenizer, each with the error resolving it gave (or None)."""
    if stored.folder:
        yield stored.folder, None
    if stored.name and (not stored.folder or os.path.abspath(stored.name) != os.path.abspath(stored.folder)):
        try:
            yield resolve_tokenizer_path(stored.name), None
        except HubResolutionError as err:
            yield None, err


def _stored_folder(stored: StoredTokenizer) -> str:
    """The local folder of the stored tokenizer: for a recorded one, the first candidate with its fingerprint."""
    tried, errors = [], []
    for folder, err in _candidates(stored):
        if folder is None:
            errors.append(err)
            continue
        if stored.fingerprint is None or _identity(folder).fingerprint == stored.fingerprint:
            return folder
        tried.append(folder)
    if stored.fingerprint is None:  # a public vocabulary whose files cannot be had here
        raise HubResolutionError(f"{stored.where}: {errors[0]}") from errors[0]
    found = ""
    if tried:
        found += f"; {', '.join(tried)} holds another tokenizer"
    if errors:
        found += f"; {errors[0]}"
    raise UserError(f"{stored.where} is not found here (fingerprint {stored.fingerprint[:12]}){found}; pass "
                    f"--tokenizer with that tokenizer (its content is checked)")


def _explicit(tokenizer: str | None, env: Mapping[str, str]) -> tuple[str | None, str, str]:
    """(name, how to call it, how to drop it) of the user's explicit choice."""
    if tokenizer:
        return os.fspath(tokenizer), f"--tokenizer {tokenizer}", "drop --tokenizer"
    if env.get("TOKENIZER"):
        return env["TOKENIZER"], f"$TOKENIZER ({env['TOKENIZER']})", "unset TOKENIZER"
    return None, "", ""


def _chosen(path: str, name: str, reason: str) -> Choice:
    name = name if not os.path.isdir(name) else _folder_name(name)
    try:
        remember(tokenizer_identity(path), name)  # the name this run's checkpoints record
    except TokenizerFilesError:
        pass  # BartTokenizer reports an unreadable folder in its own words
    return Choice(path, name, reason)


def choose_tokenizer(model_path: str | os.PathLike | None, tokenizer: str | None = None, *,
                     allow_mismatch: bool = False, env: Mapping[str, str] | None = None) -> Choice:
    """The tokenizer for a run starting from ``model_path`` (None: from scratch); see the module docstring."""
    env = os.environ if env is None else env
    name, label, drop = _explicit(tokenizer, env)
    if model_path is None:
        if name is None and env.get(DEFAULT_ENV):
            name, label = env[DEFAULT_ENV], f"${DEFAULT_ENV} ({env[DEFAULT_ENV]}), the default for a model trained from scratch"
        elif name is None:
            name, label = FALLBACK, f"{FALLBACK}, the default for a model trained from scratch"
        return _chosen(resolve_tokenizer_path(name), name, label)
    model_path = os.fspath(model_path)
    stored = stored_tokenizer(model_path)
    if stored is None:
        if name is None:
            raise UserError(f"{model_path} carries no tokenizer (no tokenizer files with it, none recorded in it, and "
                            f"not a public checkpoint format of known vocabulary); pass --tokenizer with the "
                            f"tokenizer it was trained with")
        return _chosen(resolve_tokenizer_path(name), name, f"{label}; {model_path} carries no tokenizer")
    if name is None:
        folder = _stored_folder(stored)
        if stored.fingerprint is None and stored.folder is None:  # a public vocabulary by inference: say so
            _note(f"note: using {stored.where}")
        return _chosen(folder, stored.name or folder, stored.where)
    given = resolve_tokenizer_path(name)
    mine = _identity(given)
    theirs: TokenizerIdentity | None = None
    wanted = stored.fingerprint
    try:
        theirs = _identity(_stored_folder(stored))
        wanted = theirs.fingerprint
    except (UserError, HubResolutionError) as err:
        if wanted is None:  # nothing to compare with: the stored tokenizer cannot be had here
            if not allow_mismatch:
                raise UserError(f"{label} cannot be checked against {stored.where}: {' '.join(str(err).split())}; "
                                f"make it available, or pass {OVERRIDE_FLAG} to use {name} unchecked") from err
            _note(f"warning: {label} is used unchecked ({OVERRIDE_FLAG}): {stored.where}, which is not available here")
            return _chosen(given, name, f"{label}, unchecked ({OVERRIDE_FLAG})")
    if mine.fingerprint == wanted:
        return _chosen(given, name, f"{label}, the same tokenizer as {stored.where}")
    detail = (difference(mine, theirs) if theirs is not None else
              f"{mine.tokens} tokens, fingerprint {mine.short()} vs {wanted[:12]}")
    if allow_mismatch:
        _note(f"warning: {label} differs from {stored.where}: {detail}; used anyway ({OVERRIDE_FLAG})")
        return _chosen(given, name, f"{label} over {stored.where} ({OVERRIDE_FLAG})")
    raise UserError(f"{label} differs from {stored.where}: {detail}; {drop} to use the model's own, "
                    f"or pass {OVERRIDE_FLAG} to use {name} anyway")


__all__ = ["choose_tokenizer", "stored_tokenizer", "Choice", "StoredTokenizer", "DEFAULT_ENV", "FALLBACK",
           "PUBLIC_TOKENIZER", "OVERRIDE_FLAG"]

"""A tokenizer's identity: what decides the ids it gives, as one fingerprint.

    identity = tokenizer_identity("data/tokenizer")       # TokenizerIdentity(fingerprint, tokens, ...)
    identity == tokenizer_identity(other_folder)          # the same ids for every text, whatever the path

The fingerprint is a SHA-256 over the vocabulary (every token with its id, added tokens included), the
BPE merges in order, and the special tokens (bos, eos, unk, sep, pad, cls, mask and the additional ones),
read from the folder's files: ``tokenizer.json`` when there is one (what transformers' fast tokenizer and
this project's native path load), else ``vocab.json`` + ``merges.txt`` (+ ``added_tokens.json``). The same
tokenizer written either way, copied, or saved again by ``save_pretrained`` has the same fingerprint;
paths, file order and metadata (model_max_length, tokenizer_class) do not count.

A record of the identity travels inside this project's checkpoints (:func:`record`, written by
:mod:`bart.training.checkpoint`), so a checkpoint copied away from its run folder still says which
tokenizer it was trained with. The record's ``name`` is where the tokenizer came from (a hub id or a
folder), known to the process that chose it (:func:`remember`).
"""
from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass

from bart.files.json_files import read_json

# transformers' BartTokenizerFast defaults: a folder that does not name a special token has these
SPECIAL_DEFAULTS = {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "sep_token": "</s>",
                    "pad_token": "<pad>", "cls_token": "<s>", "mask_token": "<mask>"}
RECORD_KEY = "tokenizer"  # the key of the record in a checkpoint dict
# A raw state dict (``model.load_state_dict(torch.load(path))`` must keep working) carries the record in
# its ``_metadata``, which torch saves with it and load_state_dict reads only under module names; no
# module is named this.
METADATA_KEY = "#bart-tokenizer"


class TokenizerFilesError(ValueError):
    """A tokenizer folder whose files cannot be read as a tokenizer."""


@dataclass(frozen=True, eq=False)
class TokenizerIdentity:
    fingerprint: str
    tokens: int
    vocab: dict  # token -> id (compared only through the fingerprint; kept for messages)
    specials: dict

    def short(self) -> str:
        return self.fingerprint[:12]

    def __eq__(self, other) -> bool:
        return isinstance(other, TokenizerIdentity) and self.fingerprint == other.fingerprint

    def __hash__(self) -> int:
        return hash(self.fingerprint)


def _text(value) -> str | None:
    return value.get("content") if isinstance(value, dict) else value


def _merge_text(merge) -> str:
    return " ".join(merge) if isinstance(merge, (list, tuple)) else str(merge)


def _vocab_and_merges(folder: str) -> tuple[dict, list]:
    fast = os.path.join(folder, "tokenizer.json")
    if os.path.isfile(fast):
        spec = read_json(fast, TokenizerFilesError)
        model = spec.get("model") if isinstance(spec, dict) else None
        if not isinstance(model, dict) or "vocab" not in model:
            raise TokenizerFilesError(f"{fast} holds no tokenizer model with a vocabulary")
        vocab = model["vocab"]
        if isinstance(vocab, list):  # Unigram: [token, score] in id order
            vocab = {entry[0]: i for i, entry in enumerate(vocab)}
        vocab = dict(vocab)
        for token in spec.get("added_tokens") or []:
            vocab[token["content"]] = int(token["id"])
        return vocab, [_merge_text(m) for m in model.get("merges") or []]
    vocab_path, merges_path = os.path.join(folder, "vocab.json"), os.path.join(folder, "merges.txt")
    if not (os.path.isfile(vocab_path) and os.path.isfile(merges_path)):
        raise TokenizerFilesError(f"{folder} holds neither tokenizer.json nor vocab.json + merges.txt")
    vocab = dict(read_json(vocab_path, TokenizerFilesError))
    added = os.path.join(folder, "added_tokens.json")
    if os.path.isfile(added):
        vocab.update({token: int(i) for token, i in read_json(added, TokenizerFilesError).items()})
    with open(merges_path, encoding="utf-8") as f:
        merges = [line.rstrip("\r\n") for line in f]
    merges = [m for m in merges if m and not m.startswith("#version")]
    return vocab, merges


def _specials(folder: str) -> dict:
    values = dict(SPECIAL_DEFAULTS)
    additional: list = []
    for name in ("tokenizer_config.json", "special_tokens_map.json"):  # the map wins, as in transformers
        path = os.path.join(folder, name)
        if not os.path.isfile(path):
            continue
        data = read_json(path, TokenizerFilesError)
        if not isinstance(data, dict):
            continue
        for key in SPECIAL_DEFAULTS:
            if data.get(key) is not None:
                values[key] = _text(data[key])
        extra = data.get("additional_special_tokens")
        if extra:
            additional = [_text(t) for t in extra]
    values["additional_special_tokens"] = additional
    return values


_CACHE: dict = {}


def _stamp(folder: str) -> tuple:
    stamp = []
    for name in ("tokenizer.json", "vocab.json", "merges.txt", "added_tokens.json", "tokenizer_config.json",
                 "special_tokens_map.json"):
        try:
            st = os.stat(os.path.join(folder, name))
            stamp.append((name, st.st_mtime_ns, st.st_size, st.st_ino))
        except OSError:
            pass
    return tuple(stamp)


def tokenizer_identity(folder: str | os.PathLike) -> TokenizerIdentity:
    """The identity of the tokenizer in ``folder`` (cached while its files do not change)."""
    folder = os.path.realpath(os.fspath(folder))
    key = (folder, _stamp(folder))
    if key in _CACHE:
        return _CACHE[key]
    vocab, merges = _vocab_and_merges(folder)
    specials = _specials(folder)
    digest = hashlib.sha256()
    for part in (sorted(vocab.items(), key=lambda item: (item[1], item[0])), merges, sorted(specials.items())):
        digest.update(json.dumps(part, ensure_ascii=False, separators=(",", ":")).encode("utf-8"))
        digest.update(b"\n")
    identity = TokenizerIdentity(digest.hexdigest(), len(vocab), vocab, specials)
    _CACHE.clear()  # one or two folders matter at a time
    _CACHE[key] = identity
    return identity


def difference(a: TokenizerIdentity, b: TokenizerIdentity) -> str:
    """How two identities differ, in a few words with one example ("'!' is id 4 vs 328")."""
    parts = []
    if a.tokens != b.tokens:
        parts.append(f"{a.tokens} vs {b.tokens} tokens")
    for token, i in sorted(a.vocab.items(), key=lambda item: item[1]):
        j = b.vocab.get(token)
        if j != i:
            parts.append(f"{token!r} is id {i} vs {'absent' if j is None else j}")
            break
    else:
        if a.vocab != b.vocab:
            parts.append("the second has tokens the first lacks")
    if a.specials != b.specials:
        changed = [k for k in a.specials if a.specials[k] != b.specials.get(k)]
        parts.append("special tokens differ (" + ", ".join(f"{k} {a.specials[k]!r} vs {b.specials.get(k)!r}"
                                                           for k in changed[:2]) + ")")
    if not parts:
        parts.append("the same vocabulary, other BPE merges")
    return "; ".join(parts)


# where each tokenizer this process chose came from (fingerprint -> hub id or folder), for the records
_NAMES: dict[str, str] = {}


def remember(identity: TokenizerIdentity, name: str) -> None:
    _NAMES[identity.fingerprint] = name


def record(identity: TokenizerIdentity) -> dict:
    """What a checkpoint stores: plain values (loadable with ``weights_only=True``)."""
    return {"fingerprint": identity.fingerprint, "tokens": identity.tokens, "name": _NAMES.get(identity.fingerprint)}


def read_record(data) -> dict | None:
    """The tokenizer record of a loaded checkpoint: the ``tokenizer`` entry of a checkpoint dict, or the
    state dict's metadata (a raw state dict, ``final_step.ckpt``); None when it has none."""
    value = data.get(RECORD_KEY) if isinstance(data, dict) else None
    if not isinstance(value, dict):
        metadata = getattr(data, "_metadata", None)
        value = metadata.get(METADATA_KEY) if isinstance(metadata, dict) else None
    if isinstance(value, dict) and isinstance(value.get("fingerprint"), str):
        return value
    return None


__all__ = ["TokenizerIdentity", "TokenizerFilesError", "tokenizer_identity", "difference", "remember", "record",
           "read_record", "RECORD_KEY", "METADATA_KEY"]

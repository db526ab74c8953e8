"""The package's version, made from git by setuptools-scm at build time (``setup.py`` passes ``SCM_CONFIG`` as
``use_scm_version``), and the same version for a run from a checkout (:func:`checkout_version`).

    1.0.1.dev437+g1a2b3c4d5e             a build of a clone: 437 commits, none tagged (1.0.0 is the base)
    1.0.1.dev437+g1a2b3c4d5e.d20261129   the same with uncommitted changes (the date of the build)
    0.0+g1a2b3c4d5e                      a build of ``git archive`` output of an untagged repository
    1.2.1.dev3+g1a2b3c4d5e               either, three commits after a tag v1.2.0

The commit is always in the local part (``+g`` and its first 10 hex digits): setuptools-scm's own scheme leaves it
out of an exact version, and an archive of an untagged repository is exact (``0.0``, git writes no distance
into an archive). An archive knows its commit from ``.git_archival.txt``, which ``git archive`` fills in
(``export-subst`` in ``.gitattributes``): :func:`archival` reads it for the build's record (``_build.json``).
A tree with neither git nor a filled-in ``.git_archival.txt`` (a copy) builds as ``FALLBACK_VERSION``.

Stdlib only: ``setup.py`` loads this file by its path; setuptools-scm is imported only where a version is made.
"""
from __future__ import annotations

import os

FALLBACK_VERSION = "1.0.0"  # the base of an untagged clone's versions, and a tree without any git state
ARCHIVAL_FILE = ".git_archival.txt"
UNKNOWN = "0+unknown"  # bart.__version__ where no version can be known (no build record, no git, not installed)


def local_scheme(version) -> str:
    """setuptools-scm's local part: ``+g<commit>`` always, ``.d<date>`` when the tree differs from the commit."""
    node = (version.node or "").removeprefix("g")[:10]
    if not node:
        return version.format_choice("", "+d{time:%Y%m%d}")
    return version.format_choice(f"+g{node}", f"+g{node}" + ".d{time:%Y%m%d}")


SCM_CONFIG = {"local_scheme": local_scheme, "fallback_version": FALLBACK_VERSION}


def archival(folder: str) -> dict | None:
    """The commit (``node``) and its date that ``git archive`` wrote into ``folder``'s ``.git_archival.txt``;
    None where there is no such file or git did not fill it in (a copy of the checkout, not an archive)."""
    path = os.path.join(folder, ARCHIVAL_FILE)
    if not os.path.isfile(path):
        return None
    with open(path, encoding="utf-8") as f:
        values = dict(line.split(":", 1) for line in f.read().splitlines() if ":" in line)
    values = {key.strip(): value.strip() for key, value in values.items()}
    node = values.get("node", "")
    if not node or "$Format" in node:
        return None
    return {"commit": node, "date": values.get("node-date") or None, "describe": values.get("describe-name") or None}


def checkout_version(root: str) -> str | None:
    """The version a build of the checkout at ``root`` would get now (setuptools-scm with ``SCM_CONFIG``); None
    where ``root`` is no checkout (no git, no filled-in archival file) or setuptools-scm is not installed."""
    if not os.path.isfile(os.path.join(root, "pyproject.toml")) or \
            not (os.path.exists(os.path.join(root, ".git")) or archival(root)):
        return None  # (setuptools-scm would answer FALLBACK_VERSION, which names no commit)
    try:
        from setuptools_scm import get_version
    except ImportError:
        return None
    try:
        return get_version(root=root, **SCM_CONFIG)
    except (LookupError, OSError, ValueError):
        return None


__all__ = ["SCM_CONFIG", "FALLBACK_VERSION", "UNKNOWN", "local_scheme", "archival", "checkout_version"]

"""Lines of a text file as Python's text mode reads them (universal newlines): a line ends in ``\\n``,
``\\r\\n`` or a lone ``\\r`` (classic Mac OS), so a file saved with old-Mac line ends is read line by
line instead of as one long line. Lines are bytes, so a caller can name the line that is not UTF-8.
A UTF-8 byte-order mark at the start of a file (Windows editors write one) is not text: it is removed,
and said once per file, instead of reaching the tokenizer as a character of the first line."""
from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterator

_LONE_CR = re.compile(rb"\r(?!\n)")
BOM = b"\xef\xbb\xbf"
_SAID_BOM: set = set()  # files whose byte-order mark was reported in this process


def _without_bom(path: str, first: bytes) -> bytes:
    if not first.startswith(BOM):
        return first
    where = os.path.abspath(path)
    if where not in _SAID_BOM:
        _SAID_BOM.add(where)
        print(f"note: {path} starts with a UTF-8 byte-order mark: removed (it is not part of the text)",
              file=sys.stderr, flush=True)
    return first[len(BOM):]


def iter_lines(path: str) -> Iterator[bytes]:
    """Each line of ``path`` without its line end, in order (an unterminated last line included)."""
    with open(path, "rb") as f:
        for number, raw in enumerate(f):  # split at b"\n": a CRLF pair always stays in one piece
            if number == 0:
                raw = _without_bom(path, raw)
            if raw.endswith(b"\r\n"):
                body = raw[:-2]
            elif raw.endswith(b"\n"):
                body = raw[:-1]
            else:  # the end of the file (a CR-only file is one piece)
                body = raw[:-1] if raw.endswith(b"\r") else raw
            if b"\r" in body:
                yield from body.split(b"\r")
            else:
                yield body


def line_ends(path: str) -> set[str]:
    """The kinds of line end ``path`` uses: a subset of {"\\n", "\\r\\n", "\\r"} (reads the whole file)."""
    with open(path, "rb") as f:
        data = f.read()
    kinds = set()
    crlf = data.count(b"\r\n")
    if crlf:
        kinds.add("\r\n")
    if data.count(b"\n") > crlf:
        kinds.add("\n")
    if _LONE_CR.search(data):
        kinds.add("\r")
    return kinds


def split_lines(text: str) -> list[str]:
    """``text``'s lines as :func:`iter_lines` reads a file: only ``\\n``, ``\\r\\n`` and a lone ``\\r`` end a line
    (``str.splitlines`` also splits at \\x0b, \\x0c, \\x1c-\\x1e, \\x85, \\u2028 and \\u2029, which may sit inside an
    article and would shift every later source against its target); a final line end adds no empty line."""
    lines = text.removeprefix("\ufeff").replace("\r\n", "\n").replace("\r", "\n").split("\n")
    return lines[:-1] if lines and lines[-1] == "" else lines

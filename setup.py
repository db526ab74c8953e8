"""The build hook of the package (everything else is pyproject.toml's): the version, made from git by setuptools-scm
(``bart/records/versioning.py``'s ``SCM_CONFIG``: the commit always in it), and ``bart/_build.json`` in a built copy
(a wheel, ``pip install .``): that version and the commit it was built from, which a run's git_log.json records
(``bart.records.provenance.package_origin``) and ``bart.__version__`` reads. The commit is the source folder's git
state at build time; a ``git archive`` export's is the one git wrote into its ``.git_archival.txt``; an sdist
carries the file it was made with, for a build without git. An editable install gets none: its runs read the
checkout's git state as it is then. The remote's URL is recorded without user info or query (a CI checkout's
token): bart/records/redact.py. Both modules are loaded by their paths (importing the package would need its
dependencies)."""
import datetime
import importlib.util
import json
import os
import subprocess

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.command.sdist import sdist

HERE = os.path.dirname(os.path.abspath(__file__))
BUILD_FILE = os.path.join("bart", "_build.json")


def _load(name):
    """bart/records/NAME.py, from the files beside this one."""
    spec = importlib.util.spec_from_file_location(f"_bart_build_{name}", os.path.join(HERE, "bart", "records", f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


versioning = _load("versioning")


def _clean_url(url):
    return _load("redact").clean_url(url)


def _git(*args):
    try:
        out = subprocess.run(["git", "-C", HERE, *args], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.rstrip("\n") if out.returncode == 0 else None


def build_record(version):
    """The source's git state (commit, branch, dirty and the changed paths) where HERE is the top of a git
    work tree, else the record an sdist carried, else the commit a ``git archive`` export names, else commit None."""
    top = _git("rev-parse", "--show-toplevel")
    if top and os.path.realpath(top) == os.path.realpath(HERE):  # not a folder inside some other repository
        changed = [line[3:] for line in (_git("status", "--porcelain") or "").splitlines() if line.strip()]
        git = {"commit": _git("rev-parse", "HEAD"), "branch": _git("rev-parse", "--abbrev-ref", "HEAD"),
               "dirty": bool(changed), "changed": changed[:50],
               "remote": _clean_url(_git("remote", "get-url", "origin"))}
    elif os.path.isfile(os.path.join(HERE, BUILD_FILE)):
        with open(os.path.join(HERE, BUILD_FILE), encoding="utf-8") as f:
            git = json.load(f)["git"]
        if git.get("remote"):  # an sdist made before remotes were cleaned
            git["remote"] = _clean_url(git["remote"])
    elif archived := versioning.archival(HERE):
        git = {"commit": archived["commit"], "branch": None, "dirty": None, "changed": [], "date": archived["date"],
               "source": "git archive"}
    else:
        git = {"commit": None, "branch": None, "dirty": None, "changed": []}
    return {"version": version, "built": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "git": git}


def _write(folder, version):
    path = os.path.join(folder, BUILD_FILE)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(build_record(version), f, indent=2)
        f.write("\n")


class BuildPy(build_py):
    def run(self):
        super().run()
        if not getattr(self, "editable_mode", False):
            _write(self.build_lib, self.distribution.get_version())

    def get_outputs(self, include_bytecode=True):
        outputs = super().get_outputs(include_bytecode)
        return outputs if getattr(self, "editable_mode", False) else [*outputs, os.path.join(self.build_lib, BUILD_FILE)]


class Sdist(sdist):
    def make_release_tree(self, base_dir, files):
        super().make_release_tree(base_dir, files)
        _write(base_dir, self.distribution.get_version())


setup(use_scm_version=versioning.SCM_CONFIG, cmdclass={"build_py": BuildPy, "sdist": Sdist})

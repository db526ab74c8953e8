"""The project as a package (pyproject.toml): installed into fresh virtual environments (layered on this
Python's packages, nothing downloaded), ``from bart.modeling import ...`` works from any folder, the
console scripts are the entry points; and the ruff configuration CI runs passes."""
import os
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
IMPORTS = ("from bart.modeling import BartForConditionalGeneration; from bart.configuration import BartConfig; "
           "import bart, bart.utils, bart.cli.pretrain; print(bart.__file__); print(bart.cli.pretrain.__file__)")


def _layered_venv(path):
    """A virtual environment whose own packages come first, then this Python's (a .pth file)."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True, timeout=120)
    python = path / "bin" / "python"
    purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    with open(os.path.join(purelib, "_outer.pth"), "w") as f:
        f.write("\n".join(p for p in sys.path if p.endswith(("site-packages", "dist-packages"))) + "\n")
    return python


def _install(python, *args):
    out = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet", "--no-deps",
                          "--no-build-isolation", "--no-index", *args], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]


def _run(command, cwd):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def _builds_wheels_offline() -> bool:
    """setuptools >= 70.1 builds wheels by itself (older ones need the wheel package)."""
    import importlib.util

    import setuptools

    version = tuple(int(p) for p in setuptools.__version__.split(".")[:2] if p.isdigit())
    return version >= (70, 1) or importlib.util.find_spec("wheel") is not None


@pytest.mark.slow
@pytest.mark.skipif(not _builds_wheels_offline(), reason="this Python's setuptools < 70.1 without wheel cannot build "
                                                         "without a download (pip --no-build-isolation)")
def test_installed_package_imports_anywhere_and_its_console_scripts_are_the_entry_points(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    # pip install -e . : the checkout itself
    editable = _layered_venv(tmp_path / "editable")
    _install(editable, "-e", ROOT)
    out = _run([str(editable), "-c", IMPORTS], elsewhere)
    assert out.returncode == 0, out.stderr
    assert [os.path.dirname(p) for p in out.stdout.split()] == [os.path.join(ROOT, "bart"), os.path.join(ROOT, "bart", "cli")]
    scripts = editable.parent
    # each console script runs its entry script: bart-pretrain here, bart-finetune just below (its answer is
    # `python finetune.py`'s), bart-run-eval in the installed copy, bart-export at the end
    helped = _run([str(scripts / "bart-pretrain"), "--help"], elsewhere)
    assert helped.returncode == 0 and helped.stdout.startswith("usage: pretrain.py"), helped.stderr
    # a user's mistake: what `python finetune.py` answers, in one line and exit 2
    ours = _run([str(scripts / "bart-finetune"), "--config_path", "missing.json"], elsewhere)
    theirs = _run([str(editable), os.path.join(ROOT, "finetune.py"), "--config_path", "missing.json"], elsewhere)
    assert (ours.returncode, ours.stdout, ours.stderr) == (theirs.returncode, theirs.stdout, theirs.stderr)
    assert ours.returncode == 2 and len(ours.stderr.strip().splitlines()) == 1, ours.stderr
    assert "usage" in _run([str(scripts / "bart-export"), "--help"], elsewhere).stdout
    # pip install . : a copy of the tracked files, installed into site-packages
    source = tmp_path / "source"
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, text=True).stdout.split("\0")
    for name in filter(None, tracked):
        if os.path.isfile(os.path.join(ROOT, name)):
            os.makedirs(source / os.path.dirname(name), exist_ok=True)
            shutil.copy2(os.path.join(ROOT, name), source / name)
    for name in ("pyproject.toml",):  # this checkout's, committed or not
        shutil.copy2(os.path.join(ROOT, name), source / name)
    installed = _layered_venv(tmp_path / "installed")
    _install(installed, str(source))
    out = _run([str(installed), "-c", IMPORTS], elsewhere)
    assert out.returncode == 0, out.stderr
    assert all(str(tmp_path / "installed") in p and "site-packages" in p for p in out.stdout.split())
    # one import name: the installed copy claims `bart` alone at the top of site-packages
    site = os.path.dirname(os.path.dirname(out.stdout.split()[0]))
    claimed = {name for name in os.listdir(site) if not name.endswith((".dist-info", ".pth")) and name != "__pycache__"}
    assert claimed == {"bart"}, claimed
    top_level = [os.path.join(site, d, "top_level.txt") for d in os.listdir(site) if d.endswith(".dist-info")]
    assert all(open(f).read().split() == ["bart"] for f in top_level if os.path.exists(f))
    for name in ("utils", "pretrain", "finetune", "run_eval"):
        assert _run([str(installed), "-c", f"import {name}"], elsewhere).returncode != 0, name
    helped = _run([str(installed.parent / "bart-run-eval"), "--help"], elsewhere)
    assert helped.returncode == 0 and helped.stdout.startswith("usage: run_eval.py"), helped.stderr


def test_ruff_passes_with_the_projects_configuration():
    ruff = shutil.which("ruff") or os.path.join(os.path.dirname(sys.executable), "ruff")
    if not os.path.isfile(ruff):
        pytest.skip("ruff (requirements.txt) is not installed")
    out = subprocess.run([ruff, "check", "--no-cache", "."], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr

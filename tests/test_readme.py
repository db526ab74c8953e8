"""The README's commands and flags exist and do what it says (no GPU, no data needed)."""
import os
import re
import subprocess
import sys

import pytest

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


def test_the_export_example_runs_as_printed(tmp_path, small_tokenizer_dir):
    """The "Exporting to Hugging Face" block, each line run as printed in a folder laid out as it assumes
    (a fine-tuning run's results/finetune, the tokenizer in data/tokenizer). Old code: exit 2 on
    final_step.ckpt, asking for --config, which the README does not print."""
    import json
    import shutil

    from tests.helpers.corpus import micro_config
    from tests.helpers.entry import run_entry
    from tests.helpers.summaries import write_summarization_data

    block = README.split("### Exporting to Hugging Face")[1].split("```bash\n")[1].split("```")[0]
    commands = [line for line in block.splitlines() if line.strip()]
    assert commands and commands[0].startswith("python -m bart.export results/finetune/final_step.ckpt")
    shutil.copytree(small_tokenizer_dir, tmp_path / "data" / "tokenizer")
    (tmp_path / "config.json").write_text(json.dumps(micro_config()))
    data = write_summarization_data(str(tmp_path / "data" / "cnn_dm"), sizes=(("train", 8), ("val", 2), ("test", 2)))
    assert run_entry("finetune.py", ["--config_path", str(tmp_path / "config.json"), "--data_dir", data,
                                     "--tokenizer", str(tmp_path / "data" / "tokenizer"), "--from_scratch",
                                     "--max_steps", "1", "--train_batch_size", "2", "--n_val", "0", "--num_workers",
                                     "0", "--max_source_length", "32", "--max_target_length", "8", "--no_tensorboard",
                                     "--output_dir", str(tmp_path / "results" / "finetune")]) == 0
    env = dict(os.environ, PYTHONPATH=ROOT, OMP_NUM_THREADS="1")
    for command in commands:
        argv = [sys.executable if word == "python" else word for word in _shell_words(command)]
        done = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, (command, done.stderr[-3000:])
    assert (tmp_path / "results" / "bart_hf" / "model.safetensors").is_file()


def _shell_words(command: str) -> list[str]:
    import shlex
    return shlex.split(command)


@pytest.mark.slow
def test_the_hugging_face_hand_off_runs_as_printed(tmp_path, tokenizer_dir, tokenizer):
    """Quick Start step 8, typed as printed (in a folder holding the results it names) under the installed
    transformers (CI: 5.x, and 4.57 in its own step): the export, then transformers' AutoModelForSeq2SeqLM +
    generate print the summaries this project generates ("Exporting to Hugging Face": the test above)."""
    import shutil
    import textwrap

    from bart.modeling import BartForConditionalGeneration
    from tests.test_export import _checkpoint

    quick_start = README.split("8. Hand the model to Hugging Face tools")[1].split("\n## ")[0]
    blocks = [("bash", textwrap.dedent(_code_blocks_in(quick_start, "bash")[0])),
              ("python", textwrap.dedent(_code_blocks_in(quick_start, "python")[0]))]
    assert all("AutoModelForSeq2SeqLM" in text for kind, text in blocks if "transformers" in text)
    (tmp_path / "results" / "cnn_dm").mkdir(parents=True)  # a run's folder: its checkpoint, its tokenizer beside
    _checkpoint(tmp_path / "results" / "cnn_dm" / "final_step.ckpt", False, 3)
    for name in os.listdir(tokenizer_dir):
        shutil.copy(os.path.join(tokenizer_dir, name), tmp_path / "results" / "cnn_dm" / name)
    bin_dir = tmp_path / "bin"  # `python` is this interpreter
    bin_dir.mkdir()
    os.symlink(sys.executable, bin_dir / "python")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "TRANSFORMERS_")) and k != "TOKENIZER"}
    env.update(PATH=f"{bin_dir}{os.pathsep}{env['PATH']}", PYTHONPATH=ROOT, HF_HUB_OFFLINE="1",
               TRANSFORMERS_VERBOSITY="error")
    printed = []
    for kind, text in blocks:
        command = ["bash", "-c", text] if kind == "bash" else [sys.executable, "-c", text]
        out = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
        assert out.returncode == 0, (text, out.stderr[-3000:])
        printed += [line for line in out.stdout.splitlines() if line.startswith("['")]
    assert sorted(os.listdir(tmp_path / "results")) == ["cnn_dm", "cnn_dm_hf"]
    assert {"vocab.json", "merges.txt", "model.safetensors", "generation_config.json"} <= set(
        os.listdir(tmp_path / "results" / "cnn_dm_hf"))
    # what the project generates with the model's own settings (3 beams, lengths, n-gram blocking)
    model = BartForConditionalGeneration.from_pretrained(str(tmp_path / "results" / "cnn_dm" / "final_step.ckpt"))
    expected = []
    for text in ("Some long text.",):
        batch = tokenizer([text], return_tensors="pt")
        ids = model.eval().generate(batch["input_ids"], attention_mask=batch["attention_mask"])
        expected.append(repr(tokenizer.batch_decode(ids, skip_special_tokens=True)))
    assert printed == expected and all(len(eval(line)[0]) > 5 for line in printed)


def _code_blocks_in(text, language):
    return re.findall(rf"```{language}\n(.*?)```", text, flags=re.S)
